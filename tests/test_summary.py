"""Uncertainty summaries on constructed clusters."""

from __future__ import annotations

import pytest

from confide.equivalence.judges import NumericJudge
from confide.equivalence.summary import summarize


def test_summary_names_the_clusters_by_share():
    samples = ["Paris"] * 6 + ["Lyon", "lyon.", "Lyon"] + ["Nice"]
    s = summarize(samples)
    assert s.text == ("Most likely Paris (about 60%); possibly Lyon (about 30%); "
                      "possibly Nice (about 10%)")  # 10% is not under min_share
    assert [(o.answer, o.count) for o in s.options] == [("Paris", 6), ("Lyon", 2 + 1),
                                                        ("Nice", 1)]
    assert sum(o.share for o in s.options) == pytest.approx(1.0)


def test_summary_uses_the_most_frequent_wording_and_the_judge():
    samples = ["The answer is 42", "42", "forty", "42.0", "It is 7"]
    s = summarize(samples, NumericJudge())
    # 42, 42.0 and "The answer is 42" are one cluster; "42" is its most frequent wording
    assert s.options[0].count == 3 and s.options[0].share == pytest.approx(0.6)
    assert s.text.startswith("Most likely The answer is 42 (about 60%)")


def test_summary_of_agreeing_samples_and_of_empty_answers():
    assert summarize(["Paris"] * 4).text == "Almost certainly Paris (all 4 samples agree)"
    s = summarize(["", " ", "Paris", "Paris"])
    assert s.text == "Most likely no answer (about 50%); possibly Paris (about 50%)"
    with pytest.raises(ValueError):
        summarize([])


def test_summary_gathers_rare_options():
    samples = ["A"] * 17 + ["B", "C", "D"]
    s = summarize(samples, min_share=0.1)
    assert s.text == "Most likely A (about 85%); other answers about 15%"
    assert summarize(samples, min_share=0.05).text.count("possibly") == 3
