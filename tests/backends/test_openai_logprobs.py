"""One OpenAI choice as a Generation: the field map, both response shapes, and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.backends.openai_logprobs import (
    MalformedResponse,
    answer_length,
    generation_from_choice,
)


def _chat(content, entries, finish="stop"):
    return {"index": 0, "message": {"role": "assistant", "content": content},
            "finish_reason": finish, "logprobs": {"content": entries}}


def _entry(token, logprob, *top):
    return {"token": token, "logprob": logprob, "bytes": [1],
            "top_logprobs": [{"token": t, "logprob": v} for t, v in top]}


def test_generation_from_chat_choice_by_hand():
    choice = _chat(" Paris", [_entry(" Par", -0.5, (" Par", -0.5), (" Lyon", -1.5)),
                               _entry("is", -0.25, ("is", -0.25), ("et", -2.0), ("X", -9.0)),
                               _entry("\n", -0.1, ("\n", -0.1), (".", -3.0)),
                               _entry("<|im_end|>", 0.0)])
    gen = generation_from_choice(choice)
    assert gen.text == "Paris" and gen.finish_reason == "stop"
    assert gen.tokens == [" Par", "is"]  # the newline and end of turn carry no answer text
    assert gen.token_logprobs.dtype == np.float32
    np.testing.assert_array_equal(gen.token_logprobs, [-0.5, -0.25])
    assert gen.top_tokens == [[" Par", " Lyon"], ["is", "et"]]  # cut to the fewest listed
    np.testing.assert_array_equal(gen.top_logprobs, [[-0.5, -1.5], [-0.25, -2.0]])
    assert gen.token_entropies is None and gen.token_ids == []


def test_generation_from_legacy_choice_sorts_alternatives():
    choice = {"index": 0, "text": " 4", "finish_reason": None, "logprobs": {
        "tokens": [" 4", "\n"], "token_logprobs": [-0.5, -1.0], "text_offset": [0, 2],
        "top_logprobs": [{" 5": -3.0, " 4": -0.5, " four": -3.0}, {"\n": -1.0}]}}
    gen = generation_from_choice(choice)
    assert gen.text == "4" and gen.finish_reason == "stop" and gen.tokens == [" 4"]
    assert gen.top_tokens == [[" 4", " 5", " four"]]  # equal values keep their order
    np.testing.assert_array_equal(gen.top_logprobs, [[-0.5, -3.0, -3.0]])


def test_generation_from_choice_without_logprobs():
    plain = {"message": {"content": None}, "finish_reason": "length"}
    gen = generation_from_choice(plain)
    assert gen.text == "" and gen.finish_reason == "length" and gen.token_logprobs is None
    with pytest.raises(MalformedResponse, match="asked for") as err:
        generation_from_choice(plain, logprobs=True)
    assert err.value.field == "logprobs"
    ignored = generation_from_choice(_chat("Hi", [_entry("Hi", -1.0)]), logprobs=False)
    assert ignored.text == "Hi" and ignored.tokens == [] and ignored.token_logprobs is None


def test_generation_from_choice_empty_answer_alternatives():
    choice = _chat("", [_entry("<|im_end|>", 0.0, ("<|im_end|>", 0.0))])
    asked = generation_from_choice(choice, top_k_alternatives=5)
    assert asked.tokens == [] and asked.top_logprobs.shape == (0, 0) and asked.top_tokens == []
    assert generation_from_choice(choice).top_logprobs is None


@pytest.mark.parametrize(("choice", "field", "match"), [
    ("text", "", "no message"),
    ({"message": {"content": 3}}, "message.content", "not text"),
    ({"text": ["a"]}, "text", "not text"),
    (_chat("a", [_entry("a", -1.0), {"token": "b"}]), "logprobs.content[1]", "malformed"),
    (_chat("a", [_entry("a", math.inf)]), "logprobs", "not finite"),
    ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [None]}},
     "logprobs.token_logprobs[0]", "echo"),
    ({"text": "a", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0]}},
     "logprobs.token_logprobs", "one length"),
    ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [-1.0],
                                "top_logprobs": [["a"]]}},
     "logprobs.top_logprobs[0]", "malformed"),
    ({"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": ["x"]}},
     "logprobs.token_logprobs[0]", "malformed"),
])
def test_generation_from_choice_refuses_with_the_field(choice, field, match):
    with pytest.raises(MalformedResponse, match=match) as err:
        generation_from_choice(choice)
    assert err.value.field == field and isinstance(err.value, ValueError)


def test_generation_from_choice_api_fixes_the_shape():
    both = {"message": {"content": "chat"}, "text": "legacy"}
    assert generation_from_choice(both).text == "chat"
    assert generation_from_choice(both, api="completions").text == "legacy"
    with pytest.raises(MalformedResponse, match="no message"):
        generation_from_choice({"text": "legacy"}, api="chat")


def test_answer_length_keeps_tokens_that_cover_the_text():
    assert answer_length(["Par", "is", "\n"], "Paris") == 2
    assert answer_length(["Par", "is", "\n"], "Paris\n") == 3
    assert answer_length([], "Paris") == 0
