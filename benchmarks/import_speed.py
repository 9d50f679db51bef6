"""Speed of `confide score`: importing and scoring a large log of existing generations.

Writes N synthetic OpenAI Chat Completions responses (one per line; ``--tokens``
answer tokens, each with its log-probability, bytes and ``--top`` alternatives:
about 10 kB a record at 20 tokens and top-5), then, in one process:

1. read: the reader alone (:func:`confide.ingest.read_generations`), the floor;
2. import: :func:`confide.runs.importing.import_file` with every free scorer the records
   can feed (``Cost.FREE``, needs met by token log-probabilities, top-k
   alternatives and the entropy bounds) into a fresh run directory: read, score,
   grade, store in batches of ``--batch-size`` per transaction; once in this process
   (``workers=1``) and once per ``--workers`` count (worker processes read, score and
   encode; this process stores);
3. with ``--compare-batches``: the import of the first ``--compare-records``
   records at one record per transaction and at ``--batch-size``;
4. the first ``--api-records`` records through :func:`confide.score_answers` from Python
   (question, answer, ``logprobs.content`` and references of each, ``--api-batch`` at a
   call; the log's reading is not timed), the same scorers;
5. with ``--stages N``: the CPU time of each stage on the first N records
   (:func:`stage_times`).

Prints records/s of each (by the clock, and by this process's CPU time), and the process's
peak resident memory (``ru_maxrss``) and the load average (the machine is shared:
read the figures beside it).

    .venv/bin/python benchmarks/import_speed.py --records 100000

Two versions compare on one log: ``--log`` reads a log written before instead of writing
one, ``--no-read`` skips step 1 (``benchmarks/results/import_speed.md``).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import confide
from confide.ingest import read_generations
from confide.runs.importing import import_file
from confide.scorers import Cost, scorers_at

_WORDS = [" the", " a", " Paris", " of", " in", " is", " to", " and", ".", ",", " London",
          " Rome", " river", " 1945", " king", " blue"]
_FED = {"token_logprobs", "top_logprobs", "token_entropies"}


def free_scorers() -> list[str]:
    """Every free answer-level scorer whose needs a record with token statistics meets."""
    return [s.name for s in scorers_at("answer") if s.cost is Cost.FREE
            and {n.value for n in s.needs} <= _FED]


def write_log(path: Path, n: int, *, tokens: int = 20, top: int = 5, seed: int = 0) -> int:
    """``n`` synthetic chat completions; returns the file's size in bytes."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            content = []
            for _ in range(tokens):
                words = rng.sample(_WORDS, top)
                # one token's distribution: the listed alternatives hold part of the mass
                # (the import refuses a top-k summing above 1)
                weights = [rng.uniform(1e-3, 1.0) for _ in words]
                mass = rng.uniform(0.5, 0.99) / sum(weights)
                lps = sorted((math.log(w * mass) for w in weights), reverse=True)
                alts = [{"token": w, "logprob": v, "bytes": list(w.encode())}
                        for w, v in zip(words, lps, strict=True)]
                content.append({**alts[0], "top_logprobs": alts})
            record = {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": 0,
                      "model": "synthetic", "references": [rng.choice(_WORDS).strip()],
                      "request": {"messages": [{"role": "user", "content": f"Question {i}?"}]},
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant",
                                               "content": "".join(e["token"] for e in content)},
                                   "logprobs": {"content": content}}]}
            fh.write(json.dumps(record) + "\n")
    return path.stat().st_size


def _head(path: Path, out: Path, n: int) -> Path:
    with path.open("rb") as src, out.open("wb") as dst:
        for _, line in zip(range(n), src, strict=False):
            dst.write(line)
    return out


