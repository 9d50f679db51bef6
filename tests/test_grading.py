"""Graders: hand-made positive and negative cases, and the registry contract."""

from __future__ import annotations

import pytest

from confide.errors import InvalidInputError, UnknownNameError
from confide.grading import GRADERS, contains, exact, grade, normalize_answer
from confide.records import Item


def item(*refs: str, **metadata: object) -> Item:
    return Item(id="q1", prompt="?", references=list(refs), metadata=dict(metadata))


@pytest.mark.parametrize(("text", "expected"), [
    ("The Beatles!", "beatles"),
    ("  an  Apple a day ", "apple day"),
    ("Pelé", "pele"),
    ("Horſe", "horse"),                  # long s folds (NFKC)
    ("ＰＡＲＩＳ", "paris"),             # full-width
    ("Straße", "strasse"),               # casefold
    ("東京", "東京"),                     # other scripts kept
    ("Jay-Z", "jayz"),                   # SQuAD deletes punctuation
    ("1,000", "1000"),
    ("🐎", ""),
    ("theatre", "theatre"),              # articles only as whole words
])
def test_normalize_answer_cases(text, expected):
    assert normalize_answer(text) == expected


def test_exact_matches_any_alias_after_normalisation():
    assert exact("the Onion.", item("Onion", "Allium cepa")) == 1.0
    assert exact("ALLIUM  cepa", item("Onion", "Allium cepa")) == 1.0
    assert exact("It is an onion", item("Onion")) == 0.0
    assert exact("Pele", item("Pelé")) == 1.0


def test_contains_whole_word_alias():
    it = item("Onion", "Allium cepa")
    assert contains("I think it is the onion.", it) == 1.0
    assert contains("Species: allium cepa", it) == 1.0
    assert contains("Onionskin paper", it) == 0.0
    assert contains("A leek", it) == 0.0


def test_contains_unicode_and_empty_references():
    assert contains("It was 東京.", item("東京")) == 1.0
    assert contains("a horse", item("🐎", "Horse")) == 1.0
    assert contains("anything at all", item("🐎")) == 0.0  # empty normalised ref never matches


@pytest.mark.parametrize("name", sorted(GRADERS))
def test_grader_rejects_item_without_references(name):
    with pytest.raises(InvalidInputError, match="'q1'"):
        GRADERS[name].fn("Paris", Item(id="q1", prompt="?", references=[]))


@pytest.mark.parametrize("name", sorted(GRADERS))
def test_grader_registered_with_summary_and_docs(name):
    spec = GRADERS[name]
    assert spec.name == name and spec.summary
    doc = spec.fn.__doc__ or ""
    assert "References" in doc


def test_grade_dispatches_and_unknown_name_suggests():
    assert grade("Paris", item("Paris"), "exact") == 1.0
    with pytest.raises(UnknownNameError, match="contains"):
        grade("Paris", item("Paris"), "contain")
