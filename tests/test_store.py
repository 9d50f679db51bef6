"""The SQLite run store: one transaction per record, config check, exports."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pyarrow.parquet as pq
import pytest

from confide.core.errors import ConfigMismatch, StoreError
from confide.store.exports import EXPORT_FORMATS, export_run
from confide.store.run_store import RunStore
from tests.conftest import make_record


def _record(i: int):
    rec = make_record([-0.1 * (i + 1), -0.2], [0.3, 0.4], [5.0, 6.0], item_id=f"it{i}",
                      text=f"answer {i}")
    rec.scores = {"msp": -0.3 * (i + 1), "mean_entropy": math.nan}
    rec.score_errors = {"mean_entropy": "the backend gave no token entropies"}
    rec.grades = {"contains": float(i % 2)}
    return rec


def test_store_round_trips_records_exactly(tmp_path):
    with RunStore.open(tmp_path / "run", {"seed": 1}) as store:
        rec = _record(0)
        rec.greedy.hidden = {"-1:last": np.arange(4, dtype=np.float16)}
        assert store.put(rec, 0)
    with RunStore.open(tmp_path / "run") as store:
        (back,) = store.records(hidden=True)
        assert store.config == {"seed": 1}
    assert back.item == rec.item
    assert back.greedy.text == rec.greedy.text
    np.testing.assert_array_equal(back.greedy.token_logprobs, rec.greedy.token_logprobs)
    assert back.scores["msp"] == rec.scores["msp"]
    assert math.isnan(back.scores["mean_entropy"])
    assert back.score_errors == rec.score_errors
    np.testing.assert_array_equal(back.greedy.hidden["-1:last"], np.arange(4, dtype=np.float16))


def test_store_never_duplicates_an_item(tmp_path):
    with RunStore.open(tmp_path, {"a": 1}) as store:
        assert store.put(_record(0), 0)
        assert not store.put(_record(0), 0)
        assert len(store) == 1


def test_store_uses_wal(tmp_path):
    RunStore.open(tmp_path, {"a": 1}).close()
    conn = sqlite3.connect(tmp_path / "run.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_store_refuses_another_configuration_and_says_what_differs(tmp_path):
    RunStore.open(tmp_path, {"model": "smollm2", "seed": 0, "task": {"name": "triviaqa"}}).close()
    with pytest.raises(ConfigMismatch) as info:
        RunStore.open(tmp_path, {"model": "smollm2", "seed": 1, "task": {"name": "gsm8k"}})
    message = str(info.value)
    assert "seed: stored 0, now 1" in message
    assert "task.name: stored 'triviaqa', now 'gsm8k'" in message
    assert "model" not in message.split("\n", 1)[1]


def test_store_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="no run here"):
        RunStore.open(tmp_path / "nothing")


def test_store_failures_are_kept_until_the_item_succeeds(tmp_path):
    with RunStore.open(tmp_path, {"a": 1}) as store:
        store.record_failure("it0", "HTTP 500")
        store.record_failure("it0", "timeout")
        assert store.failures() == {"it0": "timeout"}
        store.put(_record(0), 0)
        assert store.failures() == {}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_store_exports_one_row_per_record(tmp_path, fmt):
    with RunStore.open(tmp_path, {"a": 1}) as store:
        for i in range(3):
            store.put(_record(i), i)
        path = export_run(store, fmt)
    if fmt == "jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert [r["id"] for r in rows] == ["it0", "it1", "it2"]
        assert rows[1]["score.msp"] == pytest.approx(-0.6)
        assert rows[1]["score.mean_entropy"] is None
        assert rows[1]["why.mean_entropy"].startswith("the backend")
        assert rows[1]["grade.contains"] == 1.0
    elif fmt == "csv":
        lines = path.read_text().splitlines()
        assert len(lines) == 4
        assert lines[0].split(",")[:3] == ['"id"', '"question"', '"answer"']
    else:
        table = pq.read_table(path)
        assert table.num_rows == 3
        assert table.column("score.msp").to_pylist()[2] == pytest.approx(-0.9)
        assert table.column("references").to_pylist()[0] == ["Paris"]


def test_store_unknown_export_format(tmp_path):
    with RunStore.open(tmp_path, {"a": 1}) as store, pytest.raises(StoreError, match="xlsx"):
        export_run(store, "xlsx")


def test_run_exports_every_format_the_cli_does(tmp_path):
    # One list of formats, one entry point: Run.export writes what `confide export` writes,
    # in every format, and the OpenAI export reads back as the same records.
    from typer.testing import CliRunner

    import confide
    from confide.cli import app

    with RunStore.open(tmp_path / "run", {"model": "smollm2", "grader": "contains"}) as store:
        for i in range(3):
            record = _record(i)
            record.greedy.text, record.greedy.tokens = "Paris", ["Par", "is"]
            store.put(record, i)
    run = confide.open_run(tmp_path / "run")
    help_text = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "200"}).output
    for fmt in EXPORT_FORMATS:
        assert fmt in help_text
        ours = run.export(fmt, tmp_path / f"api.{fmt}")
        theirs = tmp_path / f"cli.{fmt}"
        result = CliRunner().invoke(app, ["export", str(run.path), "--format", fmt,
                                          "--out", str(theirs)])
        assert result.exit_code == 0, result.output
        if fmt == "parquet":
            assert pq.read_table(ours).equals(pq.read_table(theirs))
        else:
            assert ours.read_bytes() == theirs.read_bytes()
    assert run.export("openai") == tmp_path / "run" / "records.openai.jsonl"
    back = confide.import_file(tmp_path / "api.openai", tmp_path / "back", scorers=["msp"])
    assert back.imported == 3
    again = {r.item.id: r for r in confide.open_run(tmp_path / "back").records}
    for record in run.records:
        twin = again[record.item.id]
        assert (twin.greedy.text, twin.greedy.tokens) == ("Paris", ["Par", "is"])
        assert twin.item.references == record.item.references
        np.testing.assert_array_equal(twin.greedy.token_logprobs, record.greedy.token_logprobs)


def test_store_empty_database_file_is_no_run_and_stays_empty(tmp_path):
    (tmp_path / "run.sqlite").write_bytes(b"")
    with pytest.raises(StoreError, match="run.sqlite is empty"):
        RunStore.open(tmp_path)
    assert (tmp_path / "run.sqlite").read_bytes() == b""  # no schema written into it


def test_store_no_records_says_what_the_run_holds(tmp_path):
    with RunStore.open(tmp_path / "a", {"a": 1}) as store:
        assert "holds no records yet; finish it" in str(store.no_records())
        store.record_failure("it0", "HTTP 500")
        assert "1 item(s) failed (first error: HTTP 500)" in str(store.no_records())


# A record's rowid overwritten on its leaf page (tests/hostile: damage "rowid") makes
# SQLite's max(rowid) about 2**61; the readable-record count once walked every rowid up
# to it and never ended. Run in a subprocess, so a regression fails instead of hanging.
_COUNT = """
import sys
from confide.core.errors import StoreDamaged
from confide.store.run_store import RunStore
with RunStore.open(sys.argv[1]) as store:
    try:
        store.records()
    except StoreDamaged as exc:
        print("damaged:", exc)
    records, bad = store.readable_records()
    print("recovered", len(records), bad)
