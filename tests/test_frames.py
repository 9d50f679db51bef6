"""Results as tables: ``to_pandas()`` of scored answers, a run, its evaluation table and a
calibration fit, and the HTML a notebook shows for an evaluation table.

Real scoring and real stores; each frame is checked against the object it came from.
"""

from __future__ import annotations

import math
from html.parser import HTMLParser

import pytest

import confide
from confide.store.run_store import RunStore
from tests.conftest import make_record

pd = pytest.importorskip("pandas")

PARIS = [{"token": "Par", "logprob": -0.2,
          "top_logprobs": [{"token": "Par", "logprob": -0.2}, {"token": "Lyon", "logprob": -2.0}]},
         {"token": "is", "logprob": -0.1,
          "top_logprobs": [{"token": "is", "logprob": -0.1}, {"token": "ise", "logprob": -3.0}]}]


def _run(tmp_path, n: int = 40):
    """A stored run of ``n`` graded records: msp rises with correctness, two ties apart."""
    path = tmp_path / "run"
    with RunStore.open(path, {"task": "t", "model": "m", "scorers": ["msp", "min_logprob"],
                              "grader": "contains", "seed": 0}) as store:
        for i in range(n):
            right = i % 3 != 0
            rec = make_record([-0.2 - 0.05 * i + (1.0 if right else 0.0)] * 2, item_id=f"q{i}")
            rec.scores = {"msp": -0.1 * i + right, "min_logprob": math.nan if i < 4 else -0.01 * i}
            rec.score_errors = {"min_logprob": "no statistics"} if i < 4 else {}
            rec.grades = {"contains": float(right)}
            store.put(rec, i)
    return confide.open_run(path)


def test_scored_answers_as_a_frame_one_row_per_answer():
    answers = confide.score_answers(
        [{"question": "Capital of France?", "references": ["Paris"]},
         {"question": "Capital of Italy?", "references": ["Milan"]}],
        ["Paris", "Rome"], logprobs=[PARIS, None], scorers="msp,mean_logprob")
    frame = answers.to_pandas()
    assert list(frame["question"]) == ["Capital of France?", "Capital of Italy?"]
    assert frame.loc[0, "msp"] == pytest.approx(-0.3)
    assert math.isnan(frame.loc[1, "msp"]) and "token_logprobs" in frame.loc[1, "reason.msp"]
    assert list(frame["grade.contains"]) == [1.0, 0.0]


def test_a_run_and_its_table_as_frames(tmp_path):
    run = _run(tmp_path)
    records = run.to_pandas()
    assert len(records) == 40 and records.loc[5, "id"] == "q5"
    assert records.loc[0, "score.min_logprob"] is None or math.isnan(
        records.loc[0, "score.min_logprob"])
    assert records.loc[0, "why.min_logprob"] == "no statistics"
    table = run.compute_table(n_resamples=50)
    frame = table.to_pandas()
    assert list(frame["scorer"]) == [r.scorer for r in table.rows]
    msp = frame.set_index("scorer").loc["msp"]
    assert (msp["auroc"], msp["auroc_low"], msp["auroc_high"]) == table.row("msp").metrics[
        "auroc"]
    assert msp["coverage"] == 1.0
    assert frame.set_index("scorer").loc["min_logprob", "coverage"] == pytest.approx(36 / 40)
    assert "no statistics (4)" in frame.set_index("scorer").loc["min_logprob", "nan_reasons"]


def test_the_notebook_html_of_a_table_holds_every_scorer_and_note(tmp_path):
    table = _run(tmp_path).compute_table(n_resamples=50)
    table.notes.append("a note with <markup> & such")
    cells: list[str] = []

    class Cells(HTMLParser):
        def handle_data(self, data: str) -> None:
            cells.append(data)

    html = table._repr_html_()
    Cells().feed(html)
    for row in table.rows:
        assert row.scorer in cells
    point, low, high = table.row("msp").metrics["auroc"]
    assert f"{point:.3f} [{low:.3f}, {high:.3f}]" in cells
    assert "a note with <markup> & such" in cells  # escaped in the HTML, read back whole
    assert "<markup>" not in html


def test_a_calibration_fit_as_a_frame_of_its_reliability_bins(tmp_path):
    fit = confide.calibrate(_run(tmp_path), "msp")
    frame = fit.to_pandas()
    assert frame["count"].sum() == fit.n == 40
    assert frame.attrs["crossfit_ece"] == fit.crossfit_ece
