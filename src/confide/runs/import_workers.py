"""Imported records scored, graded and encoded for the store: here, or in worker
processes for large JSON Lines files (:func:`confide.runs.importing.import_file` drives it).

A record's scorers depend only on what its statistics hold
(:class:`~confide.pipeline.scorer_plan.ScorerPlan`, the plan every record goes through);
the others give NaN with the reason.
"""

from __future__ import annotations

import collections
import itertools
import math
import multiprocessing
import os
import signal
import warnings
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confide.core.errors import InvalidInputError
from confide.core.records import Record
from confide.equivalence.judges import Judge, make_judge
from confide.ingest import (
    Imported,
    decode_line,
    file_layout,
    is_blank,
    parse_values,
)
from confide.ingest.reading import READ_BLOCK, collector_paused
from confide.ingest.sources import is_compressed
from confide.pipeline.answering import grade_record
from confide.pipeline.scorer_plan import (
    Capabilities,
    ScorerPlan,
    record_capabilities,
    score_record,
)
from confide.scorers import SCORERS, ScoringContext
from confide.scorers.base import run_scorer_block
from confide.store.run_store import LABEL_GRADE, RunStore

__all__ = ["BLOCK_RECORDS", "PARALLEL_MIN_BYTES", "Read", "RecordScorer", "Setup", "file_chunks",
           "keep_notes", "score_here", "score_in_workers", "scored", "scored_block",
           "worker_count"]


# --- one record: score, grade, encode (here or in a worker process) ------------------------


@dataclass(frozen=True)
class Setup:
    """What scoring a record needs, sent once to each worker process."""

    path: Path
    fmt: str
    label_field: str | None
    scorers: tuple[str, ...]  # those a record may feed (not skipped for every record)
    judge: str
    grader: str
    reasoning_tags: tuple[str, str] | None = ("<think>", "</think>")  # None: not split


@dataclass(frozen=True)
class Read:
    """One record read: its id, and (unless stored already) its stored text, the
    capabilities that decided its scorers, its notes and whether it was graded."""

    line: int
    item_id: str
    data: str | None = None
    caps: Capabilities = (frozenset(), frozenset())
    approximate: dict[str, str] = field(default_factory=dict)
    graded: bool = False


class RecordScorer:
    """Scores, grades and encodes imported records: one per process."""

    def __init__(self, setup: Setup, done: frozenset[str]) -> None:
        self.setup, self.done = setup, done
        self.plan = ScorerPlan([SCORERS[n] for n in setup.scorers], imported=True)
        self.judge = make_judge(setup.judge)

    def __call__(self, imported: Imported) -> Read:
        item_id = imported.item.id
        if item_id in self.done:
            return Read(imported.line, item_id)
        record, caps = scored(imported, self.plan, self.judge, self.setup.grader)
        return Read(imported.line, item_id, RunStore.encode(record), caps,
                     dict(imported.approximate), bool(record.grades))

    def block(self, block: list[Imported]) -> Iterator[Read]:
        """:meth:`__call__` of each of ``block``, in order, the same Reads; the scorers run
        over the block at once (:func:`scored_block`). Should scoring the block raise, the
        records are taken one by one instead, so the records before the one that raises
        come out first, as they would."""
        todo = [imported for imported in block if imported.item.id not in self.done]
        try:
            done = iter(scored_block(todo, self.plan, self.judge, self.setup.grader))
        except Exception:
            yield from map(self, block)
            return
        for imported in block:
            if imported.item.id in self.done:
                yield Read(imported.line, imported.item.id)
                continue
            record, caps = next(done)
            yield Read(imported.line, imported.item.id, RunStore.encode(record), caps,
                       dict(imported.approximate), bool(record.grades))


#: Records scored together: the free scorers' block forms make one numpy call per block
#: where they made one per record (``benchmarks/results/import_speed.md``).
BLOCK_RECORDS = 256


def score_here(records: Iterable[Imported], setup: Setup, done: frozenset[str]
          ) -> Generator[Read, None, None]:
    """The Reads of ``records``, scored :data:`BLOCK_RECORDS` at a time. Should reading
    stop with an exception (a bad record, Ctrl-C), the records read before it come out
    first, then the exception."""
    score = RecordScorer(setup, done)
    stream = iter(records)
    while True:
        block: list[Imported] = []
        try:
            block.extend(itertools.islice(stream, BLOCK_RECORDS))
        except BaseException:
            yield from score.block(block)
            raise
        if not block:
            return
        yield from score.block(block)


def scored(imported: Imported, plan: ScorerPlan, judge: Judge, grader: str
           ) -> tuple[Record, Capabilities]:
    """The record of one imported answer, scored where its statistics allow and graded;
    and the capabilities that decided which scorers ran."""
    record = imported.to_record()
    ctx = ScoringContext(judge=judge, seed=0, prompt=imported.item.prompt)
    caps = score_record(record, plan, ctx)
    grade_record(record, grader)
    if imported.label is not None:
        record.grades[LABEL_GRADE] = float(imported.label)
    return record, caps


