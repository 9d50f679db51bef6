"""The evaluation table on hand-made records: intervals, NaN accounting, audit, graders."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from confide.evaluation.table import evaluate_records
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


def test_evaluation_says_the_p_values_against_the_best_are_post_selection():
    # the best is chosen on the same items it is compared on: the table must say so
    table = evaluate_records(_records(), grader="contains", n_resamples=50)
    n = table.comparison.n_common
    (note,) = [note for note in table.notes if "Δ AUROC vs best" in note]
    assert f"on these same {n} items" in note and "winner's curse" in note
    assert "not as proof" in note
    alone = evaluate_records(_records(), grader="contains", n_resamples=50, compare=False)
    assert not [note for note in alone.notes if "Δ AUROC vs best" in note]


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


def test_evaluation_shows_raw_calibration_of_probabilities_only():
    from confide.metrics import brier_loss, calibration_error, crossfit_probabilities

    records = _records()
    for r in records:  # the same values in [0, 1] under a probability's name and others'
        for name in ("p_true", "probe:run1", "lexical_similarity", "fisher_rao",
                     "probability_margin", "cosine_consistency", "semantic_density",
                     "boostedprob"):
            r.scores[name] = r.scores["partial"]
    table = evaluate_records(records, grader="contains", n_resamples=50)
    y = np.array([r.grades["contains"] for r in records])
    partial = np.array([r.scores["partial"] for r in records])
    keep = ~np.isnan(partial)
    # values in [0, 1] are not enough: only scorers whose values are P(correct) get it
    for name in ("partial", "lexical_similarity", "fisher_rao", "probability_margin",
                 "cosine_consistency", "semantic_density", "boostedprob"):
        assert table.row(name).raw_calibration is None, name
    assert [r.scorer for r in table.rows].count("boostedprob") == 1
    assert table.row("probe:run1").raw_calibration is not None  # a fitted probe's P(correct)
    raw = table.row("p_true").raw_calibration
    assert raw is not None
    assert raw.ece[0] == pytest.approx(calibration_error(partial[keep], y[keep]))
    assert raw.brier[0] == pytest.approx(brier_loss(partial[keep], y[keep]))
    assert raw.reliability.counts.sum() == keep.sum()
    # raw scores outside [0, 1] get only the cross-fitted calibration
    good = table.row("good")
    assert good.raw_calibration is None
    prob = crossfit_probabilities(np.array([r.scores["good"] for r in records]), y)
    assert good.calibrated.ece[0] == pytest.approx(calibration_error(prob, y))
    assert table.to_dict()["scorers"][0]["calibrated"]["reliability"]["counts"]


def test_evaluation_lists_each_scorer_once():
    table = evaluate_records(_records(), grader="contains", n_resamples=20,
                             scorers=["good", "partial", "good", "length"])
    assert [row.scorer for row in table.rows] == ["good", "partial", "length"]


def test_evaluation_explains_missing_calibration():
    records = _records(20)
    for i, r in enumerate(records):
        r.grades["contains"] = float(i == 0)  # one right answer: nothing to cross-fit
    table = evaluate_records(records, grader="contains", metrics=("auroc", "ece"),
                             n_resamples=20)
    row = table.row("good")
    assert "2 correct and 2 wrong" in row.calibrated.note
    assert row.calibrated.reliability is None and math.isnan(row.metrics["ece"][0])


def test_evaluation_length_baseline_is_the_length_scorer():
    # one definition: an empty answer has no length (NaN with the scorer's reason)
    records = _records(30)
    for r in records:
        del r.scores["length"]
    records[0].greedy = make_record([], text="").greedy
    table = evaluate_records(records, grader="contains", n_resamples=20)
    row = table.row("length")
    assert row.n == 29 and row.n_nan == 1
    assert list(row.nan_reasons) == ["empty answer: nothing to put a confidence on"]
    assert table.notes and "length baseline" in table.notes[0]


def test_evaluation_records_the_options_it_used():
    table = evaluate_records(_records(), grader="contains", metrics=("auroc", "prr"),
                             metric_options={"prr": {"max_rejection": 0.3}}, n_resamples=20)
    assert table.options["metric_options"] == {"auroc": {"threshold": 0.5},
                                               "prr": {"max_rejection": 0.3}}


def test_compare_records_pairs_runs_on_shared_items():
    from confide.evaluation.table import compare_records
    from confide.metrics import auroc_score

    a, b = _records(40, seed=1), _records(30, seed=2)
    cmp = compare_records(a, b, grader_a="contains", grader_b="contains", scorers=["good"],
                          n_resamples=50)
    assert cmp.n_shared == 30
    row = next(r for r in cmp.rows if r["scorer"] == "good" and r["metric"] == "auroc")
    ya = np.array([r.grades["contains"] for r in a[:30]])
    yb = np.array([r.grades["contains"] for r in b])
    ga = np.array([r.scores["good"] for r in a[:30]])
    gb = np.array([r.scores["good"] for r in b])
    assert row["diff"] == pytest.approx(auroc_score(ga, ya) - auroc_score(gb, yb))


def test_a_scorer_cannot_lead_by_abstaining_on_a_third_of_the_items():
    # "honest" ranks the easy two thirds perfectly and the hard third backwards;
    # "cherry" is NaN exactly on the hard third and only good on the rest. On its own
    # items cherry's AUROC beats honest's over all items, but on the items both score
    # honest is better, and that is where the best scorer is named.
    rng = np.random.default_rng(1)
    records = []
    for i in range(60):
        hard, correct = i % 3 == 0, i % 2 == 0
        rec = make_record([-0.1] * 3, item_id=f"i{i}")
        honest = (0.0 if correct else 1.0) if hard else (1.0 if correct else 0.0)
        cherry = math.nan if hard else (0.7 if correct else 0.3) + rng.normal(0, 0.25)
        rec.scores = {"honest": honest + rng.normal(0, 0.01), "cherry": cherry}
        rec.grades = {"contains": float(correct)}
        records.append(rec)
    table = evaluate_records(records, grader="contains", scorers=["honest", "cherry"],
                             n_resamples=200)
    own = {name: table.row(name).metrics["auroc"][0] for name in ("honest", "cherry")}
    assert own["cherry"] > own["honest"]  # the old rule would have named cherry best
    assert table.row("cherry").coverage == pytest.approx(2 / 3)
    assert table.comparison.n_common == 40
    assert table.comparison.best == "honest"
    assert table.row("honest").common_auroc == pytest.approx(1.0)
    assert table.row("cherry").vs_best["n"] == 40 and table.row("cherry").vs_best["diff"] < 0


def test_a_scorer_with_few_values_is_left_out_of_the_comparison():
    records = _records()
    for i, rec in enumerate(records):
        rec.scores["rare"] = 1.0 if i < 10 else math.nan
    table = evaluate_records(records, grader="contains", n_resamples=100)
    assert "rare" in table.comparison.left_out and "rare" not in table.comparison.scorers
    assert table.row("rare").vs_best is None
    # the shared items are those of the compared scorers only
    assert table.comparison.n_common == 54
