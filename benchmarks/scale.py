"""Ray scaling: one worker against several, one thread each, on the same items.

    .venv/bin/python benchmarks/scale.py --items 96 --samples 10 --workers 2

Runs the bundled model on the first ``--items`` TriviaQA questions (greedy + ``--samples``
samples) into fresh run directories: in this process (torch's default threads), over one
local Ray worker with one thread, and over ``--workers`` Ray workers with one thread each.
Prints the wall time of each (Ray start-up and model loading included) and the time from
the first block handed out to the last one stored, the **scaling efficiency** of both
(one worker's time over ``--workers`` workers' time, against the ideal ``--workers``),
the merge overhead (the time the driver needs to write every record
into the store, measured by writing them again into a new store, as a share of the
Ray run's wall time), each worker's peak resident memory (Linux), and whether the Ray
runs stored the records the one-worker run stored (they do: equal threads per process,
see ``confide.runs.ray_executor``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confide.pipeline.plan import RunConfig  # noqa: E402
from confide.runs.execution import execute  # noqa: E402
from confide.runs.ray_executor import RayExecutor  # noqa: E402
from confide.runs.stored import open_run  # noqa: E402
from confide.store.run_store import RunStore  # noqa: E402


def _worker_peaks() -> list[int]:
    """Peak resident memory (bytes) of this process's Ray workers (VmHWM in /proc)."""
    peaks = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode()
            if not title.startswith("ray::ShardWorker"):
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]) * 1024)
        except (OSError, UnicodeDecodeError):
            continue
    return peaks


def _records(out: Path) -> list[dict]:
    rows = []
    for record in open_run(out).records:
        d = record.to_dict()
        d.pop("seconds")
        rows.append(d)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=96)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    config = RunConfig(task="triviaqa", limit=args.items, n_samples=args.samples,
                       max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    scratch = Path(tempfile.mkdtemp(prefix="confide-scale-"))

    began = time.perf_counter()
    single = execute(config, scratch / "single")
    single_s = time.perf_counter() - began

    def on_ray(workers: int, out: Path) -> tuple[float, float, list[int]]:
        peaks: list[int] = []

        def at_end(stored: int, total: int) -> None:
            if stored == total:
                peaks.extend(_worker_peaks())

        began = time.perf_counter()
        outcome = execute(config, out, progress=at_end, executor=RayExecutor(
            "local", workers=workers, threads_per_worker=1))
        return time.perf_counter() - began, outcome.generation_seconds, peaks

    one_s, one_loop, one_peaks = on_ray(1, scratch / "ray1")
    many_s, many_loop, peaks = on_ray(args.workers, scratch / "ray")

    records = open_run(scratch / "ray").records
    began = time.perf_counter()
    with RunStore.open(scratch / "rewrite", {"benchmark": "merge"}) as store:
        for position, record in enumerate(records):
            store.put(record, position)
    merge_s = time.perf_counter() - began

    speedup = one_s / many_s
    print(f"{args.items} items × (greedy + {args.samples} samples), "
          f"{args.max_new_tokens} new tokens, blocks of {args.batch_size}, {os.cpu_count()} "
          f"cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"one process, default threads: {single_s:8.1f} s  ({single.generated} items)")
    print(f"1 Ray worker x 1 thread:      {one_s:8.1f} s  ({one_loop:.1f} s from the first "
          "block handed out to the last stored)")
    print(f"{args.workers} Ray workers x 1 thread:     {many_s:8.1f} s  ({many_loop:.1f} s; "
          "the rest is Ray start-up and model loads)")
    print(f"scaling: {speedup:.2f}x with {args.workers} workers (efficiency "
          f"{100 * speedup / args.workers:.0f}%); against one process {single_s / many_s:.2f}x")
    print(f"scaling once started: {one_loop / many_loop:.2f}x (efficiency "
          f"{100 * one_loop / many_loop / args.workers:.0f}%)")
    print(f"merge overhead: {merge_s:.2f} s to store {len(records)} records "
          f"= {100 * merge_s / many_s:.1f}% of the Ray run")
    for label, found in (("1 worker", one_peaks), (f"{args.workers} workers", peaks)):
        print(f"peak memory per worker ({label}): "
              + (", ".join(f"{p / 2**20:.0f} MiB" for p in found) or "not measured (no /proc)"))
    same = _records(scratch / "ray1") == _records(scratch / "ray")
    print(f"same records in the 1-worker and {args.workers}-worker runs: {same}")


if __name__ == "__main__":
    main()
