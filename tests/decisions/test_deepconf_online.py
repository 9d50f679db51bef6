"""DeepConf-online (Fu et al., 2025) replayed on hand-made stored traces, and its live stop on
the bundled model."""

from __future__ import annotations

import numpy as np
import pytest

from confide.backends.base import GenerationSpec
from confide.core.errors import CannotScore, InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.decisions.deepconf import (
    online_vote,
    replay_deepconf_online,
    stop_point,
    warmup_threshold,
)
from confide.pipeline.streaming import AnswerStream, TraceStop
from confide.scorers.reasoning import group_confidences, token_confidences, trace_confidence
from tests.decisions.helpers import generation, traced, write_run

# Top-2 log-probabilities a trace step; token confidence C = -(l1 + l2) / 2.
H = [-0.05, -3.95]  # C = 2.0
M = [-0.25, -2.75]  # C = 1.5
L = [-0.6, -0.8]    # C = 0.7


# Window n = 2. Lowest group confidences (C_least) in the comments.
WARMUP = [traced("5", [H, H, H, H]),   # 2.0
          traced("4", [H, H, M, M]),   # groups 2.0, 1.75, 1.5 -> 1.5
          traced("5", [L, L, H, H]),   # groups 0.7, 1.35, 2.0 -> 0.7
          traced("4", [M, M, M, M])]   # 1.5
ONLINE = [traced("5", [H, L, L, H]),   # groups 1.35, 0.7, 1.35: stops at token 3
          traced("4", [H, H, H, H]),   # 2.0: votes
          traced("", [H, H, H, H]),    # no final answer: generated whole, never votes
          traced("4", [H, H, H, H]),   # 2.0: votes
          traced("5", [L])]            # shorter than the window, mean 0.7: stops at its end
TRACES = WARMUP + ONLINE
LABELS = [0, 1, 0, 1, 0, 1, 2, 1, 0]   # clusters: "5" -> 0, "4" -> 1, the empty one -> 2


def test_threshold_and_stop_points_by_hand():
    # eta = 90 (DeepConf-high): the 10th percentile of [2.0, 1.5, 0.7, 1.5];
    # sorted [0.7, 1.5, 1.5, 2.0], rank 0.1 * 3 = 0.3 -> 0.7 + 0.3 * 0.8 = 0.94
    assert warmup_threshold([2.0, 1.5, 0.7, 1.5], eta=90) == pytest.approx(0.94)
    # eta = 10 (DeepConf-low): rank 2.7 -> 1.5 + 0.7 * 0.5 = 1.85; NaN left out
    assert warmup_threshold([2.0, 1.5, np.nan, 0.7, 1.5], eta=10) == pytest.approx(1.85)
    with pytest.raises(CannotScore, match="no warm-up trace"):
        warmup_threshold([np.nan], eta=10)
    assert stop_point([2.0, 0.7, 0.7, 2.0], 0.94, 2) == 3    # group (0.7 + 0.7) / 2 at t = 3
    assert stop_point([2.0, 0.7, 0.7, 2.0], 0.6, 2) is None
    assert stop_point([0.7], 0.94, 2) == 1                   # short and closed: at its end
    assert stop_point([0.7], 0.94, 2, closed=False) is None  # cut by the budget: runs on
    assert stop_point([2.0, 2.0, 2.0, 0.5], 1.5, 2, closed=False) == 4


def test_online_vote_by_hand_budget_spent():
    out = online_vote(TRACES, LABELS, warmup=4, eta=90, window=2, consensus=0.95)
    assert out.threshold == pytest.approx(0.94)
    # warm-up voters: 0 ("5", 2.0), 1 ("4", 1.5), 3 ("4", 1.5); 2 (0.7 < 0.94) does not
    roles = [t.role for t in out.traces]
    assert roles == ["warmup"] * 4 + ["online"] * 5
    assert [t.stopped_at for t in out.traces] == [None] * 4 + [3, None, None, None, 1]
    assert [t.votes for t in out.traces] == [True, True, False, True,
                                             False, True, False, True, False]
    # V("4") = 1.5 + 1.5 + 2 + 2 = 7, V("5") = 2: beta = 7 / 9, below 0.95: budget spent
    assert out.share == pytest.approx(7 / 9) and not out.reached
    assert out.label == 1
    # generated: 4 x 5 warm-up, 3 (stopped), 5, 4 (no answer, whole), 5, 1 (stopped)
    assert [t.tokens for t in out.traces] == [5, 5, 5, 5, 3, 5, 4, 5, 1]
    assert out.tokens == 38 and out.tokens_full == 41
    assert (out.count("used"), out.count("stopped"), out.count("voted"),
            out.count("no_answer")) == (9, 2, 5, 1)
    # the weights are the scorers' lowest group confidence
    assert out.traces[1].confidence == pytest.approx(
        trace_confidence(TRACES[1], "lowest_group", window=2))


def test_online_vote_stops_at_consensus():
    # beta after the warm-up 3 / 5; trace 4 stopped; 5 -> 5 / 7; 6 no vote; 7 -> 7 / 9
    out = online_vote(TRACES, LABELS, warmup=4, eta=90, window=2, consensus=0.75)
    assert out.reached and out.share == pytest.approx(7 / 9)
    assert [t.role for t in out.traces][-1] == "unused" and out.traces[-1].tokens == 0
    assert out.tokens == 37 and out.count("used") == 8
    # unanimous warm-up: consensus before any online trace
    same = [traced("7", [H, H])] * 4 + [traced("7", [H, H])] * 2
    out = online_vote(same, [0] * 6, warmup=4, eta=10, window=2, consensus=0.95)
    assert out.reached and out.share == 1.0 and out.count("used") == 4
    assert out.tokens == 12 and out.tokens_full == 18


