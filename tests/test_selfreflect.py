"""SelfReflect: the formula on hand-computed distributions, and the ranking of summaries on
constructed answer sets where the right order is known."""

from __future__ import annotations

import math

import pytest

from confide.core.errors import InvalidInputError
from confide.equivalence.summary import summarize
from confide.evaluation.selfreflect import masked_tasks, selfreflect_distance, total_variation


def test_total_variation_by_hand():
    ln = math.log
    a = [("Paris", ln(0.6)), ("Lyon", ln(0.3)), ("Nice", ln(0.1))]
    b = [("Paris", ln(0.5)), ("Berlin", ln(0.5))]
    # 1/2 (|.6-.5| + |.3-0| + |.1-0| + |0-.5|) = 0.5
    assert total_variation(a, b) == pytest.approx(0.5)
    # tau = 2: p ∝ sqrt(p): a -> (.6^.5, .3^.5, .1^.5)/Z, b -> (.5, .5)
    z = math.sqrt(0.6) + math.sqrt(0.3) + math.sqrt(0.1)
    pa = [math.sqrt(0.6) / z, math.sqrt(0.3) / z, math.sqrt(0.1) / z]
    expected = 0.5 * (abs(pa[0] - 0.5) + pa[1] + pa[2] + 0.5)
    assert total_variation(a, b, temperature=2.0) == pytest.approx(expected)
    assert total_variation(a, a) == 0.0
    # equal token texts are one token
    assert total_variation([("x", ln(0.5)), ("x", ln(0.5))], [("x", 0.0)]) == pytest.approx(0)


def test_masked_tasks_skip_stopwords():
    assert masked_tasks("It was Marie Curie") == ["It was _ Curie", "It was Marie _"]
    assert masked_tasks("") == []


def test_selfreflect_refuses_what_it_cannot_score():
    with pytest.raises(InvalidInputError, match="conditioning"):
        selfreflect_distance(None, "Q?", {"s": "x"}, ["", " "], ["Paris"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="summaries"):
        selfreflect_distance(None, "Q?", {}, ["Paris"], ["Paris"])  # type: ignore[arg-type]


@pytest.mark.model
@pytest.mark.parametrize("question, answers, wrong", [
    ("What is the capital of France?", ["Paris"] * 6 + ["Lyon"] * 4, "Berlin"),
    ("Which planet is known as the red planet?", ["Mars"] * 6 + ["Jupiter"] * 4, "Venus"),
])
def test_selfreflect_ranks_a_faithful_summary_above_an_unfaithful_one(hf_model, question,
                                                                      answers, wrong):
    conditioning, test = answers[0::2], answers[1::2]  # both halves keep the 60/40 split
    summaries = {"faithful": summarize(conditioning).text, "unfaithful": wrong}
    result = selfreflect_distance(hf_model, question, summaries, conditioning, test)
    assert result.n_tasks == 5 and result.skipped_tasks == 0
    assert 0 <= result.distances["faithful"] < result.distances["unfaithful"] <= 1
