"""confide serve --log-run: every reply stored once as a record of a resumable run."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from faultserver import FaultServer, running  # noqa: E402
from test_serve import platt, threshold_policy  # noqa: E402

from confide.backends.openai import OpenAIBackend  # noqa: E402
from confide.core.errors import ConfigMismatch  # noqa: E402
from confide.runs.stored import Run  # noqa: E402
from confide.serve import traffic  # noqa: E402
from confide.serve.app import create_app  # noqa: E402
from confide.store.run_store import RunStore  # noqa: E402

UPSTREAM_KEY = "sk-upstream-traffic-5d21c"
CLIENT_KEY = "sk-client-traffic-77ab0"
KEY_ENV = "CONFIDE_TEST_TRAFFIC_KEY"


def _app(upstream: FaultServer, log_run: Path, *, scorers: tuple[str, ...] = ("msp", "length"),
         model: str = "fault-model", **options):
    backend = OpenAIBackend(model, base_url=upstream.base_url, api_key_env=KEY_ENV, timeout=5,
                            backoff=0.01)
    return create_app(backend, scorers=scorers, log_run=log_run, **options)


def _health(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/health", timeout=10).json()


def _stored(run_dir: Path) -> list:
    with RunStore.open(run_dir) as store:
        return store.records()


def _wait_for(predicate, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def test_traffic_stores_replies_and_streams_once_each(tmp_path, monkeypatch):
    import openai

    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    run_dir = tmp_path / "traffic"
    calibrator = platt(a=1.0, b=0.0, scorer="msp")
    policy = threshold_policy(0.5, calibrator_scorer="msp")
    with FaultServer() as upstream:
        app = _app(upstream, run_dir, calibrator=calibrator, policy=policy)
        with running(app) as url:
            client = openai.OpenAI(base_url=url, api_key=CLIENT_KEY, max_retries=0)
            reply = client.chat.completions.create(
                model="fault-model", messages=[{"role": "user", "content": "Capital of Peru?"}],
                max_tokens=8)
            chunks = list(client.chat.completions.create(
                model="fault-model", messages=[{"role": "user", "content": "Capital of Chad?"}],
                max_tokens=8, stream=True))
            health = _health(url)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert reply.confide["decision"] == "abstain" and streamed  # the policy abstained
    assert health["log_run"] == {"path": str(run_dir), "stored": 2, "failed": 0,
                                 "dropped": 0, "pending": 0, "retries": 0,
                                 "waiting_for_lock": False, "last_error": None}
    records = _stored(run_dir)
    assert [r.item.question for r in records] == ["Capital of Peru?", "Capital of Chad?"]
    plain, stream = records
    assert plain.item.prompt == [{"role": "user", "content": "Capital of Peru?"}]
    assert plain.greedy.text == reply.confide["answer"]  # the model's answer, not the message
    assert plain.greedy.token_logprobs is not None and plain.greedy.n_tokens == 2
    assert plain.scores["msp"] == pytest.approx(reply.confide["confidences"]["msp"])
    decision = plain.item.metadata["decision"]
    assert decision["decision"] == "abstain" and decision["decided_on"] == "calibrated"
    assert decision["calibrated"] == pytest.approx(reply.confide["calibrated"])
    assert plain.item.metadata["request"]["endpoint"] == "chat"
    assert (plain.item.metadata["request"]["stream"], stream.item.metadata["request"]["stream"]
            ) == (False, True)
    assert stream.greedy.text.startswith("answer") and plain.item.id < stream.item.id
    assert plain.item.references == [] and plain.grades == {}
    # each reply names its record (the stream in its last chunk)
    assert reply.confide["record_id"] == plain.item.id
    last = [getattr(c, "confide", None) or {} for c in chunks]
    assert [c["record_id"] for c in last if "record_id" in c] == [stream.item.id]
    assert plain.item.metadata["request"]["reply_id"] == reply.id
    assert stream.item.metadata["request"]["reply_id"] == chunks[-1].id
    # the run's identity, as the readers of runs need it
    run = Run(run_dir)
    assert run.config["scorers"] == ["msp", "length"] and run.config["model"] == "fault-model"
    assert run.backend_config["backend"] == "openai" and run.skipped_scorers == {}
    # neither key is anywhere in the run directory (database, WAL, shared memory)
    assert upstream.requests[-1].authorization == f"Bearer {UPSTREAM_KEY}"
    for path in run_dir.iterdir():
        data = path.read_bytes()
        assert UPSTREAM_KEY.encode() not in data and CLIENT_KEY.encode() not in data
        assert b"Bearer" not in data and b"authorization" not in data.lower()


def test_traffic_run_is_evaluated_and_reported(tmp_path, monkeypatch):
    """`confide eval DIR` and `confide report DIR` read the traffic, before and after
    labels (labels set here by hand, as `confide label` stores them)."""
    import openai
    from typer.testing import CliRunner

    from confide.cli import app as cli

    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        for i in range(12):
            client.chat.completions.create(
                model="fault-model", messages=[{"role": "user", "content": f"Q{i}?"}],
                max_tokens=8)
    result = CliRunner().invoke(cli, ["eval", str(run_dir), "--resamples", "50"])
    assert result.exit_code == 0, result.output
    assert "msp" in result.output and "length" in result.output
    assert "0 graded of 12 items" in result.output  # production traffic: not labelled yet
    with RunStore.open(run_dir) as store:  # label: half right
        for i, record in enumerate(store.records()):
            record.item.references = ["x"]
            record.grades = {"contains": float(i % 2)}
            store.replace(record)
    result = CliRunner().invoke(cli, ["eval", str(run_dir), "--resamples", "50"])
    assert result.exit_code == 0, result.output
    assert "msp" in result.output and "12 graded of 12 items" in result.output
    report = CliRunner().invoke(cli, ["report", str(run_dir), "--resamples", "50"])
    assert report.exit_code == 0, report.output
    assert (run_dir / "report.html").stat().st_size > 0


def test_traffic_locked_store_never_fails_a_request_and_loses_no_reply(tmp_path, monkeypatch):
    """A lock held past the busy timeout delays the writes, never the replies (beyond
    the wait) and never drops one: once it is released, every reply is stored, in order."""
    import openai

    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    monkeypatch.setattr(traffic, "BUSY_TIMEOUT", 0.2)
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)

        def ask(i: int, stream: bool = False):
            reply = client.chat.completions.create(
                model="fault-model", messages=[{"role": "user", "content": f"Q{i}?"}],
                max_tokens=8, stream=stream)
            return list(reply) if stream else reply

        ask(0)
        lock = sqlite3.connect(run_dir / "run.sqlite", isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        began = time.monotonic()
        locked = ask(1)
        elapsed = time.monotonic() - began
        streamed = ask(2, stream=True)
        _wait_for(lambda: _health(url)["log_run"]["retries"] >= 2)
        during = _health(url)["log_run"]
        lock.execute("ROLLBACK")
        lock.close()
        ask(3)
        _wait_for(lambda: _health(url)["log_run"]["pending"] == 0)
        after = _health(url)["log_run"]
    assert locked.choices[0].message.content.startswith("answer") and streamed
    assert elapsed < traffic.WAIT + 2
    assert during["stored"] == 1 and during["pending"] == 2 and during["waiting_for_lock"]
    assert "busy" in during["last_error"] and during["failed"] == during["dropped"] == 0
    assert after["stored"] == 4 and after["failed"] == after["dropped"] == 0
    assert not after["waiting_for_lock"]
    records = _stored(run_dir)
    assert [r.item.question for r in records] == ["Q0?", "Q1?", "Q2?", "Q3?"]
    assert locked.confide["record_id"] == records[1].item.id


def test_traffic_unwritable_directory_never_fails_a_request(tmp_path, monkeypatch):
    import openai

    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the run's parent directory should be")
    run_dir = blocker / "traffic"
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        at_start = _health(url)["log_run"]
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        for stream in (False, True):
            reply = client.chat.completions.create(
                model="fault-model", messages=[{"role": "user", "content": "Q?"}],
                max_tokens=8, stream=stream)
            if stream:
                assert list(reply)
            else:
                assert reply.choices[0].message.content.startswith("answer")
        health = _health(url)["log_run"]
    assert at_start["failed"] == 0 and "cannot open run database" in at_start["last_error"]
    assert health["stored"] == 0 and health["failed"] == 2 and health["dropped"] == 0
    assert "cannot open run database" in health["last_error"]


def test_traffic_refuses_another_setup_at_startup(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from confide.cli import app as cli

    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream:
        _app(upstream, run_dir)  # creates the run: fault-model, msp + length
        _app(upstream, run_dir)  # the same setup again: fine
        with pytest.raises(ConfigMismatch, match="scorers"):
            _app(upstream, run_dir, scorers=("msp",))
        with pytest.raises(ConfigMismatch, match="model"):
            _app(upstream, run_dir, model="other-model")
        result = CliRunner().invoke(cli, [
            "serve", "--backend", "openai", "--model", "fault-model", "--base-url",
            upstream.base_url, "--api-key-env", KEY_ENV, "--scorers", "msp",
            "--log-run", str(run_dir)])
    assert result.exit_code == 1
    assert "ConfigMismatch" in result.output and "--log-run" in result.output
    assert "scorers" in result.output


def _free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def _start_server(upstream: FaultServer, run_dir: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "confide.cli", "serve", "--backend", "openai", "--model", "m",
         "--base-url", upstream.base_url, "--api-key-env", KEY_ENV, "--scorers", "msp,length",
         "--log-run", str(run_dir), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(proc.communicate()[1]) from None
            time.sleep(0.2)


def test_traffic_survives_sigkill_and_a_restart_appends(tmp_path, monkeypatch):
    """Killed with SIGKILL after k replies: each reply received is stored exactly once;
    the same command on the same directory appends to the run."""
    import openai

    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)
    run_dir, port, k = tmp_path / "traffic", _free_port(), 5
    received: list[str] = []
    with FaultServer() as upstream:
        proc = _start_server(upstream, run_dir, port)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                   max_retries=0)
            for i in range(8):
                question = f"Question {i}?"
                reply = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": question}],
                    max_tokens=8, stream=i % 2 == 1)
                if i % 2 == 1:
                    assert list(reply)  # the whole stream, [DONE] included
                received.append(question)
                if len(received) == k:
                    proc.send_signal(signal.SIGKILL)
                    break
        finally:
            proc.kill()
            proc.communicate(timeout=20)
        assert proc.returncode == -signal.SIGKILL
        first = _stored(run_dir)
        assert [r.item.question for r in first] == received  # each once, in order

        proc = _start_server(upstream, run_dir, port)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                   max_retries=0)
            for question in ("Question 0?", "After restart?"):  # a repeat is a new record
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": question}], max_tokens=8)
                received.append(question)
            health = _health(f"http://127.0.0.1:{port}/v1")["log_run"]
        finally:
            proc.terminate()
            proc.communicate(timeout=20)
    assert health["stored"] == 2 and health["failed"] == 0
    records = _stored(run_dir)
    assert [r.item.question for r in records] == received
    assert len({r.item.id for r in records}) == len(records)
    with sqlite3.connect(run_dir / "run.sqlite") as conn:
        positions = [p for (p,) in conn.execute("SELECT position FROM records ORDER BY rowid")]
        config = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'config'"
                                         ).fetchone()[0])
    assert positions == list(range(len(received)))
    assert config["source"] == "serve" and config["scorers"] == ["msp", "length"]
