"""CoCoA variants, semantic density, SentenceSAR, cosine consistency and EigenScore by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.consistency import EIGENSCORE_ALPHA, eigenscore_key
from confide.scorers.relevance import SAR_TEMPERATURE

SAMPLED = ["cocoa", "cocoa_ppl", "cocoa_mte", "semantic_density", "sentence_sar",
           "cosine_consistency", "consistency_confidence", "label_prob", "eigenscore",
           "bertscore_consistency"]


def gen(text: str, logprobs=(-0.5,), entropies=None, hidden=None) -> Generation:
    lp = np.asarray(logprobs, dtype=np.float32)
    return Generation(text=text, token_ids=list(range(lp.size)), tokens=[text] * lp.size,
                      token_logprobs=lp,
                      token_entropies=None if entropies is None else
                      np.asarray(entropies, dtype=np.float32),
                      hidden=hidden)


def record(samples, greedy=None) -> Record:
    return Record(item=Item("q", "What is the capital of France?", ["Paris"]),
                  greedy=greedy or gen("Paris", [-0.5, -0.3], [0.2, 0.6]), samples=samples)


# Under the exact judge the greedy "Paris" agrees with 3 of 5 samples.
SAMPLES = [gen("Paris", [-0.1]), gen("paris.", [-0.2, -0.4]), gen("Lyon", [-1.0]),
           gen("Paris", [-0.1]), gen("Marseille", [-2.0])]


def context(r: Record, vectors=None) -> ScoringContext:
    ctx = ScoringContext(judge=ExactJudge())
    if vectors is not None:  # hand-chosen unit embeddings instead of MiniLM's
        e = np.asarray(vectors, dtype=np.float64)
        ctx.features[(r.item.id, "embeddings:answers")] = e / np.linalg.norm(e, axis=1,
                                                                            keepdims=True)
    return ctx


def score(name: str, r: Record, ctx: ScoringContext | None = None) -> float:
    value, reason = run_scorer(SCORERS[name], r, ctx or context(r))
    assert reason is None, reason
    return value


def test_cocoa_variants_share_the_consistency_part():
    r = record(SAMPLES)
    # mean(1 - W) = 2/5; MSP: u = 0.8; PPL: u = 0.4; MTE: u = mean(0.2, 0.6) = 0.4
    assert score("cocoa", r) == pytest.approx(-0.8 * 0.4, rel=1e-6)
    assert score("cocoa_ppl", r) == pytest.approx(-0.4 * 0.4, rel=1e-6)
    assert score("cocoa_mte", r) == pytest.approx(-0.4 * 0.4, rel=1e-6)


def test_cocoa_full_agreement_is_zero_for_every_variant():
    r = record([gen("Paris"), gen("paris")])
    for name in ("cocoa", "cocoa_ppl", "cocoa_mte"):
        assert score(name, r) == 0.0


def test_semantic_density_hand_computed():
    # distinct sample texts Paris, paris., Lyon, Marseille with mean log-probs
    # -0.1, -0.3, -1, -2 and kernel 1, 1, 0, 0; the greedy adds weight e^-0.4, kernel 1
    w = np.exp([-0.4, -0.1, -0.3, -1.0, -2.0])
    expected = w[:3].sum() / w.sum()
    assert score("semantic_density", record(SAMPLES)) == pytest.approx(expected, rel=1e-6)


def test_semantic_density_counts_a_repeated_sample_once():
    once = record([gen("Lyon", [-1.0])])
    twice = record([gen("Lyon", [-1.0]), gen("Lyon", [-1.0])])
    assert score("semantic_density", once) == pytest.approx(score("semantic_density", twice))


def test_sentence_sar_hand_computed():
    samples = [gen("a", [-1.0]), gen("b", [-2.0]), gen("c", [-1.0, -2.0])]
    r = record(samples)
    # embeddings: greedy, then samples with cosines s12 = 0.6, s13 = 0, s23 = 0.8
    ctx = context(r, [[1, 0], [1, 0], [0.6, 0.8], [0, 1]])
    p = np.exp([-1.0, -2.0, -3.0])
    sim = np.array([[0, 0.6, 0], [0.6, 0, 0.8], [0, 0.8, 0]])
    expected = np.mean(np.log(p + sim @ p / SAR_TEMPERATURE))
    assert score("sentence_sar", r, ctx) == pytest.approx(expected, rel=1e-9)


def test_sentence_sar_does_not_underflow_on_long_samples():
    samples = [gen("a", [-400.0, -400.0]), gen("b", [-400.0, -401.0])]
    r = record(samples)
    ctx = context(r, [[1, 0], [1, 0], [1, 0]])
    # identical embeddings: log(p1 + p2 / t) computed in log space
    expected = np.mean([np.logaddexp(-800, -801 - math.log(SAR_TEMPERATURE)),
                        np.logaddexp(-801, -800 - math.log(SAR_TEMPERATURE))])
    assert score("sentence_sar", r, ctx) == pytest.approx(expected, rel=1e-12)


def test_cosine_consistency_hand_computed():
    r = record([gen("a"), gen("b"), gen("c")])
    ctx = context(r, [[1, 0], [1, 0], [0, 1], [-1, 0]])
    # cosines 1, 0, -1 -> rescaled 1, 0.5, 0
    assert score("cosine_consistency", r, ctx) == pytest.approx(0.5)


def test_consistency_confidence_is_cosine_times_normalised_probability():
    r = record([gen("a"), gen("b"), gen("c")])
    ctx = context(r, [[1, 0], [1, 0], [0, 1], [-1, 0]])
    # cosine consistency 0.5 (as above); greedy mean log-probability (-0.5 - 0.3) / 2
    assert score("consistency_confidence", r, ctx) == pytest.approx(0.5 * math.exp(-0.4))


def test_label_prob_is_the_largest_cluster_frequency():
    assert score("label_prob", record(SAMPLES)) == pytest.approx(3 / 5)
    # an empty sample joins no cluster but counts among the k samples
    with_empty = record([gen("Lyon"), Generation(""), gen("Lyon")])
    assert score("label_prob", with_empty) == pytest.approx(2 / 3)
    assert score("label_prob", record([Generation(""), Generation("")])) == 0.0


def test_empty_samples_count_as_no_agreement_in_cosine_consistency():
    r = record([gen("a"), Generation("")])
    ctx = context(r, [[1, 0], [1, 0], [1, 0]])  # even if "" embedded like the answer
    assert score("cosine_consistency", r, ctx) == pytest.approx(0.5)


def test_eigenscore_hand_computed():
    # d = 2, rows already centred: Z J Z^T = [[2, 4], [4, 8]], eigenvalues 0 and 10
    r = record([gen("a", hidden={"4:last": np.array([1.0, -1.0])}),
                gen("b", hidden={"4:last": np.array([2.0, -2.0])})])
    expected = -(math.log(EIGENSCORE_ALPHA) + math.log(10 + EIGENSCORE_ALPHA)) / 2
    assert score("eigenscore", r) == pytest.approx(expected, rel=1e-9)


def test_eigenscore_agreeing_states_score_higher():
    rng = np.random.default_rng(0)
    base = rng.normal(size=16)
    same = record([gen(str(i), hidden={"4:last": base + 1e-3 * rng.normal(size=16)})
                   for i in range(4)])
    spread = record([gen(str(i), hidden={"4:last": rng.normal(size=16)}) for i in range(4)])
    assert score("eigenscore", same) > score("eigenscore", spread)


def test_eigenscore_key_takes_the_median_layer_or_the_requested_one():
    g = [Generation("a", hidden={"2:last": np.ones(2), "6:last": np.ones(2),
                                 "6:mean": np.ones(2)})]
    assert eigenscore_key(g) == "2:last"  # lower median of two layers
    assert eigenscore_key(g, "6:mean") == "6:mean"


def test_eigenscore_without_hidden_states_is_nan_with_reason():
    value, reason = run_scorer(SCORERS["eigenscore"], record(SAMPLES), context(record(SAMPLES)))
    assert math.isnan(value) and "hidden" in reason


@pytest.mark.parametrize("name", SAMPLED)
def test_sampled_scorers_without_samples_are_nan_with_reason(name):
    r = record([])
    value, reason = run_scorer(SCORERS[name], r, context(r))
    assert math.isnan(value) and "sample" in reason


@pytest.mark.parametrize("name", ["cocoa", "cocoa_ppl", "cocoa_mte", "semantic_density",
                                  "cosine_consistency", "consistency_confidence", "label_prob",
                                  "sentence_sar"])
def test_empty_greedy_answer_is_nan_with_reason(name):
    r = record(SAMPLES, greedy=Generation("", token_logprobs=np.zeros(0, np.float32),
                                          token_entropies=np.zeros(0, np.float32)))
    value, reason = run_scorer(SCORERS[name], r, context(r, [[1, 0]] * 6))
    assert math.isnan(value) and "empty" in reason


@pytest.mark.parametrize("name", ["semantic_density", "sentence_sar", "cocoa_ppl",
                                  "cosine_consistency", "label_prob"])
def test_sampled_scorers_ignore_sample_order(name):
    r = record(SAMPLES)
    vectors = np.random.default_rng(1).normal(size=(6, 4))
    flipped = record(SAMPLES[::-1])
    a = score(name, r, context(r, vectors))
    b = score(name, flipped, context(flipped, np.vstack([vectors[:1], vectors[1:][::-1]])))
    assert a == pytest.approx(b, rel=1e-9)


@pytest.mark.parametrize("name", SAMPLED)
def test_sampled_scorers_document_formula_and_source(name):
    doc = SCORERS[name].fn.__doc__ or ""
    assert ".. math::" in doc and "References" in doc


@pytest.mark.model
def test_sampled_scorers_on_the_real_model(hf_model):
    from confide.backends.base import GenerationSpec

    spec = GenerationSpec(max_new_tokens=8, n_samples=3, hidden_layers=(4, 8))
    result = hf_model.generate(["The capital of France is"], spec, [0])[0]
    r = Record(Item("x", "The capital of France is", ["Paris"]), result.greedy, result.samples)
    ctx = ScoringContext(judge=ExactJudge())
    for name in SAMPLED:
        value, reason = run_scorer(SCORERS[name], r, ctx)
        assert math.isfinite(value), (name, reason)


def test_bertscore_f1_hand_computed():
    from confide.scorers.consistency import bertscore_f1

    a = np.array([[1.0, 0.0], [0.6, 0.8]])
    b = np.array([[0.0, 1.0]])
    # P = (0 + 0.8) / 2 = 0.4, R = max(0, 0.8) = 0.8
    assert bertscore_f1(a, b) == pytest.approx(2 * 0.4 * 0.8 / 1.2)
    assert bertscore_f1(a, np.zeros((0, 2))) == 0.0


def test_bertscore_consistency_on_minilm_tokens():
    from confide.scorers.consistency import bertscore_f1
    from confide.text.embeddings import embed_tokens

    r = record([gen("Paris"), gen("Paris, France"), gen("Lyon"), gen("")])
    value = score("bertscore_consistency", r)
    e = embed_tokens(["Paris", "Paris, France", "Lyon"])
    expected = (1.0 + bertscore_f1(e[0], e[1]) + bertscore_f1(e[0], e[2]) + 0.0) / 4
    assert value == pytest.approx(expected)
    # sharing the key word counts more than a different city
    assert bertscore_f1(e[0], e[1]) > bertscore_f1(e[0], e[2])
    assert score("bertscore_consistency", record([gen("Paris")] * 3)) == pytest.approx(1.0)
