"""White-box scorers on hand-computed token statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.records import Generation, Item, Record
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


@pytest.mark.parametrize(("name", "field"), [
    ("self_certainty", "kl"), ("mean_entropy", "ent"), ("max_entropy", "ent"),
    ("msp", "logp"), ("mean_logprob", "logp"), ("min_logprob", "logp")])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_token_statistics_are_nan_with_reason(name, field, bad):
    # issue 12: a -inf logit made self-certainty +inf (maximally confident) and the
    # step's entropy NaN
    stats = {"logp": list(LOGP), "ent": list(ENT), "kl": list(KL)}
    stats[field][1] = bad
    value, reason = run_scorer(SCORERS[name], make_record(stats["logp"], stats["ent"],
                                                          stats["kl"]))
    assert math.isnan(value) and "not finite at token 2" in reason


def test_run_scorer_rejects_infinite_values():
    from confide.scorers import ScorerSpec

    for bad in (math.inf, -math.inf, math.nan):
        spec = ScorerSpec(name="t", fn=lambda r, bad=bad: bad, needs=frozenset(), cost="free")
        value, reason = run_scorer(spec, make_record([-0.1]))
        assert math.isnan(value) and "not a finite number" in reason


def test_hf_statistics_survive_a_minus_inf_logit(hf_model):
    # a -inf logit (a banned token): entropy stays finite (0 log 0 = 0), KL(U||p) is +inf
    # and self-certainty refuses instead of reading it as infinitely confident
    import torch

    from confide.backends.base import GenerationSpec

    banned = hf_model.candidate_token_id(" Paris")
    project = hf_model.float32_logits  # where the decoding loop gets its logits
    hf_model.float32_logits = lambda hidden: project(hidden).index_fill(
        -1, torch.tensor([banned]), -math.inf)
    try:
        result = hf_model.generate(["The capital of France is"],
                                   GenerationSpec(max_new_tokens=3), [0])[0]
    finally:
        del hf_model.float32_logits
    gen = result.greedy
    assert np.isfinite(gen.token_entropies).all() and (gen.token_entropies >= 0).all()
    assert np.isposinf(gen.token_kl_uniform).all()
    value, reason = run_scorer(SCORERS["self_certainty"],
                               Record(item=Item("x", "q"), greedy=gen))
    assert math.isnan(value) and "not finite" in reason
    assert run_scorer(SCORERS["mean_entropy"], Record(item=Item("x", "q"), greedy=gen))[1] is None


def test_renyi_negentropy_and_fisher_rao_are_means_of_their_columns():
    r = make_record(LOGP, ENT, KL)
    r.greedy.token_renyi_uniform = np.array([0.5, 1.5, 4.0], dtype=np.float32)
    r.greedy.token_fisher_rao_uniform = np.array([0.2, 0.4, 0.9], dtype=np.float32)
    assert run_scorer(SCORERS["renyi_negentropy"], r)[0] == pytest.approx(2.0)
    assert run_scorer(SCORERS["fisher_rao"], r)[0] == pytest.approx(0.5)


def test_divergences_from_uniform_rank_a_peaked_answer_above_a_flat_one(hf_model):
    """On real generations: the higher the divergences, the lower the entropy."""
    from confide.backends.base import GenerationSpec

    prompts = ["The capital of France is", "My favourite word is"]
    gens = [r.greedy for r in hf_model.generate(prompts, GenerationSpec(max_new_tokens=6),
                                                [0, 0])]
    for g in gens:
        order = np.argsort(g.token_entropies)
        # the most peaked step is the furthest from uniform by both measures
        assert g.token_renyi_uniform[order[0]] >= g.token_renyi_uniform[order[-1]]
        assert g.token_fisher_rao_uniform[order[0]] >= g.token_fisher_rao_uniform[order[-1]]
