"""Sampling scorers without a judge: hand-computed values on hand-made sample sets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.records import Generation, Item, Record
from confide.scorers import SCORERS, run_scorer
from confide.scorers.sampling import lexical_similarity, mc_entropy, mc_entropy_normalized


def gen(text: str, logprobs=()) -> Generation:
    lp = np.asarray(logprobs, dtype=np.float32)
    return Generation(text=text, token_ids=list(range(lp.size)),
                      tokens=[f"t{i}" for i in range(lp.size)], token_logprobs=lp)


def record(samples: list[Generation]) -> Record:
    return Record(item=Item("q", "Q?", ["Paris"]), greedy=gen("Paris", [-0.1]), samples=samples)


SAMPLES = [gen("Paris", [-0.1]), gen("paris.", [-0.2, -0.4]), gen("Lyon", [-1.0]),
           gen("Paris", [-0.1]), gen("Marseille", [-2.0])]


def test_mc_entropy_hand_computed():
    # sums: -0.1, -0.6, -1.0, -0.1, -2.0 → mean -3.8 / 5
    assert mc_entropy(record(SAMPLES)) == pytest.approx(-0.76, abs=1e-6)


def test_mc_entropy_normalized_hand_computed():
    # means: -0.1, -0.3, -1.0, -0.1, -2.0 → mean -3.5 / 5
    assert mc_entropy_normalized(record(SAMPLES)) == pytest.approx(-0.7, abs=1e-6)


def test_lexical_similarity_hand_computed():
    # ROUGE-L F: (the cat sat, the cat) LCS 2, P 2/3, R 1 → 0.8; other pairs share nothing
    r = record([gen("The cat sat."), gen("the cat"), gen("A dog")])
    assert lexical_similarity(r) == pytest.approx(0.8 / 3)
    assert lexical_similarity(record([gen("x y"), gen("X, y!")])) == 1.0


def test_lexical_similarity_agrees_with_rouge_score_package():
    from rouge_score import rouge_scorer

    texts = ["the quick brown fox", "a quick brown dog jumps", "the fox", "brown fox quick"]
    ref = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    expected = np.mean([ref.score(a, b)["rougeL"].fmeasure
                        for i, a in enumerate(texts) for b in texts[i + 1:]])
    assert lexical_similarity(record([gen(t) for t in texts])) == pytest.approx(expected)


@pytest.mark.parametrize("name", ["mc_entropy", "mc_entropy_normalized", "lexical_similarity"])
def test_sampling_scorers_need_samples(name):
    value, reason = run_scorer(SCORERS[name], record([]))
    assert math.isnan(value) and "sampled answer" in reason


def test_mc_entropy_without_logprobs_cannot_score():
    value, reason = run_scorer(SCORERS["mc_entropy"], record([Generation(text="Paris")]))
    assert math.isnan(value) and "logprobs" in reason


@pytest.mark.parametrize("name", ["mc_entropy", "mc_entropy_normalized", "lexical_similarity"])
def test_sampling_scorers_declare_samples_and_document_formula(name):
    spec = SCORERS[name]
    assert spec.n_samples == 10
    doc = spec.fn.__doc__ or ""
    assert ".. math::" in doc and "References" in doc


@pytest.mark.parametrize("name", ["mc_entropy", "mc_entropy_normalized"])
def test_an_empty_sample_is_not_certain(name):
    # issue 12: an empty sample got log-likelihood 0 (probability 1); now it has
    # probability 0, so the Monte-Carlo estimate is infinite and the record is refused
    r = record([gen("Paris", [-0.1]), gen("", [])])
    value, reason = run_scorer(SCORERS[name], r)
    assert math.isnan(value) and "1 of 2 samples empty" in reason


def test_lexical_similarity_of_empty_samples_is_zero():
    # two empty answers used to count as identical (1, the maximum)
    assert lexical_similarity(record([gen(""), gen("")])) == 0.0
    assert lexical_similarity(record([gen("a b"), gen("a b"), gen(" ")])) == pytest.approx(1 / 3)
