"""Property-based tests: arbitrary input gives a value or a clear error, never a crash.

A "clear error" is :class:`~confide.core.errors.ConfideError` (for file loaders and
options: an InvalidInputError naming where) or, for the server's request
model, pydantic's ValidationError, which the server answers with a 400.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from confide.core.errors import ConfideError, InvalidInputError
from confide.core.options import RANGES, check_option, check_stop
from confide.core.records import Item
from confide.grading import GRADERS, grade, normalize_answer
from confide.scorers.reflexive import parse_confidence
from confide.serve.models import ChatCompletionRequest
from confide.tasks import load_task

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=12)
records = st.dictionaries(
    st.sampled_from(["question", "references", "id", "answer", "choices", "x"]) | st.text(
        max_size=6), json_values, max_size=5)


def _load(path, **options):
    try:
        task = load_task(str(path), on_bad_record=options.pop("on_bad_record", "raise"),
                         **options)
    except ConfideError as exc:
        assert str(exc)  # a message, never an empty error
        return None
    for item in task.items:  # what loads is well formed
        assert isinstance(item.id, str) and item.references == list(item.references)
        assert all(isinstance(r, str) and r for r in item.references)
    return task


@FAST
@given(st.binary(max_size=400), st.sampled_from([".jsonl", ".json", ".csv", ".parquet"]),
       st.sampled_from(["raise", "skip"]))
def test_any_bytes_load_or_fail_clearly(tmp_path, data, suffix, policy):
    path = tmp_path / f"data{suffix}"
    path.write_bytes(data)
    _load(path, on_bad_record=policy)


@FAST
@given(st.lists(records | json_values, max_size=6), st.sampled_from(["raise", "skip"]))
def test_any_json_records_load_or_fail_clearly(tmp_path, rows, policy):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    _load(path, on_bad_record=policy)
    array = tmp_path / "data.json"
    array.write_text(json.dumps(rows), encoding="utf-8")
    _load(array, on_bad_record=policy)


@FAST
@given(st.lists(st.lists(st.text(max_size=10), min_size=1, max_size=4), max_size=6),
       st.booleans())
def test_any_csv_loads_or_fails_clearly(tmp_path, rows, bom):
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path = tmp_path / "data.csv"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + buf.getvalue().encode("utf-8",
                                                                            "surrogatepass"))
    _load(path, on_bad_record="skip")


@FAST
@given(st.text(max_size=60))
def test_normalisation_is_total_and_idempotent(text):
    once = normalize_answer(text)
    assert isinstance(once, str)
    assert normalize_answer(once) == once


@FAST
@given(st.text(max_size=60), st.lists(st.text(max_size=20), min_size=1, max_size=3),
       st.sampled_from(["exact", "contains", "f1", "rougeL", "numeric"]))
def test_graders_give_a_value_in_unit_interval(answer, references, name):
    try:
        value = grade(answer, Item(id="x", prompt="Q?", references=references), name)
    except InvalidInputError:
        return
    assert name in GRADERS and 0.0 <= value <= 1.0


@FAST
@given(st.text(max_size=80))
def test_verbalized_confidence_parser_gives_a_probability_or_a_reason(reply):
    from confide.core.errors import CannotScore

    try:
        value = parse_confidence(reply)
    except CannotScore as exc:
        assert exc.reason.startswith("verbalized:")
        return
    assert 0.0 <= value <= 1.0 and not math.isnan(value)


messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "wizard", ""]) | json_values,
     "content": st.text(max_size=20) | json_values}), max_size=3) | json_values
bodies = st.fixed_dictionaries({}, optional={
    "model": st.text(max_size=10) | json_values, "messages": messages,
    "max_tokens": json_values, "n": json_values, "temperature": json_values,
    "top_p": json_values, "stop": json_values, "seed": json_values,
    "top_logprobs": json_values, "stream": json_values}) | json_values


@FAST
@given(bodies)
def test_request_model_accepts_or_refuses_with_a_validation_error(body):
    try:
        request = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        assert exc.errors()
        return
    # What is accepted satisfies the shared ranges.
    for name in ("n", "temperature", "top_p", "top_logprobs"):
        value = getattr(request, name)
        if value is not None:
            check_option(name, value)
    assert all(request.stop_list())


@FAST
@given(st.sampled_from(sorted(RANGES)), json_values)
def test_every_option_rule_returns_the_value_or_names_the_option(name, value):
    try:
        assert check_option(name, value) == value
    except InvalidInputError as exc:
        assert exc.field == name


@FAST
@given(json_values)
def test_stop_rule_is_total(value):
    try:
        stops = check_stop(value)
    except InvalidInputError as exc:
        assert exc.field == "stop"
        return
    assert all(isinstance(s, str) and s for s in stops)


@pytest.mark.parametrize("value, expected", [(6.0, ["6"]), (2.5, ["2.5"]), (-3.0, ["-3"])])
def test_numeric_references_keep_their_integer_form(tmp_path, value, expected):
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps({"question": "2*3?", "references": value}) + "\n")
    assert load_task(str(path)).items[0].references == expected
