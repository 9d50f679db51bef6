"""Reading answers: tokenisers and word-overlap similarities shared by graders and scorers."""

from __future__ import annotations

import pytest

from confide.text import (
    answer_tokens,
    collapse_whitespace,
    normalize_answer,
    rouge_l_f1,
    rouge_tokens,
    token_f1,
)


def test_tokenisers_differ_only_in_articles_and_punctuation():
    assert answer_tokens("The Jay-Z song!") == ["jayz", "song"]       # SQuAD: punctuation deleted
    assert rouge_tokens("The Jay-Z song!") == ["the", "jay", "z", "song"]  # ROUGE: separators
    assert normalize_answer("The Jay-Z song!") == "jayz song"
    assert collapse_whitespace(" a\t b \n") == "a b"


def test_token_f1_hand_computed():
    # overlap {a, b} = 2; P = 2/3, R = 2/4 -> F1 = 2PR/(P+R) = 4/7
    assert token_f1(["a", "b", "c"], ["a", "b", "d", "e"]) == pytest.approx(4 / 7)
    assert token_f1(["a", "a"], ["a"]) == pytest.approx(2 / 3)  # multiset overlap
    assert token_f1([], ["a"]) == 0.0 and token_f1(["x"], ["a"]) == 0.0


def test_rouge_l_f1_hand_computed():
    # LCS(a b c d, a c e d) = a c d = 3; P = R = 3/4 -> F = 3/4
    assert rouge_l_f1(list("abcd"), list("aced")) == pytest.approx(0.75)
    assert rouge_l_f1(list("ab"), list("ba")) == pytest.approx(0.5)  # order matters
    assert rouge_l_f1([], list("a")) == 0.0 and rouge_l_f1(list("a"), list("b")) == 0.0
    assert rouge_l_f1(list("abc"), list("cab")) == rouge_l_f1(list("cab"), list("abc"))
