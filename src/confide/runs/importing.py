"""Score what you already have: a file of another tool's generations becomes a run.

:func:`import_file` reads a log with :func:`confide.ingest.read_generations`
(``openai``, ``vllm``, ``llamacpp``, ``lmeval`` or confide's ``jsonl``), scores
each record with the scorers its statistics can feed, grades it, and stores it
in a run directory: the same ``run.sqlite`` as ``confide run``, so ``eval``,
``report``, ``calibrate``, ``abstain``, ``fit``, ``compare`` and ``export`` read it
as any run.

What the run stores
-------------------
* **configuration** (the run's identity; resuming with other settings is refused
  with the differences, as for a normal run): ``kind: "import"``, the ``source``
  file (``data_path``, ``size``, the ``sha256`` of its bytes, ``format``,
  ``answer`` mode, the greedy file's path, size and hash, ``label_field``), the
  ``scorers``, the ``grader`` (the grade ``eval`` reads by default), the
  ``reference_grader`` that grades records with references, the ``judge`` of the
  sampling scorers, and the ``model`` the log names (``""`` when it names none);
* meta ``backend``: ``{"backend": "import", "format": ..., "model": ...}``;
* meta ``skipped_scorers``: every chosen scorer no record could feed, with why
  (what only a model gives and the full-distribution statistics are never in a log:
  :func:`~confide.pipeline.scorer_plan.skip_reason`;
  the rest is decided from what the file held);
* meta ``approximate``: statistics that are not the model's own, e.g.
  ``{"token_entropies": "lower bounds from the top 5 log-probabilities of each
  token"}`` (``confide eval`` prints it under the table);
* meta ``skipped_records`` (``[file:line, why]`` of bad records skipped) and
  ``import_complete``.

Scorers are decided **per record** and **per run**: a scorer whose needs a
record does not meet gets NaN with the reason on that record (the others still
run on it); a scorer whose needs no record met is removed from the records at
the end and listed in ``skipped_scorers``, so tables never show a column that
could not be filled. A scorer that reads samples needs every sample to have its
statistic; one that reads the greedy answer only needs the greedy answer's.

Labels: a record's ``label`` (jsonl ``label``, lmeval ``acc``; ``label_field``
picks another) is stored as the grade :data:`LABEL_GRADE`, beside the
reference grader's grade when the item has references.

Untrusted input, interruption: records are stored in batches of
``batch_size``, each batch and the import's running state in one transaction,
and the pending batch is stored before an exception (Ctrl-C, a bad record)
leaves, so what was stored is kept; the same command resumes, skips the ids
already stored (never duplicating one) and ends with the same numbers as an
uninterrupted import (``tests/test_importing.py``). A kill (SIGKILL) loses at
most the batch not yet stored.

Speed: reading a record (JSON decoding most of it), scoring it and encoding it
for the store cost about the same in this process; a large JSON Lines file is
therefore spread over worker processes (``workers``, default one per CPU for files
of :data:`PARALLEL_MIN_BYTES` or more), which read, score and encode chunks of
lines in order while this process dedupes, stores and reports progress: the
stored text is the same either way (``tests/test_importing.py``). Figures:
``benchmarks/import_speed.py``, ``benchmarks/results/import_speed.md``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError, StoreError
from confide.core.reasoning import DEFAULT_TAGS
from confide.core.reasoning import reasoning_tags as reasoning_tags_of
from confide.equivalence.judges import default_judge, make_judge
from confide.grading import GRADERS
from confide.ingest import (
    Imported,
    duplicate_id,
    read_generations,
)
from confide.pipeline.plan import QUESTIONS_GRADER
from confide.pipeline.scorer_plan import IMPORTABLE, ScorerPlan, plan_scorers
from confide.runs.execution import check_output
from confide.runs.import_workers import (
    PARALLEL_MIN_BYTES,
    Setup,
    keep_notes,
    score_here,
    score_in_workers,
    worker_count,
)
from confide.scorers import (
    SCORERS,
    Cost,
    Need,
    ScorerSpec,
    scorer_at,
    scorers_at,
)
from confide.store.run_store import LABEL_GRADE, RunStore
from confide.tasks.base import BadRecords

__all__ = ["BATCH_SIZE", "ImportOutcome", "LABEL_GRADE", "PARALLEL_MIN_BYTES",
           "SCORER_SETS", "import_file", "import_scorers"]

#: Records stored per transaction (``benchmarks/import_speed.py`` measures the choice).
BATCH_SIZE = 256
#: Keywords ``scorers=`` takes besides names: ``"all"`` (the default) and ``"free"``.
SCORER_SETS = ("all", "free")

ImportProgress = Callable[[int], None]


def import_scorers(which: str = "all") -> tuple[str, ...]:
    """The scorers an import runs by default (``"all"``) or with ``scorers="free"``.

    ``"all"``: every answer-level scorer but the fitted kinds (those are fitted on
    the graded run afterwards, ``confide fit``). Those a log can never feed (they
    need the model, or the whole next-token distribution) are listed as skipped with
    why, so the run says what an import cannot give; those this file cannot feed are
    found while reading. ``"free"``: only the :attr:`Cost.FREE` ones among them that
    an imported record can feed (arithmetic on the stored statistics; no embedding
    model, no judge), the fast choice for a large log.
    """
    if which not in SCORER_SETS:
        raise InvalidInputError(f"must be one of {', '.join(SCORER_SETS)}, not {which!r}",
                                field="scorers")
    names = [s.name for s in scorers_at("answer") if Need.TRAINING not in s.needs]
    if which == "free":
        names = [n for n in names if SCORERS[n].cost is Cost.FREE
                 and SCORERS[n].needs <= IMPORTABLE]
    return tuple(names)


@dataclass
class ImportOutcome:
    """What :func:`import_file` did.

    ``total``: records in the run now; ``imported``: stored by this call; ``resumed``:
    read but already stored (left as they were). ``scorers``: the scorers that ran on
    at least one record; ``skipped_scorers``: the others, with why. ``capabilities``:
    what the file's records held (``token_logprobs``, ``samples``, ...), over all of
    them. ``bad_records``: ``(file:line, why)`` of records skipped.
    """

    path: Path
    source: Path
    format: str
    total: int
    imported: int
    resumed: int
    scorers: tuple[str, ...]
    skipped_scorers: dict[str, str]
    approximate: dict[str, str] = field(default_factory=dict)
    capabilities: frozenset[str] = frozenset()
    bad_records: list[tuple[str, str]] = field(default_factory=list)
    model: str = ""
    grader: str | None = None
    graded: int = 0
    seconds: float = 0.0

    @property
    def has_logprobs(self) -> bool:
        """Whether any record held chosen-token log-probabilities."""
        return Need.TOKEN_LOGPROBS.value in self.capabilities

    def notes(self) -> list[str]:
        """What a user should know about the import, one sentence each (the CLI prints them)."""
        rate = self.imported / self.seconds if self.seconds > 0 else 0.0
        out = [f"imported {self.imported} record(s) in {self.seconds:.1f} s ({rate:.0f} "
               f"records/s); {self.resumed} already stored; {self.total} in the run"]
        if not self.has_logprobs:
            out.append("the file has no log-probabilities: only scorers of sampled answers "
                       "(when it has samples) and length can run; the white-box scorers are "
                       "skipped, and the verbalized ones need the model (skipped)")
        for stat, note in self.approximate.items():
            out.append(f"{stat} are {note}: the scorers reading them score bounds "
                       "(stored in the run as meta 'approximate')")
        if self.bad_records:
            out.append(f"{len(self.bad_records)} bad record(s) skipped, first: "
                       f"{self.bad_records[0][0]}: {self.bad_records[0][1]}")
        return out


def _file_facts(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=str(path)) from exc
    return {"data_path": str(path.resolve()), "size": size, "sha256": digest.hexdigest()}


def _scorer_names(scorers: str | Iterable[str] | None) -> tuple[str, ...]:
    if scorers is None:
        return import_scorers("all")
    if isinstance(scorers, str):
        if scorers in SCORER_SETS:
            return import_scorers(scorers)
        scorers = [s.strip() for s in scorers.split(",") if s.strip()]
    names = tuple(dict.fromkeys(scorers))
    if not names:
        raise InvalidInputError("no scorers named", field="scorers")
    for name in names:
        scorer_at(name, "answer")  # UnknownNameError with suggestions
    return names


def _unfed_reason(spec: ScorerSpec, seen: set[str]) -> str:
    missing = sorted(n.value for n in spec.needs if n.value not in seen)
    if missing:
        return f"imported generations: no {', '.join(missing)} in the file"
    sampled = sorted(n.value for n in spec.sample_statistics)
    if sampled:  # read from every sample (ScorerSpec.sample_statistics)
        return (f"imported generations: no record has {', '.join(sampled)} on every sample "
                "(samples of plain text feed only the scorers that read their texts)")
    together = " and ".join(sorted(n.value for n in spec.needs))
    return f"imported generations: no record has {together} together"


def _default_grader(first: Imported) -> str:
    return "choice" if isinstance(first.item.metadata.get("choices"), list) else \
        QUESTIONS_GRADER


def import_file(path: str | Path, out: str | Path, *, format: str = "auto",
                scorers: str | Iterable[str] | None = None, grader: str | None = None,
                answer: str = "first", greedy_file: str | Path | None = None,
                on_bad_record: str = "raise", label_field: str | None = None,
                judge: str | None = None, progress: ImportProgress | None = None,
                batch_size: int = BATCH_SIZE, workers: int | None = None,
                reasoning_tags: str | Sequence[str] | None = DEFAULT_TAGS) -> ImportOutcome:
    """Turn a file of existing generations into a stored, scored, graded run at ``out``.

    Parameters
    ----------
    path : the log file (any format :func:`confide.ingest.read_generations` reads).
    out : the run directory (created; an existing import of the same file with the
        same settings is resumed, one with other settings refused).
    format : ``"auto"`` (:func:`confide.ingest.detect_format`; the outcome's
        ``format`` says which) or a format name.
    scorers : names (a sequence or comma-separated text), or ``"all"`` (default) or
        ``"free"`` (:func:`import_scorers`).
    grader : grades records that have references (default: ``choice`` for
        multiple-choice records, else ``contains``).
    answer, greedy_file, on_bad_record, label_field : as for
        :func:`~confide.ingest.read_generations`.
    judge : the equivalence judge of the sampling scorers (default: the grader's,
        :func:`~confide.equivalence.judges.default_judge`).
    progress : called with the number of records read so far, after each record.
    batch_size : records stored per transaction.
    workers : processes that read, score and encode records (this process stores
        them); 1: all in this process. Default: one per CPU (at most 8) for a JSON
        Lines file of at least :data:`PARALLEL_MIN_BYTES`, else 1. Only JSON Lines
        files without ``greedy_file`` are spread; the numbers do not depend on it.
    reasoning_tags : the tags of a reasoning trace in an answer's text (default
        ``<think>``, ``</think>``; ``"<open>,<close>"``), or None / ``"none"`` to read
        answers whole (:func:`~confide.ingest.read_generations`). Records whose trace has no
        final answer after it are left ungraded, with the reason.

    Returns
    -------
    ImportOutcome

    Raises
    ------
    InvalidInputError
        A missing or unreadable file, an unknown option, an undetectable format, a
        file with no readable record, or (``on_bad_record="raise"``) a bad record,
        named ``file:line: field:``; records stored before it are kept.
    UnknownNameError
        An unknown scorer, grader, judge or format.
    ConfigMismatch
        ``out`` holds a run with another configuration.
    """
    began = time.perf_counter()
    source = Path(path)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"must be a positive integer, not {batch_size!r}",
                                field="batch_size")
    names = _scorer_names(scorers)
    if grader is not None and GRADERS[grader].needs_backend:
        raise InvalidInputError(f"grader {grader!r} asks a model; imported generations have "
                                "none (grade with another grader, or attach labels: "
                                "confide label)", field="grader")
    tags = reasoning_tags_of(reasoning_tags)
    stream = read_generations(source, format, answer=answer, greedy_file=greedy_file,
                              on_bad_record=on_bad_record, label_field=label_field,
                              reasoning_tags=tags)
    first = next(stream, None)
    if first is None:
        shown = "; ".join(f"{w}: {why}" for w, why in stream.skipped[:3])
        raise InvalidInputError("no record could be read" + (f" ({len(stream.skipped)} bad: "
                                                             f"{shown})" if shown else ""),
                                file=str(source))
    ref_grader = grader or _default_grader(first)
    judge_name = judge or default_judge(ref_grader)
    make_judge(judge_name)  # an unknown judge fails before anything is stored
    default_grade = (ref_grader if first.item.references or first.label is None
                     else LABEL_GRADE)
    model = str(first.item.metadata.get("model") or "")
    facts = {**_file_facts(source), "format": stream.format, "answer": answer,
             "greedy_file": None if greedy_file is None else _file_facts(Path(greedy_file)),
             "label_field": label_field}
    if tags != DEFAULT_TAGS:  # only then: an import made before the option resumes as it was
        facts["reasoning_tags"] = None if tags is None else list(tags)
    identity = {"kind": "import", "source": facts, "task": f"import:{source.name}",
                "model": model, "scorers": list(names), "grader": default_grade,
                "reference_grader": ref_grader, "label_grade": LABEL_GRADE,
                "judge": judge_name, "seed": 0}
    static = plan_scorers(names, IMPORTABLE, imported=True)[1]
    setup = Setup(path=source, fmt=stream.format, label_field=label_field,
                   scorers=tuple(n for n in names if n not in static), judge=judge_name,
                   grader=ref_grader, reasoning_tags=tags)
    check_output(out)
    with RunStore.open(out, identity) as store:
        store.check_backend({"backend": "import", "format": stream.format, "model": model})
        if store.get_meta("import_complete"):  # the same file, the same settings: done
            return _outcome(store, source, stream.format, 0, len(store), began)
        store.set_meta("import_status", {"complete": False})  # under way
        state = store.get_meta("import_state") or {}
        fed: set[str] = set(state.get("fed", []))
        seen: set[str] = set(state.get("capabilities", []))
        notes: dict[str, list[str]] = {k: list(v) for k, v in
                                       state.get("approximate", {}).items()}
        counts = {"graded": int(state.get("graded", 0)), "imported": 0, "resumed": 0}
        if store.get_meta("skipped_scorers") is None:
            store.set_meta("skipped_scorers", static)
        done = frozenset(store.done_ids())
        plan = ScorerPlan([SCORERS[n] for n in setup.scorers], imported=True)
        pending: list[tuple[int, str, str]] = []

        def flush() -> None:
            if not pending:
                return
            meta = {"import_state": {"fed": sorted(fed), "capabilities": sorted(seen),
                                     "approximate": notes, "graded": counts["graded"]}}
            counts["imported"] += store.put_many(pending, meta)
            pending.clear()

        n_workers = worker_count(workers, source, greedy_file)
        bad = BadRecords(on_bad_record)
        ids: set[str] = set()
        results = (score_in_workers(setup, done, n_workers) if n_workers > 1 else
                   score_here(itertools.chain([first], stream), setup, done))
        try:
            for result in results:
                if isinstance(result, InvalidInputError):
                    bad.bad(result)
                    continue
                if result.item_id in ids:
                    bad.bad(duplicate_id(result.item_id, result.line, source))
                    continue
                position = len(ids)
                ids.add(result.item_id)
                if result.data is None:
                    counts["resumed"] += 1
                else:
                    fed.update(plan.fed(result.caps))
                    seen.update(result.caps[0] | result.caps[1])
                    keep_notes(notes, result.approximate)
                    counts["graded"] += result.graded
                    pending.append((position, result.item_id, result.data))
                    if len(pending) >= batch_size:
                        flush()
                if progress is not None:
                    progress(position + 1)
        except BaseException as exc:  # keep the complete records read so far (Ctrl-C, a bad one)
            try:
                flush()
                store.set_meta("import_status", _stopped(exc))
            except StoreError:  # the store itself failed: the first error tells
                pass
            raise
        finally:
            results.close()  # stops the worker processes now, not when collected
        flush()
        unfed = {n: _unfed_reason(SCORERS[n], seen) for n in setup.scorers if n not in fed}
        if unfed:
            store.drop_scores(sorted(unfed))
        approximate = {k: _merge_notes(v) for k, v in sorted(notes.items())}
        store.set_meta("skipped_scorers", {n: (static.get(n) or unfed[n]) for n in names
                                           if n in static or n in unfed})
        store.set_meta("approximate", approximate)
        # Workers read the file from its first line again: their list is the whole one.
        skipped = bad.skipped if n_workers > 1 else stream.skipped
        store.set_meta("skipped_records", [list(x) for x in skipped])
        store.set_meta("import_complete", True)
        store.set_meta("import_status", {"complete": True, "skipped": len(skipped)})
        return _outcome(store, source, stream.format, counts["imported"], counts["resumed"],
                        began)


def _stopped(exc: BaseException) -> dict[str, Any]:
    """The meta ``import_status`` of an import that ``exc`` stopped: where and why, for
    a bad record (:meth:`confide.runs.stored.Run.notes` says it under every table)."""
    if isinstance(exc, InvalidInputError) and exc.file is not None:
        prefix = f"{exc.file}:{exc.line}: " if exc.line is not None else f"{exc.file}: "
        return {"complete": False, "stopped_at": {"file": exc.file, "line": exc.line},
                "reason": str(exc).removeprefix(prefix)}
    return {"complete": False, "reason": "interrupted" if isinstance(exc, KeyboardInterrupt)
            else type(exc).__name__}


_TOP = re.compile(r"^(.*\btop )(\d+)(?: to (\d+))?( .*)$")


def _merge_notes(notes: list[str]) -> str:
    """One note from the records' notes: ``top 2``, ``top 3 to 5`` read as ``top 2 to 5``."""
    found = [_TOP.match(n) for n in notes]
    if not notes or not all(found) or len({(m.group(1), m.group(4)) for m in found if m}) > 1:
        return "; ".join(notes)
    widths = [int(w) for m in found if m for w in m.group(2, 3) if w is not None]
    lo, hi = min(widths), max(widths)
    head, tail = found[0].group(1), found[0].group(4)  # type: ignore[union-attr]
    return f"{head}{lo}{tail}" if lo == hi else f"{head}{lo} to {hi}{tail}"


def _outcome(store: RunStore, source: Path, fmt: str, imported: int, resumed: int,
             began: float) -> ImportOutcome:
    config = store.config or {}
    skipped = store.get_meta("skipped_scorers", {})
    state = store.get_meta("import_state") or {}
    return ImportOutcome(
        path=store.path, source=source, format=fmt, total=len(store), imported=imported,
        resumed=resumed, scorers=tuple(n for n in config.get("scorers", []) if n not in skipped),
        skipped_scorers=skipped, approximate=store.get_meta("approximate", {}),
        capabilities=frozenset(state.get("capabilities", [])),
        bad_records=[(str(w), str(r)) for w, r in store.get_meta("skipped_records", [])],
        model=str(config.get("model", "")), grader=config.get("grader"),
        graded=int(state.get("graded", 0)),
        seconds=time.perf_counter() - began)
