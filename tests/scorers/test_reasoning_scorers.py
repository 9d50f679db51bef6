"""The reasoning scorers on hand-made reasoning replies (a trace and a final answer)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from confide.core.errors import CannotScore
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.asking import after_thinking, answer_step
from confide.scorers.reasoning import (
    R_EMPTY_TRACE,
    R_NO_FINAL_ANSWER,
    R_NO_TRACE,
    group_confidences,
    token_confidences,
    trace_confidence,
)
from confide.scorers.reflexive import p_true_prompt, verbalized_2s_prompt

# A 6-token trace, top-2 log-probabilities per step written out. Token confidence
# C_i = -(log P_i(1) + log P_i(2)) / 2:
TOP2 = [[-0.1, -2.5],   # C = 1.3
        [-0.2, -1.8],   # C = 1.0
        [-0.5, -1.1],   # C = 0.8
        [-0.7, -0.7],   # C = 0.7
        [-0.05, -3.95],  # C = 2.0
        [-0.3, -2.1]]   # C = 1.2
C = [1.3, 1.0, 0.8, 0.7, 2.0, 1.2]
# windows of 3: (1.3+1.0+0.8)/3, (1.0+0.8+0.7)/3, (0.8+0.7+2.0)/3, (0.7+2.0+1.2)/3
GROUPS = [3.1 / 3, 2.5 / 3, 3.5 / 3, 3.9 / 3]


def _trace(top=TOP2, text="Let me think. 2 and 2 make 4.") -> Generation:
    n = len(top)
    return Generation(text=text, token_ids=list(range(n)), tokens=[f"t{i}" for i in range(n)],
                      token_logprobs=np.asarray([row[0] for row in top], dtype=np.float32),
                      top_logprobs=np.asarray(top, dtype=np.float32),
                      top_tokens=[["a", "b"]] * n)


def _reply(answer="4", trace: Generation | None = None) -> Generation:
    return Generation(text=answer, token_ids=[9] if answer else [], tokens=[answer] if answer
                      else [], token_logprobs=np.asarray([-0.2] if answer else [], np.float32),
                      top_logprobs=np.asarray([[-0.2, -2.0]] if answer else np.zeros((0, 2)),
                                              np.float32),
                      trace=trace)


def _record(gen: Generation, samples: list[Generation] | None = None) -> Record:
    return Record(Item("q", "What is 2 + 2?", ["4"]), gen, samples or [])


def _score(name: str, record: Record, **options) -> tuple[float, str | None]:
    return run_scorer(SCORERS[name], record, ScoringContext(judge=ExactJudge(), options=options))


def test_token_confidences_hand_computed():
    np.testing.assert_allclose(token_confidences(TOP2), C, atol=1e-12)


def test_group_confidences_hand_computed_window_3():
    np.testing.assert_allclose(group_confidences(C, 3), GROUPS, atol=1e-12)
    # a window longer than the trace is the whole trace: one group, the mean
    np.testing.assert_allclose(group_confidences(C, 2048), [np.mean(C)])


@pytest.mark.parametrize(("name", "expected"), [
    ("deepconf_mean", 7.0 / 6),               # mean of C
    ("deepconf_lowest_group", 2.5 / 3),       # min of GROUPS
    ("deepconf_bottom10", 2.5 / 3),           # ceil(0.1 * 4) = 1 lowest group
    ("deepconf_tail", (0.7 + 2.0 + 1.2) / 3),  # last 3 tokens
    ("trace_length", -6.0),
])
def test_reasoning_scorers_on_a_six_token_trace(name, expected):
    value, why = _score(name, _record(_reply(trace=_trace())), deepconf_window=3,
                        deepconf_tail=3)
    assert why is None and value == pytest.approx(expected, abs=1e-6)


def test_bottom_share_and_paper_defaults():
    gen = _reply(trace=_trace())
    # half of the 4 groups: mean of the two lowest, (2.5 + 3.1) / 6
    assert trace_confidence(gen, "bottom10", window=3, share=0.5) == pytest.approx(5.6 / 6)
    # the paper's n = 2048 on a 6-token trace: one window, every measure the mean
    for measure in ("lowest_group", "bottom10", "tail"):
        assert trace_confidence(gen, measure) == pytest.approx(7.0 / 6, abs=1e-6)


def test_a_peaked_trace_is_more_confident_than_a_flat_one():
    peaked = _reply(trace=_trace([[-0.01, -5.0]] * 4))
    flat = _reply(trace=_trace([[-0.69, -0.70]] * 4))
    for measure in ("mean", "lowest_group", "bottom10", "tail"):
        assert trace_confidence(peaked, measure) > trace_confidence(flat, measure)


DEGENERATE = {
    "no_trace": (_reply(), R_NO_TRACE),
    "empty_trace": (_reply(trace=Generation(text="", top_logprobs=np.zeros((0, 2)))),
                    R_EMPTY_TRACE),
    "no_final_answer": (_reply("", trace=_trace()), R_NO_FINAL_ANSWER),
    "no_top_k": (_reply(trace=replace(_trace(), top_logprobs=None)), "no top-k"),
    "one_alternative": (_reply(trace=_trace([[-0.1]] * 3)), "at least 2 alternatives"),
    "minus_inf": (_reply(trace=_trace([[-0.1, -np.inf]] * 3)), "NaN or infinity"),
    "nan": (_reply(trace=_trace([[-0.1, np.nan]] * 3)), "NaN or infinity"),
}
TRACE_SCORERS = ["deepconf_mean", "deepconf_lowest_group", "deepconf_bottom10", "deepconf_tail"]


@pytest.mark.parametrize("case", sorted(DEGENERATE))
@pytest.mark.parametrize("name", [*TRACE_SCORERS, "trace_length"])
def test_degenerate_replies_get_nan_with_a_reason(name, case):
    gen, reason = DEGENERATE[case]
    if name == "trace_length" and case in ("no_top_k", "one_alternative", "minus_inf", "nan"):
        assert _score(name, _record(gen)) == (-3.0 if case != "no_top_k" else -6.0, None)
        return
    value, why = _score(name, _record(gen))
    assert math.isnan(value) and why
    if case != "no_final_answer":  # run_scorer's own rule names the empty answer first
        assert reason in why, (name, case, why)
    with pytest.raises(CannotScore, match=reason.split(":")[0][:20]):
        SCORERS[name].fn(*((_record(gen),) if not SCORERS[name].takes_context
                           else (_record(gen), ScoringContext())))


def test_bad_window_option_is_a_reason_not_a_crash():
    value, why = _score("deepconf_lowest_group", _record(_reply(trace=_trace())),
                        deepconf_window=0)
    assert math.isnan(value) and "deepconf_window" in why


def test_trace_length_sign_longer_is_less_confident():
    short, _ = _score("trace_length", _record(_reply(trace=_trace(TOP2[:2]))))
    long, _ = _score("trace_length", _record(_reply(trace=_trace())))
    assert short == -2.0 and long == -6.0 and long < short


def test_thinking_block_is_skipped_by_the_readers():
    assert after_thinking("<think>\nIs it? Yes.\n</think>\n\nTrue") == "True"
    assert after_thinking("  True") == "  True"
    # a chat template that opens the block itself: the reply holds only its closing tag
    assert after_thinking("Okay, so yes.</think>\n\nTrue") == "True"
    with pytest.raises(CannotScore, match="unfinished thinking"):
        after_thinking("<think>Okay, so the question")
    assert answer_step(["<", "think", ">", "So", "</", "think", ">", "\n\n", " True"]) == 8
    assert answer_step(["True", "."]) == 0
    with pytest.raises(CannotScore):
        answer_step(["<think>", "Okay"])


def test_questions_after_a_reasoning_reply_show_the_final_answer_not_the_trace():
    record = _record(_reply("4", trace=_trace(text="Let me think. 2 and 2 make 4.")))
    for prompt in (p_true_prompt(record.item, record.greedy.text, chat=False),
                   str(verbalized_2s_prompt(record.item, record.greedy.text, chat=True))):
        assert "4" in prompt and "Let me think" not in prompt


# ----------------------------------------------------------------------- the hybrid


class _Stated:
    """A backend whose stated confidence depends on the answer shown (real prompts in)."""

    has_chat_template = False
    capabilities = frozenset()

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies, self.prompts = replies, []

    def generate(self, prompts, spec, seeds):
        from confide.backends.base import GenerationResult

        self.prompts += prompts
        out = []
        for p in prompts:
            answer = p.split("\nAnswer: ", 1)[1].split("\n", 1)[0]
            out.append(GenerationResult(Generation(text=self.replies[answer])))
        return out


def _hybrid(samples: list[str], replies: dict[str, str]) -> tuple[float, str | None, list]:
    backend = _Stated(replies)
    record = _record(_reply("4", trace=_trace()),
                     [_reply(s, trace=_trace()) for s in samples])
    ctx = ScoringContext(backend=backend, judge=ExactJudge())
    value, why = run_scorer(SCORERS["sc_verbalized"], record, ctx)
    return value, why, backend.prompts


def test_sc_verbalized_hand_computed():
    # samples 4, 4, 5: two agree; v("4") = 0.8 -> c = (0.8 + 0.8 + 0) / 3
    value, why, prompts = _hybrid(["4", "4", "5"], {"4": "80", "5": "99"})
    assert why is None and value == pytest.approx(1.6 / 3)
    assert len(prompts) == 1 and "Let me think" not in prompts[0]  # one distinct answer
    # a thinking block before the stated confidence is skipped
    value, _, _ = _hybrid(["4", "4"], {"4": "<think>hmm</think> 90"})
    assert value == pytest.approx(0.9)
    # no sample agrees: 0, and the model is not asked
    value, _, prompts = _hybrid(["5", "6"], {})
    assert value == 0.0 and prompts == []


def test_sc_verbalized_degenerate():
    value, why, _ = _hybrid(["", ""], {})
    assert math.isnan(value) and "every sample is empty" in why
    value, why, _ = _hybrid(["4", ""], {"4": "<think>still thinking"})
    assert math.isnan(value) and "unfinished thinking" in why
    value, why, _ = _hybrid(["4", "4"], {"4": "no idea"})
    assert math.isnan(value) and why.startswith("verbalized:")
    # an empty sample is disagreement: never raises the value
    with_empty, _, _ = _hybrid(["4", "4", ""], {"4": "80"})
    assert with_empty == pytest.approx(1.6 / 3) and with_empty < 0.8


def test_sc_verbalized_with_the_bundled_model(hf_model):
    # the real backend asks after each distinct agreeing final answer; the tiny model's
    # reply may be unreadable, which must be NaN with a reason, never a guess
    record = _record(_reply("4", trace=_trace()), [_reply("4", trace=_trace()),
                                                     _reply("5", trace=_trace())])
    ctx = ScoringContext(backend=hf_model, judge=ExactJudge(),
                         options={"verbalized_2s_max_new_tokens": 4})
    value, why = run_scorer(SCORERS["sc_verbalized"], record, ctx)
    assert (why is None and 0.0 <= value <= 0.5) or (math.isnan(value) and why)
