"""``confide.stream(..., reasoning_tags=)`` on the bundled model: trace deltas apart from
answer deltas, and the final confidence scored on the answer span."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.records import Item
from confide.pipeline.streaming import StreamEnd, TokenUpdate

#: Chat exemplars whose replies are a one-line trace in tags, then the answer: the bundled
#: model answers "<think>4 + 4 = 8</think> The answer is 8."
TURNS = [("What is 2 plus 2?", "<think>2 + 2 = 4</think> The answer is 4."),
         ("What is 3 plus 3?", "<think>3 + 3 = 6</think> The answer is 6."),
         ("What is 5 plus 1?", "<think>5 + 1 = 6</think> The answer is 6.")]
MESSAGES = [m for q, a in TURNS for m in ({"role": "user", "content": q},
                                          {"role": "assistant", "content": a})]
ITEM = Item("four", [*MESSAGES, {"role": "user", "content": "What is 4 plus 4?"}])


@pytest.mark.model
def test_stream_sends_trace_deltas_apart_and_scores_the_answer(hf_model):
    import confide

    events = list(confide.stream(hf_model, ITEM, scorers=("mean_logprob", "deepconf_mean"),
                                 max_new_tokens=24, reasoning_tags="<think>,</think>",
                                 early_abstain_below=0.01, early_abstain_after=2))
    updates, end = events[:-1], events[-1]
    assert all(isinstance(u, TokenUpdate) for u in updates) and isinstance(end, StreamEnd)
    assert end.abstained is None
    greedy = end.record.greedy
    trace = greedy.trace
    assert trace is not None and trace.text == "4 + 4 = 8"
    assert greedy.text == "The answer is 8."
    spans = [u.span for u in updates]
    # the trace's tokens come first, then the answer's; each span counts its own tokens
    assert spans == ["trace"] * trace.n_tokens + ["answer"] * greedy.n_tokens
    assert [u.n_tokens for u in updates if u.span == "answer"] == list(
        range(1, greedy.n_tokens + 1))
    # deltas: the trace's in trace_delta, the answer's in delta; each adds up to its span
    assert all(u.delta == "" for u in updates if u.span == "trace")
    assert "".join(u.trace_delta for u in updates) + end.closing_trace[0] == trace.text
    assert "".join(u.delta for u in updates) + end.closing[0] == greedy.text
    assert "<think>" not in "".join(u.delta for u in updates)
    # the answer's running confidence reads its own tokens alone
    last = [u for u in updates if u.span == "answer"][-1]
    answer_lp = [u.logprob for u in updates if u.span == "answer"]
    assert last.running_confidence == pytest.approx(math.exp(np.mean(answer_lp)), rel=1e-6)
    # the final confidence is the answer span's, the trace scorer reads the trace
    assert end.record.scores["mean_logprob"] == pytest.approx(
        float(np.mean(answer_lp)), abs=1e-5)
    assert math.isfinite(end.record.scores["deepconf_mean"])
    # without the tags the same reply is one answer, tags and all
    plain = list(confide.stream(hf_model, ITEM, scorers=("mean_logprob",), max_new_tokens=24))
    assert {u.span for u in plain[:-1]} == {"answer"}
    assert plain[-1].record.greedy.trace is None
    assert plain[-1].record.greedy.text.startswith("<think>")
