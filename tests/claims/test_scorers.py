"""Each claim scorer on a hand-computed case."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.errors import CannotScore
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.claim_split import split_claims
from confide.scorers.claims import aggregate_claims, claim_p_true_prompt

TOKENS = ["Paris", " is", " big", ".", " Lyon", " is", " small", "."]
LOGP = np.log([0.6, 0.9, 0.5, 0.8, 0.4, 0.9, 0.7, 0.95])
ENT = np.array([1.0, 0.2, 1.5, 0.3, 2.0, 0.1, 0.9, 0.05])
KL = np.array([5.0, 8.0, 4.0, 7.0, 3.0, 9.0, 6.0, 10.0])
TOP = [["Paris", "paris", "Lyon"], [" is", " was"], [" big", " large", " Big"], [".", "!"],
       [" Lyon"], [" is"], [" small"], ["."]]
TOP_P = [[0.6, 0.1, 0.2], [0.9, 0.05], [0.5, 0.3, 0.1], [0.8, 0.1], [0.4], [0.9], [0.7], [0.95]]


def _generation(text: str = "Paris is big. Lyon is small.") -> Generation:
    width = max(map(len, TOP))
    top = np.full((len(TOP), width), -np.inf, dtype=np.float32)
    for t, row in enumerate(TOP_P):
        top[t, :len(row)] = np.log(row)
    return Generation(text=text, token_ids=list(range(8)), tokens=list(TOKENS),
                      token_logprobs=LOGP.astype(np.float32),
                      token_entropies=ENT.astype(np.float32),
                      token_kl_uniform=KL.astype(np.float32), top_logprobs=top,
                      top_tokens=[list(r) + [""] * (width - len(r)) for r in TOP])


def _record(samples=()) -> Record:
    gen = _generation()
    record = Record(Item("x", "Tell me about two cities."), gen,
                    [Generation(text=s) for s in samples])
    record.claims = split_claims(gen)
    return record


def _scores(name, record, ctx=None):
    ctx = ctx or ScoringContext(judge=ExactJudge())
    return run_scorer(SCORERS[name], record, ctx, claims=record.claims)


def test_claims_of_the_hand_record():
    record = _record()
    assert [(c.text, c.tokens) for c in record.claims] == [
        ("Paris is big.", [0, 1, 2, 3]), ("Lyon is small.", [4, 5, 6, 7])]


@pytest.mark.parametrize(("name", "expected"), [
    ("claim_mean_logprob", [np.mean(LOGP[:4]), np.mean(LOGP[4:])]),
    ("claim_min_logprob", [math.log(0.5), math.log(0.4)]),
    ("claim_mean_entropy", [-(1.0 + 0.2 + 1.5 + 0.3) / 4, -(2.0 + 0.1 + 0.9 + 0.05) / 4]),
    ("claim_self_certainty", [(5 + 8 + 4 + 7) / 4, (3 + 9 + 6 + 10) / 4]),
])
def test_token_statistic_scorers_by_hand(name, expected):
    got = _scores(name, _record())
    assert [v for v, _ in got] == pytest.approx(expected, rel=1e-6)
    assert all(why is None for _, why in got)


def test_ccp_by_hand():
    # Token 0: "paris" keeps the meaning (same normalised text), "Lyon" does not:
    # (0.6 + 0.1) / (0.6 + 0.1 + 0.2). Token 1: " was" changes it: 0.9 / 0.95.
    # Token 2: " Big" keeps, " large" changes: (0.5 + 0.1) / (0.5 + 0.3 + 0.1).
    # Token 3: "!" keeps (punctuation is normalised away): 1. Second claim: no alternatives.
    (first, why), (second, _) = _scores("claim_ccp", _record())
    assert why is None
    assert first == pytest.approx((0.7 / 0.9) * (0.9 / 0.95) * (0.6 / 0.9) * 1.0, rel=1e-6)
    assert second == pytest.approx(1.0)


def test_ccp_without_a_judge_or_alternatives_is_nan_with_a_reason():
    got = _scores("claim_ccp", _record(), ScoringContext())
    assert all(math.isnan(v) and "judge" in why for v, why in got)
    record = _record()
    record.greedy.top_tokens = None
    assert all(math.isnan(v) and "alternatives" in why for v, why in _scores("claim_ccp", record))


def test_support_by_hand():
    # Claim 1 "Paris is big." is a sentence of sample 1 only: 1/3. Claim 2 "Lyon is small."
    # matches sample 2 and, after normalisation, sample 3: 2/3. The empty sample supports nothing.
    record = _record(["Paris is big. It is old.", "Lyon is small.", "lyon is SMALL!", ""])
    got = _scores("claim_support", record)
    assert [v for v, _ in got] == pytest.approx([1 / 4, 2 / 4])
    assert math.isnan(_scores("claim_support", _record())[0][0])


class _FixedYesNo:
    """A test fake backend: P(next token) fixed per prompt, so P(True) is hand-computed."""

    name, capabilities, has_chat_template = "fake", frozenset(), False

    def __init__(self, p_true: dict[str, float]) -> None:
        self.p_true, self.prompts = p_true, []

    def next_token_logprobs(self, prompts, candidates):
        self.prompts += prompts
        rows = []
        for prompt in prompts:
            p = next(v for claim, v in self.p_true.items()
                     if f"Claim from the proposed answer: {claim}\n" in prompt)
            rows.append([math.log(p / 4) if c.strip().lower() == "true"
                         else math.log((1 - p) / 8) for c in candidates])
        return np.array(rows)


def test_p_true_by_hand():
    # Four spellings of True share p, four of False share (1 - p) / 2: renormalised,
    # P(True) = p / (p + (1 - p) / 2).
    backend = _FixedYesNo({"Paris is big.": 0.6, "Lyon is small.": 0.2})
    got = _scores("claim_p_true", _record(), ScoringContext(backend=backend))
    assert [v for v, _ in got] == pytest.approx([0.6 / 0.8, 0.2 / 0.6])
    assert backend.prompts[0] == claim_p_true_prompt(
        "Tell me about two cities.", "Paris is big. Lyon is small.", "Paris is big.",
        chat=False)
    no_backend = _scores("claim_p_true", _record())
    assert all(math.isnan(v) and "backend" in why for v, why in no_backend)


def test_a_claim_without_tokens_is_nan_with_a_reason():
    record = _record()
    record.claims[1].tokens = []
    (first, _), (second, why) = _scores("claim_mean_logprob", record)
    assert not math.isnan(first) and math.isnan(second) and "no answer token" in why


def test_scorer_values_that_are_not_finite_become_nan():
    record = _record()
    record.greedy.token_logprobs[5] = -np.inf
    (first, _), (second, why) = _scores("claim_mean_logprob", record)
    assert not math.isnan(first) and math.isnan(second) and "not finite" in why


def test_aggregates_skip_nan_and_share_only_for_probabilities():
    assert aggregate_claims("claim_mean_logprob", [-1.0, math.nan, -3.0]) == {
        "claim_mean_logprob.min": -3.0, "claim_mean_logprob.mean": -2.0}
    out = aggregate_claims("claim_p_true", [math.nan])
    assert all(math.isnan(v) for v in out.values()) and "claim_p_true.share" in out


def test_run_scorer_turns_a_claim_scorers_cannot_score_into_reasons():
    def broken(record, claims, ctx):
        raise CannotScore("not today")

    spec = SCORERS["claim_mean_logprob"]
    from dataclasses import replace

    got = run_scorer(replace(spec, fn=broken), _record(), claims=_record().claims)
    assert got == [(got[0][0], "not today")] * 2 and math.isnan(got[0][0])


def test_claim_scorers_sit_in_the_one_registry_at_claim_level():
    from confide.scorers import scorers_at

    claim_level = {s.name for s in scorers_at("claim")}
    assert claim_level == {n for n in SCORERS if n.startswith("claim_")}
    assert all(SCORERS[n].level == "claim" and SCORERS[n].family == "claims"
               for n in claim_level)
    assert not claim_level & {s.name for s in scorers_at("answer")}


def test_an_empty_claim_gets_nan_with_the_reason_and_never_reaches_the_scorer():
    from dataclasses import replace

    from confide.core.records import Claim
    from confide.scorers.base import EMPTY_CLAIM

    seen = []

    def spy(record, claims, ctx):
        seen.extend(c.text for c in claims)
        return [1.0] * len(claims)

    record = _record()
    claims = [record.claims[0], Claim(text="  ", start=13, end=15), record.claims[1]]
    got = run_scorer(replace(SCORERS["claim_mean_logprob"], fn=spy), record, claims=claims)
    assert got[0] == (1.0, None) and got[2] == (1.0, None)
    assert math.isnan(got[1][0]) and got[1][1] == EMPTY_CLAIM
    assert seen == ["Paris is big.", "Lyon is small."]


def test_claims_of_an_empty_answer_get_nan_with_the_reason():
    from confide.scorers.base import EMPTY_ANSWER

    record = _record()
    record.greedy = Generation(text=" ")
    got = run_scorer(SCORERS["claim_support"], record, claims=record.claims)
    assert len(got) == 2 and all(math.isnan(v) and why == EMPTY_ANSWER for v, why in got)


def test_a_scorer_of_the_wrong_level_is_refused_naming_the_level():
    from confide.core.errors import UnknownNameError
    from confide.pipeline.scorer_plan import plan_scorers
    from confide.runs.claims import ClaimConfig
    from confide.scorers import scorer_at

    with pytest.raises(UnknownNameError, match="'claim_support' is a claim-level scorer"):
        plan_scorers(["msp", "claim_support"], frozenset({"samples"}))
    with pytest.raises(UnknownNameError, match="'msp' is an answer-level scorer"):
        ClaimConfig(scorers=("msp",))
    with pytest.raises(UnknownNameError, match="Did you mean 'claim_support'"):
        scorer_at("claim_suport", "claim")
    with pytest.raises(TypeError, match="claim-level"):
        run_scorer(SCORERS["claim_support"], _record())
    with pytest.raises(TypeError, match="answer-level"):
        run_scorer(SCORERS["msp"], _record(), claims=_record().claims)
