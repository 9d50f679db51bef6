"""lm-evaluation-harness --log_samples records, and the option probability."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from confide.core.errors import InvalidInputError
from confide.ingest import option_probability, read_generations

DATA = Path(__file__).parent / "data"
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
ARC = DATA / "samples_arc_easy_2024-05-01T12-00-00.123456.jsonl"
TRIVIA = DATA / "samples_triviaqa_2024-05-01T12-00-00.123456.jsonl"
GSM8K = DATA / "samples_gsm8k_2024-05-01T12-00-00.123456.jsonl"


def test_option_probability_hand_computed():
    # 1 / (1 + e^-1 + e^-2) = 1 / 1.503214724 = 0.665240956
    assert option_probability([-1.0, -2.0, -3.0]) == pytest.approx(0.665240956, abs=1e-9)
    # a tie at the top: 1 / (e^-1.5 + 1 + 1) = 0.449816218
    assert option_probability([-2.0, -0.5, -0.5]) == pytest.approx(0.449816218, abs=1e-9)
    assert option_probability([-7.0]) == 1.0
    assert option_probability([math.log(.2), math.log(.2)]) == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [[], [-1.0, math.nan], [-math.inf], [[-1.0]], ["a"]])
def test_option_probability_rejects_bad_input(bad):
    with pytest.raises(InvalidInputError, match="loglikelihoods"):
        option_probability(bad)


@given(st.lists(st.floats(-1e3, 0), min_size=1, max_size=8))
def test_option_probability_is_the_softmax_maximum(values):
    shifted = np.exp(np.asarray(values) - max(values))
    expected = float(shifted.max() / shifted.sum())
    p = option_probability(values)
    assert p == pytest.approx(expected, rel=1e-12)
    assert 1 / len(values) - 1e-12 <= p <= 1.0


def test_multiple_choice_example():
    first, second = read_generations(ARC)
    assert first.item.id == "0" and first.item.prompt.startswith("Question: Which of these")
    assert first.item.metadata["choices"] == ["Mars", "the Sun", "the Moon"]
    assert first.item.metadata["choice_loglikelihoods"] == [-1.0, -2.0, -3.0]
    assert first.item.metadata["choice_is_greedy"] == [True, False, False]
    assert first.item.metadata["task"] == "arc_easy"
    assert first.item.metadata["doc"]["answerKey"] == "A"
    assert first.greedy.text == "Mars" and first.item.references == ["A", "Mars"]
    assert first.label == 1.0 and first.capabilities == frozenset()
    assert option_probability(first.item.metadata["choice_loglikelihoods"]) == pytest.approx(
        0.665240956, abs=1e-9)
    # older list-of-lists arguments and numeric responses; a tie goes to the first
    assert second.item.metadata["choice_loglikelihoods"] == [-2.0, -0.5, -0.5]
    assert second.greedy.text == "the Sun" and second.item.references == ["B", "the Sun"]


def test_generate_until_example():
    first, second = read_generations(TRIVIA)
    assert first.greedy.text == "Paris" and first.item.references == ["Paris", "paris"]
    assert first.label == 1.0 and first.item.metadata["task"] == "triviaqa"
    assert first.item.prompt == "Question: Which city is the capital of France?\nAnswer:"
    # repeats = 3: the filtered answer, and the further raw replies as samples
    assert second.greedy.text == "Milan" and [s.text for s in second.samples] == ["Rome",
                                                                                  "Milan"]
    assert second.label == 0.0 and second.capabilities == {"samples"}


def test_filters_make_ids_and_filtered_answers():
    strict, flexible = read_generations(GSM8K)
    assert (strict.item.id, flexible.item.id) == ("0/strict-match", "0/flexible-extract")
    assert strict.greedy.text == "7"
    assert strict.item.metadata["raw_response"] == "She has 3 + 4 = 7 apples. #### 7"


def _mc(resps, **extra):
    args = [["Q:", f" c{i}"] for i in range(len(resps))]
    return {"doc_id": 5, "doc": {}, "target": 0, "arguments": args, "resps": resps, **extra}


@pytest.mark.parametrize(("record", "field", "message"), [
    (_mc([[["-1.0", "True"]], [["0.5", "False"]]]), "resps[1][0][0]",
     "finite number <= 0, not 0.5"),
    (_mc([[["-1.0", "True"]], [["nan", "False"]]]), "resps[1][0][0]", "finite number"),
    (_mc([[["-1.0", "maybe"]]]), "resps[0][0][1]", "must be true or false"),
    (_mc([[["x", "True"]]]), "resps[0][0][0]", "'x' is not a number"),
    (_mc([[[-1.0]]]), "resps[0]", "[[logprob, is_greedy]]"),
    ({**_mc([[[-1.0, True]]]), "target": 4}, "target", "choice 4 of 1"),
    ({**_mc([[[-1.0, True]]]), "arguments": [["Q:", " a"], ["Q:", " b"]]}, "arguments",
     "2 requests but 1 responses"),
    ({"doc_id": 1, "arguments": [["some text"]], "resps": [["-12.5"]]}, "resps",
     "loglikelihood_rolling"),
    ({"doc_id": [1], "resps": [["a"]]}, "doc_id", "an integer or text"),
    ({**_mc([[[-1.0, True]]]), "acc": 2.0}, "acc", "a label must be"),
])
def test_bad_record_names_file_line_and_field(tmp_path, record, field, message):
    path = tmp_path / "samples_x.jsonl"
    good = _mc([[[-1.0, True]]], doc_id=0)
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        list(read_generations(path, "lmeval"))
    assert str(info.value).startswith(f"{path}:2: {field}: ") and message in str(info.value)
    stream = read_generations(path, "lmeval", on_bad_record="skip")
    assert [r.item.id for r in stream] == ["0"] and len(stream.skipped) == 1


@FAST
@given(st.lists(st.floats(-50, 0), min_size=1, max_size=6), st.booleans())
def test_generated_records_round_trip_their_loglikelihoods(tmp_path, lls, as_text):
    resps = [[[repr(v) if as_text else v, str(i == 0) if as_text else i == 0]]
             for i, v in enumerate(lls)]
    path = tmp_path / "samples_t.jsonl"
    path.write_text(json.dumps(_mc(resps)) + "\n", encoding="utf-8")
    (record,) = list(read_generations(path))
    assert record.item.metadata["choice_loglikelihoods"] == lls  # exact: floats, not float32
    assert record.greedy.text == f"c{int(np.argmax(lls))}"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=True)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["gen_args_0", "arg_0", "arg_1", "x"]), inner, max_size=3),
    max_leaves=10)


@FAST
@given(json_values, json_values, json_values, json_values)
def test_arbitrary_fields_parse_or_raise_the_input_error(tmp_path, args, resps, filtered,
                                                         target):
    record = {"doc_id": 0, "arguments": args, "resps": resps, "filtered_resps": filtered,
              "target": target}
    path = tmp_path / "samples_t.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    try:
        list(read_generations(path, "lmeval"))
    except InvalidInputError as exc:
        assert str(exc).startswith(f"{path}:1: ")
