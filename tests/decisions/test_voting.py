from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta

from confide.core.errors import InvalidInputError
from confide.core.records import Item, Record
from confide.decisions import (
    adaptive_vote,
    cisc_vote,
    compare_votes,
    majority_vote,
    replay_adaptive,
)
from confide.decisions.adaptive import leader_probability
from confide.decisions.voting import cisc_weights, sample_confidences
from tests.decisions.helpers import generation, write_run


def test_majority_vote_counts_and_breaks_ties_by_first_appearance():
    assert majority_vote([0, 1, 1, 2]) == 1
    assert majority_vote([2, 1, 1, 2, 0]) == 2  # 2 and 1 tie; 2 appears first
    assert majority_vote([5]) == 5
    with pytest.raises(InvalidInputError, match="labels"):
        majority_vote([])


def test_cisc_weights_hand_computed():
    w = cisc_weights([-1.0, -2.0, -1.0], 0.5)
    e = np.exp([-2.0, -4.0, -2.0])
    np.testing.assert_allclose(w, e / e.sum())
    np.testing.assert_allclose(cisc_weights([-1.0, -np.inf], 1.0), [1.0, 0.0])
    np.testing.assert_allclose(cisc_weights([-np.inf, -np.inf], 1.0), [0.5, 0.5])
    with pytest.raises(InvalidInputError, match="temperature"):
        cisc_weights([0.0], 0.0)


def test_cisc_vote_on_hand_made_clusters():
    labels = [0, 0, 1]
    conf = [-2.0, -2.0, -0.1]
    # T = 0.5: weights ∝ e^-4, e^-4, e^-0.2 → cluster 1 has 0.957 > 0.043
    assert cisc_vote(labels, conf, temperature=0.5) == 1
    # T large: weights ≈ 1/3 each → majority
    assert cisc_vote(labels, conf, temperature=1e6) == majority_vote(labels) == 0
    # T = 2: e^-1 * 2 = 0.736 vs e^-0.05 = 0.951 → cluster 1
    assert cisc_vote(labels, conf, temperature=2.0) == 1
    # T = 5: 2 e^-0.4 = 1.341 vs e^-0.02 = 0.980 → cluster 0
    assert cisc_vote(labels, conf, temperature=5.0) == 0
    with pytest.raises(InvalidInputError, match="2 confidences"):
        cisc_vote([0, 1, 1], [0.0, 0.0], temperature=1.0)


def _sampled_record(i: int, answers: list[tuple[str, list[float]]], reference: str,
                    greedy: str) -> Record:
    item = Item(id=f"q{i}", prompt=f"question {i}?", references=[reference])
    return Record(item=item, greedy=generation(greedy, [-0.5]),
                  samples=[generation(t, lp) for t, lp in answers],
                  scores={"msp": 0.5}, grades={"contains": float(reference in greedy)})


@pytest.fixture
def vote_run(tmp_path):
    records = [
        # majority says Lyon (2 of 3) but the one confident sample says Paris
        _sampled_record(0, [("Paris", [-0.05]), ("Lyon", [-2.0, -1.5]), ("lyon.", [-1.8])],
                        "Paris", greedy="Lyon"),
        # unanimous and right
        _sampled_record(1, [("Rome", [-0.1])] * 5, "Rome", greedy="Rome"),
        # majority right, one confident wrong sample
        _sampled_record(2, [("Oslo", [-0.9]), ("Oslo", [-1.0]), ("Bergen", [-0.01])], "Oslo",
                        greedy="Oslo"),
    ]
    return write_run(tmp_path / "votes", records)


def test_compare_votes_on_stored_samples(vote_run):
    out = compare_votes(vote_run, temperature=0.1, temperatures=(100.0,))
    assert out.n == 3 and out.k == 5 and out.judge == "exact" and out.grader == "contains"
    assert out.greedy == pytest.approx(2 / 3)
    assert out.majority == pytest.approx(2 / 3)  # wrong on q0
    # T = 0.1 over response probabilities: q0 → Paris (e^(0.95/0.1) vs e^(0.17/0.1) +
    # e^(0.17/0.1)): right; q2 → Bergen (e^(0.99/0.1) vs e^(0.41/0.1) + e^(0.37/0.1)): wrong
    assert out.cisc == pytest.approx(2 / 3) and out.changed == 2
    assert out.cisc_by_temperature[100.0] == pytest.approx(out.majority)
    one = compare_votes(vote_run, k=1)
    assert one.k == 1 and one.majority == one.cisc == 1.0  # Paris, Rome, Oslo: all right


