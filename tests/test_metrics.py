"""Tests for confide.metrics: hand-computed cases, sklearn/scipy references, registry contracts."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import average_precision_score, log_loss, roc_auc_score

from confide.core.errors import InvalidInputError, UnknownNameError
from confide.metrics import (
    METRICS,
    UndefinedMetricWarning,
    accuracy_at_fractions,
    accuracy_score,
    adaptive_calibration_error,
    auprc_correct_score,
    auprc_error_score,
    aurc_loss,
    auroc_score,
    bas_score,
    bootstrap_interval,
    brier_loss,
    calibration_error,
    coverage_at_risk_score,
    crossfit_folds,
    crossfit_probabilities,
    crossfit_splits,
    eaurc_loss,
    fit_calibration,
    mass_calibration_error,
    nll_loss,
    paired_bootstrap,
    prr_score,
    rank_calibration_error,
    reliability_diagram,
    risk_at_coverage,
    risk_coverage_curve,
    spearman_score,
)
from confide.metrics.crossfit import CrossfitCV, apply_calibration

# Property lists: every registered metric sits in exactly one of the first two.
# Rank-based metrics depend on confidence only through its order (accuracy ignores
# it entirely); calibration metrics read confidence as a probability.
RANK_BASED = {"accuracy", "auroc", "auprc_correct", "auprc_error", "spearman",
              "rank_calibration_error", "prr", "aurc", "eaurc", "risk_at_coverage",
              "coverage_at_risk"}
CALIBRATION = {"ece", "ece_mass", "ace", "brier", "nll", "bas"}
# Undefined (warning + NaN) when all answers are correct or all wrong.
UNDEFINED_ON_ONE_CLASS = {"auroc", "auprc_correct", "auprc_error", "spearman",
                          "rank_calibration_error", "prr"}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


def _tied_data(rng: np.random.Generator, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities with many ties and binary correctness loosely following them."""
    conf = np.round(rng.random(n), 1)
    correct = (rng.random(n) < conf).astype(float)
    correct[:2] = [0.0, 1.0]  # both classes always present
    return conf, correct


# ----------------------------------------------------------------- registry contract


def test_metrics_registry_every_metric_in_exactly_one_property_list():
    assert RANK_BASED.isdisjoint(CALIBRATION)
    assert RANK_BASED | CALIBRATION == set(METRICS)
    assert UNDEFINED_ON_ONE_CLASS <= RANK_BASED


def test_metrics_registry_specs_are_consistent():
    for name in METRICS:
        spec = METRICS[name]
        assert spec.name == name
        assert spec.kind in ("ranking", "selective", "calibration", "summary")
        assert spec.needs_probabilities == (name in CALIBRATION)
        assert spec.summary and spec.fn.__doc__ and ".. math::" in spec.fn.__doc__
        for section in ("Parameters", "Returns", "Notes", "References", ">>>"):
            assert section in spec.fn.__doc__, (name, section)


def test_metrics_registry_unknown_name_suggests():
    with pytest.raises(UnknownNameError, match="auroc"):
        METRICS["aurco"]


def test_metrics_registry_spec_is_frozen():
    with pytest.raises(AttributeError):
        METRICS["auroc"].higher_is_better = False  # type: ignore[misc]


# --------------------------------------------------------------------- contract tests


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_ignores_record_order(name, rng):
    conf, correct = _tied_data(rng)
    perm = rng.permutation(conf.size)
    fn = METRICS[name].fn
    assert fn(conf, correct) == pytest.approx(fn(conf[perm], correct[perm]), abs=1e-12)


@pytest.mark.parametrize("name", sorted(RANK_BASED))
def test_metric_rank_based_invariant_to_monotone_transform(name, rng):
    conf, correct = _tied_data(rng)
    fn = METRICS[name].fn
    for transform in (lambda c: 10 * c - 3, lambda c: np.exp(4 * c), lambda c: c**3 + 2 * c):
        assert fn(transform(conf), correct) == pytest.approx(fn(conf, correct), abs=1e-12)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_returns_python_float(name, rng):
    conf, correct = _tied_data(rng)
    assert type(METRICS[name].fn(conf, correct)) is float


@pytest.mark.parametrize("name", sorted(UNDEFINED_ON_ONE_CLASS))
@pytest.mark.parametrize("label", [0.0, 1.0])
def test_metric_one_class_warns_and_returns_nan(name, label):
    conf = np.array([0.1, 0.4, 0.35, 0.8])
    with pytest.warns(UndefinedMetricWarning):
        value = METRICS[name].fn(conf, np.full(4, label))
    assert math.isnan(value)


