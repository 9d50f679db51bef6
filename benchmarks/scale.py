"""One process against Ray workers on the same run: speed-up, the single writer's cost, memory.

    .venv/bin/python benchmarks/scale.py --items 200 --samples 10 --workers 2

Runs the bundled model on the first ``--items`` TriviaQA questions (greedy + ``--samples``
samples) twice into fresh run directories: once in this process (torch's default
threads), once over ``--workers`` local Ray workers (``--threads-per-worker``, default
the cores shared out). Prints the wall time of each (model loading included), the
speed-up, the merge overhead (the time the driver needs to write every record into the
store, measured by writing them again into a new store, as a share of the Ray run's
wall time), each worker's peak resident memory (Linux), and whether both runs stored the
same records (they do only with equal threads per process: see ``confide.distributed``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confide.distributed import RayExecutor  # noqa: E402
from confide.plan import RunConfig  # noqa: E402
from confide.runner import execute  # noqa: E402
from confide.runs import open_run  # noqa: E402
from confide.store import RunStore  # noqa: E402


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
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=None)
    args = parser.parse_args()
    config = RunConfig(task="triviaqa", limit=args.items, n_samples=args.samples,
                       max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    scratch = Path(tempfile.mkdtemp(prefix="confide-scale-"))

    began = time.perf_counter()
    single = execute(config, scratch / "single")
    single_s = time.perf_counter() - began

    peaks: list[int] = []

    def at_end(stored: int, total: int) -> None:
        if stored == total:
            peaks.extend(_worker_peaks())

    began = time.perf_counter()
    spread = execute(config, scratch / "ray", progress=at_end, executor=RayExecutor(
        "local", workers=args.workers, threads_per_worker=args.threads_per_worker))
    ray_s = time.perf_counter() - began

    records = open_run(scratch / "ray").records
    began = time.perf_counter()
    with RunStore.open(scratch / "rewrite", {"benchmark": "merge"}) as store:
        for position, record in enumerate(records):
            store.put(record, position)
    merge_s = time.perf_counter() - began

    print(f"{args.items} items × (greedy + {args.samples} samples), "
          f"{args.max_new_tokens} new tokens, blocks of {args.batch_size}")
    print(f"one process:    {single_s:8.1f} s  ({single.generated} items)")
    print(f"{args.workers} Ray workers:  {ray_s:8.1f} s  ({spread.generated} items; Ray start-up "
          "and model loads included)")
    print(f"speed-up: {single_s / ray_s:.2f}x")
    print(f"merge overhead: {merge_s:.2f} s to store {len(records)} records "
          f"= {100 * merge_s / ray_s:.1f}% of the Ray run")
    print("peak memory per worker: "
          + (", ".join(f"{p / 2**20:.0f} MiB" for p in peaks) or "not measured (no /proc)"))
    same = _records(scratch / "single") == _records(scratch / "ray")
    print(f"same records as the one-process run: {same}")


if __name__ == "__main__":
    main()
