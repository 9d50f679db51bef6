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
   call; the log's reading is not timed), the same scorers.

Prints records/s of each, the import's share of time in reading, and the process's
peak resident memory (``ru_maxrss``) and the load average (the machine is shared:
read the figures beside it).

    .venv/bin/python benchmarks/import_speed.py --records 100000
"""

from __future__ import annotations

import argparse
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


def score_answers_rate(log: Path, scorers: list[str], records: int, batch: int) -> float:
    """Records/s of :func:`confide.score_answers` on the first ``records`` records of
    ``log``, ``batch`` at a call (only the calls are timed)."""
    done, seconds = 0, 0.0
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
            began = time.perf_counter()
            scored = confide.score_answers(questions, answers, logprobs=logprobs,
                                           scorers=scorers)
            seconds += time.perf_counter() - began
            assert len(scored) == len(rows)
            done += len(rows)
    return done / seconds


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
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp)")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="import-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.jsonl"
    began = time.perf_counter()
    size = write_log(log, args.records, tokens=args.tokens, top=args.top)
    print(f"wrote {args.records} records ({size / 1e6:.0f} MB, {args.tokens} tokens, top-"
          f"{args.top}) in {time.perf_counter() - began:.1f} s")
    scorers = free_scorers()
    print(f"scorers ({len(scorers)}): {', '.join(scorers)}")

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
              f"{args.batch_size}; this process {cpu:.1f} CPU s); run.sqlite "
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
        rate = score_answers_rate(log, scorers, n_api, args.api_batch)
        print(f"confide.score_answers: {n_api} records, {args.api_batch} a call: "
              f"{rate:.0f} records/s")

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    load = os.getloadavg()
    print(f"peak RSS {peak_mb:.0f} MB (largest worker process {child_mb:.0f} MB); load "
          f"average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