@pytest.mark.parametrize("name", sorted(set(METRICS) - UNDEFINED_ON_ONE_CLASS))
def test_metric_one_class_defined_otherwise(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = METRICS[name].fn(np.array([0.1, 0.4, 0.35, 0.8]), np.ones(4))
    assert not math.isnan(value)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_nan_confidence_raises(name):
    with pytest.raises(InvalidInputError, match="confidence: 1 NaN value"):
        METRICS[name].fn(np.array([0.1, np.nan, 0.35, 0.8]), np.array([0, 1, 0, 1]))


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_nan_omit_drops_rows(name, rng):
    conf, correct = _tied_data(rng)
    with_nan = conf.copy()
    with_nan[[5, 17]] = np.nan
    keep = ~np.isnan(with_nan)
    fn = METRICS[name].fn
    assert fn(with_nan, correct, nan_policy="omit") == pytest.approx(fn(conf[keep], correct[keep]))


@pytest.mark.parametrize("name", sorted(CALIBRATION))
@pytest.mark.parametrize("bad", [-0.1, 1.2, np.inf])
def test_metric_calibration_rejects_non_probabilities(name, bad):
    with pytest.raises(InvalidInputError, match="probabilities in \\[0, 1\\]"):
        METRICS[name].fn(np.array([0.2, bad, 0.5]), np.array([0, 1, 1]))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"confidence": [0.1, 0.2], "correct": [1, 0, 1]}, "correct: confidence has 2 values"),
    ({"confidence": [[0.1, 0.2]], "correct": [1, 0]}, "confidence: must be a 1-D array"),
    ({"confidence": [0.1, 0.2], "correct": [1, 2]}, "correct: correctness must lie in"),
    ({"confidence": [], "correct": []}, "no rows"),
    ({"confidence": [0.1, 0.2], "correct": [1, 0], "nan_policy": "drop"}, "nan_policy"),
])
def test_auroc_score_rejects_bad_input(kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        auroc_score(**kwargs)


@pytest.mark.parametrize(("fn", "option"), [
    (auroc_score, {"threshold": 0.0}), (prr_score, {"max_rejection": 0.0}),
    (prr_score, {"max_rejection": 1.5}), (risk_at_coverage, {"coverage": 0.0}),
    (coverage_at_risk_score, {"risk": -0.1}), (calibration_error, {"n_bins": 0}),
    (calibration_error, {"n_bins": 2.5}), (bas_score, {"n_thresholds": 0}),
    (rank_calibration_error, {"n_bins": True}),
])
def test_metric_rejects_bad_options(fn, option):
    with pytest.raises(InvalidInputError, match=next(iter(option))):
        fn([0.1, 0.2, 0.7], [0, 1, 1], **option)


# ------------------------------------------------------------------------ references


@pytest.mark.parametrize("seed", range(5))
def test_auroc_score_matches_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    conf = rng.integers(0, 6, 80) / 5.0          # heavy ties
    correct = (rng.random(80) < 0.2 + 0.6 * conf).astype(int)
    assert auroc_score(conf, correct) == pytest.approx(roc_auc_score(correct, conf), abs=1e-12)


def test_auroc_score_thresholds_continuous_quality(rng):
    conf, quality = rng.random(50), rng.random(50)
    expected = roc_auc_score(quality >= 0.5, conf)
    assert auroc_score(conf, quality) == pytest.approx(expected)
    assert auroc_score(conf, quality, threshold=0.3) == pytest.approx(
        roc_auc_score(quality >= 0.3, conf))


def test_auroc_score_hand_computed():
    # correct {0.9, 0.6, 0.4} vs wrong {0.4}: 0.9 > 0.4 (1), 0.6 > 0.4 (1), tie (1/2) → 2.5/3
    assert auroc_score([0.9, 0.4, 0.6, 0.4], [1, 0, 1, 1]) == pytest.approx(2.5 / 3)


@pytest.mark.parametrize("seed", range(5))
def test_auprc_scores_match_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    conf = rng.integers(0, 6, 80) / 5.0
    correct = (rng.random(80) < 0.2 + 0.6 * conf).astype(int)
    assert auprc_correct_score(conf, correct) == pytest.approx(
        average_precision_score(correct, conf), abs=1e-12)
    assert auprc_error_score(conf, correct) == pytest.approx(
        average_precision_score(1 - correct, -conf), abs=1e-12)


def test_spearman_score_matches_scipy(rng):
    conf, quality = np.round(rng.random(40), 1), rng.random(40)
    assert spearman_score(conf, quality) == pytest.approx(stats.spearmanr(conf, quality).statistic)


def test_nll_loss_matches_sklearn(rng):
    conf, correct = _tied_data(rng)
    conf = np.clip(conf, 0.05, 0.95)
    assert nll_loss(conf, correct) == pytest.approx(log_loss(correct, conf))


def test_nll_loss_certain_and_wrong_is_infinite():
    assert nll_loss([1.0, 0.0], [1, 0]) == 0.0
    assert nll_loss([1.0, 0.5], [0, 1]) == math.inf


def test_brier_loss_hand_computed():
    # (0.2² + 0.3² + 0.5²) / 3 = (0.04 + 0.09 + 0.25) / 3
    assert brier_loss([0.8, 0.3, 0.5], [1, 0, 1]) == pytest.approx(0.38 / 3)


# ------------------------------------------------------------------------------ PRR


def test_prr_score_hand_computed():
    # n = 4, max_rejection = 0.5 → K = 2. Least confident first: 0.2(y=0), 0.5(1), 0.7(0), 0.9(1).
    # q(0) = 2/4, q(1) = 2/3 (drop the 0), q(2) = 1/2 (drop the 0 and a 1)
    # → A = (1/2 + 2/3 + 1/2)/3 = 5/9
    # oracle drops both 0s: q = 1/2, 2/3, 1 → A* = 13/18; random A = 1/2
    # PRR = (5/9 − 1/2) / (13/18 − 1/2) = (1/18) / (4/18) = 0.25
    assert prr_score([0.2, 0.9, 0.5, 0.7], [0, 1, 1, 0]) == pytest.approx(0.25)


def test_prr_score_hand_computed_ties():
    # 0.1(y=0) first, then a tie {0.5: y=1, 0.5: y=0} holding mean 1/2 at each position,
    # then 0.9(y=1).
    # q(0) = 1/2, q(1) = 2/3, q(2) = (2 − 0 − 1/2)/2 = 3/4 → A = (1/2 + 2/3 + 3/4)/3 = 23/36
    # A* = 13/18 (as above) → PRR = (23/36 − 1/2) / (13/18 − 1/2) = (5/36) / (8/36) = 0.625,
    # the mean of the two tie orders: 0.25 (the 1 rejected first) and 1.0 (the 0 rejected first).
    assert prr_score([0.5, 0.5, 0.9, 0.1], [1, 0, 1, 0]) == pytest.approx(0.625)


def test_prr_score_max_rejection_changes_the_area():
    # K = floor(0.25 · 4) = 1: A = (1/2 + 2/3)/2, A* the same → PRR = 1
    assert prr_score([0.2, 0.9, 0.5, 0.7], [0, 1, 1, 0], max_rejection=0.25) == pytest.approx(1.0)


def _polygraph_prr(confidence, correct, max_rejection=0.5):
    """LM-Polygraph's PredictionRejectionArea(max_rejection) normalised against its oracle
    and (here exactly) its random baseline: the area averages q(k) over k = 0 .. K - 1."""
    conf, y = np.asarray(confidence, float), np.asarray(correct, float)
    n = len(y)
    k_rej = int(max_rejection * n)

    def area(order):  # order: most confident first, as Polygraph sorts its uncertainty
        kept = np.cumsum(y[order])[-k_rej:] / np.arange(n - k_rej + 1, n + 1)
        return kept[::-1].sum() / k_rej

    scorer, oracle = area(np.argsort(-conf)), area(np.argsort(-y, kind="stable"))
    return (scorer - y.mean()) / (oracle - y.mean())


def test_prr_score_is_not_polygraphs_estimator():
    # The hand-computed case above: Polygraph averages q(0), q(1) only (K = 2 rejections
    # allowed, the last left out): A = (1/2 + 2/3)/2 = A*, so its PRR is 1.0, not 0.25.
    assert _polygraph_prr([0.2, 0.9, 0.5, 0.7], [0, 1, 1, 0]) == pytest.approx(1.0)
    assert prr_score([0.2, 0.9, 0.5, 0.7], [0, 1, 1, 0]) == pytest.approx(0.25)
    # Without ties, Polygraph's figure at r is confide's at max_rejection = (⌊rn⌋ − 1)/n,
    # and the two agree at r = 1.
    rng = np.random.default_rng(5)
    for n in (20, 50, 51):
        conf, y = rng.random(n), (rng.random(n) < 0.4).astype(float)
        y[:2] = [0, 1]
        k = int(0.5 * n)
        assert _polygraph_prr(conf, y) == pytest.approx(prr_score(conf, y,
                                                                  max_rejection=(k - 1) / n))
        assert _polygraph_prr(conf, y, 1.0) == pytest.approx(prr_score(conf, y,
                                                                       max_rejection=1.0))


def test_prr_score_too_few_items_to_reject_is_undefined():
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(prr_score([0.2, 0.9, 0.5], [0, 1, 1], max_rejection=0.3))


@pytest.mark.parametrize("seed", range(3))
def test_prr_score_oracle_is_one(seed):
    rng = np.random.default_rng(seed)
    quality = rng.random(30)
    assert prr_score(quality, quality) == pytest.approx(1.0)
    binary = (quality > 0.5).astype(float)
    assert prr_score(binary, binary) == pytest.approx(1.0)  # ties within classes only


def test_prr_score_random_is_zero_on_average(rng):
    correct = (rng.random(50) < 0.6).astype(float)
    correct[:2] = [0, 1]
    values = [prr_score(rng.permutation(50).astype(float), correct) for _ in range(2000)]
    assert abs(np.mean(values)) < 0.03


def test_prr_score_constant_confidence_is_zero():
    # One tie group: every position holds the mean, exactly the random curve.
    assert prr_score(np.ones(6), [0, 1, 1, 0, 1, 1]) == pytest.approx(0.0)


def _mean_over_tie_orders(fn, conf: np.ndarray, correct: np.ndarray, **options) -> float:
    """Brute force: average ``fn`` over every permutation used to break confidence ties."""
    values = []
    for perm in itertools.permutations(range(conf.size)):
        order = np.lexsort((np.array(perm), conf))   # by confidence, ties by the permutation
        strict = np.empty(conf.size)
        strict[order] = np.arange(conf.size)         # strictly increasing, same order otherwise
        values.append(fn(strict, correct, **options))
    return float(np.mean(values))


@pytest.mark.parametrize(("fn", "options"), [
    (prr_score, {}), (prr_score, {"max_rejection": 0.8}), (aurc_loss, {}), (eaurc_loss, {}),
    (risk_at_coverage, {"coverage": 0.5}),
])
def test_selective_metric_tie_handling_equals_brute_force(fn, options):
    conf = np.array([0.3, 0.3, 0.3, 0.7, 0.7, 0.1, 0.9])
    correct = np.array([1.0, 0.0, 0.4, 1.0, 0.0, 0.0, 1.0])
    assert fn(conf, correct, **options) == pytest.approx(
        _mean_over_tie_orders(fn, conf, correct, **options), abs=1e-12)


# --------------------------------------------------------------------- risk–coverage


CONF5 = np.array([0.8, 0.6, 0.4, 0.3, 0.1])
CORRECT5 = np.array([1, 1, 0, 1, 0])


def test_aurc_loss_hand_computed():
    # most confident first: 1, 1, 0, 1, 0 → risk(k) = 0, 0, 1/3, 1/4, 2/5
    # AURC = (0 + 0 + 1/3 + 1/4 + 2/5) / 5 = 59/300
    assert aurc_loss(CONF5, CORRECT5) == pytest.approx(59 / 300)


def test_eaurc_loss_hand_computed():
    # oracle order 1, 1, 1, 0, 0 → risk = 0, 0, 0, 1/4, 2/5 → AURC* = 13/100
    assert eaurc_loss(CONF5, CORRECT5) == pytest.approx(59 / 300 - 13 / 100)
    assert eaurc_loss(CORRECT5, CORRECT5) == pytest.approx(0.0)


def test_risk_at_coverage_hand_computed():
    assert risk_at_coverage(CONF5, CORRECT5, coverage=0.6) == pytest.approx(1 / 3)  # k = 3
    assert risk_at_coverage(CONF5, CORRECT5, coverage=0.5) == pytest.approx(1 / 3)  # k = ⌈2.5⌉
    assert risk_at_coverage(CONF5, CORRECT5, coverage=1.0) == pytest.approx(2 / 5)


def test_coverage_at_risk_score_hand_computed():
    # risk(k) ≤ 0.3 at k = 1, 2, 4 → 4/5; risk 0 only up to k = 2 → 2/5
    assert coverage_at_risk_score(CONF5, CORRECT5, risk=0.3) == pytest.approx(0.8)
    assert coverage_at_risk_score(CONF5, CORRECT5, risk=0.0) == pytest.approx(0.4)
    assert coverage_at_risk_score(CONF5, np.zeros(5), risk=0.5) == 0.0  # never within risk


def test_accuracy_at_fractions_hand_computed():
    table = accuracy_at_fractions(CONF5, CORRECT5, fractions=(0.2, 0.6, 0.8, 1.0))
    assert table == pytest.approx({0.2: 1.0, 0.6: 2 / 3, 0.8: 3 / 4, 1.0: 3 / 5})
    assert accuracy_at_fractions(CONF5, CORRECT5)[1.0] == accuracy_score(CONF5, CORRECT5)
    assert len(accuracy_at_fractions(CONF5, CORRECT5)) == 10


# ----------------------------------------------------------------------- calibration


def test_calibration_error_hand_computed():
    # width 0.2: 0.05, 0.15 → bin 0 (Σy − Σp = 1 − 0.2); 0.55 → bin 2 (1 − 0.55);
    # 0.65 → bin 3 (0 − 0.65); 0.95 → bin 4 (1 − 0.95); ECE = (0.8+0.45+0.65+0.05)/5 = 0.39
    conf = [0.05, 0.15, 0.55, 0.65, 0.95]
    assert calibration_error(conf, [0, 1, 1, 0, 1], n_bins=5) == pytest.approx(0.39)


def test_calibration_error_bin_edges():
    # 0.25 → bin 2, 0.3 → bin 3 (left-closed bins): (|0 − 0.25| + |1 − 0.3|) / 2 = 0.475
    assert calibration_error([0.3, 0.25], [1, 0]) == pytest.approx(0.475)
    # 1.0 falls in the last bin together with 0.95: |1 − 1.95| / 2
    assert calibration_error([1.0, 0.95], [1, 0]) == pytest.approx(0.475)


def test_mass_calibration_error_hand_computed():
    # two bins {0.1, 0.2}: |1 − 0.3| and {0.3, 0.4}: |1 − 0.7| → (0.7 + 0.3) / 4 = 0.25
    value = mass_calibration_error([0.1, 0.2, 0.3, 0.4], [0, 1, 0, 1], n_bins=2)
    assert value == pytest.approx(0.25)
    # n = 3, 2 bins: {0.1, 0.5} gap |0 − 0.6|, {0.9} gap |1 − 0.9| → 0.7 / 3
    assert mass_calibration_error([0.1, 0.5, 0.9], [0, 0, 1], n_bins=2) == pytest.approx(0.7 / 3)


def test_adaptive_calibration_error_hand_computed():
    # class "correct", ranges {0.1, 0.5}: |0 − 0.3| and {0.9}: |1 − 0.9| → mean 0.2
    # class "wrong" (p' = 1 − p, ranges by p'): items p = 0.9, 0.5 → p' 0.1, 0.5, labels 0, 1:
    # |0.5 − 0.3|;
    # {0.9}: |1 − 0.9| → mean 0.15;  ACE = (0.2 + 0.15) / 2 = 0.175
    assert adaptive_calibration_error([0.1, 0.5, 0.9], [0, 0, 1], n_bins=2) == pytest.approx(0.175)


def test_calibration_metrics_perfect_probabilities(rng):
    conf = np.repeat([0.0, 0.5, 1.0], 4)
    correct = np.array([0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1])
    for fn in (calibration_error, mass_calibration_error, adaptive_calibration_error):
        assert fn(conf, correct) == pytest.approx(0.0)


def test_bas_score_hand_computed():
    # t = 1/8, 3/8, 5/8, 7/8; wrong-answer cost t/(1−t) = 1/7, 3/5, 5/3, 7
    # 0.8 (right): +1 at the first three t; 0.5 (wrong): −1/7, −3/5; 0.3 (wrong): −1/7
    # mean utility per t: (1 − 2/7)/3 = 5/21, (1 − 3/5)/3 = 2/15, 1/3, 0 → BAS = 37/210
    assert bas_score([0.8, 0.5, 0.3], [1, 0, 0], n_thresholds=4) == pytest.approx(37 / 210)


def test_bas_score_abstaining_scores_zero():
    assert bas_score([0.0, 0.0, 0.0], [1, 0, 1]) == 0.0


def test_bas_score_fine_grid_tends_to_integral(rng):
    # ∫_0^p 1 dt = p for a right answer; ∫_0^p −t/(1−t) dt = p + ln(1 − p) for a wrong one
    conf = rng.random(30) * 0.95
    correct = (rng.random(30) < 0.5).astype(float)
    limit = np.mean(correct * conf + (1 - correct) * (conf + np.log1p(-conf)))
    assert bas_score(conf, correct, n_thresholds=20000) == pytest.approx(limit, abs=1e-3)


def test_bas_score_prefers_truthful_confidence(rng):
    truth = rng.random(4000)
    correct = (rng.random(4000) < truth).astype(float)
    assert bas_score(truth, correct) > bas_score(np.clip(truth + 0.2, 0, 1), correct)


# ------------------------------------------------------------------ rank calibration


def test_rank_calibration_error_hand_computed():
    # bins (low → high confidence) {0.1, 0.2}: reg 1, {0.8, 0.9}: reg 1/2, mass 1/2 each
    # low bin: P(reg' ≥ 1) = 1/2, P(c' ≥ c) = 1 → 1/2; high bin: 1 vs 1/2 → 1/2; RCE = 1/2
    assert rank_calibration_error([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 1], n_bins=2) == 0.5


def test_rank_calibration_error_zero_when_bin_accuracy_increases():
    conf = np.arange(8.0)
    # 2 bins: means 1/4 < 3/4; 4 bins on continuous quality: 0.05 < 0.35 < 0.65 < 0.95
    assert rank_calibration_error(conf, [0, 0, 0, 1, 0, 1, 1, 1], n_bins=2) == 0.0
    quality = [0, 0.1, 0.3, 0.4, 0.6, 0.7, 0.9, 1.0]
    assert rank_calibration_error(conf, quality, n_bins=4) == 0.0
    # reversed confidence: bin masses 1/4; |P(reg' >= reg_b) - P(c' >= c_b)| = 3/4, 1/4, 1/4, 3/4
    assert rank_calibration_error(-conf, quality, n_bins=4) == pytest.approx(0.5)


# --------------------------------------------------------------------- cross-fitting


@pytest.mark.parametrize("method", ["isotonic", "platt", "histogram"])
def test_crossfit_probabilities_never_uses_own_label(method, rng):
    # each fold's probabilities come from a calibrator fitted on the other folds only
    score = rng.normal(size=40)
    correct = (rng.random(40) < 1 / (1 + np.exp(-2 * score))).astype(float)
    out = crossfit_probabilities(score, correct, method=method, n_folds=4, seed=3)
    assert ((out >= 0) & (out <= 1)).all()
    for train, test in crossfit_splits(correct, n_folds=4, seed=3):
        params = fit_calibration(score[train], correct[train], method=method)
        np.testing.assert_allclose(out[test], np.clip(apply_calibration(method, params,
                                                                        score[test]), 0, 1))


def test_crossfit_splits_is_the_one_fold_rule():
    # K = min(n_folds, correct, wrong); stratified: each test fold holds both classes
    correct = np.r_[np.ones(3), np.zeros(9)]
    splits = crossfit_splits(correct, n_folds=5, seed=0)
    assert len(splits) == 3
    tests = np.sort(np.concatenate([test for _, test in splits]))
    assert tests.tolist() == list(range(12))
    for train, test in splits:
        assert not set(train) & set(test)
        assert correct[test].sum() == 1 and correct[train].min() == 0 < correct[train].max()
    folds = crossfit_folds(correct, n_folds=5, seed=0)
    assert [set(np.flatnonzero(folds == k)) for k in range(3)] == [set(t) for _, t in splits]
    assert CrossfitCV(5, seed=0).get_n_splits(None, correct) == 3
    # continuous quality is stratified as right at >= 0.5
    assert len(crossfit_splits([0.9, 0.6, 0.2, 0.1, 0.7, 0.4], n_folds=5)) == 3


def test_crossfit_splits_needs_two_of_each_class():
    with pytest.raises(InvalidInputError, match="2 correct and 2 wrong"):
        crossfit_splits([1, 1, 1, 0])
    with pytest.raises(InvalidInputError, match="2 correct and 2 wrong"):
        crossfit_probabilities([0.1, 0.2, 0.3, 0.4], [1, 1, 1, 0])


def test_crossfit_probabilities_seeded(rng):
    score = rng.normal(size=50)
    correct = (rng.random(50) < 0.5).astype(float)
    first = crossfit_probabilities(score, correct, seed=1)
    np.testing.assert_array_equal(first, crossfit_probabilities(score, correct, seed=1))
    platt = crossfit_probabilities(score, correct, method="platt", n_folds=2, seed=1)
    assert platt.shape == (50,)


def test_crossfit_probabilities_feed_calibration_metrics(rng):
    score = rng.normal(size=200) * 5 - 20          # raw log-probability-like scores
    correct = (rng.random(200) < 1 / (1 + np.exp(-(score + 20) / 5))).astype(float)
    with pytest.raises(InvalidInputError, match="crossfit_probabilities"):
        calibration_error(score, correct)
    assert calibration_error(crossfit_probabilities(score, correct), correct) < 0.2


def test_crossfit_probabilities_omit_keeps_alignment(rng):
    score = rng.normal(size=30)
    score[4] = np.nan
    correct = (rng.random(30) < 0.5).astype(float)
    out = crossfit_probabilities(score, correct, nan_policy="omit")
    assert math.isnan(out[4]) and np.isfinite(np.delete(out, 4)).all()
    with pytest.raises(InvalidInputError, match="confidence"):
        crossfit_probabilities(score, correct)


@pytest.mark.parametrize(("options", "field"), [
    ({"method": "beta"}, "method"), ({"n_folds": 1}, "n_folds"), ({"n_bins": 0}, "n_bins"),
])
def test_crossfit_probabilities_rejects_bad_options(options, field):
    with pytest.raises(InvalidInputError, match=field):
        crossfit_probabilities(np.arange(10.0), np.arange(10) % 2, **options)


def test_crossfit_probabilities_platt_needs_binary_labels():
    with pytest.raises(InvalidInputError, match="binary"):
        crossfit_probabilities(np.arange(10.0), np.linspace(0, 1, 10), method="platt")


# ------------------------------------------------------------------------- bootstrap


def test_bootstrap_interval_seeded_and_contains_point(rng):
    conf, correct = _tied_data(rng, 80)
    first = bootstrap_interval("auroc", conf, correct, n_resamples=300, seed=7)
    again = bootstrap_interval("auroc", conf, correct, n_resamples=300, seed=7)
    assert first == again
    assert first.low <= first.point <= first.high
    assert first.point == auroc_score(conf, correct)
    assert bootstrap_interval("auroc", conf, correct, n_resamples=300, seed=8) != first


@pytest.mark.parametrize("name", sorted(METRICS))
def test_bootstrap_interval_every_metric(name, rng):
    conf, correct = _tied_data(rng, 60)
    point, low, high = bootstrap_interval(name, conf, correct, n_resamples=50)
    assert low <= high
    assert point == pytest.approx(METRICS[name].fn(conf, correct))


def test_bootstrap_interval_function_and_options(rng):
    conf, correct = _tied_data(rng, 60)
    by_name = bootstrap_interval("prr", conf, correct, n_resamples=100, max_rejection=0.3)
    by_fn = bootstrap_interval(prr_score, conf, correct, n_resamples=100, max_rejection=0.3)
    assert by_name == by_fn
    assert by_name.point == prr_score(conf, correct, max_rejection=0.3)

    def plain(c, y, *, nan_policy="raise"):   # an unregistered metric is called as given
        return auroc_score(c, y, nan_policy=nan_policy)

    assert bootstrap_interval(plain, conf, correct, n_resamples=100) == bootstrap_interval(
        "auroc", conf, correct, n_resamples=100)


def test_bootstrap_interval_drops_one_class_resamples():
    conf = np.linspace(0, 1, 12)
    correct = np.ones(12)
    correct[3] = 0   # ≈ (11/12)^12 = 35% of resamples miss the one wrong answer → NaN, dropped
    point, low, high = bootstrap_interval("auroc", conf, correct, n_resamples=400)
    assert not math.isnan(low) and low <= point <= high


def test_bootstrap_interval_rejects_bad_level(rng):
    conf, correct = _tied_data(rng)
    with pytest.raises(InvalidInputError, match="level"):
        bootstrap_interval("auroc", conf, correct, level=1.0)
    with pytest.raises(InvalidInputError, match="threshold"):
        bootstrap_interval("auroc", conf, correct, threshold=2.0)


def test_paired_bootstrap_identical_scorers(rng):
    conf, correct = _tied_data(rng, 50)
    result = paired_bootstrap("auroc", conf, conf, correct, n_resamples=200)
    assert result == {"diff": 0.0, "low": 0.0, "high": 0.0, "p_value": 1.0, "n": 50.0}


def test_paired_bootstrap_detects_a_better_scorer(rng):
    correct = (rng.random(150) < 0.5).astype(float)
    good = correct + rng.normal(scale=0.5, size=150)
    noise = rng.normal(size=150)
    result = paired_bootstrap("auroc", good, noise, correct, n_resamples=500, seed=1)
    assert result["diff"] == pytest.approx(auroc_score(good, correct) - auroc_score(noise, correct))
    assert result["low"] > 0 and result["p_value"] < 0.01
    flipped = paired_bootstrap("auroc", noise, good, correct, n_resamples=500, seed=1)
    assert flipped["diff"] == -result["diff"] and flipped["p_value"] == result["p_value"]
    assert paired_bootstrap("auroc", good, noise, correct, n_resamples=500, seed=1) == result


def test_paired_bootstrap_omit_drops_rows_of_either_scorer(rng):
    conf_a, correct = _tied_data(rng, 40)
    conf_b = rng.random(40)
    a, b = conf_a.copy(), conf_b.copy()
    a[3], b[9] = np.nan, np.nan
    keep = np.ones(40, bool)
    keep[[3, 9]] = False
    omitted = paired_bootstrap("brier", a, b, correct, n_resamples=100, nan_policy="omit")
    assert omitted == paired_bootstrap("brier", conf_a[keep], conf_b[keep], correct[keep],
                                       n_resamples=100)
    with pytest.raises(InvalidInputError, match="confidence"):
        paired_bootstrap("brier", a, b, correct)


# ------------------------------------------------------------------------ curves and bins


def test_risk_coverage_curve_mean_is_aurc(rng):
    conf, correct = _tied_data(rng, 70)
    coverage, risk = risk_coverage_curve(conf, correct)
    assert coverage[-1] == 1.0 and risk.mean() == pytest.approx(aurc_loss(conf, correct))


def test_reliability_diagram_bins_are_those_of_calibration_error(rng):
    p, y = rng.random(500), (rng.random(500) < 0.5).astype(float)
    d = reliability_diagram(p, y)
    used = d.counts > 0
    gap = np.sum(d.counts[used] * np.abs(d.accuracy[used] - d.mean_confidence[used])) / 500
    assert gap == pytest.approx(calibration_error(p, y))
    with pytest.raises(InvalidInputError, match="probabilities"):
        reliability_diagram([0.5, 1.5], [1, 0])


def test_paired_bootstrap_of_two_runs_hand_computed():
    # run A right on items 0,1; run B right on item 0 only: accuracy difference 1/4
    zeros = [0.0] * 4
    d = paired_bootstrap("accuracy", zeros, zeros, [1, 1, 0, 0], correct_b=[1, 0, 0, 0],
                         n_resamples=200)
    assert d["diff"] == 0.25 and d["n"] == 4
    assert d["low"] <= 0.25 <= d["high"]


def test_paired_bootstrap_of_two_runs_point_is_metric_difference(rng):
    ca, cb = rng.random(60), rng.random(60)
    ya, yb = (rng.random(60) < ca).astype(float), (rng.random(60) < 0.5).astype(float)
    d = paired_bootstrap("auroc", ca, cb, ya, correct_b=yb, n_resamples=100, seed=3)
    assert d["diff"] == pytest.approx(auroc_score(ca, ya) - auroc_score(cb, yb))
    assert 0 <= d["p_value"] <= 1 and d["low"] <= d["high"]
    with pytest.raises(InvalidInputError, match="conf_b"):
        paired_bootstrap("auroc", ca, cb, ya, correct_b=yb[:5])


def test_every_public_name_is_importable_from_the_package():
    import confide.metrics as metrics
    from confide.metrics import bootstrap, calibration, core, crossfit, ranking, selective

    for module in (core, ranking, selective, calibration, crossfit, bootstrap):
        for name in module.__all__:
            assert not name.startswith("_")
            if module is not core and name not in ("Method", "DEFAULT_FOLDS", "CrossfitCV",
                                                   "check_calibration_data", "uniform_bins"):
                assert getattr(metrics, name) is getattr(module, name), name
    assert sorted(metrics.__all__) == sorted(set(metrics.__all__))
