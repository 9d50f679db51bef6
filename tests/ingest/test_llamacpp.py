"""llama.cpp server /completion replies (three shapes) and Ollama replies."""

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
EXACT = {"token_logprobs", "top_logprobs", "token_entropies"}


def test_newer_server_replies():
    exact, post = read_generations(DATA / "llamacpp_completion.jsonl")
    g = exact.greedy
    assert exact.item.id == "llamacpp_completion-1"  # id_slot is not an id
    assert exact.item.prompt == "Q: Capital of France?\nA:"
    assert exact.item.metadata == {"model": "smollm2-135m-instruct-q8_0.gguf"}
    # the end-of-sequence token (empty piece) is past the answer
    assert (g.text, g.tokens, g.token_ids, g.finish_reason) == ("Paris", [" Paris"], [3681],
                                                                "stop")
    np.testing.assert_allclose(g.token_logprobs, [-LN2], rtol=1e-6)
    np.testing.assert_allclose(g.token_entropies, [1.5 * LN2], rtol=1e-6)
    assert exact.capabilities == EXACT and exact.approximate.keys() == {"token_entropies"}

    g = post.greedy  # post_sampling_probs: kept, marked, no entropy bounds
    np.testing.assert_allclose(g.token_logprobs, [math.log(.6)], rtol=1e-6)
    np.testing.assert_allclose(g.top_logprobs, [[math.log(.6), math.log(.4)]], rtol=1e-6)
    assert g.token_entropies is None and g.finish_reason == "length"
    assert post.capabilities == {"token_logprobs", "top_logprobs"}
    assert "after llama.cpp's samplers" in post.approximate["token_logprobs"]


def test_older_server_replies():
    greedy, sampled = read_generations(DATA / "llamacpp_old.jsonl")
    # temperature 0: the sampler's candidates are the model's softmax, so exact
    assert greedy.capabilities == EXACT
    np.testing.assert_allclose(greedy.greedy.token_logprobs, [-LN2], rtol=1e-6)
    np.testing.assert_allclose(greedy.greedy.token_entropies, [1.5 * LN2], rtol=1e-6)
    assert greedy.greedy.finish_reason == "stop"
    # temperature 0.8: probabilities after the samplers
    assert sampled.capabilities == {"token_logprobs", "top_logprobs"}
    np.testing.assert_allclose(sampled.greedy.token_logprobs, [math.log(.4)], rtol=1e-6)
    assert sampled.greedy.top_tokens == [[" Paris", " Lyon"]]
    assert sampled.greedy.finish_reason == "length" and "token_logprobs" in sampled.approximate


def test_older_shape_chosen_token_not_listed_gives_no_token_logprobs(tmp_path):
    reply = {"content": " Nice", "stop": True, "generation_settings": {"temperature": 0},
             "completion_probabilities": [{"content": " Nice", "probs": [
                 {"tok_str": " Paris", "prob": 0.7}, {"tok_str": " Lyon", "prob": 0.2}]}]}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(reply) + "\n", encoding="utf-8")
    (record,) = list(read_generations(path))
    assert record.greedy.token_logprobs is None
    assert record.capabilities == {"top_logprobs", "token_entropies"}


def test_ollama_replies():
    plain, chat = read_generations(DATA / "ollama.jsonl")
    assert plain.greedy.text == "Paris" and plain.capabilities == frozenset()
    assert plain.item.metadata == {"model": "llama3.2"}
    assert chat.item.question == "Capital of Italy?"
    np.testing.assert_allclose(chat.greedy.token_logprobs, [math.log(.9)], rtol=1e-6)
    expected = -.9 * math.log(.9) - .05 * math.log(.05) + .05 * math.log(20)
    np.testing.assert_allclose(chat.greedy.token_entropies, [expected], rtol=1e-5)
    assert chat.capabilities == EXACT


