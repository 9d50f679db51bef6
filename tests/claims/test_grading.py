"""Claim grades: a grader against references or knowledge, or the data file's labels."""

from __future__ import annotations

import json
import math

import pytest

from confide.core.errors import InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.grading.claims import ANSWER_GRADE, answer_grade, grade_claims
from confide.scorers.claim_split import split_claims
from confide.tasks import load_task


def _record(text: str, references=(), metadata=None) -> Record:
    record = Record(Item("x", "Tell me about France.", list(references), metadata or {}),
                    Generation(text=text))
    record.claims = split_claims(record.greedy)
    return record


def test_grader_grades_each_claim_against_the_references():
    record = _record("Paris is the capital. Lyon is the capital.", ["Paris is the capital"])
    grade_claims(record, "exact")
    assert [c.grades["exact"] for c in record.claims] == [1.0, 0.0]
    assert record.grades[ANSWER_GRADE] == 0.5


def test_knowledge_text_replaces_the_references():
    record = _record("Paris is the capital. Lyon is big.", ["unrelated"],
                     {"knowledge": "Lyon is big"})
    grade_claims(record, "exact")
    assert [c.grades["exact"] for c in record.claims] == [0.0, 1.0]
    grade_claims(record, "exact", knowledge="Paris is the capital")
    assert [c.grades["exact"] for c in record.claims] == [1.0, 0.0]


def test_labels_grade_matching_claims_and_leave_others_ungraded():
    labels = [{"claim": "paris is the CAPITAL", "label": 1.0},
              {"claim": "Lyon is the capital.", "label": 0.0}]
    record = _record("Paris is the capital. Lyon is the capital. Nice is warm.",
                     metadata={"claims": labels})
    grade_claims(record, "labels", judge=ExactJudge())
    assert [c.grades.get("labels") for c in record.claims] == [1.0, 0.0, None]
    assert record.grades[ANSWER_GRADE] == 0.5


def test_an_item_without_references_leaves_claims_ungraded():
    record = _record("Paris is the capital.")
    grade_claims(record, "exact")
    assert record.claims[0].grades == {} and ANSWER_GRADE not in record.grades
    assert math.isnan(answer_grade(record.claims, "exact"))


def _write(tmp_path, rows):
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_data_file_claim_labels_are_read(tmp_path):
    path = _write(tmp_path, [{"question": "Where is Paris?", "references": ["France"],
                              "claims": [{"claim": "Paris is in France.", "label": True},
                                         {"claim": "Paris is in Spain.", "label": 0}]}])
    task = load_task(str(path))
    assert task.items[0].metadata["claims"] == [
        {"claim": "Paris is in France.", "label": 1.0}, {"claim": "Paris is in Spain.",
                                                          "label": 0.0}]


@pytest.mark.parametrize(("claims", "message"), [
    ("not json", "not JSON text"),
    ({"claim": "x"}, "must be a list"),
    ([{"label": 1}], "entry 0: needs a non-empty 'claim'"),
    ([{"claim": "ok", "label": 1}, {"claim": "x", "label": "yes"}], "entry 1: 'label'"),
    ([{"claim": "x", "label": 0.5}], "entry 0: 'label'"),
])
def test_bad_claim_labels_name_file_line_and_field(tmp_path, claims, message):
    path = _write(tmp_path, [{"question": "Fine?", "references": ["yes"]},
                             {"question": "Where is Paris?", "references": ["France"],
                              "claims": claims}])
    with pytest.raises(InvalidInputError, match=rf"long\.jsonl:2: claims: .*{message}"):
        load_task(str(path))
