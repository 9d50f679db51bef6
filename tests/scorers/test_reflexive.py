"""P(True) and verbalized confidence: prompts, parsing, the top-k fallback, the real model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.backends.base import GenerationResult, GenerationSpec
from confide.backends.binary import two_way_from_logprobs
from confide.core.errors import CannotScore
from confide.core.records import Generation, Item, Record
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.reflexive import (
    R_EMPTY,
    R_NO_ANSWER,
    R_NONE,
    R_OTHER_ANSWER,
    R_RANGE,
    R_SEVERAL,
    _split_reply,
    p_true_prompt,
    parse_confidence,
    question_text,
    verbalized_1s_prompt,
    verbalized_2s_prompt,
)

READABLE = [
    ("85", 0.85), ("85%", 0.85), ("85 %", 0.85), ("85 percent", 0.85), ("85％", 0.85),
    ("Confidence: 90", 0.9), ("confidence: 90%", 0.9), ("Confidence level: 95 percent", 0.95),
    ("I am 70% confident in my answer.", 0.7), ("My confidence is 0.6", 0.6),
    ("0.85", 0.85), (".9", 0.9), ("1.0", 1.0), ("0", 0.0), ("100", 1.0), ("1", 0.01),
    ("8/10", 0.8), ("3 out of 10", 0.3), ("I would say 60 out of 100", 0.6),
    ("70-80%", 0.75), ("70 to 80 percent", 0.75), ("70%-80%", 0.75),
    ("On a scale of 0 to 100, I would say 75.", 0.75), ("75 (0-100)", 0.75),
    ("Answer: 1984\nConfidence: 90", 0.9), ("Answer: Paris\nConfidence: 85%.", 0.85),
    ("very likely", 0.9), ("Highly likely.", 0.9), ("It is not likely.", 0.25),
    ("highly unlikely", 0.05), ("Unlikely", 0.2), ("almost certain", 0.95),
    ("I'm not sure.", 0.35), ("I am confident.", 0.8), ("I'm not confident", 0.25),
    ("Confidence: high", 0.85), ("Confidence: very low", 0.05), ("Medium", 0.5),
    ("probably", 0.7), ("About even", 0.5), ("Very likely (90%)", 0.9),
    ("Confidence: 0. I am very confident.", 0.0),
]

UNREADABLE = [
    ("", R_EMPTY), ("   \n ", R_EMPTY),
    ("The answer is Paris.", R_NONE), ("asdf qwerty", R_NONE), ("I don't know", R_NONE),
    ("Sure! Here is the answer.", R_NONE), ("high school", R_NONE), ("???", R_NONE),
    ("I think 20 or 30", R_SEVERAL), ("Between 1990 and 2000", R_SEVERAL),
    ("150", R_RANGE), ("Confidence: 250%", R_RANGE), ("12/10", R_RANGE),
]


@pytest.mark.parametrize(("reply", "expected"), READABLE)
def test_parse_confidence_reads_formats(reply, expected):
    assert parse_confidence(reply) == pytest.approx(expected)


@pytest.mark.parametrize(("reply", "reason"), UNREADABLE)
def test_parse_confidence_refuses_garbage_with_a_fixed_reason(reply, reason):
    with pytest.raises(CannotScore) as info:
        parse_confidence(reply)
    assert info.value.reason == reason


def test_one_stage_reply_split_into_answer_and_confidence():
    assert _split_reply("Answer: 1984\nConfidence: 90") == ("1984", "Confidence: 90")
    assert _split_reply("Paris\n80") == ("Paris", "80")
    assert _split_reply("Paris (90%)") == ("Paris", "90%")
    assert _split_reply("Answer: I am confident it is 42 / Confidence: 90") == (
        "I am confident it is 42", "Confidence: 90")
    with pytest.raises(CannotScore, match="no number"):
        _split_reply("Answer: 1984")  # the answer's number is never the confidence


def test_confidence_label_wins_over_confident_in_the_answer():
    # issue 12: read as 0.42 (the number after "confident" in the answer)
    assert parse_confidence("Answer: I am confident it is 42 / Confidence: 90") == 0.9


def test_question_text_lists_choices():
    item = Item("m", "Which is a fruit?", ["B"], {"choices": ["Carrot", "Apple"]})
    assert question_text(item) == "Which is a fruit?\nA. Carrot\nB. Apple"
    chat = Item("c", [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Capital of France?"}])
    assert question_text(chat) == "Capital of France?"


def test_prompts_carry_question_and_answer():
    item = Item("x", "Capital of France?")
    chat = p_true_prompt(item, "Paris", chat=True)
    assert chat[0]["role"] == "user"
    assert "Question: Capital of France?\nProposed answer: Paris" in chat[0]["content"]
    assert chat[0]["content"].endswith("True or False.")
    assert p_true_prompt(item, "Paris", chat=False).endswith("true or false?\nAnswer:")
    two = verbalized_2s_prompt(item, "Paris", chat=True)
    assert [m["role"] for m in two] == ["user", "assistant", "user"]
    assert two[1]["content"] == "Paris" and "0 to 100" in two[2]["content"]
    assert verbalized_2s_prompt(item, "Paris", chat=False).endswith("Confidence:")
    one = verbalized_1s_prompt(item, chat=True)[0]["content"]
    assert "Confidence: <a number from 0 to 100>" in one and one.endswith("Capital of France?")


def test_p_true_renormalises_over_true_and_false_hand_computed():
    # P(True spellings) = 0.3 + 0.1, P(False spellings) = 0.2 -> 0.4 / 0.6
    value = two_way_from_logprobs(np.log([0.3, 0.1]), np.log([0.2]))
    assert value == pytest.approx(2 / 3)


@pytest.mark.parametrize(("yes", "no", "expected"), [
    (0.0, -800.0, 1.0), (-800.0, 0.0, 0.0), (-1000.0, -1000.0 - math.log(3), 0.75),
    (-math.inf, -1.0, 0.0), (-1.0, -math.inf, 1.0)])
def test_p_true_renormalisation_does_not_overflow(yes, no, expected):
    # issue 12: log-odds beyond ~709 raised OverflowError
    assert two_way_from_logprobs(np.array([yes]), np.array([no])) == pytest.approx(expected)


def test_p_true_renormalisation_refuses_two_impossible_replies():
    with pytest.raises(CannotScore, match="neither reply"):
        two_way_from_logprobs(np.array([-math.inf]), np.array([-math.inf]))


class TopKBackend:
    """A backend without next_token_logprobs: p_true must read the top-k alternatives."""

    has_chat_template = True
    capabilities = frozenset({"extra_prompt", "top_logprobs"})

    def __init__(self, tops: list[tuple[str, float]]) -> None:
        self.tops = tops
        self.specs: list[GenerationSpec] = []

    def generate(self, prompts, spec, seeds):
        self.specs.append(spec)
        gen = Generation(text=self.tops[0][0].strip(), token_ids=[1], tokens=[self.tops[0][0]],
                         top_tokens=[[t for t, _ in self.tops]],
                         top_logprobs=np.log([[p for _, p in self.tops]]))
        return [GenerationResult(greedy=gen) for _ in prompts]

    def config(self):
        return {"backend": "topk"}


def _record(text="Paris") -> Record:
    return Record(Item("x", "Capital of France?", ["Paris"]), Generation(text=text))


def test_p_true_fallback_reads_top_alternatives():
    backend = TopKBackend([("True", 0.5), (" true", 0.1), ("False", 0.2), ("Maybe", 0.1)])
    value, why = run_scorer(SCORERS["p_true"], _record(), ScoringContext(backend=backend))
    assert why is None and value == pytest.approx(0.6 / 0.8)
    assert backend.specs[0].max_new_tokens == 1 and backend.specs[0].top_k_alternatives == 20


def test_p_true_fallback_bounds_a_missing_answer_by_the_smallest_listed():
    backend = TopKBackend([("True", 0.6), ("Yes", 0.3), ("Maybe", 0.1)])
    value, _ = run_scorer(SCORERS["p_true"], _record(), ScoringContext(backend=backend))
    assert value == pytest.approx(0.6 / 0.7)
    backend = TopKBackend([("Yes", 0.6), ("No", 0.4)])
    value, why = run_scorer(SCORERS["p_true"], _record(), ScoringContext(backend=backend))
    assert math.isnan(value) and "neither True nor False" in why


def test_reflexive_scorers_without_backend_or_answer_are_nan_with_reason():
    for name in ("p_true", "verbalized_2s", "verbalized_1s"):
        value, why = run_scorer(SCORERS[name], _record(), ScoringContext())
        assert math.isnan(value) and "no backend" in why
    value, why = run_scorer(SCORERS["p_true"], _record(text=""),
                            ScoringContext(backend=TopKBackend([("True", 1.0)])))
    assert math.isnan(value) and "empty answer" in why


def test_verbalized_2s_parses_the_backends_reply():
    backend = TopKBackend([("Confidence: 80%", 1.0)])
    value, why = run_scorer(SCORERS["verbalized_2s"], _record(), ScoringContext(backend=backend))
    assert why is None and value == pytest.approx(0.8)
    backend = TopKBackend([("Paris is nice", 1.0)])
    value, why = run_scorer(SCORERS["verbalized_2s"], _record(), ScoringContext(backend=backend))
    assert math.isnan(value) and why == R_NONE


class ReplyBackend(TopKBackend):
    """Replies with a fixed text (the one-stage verbalized reply)."""

    def __init__(self, reply: str) -> None:
        super().__init__([(reply, 1.0)])


@pytest.mark.parametrize(("reply", "greedy", "value", "reason"), [
    ("Answer: Paris\nConfidence: 90", "Paris.", 0.9, None),
    (" paris\nConfidence: 70%", "Paris", 0.7, None),
    ("Answer: Lyon\nConfidence: 90", "Paris", math.nan, R_OTHER_ANSWER),
    ("Answer: I am confident it is 42 / Confidence: 90", "42", math.nan, R_OTHER_ANSWER),
    ("Confidence: 90", "Paris", math.nan, R_NO_ANSWER),
])
def test_verbalized_1s_attaches_only_a_confidence_about_the_greedy_answer(
        reply, greedy, value, reason):
    # issue 12: the reply's confidence was attached to the greedy answer even when the
    # reply answered something else
    got, why = run_scorer(SCORERS["verbalized_1s"], _record(greedy),
                          ScoringContext(backend=ReplyBackend(reply)))
    assert why == reason
    assert got == pytest.approx(value, nan_ok=True)


def test_verbalized_1s_compares_answers_with_the_runs_judge():
    from confide.equivalence.judges import NumericJudge

    ctx = ScoringContext(backend=ReplyBackend("Answer: I am confident it is 42 / "
                                              "Confidence: 90"), judge=NumericJudge())
    assert run_scorer(SCORERS["verbalized_1s"], _record("42"), ctx) == (0.9, None)


# ------------------------------------------------------------------ the real model


def test_hf_next_token_logprobs_equal_a_plain_forward_pass(hf_model):
    import torch

    prompt = p_true_prompt(Item("x", "Capital of France?"), "Paris", chat=True)
    got = hf_model.next_token_logprobs([prompt, "The sky is"], ["True", " False", " blue"])
    ids = torch.tensor([hf_model.encode(prompt)])
    with torch.inference_mode():
        # compare like with like: the backend projects the last hidden state in float32
        hidden = hf_model.model.get_decoder()(input_ids=ids).last_hidden_state[0, -1]
        ref = torch.log_softmax(hf_model.float32_logits(hidden), -1)
    want = [ref[hf_model.candidate_token_id(c)].item() for c in ["True", " False", " blue"]]
    assert got.shape == (2, 3)
    assert got[0] == pytest.approx(want, abs=1e-3)


def test_reflexive_scorers_on_the_real_model(hf_model):
    from confide.tasks import load_task

    task = load_task("triviaqa", limit=3)
    results = hf_model.generate([task.render(it, chat=True) for it in task.items],
                                GenerationSpec(max_new_tokens=8, stop=("\n",)), [0, 1, 2])
    ctx = ScoringContext(backend=hf_model, options={"verbalized_2s_max_new_tokens": 6,
                                                    "verbalized_1s_max_new_tokens": 12})
    fixed = {R_EMPTY, R_NONE, R_SEVERAL, R_RANGE, R_NO_ANSWER, R_OTHER_ANSWER}
    for item, result in zip(task.items, results, strict=True):
        record = Record(item, result.greedy)
        value, why = run_scorer(SCORERS["p_true"], record, ctx)
        assert why is None and 0.0 < value < 1.0
        for name in ("verbalized_2s", "verbalized_1s"):
            value, why = run_scorer(SCORERS[name], record, ctx)
            assert (why is None and 0.0 <= value <= 1.0) or (math.isnan(value) and why in fixed)
