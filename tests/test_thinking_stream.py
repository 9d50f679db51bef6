"""Streaming a reply whose prompt opened the trace (a chat template ending with ``<think>\\n``):
the token events say so (``TokenEvent.trace_opened``), DeepConf's live stop judges the
trace from its first token, and ``confide.stream`` labels its tokens as the trace's."""

from __future__ import annotations

import pytest

from confide.backends.base import GenerationSpec, TokenEvent
from confide.core.reasoning import DEFAULT_TAGS, final_answer_missing
from confide.pipeline.streaming import AnswerStream, StreamEnd, TokenUpdate, TraceStop
from tests.conftest import chat_template
from tests.test_thinking_prompt import OPENS_TRACE, QUESTION

H, L = (-0.05, -3.95), (-0.6, -0.8)  # token confidence 2.0 and 0.7 (tests/decisions)


def _event(text, top=H, *, sample=0, opened=True):
    return TokenEvent(0, sample, text, text[-1:], top[0], None,
                      tuple(zip("ab", top, strict=True)), trace_opened=opened)


def test_trace_stop_judges_a_reply_whose_prompt_opened_the_trace_from_its_first_token():
    stop = TraceStop(1.5, window=2, opening=True)
    # no opening tag in the text, but the prompt opened the trace: group (2.0 + 0.7) / 2
    assert stop(_event("Let")) is None
    assert stop(_event("Let me", L)).startswith("deepconf: group confidence 1.350")
    # the same tokens from a prompt that opened nothing: an answer, never judged
    assert [stop(_event(t, L, sample=1, opened=False)) for t in ("Let", "Let me")] == [None] * 2
    assert stop.stopped == {(0, 0): 2}


def test_stream_reads_a_reply_whose_prompt_opened_the_trace_as_trace_until_its_closing_tag():
    got: list[TokenUpdate] = []
    stream = AnswerStream(got.append, n_choices=2, tags=DEFAULT_TAGS)
    texts = ["2+3", "2+3 is 5", "2+3 is 5</", "2+3 is 5</think>", "2+3 is 5</think>\n\n5"]
    for text in texts:
        stream(TokenEvent(0, None, text, "x", -0.1, trace_opened=True))
    assert [u.span for u in got] == ["trace"] * 4 + ["answer"]
    assert "".join(u.trace_delta for u in got) == "2+3 is 5"
    assert "".join(u.delta for u in got) == "5"
    # a model that writes the opening tag again has it taken off (as split_reasoning does)
    for text in ("<th", "<think>", "<think>4", "<think>4</think>", "<think>4</think> 4"):
        stream(TokenEvent(0, 0, text, "x", -0.1, trace_opened=True))
    again = [u for u in got if u.choice == 1]
    assert [u.span for u in again] == ["trace"] * 4 + ["answer"]
    assert "".join(u.trace_delta for u in again) == "4"
    assert "".join(u.delta for u in again) == "4"


# --- the bundled model under a template whose generation prompt ends with <think>\n ------


@pytest.mark.model
def test_the_live_stop_ends_traces_of_a_thinking_template(hf_model):
    events: list[TokenEvent] = []
    stop = TraceStop(100.0, window=3, opening=True)  # above any group confidence

    def watch(event):
        events.append(event)
        return stop(event)

    spec = GenerationSpec(max_new_tokens=12, n_samples=2, greedy=False, top_k_alternatives=5,
                          reasoning_tags=DEFAULT_TAGS)
    with chat_template(hf_model, OPENS_TRACE):
        result = hf_model.generate([QUESTION], spec, [0], on_token=watch)[0]
    assert events and all(e.trace_opened for e in events)
    assert all("<think>" not in e.text for e in events)  # the tag is the prompt's
    # each trace ends at its first window: 3 of its 12 tokens generated (a reply that
    # ends sooner, as sample 1's "```", is never judged: shorter than the window, unclosed)
    assert stop.stopped.get((0, 0)) == 3
    for j, sample in enumerate(result.samples):
        assert sample.trace_opened
        if (0, j) in stop.stopped:
            assert sample.n_tokens == 3 and sample.finish_reason.startswith("deepconf")
        else:
            assert sample.n_tokens < 3 and sample.finish_reason == "stop"


@pytest.mark.model
def test_deepconf_live_stops_online_traces_of_a_thinking_template(hf_model):
    from confide.decisions.deepconf import deepconf

    with chat_template(hf_model, OPENS_TRACE):
        out = deepconf(hf_model, "What is 2 plus 3?", prompt="chat", warmup=1, budget=3,
                       window=3, threshold=100.0, max_new_tokens=10)
    warm, *online = out.traces
    assert warm.stopped_at is None and warm.trace_tokens > 0  # all trace: opened by the prompt
    # every online trace of 3 tokens or more ends at its first window (one that ends sooner
    # is shorter than the window and unclosed: never judged)
    assert len(online) == 2 and any(t.stopped_at is not None for t in online)
    for t in online:
        if t.stopped_at is not None:
            assert t.stopped_at == t.tokens == 3 < 10 and t.answer == "" and not t.votes
        else:
            assert t.tokens < 3


@pytest.mark.model
def test_stream_labels_a_thinking_templates_first_tokens_as_the_trace(hf_model):
    import confide

    with chat_template(hf_model, OPENS_TRACE):
        events = list(confide.stream(hf_model, "What is 2 plus 3?", scorers=("mean_logprob",),
                                     max_new_tokens=6, reasoning_tags="<think>,</think>"))
    updates, end = events[:-1], events[-1]
    assert isinstance(end, StreamEnd) and all(isinstance(u, TokenUpdate) for u in updates)
    greedy = end.record.greedy
    assert greedy.trace is not None  # the reply opened no tag: the prompt did
    assert updates[0].span == "trace"
    # the spans of the updates are the record's: the trace's tokens, then the answer's
    assert [u.span for u in updates] == (["trace"] * greedy.trace.n_tokens
                                         + ["answer"] * greedy.n_tokens)
    assert "".join(u.trace_delta for u in updates) + end.closing_trace[0] == greedy.trace.text
    assert "".join(u.delta for u in updates) + end.closing[0] == greedy.text
    if greedy.n_tokens == 0:  # the budget ran out inside the trace: no answer was sent
        assert final_answer_missing(greedy) and all(u.delta == "" for u in updates)
