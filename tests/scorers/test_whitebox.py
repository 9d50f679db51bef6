"""White-box scorers on hand-computed token statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.records import Generation, Item, Record
from confide.scorers import SCORERS, run_scorer
from tests.conftest import make_record

LOGP = [math.log(0.5), math.log(0.25), math.log(0.8)]
ENT = [0.1, 0.7, 0.4]
KL = [2.0, 1.0, 3.0]


@pytest.mark.parametrize(("name", "expected"), [
    ("msp", math.log(0.5 * 0.25 * 0.8)),                 # log 0.1
    ("mean_logprob", math.log(0.1) / 3),
    ("min_logprob", math.log(0.25)),
    ("mean_entropy", -(0.1 + 0.7 + 0.4) / 3),             # -0.4
    ("max_entropy", -0.7),
    ("self_certainty", (2.0 + 1.0 + 3.0) / 3),            # 2.0
    ("length", -3.0),
])
def test_whitebox_scorer_hand_computed(name, expected):
    value, reason = run_scorer(SCORERS[name], make_record(LOGP, ENT, KL))
    assert reason is None
    assert value == pytest.approx(expected, rel=1e-6)


def test_self_certainty_matches_kl_definition():
    # KL(U || p) for p = (0.5, 0.25, 0.25): sum_v (1/3) log((1/3) / p_v)
    p = np.array([0.5, 0.25, 0.25])
    kl = float(np.sum((1 / 3) * np.log((1 / 3) / p)))
    # the backend's formula: -log V - mean_v log p_v
    assert -math.log(3) - np.mean(np.log(p)) == pytest.approx(kl)
    value, _ = run_scorer(SCORERS["self_certainty"], make_record([math.log(0.5)], kl=[kl]))
    assert value == pytest.approx(kl)


@pytest.mark.parametrize("name", ["msp", "mean_logprob", "min_logprob", "mean_entropy",
                                  "max_entropy", "self_certainty", "length"])
def test_whitebox_scorer_empty_answer_is_nan_with_reason(name):
    record = make_record([], [], [], text="")
    value, reason = run_scorer(SCORERS[name], record)
    assert math.isnan(value)
    assert "empty answer" in reason


def test_whitebox_scorer_missing_statistic_is_nan_with_reason():
    record = Record(item=Item(id="a", prompt="Q"), greedy=Generation(text="Paris"))
    value, reason = run_scorer(SCORERS["mean_entropy"], record)
    assert math.isnan(value)
    assert "token entropies" in reason


def test_confident_answer_scores_higher_than_hesitant_one():
    sure = make_record([-0.01, -0.02], [0.05, 0.1], [8.0, 7.0])
    unsure = make_record([-2.0, -1.5], [3.0, 2.5], [1.0, 2.0])
    for name in ["msp", "mean_logprob", "min_logprob", "mean_entropy", "max_entropy",
                 "self_certainty"]:
        assert run_scorer(SCORERS[name], sure)[0] > run_scorer(SCORERS[name], unsure)[0], name


def test_every_scorer_documents_formula_and_reference():
    for spec in SCORERS.values():
        doc = spec.fn.__doc__ or ""
        assert ".. math::" in doc, spec.name
        assert "References" in doc, spec.name
