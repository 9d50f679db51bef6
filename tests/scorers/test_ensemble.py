"""Ensemble scorers (Malinin & Gales 2021) on hand-written member distributions; the scorer
plan's rule for member statistics; the run table's total = aleatoric + epistemic note."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from confide.core.needs import Need
from confide.core.records import Generation, Item, MemberStatistics, Record
from confide.evaluation.table import evaluate_records
from confide.pipeline.scorer_plan import (
    ScorerPlan,
    plan_scorers,
    record_capabilities,
    score_record,
)
from confide.scorers import SCORERS, ScoringContext, run_scorer, scorers_at
from confide.scorers.ensemble import (
    SPLITS,
    member_statistics,
    sequence_logprob,
    sequence_rmi,
    sequence_total,
)

ln = math.log
ENS = [s.name for s in scorers_at("answer") if s.family == "ensemble"]
TOKEN = ["ens_total_entropy", "ens_expected_entropy", "ens_mutual_information", "ens_epkl",
         "ens_rmi"]
CHAIN = ["ens_seq_total_entropy", "ens_seq_expected_entropy", "ens_seq_mutual_information",
         "ens_seq_epkl"]
SEQ = ["ens_seq_total_pe", "ens_seq_total_ep", "ens_seq_rmi_pe", "ens_seq_rmi_ep"]
EPISTEMIC = ["ens_mutual_information", "ens_epkl", "ens_rmi", "ens_seq_mutual_information",
             "ens_seq_epkl", "ens_seq_rmi_pe", "ens_seq_rmi_ep"]
ITEM = Item("q", "Capital of France?", ["Paris"])

# 2 members x 2 tokens x a 3-word vocabulary; the answer is word 0 twice.
# Token 1: the members disagree; token 2: they agree.
P = [[[0.5, 0.25, 0.25], [0.8, 0.1, 0.1]],
     [[0.25, 0.5, 0.25], [0.8, 0.1, 0.1]]]
CHOSEN = [0, 0]


def by_hand(p: list[list[list[float]]], chosen: list[int]) -> MemberStatistics:
    """The four statistics straight from their definitions, one sum at a time."""
    m, t_len, v_len = len(p), len(p[0]), len(p[0][0])
    logprobs = [[ln(p[i][t][chosen[t]]) for t in range(t_len)] for i in range(m)]
    entropies = [[-sum(q * ln(q) for q in p[i][t] if q > 0) for t in range(t_len)]
                 for i in range(m)]
    mean_entropy, mean_cross_entropy = [], []
    for t in range(t_len):
        bar = [sum(p[i][t][v] for i in range(m)) / m for v in range(v_len)]
        mean_entropy.append(-sum(q * ln(q) for q in bar if q > 0))
        mean_cross_entropy.append(-sum(bar[v] * sum(ln(p[i][t][v]) for i in range(m)) / m
                                       for v in range(v_len)))
    return MemberStatistics(np.array(logprobs), np.array(entropies), np.array(mean_entropy),
                            np.array(mean_cross_entropy), method="hand")


def answer(stats: MemberStatistics | None, text: str = "Paris Paris") -> Generation:
    n = 2 if stats is None else stats.logprobs.shape[1]
    return Generation(text=text, token_ids=list(range(n)), tokens=[f"w{i}" for i in range(n)],
                      token_logprobs=np.full(n, -0.5), members=stats)


def score(name: str, record: Record) -> tuple[float, str | None]:
    return run_scorer(SCORERS[name], record, ScoringContext())


def value(name: str, record: Record) -> float:
    got, why = score(name, record)
    assert why is None, (name, why)
    return got


# Token 1 by hand: each member's entropy is 1.5 ln 2; the mean is (3/8, 3/8, 1/4);
# KL(p1 || p2) = KL(p2 || p1) = ln(2) / 4. Token 2: every measure of disagreement is 0.
H1_MEMBER = 1.5 * ln(2)
H1_MEAN = 0.75 * ln(8 / 3) + 0.25 * ln(4)
CE1 = 0.75 * 1.5 * ln(2) + 0.25 * ln(4)
H2 = -(0.8 * ln(0.8) + 0.2 * ln(0.1))
EXPECTED = {  # uncertainties, averaged over the 2 tokens
    "ens_total_entropy": (H1_MEAN + H2) / 2,
    "ens_expected_entropy": (H1_MEMBER + H2) / 2,
    "ens_mutual_information": (H1_MEAN - H1_MEMBER) / 2,
    "ens_epkl": (2 * ln(2) / 4 / 4) / 2,  # 1/M^2 sum over the two ordered unequal pairs
    "ens_rmi": (CE1 - H1_MEAN) / 2,
}


def test_statistics_from_distributions_match_the_definitions():
    hand = by_hand(P, CHOSEN)
    made = member_statistics(np.log(np.array(P)), CHOSEN, method="hand")
    for name in ("logprobs", "entropies", "mean_entropy", "mean_cross_entropy"):
        np.testing.assert_allclose(getattr(made, name), getattr(hand, name), rtol=1e-12)
    assert hand.mean_entropy[0] == pytest.approx(1.0821955, abs=1e-7)
    assert hand.mean_cross_entropy[0] == pytest.approx(1.1263642, abs=1e-7)


@pytest.mark.parametrize("name", TOKEN)
def test_token_measures_hand_computed(name):
    record = Record(ITEM, answer(by_hand(P, CHOSEN)))
    assert value(name, record) == pytest.approx(-EXPECTED[name], rel=1e-12)


def test_total_is_aleatoric_plus_epistemic_and_epkl_is_mi_plus_rmi():
    record = Record(ITEM, answer(by_hand(P, CHOSEN)))
    c = {name: value(name, record) for name in TOKEN}
    assert c["ens_total_entropy"] == pytest.approx(
        c["ens_expected_entropy"] + c["ens_mutual_information"], abs=1e-15)
    assert c["ens_epkl"] == pytest.approx(c["ens_mutual_information"] + c["ens_rmi"], abs=1e-15)
    assert c["ens_mutual_information"] < 0 and c["ens_rmi"] < 0  # the members disagree


def test_members_that_agree_have_no_epistemic_uncertainty():
    same = [P[0], P[0]]
    record = Record(ITEM, answer(by_hand(same, CHOSEN)))
    for name in ("ens_mutual_information", "ens_epkl", "ens_rmi"):
        assert value(name, record) == pytest.approx(0.0, abs=1e-12)
    assert value("ens_total_entropy", record) == value("ens_expected_entropy", record)


# Sequence level: three samples' chosen-token probabilities under 2 members.
# A: the members' products 0.4 and 0.2; B: both 0.05 (disagreeing on each token);
# C: one token.
SAMPLES = {"A": [[0.5, 0.8], [0.25, 0.8]], "B": [[0.5, 0.1], [0.1, 0.5]], "C": [[0.25], [0.5]]}
SEQ_EXPECTED = {
    # PE: sum over tokens of log of the members' mean; EP: log of the mean product
    "ens_seq_total_pe": -(ln(0.375 * 0.8) / 2 + ln(0.3 * 0.3) / 2 + ln(0.375)) / 3,
    "ens_seq_total_ep": -(ln(0.3) / 2 + ln(0.05) / 2 + ln(0.375)) / 3,
    "ens_seq_rmi_pe": ((ln(0.3) - 0.5 * ln(0.08)) / 2 + (ln(0.09) - ln(0.05)) / 2
                       + (ln(0.375) - 0.5 * ln(0.125))) / 3,
    # B's two members give its sequence the same probability: no EP disagreement
    "ens_seq_rmi_ep": ((ln(0.3) - 0.5 * ln(0.08)) / 2 + 0.0
                       + (ln(0.375) - 0.5 * ln(0.125))) / 3,
}


def seq_record() -> Record:
    samples = [answer(MemberStatistics(np.log(np.array(p))), text=f"s{k}")
               for k, p in SAMPLES.items()]
    return Record(ITEM, answer(by_hand(P, CHOSEN)), samples)


@pytest.mark.parametrize("name", SEQ)
def test_sequence_measures_hand_computed(name):
    assert value(name, seq_record()) == pytest.approx(-SEQ_EXPECTED[name], rel=1e-12)


def test_sequence_functions_on_arrays():
    arrays = [np.log(np.array(p)) for p in SAMPLES.values()]
    assert np.exp(sequence_logprob(arrays[1], "pe")) == pytest.approx(0.09)
    assert np.exp(sequence_logprob(arrays[1], "ep")) == pytest.approx(0.05)
    assert sequence_total(arrays, "ep") == pytest.approx(SEQ_EXPECTED["ens_seq_total_ep"])
    assert sequence_rmi(arrays, "pe") == pytest.approx(SEQ_EXPECTED["ens_seq_rmi_pe"])
    with pytest.raises(ValueError, match="posterior"):
        sequence_logprob(arrays[0], "mean")  # type: ignore[arg-type]


def test_chain_rule_measures_average_the_token_measures_over_the_samples():
    agree = [[[0.6, 0.3, 0.1]], [[0.6, 0.3, 0.1]]]  # one token, members identical
    h = -(0.6 * ln(0.6) + 0.3 * ln(0.3) + 0.1 * ln(0.1))
    record = Record(ITEM, answer(None), [answer(by_hand(P, CHOSEN)),
                                         answer(by_hand(agree, [1]), text="s")])
    want = {"ens_seq_total_entropy": (EXPECTED["ens_total_entropy"] + h) / 2,
            "ens_seq_expected_entropy": (EXPECTED["ens_expected_entropy"] + h) / 2,
            "ens_seq_mutual_information": EXPECTED["ens_mutual_information"] / 2,
            "ens_seq_epkl": EXPECTED["ens_epkl"] / 2}
    got = {name: value(name, record) for name in CHAIN}
    for name in CHAIN:
        assert got[name] == pytest.approx(-want[name], rel=1e-12), name
    assert got["ens_seq_total_entropy"] == pytest.approx(
        got["ens_seq_expected_entropy"] + got["ens_seq_mutual_information"], abs=1e-15)


# ----------------------------------------------------------------------- degenerate input


def test_every_ensemble_scorer_is_registered_here():
    assert sorted(ENS) == sorted(TOKEN + CHAIN + SEQ)
    assert {n for split in SPLITS for n in split} <= set(ENS)


@pytest.mark.parametrize("name", ENS)
def test_no_members_gives_nan_with_the_reason(name):
    plain = answer(None)
    value_, why = score(name, Record(ITEM, plain, [replace(plain, text="s")]))
    assert math.isnan(value_) and "no ensemble member statistics" in why


@pytest.mark.parametrize("name", EPISTEMIC)
def test_one_member_has_no_disagreement_to_measure(name):
    one = by_hand(P[:1], CHOSEN)
    record = Record(ITEM, answer(one), [answer(one, text="s")])
    value_, why = score(name, record)
    assert math.isnan(value_) and "at least 2" in why


@pytest.mark.parametrize("name", ["ens_total_entropy", "ens_expected_entropy",
                                  "ens_seq_total_pe", "ens_seq_total_ep"])
def test_one_member_still_has_a_total(name):
    one = by_hand(P[:1], CHOSEN)
    assert math.isfinite(value(name, Record(ITEM, answer(one), [answer(one, text="s")])))


@pytest.mark.parametrize("name", TOKEN + CHAIN)
def test_chosen_token_logprobs_alone_feed_only_the_sequence_probabilities(name):
    only = MemberStatistics(by_hand(P, CHOSEN).logprobs)
    record = Record(ITEM, answer(only), [answer(only, text="s")])
    value_, why = score(name, record)
    assert math.isnan(value_) and "not recorded" in why
    assert math.isfinite(value("ens_seq_rmi_pe", record))


@pytest.mark.parametrize("name", ENS)
def test_an_empty_answer_or_sample_is_never_scored(name):
    full = by_hand(P, CHOSEN)
    empty = Generation(text="", members=MemberStatistics(np.zeros((2, 0)), np.zeros((2, 0)),
                                                         np.zeros(0), np.zeros(0)))
    assert math.isnan(score(name, Record(ITEM, empty, [answer(full, text="s")]))[0])
    value_, why = score(name, Record(ITEM, answer(full), [answer(full, text="s"), empty]))
    if name in SEQ or name in CHAIN:
        assert math.isnan(value_) and "sample 2 is empty" in why
    else:
        assert math.isfinite(value_)  # the greedy answer's tokens alone


@pytest.mark.parametrize("name", ENS)
def test_non_finite_or_misaligned_statistics_are_refused(name):
    full = by_hand(P, CHOSEN)
    broken = replace(full, logprobs=np.array([[np.nan, -0.2], [-1.0, -0.2]]),
                     entropies=np.array([[np.nan, 0.6], [1.0, 0.6]]),
                     mean_entropy=np.array([np.nan, 0.6]))
    value_, why = score(name, Record(ITEM, answer(broken), [answer(broken, text="s")]))
    assert math.isnan(value_) and "NaN" in why
    three = Generation(text="a b c", token_ids=[1, 2, 3], members=full)
    value_, why = score(name, Record(ITEM, three, [three]))
    assert math.isnan(value_) and "cover 2 tokens, the answer has 3" in why


def test_a_token_of_probability_zero_under_one_member():
    lp = np.array([[ln(0.5), -np.inf], [ln(0.25), ln(0.8)]])
    record = Record(ITEM, answer(None), [answer(MemberStatistics(lp), text="s")])
    assert value("ens_seq_total_pe", record) == pytest.approx((ln(0.375) + ln(0.4)) / 2)
    assert value("ens_seq_total_ep", record) == pytest.approx(ln(0.1) / 2)
    value_, why = score("ens_seq_rmi_pe", record)
    assert math.isnan(value_) and "infinite" in why


# ----------------------------------------------------------------------- the scorer plan


def test_the_plan_feeds_ensemble_scorers_only_from_records_with_members():
    specs = [SCORERS[n] for n in ENS]
    plan = ScorerPlan(specs)
    full = by_hand(P, CHOSEN)
    plain = Record(ITEM, answer(None), [answer(None, text="s")])
    assert plan.fed(record_capabilities(plain)) == []
    greedy_only = Record(ITEM, answer(full), [answer(None, text="s")])
    assert sorted(plan.fed(record_capabilities(greedy_only))) == sorted(TOKEN)
    reasons = {spec.name: why for spec, why in plan.split(record_capabilities(greedy_only))}
    assert "not every sample has member_entropies" in reasons["ens_seq_mutual_information"]
    logprobs_only = MemberStatistics(full.logprobs)
    imported = Record(ITEM, answer(logprobs_only), [answer(logprobs_only, text="s")])
    assert sorted(plan.fed(record_capabilities(imported))) == sorted(SEQ)
    both = Record(ITEM, answer(full), [answer(full, text="s")])
    assert sorted(plan.fed(record_capabilities(both))) == sorted(ENS)


def test_score_record_stores_nan_with_why_for_a_record_without_members():
    record = Record(ITEM, answer(None))
    score_record(record, ScorerPlan([SCORERS["ens_total_entropy"]]), ScoringContext())
    assert math.isnan(record.scores["ens_total_entropy"])
    assert "this record has no member_entropies" in record.score_errors["ens_total_entropy"]


def test_a_backend_without_members_skips_them_with_the_reason():
    usable, skipped = plan_scorers(["ens_rmi", "ens_seq_total_pe"],
                                   {Need.TOKEN_LOGPROBS, Need.SAMPLES})
    assert usable == []
    assert "member_entropies" in skipped["ens_rmi"]
    assert "member_logprobs" in skipped["ens_seq_total_pe"]


# ----------------------------------------------------------------------- the run table


def test_the_table_shows_total_as_aleatoric_plus_epistemic():
    rng = np.random.default_rng(0)
    records = []
    for i in range(12):
        p = rng.dirichlet(np.ones(3), size=(2, 2)).tolist()
        record = Record(Item(f"q{i}", "?", ["a"]), answer(by_hand(p, [0, 1])))
        for name in SPLITS[0]:
            record.scores[name] = value(name, record)
        record.grades["exact"] = float(i % 3 == 0)
        records.append(record)
    table = evaluate_records(records, grader="exact", n_resamples=20)
    note = next(n for n in table.notes if n.startswith("Ensemble split"))
    u = {n: -np.mean([r.scores[n] for r in records]) for n in SPLITS[0]}
    assert "over the 12 items" in note
    assert f"total {u['ens_total_entropy']:.4g} (ens_total_entropy)" in note
    assert f"aleatoric {u['ens_expected_entropy']:.4g} (ens_expected_entropy)" in note
    assert f"epistemic {u['ens_mutual_information']:.4g} (ens_mutual_information)" in note
    without = evaluate_records(records, grader="exact", scorers=["ens_total_entropy"],
                               n_resamples=20)
    assert not any(n.startswith("Ensemble split") for n in without.notes)