def test_compare_votes_needs_samples(tmp_path):
    item = Item(id="a", prompt="q?", references=["x"])
    run = write_run(tmp_path / "r", [Record(item=item, greedy=generation("x", [-1.0]),
                                            scores={"msp": 1.0}, grades={"contains": 1.0})])
    with pytest.raises(InvalidInputError, match="no graded record has samples"):
        compare_votes(run)


def test_sample_confidences_are_response_probabilities():
    # CISC's "response probability", length-normalised: exp(mean log p); empty: 0
    record = _sampled_record(0, [("a", [-1.0, -3.0]), ("", []), ("b", [-0.5])], "a",
                             greedy="a")
    np.testing.assert_allclose(sample_confidences(record), [math.exp(-2.0), 0.0,
                                                            math.exp(-0.5)])


def test_cisc_softmax_is_over_probabilities_not_log_probabilities():
    # issue 12: Taubenfeld et al. (2025) normalise the response probability. One sample
    # of p = e^-1 against two of p = e^-3, T = 0.5:
    # probabilities: e^(0.368/0.5) = 2.09 < 2 e^(0.0498/0.5) = 2.21 -> the pair wins;
    # log-probabilities would give e^-2 = 0.135 > 2 e^-6 = 0.005 -> the single sample
    record = _sampled_record(0, [("a", [-1.0]), ("b", [-3.0]), ("b", [-3.0])], "a",
                             greedy="a")
    conf = sample_confidences(record)
    assert cisc_vote([0, 1, 1], conf, temperature=0.5) == 1
    assert cisc_vote([0, 1, 1], np.log(conf), temperature=0.5) == 0


# ------------------------------------------------------------------------- adaptive


def test_leader_probability_matches_beta_survival():
    for v1, v2 in [(1, 0), (4, 0), (5, 1), (7, 3), (3, 3)]:
        assert leader_probability(v1, v2) == pytest.approx(beta.sf(0.5, v1 + 1, v2 + 1))
    assert leader_probability(4, 0) == 1 - 0.5**5
    assert leader_probability(3, 3) == pytest.approx(0.5)


def test_adaptive_vote_hand_made():
    # unanimous: P = 1 - 0.5^(v+1) >= 0.95 first at v = 4
    assert adaptive_vote([0] * 10, confidence=0.95) == (0, 4)
    # 0,0,1,0,0,0,0: after 7 samples v = (6, 1): P = beta.sf(.5, 7, 2) = 0.965
    assert beta.sf(0.5, 6, 2) < 0.95 <= beta.sf(0.5, 7, 2)
    assert adaptive_vote([0, 0, 1, 0, 0, 0, 0, 0], confidence=0.95) == (0, 7)
    # rounds of 3: checked only after 3 and 6 samples
    assert adaptive_vote([0] * 10, confidence=0.95, round_size=3) == (0, 6)
    # budget
    assert adaptive_vote([0, 1, 0, 1, 0], confidence=0.99, max_samples=3) == (0, 3)
    with pytest.raises(InvalidInputError, match="confidence"):
        adaptive_vote([0], confidence=1.0)
    with pytest.raises(InvalidInputError, match="round_size"):
        adaptive_vote([0], round_size=0)


def test_replay_adaptive_on_stored_samples(vote_run):
    report = replay_adaptive(vote_run, levels=(0.7, 0.95))
    assert report.n == 3 and report.max_k == 3  # the shortest sample list bounds k
    # fixed k over (Paris, Lyon, lyon.), (Rome x3), (Oslo, Oslo, Bergen)
    assert report.fixed_accuracy == {1: 1.0, 2: 1.0, 3: pytest.approx(2 / 3)}
    # C = 0.7: one sample already gives P = 0.75 → stop at 1 everywhere, all right
    assert report.adaptive[0.7] == (1.0, 1.0)
    assert report.matched_k[0.7] == 1 and report.saved[0.7] == 0.0
    # C = 0.95: never decisive within 3 samples → all 3 (same as fixed k = 3)
    acc, used = report.adaptive[0.95]
    assert used == 3.0 and acc == pytest.approx(2 / 3)
    assert report.matched_k[0.95] == 1 and report.saved[0.95] == -2.0
    assert not math.isnan(report.saved[0.95])