@pytest.mark.parametrize(("record", "field", "message"), [
    ({"model": "m", "response": "Pa", "done": False}, "done", "a streamed chunk"),
    ({"content": "a", "stop": True, "completion_probabilities": [
        {"id": 1, "token": "a", "logprob": 0.1}]}, "completion_probabilities[0].logprob",
     "finite number <= 0"),
    ({"content": "a", "stop": True, "completion_probabilities": [
        {"id": 1, "token": "a", "prob": 1.5}]}, "completion_probabilities[0].prob",
     "must be in [0, 1]"),
    ({"content": "a", "stop": True, "completion_probabilities": [
        {"id": 1, "token": "a", "prob": 0.0}]}, "completion_probabilities[0].prob",
     "probability 0"),
    ({"content": "a", "stop": True, "completion_probabilities": [
        {"content": "a", "probs": [{"tok_str": "a", "prob": "high"}]}]},
     "completion_probabilities[0].probs[0].prob", "must be a number"),
    ({"content": "a", "stop": True, "completion_probabilities": [{"token": "a"}]},
     "completion_probabilities[0]", "needs 'logprob'"),
    ({"request": {"prompt": 3}, "response": {"content": "a", "stop": True}},
     "request.prompt", "must be text or a list of chat messages"),
])
def test_bad_record_names_file_line_and_field(tmp_path, record, field, message):
    path = tmp_path / "log.jsonl"
    good = {"content": "ok", "stop": True}
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        list(read_generations(path, "llamacpp"))
    assert str(info.value).startswith(f"{path}:2: {field}: ") and message in str(info.value)
    stream = read_generations(path, "llamacpp", on_bad_record="skip")
    assert [r.greedy.text for r in stream] == ["ok"] and len(stream.skipped) == 1


# A model's statistics: at most four tokens of at most e^-1.7 each (they sum below 1); the
# alternatives are "<j>", never the chosen token.
steps = st.lists(st.tuples(st.text(min_size=1, max_size=3).filter(lambda t: "<" not in t),
                           st.floats(-25, -1.7),
                           st.lists(st.floats(-25, -1.7), min_size=1, max_size=3)),
                 min_size=1, max_size=6)


@FAST
@given(steps)
def test_generated_replies_round_trip_their_log_probs(tmp_path, drawn):
    probs = [{"id": i, "token": tok, "logprob": lp,
              "top_logprobs": [{"id": 100 + j, "token": f"<{j}>", "logprob": v}
                               for j, v in enumerate(top)]} for i, (tok, lp, top) in
             enumerate(drawn)]
    reply = {"content": "".join(t for t, _, _ in drawn), "stop": True, "stop_type": "eos",
             "completion_probabilities": probs}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(reply) + "\n", encoding="utf-8")
    (record,) = list(read_generations(path))
    g = record.greedy
    assert g.tokens == [t for t, _, _ in drawn] and g.token_ids == list(range(len(drawn)))
    np.testing.assert_array_equal(g.token_logprobs,
                                  np.asarray([lp for _, lp, _ in drawn], np.float32))
    k = min(len(top) for _, _, top in drawn)
    np.testing.assert_array_equal(
        g.top_logprobs, np.asarray([sorted(top, reverse=True)[:k] for _, _, top in drawn],
                                   np.float32))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=True)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["token", "logprob", "prob", "probs", "tok_str", "content",
                         "top_logprobs", "top_probs"]), inner, max_size=3),
    max_leaves=10)


@FAST
@given(json_values, json_values, st.booleans())
def test_arbitrary_fields_parse_or_raise_the_input_error(tmp_path, probs, content, ollama):
    record = ({"model": "m", "done": True, "response": "a", "logprobs": probs} if ollama else
              {"content": content, "stop": True, "completion_probabilities": probs})
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    try:
        list(read_generations(path, "llamacpp"))
    except InvalidInputError as exc:
        assert str(exc).startswith(f"{path}:1: ")
