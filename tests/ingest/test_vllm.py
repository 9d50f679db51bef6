"""vLLM offline RequestOutput dumps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from confide.backends.vllm import topk_statistics
from confide.core.errors import InvalidInputError
from confide.ingest import read_generations

DATA = Path(__file__).parent / "data"
LN2 = math.log(2)
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_example_dump():
    first, second = read_generations(DATA / "vllm_outputs.json")
    assert (first.item.id, first.line, first.item.prompt) == ("0", 2, "Q: Capital of France?\nA:")
    g = first.greedy
    # the end-of-sequence token (finish "stop", stop_reason null) is not part of the answer
    assert (g.text, g.tokens, g.token_ids) == ("Paris", [" Paris"], [3681])
    np.testing.assert_allclose(g.token_logprobs, [-LN2], rtol=1e-6)
    assert g.top_tokens == [[" Paris", " Lyon"]]
    # listed 1/2 and 1/4, unseen 1/4 of at most 1/4 each: H >= 1/2 log 2 + 1/4 log 4 + 1/4 log 4
    np.testing.assert_allclose(g.token_entropies, [1.5 * LN2], rtol=1e-6)
    (sample,) = first.samples
    # " Rome" (rank 5) is vLLM's added sampled token: not an alternative, but known mass
    assert sample.tokens == [" Rome"] and sample.top_tokens == [[" Paris", " Lyon"]]
    expected = LN2 + .05 * math.log(20) + .2 * math.log(4)
    np.testing.assert_allclose(sample.token_entropies, [expected], rtol=1e-5)
    assert first.capabilities == {"token_logprobs", "top_logprobs", "token_entropies",
                                  "samples"}

    assert second.item.id == "1" and second.line == 39
    assert second.greedy.text == "4" and second.greedy.finish_reason == "length"
    assert second.greedy.token_ids == [604] and second.capabilities == frozenset()


def test_entropy_rule_is_the_vllm_backends():
    (first, _) = read_generations(DATA / "vllm_outputs.json")
    lo, _, _ = topk_statistics([-LN2, -2 * LN2], [], 50_000)
    assert first.greedy.token_entropies[0] == pytest.approx(lo, rel=1e-6)


def _dump(outputs):
    return {"request_id": "r", "prompt": "Q", "outputs": outputs}


@pytest.mark.parametrize(("output", "field", "message"), [
    ({"text": "a", "token_ids": [1], "logprobs": [{"2": {"logprob": -1.0, "rank": 1}}]},
     "outputs[0].logprobs[0]", "the chosen token 1 is not among"),
    ({"text": "a", "token_ids": [1], "logprobs": [{"1": {"logprob": 0.5}}]},
     "outputs[0].logprobs[0]['1'].logprob", "finite number <= 0"),
    ({"text": "a", "token_ids": [1], "logprobs": [{"one": -1.0}]},
     "outputs[0].logprobs[0]", "not a token id"),
    ({"text": "a", "token_ids": [1, 2], "logprobs": [{"1": -1.0}]},
     "outputs[0].logprobs", "1 steps for 2 token ids"),
    ({"text": "a", "token_ids": [-1]}, "outputs[0].token_ids[0]", "integer >= 0"),
    ({"text": "a", "token_ids": [1], "logprobs": [{"1": {"logprob": -1.0, "rank": 0}}]},
     "outputs[0].logprobs[0]['1'].rank", "integer >= 1"),
])
def test_bad_record_names_file_line_and_field(tmp_path, output, field, message):
    path = tmp_path / "dump.jsonl"
    path.write_text(json.dumps(_dump([{"text": "ok"}])) + "\n" + json.dumps(_dump([output]))
                    + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        list(read_generations(path, "vllm"))
    assert str(info.value).startswith(f"{path}:2: {field}: ") and message in str(info.value)
    stream = read_generations(path, "vllm", on_bad_record="skip")
    assert [r.greedy.text for r in stream] == ["ok"] and len(stream.skipped) == 1


def test_entries_without_ranks_set_a_least_likely_chosen_token_apart(tmp_path):
    out = {"text": "b", "token_ids": [2], "finish_reason": "length",
           "logprobs": [{"1": math.log(.8), "2": math.log(.1)}]}
    path = tmp_path / "dump.jsonl"
    path.write_text(json.dumps(_dump([out])) + "\n", encoding="utf-8")
    (record,) = list(read_generations(path))
    g = record.greedy
    assert g.top_tokens == [["1", "2"]]  # as listed; no decoded_token: ids as text
    assert g.tokens == [] and g.token_ids == [2]
    # the bound takes "2" (the chosen, least likely) as possibly beyond the top-1
    expected = -.8 * math.log(.8) - .1 * math.log(.1) + .1 * -math.log(.8)
    np.testing.assert_allclose(g.token_entropies, [expected], rtol=1e-5)


@st.composite
def outputs(draw):
    n = draw(st.integers(0, 5))
    ids = draw(st.lists(st.integers(3, 999), min_size=n, max_size=n))  # not the top ids 1000+
    steps, values = [], []
    for tid in ids:
        k = draw(st.integers(1, 4))
        # at most five distinct tokens of at most e^-1.7 each: they sum below 1
        logs = sorted(draw(st.lists(st.floats(-20, -1.7), min_size=k, max_size=k)),
                      reverse=True)
        entry = {str(1000 + j): {"logprob": v, "rank": j + 1, "decoded_token": f"<{j}>"}
                 for j, v in enumerate(logs)}
        chosen = draw(st.floats(-20, -1.7))
        entry[str(tid)] = {"logprob": chosen, "rank": 99, "decoded_token": f"t{tid}"}
        steps.append(entry)
        values.append(chosen)
    text = "".join(f"t{t}" for t in ids)
    return {"text": text, "token_ids": ids, "logprobs": steps, "finish_reason": "length"}, values


@FAST
@given(st.lists(outputs(), min_size=1, max_size=3))
def test_generated_dumps_round_trip_their_log_probs(tmp_path, outs):
    path = tmp_path / "dump.json"
    path.write_text(json.dumps([_dump([o for o, _ in outs])], indent=2), encoding="utf-8")
    (record,) = list(read_generations(path))
    for gen, (out, values) in zip([record.greedy, *record.samples], outs):
        assert gen.token_ids == out["token_ids"]
        if not values:
            continue
        np.testing.assert_array_equal(gen.token_logprobs, np.asarray(values, np.float32))
        assert all("t" not in t for row in gen.top_tokens for t in row)  # rank 99: not top
        assert np.all(gen.token_entropies >= 0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["1", "logprob", "rank", "decoded_token", "x"]), inner, max_size=3),
    max_leaves=10)


@FAST
@given(json_values, json_values, json_values)
def test_arbitrary_fields_parse_or_raise_the_input_error(tmp_path, ids, logprobs, finish):
    out = {"text": "a", "token_ids": ids, "logprobs": logprobs, "finish_reason": finish}
    path = tmp_path / "dump.jsonl"
    path.write_text(json.dumps(_dump([out])) + "\n", encoding="utf-8")
    try:
        list(read_generations(path, "vllm"))
    except InvalidInputError as exc:
        assert str(exc).startswith(f"{path}:1: ")
