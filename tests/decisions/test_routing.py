from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.errors import InvalidInputError
from confide.decisions import cascade, cascade_curve, route_models
from tests.decisions.helpers import scored_records, write_run


def test_cascade_curve_hand_computed():
    curve = cascade_curve([0.9, 0.2, 0.6], [1, 0, 0], [1, 1, 0], small_tokens=[2, 2, 2],
                          large_tokens=[10, 20, 30], small_seconds=[1, 1, 1],
                          large_seconds=[3, 3, 3])
    assert curve.thresholds.tolist() == [0.2, 0.6, 0.9, math.inf]
    # tau=0.2: nothing escalated (acc 1/3); 0.6: item 0.2 escalated (large right: 2/3);
    # 0.9: also 0.6 (large wrong: 2/3); inf: all (large 2/3)
    np.testing.assert_allclose(curve.accuracy, [1 / 3, 2 / 3, 2 / 3, 2 / 3])
    np.testing.assert_allclose(curve.escalated, [0, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(curve.tokens, [2, 2 + 20 / 3, 2 + 50 / 3, 2 + 60 / 3])
    np.testing.assert_allclose(curve.seconds, [1, 2, 3, 4])
    assert curve.small_accuracy == pytest.approx(1 / 3)
    assert curve.large_accuracy == pytest.approx(2 / 3)
    assert curve.oracle_accuracy == pytest.approx(2 / 3)


def test_cascade_curve_matches_brute_force(rng):
    n = 50
    conf = rng.integers(0, 10, n).astype(float)  # ties on purpose
    conf[3] = np.nan
    ys, yl = rng.random(n) < 0.4, rng.random(n) < 0.7
    ts, tl = rng.integers(1, 5, n), rng.integers(5, 30, n)
    curve = cascade_curve(conf, ys, yl, small_tokens=ts, large_tokens=tl)
    for tau, acc, tok in zip(curve.thresholds, curve.accuracy, curve.tokens):
        escalate = ~(conf >= tau)  # NaN: always escalated
        assert acc == pytest.approx(np.where(escalate, yl, ys).mean())
        assert tok == pytest.approx((ts + escalate * tl).mean())
    assert curve.escalated[0] == pytest.approx(1 / n)  # only the NaN item


def test_choose_target_accuracy_and_budget():
    curve = cascade_curve([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1], [1, 1, 1, 0],
                          small_tokens=[1, 1, 1, 1], large_tokens=[10, 10, 10, 10])
    # accuracies by tau: 0.2: .5, 0.4: .75, 0.6: .5, 0.9: .75, inf: .75
    np.testing.assert_allclose(curve.accuracy, [0.5, 0.75, 0.5, 0.75, 0.75])
    best = curve.choose(target_accuracy=0.75)
    assert best.threshold == 0.4 and best.tokens == pytest.approx(1 + 10 / 4)
    within = curve.choose(budget=1.0)
    assert within.threshold == 0.2 and within.accuracy == 0.5
    assert curve.choose(budget=100).threshold == 0.4  # most accurate, then cheapest
    with pytest.raises(InvalidInputError, match="no threshold reaches accuracy 0.9"):
        curve.choose(target_accuracy=0.9)
    with pytest.raises(InvalidInputError, match="budget"):
        curve.choose(budget=0.5)
    with pytest.raises(InvalidInputError, match="exactly one"):
        curve.choose()


def test_cascade_from_two_stored_runs_matched_by_id(tmp_path):
    small = scored_records([0.9, 0.1, 0.5, 0.7], [1, 0, 0, 1], tokens=2, seconds=0.5)
    large = scored_records([0.0, 0.0, 0.0, 0.0, 0.0], [1, 1, 1, 0, 1], tokens=6, seconds=2.0)
    large = [large[i] for i in (4, 2, 1, 0)]  # other order, one extra item (q4), no q3
    s = write_run(tmp_path / "small", small, model="tiny")
    la = write_run(tmp_path / "large", large, model="big")
    curve = cascade(s, la, scorer="msp")
    assert curve.n == 3 and curve.n_unmatched == 2  # q3 only in small, q4 only in large
    assert (curve.small, curve.large, curve.scorer, curve.grader) == ("tiny", "big", "msp",
                                                                      "contains")
    # items q0 (0.9, right/right), q1 (0.1, wrong/right), q2 (0.5, wrong/right)
    np.testing.assert_allclose(curve.accuracy, [1 / 3, 2 / 3, 1, 1])
    np.testing.assert_allclose(curve.tokens, [2, 4, 6, 8])
    np.testing.assert_allclose(curve.seconds, [0.5, 0.5 + 2 / 3, 0.5 + 4 / 3, 2.5])
    with pytest.raises(InvalidInputError, match="small run has no scorer 'nope'"):
        cascade(s, la, scorer="nope")


def test_cascade_with_disjoint_items_says_so(tmp_path):
    s = write_run(tmp_path / "s", scored_records([0.5], [1], prefix="a"))
    la = write_run(tmp_path / "l", scored_records([0.5], [1], prefix="b"))
    with pytest.raises(InvalidInputError, match="item ids must match"):
        cascade(s, la)


@pytest.mark.model
def test_route_models_runs_both_models(hf_model, tmp_path):
    """The real bundled model as both tiers on 3 items: the cascade curve is built end to end."""
    curve = route_models(hf_model, hf_model, task="triviaqa", out=tmp_path, limit=3,
                         max_new_tokens=6, scorers=("msp", "mean_logprob"), batch_size=4)
    assert curve.n == 3
    assert (tmp_path / "small" / "run.sqlite").exists()
    assert (tmp_path / "large" / "run.sqlite").exists()
    assert curve.tokens[0] > 0 and curve.tokens[-1] > curve.tokens[0]
    # same model, same greedy answers: escalation never changes accuracy
    np.testing.assert_allclose(curve.accuracy, curve.small_accuracy)
