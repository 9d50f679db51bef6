"""Top-k white-box scorers on hand-made alternatives: margin, negentropy, BoostedProb, CCP."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.errors import CannotScore
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.information import (
    boosted_token_probability,
    dominant_cut,
    token_alternatives,
)

TOPK = ["probability_margin", "mean_topk_negentropy", "min_topk_negentropy", "boostedprob",
        "ccp"]


def topk_record(probs, chosen=None, tokens=None, top_tokens=None, text="Paris") -> Record:
    """A greedy answer whose step t lists ``probs[t]`` as its top-k probabilities."""
    top = np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)
    chosen = top[:, 0] if chosen is None else np.log(np.asarray(chosen)).astype(np.float32)
    n = top.shape[0]
    gen = Generation(text=text, token_ids=list(range(n)),
                     tokens=tokens or [f"t{i}" for i in range(n)], token_logprobs=chosen,
                     top_logprobs=top,
                     top_tokens=top_tokens or [[f"a{i}{j}" for j in range(top.shape[1])]
                                               for i in range(n)])
    return Record(Item("x", "Capital of France?", ["Paris"]), gen)


def score(name: str, r: Record) -> float:
    value, reason = run_scorer(SCORERS[name], r, ScoringContext(judge=ExactJudge()))
    assert reason is None, reason
    return value


def test_probability_margin_hand_computed():
    r = topk_record([[0.5, 0.3, 0.2], [0.9, 0.05, 0.05]])
    assert score("probability_margin", r) == pytest.approx((0.2 + 0.85) / 2, rel=1e-6)


def test_topk_negentropy_renormalises_over_the_listed_tokens():
    # step 1 lists 0.4, 0.2, 0.2 (mass 0.8) -> renormalised 0.5, 0.25, 0.25
    r = topk_record([[0.4, 0.2, 0.2], [0.9, 0.05, 0.05]])
    h1 = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    h2 = -(0.9 * math.log(0.9) + 2 * 0.05 * math.log(0.05))
    n1, n2 = 1 - h1 / math.log(3), 1 - h2 / math.log(3)
    assert score("mean_topk_negentropy", r) == pytest.approx((n1 + n2) / 2, rel=1e-5)
    assert score("min_topk_negentropy", r) == pytest.approx(min(n1, n2), rel=1e-5)


def test_topk_negentropy_bounds():
    uniform = topk_record([[0.25] * 4])
    assert score("mean_topk_negentropy", uniform) == pytest.approx(0.0, abs=1e-6)
    point = Record(Item("x", "q"), Generation(
        "a", token_ids=[1], token_logprobs=np.zeros(1, np.float32),
        top_logprobs=np.array([[0.0, -np.inf, -np.inf]], np.float32)))
    assert score("mean_topk_negentropy", point) == pytest.approx(1.0)
    assert score("probability_margin", point) == pytest.approx(1.0)


def test_dominant_cut_difference_jump_rule():
    # drops 0.05 (< 0.3*0.5), 0.446 (jump), 0.001 (< 0.005): dominant = first two
    assert dominant_cut(np.log([0.5, 0.45, 0.004, 0.003])) == 1
    # no jump at all: nothing is dominant
    assert dominant_cut(np.log([0.003, 0.0029, 0.0028])) == -1
    # the last listed token is above epsilon and the unlisted mass is large: unknown
    with pytest.raises(CannotScore, match="beyond the 4 listed alternatives"):
        dominant_cut(np.log([0.3, 0.3, 0.2, 0.1]))
    # unlisted mass 0.002 <= epsilon and 0.198 - 0.002 is a jump: all listed are dominant
    assert dominant_cut(np.log([0.5, 0.3, 0.198])) == 2


def test_boostedprob_hand_computed():
    r = topk_record([[0.5, 0.45, 0.004, 0.003], [0.9, 0.004, 0.003, 0.002]])
    assert score("boostedprob", r) == pytest.approx((0.95 + 0.9) / 2, rel=1e-5)
    # a chosen token outside the dominant group keeps its own probability
    assert boosted_token_probability(math.log(0.003), np.log([0.5, 0.45, 0.004, 0.003])) \
        == pytest.approx(0.003)


def test_boostedprob_refuses_when_the_top_k_is_too_short():
    value, reason = run_scorer(SCORERS["boostedprob"], topk_record([[0.3, 0.3, 0.2, 0.1]]))
    assert math.isnan(value) and "beyond the 4 listed alternatives" in reason
    # the reason says what is missing, not an option no run has
    assert "token_boosted_prob" in reason and "top_k_alternatives" not in reason


def test_boostedprob_reads_the_decoded_column_first():
    # the top-4 alone cannot tell (as above); the column from the whole distribution can
    r = topk_record([[0.3, 0.3, 0.2, 0.1], [0.9, 0.004, 0.003, 0.002]])
    r.greedy.token_boosted_prob = np.array([0.8, 0.9], dtype=np.float32)
    assert score("boostedprob", r) == pytest.approx(0.85, rel=1e-6)
    # it round-trips through the stored form; a record stored before it loads without it
    d = r.greedy.to_dict()
    assert Generation.from_dict(d).token_boosted_prob.tolist() == pytest.approx([0.8, 0.9])
    del d["token_boosted_prob"]
    old = Generation.from_dict(d)
    assert old.token_boosted_prob is None
    value, reason = run_scorer(SCORERS["boostedprob"], Record(r.item, old))
    assert math.isnan(value) and "listed alternatives" in reason


def test_boostedprob_column_of_another_length_is_refused():
    r = topk_record([[0.9, 0.004, 0.003, 0.002]])
    r.greedy.token_boosted_prob = np.array([0.9, 0.5], dtype=np.float32)
    value, reason = run_scorer(SCORERS["boostedprob"], r)
    assert math.isnan(value) and "differ in length" in reason


def test_ccp_hand_computed_with_exact_judge():
    # step 1: chosen "Par" 0.6; " par" 0.2 is equivalent, "Lon" 0.1 is not -> 0.8 / 0.9
    # step 2: chosen "is" 0.5; "IS" 0.3 is equivalent, "." 0.1 is not  -> 0.8 / 0.9
    r = topk_record([[0.6, 0.2, 0.1], [0.5, 0.3, 0.1]], tokens=["Par", "is"],
                    top_tokens=[["Par", " par", "Lon"], ["is", "IS", "."]])
    assert score("ccp", r) == pytest.approx((0.8 / 0.9) ** 2, rel=1e-5)


def test_token_alternatives_are_the_decisions_ccp_sums():
    # the chosen token leaves its own list once; "." and ".\n" both strip to nothing: equivalent
    r = topk_record([[0.6, 0.2, 0.1], [0.5, 0.4, 0.05]], tokens=["Par", "."],
                    top_tokens=[["Par", " par", "Lon"], [".", ".\n", "!x"]])
    steps = token_alternatives(r, ScoringContext(judge=ExactJudge()))
    assert [lp for lp, _ in steps] == pytest.approx(np.log([0.6, 0.5]), rel=1e-5)
    assert [[(t, e) for t, _, e in alts] for _, alts in steps] == [
        [(" par", True), ("Lon", False)], [(".\n", True), ("!x", False)]]
    assert score("ccp", r) == pytest.approx(0.8 / 0.9 * 0.9 / 0.95, rel=1e-5)


def test_ccp_adds_a_chosen_token_missing_from_the_top_k():
    # sampled token "x" (p = 0.05) is not listed; all three listed tokens differ from it
    r = topk_record([[0.6, 0.2, 0.1]], chosen=[0.05], tokens=["x"],
                    top_tokens=[["Paris", "Lyon", "Nice"]])
    assert score("ccp", r) == pytest.approx(0.05 / 0.95, rel=1e-5)


def test_ccp_all_alternatives_equivalent_is_one():
    r = topk_record([[0.5, 0.3]], tokens=["Paris"], top_tokens=[["Paris", " paris"]])
    assert score("ccp", r) == pytest.approx(1.0)


@pytest.mark.parametrize("name", TOPK)
def test_topk_scorers_empty_answer_is_nan_with_reason(name):
    gen = Generation(text="", token_logprobs=np.zeros(0, np.float32),
                     top_logprobs=np.zeros((0, 5), np.float32), top_tokens=[])
    value, reason = run_scorer(SCORERS[name], Record(Item("x", "q"), gen),
                               ScoringContext(judge=ExactJudge()))
    assert math.isnan(value) and "empty answer" in reason


@pytest.mark.parametrize("name", TOPK)
def test_topk_scorers_without_alternatives_are_nan_with_reason(name):
    gen = Generation(text="a", token_ids=[1], tokens=["a"],
                     token_logprobs=np.zeros(1, np.float32))
    value, reason = run_scorer(SCORERS[name], Record(Item("x", "q"), gen),
                               ScoringContext(judge=ExactJudge()))
    assert math.isnan(value) and "alternatives" in reason


@pytest.mark.parametrize("name", TOPK)
def test_topk_scorers_rank_a_peaked_answer_above_a_flat_one(name):
    peaked = topk_record([[0.9, 0.004, 0.003, 0.002]], tokens=["Paris"],
                         top_tokens=[["Paris", "Lyon", "Nice", "Metz"]])
    flat = topk_record([[0.3, 0.29, 0.004, 0.003]], tokens=["Paris"],
                       top_tokens=[["Paris", "Lyon", "Nice", "Metz"]])
    if name == "boostedprob":  # a near-tie is exactly what BoostedProb forgives
        assert score(name, flat) == pytest.approx(0.59, rel=1e-5)
        return
    assert score(name, peaked) > score(name, flat)


@pytest.mark.parametrize("name", TOPK)
def test_topk_scorers_document_formula_and_source(name):
    doc = SCORERS[name].fn.__doc__ or ""
    assert ".. math::" in doc and "References" in doc


@pytest.mark.model
def test_topk_scorers_on_the_real_model(hf_model):
    from confide.backends.base import GenerationSpec

    spec = GenerationSpec(max_new_tokens=8, top_k_alternatives=10)
    results = hf_model.generate(["The capital of France is", "2 + 2 ="], spec, [0, 1])
    for result in results:
        gen = result.greedy
        # greedy decoding: the chosen token is the most likely listed one
        assert np.allclose(gen.top_logprobs[:, 0], gen.token_logprobs, atol=1e-5)
        r = Record(Item("x", "q"), gen)
        for name in TOPK:
            value, reason = run_scorer(SCORERS[name], r, ScoringContext(judge=ExactJudge()))
            assert (0.0 <= value <= 1.0) or (math.isnan(value) and reason)


@pytest.mark.model
def test_boostedprob_has_a_value_on_a_default_triviaqa_run(hf_model, tmp_path):
    """The reproduction of the defect: a default TriviaQA run (its prompt, stop and token
    budget; 10 stored alternatives). The rule on the top-10 left 38 of 40 answers NaN;
    the column computed while decoding gives every answer a value."""
    from confide.pipeline.plan import RunConfig
    from confide.runs.execution import execute
    from confide.runs.stored import open_run

    execute(RunConfig(limit=40, scorers=("boostedprob",)), tmp_path / "run", backend=hf_model)
    records = open_run(tmp_path / "run").records
    assert len(records) == 40
    valued = [r for r in records if not math.isnan(r.scores["boostedprob"])]
    assert len(valued) >= 0.95 * len(records), {r.item.id: r.score_errors for r in records}
    assert all(0.0 <= r.scores["boostedprob"] <= 1.0 for r in valued)
    assert all(r.greedy.top_logprobs.shape[1] == 10 for r in records if r.greedy.n_tokens)
