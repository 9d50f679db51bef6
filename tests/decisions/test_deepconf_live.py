"""DeepConf-online live (``confide.deepconf``): the vote arithmetic by hand, the live stop's
rules on hand-made token events, and the bundled model stopped and halted for real."""

from __future__ import annotations

import math

import pytest

from confide.backends.base import TokenEvent
from confide.core.errors import InvalidInputError
from confide.core.records import Item
from confide.decisions.deepconf import deepconf, warmup_threshold, weighted_shares
from confide.pipeline.streaming import TraceStop

#: Exemplars with one-line traces: the bundled model copies the pattern, closes its trace
#: within a few tokens and answers "The answer is 8." (19 tokens).
SHORT_COT = ("Question: What is 2 plus 2?\nAnswer: <think>2 + 2 = 4</think> The answer is 4."
             "\n\nQuestion: What is 3 plus 3?\nAnswer: <think>3 + 3 = 6</think> The answer "
             "is 6.\n\nQuestion: What is 5 plus 1?\nAnswer: <think>5 + 1 = 6</think> The "
             "answer is 6.\n\nQuestion: What is 4 plus 4?\nAnswer:")
ITEM = Item("four", SHORT_COT, ["8"])
SMALL = {"prompt": "text", "max_new_tokens": 24, "stop": ("\n\n",), "window": 4}


def test_threshold_and_weighted_vote_by_hand():
    # Warm-up C_least [3.0, 1.0, 2.0, 4.0], eta = 50: the median, rank 1.5 of [1, 2, 3, 4]
    # -> 2 + 0.5 * (3 - 2) = 2.5. Voters are the warm-up traces at or above it (0 and 3)
    # and the online traces generated whole (4; 5 was stopped, 6 had no final answer).
    c_least = [3.0, 1.0, 2.0, 4.0, 2.6, math.nan, math.nan]
    s = warmup_threshold(c_least[:4], eta=50)
    assert s == pytest.approx(2.5)
    voters = [i for i in range(4) if c_least[i] >= s] + [4]
    assert voters == [0, 3, 4]
    labels = [0, 1, 1, 0, 1, 1, 2]  # answers "8" -> 0, "9" -> 1, none -> 2
    # V(8) = 3.0 + 4.0 = 7.0, V(9) = 2.6: shares 7 / 9.6 = 0.729 and 2.6 / 9.6, "8" leads;
    # trace 1's "9" (C_least 1.0 < s) and trace 2's do not count
    shares = weighted_shares(labels, c_least, voters)
    assert shares == pytest.approx({0: 7.0 / 9.6, 1: 2.6 / 9.6})
    assert list(shares) == [0, 1]  # in order of the first voter
    assert 0.7 <= max(shares.values()) < 0.95  # consensus at tau = 0.7, not at 0.95
    assert weighted_shares(labels, c_least, []) == {}


def _event(sample, text, top, *, trace=None, in_trace=False):
    return TokenEvent(0, sample, text, text[-1:], top[0], None,
                      tuple(zip("ab", top, strict=True)), trace, in_trace)


H, L = (-0.05, -3.95), (-0.6, -0.8)  # token confidence 2.0 and 0.7


def test_trace_stop_judges_only_an_opened_trace_and_a_split_one_at_its_end():
    stop = TraceStop(1.5, window=2, opening=True)
    # sample 0 opens a trace: its group (2.0 + 0.7) / 2 = 1.35 < 1.5 stops it at token 3
    assert stop(_event(0, "<th", H)) is None  # undecided: a partial opening tag
    assert stop(_event(0, "<think>", H)) is None  # group (2.0 + 2.0) / 2: goes on
    assert stop(_event(0, "<think>x", L)).startswith("deepconf: group confidence 1.350")
    # sample 1 answers without a trace: never judged, however low
    assert [stop(_event(1, t, L)) for t in ("The", "The answer", "The answer is")] == [None] * 3
    assert stop.stopped == {(0, 0): 3}
    # a backend that splits the trace off: a 1-token trace (mean 0.7) is judged at the
    # answer's first token; a 1-token trace of mean 2.0 is not stopped
    split = TraceStop(1.5, window=4)
    assert split(_event(0, "", L, trace="x", in_trace=True)) is None
    assert split(_event(0, "4", H, trace="x")).startswith("deepconf: group confidence 0.700")
    assert split(_event(1, "", H, trace="y", in_trace=True)) is None
    assert split(_event(1, "4", L, trace="y")) is None
    assert split.stopped == {(0, 0): 1}


