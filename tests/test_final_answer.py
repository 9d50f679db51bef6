"""``cued_answer_logprob``: the extracted final answer's probability after the trace and a
"Final answer:" cue. A hand-computed case on a fixed bigram distribution, the refusals,
and the bundled model against a reference pass of its own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationSpec, ScoresContinuation
from confide.core.errors import CannotScore
from confide.core.reasoning import DEFAULT_TAGS
from confide.core.records import Generation, Item, Record
from confide.pipeline.answering import Pipeline
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.final_answer import (
    FINAL_ANSWER_CUE,
    cued_answer_logprob,
    extract_final_answer,
)

# the exemplars of tests/test_reasoning_generation.py: the bundled model closes its trace
SHORT_COT = ("Question: What is 2 plus 2?\nAnswer: <think>2 + 2 = 4</think> The answer is 4."
             "\n\nQuestion: What is 3 plus 3?\nAnswer: <think>3 + 3 = 6</think> The answer "
             "is 6.\n\nQuestion: What is 5 plus 1?\nAnswer: <think>5 + 1 = 6</think> The "
             "answer is 6.\n\nQuestion: What is 4 plus 4?\nAnswer:")
CHOICES = Item("mc", "Where do you keep your savings?", ["A"], {"choices": ["bank", "mall"]})


# --- extraction ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "item", "form", "want"), [
    ("9 * 2 = 18 dollars a day.\n#### 18", None, "auto", "18"),
    ("So the total is \\boxed{1,000}.", None, "auto", "1,000"),
    ("The answer is Paris.", None, "auto", "Paris"),
    ("Final answer: -3/4 of it", None, "auto", "-3/4"),
    ("**Answer:** Lyon\nbecause", None, "auto", "Lyon"),
    ("Paris", None, "auto", "Paris"),
    ("It costs 4 or maybe 5", None, "number", "5"),
    ("The answer is 7, not 8", None, "number", "7"),
    ("no digits here", None, "number", None),
    ("The answer is (B)", CHOICES, "auto", "B"),
    ("bank", CHOICES, "auto", "A"),
    ("neither", CHOICES, "auto", None),
    ("  .  ", None, "auto", None),
])
def test_extract_final_answer_reads_as_the_graders_do(text, item, form, want):
    assert extract_final_answer(text, item, form) == want


def test_extract_final_answer_refuses_an_unknown_format_and_choice_without_choices():
    with pytest.raises(CannotScore, match="final_answer_format"):
        extract_final_answer("4", None, "letters")
    with pytest.raises(CannotScore, match="needs an item with choices"):
        extract_final_answer("B", Item("q", "?"), "choice")


# --- a fixed tiny distribution ---------------------------------------------------------


class Bigram:
    """A model over characters (each token one character, its id ``ord``): the next
    token's probability given the previous one from a fixed table, 0.001 elsewhere."""

    TABLE = {(" ", "1"): 0.5, ("1", "8"): 0.25, (" ", "B"): 0.8}
    REST = 1e-3

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def cue_and_answer_ids(self, cue: str, answer: str) -> tuple[list[int], list[int]]:
        return [ord(c) for c in cue], [ord(c) for c in answer]

    def continuation_logprobs(self, prompts, contexts, continuations, *, thinking=False):
        self.calls.append((prompts, contexts, continuations, thinking))
        out = []
        for context, continuation in zip(contexts, continuations, strict=True):
            seq = [*context, *continuation]
            out.append(np.log([self.TABLE.get((chr(seq[len(context) + i - 1]), chr(t)),
                                              self.REST)
                               for i, t in enumerate(continuation)]))
        return out


def _traced(text: str, item: Item | None = None) -> Record:
    trace = Generation("9 * 2 = 18", token_ids=[ord(c) for c in "9*2=18"])
    return Record(item or Item("q", "How much a day?", ["18"]),
                  Generation(text, token_ids=[1], tokens=["x"], trace=trace))


