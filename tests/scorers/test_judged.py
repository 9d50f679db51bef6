"""LLM judges, P(True) variants and BSDetector: prompts, reading, combination, the real model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.backends.base import GenerationResult
from confide.core.errors import CannotScore
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.asking import (
    BSDETECTOR_ALPHA,
    BSDETECTOR_BETA,
    judge_prompt,
    p_true_sampling_prompt,
    parse_categorical,
)

JUDGED = ["llm_judge", "llm_judge_continuous", "judge_panel", "p_true_sampling",
          "p_true_empirical", "bsdetector"]


class ScriptedBackend:
    """Test fake: replies by the template it recognises in the prompt; records every call."""

    has_chat_template = False
    capabilities = frozenset({"extra_prompt", "top_logprobs", "samples"})

    def __init__(self, categorical="Correct", continuous="85", samples=("True", "False"),
                 tops=(("True", 0.6), ("False", 0.2))):
        self.categorical, self.continuous = categorical, continuous
        self.samples, self.tops = samples, tops
        self.prompts: list[str] = []

    def generate(self, prompts, spec, seeds):
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            if not spec.greedy:
                out.append(GenerationResult(None, [Generation(t) for t in
                                                   self.samples[:spec.n_samples]]))
                continue
            if "I am not sure" in prompt:
                text = self.categorical
            elif "0 (lowest) and 100" in prompt:
                text = self.continuous
            else:
                text = self.tops[0][0]
            out.append(GenerationResult(Generation(
                text, token_ids=[1], tokens=[text], top_tokens=[[t for t, _ in self.tops]],
                top_logprobs=np.log([[p for _, p in self.tops]]))))
        return out

    def config(self):
        return {"backend": "scripted"}


SAMPLES = [Generation("Paris"), Generation("paris."), Generation("Lyon"), Generation("Paris"),
           Generation("Marseille")]


def record(samples=SAMPLES, answer="Paris") -> Record:
    return Record(Item("q", "What is the capital of France?", ["Paris"]), Generation(answer),
                  list(samples))


def score(name: str, backend, r: Record | None = None) -> float:
    value, reason = run_scorer(SCORERS[name], r or record(),
                               ScoringContext(backend=backend, judge=ExactJudge()))
    assert reason is None, reason
    return value


@pytest.mark.parametrize(("reply", "expected"), [
    ("Correct", 1.0), ("correct.", 1.0), ("Incorrect", 0.0), ("It is wrong", 0.0),
    ("I am not sure", 0.5), ("uncertain", 0.5), ("That is right", 1.0)])
def test_parse_categorical_reads_uqlm_keywords_in_order(reply, expected):
    assert parse_categorical(reply) == expected


def test_parse_categorical_refuses_unreadable_reply():
    with pytest.raises(CannotScore, match="none of"):
        parse_categorical("Paris is a city")


def test_judge_prompts_carry_question_and_answer():
    text = judge_prompt(record().item, "Lyon", "continuous", chat=False)
    assert text.startswith("Question: What is the capital of France?, Proposed Answer: Lyon.")
    assert "0 (lowest) and 100" in text
    chat = p_true_sampling_prompt(record().item, "Lyon", ["Paris", "Nice"], chat=True)
    assert "brainstormed: Paris, Nice" in chat[0]["content"]


def test_llm_judges_read_the_reply():
    assert score("llm_judge", ScriptedBackend(categorical="Incorrect")) == 0.0
    assert score("llm_judge", ScriptedBackend(categorical="I am not sure")) == 0.5
    assert score("llm_judge_continuous", ScriptedBackend(continuous="85")) == pytest.approx(0.85)


def test_judge_panel_averages_its_members_and_skips_unreadable_ones():
    assert score("judge_panel", ScriptedBackend("Correct", "40")) == pytest.approx(0.7)
    assert score("judge_panel", ScriptedBackend("Correct", "no idea")) == pytest.approx(1.0)
    two = ScriptedBackend("Correct", "40"), ScriptedBackend("Incorrect", "20")
    value, reason = run_scorer(SCORERS["judge_panel"], record(), ScoringContext(
        judge_backends=list(two)))
    assert reason is None and value == pytest.approx((1 + 0.4 + 0 + 0.2) / 4)


def test_judge_panel_with_no_readable_reply_is_nan():
    value, reason = run_scorer(SCORERS["judge_panel"], record(),
                               ScoringContext(backend=ScriptedBackend("Paris", "Paris")))
    assert math.isnan(value) and "no judge" in reason


def test_p_true_sampling_renormalises_and_shows_the_samples():
    backend = ScriptedBackend(tops=(("True", 0.6), ("False", 0.2), ("Maybe", 0.1)))
    assert score("p_true_sampling", backend) == pytest.approx(0.75)
    # listed in sorted order, so the value does not depend on the order of sampling
    assert "brainstormed: Lyon, Marseille, Paris, Paris, paris." in backend.prompts[0]


def test_p_true_empirical_is_the_share_of_true_replies():
    backend = ScriptedBackend(samples=("True", " true", "False", "Paris"))
    value, reason = run_scorer(SCORERS["p_true_empirical"], record(), ScoringContext(
        backend=backend, options={"p_true_samples": 4}))
    assert reason is None and value == pytest.approx(0.5)


def test_bsdetector_hand_computed():
    # exact judge: W = 1 for Paris, paris., Paris (3 of 5); exact string match 2 of 5;
    # self-reflection "I am not sure" = 0.5
    observed = BSDETECTOR_ALPHA * 0.6 + (1 - BSDETECTOR_ALPHA) * 0.4
    expected = BSDETECTOR_BETA * observed + (1 - BSDETECTOR_BETA) * 0.5
    assert score("bsdetector", ScriptedBackend(categorical="I am not sure")) == \
        pytest.approx(expected)
    assert expected == pytest.approx(0.56 * 0.6 + 0.14 * 0.4 + 0.3 * 0.5)  # UQLM's weights


@pytest.mark.parametrize("name", JUDGED)
def test_judged_scorers_without_backend_or_answer_are_nan_with_reason(name):
    value, reason = run_scorer(SCORERS[name], record(), ScoringContext(judge=ExactJudge()))
    assert math.isnan(value) and "backend" in reason
    value, reason = run_scorer(SCORERS[name], record(answer=""),
                               ScoringContext(backend=ScriptedBackend(), judge=ExactJudge()))
    assert math.isnan(value) and "empty answer" in reason


@pytest.mark.parametrize("name", JUDGED)
def test_judged_scorers_document_formula_and_source(name):
    doc = SCORERS[name].fn.__doc__ or ""
    assert ".. math::" in doc and "References" in doc


@pytest.mark.model
def test_judged_scorers_on_the_real_model(hf_model):
    from confide.backends.base import GenerationSpec

    question = [{"role": "user", "content": "What is the capital of France?"}]
    result = hf_model.generate([question], GenerationSpec(max_new_tokens=8, n_samples=2), [0])[0]
    assert result.greedy.text.strip()
    r = Record(Item("x", "What is the capital of France?", ["Paris"]), result.greedy,
               result.samples)
    ctx = ScoringContext(backend=hf_model, judge=ExactJudge(), options={"p_true_samples": 3})
    for name in JUDGED:
        value, reason = run_scorer(SCORERS[name], r, ctx)
        assert (0.0 <= value <= 1.0) or (math.isnan(value) and reason), (name, reason)
    value, _ = run_scorer(SCORERS["p_true_empirical"], r, ctx)
    assert value in (0.0, 1 / 3, 2 / 3, 1.0)
