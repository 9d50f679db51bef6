"""Issue 38, lost data on write: every file confide writes (exports, reports, fit files, JSON
tables) is written whole or not at all, so a crash or an error half way never leaves an
empty or partial file and never destroys an older good one.

The unwritable record is real: text that is not valid Unicode (a lone surrogate, as an
older version stored from a log) written through :class:`RunStore` itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import InvalidInputError, StoreError
from confide.core.paths import atomic_output, write_text
from confide.core.records import Generation, Item, Record
from confide.store.exports import EXPORT_FORMATS, export_run
from confide.store.run_store import RunStore

runner = CliRunner()
BAD = "Paris \udcff"  # a lone surrogate: valid JSON escape, not valid Unicode


def _run(path: Path, *, bad_field: str | None = None) -> Path:
    """A stored run of 6 records; record ``q3`` holds a lone surrogate in ``bad_field``."""
    config = {"task": {"name": "synthetic"}, "grader": "contains", "scorers": ["msp"],
              "seed": 0}
    with RunStore.open(path, config) as store:
        store.set_meta("backend", {"backend": "hf", "model": "smollm2"})
        for i in range(6):
            bad = i == 3
            gen = Generation(text=BAD if bad and bad_field == "answer" else "Paris",
                             token_ids=[1], tokens=["Paris"],
                             token_logprobs=np.array([-0.1 - i / 10]))
            question = BAD if bad and bad_field == "question" else f"Capital {i}?"
            rec = Record(item=Item(f"q{i}", question, ["Paris"]), greedy=gen,
                         grades={"contains": float(i % 2)})
            rec.scores["msp"] = -0.1 - i / 10
            store.put(rec, i)
    return path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# -- the helper -------------------------------------------------------------------------------

def test_write_text_that_cannot_be_encoded_keeps_the_older_file(tmp_path):
    target = tmp_path / "table.json"
    target.write_text("older, good")
    with pytest.raises(InvalidInputError, match=r"table.json: --json: holds text that is not "
                                                r"valid Unicode \('\\udcff' at character 3"):
        write_text(target, "ok \udcff and more", "--json")
    assert target.read_text() == "older, good"
    assert _leftovers(tmp_path) == []


def test_write_text_that_cannot_be_encoded_leaves_no_new_file(tmp_path):
    target = tmp_path / "sub" / "new.json"
    with pytest.raises(InvalidInputError):
        write_text(target, "\udcff", "--out")
    assert not target.exists() and _leftovers(target.parent) == []


def test_atomic_output_exception_half_way_keeps_the_older_file(tmp_path):
    target = tmp_path / "records.jsonl"
    target.write_text("old line\n")
    with pytest.raises(RuntimeError), atomic_output(target, "--out") as fh:
        fh.write("new line 1\n" * 1000)
        fh.flush()
        raise RuntimeError("the writer failed")
    assert target.read_text() == "old line\n"
    assert _leftovers(tmp_path) == []
    with atomic_output(target, "--out") as fh:
        fh.write("replaced\n")
    assert target.read_text() == "replaced\n" and _leftovers(tmp_path) == []


def test_atomic_output_keeps_mode_and_symlink(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, '{"a": 1}', "--out")
    assert link.is_symlink() and real.read_text() == '{"a": 1}'
    assert (real.stat().st_mode & 0o777) == 0o640


def test_atomic_output_new_file_gets_the_umask_default_mode(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_text(tmp_path / "fresh.txt", "x", "--out")
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777) == 0o644  # not mkstemp's 0600


def test_atomic_output_writes_devices_directly():
    write_text("/dev/null", "discarded", "--out")


def test_a_killed_writer_leaves_the_older_file_whole(tmp_path):
    target = tmp_path / "export.jsonl"
    target.write_text("older export\n")
    script = textwrap.dedent(f"""
        import sys, time
        from confide.core.paths import atomic_output
        with atomic_output({str(target)!r}, "--out") as fh:
            fh.write("half of a new export\\n" * 10000)
            fh.flush()
            print("ready", flush=True)
            time.sleep(60)
    """)
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                          text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert target.read_text() == "older export\n"


# -- exports and reports of a store holding an unwritable record ---------------------------------

@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize("field", ["answer", "question"])
def test_export_of_a_record_that_cannot_be_written_names_it_and_leaves_no_file(tmp_path, fmt,
                                                                               field):
    run = _run(tmp_path / "run", bad_field=field)
    out = tmp_path / f"out.{fmt}"
    with RunStore.open(run) as store, pytest.raises(StoreError) as err:
        export_run(store, fmt, out)
    message = str(err.value)
    assert "record 'q3'" in message and "not valid Unicode" in message
    assert f"record 'q3': {field}:" in message  # the stored record's field, in every format
    assert not out.exists() and _leftovers(tmp_path) == []


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_export_failure_keeps_the_previous_export(tmp_path, fmt):
    run = _run(tmp_path / "run")
    with RunStore.open(run) as store:
        good = export_run(store, fmt)
    before = good.read_bytes()
    assert before
    with RunStore.open(run) as store:  # an older version stored a bad answer since
        rec = store.records()[2]
        rec.greedy.text = BAD
        store.replace(rec)
    with RunStore.open(run) as store, pytest.raises(StoreError, match="record 'q2': answer"):
        export_run(store, fmt)
    assert good.read_bytes() == before and _leftovers(run) == []


def test_cli_export_of_an_unwritable_record_exits_1_without_traceback(tmp_path):
    run = _run(tmp_path / "run", bad_field="answer")
    for fmt in EXPORT_FORMATS:
        res = runner.invoke(app, ["export", str(run), "--format", fmt])
        assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
        shown = " ".join(res.output.split())
        assert "StoreError" in shown and "record 'q3'" in shown and "Traceback" not in shown
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith("run.sqlite")) == []


def test_report_of_an_unwritable_record_names_it_and_keeps_the_older_report(tmp_path):
    run = _run(tmp_path / "run")
    res = runner.invoke(app, ["report", str(run), "--resamples", "20"])
    assert res.exit_code == 0, res.output
    report = run / "report.html"
    before = report.read_bytes()
    with RunStore.open(run) as store:
        rec = store.records()[4]
        rec.greedy.text = BAD
        store.replace(rec)
    res = runner.invoke(app, ["report", str(run), "--resamples", "20"])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    shown = " ".join(res.output.split())
    assert "record 'q4'" in shown and "answer" in shown and "Traceback" not in shown
    assert report.read_bytes() == before and _leftovers(run) == []
    fresh = tmp_path / "elsewhere" / "r.html"
    res = runner.invoke(app, ["report", str(run), "-o", str(fresh), "--resamples", "20"])
    assert res.exit_code == 1 and not fresh.exists()


def test_fit_file_and_json_table_are_written_whole(tmp_path):
    from confide.learned import Learned

    run = _run(tmp_path / "run")
    records = []
    with RunStore.open(run) as store:
        records = store.records()
    model = Learned(kind="combiner", name="c", model={}, layer=None, features=["msp"],
                    params={"type": "logistic"}, training={}, oof={"q0": 0.5})
    target = tmp_path / "model.json"
    target.write_text("older model")
    model.oof["q0"] = float("nan")  # not JSON: refused before anything is written
    with pytest.raises(ValueError):
        model.save(target)
    assert target.read_text() == "older model"
    model.oof["q0"] = 0.5
    model.save(target)
    assert json.loads(target.read_text())["oof"] == {"q0": 0.5}
    assert _leftovers(tmp_path) == [] and records
    table = tmp_path / "table.json"
    res = runner.invoke(app, ["eval", str(run), "--resamples", "20", "--json", str(table)])
    assert res.exit_code == 0, res.output
    assert json.loads(table.read_text())["scorers"] and _leftovers(tmp_path) == []
