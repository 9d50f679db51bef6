"""The public Python API on the bundled model."""

from __future__ import annotations

import math

import pytest

import confide
from confide.errors import InvalidInputError
from confide.runner import DEFAULT_SCORERS


def test_score_answers_with_confidences(hf_model):
    answers = confide.score(hf_model, ["What is the capital of France?", "Who wrote Hamlet?"],
                            max_new_tokens=12)
    assert len(answers) == 2
    for a in answers:
        assert a.answer
        assert set(a.confidences) == set(DEFAULT_SCORERS)
        assert all(not math.isnan(v) for v in a.confidences.values())
        assert a.confidences["msp"] <= a.confidences["mean_logprob"] <= 0


def test_score_rejects_empty_question(hf_model):
    with pytest.raises(InvalidInputError, match="q1"):
        confide.score(hf_model, ["Who wrote Hamlet?", "  "])


def test_public_names_are_exported_and_sorted():
    assert confide.__all__ == sorted(confide.__all__)
    for name in confide.__all__:
        assert getattr(confide, name) is not None
