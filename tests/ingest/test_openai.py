"""OpenAI-compatible logs: chat and legacy responses, Batch API output, proxy pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from confide.core.errors import InvalidInputError
from confide.ingest import read_generations

DATA = Path(__file__).parent / "data"
LN2 = math.log(2)
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _h(*ps):
    """Hand formula of the entropy lower bound: listed p's, the smallest bounds the rest."""
    return -sum(p * math.log(p) for p in ps) + (1 - sum(ps)) * -math.log(min(ps))


def test_chat_example_with_two_choices_and_a_proxy_pair():
    first, second = read_generations(DATA / "openai_chat.jsonl")
    assert first.item.id == "chatcmpl-A1" and first.item.prompt == "" and first.line == 1
    assert first.item.metadata == {"model": "gpt-4o-mini-2024-07-18"}
    g = first.greedy
    assert (g.text, g.tokens, g.finish_reason) == ("Paris", ["Paris"], "stop")
    np.testing.assert_allclose(g.token_logprobs, [-LN2], rtol=1e-6)
    assert g.top_tokens == [["Paris", "Lyon", "Rome"]]
    np.testing.assert_allclose(g.top_logprobs, [[-LN2, -2 * LN2, -3 * LN2]], rtol=1e-6)
    np.testing.assert_allclose(g.token_entropies, [1.75 * LN2], rtol=1e-6)  # 1/2, 1/4, 1/8
    assert [s.text for s in first.samples] == ["Lyon"]  # n = 2: choice 1 is a sample
    np.testing.assert_allclose(first.samples[0].token_logprobs, [-2 * LN2], rtol=1e-6)
    assert first.capabilities == {"token_logprobs", "top_logprobs", "token_entropies",
                                  "samples"}
    assert "lower bounds" in first.approximate["token_entropies"]
    assert first.label is None

    assert second.item.id == "chatcmpl-B2" and second.line == 2
    assert second.item.question == "Capital of Italy?"
    assert second.item.prompt[0] == {"role": "system", "content": "Answer briefly."}
    assert second.item.references == ["Rome"] and second.label == 1.0
    g = second.greedy
    assert g.tokens == ["Rome", " is"]  # <|eot_id|> past the answer is left out
    np.testing.assert_allclose(g.token_logprobs, [math.log(.9), math.log(.8)], rtol=1e-6)
    np.testing.assert_allclose(g.token_entropies, [_h(.9, .05), _h(.8, .1)], rtol=1e-5)
    assert not second.samples and "samples" not in second.capabilities


def test_batch_output_lines():
    one, two = read_generations(DATA / "openai_batch.jsonl")
    assert (one.item.id, two.item.id) == ("q-1", "q-2")
    np.testing.assert_allclose(one.greedy.token_logprobs, [math.log(.95)], rtol=1e-6)
    # a single alternative, the chosen token: the bound is -log p
    np.testing.assert_allclose(one.greedy.token_entropies, [-math.log(.95)], rtol=1e-5)
    assert two.greedy.text == "Madrid" and two.capabilities == frozenset()
    assert two.greedy.token_logprobs is None and two.approximate == {}


def test_legacy_completions_array():
    one, two = read_generations(DATA / "openai_completions.json")
    assert (one.line, two.line) == (2, 22)  # where each element starts
    assert one.greedy.tokens == [" Paris"] and one.greedy.text == "Paris"  # "\n" cut
    np.testing.assert_allclose(one.greedy.token_entropies, [_h(.8, .2)], rtol=1e-5)
    # " Rome" may be listed only because the API adds the sampled token: the
    # alternatives are as listed (as the backend reads them), but the bound sets it apart
    assert two.greedy.top_tokens == [[" Paris", " Rome"]]
    assert two.greedy.finish_reason == "length"
    expected = -.8 * math.log(.8) - .1 * math.log(.1) + .1 * -math.log(.8)
    np.testing.assert_allclose(two.greedy.token_entropies, [expected], rtol=1e-5)


def _chat(content, entries, **choice):
    return {"object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content},
         "logprobs": {"content": entries}, "finish_reason": "stop", **choice}]}


