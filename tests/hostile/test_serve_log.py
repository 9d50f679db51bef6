"""Issue 38, item 5 (and item 1's HTTP boundary): ``confide serve --log-run`` as a hostile
user meets it, on real servers on 127.0.0.1.

- The reply a client receives names its stored record (``confide.record_id``, the
  ``X-Confide-Record-Id`` header, a stream's last chunk) and ``confide label`` takes
  that id (and the reply's own ``chatcmpl-...`` id); ``confide eval`` then grades it.
- A second process holding the run's SQLite write lock for longer than the old 5 s
  busy timeout delays the writes, never a reply, and loses none: each is stored once
  the lock is released, in order. A full queue drops replies, counts them on
  ``/health`` and says so in the log; a shutdown stores the queue first.
- Two servers logging into one run give every record its own position.
- A prompt that is valid JSON but not valid Unicode (a lone surrogate ``"\\udcff"``) is
  answered 400 naming the field; nothing is generated or stored.

The upstream is :class:`faultserver.FaultServer` (an OpenAI-compatible server on
127.0.0.1), so the model costs nothing; one test serves the bundled SmolLM2
(``-m model``).
"""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faultserver import FaultServer, running  # noqa: E402

from confide.backends.openai import OpenAIBackend  # noqa: E402
from confide.cli import app as cli  # noqa: E402
from confide.serve import traffic  # noqa: E402
from confide.serve.app import create_app  # noqa: E402
from confide.store.run_store import RunStore  # noqa: E402

KEY_ENV = "CONFIDE_TEST_SERVE_LOG_KEY"
HEADER = "X-Confide-Record-Id"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-serve-log-test")


def _app(upstream: FaultServer, run_dir: Path, **options):
    backend = OpenAIBackend("fault-model", base_url=upstream.base_url, api_key_env=KEY_ENV,
                            timeout=5, backoff=0.01)
    return create_app(backend, scorers=("msp", "length"), log_run=run_dir, **options)


def _ask(url: str, question: str, *, stream: bool = False, model: str = "fault-model",
         max_tokens: int = 8) -> tuple[dict, httpx.Headers]:
    """One chat request; a stream is read whole and its last chunk returned."""
    body = {"model": model, "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "stream": stream}
    if not stream:
        reply = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        return reply.json(), reply.headers
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=60) as reply:
        assert reply.status_code == 200
        events = [line.removeprefix("data: ") for line in reply.iter_lines()
                  if line.startswith("data: ")]
        headers = reply.headers
    assert events[-1] == "[DONE]", events[-3:]
    return json.loads(events[-2]), headers


def _health(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/health", timeout=10).json()["log_run"]


def _stored(run_dir: Path) -> list:
    with RunStore.open(run_dir) as store:
        return store.records()


def _positions(run_dir: Path) -> list[int]:
    with sqlite3.connect(run_dir / "run.sqlite") as conn:
        return [p for (p,) in conn.execute("SELECT position FROM records ORDER BY rowid")]


def _wait_for(predicate, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


# -- a reply names its record, and `confide label` takes the name ---------------------------


def _label_and_eval(run_dir: Path, labels: list[dict], tmp_path: Path) -> str:
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in labels))
    result = runner.invoke(cli, ["label", str(run_dir), str(path)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["eval", str(run_dir), "--grader", "human",
                                 "--resamples", "50"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_reply_names_its_record_and_label_takes_it(tmp_path):
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        plain, plain_headers = _ask(url, "Capital of Peru?")
        last, stream_headers = _ask(url, "Capital of Chad?", stream=True)
        by_reply_id, _ = _ask(url, "Capital of Mali?")
        health = _health(url)
    assert health["stored"] == 3 and health["failed"] == health["dropped"] == 0
    records = {r.item.id: r for r in _stored(run_dir)}
    # the JSON reply: the confide object and the header name the same stored record
    record_id = plain["confide"]["record_id"]
    assert plain_headers[HEADER] == record_id and record_id in records
    assert records[record_id].item.question == "Capital of Peru?"
    assert records[record_id].greedy.text == plain["choices"][0]["message"]["content"]
    # the stream: its last chunk (and its header) names its record
    streamed_id = last["confide"]["record_id"]
    assert stream_headers[HEADER] == streamed_id
    assert records[streamed_id].item.question == "Capital of Chad?"
    assert plain["id"].startswith("chatcmpl-") and plain["id"] != record_id
    assert len(set(records)) == 3
    # label by the record ids a client read, and by a reply's own id
    said = _label_and_eval(run_dir, [{"id": record_id, "label": 1},
                                     {"id": streamed_id, "label": 0},
                                     {"id": by_reply_id["id"], "label": 1}], tmp_path)
    assert "3 graded of 3 items" in said, said
    grades = {r.item.question: r.grades for r in _stored(run_dir)}
    assert grades == {"Capital of Peru?": {"human": 1.0}, "Capital of Chad?": {"human": 0.0},
                      "Capital of Mali?": {"human": 1.0}}


def test_label_refuses_an_id_no_reply_named(tmp_path):
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        _ask(url, "Q?")
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"id": "chatcmpl-0000", "label": 1}) + "\n")
    result = runner.invoke(cli, ["label", str(run_dir), str(path)])
    said = " ".join(result.output.split())
    assert result.exit_code != 0
    assert f"{path}:1" in said and "id" in said and "chatcmpl-0000" in said, said
    assert all(not r.grades for r in _stored(run_dir))