def test_cued_answer_logprob_is_the_answers_probability_after_trace_and_cue():
    backend = Bigram()
    assert isinstance(backend, ScoresContinuation)
    ctx = ScoringContext(backend=backend, prompt="How much a day?")  # type: ignore[arg-type]
    value = cued_answer_logprob(_traced("So she makes $18.\n#### 18"), ctx)
    # "18" after the cue's last character " ": p("1" | " ") p("8" | "1") = 0.5 * 0.25
    assert value == pytest.approx(math.log(0.125))
    assert SCORERS["cued_answer_logprob"].readable(value) == pytest.approx(0.125)
    (prompts, contexts, continuations, thinking), = backend.calls
    assert prompts == ["How much a day?"] and thinking is True  # the generation's prompt
    assert contexts == [[ord(c) for c in "9*2=18" + FINAL_ANSWER_CUE + " "]]
    assert continuations == [[ord("1"), ord("8")]]
    # a choice: the picked option's letter, "B" after the cue: log 0.8
    letter = cued_answer_logprob(_traced("The answer is (B)", CHOICES),
                                 ScoringContext(backend=Bigram()))  # type: ignore[arg-type]
    assert letter == pytest.approx(math.log(0.8))


@pytest.mark.parametrize(("record", "form", "reason"), [
    (Record(Item("q", "?"), Generation("18")), "auto", "no reasoning trace"),
    (Record(Item("q", "?"), Generation("18", trace=Generation(""))), "auto",
     "empty reasoning trace"),
    (Record(Item("q", "?"), Generation("18", trace=Generation("9*2", tokens=["9*2"]))), "auto",
     "token ids are unknown"),
    (_traced("neither", CHOICES), "auto", "no final answer extracted"),
    (_traced("no digits"), "number", "no final answer extracted"),
    (_traced("18"), "letters", "must be one of"),
])
def test_cued_answer_logprob_refuses_with_the_reason(record, form, reason):
    ctx = ScoringContext(backend=Bigram(),  # type: ignore[arg-type]
                         options={"final_answer_format": form})
    value, why = run_scorer(SCORERS["cued_answer_logprob"], record, ctx)
    assert math.isnan(value) and reason in why


def test_cued_answer_logprob_never_scores_a_trace_without_answer_or_without_a_pass():
    cut = Record(Item("q", "?"), Generation("", finish_reason="length",
                                            trace=Generation("9 * 2", token_ids=[57])))
    value, why = run_scorer(SCORERS["cued_answer_logprob"], cut, ScoringContext(
        backend=Bigram()))  # type: ignore[arg-type]
    assert math.isnan(value) and "empty answer" in why
    value, why = run_scorer(SCORERS["cued_answer_logprob"], _traced("#### 18"),
                            ScoringContext())
    assert math.isnan(value) and "cannot teacher-force" in why


# --- the bundled model -----------------------------------------------------------------


@pytest.mark.model
def test_cued_answer_logprob_on_the_bundled_model_equals_a_reference_pass(hf_model):
    pipe = Pipeline.build(hf_model, ("cued_answer_logprob",), grader="numeric",
                          reasoning_tags=DEFAULT_TAGS)
    assert not pipe.skipped
    spec = GenerationSpec(max_new_tokens=24, stop=("\n\n",), reasoning_tags=DEFAULT_TAGS)
    result = hf_model.generate([SHORT_COT], spec, [0])[0]
    result.prompt = SHORT_COT
    record = pipe.complete(Item("q", SHORT_COT, ["8"]), result)
    greedy = record.greedy
    assert greedy.trace is not None and greedy.text == "The answer is 8."
    # the reference: one pass over prompt + trace + "\nFinal answer: 8", read at the "8"
    tail = hf_model.tokenizer(FINAL_ANSWER_CUE + " 8", add_special_tokens=False)["input_ids"]
    assert hf_model.tokenizer.decode(tail[-1:]) == "8"  # SmolLM2: " " and "8" apart
    ids = hf_model.encode(SHORT_COT) + list(greedy.trace.token_ids) + tail
    with torch.inference_mode():
        hidden = hf_model.model.get_decoder()(torch.tensor([ids])).last_hidden_state[0]
        logp = torch.log_softmax(hf_model.float32_logits(hidden[-2]), -1)[ids[-1]].item()
    value = record.scores["cued_answer_logprob"]
    assert value == pytest.approx(logp, abs=1e-4)
    assert -20 < value < 0 and 0 < SCORERS["cued_answer_logprob"].readable(value) < 1