@pytest.mark.parametrize(("record", "field", "message"), [
    ({"custom_id": "x", "response": None, "error": {"message": "quota"}}, "error",
     "the request failed: quota"),
    ({"custom_id": "x", "response": {"status_code": 500, "body": {"error": {
        "message": "boom"}}}}, "response.status_code", "HTTP 500: boom"),
    ({"object": "chat.completion.chunk", "choices": [{"delta": {"content": "a"}}]},
     "object", "a streamed chunk"),
    (_chat("a", [{"token": "a", "logprob": 0.25}]), "choices[0].logprobs.content[0].logprob",
     "finite number <= 0, not 0.25"),
    (_chat("a", [{"token": "a", "logprob": "NaN"}]), "choices[0].logprobs.content[0].logprob",
     "must be a number, not str"),
    (_chat("a", [{"token": "a", "logprob": -1, "top_logprobs": [{"token": "a"}]}]),
     "choices[0].logprobs.content[0].top_logprobs[0].logprob", "must be a number, not null"),
    ({"object": "text_completion", "choices": [{"text": "a", "logprobs": {
        "tokens": ["Q", "a"], "token_logprobs": [None, -1.0]}}]},
     "choices[0].logprobs.token_logprobs[0]", "echo=true"),
    ({"object": "text_completion", "choices": [{"text": "a", "logprobs": {
        "tokens": ["a"], "token_logprobs": [-1.0, -2.0]}}]},
     "choices[0].logprobs.token_logprobs", "not lists of one length"),
    ({"object": "chat.completion", "choices": []}, "choices", "no choices"),
    ({"request": {"prompt": [1, 2, 3]}, "response": _chat("a", [])}, "request.prompt",
     "a list of prompts"),
])
def test_bad_record_names_file_line_and_field(tmp_path, record, field, message):
    path = tmp_path / "log.jsonl"
    good = _chat("ok", [])
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        list(read_generations(path, "openai"))
    assert str(info.value).startswith(f"{path}:2: {field}: ")
    assert message in str(info.value)
    stream = read_generations(path, "openai", on_bad_record="skip")
    assert len(list(stream)) == 1 and len(stream.skipped) == 1
    assert stream.skipped[0][0] == f"{path}:2"


tokens = st.text(min_size=1, max_size=4)
# at most four tokens of at most e^-1.7 each: a step's probabilities sum below 1
logprobs = st.floats(min_value=-30.0, max_value=-1.7, allow_nan=False)


@st.composite
def chat_choices(draw):
    steps = draw(st.lists(st.tuples(tokens, logprobs, st.lists(st.tuples(tokens, logprobs),
                                                               min_size=1, max_size=3)),
                          max_size=6))
    # an alternative with the chosen token's text is that token: the same log-probability
    steps = [(t, lp, [(a, lp if a == t else v) for a, v in top]) for t, lp, top in steps]
    entries = [{"token": t, "logprob": lp,  # the API lists alternatives best first
                "top_logprobs": [{"token": a, "logprob": v}
                                 for a, v in sorted(top, key=lambda av: -av[1])]}
               for t, lp, top in steps]
    return "".join(t for t, _, _ in steps) or "x", entries, steps


@FAST
@given(st.lists(chat_choices(), min_size=1, max_size=3))
def test_generated_chat_responses_round_trip_their_log_probs(tmp_path, choices):
    response = {"id": "r", "object": "chat.completion", "choices": [
        {"index": i, "message": {"role": "assistant", "content": text},
         "logprobs": {"content": entries}, "finish_reason": "stop"}
        for i, (text, entries, _) in enumerate(choices)]}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(response) + "\n", encoding="utf-8")
    (record,) = list(read_generations(path))
    assert len(record.samples) == len(choices) - 1
    for gen, (_, _, steps) in zip([record.greedy, *record.samples], choices):
        if not steps:  # "x" with no tokens: no statistics
            assert gen.token_logprobs is None
            continue
        assert gen.tokens == [t for t, _, _ in steps]
        np.testing.assert_array_equal(gen.token_logprobs,
                                      np.asarray([lp for _, lp, _ in steps], np.float32))
        assert gen.top_logprobs.shape[0] == len(steps)
        assert np.all(np.diff(gen.top_logprobs, axis=1) <= 0)  # best first
        assert np.all(np.isfinite(gen.token_entropies)) and np.all(gen.token_entropies >= 0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["token", "logprob", "top_logprobs", "content", "tokens",
                         "token_logprobs", "x"]), inner, max_size=3),
    max_leaves=10)


@FAST
@given(json_values, json_values, json_values, json_values)
def test_arbitrary_fields_parse_or_raise_the_input_error(tmp_path, content, logprobs_, finish,
                                                         request):
    record = {"request": request, "response": {"object": "chat.completion", "choices": [
        {"message": {"content": content}, "logprobs": logprobs_, "finish_reason": finish}]}}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    try:
        for r in read_generations(path, "openai"):
            assert isinstance(r.greedy.text, str)
            if r.greedy.token_logprobs is not None:
                assert np.all(r.greedy.token_logprobs <= 0)
    except InvalidInputError as exc:
        assert str(exc).startswith(f"{path}:1: ")
