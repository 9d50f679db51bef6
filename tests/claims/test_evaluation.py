"""Claim-level evaluation, with intervals bootstrapped over answers (cluster bootstrap)."""

from __future__ import annotations

import numpy as np
import pytest

from confide.core.errors import InvalidInputError
from confide.core.records import Claim, Generation, Item, Record
from confide.evaluation.claims import evaluate_claims
from confide.grading.claims import ANSWER_GRADE
from confide.metrics import auroc_score, bootstrap_interval, prr_score


def test_grouped_bootstrap_with_one_row_per_group_is_the_plain_bootstrap(rng):
    conf, correct = rng.random(30), rng.random(30) < 0.5
    plain = bootstrap_interval("auroc", conf, correct, n_resamples=300, seed=3)
    grouped = bootstrap_interval("auroc", conf, correct, n_resamples=300, seed=3,
                                 groups=np.arange(30))
    assert grouped == plain


def test_grouped_bootstrap_resamples_answers_not_claims(rng):
    # Every answer's claims are five copies of one claim. Resampling claims treats the
    # copies as independent evidence and narrows the interval five-fold in variance;
    # resampling answers gives exactly the interval of the answers themselves.
    conf, correct = rng.random(25), rng.random(25) < 0.5
    copies_conf, copies_correct = np.repeat(conf, 5), np.repeat(correct, 5)
    groups = np.repeat(np.arange(25), 5)
    by_answer = bootstrap_interval("accuracy", copies_conf, copies_correct, groups=groups,
                                   n_resamples=400, seed=1)
    alone = bootstrap_interval("accuracy", conf, correct, n_resamples=400, seed=1)
    by_claim = bootstrap_interval("accuracy", copies_conf, copies_correct, n_resamples=400,
                                  seed=1)
    assert by_answer == pytest.approx(alone)
    assert by_claim.high - by_claim.low < by_answer.high - by_answer.low


def test_grouped_bootstrap_checks_its_groups():
    with pytest.raises(InvalidInputError, match="groups"):
        bootstrap_interval("auroc", [0.1, 0.9, 0.5], [0, 1, 1], groups=[0, 1])


def test_grouped_bootstrap_drops_the_groups_of_omitted_rows():
    iv = bootstrap_interval("accuracy", [0.1, np.nan, 0.5, 0.7], [0, 1, 1, 1],
                            groups=["a", "a", "b", "c"], nan_policy="omit", n_resamples=50)
    assert iv.point == pytest.approx(2 / 3)


def _records():
    # answer -> claims as (confidence, right)
    answers = [[(0.9, 1), (0.2, 0)], [(0.8, 1), (0.7, 1), (0.1, 0)], [(0.3, 0)],
               [(0.6, 1), (0.4, 0)]]
    records = []
    for n, claims in enumerate(answers):
        record = Record(Item(f"q{n}", "Q?", ["ref"]), Generation(text="x " * 10))
        record.claims = [Claim(f"c{k}", 2 * k, 2 * k + 1, tokens=list(range(k + 1)),
                               scores={"claim_support": c, "claim_mean_logprob": -1 + c},
                               grades={"llm": float(r)})
                         for k, (c, r) in enumerate(claims)]
        record.scores["claim_support.mean"] = float(np.mean([c for c, _ in claims]))
        record.grades[ANSWER_GRADE] = float(np.mean([r for _, r in claims]))
        records.append(record)
    return records, answers


def test_evaluate_claims_points_equal_the_metrics_on_all_claims():
    records, answers = _records()
    conf = np.array([c for a in answers for c, _ in a])
    right = np.array([r for a in answers for _, r in a], dtype=float)
    table = evaluate_claims(records, grader="llm", n_resamples=100)
    assert (table.n_answers, table.n_claims) == (4, 8)
    row = next(r for r in table.rows if r.scorer == "claim_support")
    assert row.metrics["auroc"][0] == pytest.approx(auroc_score(conf, right))
    assert row.metrics["prr"][0] == pytest.approx(prr_score(conf, right))
    assert table.accuracy[0] == pytest.approx(right.mean())
    assert "stratified_auroc" in row.audit and "length_spearman" in row.audit
    assert table.answers is not None and table.answers.grader == ANSWER_GRADE
    assert "claim_support.mean" in [r.scorer for r in table.answers.rows]
    assert table.to_dict()["n_claims"] == 8
    assert table.as_eval_table().n_graded == 8


def test_evaluate_claims_without_grades_says_so():
    records, _ = _records()
    table = evaluate_claims(records, grader="labels", n_resamples=20, answers=False)
    assert table.n_claims == 0 and table.notes