def test_online_vote_degenerate_and_bad_options():
    with pytest.raises(CannotScore, match="fewer than the warm-up"):
        online_vote(TRACES[:3], LABELS[:3], warmup=4, window=2)
    no_answer = [traced("", [H, H])] * 4
    with pytest.raises(CannotScore, match="no warm-up trace"):
        online_vote(no_answer, [0, 1, 2, 3], warmup=4, window=2)
    # a budget below the warm-up, an eta of 0, a consensus above 1 are refused by name
    for bad, field in (({"budget": 2}, "budget"), ({"eta": 0}, "eta"),
                       ({"consensus": 1.5}, "consensus"), ({"window": 0}, "window")):
        with pytest.raises(InvalidInputError, match=field):
            online_vote(TRACES, LABELS, **{"warmup": 4, "window": 2, **bad})
    # the budget caps the traces drawn: 6 of 9
    out = online_vote(TRACES, LABELS, warmup=4, eta=90, window=2, budget=6)
    assert len(out.traces) == 6 and out.tokens == 20 + 3 + 5


def _record(i: int, samples: list[Generation], reference: str) -> Record:
    item = Item(id=f"q{i}", prompt=f"question {i}?", references=[reference])
    greedy = samples[0] if samples else generation(reference, [-0.1])
    return Record(item=item, greedy=greedy, samples=samples, scores={"msp": 0.5},
                  grades={"contains": float(reference in greedy.text)})


@pytest.fixture
def online_run(tmp_path):
    records = [
        # majority: "4" and "5" four each, the tie to the first ("5", wrong); online "4"
        _record(0, TRACES, "4"),
        # unanimous: consensus after the warm-up, two traces never drawn
        _record(1, [traced("7", [H, H])] * 6, "7"),
        # fewer traces than the warm-up: skipped, counted
        _record(2, [traced("1", [H, H])] * 3, "1"),
        # no trace in any sample: no warm-up confidence, skipped, counted
        _record(3, [generation("2", [-0.1])] * 5, "2"),
        # no samples: skipped by every vote
        _record(4, [], "3"),
    ]
    return write_run(tmp_path / "online", records)


def test_replay_on_a_stored_run(online_run):
    out = replay_deepconf_online(online_run, warmup=4, eta=90, window=2, consensus=0.95)
    assert out.n == 2 and out.k == 9 and out.judge == "exact"
    assert (out.n_skipped, out.n_too_few, out.n_unreadable, out.n_reached) == (1, 1, 1, 1)
    first, second = out.items
    assert (first.majority, first.offline, first.online) == (0.0, 1.0, 1.0)
    assert (first.tokens, first.tokens_all, first.saved) == (38, 41, 3)
    assert (first.used, first.stopped, first.voted, first.no_answer) == (9, 2, 5, 1)
    assert (second.tokens, second.tokens_all, second.used, second.reached) == (12, 18, 4, True)
    assert (out.majority, out.offline, out.online) == (0.5, 1.0, 1.0)
    assert (out.tokens, out.tokens_all, out.saved) == (50, 59, 9)
    assert out.saved_share == pytest.approx(9 / 59)


def test_replay_without_traces_says_what_to_do(tmp_path):
    run = write_run(tmp_path / "plain", [_record(0, [generation("2", [-0.1])] * 5, "2")])
    with pytest.raises(InvalidInputError, match="lower --warmup") as err:
        replay_deepconf_online(run, warmup=4)
    assert "run.sqlite" in str(err.value) or str(run) in str(err.value)


def test_vote_command_online(online_run):
    from typer.testing import CliRunner

    from confide.cli import app

    got = CliRunner().invoke(app, ["vote", str(online_run), "--no-adaptive", "--online",
                                   "--warmup", "4", "--eta", "90", "--window", "2",
                                   "--consensus", "0.95"], env={"COLUMNS": "250"})
    assert got.exit_code == 0, got.output
    assert "DeepConf-online replayed" in got.output and "50 / 59" in got.output


# ------------------------------------------------------------------ live, bundled model


def test_live_stop_cuts_the_trace_where_the_replay_does(hf_model):
    """A sampled row stopped live by TraceStop is the prefix of the same row generated whole,
    ending where :func:`stop_point` finds the stop on the whole row's statistics."""
    prompt = "Q: Tom has 3 apples and buys 5 more. How many apples? Think step by step.\nA:"
    spec = GenerationSpec(max_new_tokens=24, n_samples=1, greedy=True, temperature=1.0,
                          top_p=0.95, top_k_alternatives=5)
    whole = hf_model.generate([prompt], spec, [7])[0]
    sample = whole.samples[0]
    c = token_confidences(sample.top_logprobs)
    window = 4
    assert c.size > window + 2, "the sample is too short to test a stop"
    groups = np.unique(group_confidences(c, window))
    assert groups.size >= 2
    threshold = float((groups[0] + groups[1]) / 2)  # between two group values: no tie
    expected = stop_point(c, threshold, window)
    assert expected is not None
    updates: list = []
    stop = TraceStop(threshold, window=window)
    stream = AnswerStream(updates.append, n_choices=2, trace_stop=stop)
    live = hf_model.generate([prompt], spec, [7], on_token=stream)[0]
    cut = live.samples[0]
    assert stop.stopped == {(0, 0): expected}
    assert cut.finish_reason.startswith("deepconf: group confidence")
    assert cut.token_ids == sample.token_ids[:expected]
    assert live.greedy.token_ids == whole.greedy.token_ids  # the greedy row is never stopped
    assert sum(1 for u in updates if u.choice == 1) == expected
