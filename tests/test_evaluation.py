"""The evaluation table on hand-made records: intervals, NaN accounting, audit, graders."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from confide.evaluation import evaluate_records
from tests.conftest import make_record


def _records(n=60, seed=0):
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        length = int(rng.integers(1, 8))
        correct = bool(rng.random() < 0.5)
        rec = make_record([-0.1] * length, item_id=f"i{i}")
        # "good" separates right from wrong regardless of length; "lengthy" only via length
        rec.scores = {
            "good": (1.0 if correct else 0.0) + rng.normal(0, 0.3),
            "length": -float(length),
            "partial": math.nan if i % 10 == 0 else rng.random(),
        }
        if i % 10 == 0:
            rec.score_errors["partial"] = "unparseable reply"
        rec.grades = {"contains": float(correct), "f1": float(correct) * 0.9}
        records.append(rec)
    return records


def test_evaluation_auroc_matches_sklearn_and_counts_nan():
    records = _records()
    table = evaluate_records(records, grader="contains", n_resamples=200)
    y = np.array([r.grades["contains"] for r in records])
    good = np.array([r.scores["good"] for r in records])
    point, low, high = table.row("good").metrics["auroc"]
    assert point == pytest.approx(roc_auc_score(y, good))
    assert low <= point <= high
    partial = table.row("partial")
    assert partial.n == 54 and partial.n_nan == 6
    assert partial.nan_reasons == {"unparseable reply": 6}
    assert table.accuracy[0] == pytest.approx(y.mean())


def test_evaluation_is_seeded():
    a = evaluate_records(_records(), grader="contains", n_resamples=100, seed=3)
    b = evaluate_records(_records(), grader="contains", n_resamples=100, seed=3)
    assert a.to_dict() == b.to_dict()


def test_evaluation_calibration_metrics_use_crossfitted_probabilities():
    table = evaluate_records(_records(), grader="contains", metrics=("ece", "brier"),
                             n_resamples=50)
    # raw "good" scores go outside [0, 1]; the table still gives a calibration error
    ece = table.row("good").metrics["ece"][0]
    assert 0.0 <= ece < 0.3


def test_evaluation_paired_comparison_names_the_best_scorer():
    table = evaluate_records(_records(), grader="contains", n_resamples=200)
    assert table.row("good").vs_best is None  # it is the best
    other = table.row("partial").vs_best
    assert other["best"] == "good"
    assert other["diff"] < 0 and other["p_value"] < 0.05


def test_evaluation_flags_a_lead_that_comes_from_length():
    rng = np.random.default_rng(1)
    records = []
    for i in range(200):
        length = int(rng.integers(1, 30))
        correct = bool(rng.random() < 1 / (1 + np.exp((length - 15) / 3)))  # short = right
        rec = make_record([-0.1] * length, item_id=f"i{i}")
        # a score that is length plus noise: beats length overall? it ties within strata
        rec.scores = {"lengthy": -length + rng.normal(0, 0.5), "length": -float(length)}
        rec.grades = {"contains": float(correct)}
        records.append(rec)
    table = evaluate_records(records, grader="contains", n_resamples=50)
    lengthy = table.row("lengthy")
    assert lengthy.audit["length_spearman"] < -0.9
    assert lengthy.audit["stratified_auroc"] < lengthy.metrics["auroc"][0]
    assert table.correct_length_spearman < -0.3


def test_evaluation_grader_agreement_with_two_graders():
    table = evaluate_records(_records(), grader="contains", n_resamples=50)
    assert set(table.grader_agreement) == {"contains vs f1"}
    assert table.grader_agreement["contains vs f1"] == pytest.approx(1.0)


def test_evaluation_always_shows_the_length_baseline():
    records = _records()
    for r in records:
        del r.scores["length"]
    table = evaluate_records(records, grader="contains", scorers=["good"], n_resamples=50)
    assert [row.scorer for row in table.rows] == ["good", "length"]
    lengths = np.array([r.greedy.n_tokens for r in records])
    y = np.array([r.grades["contains"] for r in records])
    assert table.row("length").metrics["auroc"][0] == pytest.approx(roc_auc_score(y, -lengths))
