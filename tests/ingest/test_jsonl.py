"""confide's own minimal log form."""

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


def test_example_file():
    q1, q2, q3 = read_generations(DATA / "confide_log.jsonl")
    assert (q1.item.id, q1.item.prompt, q1.item.references, q1.label) == (
        "q1", "Capital of France?", ["Paris"], 1.0)
    assert q1.item.metadata == {"source": "my-eval"}  # unknown fields are kept
    g = q1.greedy
    assert g.tokens == ["Par", "is"] and g.top_tokens == [["Par", "Ly"], ["is", "ise"]]
    np.testing.assert_allclose(g.token_logprobs, [-LN2, -.01], rtol=1e-6)
    # step 1: listed 1/2, 1/4, unseen 1/4: 1.5 log 2; step 2 by the same formula
    p1, p2 = math.exp(-.01), math.exp(-5.0)
    step2 = -p1 * -.01 - p2 * -5.0 + (1 - p1 - p2) * 5.0
    np.testing.assert_allclose(g.token_entropies, [1.5 * LN2, step2], rtol=1e-5)
    assert q1.capabilities == {"token_logprobs", "top_logprobs", "token_entropies", "samples"}
    assert [s.text for s in q1.samples] == ["Lyon"]

    assert q2.item.question == "Capital of Italy?" and q2.label == 1.0
    assert q2.item.references == ["Rome"] and [s.text for s in q2.samples] == ["Rome", "Milan"]
    assert q2.capabilities == {"samples"} and q2.greedy.token_logprobs is None

    # an integer id; an empty token list with an answer is no statistics; blank line 3
    assert (q3.item.id, q3.line, q3.label, q3.capabilities) == ("3", 4, 0.0, frozenset())


@pytest.mark.parametrize(("record", "field", "message"), [
    ({"question": "Q", "answer": 3}, "answer", "must be text, not int"),
    ({"question": "Q"}, "answer", "missing"),
    ({"question": "Q", "answer": "a", "tokens": ["a"], "token_logprobs": [-1, -2]},
     "token_logprobs", "lengths differ: 1 tokens, 2 token_logprobs"),
    ({"question": "Q", "answer": "a", "token_logprobs": [math.nan]}, "token_logprobs[0]",
     "finite number <= 0, not nan"),
    ({"question": "Q", "answer": "a", "top_logprobs": [[-1.0]]}, "top_logprobs[0]",
     "{token: logprob}"),
    ({"question": "Q", "answer": "a", "top_logprobs": [{"a": 1e-3}]}, "top_logprobs[0]['a']",
     "finite number <= 0"),
    ({"question": "Q", "answer": "a", "samples": [3]}, "samples[0]", "text or an object"),
    ({"question": "Q", "answer": "a", "samples": [{"answer": "b", "token_logprobs": [1]}]},
     "samples[0].token_logprobs[0]", "finite number <= 0"),
    ({"question": 5, "answer": "a"}, "question", "text or a list of chat messages"),
    ({"question": [{"content": "x"}], "answer": "a"}, "question[0]", "'role'"),
    ({"question": "Q", "answer": "a", "references": [{"x": 1}]}, "references[0]",
     "text or a number"),
    ({"question": "Q", "answer": "a", "label": 2}, "label", "a label must be"),
    ({"question": "Q", "answer": "a", "id": 1.5}, "id", "text or an integer"),
])
def test_bad_record_names_file_line_and_field(tmp_path, record, field, message):
    path = tmp_path / "log.jsonl"
    good = {"id": "ok", "question": "Q", "answer": "A"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        list(read_generations(path, "jsonl"))
    assert str(info.value).startswith(f"{path}:2: {field}: ") and message in str(info.value)
    stream = read_generations(path, "jsonl", on_bad_record="skip")
    assert [r.item.id for r in stream] == ["ok"] and len(stream.skipped) == 1


# One token's statistics as a model gives them: at most four distinct tokens of at most
# e^-1.4 each (so they sum below 1), the chosen one's value its own entry when listed.
_token = st.text(min_size=1, max_size=3)
steps = st.tuples(_token, st.floats(-30, -1.4),
                  st.dictionaries(_token, st.floats(-30, -1.4), min_size=1, max_size=3)).map(
    lambda s: (s[0], s[2].get(s[0], s[1]), s[2]))
answers = st.lists(steps, max_size=6)


def _answer(steps):
    return {"answer": "".join(t for t, _, _ in steps) or "x",
            "tokens": [t for t, _, _ in steps], "token_logprobs": [v for _, v, _ in steps],
            "top_logprobs": [top for _, _, top in steps]}


@FAST
@given(answers, st.lists(answers, max_size=2))
def test_generated_records_round_trip_their_log_probs(tmp_path, greedy, samples):
    record = {"id": "g", "question": "Q", **_answer(greedy),
              "samples": [_answer(s) for s in samples]}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    (imported,) = list(read_generations(path))
    for gen, steps in zip([imported.greedy, *imported.samples], [greedy, *samples]):
        if not steps:
            assert gen.token_logprobs is None
            continue
        assert gen.tokens == [t for t, _, _ in steps]
        np.testing.assert_array_equal(gen.token_logprobs,
                                      np.asarray([v for _, v, _ in steps], np.float32))
        k = min(len(top) for _, _, top in steps)
        np.testing.assert_array_equal(
            gen.top_logprobs, np.asarray([sorted(top.values(), reverse=True)[:k]
                                          for _, _, top in steps], np.float32))
    has_stats = all([greedy, *samples])
    assert ("token_logprobs" in imported.capabilities) == has_stats
    assert ("samples" in imported.capabilities) == bool(samples)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=True)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["answer", "tokens", "token_logprobs", "role", "content", "a"]),
        inner, max_size=3),
    max_leaves=10)


@FAST
@given(st.dictionaries(st.sampled_from(["id", "question", "answer", "tokens",
                                        "token_logprobs", "top_logprobs", "samples",
                                        "references", "label"]), json_values))
def test_arbitrary_records_parse_or_raise_the_input_error(tmp_path, record):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    try:
        list(read_generations(path, "jsonl"))
    except InvalidInputError as exc:
        assert str(exc).startswith(f"{path}:1: ")
