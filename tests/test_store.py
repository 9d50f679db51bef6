"""The SQLite run store: one transaction per record, config check, exports."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pyarrow.parquet as pq
import pytest

from confide.errors import ConfigMismatch, StoreError
from confide.store import RunStore
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
        path = store.export(fmt)
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
        store.export("xlsx")