@pytest.mark.model
def test_bundled_model_reply_is_labelled_by_its_header(tmp_path, hf_model):
    run_dir = tmp_path / "traffic"
    app = create_app(hf_model, model_name="smollm2", scorers=("msp", "mean_logprob"),
                     log_run=run_dir)
    with running(app) as url:
        reply, headers = _ask(url, "What is the capital of France?", model="smollm2",
                              max_tokens=6)
    record_id = headers[HEADER]
    assert reply["confide"]["record_id"] == record_id
    said = _label_and_eval(run_dir, [{"id": record_id, "label": 1}], tmp_path)
    assert "1 graded of 1 items" in said, said
    (record,) = _stored(run_dir)
    assert record.item.id == record_id and record.grades == {"human": 1.0}
    assert record.scores["msp"] == pytest.approx(reply["confide"]["confidences"]["msp"])


# -- a lock held by another process: replies wait in the queue, none is lost -----------------

_HOLD_LOCK = textwrap.dedent("""
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")  # the write lock; readers go on
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("ROLLBACK")
    conn.close()
""")


def _hold_lock(run_dir: Path, seconds: float) -> subprocess.Popen:
    """Another process holding the run's write lock for ``seconds``."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(run_dir / "run.sqlite"),
                             str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_lock_held_past_the_old_timeout_loses_no_reply(tmp_path):
    """The lock is held 7 s, past the 5 s a write once waited before it was dropped."""
    run_dir = tmp_path / "traffic"
    assert traffic.BUSY_TIMEOUT == 5.0
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        _ask(url, "Q0?")
        holder = _hold_lock(run_dir, 7.0)
        try:
            took, ids = [], []
            for i in range(1, 7):
                began = time.monotonic()
                reply, headers = _ask(url, f"Q{i}?", stream=i % 2 == 0)
                took.append(time.monotonic() - began)
                ids.append(reply["confide"]["record_id"])
            during = _health(url)
        finally:
            holder.communicate(timeout=30)
        assert holder.returncode == 0
        _wait_for(lambda: _health(url)["pending"] == 0)
        after = _health(url)
    assert max(took) < traffic.WAIT + 2  # the first waited its 1 s, the rest not at all
    assert during["stored"] == 1 and during["pending"] == 6
    assert during["dropped"] == during["failed"] == 0
    assert after["stored"] == 7 and after["dropped"] == after["failed"] == 0
    assert after["retries"] >= 1 and not after["waiting_for_lock"]
    records = _stored(run_dir)
    assert [r.item.question for r in records] == [f"Q{i}?" for i in range(7)]
    assert [r.item.id for r in records[1:]] == ids
    assert _positions(run_dir) == list(range(7))


def test_full_queue_counts_drops_on_health_and_warns(tmp_path, monkeypatch, caplog):
    run_dir = tmp_path / "traffic"
    monkeypatch.setattr(traffic, "MAX_PENDING", 2)
    monkeypatch.setattr(traffic, "BUSY_TIMEOUT", 0.2)
    caplog.set_level(logging.WARNING, logger="confide.serve.traffic")
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        _ask(url, "Q0?")
        holder = _hold_lock(run_dir, 4.0)
        try:
            replies = [_ask(url, f"Q{i}?") for i in range(1, 6)]
            during = _health(url)
        finally:
            holder.communicate(timeout=30)
        _wait_for(lambda: _health(url)["pending"] == 0)
        after = _health(url)
    named = [reply["confide"]["record_id"] for reply, _ in replies]
    assert [i is not None for i in named] == [True, True, False, False, False]
    assert [HEADER in headers for _, headers in replies] == [True, True, False, False, False]
    assert during["dropped"] == 3 and during["pending"] == 2
    assert "queue is full" in during["last_error"]
    assert after["stored"] == 3 and after["dropped"] == 3 and after["failed"] == 0
    assert [r.item.id for r in _stored(run_dir)][1:] == named[:2]
    warned = [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
    assert warned and "queue is full" in warned[0] and "/health" in warned[0]


def test_shutdown_stores_the_queue_first(tmp_path):
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream:
        with running(_app(upstream, run_dir)) as url:
            _ask(url, "Q0?")
            holder = _hold_lock(run_dir, 3.0)
            for i in range(1, 4):
                _ask(url, f"Q{i}?")
            assert _health(url)["pending"] == 3
        # the server stopped while the lock was held: it waited, then stored the queue
        holder.communicate(timeout=30)
    assert [r.item.question for r in _stored(run_dir)] == ["Q0?", "Q1?", "Q2?", "Q3?"]


def test_shutdown_past_its_wait_counts_what_it_could_not_store(tmp_path, monkeypatch, caplog):
    """A store still locked when the shutdown's wait runs out: the queued replies are
    counted and logged as an error, and the server stops (it does not hang)."""
    run_dir = tmp_path / "traffic"
    monkeypatch.setattr(traffic, "DRAIN_TIMEOUT", 1.0)
    monkeypatch.setattr(traffic, "BUSY_TIMEOUT", 0.2)
    caplog.set_level(logging.WARNING, logger="confide.serve.traffic")
    with FaultServer() as upstream:
        with running(_app(upstream, run_dir)) as url:
            _ask(url, "Q0?")
            holder = _hold_lock(run_dir, 8.0)
            for i in range(1, 4):
                _ask(url, f"Q{i}?")
            stopping = time.monotonic()
        stopped = time.monotonic() - stopping
        holder.communicate(timeout=30)
    assert stopped < 5
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "3 replies not stored" in errors[0]
    assert "stayed locked" in errors[0]
    assert [r.item.question for r in _stored(run_dir)] == ["Q0?"]


# -- two writers into one run ------------------------------------------------------------------


def _free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def _start_server(upstream: FaultServer, run_dir: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "confide.cli", "serve", "--backend", "openai", "--model",
         "fault-model", "--base-url", upstream.base_url, "--api-key-env", KEY_ENV,
         "--scorers", "msp,length", "--log-run", str(run_dir), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(proc.communicate()[1]) from None
            time.sleep(0.2)


def test_two_servers_on_one_run_give_distinct_positions(tmp_path):
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream:
        servers = []
        try:
            for _ in range(2):
                servers.append(_start_server(upstream, run_dir))
            questions = [(url, f"S{s} Q{i}?") for i in range(6)
                         for s, (_, url) in enumerate(servers)]
            with ThreadPoolExecutor(4) as pool:  # the two servers write at the same time
                replies = list(pool.map(lambda q: _ask(*q)[0], questions))
            healths = [_health(url) for _, url in servers]
        finally:
            for proc, _ in servers:
                proc.terminate()
            for proc, _ in servers:
                proc.communicate(timeout=30)
    assert [h["stored"] for h in healths] == [6, 6]
    positions = _positions(run_dir)
    assert len(positions) == 12 and sorted(positions) == list(range(12))
    records = _stored(run_dir)
    assert sorted(r.item.question for r in records) == sorted(q for _, q in questions)
    assert {r.item.id for r in records} == {reply["confide"]["record_id"] for reply in replies}


_WRITER = textwrap.dedent("""
    import sys
    from confide.core.records import Generation, Item, Record
    from confide.store.run_store import RunStore

    with RunStore.open(sys.argv[1], {"source": "serve"}, timeout=30) as store:
        print("open", flush=True)
        sys.stdin.readline()  # both open before either writes
        for i in range(int(sys.argv[3])):
            item = Item(id=f"{sys.argv[2]}-{i:03d}", prompt="q")
            store.put(Record(item=item, greedy=Generation(text="a")), None)
