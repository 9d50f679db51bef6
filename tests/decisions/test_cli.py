from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import expit
from typer.testing import CliRunner

from confide.cli import app
from confide.core.records import Item, Record
from confide.decisions import load_calibrator, load_policy
from tests.decisions.helpers import generation, scored_records, write_run

runner = CliRunner()


def text(result) -> str:
    """The command's output with Rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture
def graded_run(tmp_path):
    rng = np.random.default_rng(3)
    s = rng.normal(size=300)
    correct = (rng.random(300) < expit(2 * s + 1)).astype(float)
    return write_run(tmp_path / "run", scored_records(s, correct, tokens=4))


def test_cli_calibrate_writes_json(graded_run, tmp_path):
    out = tmp_path / "cal.json"
    result = runner.invoke(app, ["calibrate", str(graded_run), "--scorer", "msp",
                                 "--method", "platt", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "platt calibrator for msp on 300 graded items" in text(result)
    assert "ECE (cross-fitted)" in text(result) and "reliability" in text(result)
    cal = load_calibrator(out)
    assert cal.scorer == "msp" and cal.method == "platt" and cal.n_fit == 300
    default = runner.invoke(app, ["calibrate", str(graded_run), "--method", "histogram"])
    assert default.exit_code == 0, default.output
    assert (graded_run / "calibrator-msp-histogram.json").exists()


def test_cli_abstain_feasible_and_infeasible(graded_run, tmp_path):
    out = tmp_path / "policy.json"
    result = runner.invoke(app, ["abstain", str(graded_run), "--alpha", "0.2", "--delta",
                                 "0.1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    policy = load_policy(out)
    assert policy.feasible and policy.scorer == "msp"
    assert "error rate among answered items is <= 0.2" in text(result)
    assert "test sequence" in text(result)
    strict = runner.invoke(app, ["abstain", str(graded_run), "--alpha", "0.001", "--delta",
                                 "0.01", "--out", str(tmp_path / "none.json")])
    assert strict.exit_code == 0, strict.output
    assert "abstain on every item" in text(strict)
    assert json.loads((tmp_path / "none.json").read_text())["threshold"] is None


def test_cli_abstain_with_calibrator(graded_run, tmp_path):
    cal = tmp_path / "cal.json"
    assert runner.invoke(app, ["calibrate", str(graded_run), "--out", str(cal)]).exit_code == 0
    result = runner.invoke(app, ["abstain", str(graded_run), "--alpha", "0.2",
                                 "--calibrator", str(cal), "--out", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    assert "calibrated msp" in text(result)
    assert load_policy(tmp_path / "p.json").scorer is None


def test_cli_errors_are_one_line_with_exit_1(graded_run, tmp_path):
    result = runner.invoke(app, ["calibrate", str(graded_run), "--scorer", "nope"])
    assert result.exit_code == 1
    assert "InvalidInputError" in text(result) and "no record has scorer 'nope'" in text(result)
    result = runner.invoke(app, ["abstain", str(graded_run), "--alpha", "2"])
    assert result.exit_code == 1 and "alpha" in text(result)
    result = runner.invoke(app, ["route", "--small-run", str(graded_run)])
    assert result.exit_code == 1 and "--large-run" in text(result)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    result = runner.invoke(app, ["abstain", str(graded_run), "--calibrator", str(bad)])
    assert result.exit_code == 1 and "bad.json:1: not valid JSON" in text(result)


def test_cli_route_on_stored_runs(tmp_path):
    small = write_run(tmp_path / "small", scored_records([0.9, 0.1, 0.5, 0.7], [1, 0, 0, 1],
                                                         tokens=2), model="tiny")
    large = write_run(tmp_path / "large", scored_records([0, 0, 0, 0], [1, 1, 1, 0], tokens=8),
                      model="big")
    result = runner.invoke(app, ["route", "--small-run", str(small), "--large-run", str(large),
                                 "--target-accuracy", "1.0"])
    assert result.exit_code == 0, result.output
    assert "cascade tiny → big on 4 items" in text(result)
    assert "chosen" in text(result) and "small only" in text(result)
    assert "large only" in text(result) and "oracle routing 1.000" in text(result)
    over = runner.invoke(app, ["route", "--small-run", str(small), "--large-run", str(large),
                               "--budget", "1"])
    assert over.exit_code == 1 and "budget" in text(over)


def test_cli_vote_with_adaptive(tmp_path):
    records = []
    for i, (answers, ref) in enumerate([(["Paris", "Lyon", "Lyon"], "Paris"),
                                        (["Rome"] * 3, "Rome")]):
        item = Item(id=f"q{i}", prompt="?", references=[ref])
        records.append(Record(item=item, greedy=generation(answers[0], [-0.3]),
                              samples=[generation(a, [-0.1 if a == ref else -2.0])
                                       for a in answers],
                              scores={"msp": 0.5}, grades={"contains": 1.0}))
    run = write_run(tmp_path / "votes", records)
    result = runner.invoke(app, ["vote", str(run), "--temperature", "0.1"])
    assert result.exit_code == 0, result.output
    assert "2 records × 3 samples" in text(result)
    assert "majority vote (3 samples)" in text(result) and "CISC, T = 0.1" in text(result)
    assert "adaptive sampling" in text(result) and "fixed k = 3" in text(result)


def test_decisions_import_no_torch():
    import subprocess
    import sys

    code = ("import sys, confide.decisions, confide.cli.decision_tables;"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False False"
