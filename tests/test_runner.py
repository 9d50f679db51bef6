"""Runs on the real bundled model: end to end, resume after SIGKILL, refusal, bad input."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from confide import api
from confide.core.errors import ConfigMismatch, InvalidInputError, UnknownNameError
from confide.pipeline.plan import DEFAULT_SCORERS, RunConfig
from confide.runs.execution import execute

SMALL = dict(limit=6, max_new_tokens=12, batch_size=3)


def _comparable(run: api.Run):
    rows = []
    for r in run.records:
        rows.append((r.item.id, r.greedy.text, r.greedy.token_ids, r.scores, r.grades))
    return rows


def test_run_end_to_end_on_bundled_model(hf_model, tmp_path):
    run = api.generate_and_evaluate(hf_model, task="triviaqa", out=tmp_path / "run", **SMALL)
    assert len(run.records) == 6
    for record in run.records:
        assert set(record.scores) == set(DEFAULT_SCORERS)
        assert "contains" in record.grades
        assert record.greedy.n_tokens <= 12
    table = run.table
    assert table.n_items == table.n_graded == 6
    assert [row.scorer for row in table.rows] == list(DEFAULT_SCORERS)
    for row in table.rows:
        assert set(row.metrics) == {"auroc", "prr", "aurc"}
    assert 0.0 <= table.accuracy[0] <= 1.0


def test_run_twice_generates_nothing_new(hf_model, tmp_path):
    first = api.generate_and_evaluate(hf_model, out=tmp_path, **SMALL)
    second = api.generate_and_evaluate(hf_model, out=tmp_path, **SMALL)
    assert first.outcome.generated == 6 and second.outcome.generated == 0
    assert _comparable(first) == _comparable(second)


def test_run_refuses_a_different_configuration(hf_model, tmp_path):
    api.generate_and_evaluate(hf_model, out=tmp_path, limit=3, max_new_tokens=8, batch_size=3)
    with pytest.raises(ConfigMismatch, match="seed: stored 0, now 7"):
        api.generate_and_evaluate(hf_model, out=tmp_path, limit=3, max_new_tokens=8,
                                  batch_size=3, seed=7)


def test_run_unknown_scorer_lists_known_ones(tmp_path):
    with pytest.raises(UnknownNameError,
                       match=r"Did you mean 'msp'.*Known answer-level scorers: .*length"):
        execute(RunConfig(scorers=("mspp",)), tmp_path)
    assert not (tmp_path / "run.sqlite").exists()  # refused before touching the store


def test_run_empty_question_names_the_item(tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "Who wrote Hamlet?", "references": ["Shakespeare"]}\n'
                    '{"question": "   ", "references": ["x"]}\n')
    with pytest.raises(InvalidInputError) as info:
        execute(RunConfig(task=str(data)), tmp_path / "run")
    assert "qa.jsonl" in str(info.value) or "item" in str(info.value)
    assert "2" in str(info.value)


def _count(db: Path) -> int:
    try:
        conn = sqlite3.connect(db, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_run_killed_with_sigkill_resumes_to_identical_results(tmp_path):
    args = ["--limit", "10", "--max-new-tokens", "10", "--batch-size", "2", "--no-report"]
    cmd = [sys.executable, "-m", "confide.cli", "run", *args]
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen([*cmd, "--out", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while _count(killed / "run.sqlite") < 3 and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stored_before = _count(killed / "run.sqlite")
    assert 3 <= stored_before < 10, "the kill should land mid-run"

    resumed = subprocess.run([*cmd, "--out", str(killed)], env=env, capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{10 - stored_before} item(s)" in resumed.stdout
    subprocess.run([*cmd, "--out", str(clean)], env=env, check=True, capture_output=True,
                   timeout=600)

    conn = sqlite3.connect(killed / "run.sqlite")
    ids = [r[0] for r in conn.execute("SELECT item_id FROM records")]
    assert len(ids) == 10 == len(set(ids))
    a, b = api.open_run(killed), api.open_run(clean)
    assert _comparable(a) == _comparable(b)
    assert a.table.to_dict() == b.table.to_dict()


def test_run_ctrl_c_keeps_stored_items_and_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    # far more items than can finish between two polls, however fast the machine
    cmd = [sys.executable, "-m", "confide.cli", "run", "--limit", "200", "--max-new-tokens",
           "10", "--batch-size", "2", "--no-report", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "300"})
    deadline = time.monotonic() + 300
    while _count(out / "run.sqlite") < 2 and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    stored = _count(out / "run.sqlite")
    assert proc.returncode == 130, stderr
    assert "Interrupted" in stderr and "Resume with: confide run" in stderr
    assert "Traceback" not in stderr
    assert 2 <= stored < 200


def test_runs_made_before_the_hidden_state_fix_are_recognised(hf_model, tmp_path):
    """A run stores its format version; one made before version 2 with hidden states says
    so in eval and fit, and is not resumed (its states would mix with fixed ones)."""
    from confide.store.run_store import FORMAT_VERSION, RunStore

    settings = dict(limit=2, max_new_tokens=3, batch_size=2, hidden_layers=(-1,))
    api.generate_and_evaluate(hf_model, out=tmp_path, **settings)
    with RunStore.open(tmp_path) as store:
        assert store.format_version == FORMAT_VERSION and store.hidden_states_note() is None
        store._conn.execute("DELETE FROM meta WHERE key = 'format_version'")  # as made before
        store._conn.execute("DELETE FROM records WHERE item_id = (SELECT MIN(item_id) "
                            "FROM records)")
    run = api.open_run(tmp_path)
    assert run.hidden_states_note and "predate the fix" in run.hidden_states_note
    assert any("predate the fix" in note for note in run.compute_table(n_resamples=10).notes)
    with pytest.raises(ConfigMismatch, match="predate the fix"):
        api.generate_and_evaluate(hf_model, out=tmp_path, **settings)


@pytest.mark.model
def test_evaluate_without_out_writes_nothing_here_and_says_where(hf_model, tmp_path,
                                                                 monkeypatch):
    import inspect

    monkeypatch.chdir(tmp_path)
    run = api.generate_and_evaluate(hf_model, limit=2, max_new_tokens=3, batch_size=2)
    assert list(tmp_path.iterdir()) == []  # no runs/ folder in the caller's folder
    (note,) = [n for n in run.notes if "temporary folder" in n]
    assert str(run.path) in note and run.path.is_dir() and len(run.records) == 2
    assert any("temporary folder" in n for n in run.compute_table(n_resamples=10).notes)
    # the CLI's defaults and names, typed: a typo is refused by name before anything runs
    params = inspect.signature(api.generate_and_evaluate).parameters
    assert params["limit"].default == 200 and "scorers" in params and "settings" not in params
    with pytest.raises(TypeError, match="limt"):
        api.generate_and_evaluate(hf_model, limt=2)  # type: ignore[call-arg]
