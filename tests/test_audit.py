"""Tests for confide.metrics.length_audit: length confounding checks (Santilli et al. 2025)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from confide.core.errors import InvalidInputError
from confide.metrics import UndefinedMetricWarning, auroc_score
from confide.metrics.length_audit import (
    lead_disappears,
    length_correlations,
    ranking_agreement,
    stratified_auroc,
)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(2025)


# Hand-worked case: lengths 1..8, two strata {1..4} and {5..8}, length baseline = -length.
LENGTHS = np.arange(1.0, 9.0)
CORRECT = np.array([1, 0, 1, 0, 1, 0, 0, 1])
SCORER = np.array([4.0, 0.0, 5.0, 6.0, 7.0, 2.0, 3.0, 1.0])
BASELINE = -LENGTHS


def test_length_correlations_match_scipy(rng):
    lengths = rng.integers(1, 50, 60).astype(float)
    conf = -lengths + rng.normal(scale=10, size=60)
    correct = (rng.random(60) < 0.5).astype(float)
    result = length_correlations(conf, correct, lengths)
    assert result == pytest.approx({
        "conf_length_spearman": stats.spearmanr(conf, lengths).statistic,
        "correct_length_spearman": stats.spearmanr(correct, lengths).statistic,
    })


def test_length_correlations_constant_length_is_undefined():
    with pytest.warns(UndefinedMetricWarning):
        result = length_correlations([0.1, 0.5, 0.9], [0, 1, 1], [4, 4, 4])
    assert math.isnan(result["conf_length_spearman"])


def test_stratified_auroc_hand_computed():
    # stratum {1..4}: correct conf {4, 5} vs wrong {0, 6}: 4>0, 5>0 → 2/4
    # stratum {5..8}: correct conf {7, 1} vs wrong {2, 3}: 7>2, 7>3 → 2/4  → (4·½ + 4·½)/8
    assert stratified_auroc(SCORER, CORRECT, LENGTHS, n_strata=2) == pytest.approx(0.5)
    # baseline, stratum 1: correct lengths {1, 3} vs wrong {2, 4}: 1<2, 1<4, 3<4 → 3/4
    # stratum 2: correct {5, 8} vs wrong {6, 7}: 5<6, 5<7 → 2/4  → (3/4 + 2/4)/2
    assert stratified_auroc(BASELINE, CORRECT, LENGTHS, n_strata=2) == pytest.approx(0.625)


def test_stratified_auroc_skips_one_class_strata():
    # stratum {1, 2}: all correct → skipped; {3, 4}: 0.2(right) < 0.3(wrong) → 0;
    # {5, 6}: 0.5(right) > 0.4(wrong) → 1 → (2·0 + 2·1) / 4
    conf = [0.9, 0.8, 0.2, 0.3, 0.5, 0.4]
    correct = [1, 1, 1, 0, 1, 0]
    assert stratified_auroc(conf, correct, [1, 2, 3, 4, 5, 6], n_strata=3) == pytest.approx(0.5)


def test_stratified_auroc_one_stratum_is_plain_auroc(rng):
    conf, lengths = rng.random(40), rng.integers(1, 9, 40)
    correct = (rng.random(40) < 0.5).astype(float)
    assert stratified_auroc(conf, correct, lengths, n_strata=1) == auroc_score(conf, correct)


def test_stratified_auroc_tied_lengths_share_a_stratum():
    # lengths 1,1,1,2 with 2 strata: the three 1s stay together; stratum {2} has one class
    conf, correct = [0.9, 0.1, 0.5, 0.7], [1, 0, 0, 1]
    # stratum of length 1: right {0.9} vs wrong {0.1, 0.5} → 1
    assert stratified_auroc(conf, correct, [1, 1, 1, 2], n_strata=2) == 1.0


def test_stratified_auroc_removes_a_pure_length_effect(rng):
    lengths = rng.integers(1, 200, 4000).astype(float)
    correct = (rng.random(4000) < np.where(lengths < 100, 0.8, 0.2)).astype(float)
    conf = -lengths
    assert auroc_score(conf, correct) > 0.75
    assert stratified_auroc(conf, correct, lengths, n_strata=10) == pytest.approx(0.5, abs=0.05)


def test_stratified_auroc_no_stratum_with_both_classes():
    with pytest.warns(UndefinedMetricWarning):
        value = stratified_auroc([0.1, 0.2, 0.3, 0.4], [1, 1, 0, 0], [1, 2, 3, 4], n_strata=2)
    assert math.isnan(value)


def test_stratified_auroc_rejects_bad_input():
    with pytest.raises(InvalidInputError, match="lengths: NaN"):
        stratified_auroc([0.1, 0.2], [0, 1], [3, np.nan])
    with pytest.raises(InvalidInputError, match="lengths"):
        stratified_auroc([0.1, 0.2], [0, 1], [3, 4, 5])
    with pytest.raises(InvalidInputError, match="n_strata"):
        stratified_auroc([0.1, 0.2], [0, 1], [3, 4], n_strata=0)
    assert stratified_auroc([0.1, 0.2, np.nan], [0, 1, 1], [3, 4, np.nan], n_strata=1,
                            nan_policy="omit") == 1.0


def test_lead_disappears_true_when_lead_is_length_only():
    # plain AUROC: scorer 11/16 > baseline 9/16 (correct lengths {1,3,5,8}: 4+3+2+0 = 9 wins);
    # stratified: scorer 0.5 <= baseline 0.625 (see test_stratified_auroc_hand_computed)
    assert auroc_score(SCORER, CORRECT) == pytest.approx(11 / 16)
    assert auroc_score(BASELINE, CORRECT) == pytest.approx(9 / 16)
    assert lead_disappears(SCORER, BASELINE, CORRECT, LENGTHS, n_strata=2) is True


def test_lead_disappears_false_without_lead_or_when_it_survives():
    assert lead_disappears(BASELINE, SCORER, CORRECT, LENGTHS, n_strata=2) is False  # no lead
    oracle = CORRECT + 0.01 * LENGTHS        # perfect within every stratum
    assert lead_disappears(oracle, BASELINE, CORRECT, LENGTHS, n_strata=2) is False


def test_lead_disappears_omit_drops_rows_of_either_scorer():
    scorer, baseline = SCORER.copy(), BASELINE.copy()
    scorer = np.append(scorer, np.nan)
    baseline = np.append(baseline, -9.0)
    correct, lengths = np.append(CORRECT, 1), np.append(LENGTHS, 9.0)
    assert lead_disappears(scorer, baseline, correct, lengths, n_strata=2, nan_policy="omit")
    with pytest.raises(InvalidInputError, match="confidence"):
        lead_disappears(scorer, baseline, correct, lengths, n_strata=2)


def test_ranking_agreement_matches_kendalltau():
    scores = {
        "exact": {"a": 0.70, "b": 0.60, "c": 0.50, "d": 0.55},
        "rouge": {"a": 0.80, "b": 0.50, "c": 0.60, "d": 0.65},
        "judge": {"c": 0.9, "d": 0.8, "b": 0.7, "a": 0.6},   # exact's order reversed
    }
    result = ranking_agreement(scores)
    assert list(result) == [("exact", "rouge"), ("exact", "judge"), ("rouge", "judge")]
    order = ["a", "b", "c", "d"]
    for (g1, g2), tau in result.items():
        expected = stats.kendalltau([scores[g1][s] for s in order], [scores[g2][s] for s in order])
        assert tau == pytest.approx(expected.statistic)
    assert result[("exact", "judge")] == pytest.approx(-1.0)


def test_ranking_agreement_uses_shared_scorers_only():
    result = ranking_agreement({"x": {"a": 0.1, "b": 0.2, "c": 0.3, "e": float("nan")},
                                "y": {"b": 0.5, "c": 0.6, "a": 0.4, "z": 0.9, "e": 0.1}})
    assert result == {("x", "y"): pytest.approx(1.0)}


def test_ranking_agreement_too_few_scorers_is_undefined():
    with pytest.warns(UndefinedMetricWarning):
        result = ranking_agreement({"x": {"a": 0.1}, "y": {"a": 0.3, "b": 0.2}})
    assert math.isnan(result[("x", "y")])