""")


def test_two_store_writers_in_two_processes_never_share_a_position(tmp_path):
    run_dir, n = tmp_path / "run", 60
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(run_dir), name, str(n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name in ("a", "b")]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    for proc in procs:  # go
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
    for proc in procs:
        proc.communicate(timeout=120)
        assert proc.returncode == 0
    positions = _positions(run_dir)
    assert sorted(positions) == list(range(2 * n))
    with RunStore.open(run_dir) as store:
        ids = [r.item.id for r in store.records()]
    for name in ("a", "b"):  # each writer's records keep its own order
        assert [i for i in ids if i.startswith(name)] == [f"{name}-{i:03d}" for i in range(n)]


# -- text that is not Unicode: 400 naming the field, nothing stored ---------------------------

_SURROGATE = "hi \\udcff there"  # in the JSON text: the six characters \udcff


@pytest.mark.parametrize(("path", "body", "param"), [
    ("chat/completions", '{"model": "fault-model", "messages": [{"role": "user", '
                         f'"content": "{_SURROGATE}"}}]}}', "messages.0.content"),
    ("chat/completions", '{"model": "fault-model", "stream": true, "messages": [{"role": '
                         f'"user", "content": [{{"type": "text", "text": "{_SURROGATE}"}}]}}]}}',
     "messages.0.content"),
    ("chat/completions", '{"model": "fault-model", "messages": [{"role": "system", "content": '
                         f'"ok"}}, {{"role": "user", "content": "ok", "name": "{_SURROGATE}"}}]}}',
     "messages.1.name"),
    ("chat/completions", f'{{"model": "fault-model", "stop": ["x", "{_SURROGATE}"], '
                         '"messages": [{"role": "user", "content": "ok"}]}', "stop"),
    ("chat/completions", f'{{"model": "{_SURROGATE}", '
                         '"messages": [{"role": "user", "content": "ok"}]}', "model"),
    ("completions", f'{{"model": "fault-model", "prompt": "{_SURROGATE}"}}', "prompt"),
    ("completions", f'{{"model": "fault-model", "prompt": ["{_SURROGATE}"]}}', "prompt"),
])
def test_invalid_unicode_prompt_is_a_400_naming_the_field(tmp_path, path, body, param):
    run_dir = tmp_path / "traffic"
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        reply = httpx.post(f"{url}/{path}", content=body.encode(),
                           headers={"content-type": "application/json"}, timeout=30)
        health = _health(url)
        fine, _ = _ask(url, "And this one?")  # the server goes on
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["message"].startswith(f"{param}: ")
    assert error["type"] == "invalid_request_error"
    if param != "model":
        assert "not valid Unicode" in error["message"] and "\\udcff" in error["message"]
    assert upstream.requests == [] or all("udcff" not in r.question for r in upstream.requests)
    assert health["stored"] == health["failed"] == health["dropped"] == 0
    assert [r.item.question for r in _stored(run_dir)] == ["And this one?"]
    assert fine["confide"]["record_id"]


def test_invalid_unicode_never_reaches_the_store_concurrently(tmp_path):
    """Bad bodies between good ones, at once: the good are stored, the bad answered 400."""
    run_dir = tmp_path / "traffic"
    bad = ('{"model": "fault-model", "messages": [{"role": "user", '
           f'"content": "{_SURROGATE}"}}]}}').encode()
    codes: list[int] = []
    lock = threading.Lock()
    with FaultServer() as upstream, running(_app(upstream, run_dir)) as url:
        def send(i: int) -> None:
            if i % 2:
                code = httpx.post(f"{url}/chat/completions", content=bad, timeout=30,
                                  headers={"content-type": "application/json"}).status_code
            else:
                _ask(url, f"Q{i}?")
                code = 200
            with lock:
                codes.append(code)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(send, range(8)))
        _wait_for(lambda: _health(url)["pending"] == 0)
    assert sorted(codes) == [200] * 4 + [400] * 4
    assert sorted(r.item.question for r in _stored(run_dir)) == ["Q0?", "Q2?", "Q4?", "Q6?"]
