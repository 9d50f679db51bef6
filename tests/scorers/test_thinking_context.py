"""A reasoning run's reply without a trace was generated from the prompt in thinking mode: the
pipeline's scoring context knows the run's reasoning tags, and the passes over the reply
render the prompt so (``ScoringContext.thinking``), not as a plain run would."""

from __future__ import annotations

import numpy as np
import pytest

from confide.backends.base import GenerationResult
from confide.core.reasoning import DEFAULT_TAGS
from confide.core.records import Generation, Item
from confide.pipeline.answering import Pipeline
from confide.scorers import SCORERS, ScoringContext, run_scorer
from tests.conftest import chat_template
from tests.scorers.test_forward_reasoning import _full_pass
from tests.test_thinking_prompt import QUESTION

_TURNS = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{%- endfor %}")
#: A thinking mode that changes the prompt (a system line) but opens no trace in it: a
#: model that writes no tag gives a reply with no trace.
THINKING_NOTE = ("{%- if enable_thinking is defined and enable_thinking %}{{- '<|im_start|>"
                 "system\\nThink step by step.<|im_end|>\\n' }}{%- endif %}" + _TURNS
                 + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
REPLY = "The answer is 5."


def test_thinking_is_the_runs_mode_or_a_replys_trace():
    tags = ScoringContext(reasoning_tags=DEFAULT_TAGS)
    assert tags.thinking(Generation("5")) and tags.thinking(Generation("5", trace=Generation("x")))
    assert not ScoringContext().thinking(Generation("5"))
    assert ScoringContext().thinking(Generation("5", trace=Generation("x")))  # imported


@pytest.mark.model
def test_a_reasoning_runs_reply_without_a_trace_is_read_after_the_thinking_prompt(hf_model):
    tok = hf_model.tokenizer
    reply_ids = list(tok(REPLY, add_special_tokens=False)["input_ids"])
    with chat_template(hf_model, THINKING_NOTE):
        on, off = (hf_model.encode(QUESTION, thinking=t) for t in (True, False))
        logprobs = hf_model.continuation_logprobs([QUESTION], [[]], [reply_ids], thinking=True)[0]
        gen = Generation(REPLY, token_ids=reply_ids, tokens=[tok.decode([t]) for t in reply_ids],
                         token_logprobs=logprobs.astype(np.float32), finish_reason="stop")
        pipe = Pipeline.build(hf_model, ("attention_score",), reasoning_tags=DEFAULT_TAGS)
        record = pipe.complete(Item("q", "What is 2 plus 3?", ["5"]),
                               GenerationResult(greedy=gen, prompt=QUESTION))
        plain, _ = run_scorer(SCORERS["attention_score"], record,
                              ScoringContext(backend=hf_model, prompt=QUESTION))
    assert len(on) > len(off) and tok.decode(on).startswith("<|im_start|>system\nThink")
    assert record.greedy.trace is None and record.greedy.text == REPLY  # no trace to split
    # the pipeline's value is the pass over the thinking prompt and the reply: the mean over
    # the middle layer's heads of sum_i log A_ii (a causal matrix: its log-determinant)
    attentions = _full_pass(hf_model, on + reply_ids)
    middle = attentions[len(attentions) // 2][0].double()
    expected = float(middle.diagonal(dim1=-2, dim2=-1).log().sum(-1).mean())
    assert record.scores["attention_score"] == pytest.approx(expected, rel=1e-6)
    # scored without the run's tags, the prompt is rendered without thinking mode: another
    # (shorter) prompt, another value
    attentions = _full_pass(hf_model, off + reply_ids)
    middle = attentions[len(attentions) // 2][0].double()
    assert plain == pytest.approx(float(middle.diagonal(dim1=-2, dim2=-1).log().sum(-1).mean()),
                                  rel=1e-6)
    assert abs(plain - expected) > 0.05 * abs(expected)
