"""The public Python API on the bundled model."""

from __future__ import annotations

import math

import pytest

import confide
from confide.core.errors import InvalidInputError
from confide.pipeline.plan import DEFAULT_SCORERS


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


def test_top_level_agrees_with_the_api_and_lists_it():
    import confide.api
    import confide.core.errors

    names = set(confide.__all__) - set(confide.core.errors.__all__) - {"__version__"}
    assert names == set(confide.api.__all__)
    assert set(confide.__all__) <= set(dir(confide))


def test_dir_and_public_names_stay_light():
    import subprocess
    import sys

    code = ("import sys, confide; names = dir(confide); "
            "print('confide.api' in sys.modules, 'torch' in sys.modules, 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"
