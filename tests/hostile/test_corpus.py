"""The bad-input corpus (cases.json): every case a clear message, never a traceback.

Each case states what a hostile but realistic user does (a data file, a CLI
option, a damaged run store, a misused command, a server request), the exit
code or HTTP status it must get, and words its message must contain. One test
runs them all and also checks that nothing exits 0 on bad input, that a
failed ``run`` leaves no half-made run directory, and that no stored record
changes. CLI cases run in-process (Typer's CliRunner), except those with a
``timeout`` (a case that once hung): they run ``python -m confide.cli`` in a
subprocess, so a regression fails after that many seconds instead of hanging
the suite. Only the few cases marked ``model`` load the bundled model, and none
of them generates, except the ``stream`` cases: a streamed request the server
must answer (200) without sending what it withholds (``silent``: no token of
choice 0 before the last chunk).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.store.run_store import RunStore
from tests.conftest import make_record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faultserver import running  # noqa: E402

CORPUS = json.loads((Path(__file__).parent / "cases.json").read_text(encoding="utf-8"))
CASES = CORPUS["cases"]


def _params() -> list[Any]:
    out = []
    for case in CASES:
        marks = [pytest.mark.model] if case.get("model") or case["kind"] != "cli" else []
        out.append(pytest.param(case, id=case["id"], marks=marks))
    return out


def test_corpus_is_large_and_well_formed():
    ids = [c["id"] for c in CASES]
    assert len(ids) >= 100 and len(set(ids)) == len(ids)
    for case in CASES:
        assert case["kind"] in ("cli", "http", "stream") and case["words"], case["id"]
        assert case["exit"] != 0 and case["exit"] < 300 or case["exit"] >= 400, case["id"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus's data files, written once."""
    root = tmp_path_factory.mktemp("hostile-data")
    for name, spec in CORPUS["files"].items():
        target = root / name
        if "text" in spec:
            target.write_bytes(spec["text"].encode("utf-8"))
        elif "latin1" in spec:
            target.write_bytes(spec["latin1"].encode("latin-1"))
        else:
            head, unit, count, tail = spec["repeat"]
            target.write_text(head + unit * count + tail, encoding="utf-8")
    for name in CORPUS["dirs"]:
        (root / name).mkdir()
    return root


def stored_run(path: Path, n: int = 40) -> Path:
    """A small graded run: one scorer whose confidence ranks the correct answers first."""
    with RunStore.open(path, {"scorers": ["msp"], "grader": "contains", "seed": 0}) as store:
        for i in range(n):
            rec = make_record([-0.05 * (i + 1)] * 3, item_id=f"i{i:03d}", text="x" * 600)
            rec.scores = {"msp": -0.1 * (i + 1)}
            rec.grades = {"contains": float(i % 3 != 0)}
            store.put(rec, i)
    return path


def damage(path: Path, how: str) -> None:
    """Damage a closed run store the way disks and hands do."""
    db = path / "run.sqlite"
    raw = bytearray(db.read_bytes())
    if how == "header":  # the first page, SQLite's header included, overwritten
        raw[:4096] = b"\xa5" * 4096
    elif how == "damaged":  # a page of records in the middle, past the header
        page = 4096
        middle = (len(raw) // page // 2) * page
        raw[middle:middle + page] = b"\xff" * page
    elif how == "rowid":  # the last record's rowid on its leaf page: max(rowid) ≈ 2**61
        offset = _last_rowid_offset(db, raw)
        raw[offset:offset + 9] = b"\x8f" + b"\xff" * 7 + b"\x7f"
    elif how == "zerobytes":  # an empty file where the database was
        raw = bytearray()
    db.write_bytes(bytes(raw))
    if how in ("norecords", "nosettings"):  # settings but no records; or neither
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM records")
            if how == "nosettings":
                conn.execute("DELETE FROM meta")
        conn.close()
    if how == "badjson":  # a record's text hand-edited into something that is not JSON
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE records SET data = '{not json' WHERE item_id = 'i005'")
        conn.close()


def _last_rowid_offset(db: Path, raw: bytearray) -> int:
    """Where the rowid of the records table's last row sits: the last cell of the
    rightmost leaf page (SQLite's file format: b-tree pages, cells, varints)."""
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'records'"
                        ).fetchone()[0]
    conn.close()
    while True:
        start = (page - 1) * page_size
        head = start + (100 if page == 1 else 0)
        if raw[head] != 0x05:  # not an interior table page: the rightmost leaf
            break
        page = int.from_bytes(raw[head + 8:head + 12], "big")
    cells = int.from_bytes(raw[head + 3:head + 5], "big")
    pointer = head + 8 + 2 * (cells - 1)
    offset = start + int.from_bytes(raw[pointer:pointer + 2], "big")
    while raw[offset] & 0x80:  # past the payload-size varint
        offset += 1
    return offset + 1


