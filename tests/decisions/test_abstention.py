from __future__ import annotations

import json
import math

import numpy as np
import pytest

from confide.core.errors import InvalidInputError
from confide.decisions import AbstentionPolicy, Calibrator, abstain_run, fit_abstention, load_policy
from confide.decisions.abstention import binomial_p_value, min_answered
from tests.decisions.helpers import scored_records, write_run


def test_binomial_p_value_matches_direct_sum():
    for k, n, alpha in [(0, 10, 0.1), (3, 20, 0.1), (5, 40, 0.05), (7, 7, 0.3)]:
        direct = sum(math.comb(n, j) * alpha**j * (1 - alpha) ** (n - j) for j in range(k + 1))
        assert float(binomial_p_value(k, n, alpha)) == pytest.approx(direct, rel=1e-10)
    assert float(binomial_p_value(0, 0, 0.1)) == 1.0


def test_min_answered_is_the_first_n_with_zero_error_p_value_below_delta():
    for alpha, delta in [(0.05, 0.05), (0.1, 0.1), (0.2, 0.01), (0.5, 0.5)]:
        n = min_answered(alpha, delta)
        assert (1 - alpha) ** n <= delta < (1 - alpha) ** (n - 1)


def test_threshold_search_hand_made_case():
    # confidences 0..99; the 20 least confident are wrong, the other 80 right
    conf, correct = np.arange(100.0), np.r_[np.zeros(20), np.ones(80)]
    fit = fit_abstention(conf, correct, alpha=0.1, delta=0.1, grid=[70, 50, 30, 10, 0],
                         grid_fraction=0, scorer="msp")
    # λ=70: 0 errors in 30 → p = 0.9^30 = 0.042; λ=50: 0.9^50; λ=30: 0.9^70;
    # λ=10: 10 errors in 90 → p = P(Bin(90, .1) <= 10) > 0.1: stop
    assert fit.n_answered.tolist() == [30, 50, 70, 90, 100]
    assert fit.n_errors.tolist() == [0, 0, 0, 10, 20]
    np.testing.assert_allclose(fit.p_values[:3], [0.9**30, 0.9**50, 0.9**70])
    assert fit.rejected.tolist() == [True, True, True, False, False]
    policy = fit.policy
    assert policy.feasible and policy.threshold == 30.0
    assert policy.coverage == 0.7 and policy.risk == 0.0 and policy.n_answered == 70
    assert policy.p_value == pytest.approx(0.9**70)
    assert policy.risk_upper == pytest.approx(1 - 0.1 ** (1 / 70))  # (1-r)^70 = delta
    assert policy.decide(30.0) == "answer" and policy.decide(29.9) == "abstain"
    assert "error rate among answered items is <= 0.1" in policy.guarantee


def test_fixed_sequence_stops_at_first_failure_even_if_later_passes():
    # λ=3 has 1 error in 2 answered (p large) → stop, although λ=1 alone would pass
    conf = np.r_[np.full(2, 5.0), np.full(100, 1.0)]
    correct = np.r_[[1, 0], np.ones(100)]
    fit = fit_abstention(conf, correct, alpha=0.1, delta=0.1, grid=[3, 1], grid_fraction=0)
    assert fit.p_values[1] <= 0.1 and not fit.policy.feasible


def test_no_threshold_satisfies_alpha_abstains_on_all(tmp_path, rng):
    conf = rng.random(200)
    correct = (rng.random(200) < 0.5).astype(float)  # 50% errors at every threshold
    fit = fit_abstention(conf, correct, alpha=0.05, delta=0.05)
    policy = fit.policy
    assert not policy.feasible and policy.threshold == math.inf and policy.coverage == 0.0
    assert policy.decide(1.0) == "abstain" and not policy.answers([0.5, 1e9]).any()
    assert "abstain on every item" in policy.guarantee
    path = policy.save(tmp_path / "p.json")
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert json.loads(path.read_text())["threshold"] is None
    loaded = load_policy(path)
    assert loaded.threshold == math.inf and loaded.decide(1e9) == "abstain"
    assert math.isnan(loaded.risk) and not loaded.feasible


def test_grid_split_places_thresholds_and_orders_tests(rng):
    conf = rng.random(400)
    correct = (rng.random(400) < 0.6 + 0.4 * conf).astype(float)
    fit = fit_abstention(conf, correct, alpha=0.2, delta=0.1, grid_fraction=0.25, n_grid=50)
    assert fit.policy.n_grid == 100 and fit.policy.n_test == 300
    assert len(fit.thresholds) <= 50
    # tested first where the grid split predicts the smallest p-value: not the top threshold,
    # which answers too few items to reject
    assert fit.thresholds[0] < fit.thresholds.max()
    assert fit.n_answered[0] >= min_answered(0.2, 0.1)
    assert fit.policy.feasible
    assert fit.policy.threshold == fit.thresholds[fit.rejected].min()