def score_answers_rate(log: Path, scorers: list[str], records: int, batch: int
                       ) -> tuple[float, float]:
    """Records/s of :func:`confide.score_answers` on the first ``records`` records of
    ``log``, ``batch`` at a call (only the calls are timed, after one untimed call of one
    record that imports what a first call would): by the clock, and by this process's
    CPU time."""
    done, seconds, cpu = 0, 0.0, 0.0
    with log.open("rb") as fh:
        row = json.loads(fh.readline())
    confide.score_answers([row["request"]["messages"][0]["content"]],
                          [row["choices"][0]["message"]["content"]],
                          logprobs=[row["choices"][0]["logprobs"]], scorers=scorers)
    with log.open("rb") as fh:
        while done < records:
            lines = list(itertools.islice(fh, min(batch, records - done)))
            if not lines:
                break
            rows = [json.loads(line) for line in lines]
            questions = [{"question": r["request"]["messages"][0]["content"],
                          "references": r["references"]} for r in rows]
            answers = [r["choices"][0]["message"]["content"] for r in rows]
            logprobs = [r["choices"][0]["logprobs"] for r in rows]
            began, began_cpu = time.perf_counter(), time.process_time()
            scored = confide.score_answers(questions, answers, logprobs=logprobs,
                                           scorers=scorers)
            seconds += time.perf_counter() - began
            cpu += time.process_time() - began_cpu
            assert len(scored) == len(rows)
            done += len(rows)
    return done / seconds, done / cpu


