"""DeepConf's offline vote (confidence-filtered voting over traces) on hand-made stored runs."""

from __future__ import annotations

import numpy as np
import pytest

from confide.core.errors import InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.decisions.voting import compare_filtered_votes, filtered_vote, trace_confidences
from tests.decisions.helpers import generation, traced, write_run

# Trace confidences (DeepConf mean, top-2): C = -(l1 + l2) / 2 per token.
SURE = [[-0.05, -3.95]] * 4         # C = 2.0 every token
UNSURE = [[-0.6, -0.8]] * 4         # C = 0.7
SHAKY = [[-0.6, -0.8]] * 3 + [[-0.05, -3.95]]  # mean (0.7 * 3 + 2.0) / 4 = 1.025


def test_filtered_vote_hand_computed():
    labels = [0, 1, 1, 1, 0]
    conf = [2.0, 0.7, 0.7, 1.025, 2.0]
    # plain majority: 1 (three votes). Top 40 %: samples 0 and 4, both cluster 0.
    label, kept = filtered_vote(labels, conf, eta=40)
    assert label == 0 and kept.tolist() == [0, 4]
    # all kept, weighted: 0 -> 4.0 against 1 -> 2.425
    assert filtered_vote(labels, conf, eta=100)[0] == 0
    # all kept, unweighted: the majority
    assert filtered_vote(labels, conf, eta=100, weighted=False)[0] == 1
    # top 60 % = 3 samples: 0, 4 and 3 (1.025); unweighted 2 against 1 -> cluster 0
    label, kept = filtered_vote(labels, conf, eta=60, weighted=False)
    assert label == 0 and kept.tolist() == [0, 3, 4]
    # a NaN confidence is never kept; eta that keeps under one sample keeps the best one
    label, kept = filtered_vote([0, 1], [np.nan, 0.5], eta=10)
    assert label == 1 and kept.tolist() == [1]
    with pytest.raises(InvalidInputError, match="eta"):
        filtered_vote(labels, conf, eta=0)
    with pytest.raises(InvalidInputError, match="no sample has a confidence"):
        filtered_vote([0, 1], [np.nan, np.nan])


def _record(i: int, samples: list[Generation], reference: str) -> Record:
    item = Item(id=f"q{i}", prompt=f"question {i}?", references=[reference])
    greedy = samples[0]
    return Record(item=item, greedy=greedy, samples=samples, scores={"msp": 0.5},
                  grades={"contains": float(reference in greedy.text)})


@pytest.fixture
def trace_run(tmp_path):
    records = [
        # majority (3 of 5) says 5, the two confident traces say 4 (right)
        _record(0, [traced("4", SURE), traced("5", UNSURE), traced("5", UNSURE),
                    traced("5", SHAKY), traced("4", SURE)], "4"),
        # unanimous and right
        _record(1, [traced("7", SURE)] * 3, "7"),
        # majority right (2 of 3), the one confident trace wrong
        _record(2, [traced("9", UNSURE), traced("9", UNSURE), traced("8", SURE)], "9"),
        # no trace in any sample: skipped and counted
        _record(3, [generation("1", [-0.1]), generation("1", [-0.2])], "1"),
    ]
    return write_run(tmp_path / "traces", records)


def test_compare_filtered_votes_per_item_and_overall(trace_run):
    out = compare_filtered_votes(trace_run, eta=40, measure="mean")
    assert out.n == 3 and out.n_skipped == 1 and out.k == 5 and out.judge == "exact"
    by_id = {it.id: it for it in out.items}
    # q0: majority 5 (wrong), top 40 % = the two SURE traces -> 4 (right)
    assert (by_id["q0"].majority, by_id["q0"].filtered, by_id["q0"].kept) == (0.0, 1.0, 2)
    # q2: top ceil(0.4 * 3) = 2: the SURE 8 (2.0) and the first UNSURE 9 (0.7):
    # weighted 2.0 against 0.7 -> 8 (wrong); majority 9 (right)
    assert (by_id["q2"].majority, by_id["q2"].filtered) == (1.0, 0.0)
    assert out.majority == pytest.approx(2 / 3) and out.filtered == pytest.approx(2 / 3)
    assert out.changed == 2
    # tokens: each reply is 4 trace tokens + 1 answer token = 5
    assert (by_id["q0"].tokens_kept, by_id["q0"].tokens_all) == (10, 25)
    assert out.tokens_all == 25 + 15 + 15 and out.tokens_kept == 10 + 10 + 10
    # every sample kept, majority among them: the plain majority vote
    same = compare_filtered_votes(trace_run, eta=100, weighted=False)
    assert same.filtered == same.majority and same.changed == 0
    assert same.tokens_kept == same.tokens_all


def test_trace_confidences_nan_for_samples_without_a_final_answer():
    record = _record(0, [traced("4", SURE), traced("", SURE), generation("4", [-0.1])], "4")
    conf = trace_confidences(record, "mean")
    assert conf[0] == pytest.approx(2.0, abs=1e-6) and np.isnan(conf[1:]).all()


def test_compare_filtered_votes_refuses_runs_without_traces(tmp_path):
    run = write_run(tmp_path / "plain", [_record(0, [generation("1", [-0.1]),
                                                     generation("1", [-0.2])], "1")])
    with pytest.raises(InvalidInputError, match="reasoning trace"):
        compare_filtered_votes(run)
    with pytest.raises(InvalidInputError, match="measure"):
        compare_filtered_votes(run, measure="median")


def test_vote_command_shows_the_filtered_vote(trace_run):
    from typer.testing import CliRunner

    from confide.cli import app

    result = CliRunner().invoke(app, ["vote", str(trace_run), "--no-adaptive", "--eta", "40",
                                      "--trace-confidence", "mean"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "DeepConf offline" in result.output and "top 40 %, confidence-weighted" in result.output
    assert "30 / 55" in result.output and "differ on 2 record(s)" in result.output
    bad = CliRunner().invoke(app, ["vote", str(trace_run), "--no-adaptive", "--eta", "0"])
    assert bad.exit_code != 0 and "eta" in bad.output