def test_fit_abstention_rejects_bad_input():
    with pytest.raises(InvalidInputError, match="alpha"):
        fit_abstention([0.1, 0.2], [0, 1], alpha=0)
    with pytest.raises(InvalidInputError, match="delta"):
        fit_abstention([0.1, 0.2], [0, 1], delta=1.5)
    with pytest.raises(InvalidInputError, match="binary"):
        fit_abstention([0.1, 0.2], [0, 0.5], grid=[0.1], grid_fraction=0)
    with pytest.raises(InvalidInputError, match="NaN"):
        fit_abstention([0.1, float("nan")], [0, 1], grid=[0.1], grid_fraction=0)
    with pytest.raises(InvalidInputError, match="grid_fraction"):
        fit_abstention([0.1, 0.2], [0, 1], grid_fraction=0)


def _true_risk(lam: float) -> float:
    """R(λ) for c ~ U(0, 1), P(wrong | c) = (1 - c) / 2: E[(1 - c) / 2 | c >= λ] = (1 - λ) / 4."""
    return (1.0 - lam) / 4.0 if lam < 1 else 0.0


def test_guarantee_holds_by_simulation_on_known_error_curve():
    """Share of calibration samples whose chosen threshold has true risk > α is <= δ."""
    alpha, delta, trials, n = 0.2, 0.1, 300, 400
    rng = np.random.default_rng(1)
    violations, feasible = 0, 0
    for t in range(trials):
        c = rng.random(n)
        correct = (rng.random(n) >= (1 - c) / 2).astype(float)
        policy = fit_abstention(c, correct, alpha=alpha, delta=delta, seed=t).policy
        if policy.feasible:
            feasible += 1
            violations += _true_risk(policy.threshold) > alpha
    # δ plus three binomial standard errors of the simulated share
    assert violations / trials <= delta + 3 * math.sqrt(delta * (1 - delta) / trials)
    assert feasible / trials > 0.9  # and the procedure is not trivially abstaining


def test_policy_json_round_trip_and_errors(tmp_path):
    policy = AbstentionPolicy("msp", 0.42, 0.1, 0.05, True, 0.6, 0.04, 0.09, 0.01, 60, 2, 100,
                              30, grader="exact", source="runs/x")
    path = policy.save(tmp_path / "policy.json")
    assert load_policy(path) == policy
    d = json.loads(path.read_text())
    for change, field in [({"kind": "x"}, "kind"), ({"alpha": 2}, "alpha"),
                          ({"threshold": None}, "threshold"), ({"feasible": "yes"}, "feasible"),
                          ({"n_test": -1}, "n_test"), ({"scorer": 3}, "scorer"),
                          ({"method": "crc"}, "method")]:
        path.write_text(json.dumps({**d, **change}))
        with pytest.raises(InvalidInputError, match=rf"policy\.json: {field}:"):
            load_policy(path)


def test_abstain_run_with_and_without_calibrator(tmp_path, rng):
    c = rng.random(300)
    correct = (rng.random(300) < 0.5 + 0.5 * c).astype(float)
    records = scored_records(c, correct)
    records[0].scores["msp"] = float("nan")
    run = write_run(tmp_path / "run", records)
    fit = abstain_run(run, "msp", alpha=0.2, delta=0.1)
    assert fit.policy.scorer == "msp" and fit.policy.feasible
    assert fit.policy.extra["n_without_confidence"] == 1
    assert fit.policy.grader == "contains" and fit.policy.source == str(run)
    cal = Calibrator("msp", "platt", {"a": 3.0, "b": -1.0})
    fit_cal = abstain_run(run, "msp", alpha=0.2, delta=0.1, calibrator=cal)
    assert fit_cal.policy.scorer is None and fit_cal.policy.calibrator_scorer == "msp"
    assert 0 < fit_cal.policy.threshold < 1
    with pytest.raises(InvalidInputError, match="calibrator is for scorer 'msp'"):
        abstain_run(run, "other", calibrator=cal)


def test_server_loads_the_policy(tmp_path):
    from confide.serve import decisions as serve_decisions

    policy = AbstentionPolicy(None, 0.7, 0.1, 0.1, True, 0.5, 0.05, 0.09, 0.01, 50, 2, 100, 30,
                              calibrator_scorer="msp")
    loaded = serve_decisions.load_policy(policy.save(tmp_path / "p.json"))
    assert serve_decisions.decide(loaded, {}, 0.8)["decision"] == "answer"
    assert serve_decisions.decide(loaded, {}, 0.6)["decision"] == "abstain"