def scored_block(block: list[Imported], plan: ScorerPlan, judge: Judge, grader: str
                 ) -> list[tuple[Record, Capabilities]]:
    """:func:`scored` of each of ``block``: the same records, scores in the same order with
    the same values and reasons; each scorer runs over the records it is fed at once
    (:func:`~confide.scorers.base.run_scorer_block`), one record after another for a
    scorer with no block form."""
    records = [imported.to_record() for imported in block]
    if any(spec.takes_context for spec in plan.specs):
        ctxs = [ScoringContext(judge=judge, seed=0, prompt=imported.item.prompt)
                for imported in block]
    else:  # no scorer reads it: one context the scorers are handed and never see
        ctxs = [ScoringContext(judge=judge, seed=0)] * len(block)
    caps = [record_capabilities(record) for record in records]  # no backend: nothing live
    splits = [plan.split(c) for c in caps]
    for j, spec in enumerate(plan.specs):
        fed = [i for i, split in enumerate(splits) if split[j][1] is None]
        values = run_scorer_block(spec, [records[i] for i in fed], [ctxs[i] for i in fed])
        results = dict(zip(fed, values, strict=True))
        for i, record in enumerate(records):
            value, reason = results.get(i) or (math.nan, splits[i][j][1])
            record.scores[spec.name] = value
            if reason is not None:
                record.score_errors[spec.name] = reason
    for imported, record in zip(block, records, strict=True):
        grade_record(record, grader)
        if imported.label is not None:
            record.grades[LABEL_GRADE] = float(imported.label)
    return list(zip(records, caps, strict=True))


def keep_notes(notes: dict[str, list[str]], approximate: dict[str, str]) -> None:
    for stat, note in approximate.items():
        kept = notes.setdefault(stat, [])
        if note not in kept and len(kept) < 16:
            kept.append(note)


# --- worker processes (JSON Lines) ---------------------------------------------------------

#: Lines sent to a worker at a time.
CHUNK_LINES = 256
#: Files smaller than this are read in this process (starting workers costs seconds).
PARALLEL_MIN_BYTES = 32 << 20
WORKER: list[RecordScorer] = []


def worker_count(workers: int | None, path: Path, greedy_file: str | Path | None) -> int:
    """Worker processes to use: JSON Lines files only, without a greedy file."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise InvalidInputError(f"must be a positive integer or None, not {workers!r}",
                                field="workers")
    # workers read lines by byte offset: a plain JSON Lines file only
    if (greedy_file is not None or is_compressed(path)
            or file_layout(path, str(path)) != "lines"):
        return 1
    if workers is None:
        if path.stat().st_size < PARALLEL_MIN_BYTES:
            return 1
        return max(1, min(os.cpu_count() or 1, 8))
    return workers


def start_worker(setup: Setup, done: frozenset[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    WORKER[:] = [RecordScorer(setup, done)]


def work(chunk: list[tuple[int, bytes]]) -> list[Read | tuple[str, str | None, int | None,
                                                                str | None]]:
    """Read, score, grade and encode one chunk of lines in a worker, in order; a bad
    record comes back as ``(message, file, line, field)``."""
    score = WORKER[0]
    setup = score.setup
    out: list[Read | tuple[str, str | None, int | None, str | None] | None] = []
    block: list[Imported] = []
    for a in range(0, len(chunk), READ_BLOCK):
        with collector_paused():  # as the reading in this process does
            values = [(line, value) for line, value in ((line, decode_line(raw, line))
                                                        for line, raw in chunk[a:a + READ_BLOCK])
                      if not is_blank(value)]
            results = parse_values(values, setup.path, setup.fmt,
                                   label_field=setup.label_field,
                                   reasoning_tags=setup.reasoning_tags)
            values.clear()
        for imported in results:
            if isinstance(imported, InvalidInputError):
                out.append((bare_message(imported), imported.file, imported.line,
                            imported.field))
                continue
            if isinstance(imported, Exception):
                raise imported
            block.append(imported)
            out.append(None)  # its Read, once the chunk's records are scored together
    reads = score.block(block)
    return [next(reads) if result is None else result for result in out]


def bare_message(exc: InvalidInputError) -> str:
    where = ""
    if exc.file is not None:
        where = f"{exc.file}:{exc.line}: " if exc.line is not None else f"{exc.file}: "
    if exc.field is not None:
        where += f"{exc.field}: "
    return str(exc).removeprefix(where)


def file_chunks(path: Path) -> Iterator[list[tuple[int, bytes]]]:
    with path.open("rb") as fh:
        numbered = enumerate(fh, start=1)
        while chunk := list(itertools.islice(numbered, CHUNK_LINES)):
            yield chunk


def score_in_workers(setup: Setup, done: frozenset[str], n: int
                ) -> Generator[Read | InvalidInputError, None, None]:
    """The records of a JSON Lines file read, scored and encoded by ``n`` worker
    processes, in file order (the same results as :func:`score_here`)."""
    # fork where there is one (Linux, macOS): the workers start at once with confide
    # loaded, and a caller's script is not run again in them (spawn imports __main__).
    # They run only this module's pure functions, so the parent's other threads (a
    # progress bar) do not matter; Python 3.12's warning about them is quieted.
    fork = "fork" in multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if fork else "spawn")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
        pool = context.Pool(n, initializer=start_worker, initargs=(setup, done))
    pending = file_chunks(setup.path)
    # A bounded window of chunks in flight (Pool.imap would read the whole file ahead):
    # memory stays a few chunks, whatever the file's size.
    window = collections.deque(pool.apply_async(work, (chunk,))
                               for chunk in itertools.islice(pending, 2 * n))
    try:
        while window:
            results = window.popleft().get()
            following = next(pending, None)
            if following is not None:
                window.append(pool.apply_async(work, (following,)))
            for result in results:
                if isinstance(result, Read):
                    yield result
                else:
                    message, file, line, at = result
                    yield InvalidInputError(message, file=file, line=line, field=at)
    finally:
        pool.terminate()
        pool.join()


