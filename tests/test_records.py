"""Item, Generation, Record: the question of an item has one meaning everywhere."""

from __future__ import annotations

import pytest

from confide.core.errors import InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.grading import grading_prompt
from confide.pipeline.answering import check_question
from confide.scorers.reflexive import question_text
from confide.store.run_store import record_row

CHAT = Item("c1", [{"role": "system", "content": "Answer briefly."},
                   {"role": "user", "content": "Capital of France?"},
                   {"role": "assistant", "content": "Paris."},
                   {"role": "user", "content": "And of Italy?"},
                   {"role": "assistant", "content": "It is"}], ["Rome"])


def test_item_question_is_the_text_or_the_last_user_message():
    assert Item("t", "Who wrote Hamlet?").question == "Who wrote Hamlet?"
    assert CHAT.question == "And of Italy?"  # not the system prompt, nor the last message
    assert Item("s", [{"role": "system", "content": "Be brief."}]).question == ""


def test_every_reader_of_the_question_gets_item_question():
    assert "Question: And of Italy?\n" in str(grading_prompt("Rome", CHAT, chat=False))
    assert question_text(CHAT) == "And of Italy?"
    assert record_row(Record(CHAT, Generation(text="Rome")))["question"] == "And of Italy?"


def test_an_item_without_a_question_is_refused():
    check_question(CHAT)
    with pytest.raises(InvalidInputError, match="'s'"):
        check_question(Item("s", [{"role": "system", "content": "Be brief."}]))
    with pytest.raises(InvalidInputError, match="empty question"):
        check_question(Item("e", [{"role": "user", "content": "  "},
                                  {"role": "assistant", "content": "Hi"}]))
