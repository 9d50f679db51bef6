r"""Grading claims: each claim of an answer right or wrong, and the answer's grade from them.

Two sources of truth:

* a **grader** (:data:`~confide.grading.GRADERS`; ``judge`` by default, the
  LLM-as-a-judge through any backend) grades each claim against the item's
  references, or against a knowledge text (the item's ``metadata["knowledge"]``
  field, or one passed in) when there is one: the claim is the proposed
  answer and the knowledge text the reference;
* **user labels**: a data file's ``claims`` field lists claims with a label
  each (:func:`confide.tasks.files.claim_labels` checks it, naming file, line
  and field). A claim of the answer takes the label of the first labelled
  claim the run's equivalence judge finds equivalent to it; a claim matching
  none stays ungraded (it is not guessed).

The answer's grade ``claims`` is the share of its graded claims that are
right (grade at or above 1/2), so the answer counts as correct in the
ordinary table when at least half of its claims are.

References: [1] Min et al., 2023, "FActScore", EMNLP (an answer's factual
precision: the share of its atomic facts supported by a knowledge source).
"""

from __future__ import annotations

import math
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Claim, Item, Record
from confide.grading import GRADERS, grade

__all__ = ["ANSWER_GRADE", "LABELS", "answer_grade", "grade_claims"]

#: The answer-level grade derived from claim grades.
ANSWER_GRADE = "claims"
#: The claim "grader" that reads the user's labels.
LABELS = "labels"


def answer_grade(claims: list[Claim], grader: str) -> float:
    r"""Share of the graded claims that are right.

    .. math:: g = \frac{1}{|G|}\sum_{C \in G} [\,g(C) \ge \tfrac12\,]

    over the claims :math:`G` with a grade; NaN when none has one.

    >>> answer_grade([Claim("a", 0, 1, grades={"judge": 0.9}),
    ...               Claim("b", 2, 3, grades={"judge": 0.2})], "judge")
    0.5
    """
    graded = [c.grades[grader] for c in claims if grader in c.grades]
    if not graded:
        return math.nan
    return sum(g >= 0.5 for g in graded) / len(graded)


def _reference_item(item: Item, knowledge: str | None) -> Item:
    text = knowledge if knowledge is not None else item.metadata.get("knowledge")
    if isinstance(text, str) and text.strip():
        return Item(item.id, item.prompt, [text.strip()], item.metadata)
    return item


def grade_claims(record: Record, grader: str = "llm", *, backend: Any = None,
                 judge: Any = None, knowledge: str | None = None) -> None:
    """Grade each of ``record.claims`` (``claim.grades[grader]``) and set the answer grade.

    ``grader``: a registered grader, or ``"labels"`` (the item's
    ``metadata["claims"]`` labels, matched with ``judge``). ``backend`` serves
    graders that ask a model (``judge``). An item with neither references,
    knowledge nor labels leaves its claims ungraded. Sets
    ``record.grades["claims"]`` (:func:`answer_grade`) when any claim is graded.
    """
    claims = record.claims or []
    if grader == LABELS:
        labelled = record.item.metadata.get("claims") or []
        if labelled and judge is None:
            raise InvalidInputError("grading by labels needs an equivalence judge",
                                    field="judge")
        for claim in claims:
            for entry in labelled:
                if judge.decide(claim.text, entry["claim"], record.item).equivalent:
                    claim.grades[LABELS] = float(entry["label"])
                    break
    else:
        spec = GRADERS[grader]
        item = _reference_item(record.item, knowledge)
        if item.references:
            options = {"backend": backend} if spec.needs_backend else {}
            for claim in claims:
                claim.grades[grader] = grade(claim.text, item, grader, **options)
    value = answer_grade(claims, grader)
    if not math.isnan(value):
        record.grades[ANSWER_GRADE] = value