def _snapshot(path: Path) -> Any:
    db = path / "run.sqlite"
    return db.read_bytes() if db.exists() else None


def _fill(value: str, names: dict[str, Path]) -> str:
    for key, path in names.items():
        value = value.replace("{" + key + "}", str(path))
    return value


@pytest.fixture(scope="module")
def server(hf_model):  # the real model; every corpus request is refused before generating
    from confide.serve.app import create_app
    from confide.serve.models import Limits

    app_ = create_app(hf_model, model_name="smollm2", scorers=("msp", "length"),
                      limits=Limits(max_n=3, max_tokens=24, max_prompt_chars=400))
    with running(app_) as url:
        yield url.removesuffix("/v1")


@pytest.mark.parametrize("case", _params())
def test_bad_input(case: dict[str, Any], data_dir: Path, tmp_path: Path,
                   request: pytest.FixtureRequest) -> None:
    if case["kind"] == "http":
        _http_case(case, request.getfixturevalue("server"))
        return
    if case["kind"] == "stream":
        _stream_case(case, request.getfixturevalue("server"))
        return
    names = {"data": data_dir, "tmp": tmp_path, "run": tmp_path / "run"}
    if "store" in case:
        stored_run(names["run"])
        if case["store"] != "run":
            damage(names["run"], case["store"])
    before = _snapshot(names["run"])
    args = [_fill(a, names) for a in case["args"]]
    if "timeout" in case:
        exit_code, output = _in_subprocess(args, case["timeout"])
    else:
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        exit_code, output = result.exit_code, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            repr(result.exception)
    assert exit_code == case["exit"], output
    assert "Traceback" not in output
    flat = " ".join(output.split())  # Rich wraps long messages
    for word in case["words"]:
        assert word.lower() in flat.lower(), f"{word!r} not in {output!r}"
    assert _snapshot(names["run"]) == before, "a stored record changed"
    for path in case.get("absent", []):
        assert not Path(_fill(path, names)).exists(), f"{path} was created"
    shutil.rmtree(names["run"], ignore_errors=True)


def _in_subprocess(args: list[str], timeout: float) -> tuple[int, str]:
    """``confide ARGS`` in its own process: a hang fails the case after ``timeout`` s."""
    env = {**os.environ, "COLUMNS": "200"}
    try:
        done = subprocess.run([sys.executable, "-m", "confide.cli", *args], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"confide {' '.join(args)} ran past {timeout} s (it once hung)")
    return done.returncode, done.stdout + done.stderr


def _stream_case(case: dict[str, Any], base: str) -> None:
    """A streamed request: 200, the words in choice 0's content, and with ``silent`` no
    token of choice 0 (content, or its token in ``confide``) before the last chunk."""
    chunks = []
    with httpx.stream("POST", base + case["path"], json=case["body"], timeout=120) as reply:
        assert reply.status_code == case["exit"], reply.read()
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    assert chunks and "error" not in chunks[-1], chunks[-1:]
    *before, last = chunks
    if case.get("silent"):
        for chunk in before:
            for choice in chunk["choices"]:
                if choice["index"] == 0:
                    assert not (choice.get("delta") or {}).get("content"), chunk
                    assert not choice.get("text"), chunk
            assert (chunk.get("confide") or {}).get("index") != 0, chunk
    content = "".join((c.get("delta") or {}).get("content") or c.get("text") or ""
                      for chunk in chunks for c in chunk["choices"] if c["index"] == 0)
    for word in case["words"]:
        assert word.lower() in content.lower(), (word, content)
    for key, value in case.get("confide", {}).items():
        assert last["confide"][key] == value, (key, last["confide"])


def _http_case(case: dict[str, Any], base: str) -> None:
    url = base + case["path"]
    headers = {"content-type": "application/json"}
    if "chunked_mb" in case:  # no Content-Length: the server must count as it reads
        chunk = b"x" * 65536
        total = case["chunked_mb"] * 16

        def body():
            for _ in range(total):
                yield chunk

        content: Any = body()
    elif "raw" in case:
        content = (case["raw"] * case.get("raw_repeat", 1)).encode()
    elif "body" in case:
        content = json.dumps(case["body"]).encode()
    else:
        content = None
    try:
        response = httpx.request(case["method"], url, content=content, headers=headers,
                                 timeout=60)
    except httpx.RemoteProtocolError:  # the server answered 413 and closed mid-upload
        pytest.fail("the server closed the connection without an answer")
    assert response.status_code == case["exit"], response.text
    error = response.json()["error"]  # the OpenAI error shape
    assert set(error) >= {"message", "type", "param", "code"}
    for word in case["words"]:
        assert word.lower() in error["message"].lower(), (word, error)
    if "param" in case:
        assert error["param"] == case["param"], error