def test_bad_options_are_refused_by_name(hf_model):
    for bad, field in (({"budget": 1, "warmup": 2}, "budget"), ({"batch": 0}, "batch"),
                       ({"top_k": 1}, "top_k"), ({"threshold": math.inf}, "threshold"),
                       ({"prompt": "kshot"}, "prompt"), ({"reasoning_tags": "none"},
                                                         "reasoning_tags")):
        with pytest.raises(InvalidInputError, match=field):
            deepconf(hf_model, ITEM, **{**SMALL, **bad})


# ------------------------------------------------------------------ the bundled model


@pytest.mark.model
def test_live_stop_ends_traces_before_their_budget(hf_model):
    # a threshold above any group confidence: every online trace ends at its first window
    out = deepconf(hf_model, ITEM, warmup=1, budget=2, threshold=100.0, **SMALL)
    warm, *online = out.traces
    assert warm.role == "warmup" and warm.stopped_at is None and warm.answer == "The answer is 8."
    assert warm.trace_tokens > 4 and not warm.votes  # below the fixed threshold: no vote
    for t in online:
        assert t.role == "online" and t.stopped_at == 4 and t.tokens == 4 < 24
        assert t.finish_reason.startswith("deepconf: group confidence")
        assert t.answer == "" and not t.votes
    assert out.count("stopped") == 1 and out.answer is None and not out.reached
    assert out.tokens == warm.tokens + 4
    assert out.tokens_full == pytest.approx(2 * warm.tokens)  # the estimate: warm-up mean x 2
    assert out.saved == pytest.approx(warm.tokens - 4)
    # the majority over the traces generated whole still answers, and is graded
    assert out.majority == "The answer is 8." and out.majority_correct == 1.0
    assert out.correct is None


@pytest.mark.model
def test_consensus_halts_sampling_after_the_warm_up(hf_model):
    # one warm-up trace: s is its own C_least, so it votes, and holds the whole vote
    out = deepconf(hf_model, ITEM, warmup=1, budget=6, consensus=0.5, **SMALL)
    assert out.reached and out.count("generated") == 1  # 5 of 6 traces never drawn
    assert out.answer == "The answer is 8." and out.correct == 1.0
    assert out.shares == {"The answer is 8.": 1.0} and out.share == 1.0
    assert out.threshold == out.traces[0].confidence and out.count("voted") == 1
    assert out.tokens_full == pytest.approx(out.tokens * 6)


@pytest.mark.model
def test_cot_prompt_stops_only_replies_that_open_a_trace(hf_model):
    # GSM8K's chain-of-thought exemplars: the bundled model opens a <think> trace in some
    # replies only; with a threshold above any confidence each of those ends at its first
    # window, and a reply without a trace is never stopped
    out = deepconf(hf_model, "Tom has 3 apples and buys 5 more. How many apples does he have?",
                   warmup=1, budget=2, window=4, threshold=100.0, max_new_tokens=10)
    assert len(out.traces) == 2 and out.judge == "numeric" and out.max_new_tokens == 10
    for t in out.traces[1:]:
        assert (t.stopped_at is not None) == (t.trace_tokens > 0), t
        if t.stopped_at is not None:  # judged from the token that completes "<think>"
            assert t.tokens == t.stopped_at < 10 and t.answer == ""


def test_a_backend_that_does_not_stream_its_samples_is_refused():
    from confide.backends.openai import OpenAIBackend
    from tests.test_reasoning_generation import ReasoningServer

    with ReasoningServer() as server:
        backend = OpenAIBackend("r1", base_url=server.base_url, logprobs=True)
        with pytest.raises(InvalidInputError, match="does not stream its sampled traces"):
            deepconf(backend, "What is 2 + 2?", warmup=2, budget=3, prompt="chat",
                     max_new_tokens=16, top_k=2)


@pytest.mark.model
def test_deepconf_command(hf_model):
    from typer.testing import CliRunner

    from confide.cli import app

    got = CliRunner().invoke(app, ["deepconf", SHORT_COT, "--prompt", "text", "--reference",
                                   "8", "--warmup", "1", "--budget", "2", "--consensus", "0.5",
                                   "--max-new-tokens", "24", "--window", "4",
                                   "--stop", "\\n\\n"],
                             env={"COLUMNS": "200"})
    assert got.exit_code == 0, got.output
    text = " ".join(got.output.split())  # Rich wraps lines at the console's width
    assert "DeepConf-online live" in text and "consensus reached" in text
    assert "answer: 'The answer is 8.' (graded 1.0 by contains)" in text
    assert "traces: 1 generated, 0 stopped, 1 voted" in text
    assert "against about 38 for all 2 traces whole" in text