def stage_times(log: Path, scorers: list[str], records: int) -> dict[str, float]:
    """µs of CPU per record of each stage of an import, each stage timed over the first
    ``records`` records at once (decode, parse in blocks of ``READ_BLOCK`` records as the
    import reads, plan, each scorer over blocks of
    ``BLOCK_RECORDS`` records as the import runs it, grade, encode), garbage collection off;
    the import's own loop, its file hash and SQLite are not in it."""
    from confide.equivalence.judges import make_judge
    from confide.ingest.common import decode_line
    from confide.ingest.reading import READ_BLOCK, parse_values
    from confide.pipeline.answering import grade_record
    from confide.pipeline.scorer_plan import ScorerPlan, record_capabilities
    from confide.runs.import_workers import BLOCK_RECORDS
    from confide.scorers import SCORERS, ScoringContext
    from confide.scorers.base import run_scorer_block
    from confide.store.run_store import RunStore

    with log.open("rb") as fh:
        lines = list(itertools.islice(fh, records))
    n = len(lines)
    out: dict[str, float] = {}
    gc.disable()
    try:
        def timed(name: str, fn: Any) -> Any:
            began = time.process_time()
            value = fn()
            out[name] = (time.process_time() - began) / n * 1e6
            return value

        values = timed("decode", lambda: [decode_line(r, i + 1) for i, r in enumerate(lines)])
        pairs = [(i + 1, v) for i, v in enumerate(values)]
        read = timed("parse", lambda: [r for a in range(0, n, READ_BLOCK)  # as the import reads
                                       for r in parse_values(pairs[a:a + READ_BLOCK], log,
                                                             "openai")])
        records_ = [r.to_record() for r in read]
        plan = ScorerPlan([SCORERS[s] for s in scorers], imported=True)
        caps = timed("plan (capabilities)", lambda: [record_capabilities(r) for r in records_])
        judge = make_judge("exact")
        each = {name: 0.0 for name in scorers}
        clock = time.process_time

        def score() -> None:  # as the import does: each scorer over a block of records
            for a in range(0, n, BLOCK_RECORDS):
                block = records_[a:a + BLOCK_RECORDS]
                splits = [plan.split(c) for c in caps[a:a + BLOCK_RECORDS]]
                ctxs = [ScoringContext(judge=judge, seed=0) for _ in block]
                for j, spec in enumerate(plan.specs):
                    began = clock()
                    fed = [i for i, split in enumerate(splits) if split[j][1] is None]
                    values = run_scorer_block(spec, [block[i] for i in fed],
                                              [ctxs[i] for i in fed])
                    for i, (value, _) in zip(fed, values, strict=True):
                        block[i].scores[spec.name] = value
                    each[spec.name] += clock() - began

        timed("scorers", score)
        out.update({f"  {k}": v / n * 1e6 for k, v in each.items()})
        timed("grade (contains)", lambda: [grade_record(r, "contains") for r in records_])
        timed("encode", lambda: [RunStore.encode(r) for r in records_])
    finally:
        gc.enable()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=lambda t: [int(v) for v in t.split(",")],
                        default=[1, os.cpu_count() or 1],
                        help="comma-separated worker counts to import with (1: in this "
                             "process; default 1 and one per CPU)")
    parser.add_argument("--compare-batches", action="store_true")
    parser.add_argument("--compare-records", type=int, default=5_000)
    parser.add_argument("--api-records", type=int, default=20_000,
                        help="records scored through confide.score_answers (0: none)")
    parser.add_argument("--api-batch", type=int, default=1_000)
    parser.add_argument("--stages", type=int, default=0,
                        help="records to time stage by stage (stage_times; 0: none)")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp)")
    parser.add_argument("--log", type=Path, default=None,
                        help="a log written before (by this script, --records of them): "
                             "read instead of writing one, so runs of two versions compare "
                             "on the same file")
    parser.add_argument("--no-read", action="store_true", help="skip the read-only pass")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="import-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    log = args.log or work / "log.jsonl"
    if args.log is None:
        began = time.perf_counter()
        size = write_log(log, args.records, tokens=args.tokens, top=args.top)
        print(f"wrote {args.records} records ({size / 1e6:.0f} MB, {args.tokens} tokens, top-"
              f"{args.top}) in {time.perf_counter() - began:.1f} s")
    scorers = free_scorers()
    print(f"scorers ({len(scorers)}): {', '.join(scorers)}")

    if not args.no_read:
        began = time.perf_counter()
        n = sum(1 for _ in read_generations(log))
        read_s = time.perf_counter() - began
        print(f"read only:  {n} records in {read_s:.1f} s = {n / read_s:.0f} records/s")

    for workers in args.workers:
        out = work / f"run-w{workers}"
        shutil.rmtree(out, ignore_errors=True)
        began = time.perf_counter()
        cpu = time.process_time()
        outcome = import_file(log, out, scorers=scorers, batch_size=args.batch_size,
                              workers=workers)
        import_s = time.perf_counter() - began
        cpu = time.process_time() - cpu
        assert outcome.total == args.records and not outcome.skipped_scorers, outcome
        print(f"import, {workers} worker process(es): {outcome.imported} records in "
              f"{import_s:.1f} s = {outcome.imported / import_s:.0f} records/s (batches of "
              f"{args.batch_size}; this process {cpu:.1f} CPU s = "
              f"{outcome.imported / cpu:.0f} records/s of CPU time); run.sqlite "
              f"{(out / 'run.sqlite').stat().st_size / 1e6:.0f} MB")
        shutil.rmtree(out, ignore_errors=True)

    if args.compare_batches:
        head = _head(log, work / "head.jsonl", args.compare_records)
        for batch in (1, args.batch_size):
            target = work / f"run-{batch}"
            shutil.rmtree(target, ignore_errors=True)
            began = time.perf_counter()
            done = import_file(head, target, scorers=scorers, batch_size=batch)
            seconds = time.perf_counter() - began
            print(f"  {done.imported} records, {batch:>4} per transaction: "
                  f"{done.imported / seconds:.0f} records/s")

    if args.api_records:
        n_api = min(args.api_records, args.records)
        rate, cpu_rate = score_answers_rate(log, scorers, n_api, args.api_batch)
        print(f"confide.score_answers: {n_api} records, {args.api_batch} a call: "
              f"{rate:.0f} records/s ({cpu_rate:.0f} records/s of CPU time)")

    if args.stages:
        stages = stage_times(log, scorers, min(args.stages, args.records))
        print("stages, µs of CPU per record (each scorer timed over blocks of records):")
        for name, value in stages.items():
            print(f"  {name:28s} {value:7.1f}")

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    load = os.getloadavg()
    print(f"peak RSS {peak_mb:.0f} MB (largest worker process {child_mb:.0f} MB); load "
          f"average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
