"""Refining answers: claims below the threshold are dropped or marked, never one above it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confide import refine
from confide.core.errors import InvalidInputError
from confide.core.records import Claim, Generation, Item, Record
from confide.decisions.refining import MARK, fit_claim_calibrator
from confide.scorers.claim_split import split_claims


def _record(text: str, confidences, name="claim_support") -> Record:
    record = Record(Item("x", "Q?"), Generation(text=text))
    record.claims = split_claims(record.greedy)
    for claim, value in zip(record.claims, confidences, strict=True):
        claim.scores[name] = value
    return record


def test_refine_drops_claims_below_the_threshold():
    record = _record("Paris is big. Lyon is small. Nice is warm.", [0.9, 0.2, math.nan])
    out = refine(record, 0.5)
    assert out.text == "Paris is big."
    assert [(c.kept, c.removed) for c in out.claims] == [(True, False), (False, True),
                                                         (False, True)]
    assert out.scorer == "claim_support" and out.n_doubtful == 2


def test_refine_marks_instead_of_dropping():
    out = refine(_record("Paris is big. Lyon is small.", [0.9, 0.2]), 0.5, action="mark")
    assert out.text == f"Paris is big. Lyon is small.{MARK}"


def test_a_doubtful_claim_sharing_a_sentence_with_a_kept_one_is_marked():
    record = Record(Item("x", "Q?"), Generation(text="Paris is big and old. Lyon is small."))
    record.claims = [Claim("Paris is big.", 0, 21, scores={"s": 0.9}),
                     Claim("Paris is old.", 0, 21, scores={"s": 0.1}),
                     Claim("Lyon is small.", 22, 36, scores={"s": 0.1})]
    out = refine(record, 0.5)
    assert out.text == f"Paris is big and old.{MARK}"


def test_refine_with_a_calibrator_uses_calibrated_probabilities():
    records = []
    for n, (conf, right) in enumerate([(0.1, 0), (0.2, 0), (0.3, 1), (0.7, 0), (0.8, 1),
                                       (0.9, 1)]):
        record = _record(f"Claim number {n}.", [conf])
        record.claims[0].grades["llm"] = float(right)
        records.append(record)
    calibrator = fit_claim_calibrator(records, "claim_support", grader="llm")
    out = refine(records[2], 0.4, calibrator=calibrator)
    assert out.claims[0].confidence == pytest.approx(float(calibrator.predict(0.3)))
    assert out.claims[0].kept == (calibrator.predict(0.3) >= 0.4)


def test_refine_refuses_bad_input():
    record = _record("One. Two.", [0.9, 0.1])
    with pytest.raises(InvalidInputError, match="claim_action"):
        refine(record, 0.5, action="delete")
    with pytest.raises(InvalidInputError, match="claim_threshold"):
        refine(record, math.inf)
    with pytest.raises(InvalidInputError, match="no 'claim_p_true' score"):
        refine(record, 0.5, scorer="claim_p_true")
    with pytest.raises(InvalidInputError, match="scored claims"):
        refine(Record(Item("x", "Q?"), Generation(text="One.")), 0.5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(-5, 5), st.just(math.nan)), min_size=1, max_size=8),
       st.floats(-5, 5), st.sampled_from(["drop", "mark"]))
def test_refine_never_drops_a_claim_at_or_above_the_threshold(values, threshold, action):
    sentences = [f"Claim {chr(65 + n)} holds." for n in range(len(values))]
    record = _record(" ".join(sentences), values)
    out = refine(record, threshold, action=action)
    for sentence, value, decision in zip(sentences, values, out.claims):
        if not math.isnan(value) and value >= threshold:
            assert decision.kept and not decision.removed and sentence in out.text
        else:
            assert not decision.kept
            assert (sentence not in out.text) == (action == "drop")