"""


def test_store_damage_with_a_huge_max_rowid_is_counted_in_bounded_time(tmp_path):
    import subprocess
    import sys

    from tests.hostile.test_corpus import damage, stored_run

    run = stored_run(tmp_path / "run", n=40)
    damage(run, "rowid")
    assert sqlite3.connect(run / "run.sqlite").execute(
        "SELECT max(rowid) FROM records").fetchone()[0] > 2 ** 60
    try:
        done = subprocess.run([sys.executable, "-c", _COUNT, str(run)], capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("counting the readable records of a damaged store ran past 60 s")
    assert done.returncode == 0, done.stderr
    assert "damaged:" in done.stdout and "still readable" in done.stdout
    recovered = int(done.stdout.split("recovered ")[1].split()[0])
    assert 30 <= recovered < 40  # the damaged leaf page's rows lost, the rest kept


def test_store_walk_past_damage_finds_every_row_before_and_after_it(tmp_path):
    run = tmp_path / "run"
    with RunStore.open(run, {"a": 1}) as store:
        for i in range(60):
            store.put(_record(i), i)
    db = run / "run.sqlite"
    raw = bytearray(db.read_bytes())
    pages = len(raw) // 4096
    with RunStore.open(run) as store:
        intact = {r.item.id for r in store.records()}
    root = sqlite3.connect(db).execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'records'").fetchone()[0]
    lost = []
    for page in range(1, pages):  # each page but the table's root overwritten in turn
        if page + 1 == root:  # (without its root no row of the table can be found)
            continue
        damaged = bytearray(raw)
        damaged[page * 4096:(page + 1) * 4096] = b"\xff" * 4096
        db.write_bytes(bytes(damaged))
        with RunStore.open(run) as store:
            records, _ = store.readable_records()
        ids = [r.item.id for r in records]
        assert set(ids) <= intact and len(ids) == len(set(ids))
        lost.append(len(intact) - len(ids))
    db.write_bytes(bytes(raw))
    assert min(lost) == 0 and max(lost) < 20, lost
