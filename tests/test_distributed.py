"""Runs spread over Ray on the real bundled model: the records equal a single-process run's,
a worker killed mid-shard loses nothing, a driver killed with SIGKILL resumes.

One local Ray instance (2 CPUs) serves the whole module. Workers decode with the test
process's thread count, since float sums split over other thread counts round differently.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from confide.api import execute
from confide.core.errors import InvalidInputError
from confide.core.options import check_distribution
from confide.pipeline.plan import DEFAULT_SCORERS, RunConfig
from confide.runs.execution import execute as run_plan
from confide.runs.ray_executor import RayExecutor, shard_blocks
from confide.runs.stored import open_run

ray = pytest.importorskip("ray", reason="Ray is not installed (extra `ray`)")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.model
ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [("Capital of France?", "Paris"), ("Who wrote Hamlet?", "Shakespeare"),
             ("What is 2 + 2?", "4"), ("Largest planet?", "Jupiter"),
             ("Colour of the sky?", "blue"), ("Opposite of hot?", "cold")]
SCORERS = (*DEFAULT_SCORERS, "lexical_similarity")
THREADS = torch.get_num_threads()


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> RunConfig:
    """Six short questions (short prompts keep a 2-core machine quick), blocks of two."""
    data = tmp_path_factory.mktemp("data") / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "references": [a]}) + "\n"
                            for i, (q, a) in enumerate(QUESTIONS)), encoding="utf-8")
    return RunConfig(task=str(data), limit=None, max_new_tokens=6, batch_size=2, n_samples=2,
                     scorers=SCORERS)


@pytest.fixture(scope="module")
def ray_address():
    """One local Ray instance for the module (starting one takes seconds)."""
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                       configure_logging=False, object_store_memory=100 * 2**20)
    yield context.address_info["gcs_address"]
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory):
    """The same run in this one process."""
    out = tmp_path_factory.mktemp("single")
    execute(config, out)
    return _records(out)


def _records(out: Path) -> list[dict]:
    """Every stored record, timing left out, in item order."""
    rows = []
    for record in open_run(out).records:
        d = record.to_dict()
        d.pop("seconds")
        rows.append(d)
    return rows


def _stored(out: Path) -> int:
    db = out / "run.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:  # created but without its tables yet
        return 0


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _busy_worker() -> int | None:
    """The pid of a worker of this test's Ray instance running a block, if any."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                title = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith("ray::ShardWorker.run_block") and _descends_from(int(entry),
                                                                              os.getpid()):
            return int(entry)
    return None


def test_default_path_imports_no_ray_nor_vllm():
    code = ("import sys, confide, confide.cli, confide.runs.execution, confide.runs.ray_executor, "
            "confide.backends.vllm; print(sorted({'ray', 'vllm'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True)
    assert out.stdout.strip() == "[]"


def test_shards_are_contiguous_blocks():
    assert shard_blocks([0, 2, 4, 6], 2, size=3) == [[0, 2, 4], [6]]
    assert sum(shard_blocks(list(range(0, 200, 8)), 2), []) == list(range(0, 200, 8))


def test_distribution_options_are_checked_alike_for_cli_and_api(config, tmp_path):
    with pytest.raises(InvalidInputError, match="ray: must be local, auto, HOST:PORT"):
        check_distribution("cluster-one", 2)
    with pytest.raises(InvalidInputError, match="workers: must be an integer >= 1"):
        execute(config, tmp_path, ray="local", workers=0)
    with pytest.raises(InvalidInputError, match="threads_per_worker: needs --ray"):
        execute(config, tmp_path, threads_per_worker=2)
    assert not (tmp_path / "run.sqlite").exists()


@pytest.mark.parametrize("args, option", [(["--workers", "2"], "--workers"),
                                          (["--ray", "my cluster"], "--ray"),
                                          (["--ray", "local", "--workers", "0"], "--workers")])
def test_cli_refuses_bad_distribution_options(args, option, tmp_path):
    from typer.testing import CliRunner

    from confide.cli import app

    result = CliRunner().invoke(app, ["run", "--out", str(tmp_path / "run"), *args])
    assert result.exit_code == 2 and option in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ray_run_equals_single_process_run(ray_address, config, reference, tmp_path):
    outcome = execute(config, tmp_path, ray="local", workers=2, threads_per_worker=THREADS)
    assert outcome.generated == outcome.total == 6
    assert _records(tmp_path) == reference


def test_ray_starts_no_more_workers_than_blocks_and_says_so(ray_address, config, tmp_path):
    # Two items in one block: a hundred workers asked, one started, and the run says why.
    two = replace(config, limit=2)
    outcome = execute(two, tmp_path, ray="local", workers=100, threads_per_worker=THREADS)
    assert outcome.generated == 2
    (note,) = outcome.notes
    assert note.startswith("Ray workers: 1 started, not the 100 asked (--workers): the run "
                           "has 1 block(s) of 2 items")
    assert note in open_run(tmp_path).compute_table(n_resamples=10).notes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_worker_killed_mid_shard_loses_and_repeats_nothing(ray_address, config, reference,
                                                           tmp_path):
    killed: list[int] = []
    first_stored, finished = threading.Event(), threading.Event()

    def watch() -> None:
        # After the first block is stored, end the process working through the rest:
        # polled, not only at each stored block, since on a busy machine the worker
        # may finish its next block before the driver has stored the first.
        first_stored.wait()
        while not killed and not finished.is_set():
            if (pid := _busy_worker()) is not None:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.005)

    def note(stored: int, total: int) -> None:
        if stored:
            first_stored.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # One shard of all three blocks: one worker holds it, the other waits idle.
    try:
        executor = RayExecutor(ray_address, workers=2, threads_per_worker=THREADS,
                               shard_size=3)
        outcome = run_plan(config, tmp_path, executor=executor, progress=note)
    finally:
        finished.set()
        first_stored.set()
        watcher.join()
    assert killed, "no worker was busy with a block to kill"
    assert outcome.generated == 6 and _stored(tmp_path) == 6
    assert _records(tmp_path) == reference


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_driver_killed_with_sigkill_resumes(ray_address, config, reference, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "confide.cli", "run", "--task", config.task, "--limit", "0",
           "--max-new-tokens", "6", "--batch-size", "2", "--samples", "2",
           "--scorers", ",".join(SCORERS), "--out", str(out), "--no-report",
           "--ray", ray_address, "--workers", "2", "--threads-per-worker", str(THREADS)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        # a hang guard, not a speed limit: on a fresh, busy machine the workers also
        # time the dtype and rows per step before their first record
        deadline = time.monotonic() + 600
        while _stored(out) == 0:
            assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the driver stored nothing in 600 s"
            time.sleep(0.02)
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)  # reaped here, not left to warn in a later test
        driver.stderr.close()
    partial = _stored(out)
    assert 0 < partial < 6, f"killed with {partial} of 6 records stored"
    outcome = execute(config, out, ray="local", workers=2, threads_per_worker=THREADS)
    assert outcome.generated == 6 - partial
    assert _records(out) == reference
