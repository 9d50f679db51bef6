"""A stored run: its configuration, records and evaluation table; run or resume one.

:class:`Run` reads a run directory (``run.sqlite``) and computes its table from the
stored records without the model (:meth:`Run.compute_table`);
:func:`generate_and_evaluate` loads a model, runs (or resumes) a run with
:func:`confide.runs.execution.execute` and opens the result. The decisions and the API
reach runs through here.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tempfile
from collections import Counter
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from confide.backends import Backend
from confide.core.errors import InvalidInputError, StoreError
from confide.core.frames import data_frame
from confide.core.options import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LIMIT,
    DEFAULT_MODEL,
    DEFAULT_TASK,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
)
from confide.core.records import Record
from confide.evaluation.table import DEFAULT_METRICS, EvalTable, evaluate_records, scorer_order
from confide.pipeline.answering import DEFAULT_SCORERS
from confide.pipeline.plan import QUESTIONS_GRADER, RunConfig
from confide.runs.execution import Progress, RunOutcome, execute
from confide.store.exports import export_run
from confide.store.run_store import RunStore, record_row

__all__ = ["Run", "default_run_dir", "generate_and_evaluate", "open_run"]


class Run:
    """A stored run: its configuration, records and evaluation table."""

    def __init__(self, path: str | Path, *, outcome: RunOutcome | None = None) -> None:
        self.path = Path(path)
        self.outcome = outcome
        with RunStore.open(self.path) as store:
            self.config: dict[str, Any] = store.config or {}
            self.backend_config: dict[str, Any] = store.get_meta("backend", {})
            self.skipped_scorers: dict[str, str] = store.get_meta("skipped_scorers", {})
            #: why the run's hidden states cannot be trusted (made before a fix), or None
            self.hidden_states_note: str | None = store.hidden_states_note()
            #: statistics an imported run holds only approximately, with why (bounds, not
            #: values: ``{"token_entropies": "lower bounds from the top-k"}``)
            self.approximate: dict[str, str] = store.get_meta("approximate", {}) or {}
            #: how an import ended (``{"complete": True, "skipped": n}``, or ``{"complete":
            #: False, "stopped_at": {"file", "line"}, "reason"}``); None: not an import
            self.import_status: dict[str, Any] | None = _import_status(store, self.config)
            #: what the last execution changed of what was asked (a Ray worker count cut)
            self.execution_notes: list[str] = list(store.get_meta("execution_notes") or [])
        #: what this process did to the run that its tables must say: fitted models
        #: applied in memory, fitted on what (:func:`confide.api.apply_learned`); a
        #: temporary folder (:func:`generate_and_evaluate` without ``out``)
        self.session_notes: list[str] = []

    @cached_property
    def records(self) -> list[Record]:
        with RunStore.open(self.path) as store:
            return store.records()

    @property
    def grader(self) -> str:
        return str(self.config.get("grader") or QUESTIONS_GRADER)

    def compute_table(self, *, grader: str | None = None,
                      metrics: tuple[str, ...] = DEFAULT_METRICS, n_resamples: int = 1000,
                      seed: int | None = None,
                      metric_options: dict[str, dict[str, Any]] | None = None) -> EvalTable:
        """Compute the table from the stored records (no model needed; ``confide eval``);
        a run without records is refused
        (:meth:`~confide.store.run_store.RunStore.no_records`), as by the report."""
        if not self.records:
            unfinished = _import_note(self.path, self.config, self.import_status, 0)
            if unfinished is not None:  # "finish it with confide run" would mislead
                raise StoreError(f"{self.path}: the run holds no records yet: {unfinished}")
            with RunStore.open(self.path) as store:
                raise store.no_records()
        stored_graders = sorted({g for r in self.records for g in r.grades})
        if grader is not None and grader not in stored_graders:  # not an empty table
            raise InvalidInputError(
                f"the run at {self.path} has no {grader!r} grades; stored: "
                f"{', '.join(stored_graders) or 'none (its items have no references)'}",
                field="grader")
        scorers = scorer_order(self.config, self.skipped_scorers, self.records)
        table = evaluate_records(self.records, grader=grader or self.grader,
                                scorers=scorers or None, metrics=metrics,
                                n_resamples=n_resamples, metric_options=metric_options,
                                seed=self.config.get("seed", 0) if seed is None else seed)
        if table.n_graded == 0:
            table.notes.append(_grading_hint(self.path, table.grader, stored_graders))
        table.notes.extend(self.notes)
        return table

    @property
    def notes(self) -> list[str]:
        """What a reader of this run's numbers must know about how it was made, one
        sentence each (every table of the run carries them): an import that stopped
        early or skipped records, items asking a few-shot exemplar's question, a Ray
        worker count cut, hidden states made before a fix."""
        notes = []
        imported = _import_note(self.path, self.config, self.import_status, len(self.records))
        if imported is not None:
            notes.append(imported)
        task = self.config.get("task")
        options = task.get("options", {}) if isinstance(task, dict) else {}
        if equal := options.get("excluded_as_exemplars"):
            notes.append(f"{equal} item(s) ask the question of a few-shot exemplar: each stays "
                         "in the run, and that exemplar is left out of its own prompt (the "
                         "next exemplar takes its place, or the item has one shot fewer)")
        ungraded = [r.grade_errors[self.grader] for r in self.records
                    if self.grader in r.grade_errors]
        for why, count in sorted(Counter(ungraded).items()):  # not counted wrong
            notes.append(f"{count} record(s) left ungraded by {self.grader}, not counted "
                         f"wrong: {why}")
        notes.extend(self.execution_notes)
        notes.extend(self.session_notes)
        if self.hidden_states_note:
            notes.append(self.hidden_states_note)
        return notes

    def to_pandas(self) -> Any:
        """One row per record, as the row exports write it
        (:func:`~confide.store.run_store.record_row`): ``id``, ``question``, ``answer``,
        ``references``, ``grade.<grader>``, ``score.<scorer>`` (None where NaN) and
        ``why.<scorer>`` (the reason). Needs pandas."""
        return data_frame([record_row(r) for r in self.records])

    #: The former name of :meth:`compute_table`, kept working.
    evaluate = compute_table

    @cached_property
    def table(self) -> EvalTable:
        return self.compute_table()

    def export(self, fmt: str = "jsonl", path: str | Path | None = None) -> Path:
        """Write the records in ``fmt``, any format ``confide export --format`` takes
        (:data:`~confide.store.exports.EXPORT_FORMATS`); default file in the run directory."""
        with RunStore.open(self.path) as store:
            return export_run(store, fmt, path)


def _import_status(store: RunStore, config: dict[str, Any]) -> dict[str, Any] | None:
    """The importer's meta ``import_status``; for an import stored before it, ``import_complete``
    (and the bad records it kept) tell the same."""
    status = store.get_meta("import_status")
    if status is not None or config.get("kind") != "import":
        return status if isinstance(status, dict) else None
    if store.get_meta("import_complete"):
        return {"complete": True, "skipped": len(store.get_meta("skipped_records") or [])}
    return {"complete": False}


def _import_note(path: Path, config: dict[str, Any], status: dict[str, Any] | None,
                 n_records: int) -> str | None:
    """What an import's table must say about its end: stopped early (where, why, and the
    command that resumes it) or records skipped; None when it read every record."""
    if status is None:
        return None
    if status.get("complete"):
        skipped = int(status.get("skipped") or 0)
        return (f"the import skipped {skipped} bad record(s) of its file (--on-bad-record "
                "skip); the table covers the records read" if skipped else None)
    command = _resume_command(path, config)
    stopped = status.get("stopped_at") or {}
    if stopped.get("file"):
        where = f"{stopped['file']}:{stopped['line']}" if stopped.get("line") else stopped["file"]
        why = f" ({status['reason']})" if status.get("reason") else ""
        return (f"the import is incomplete: it stopped at {where}{why}, so the table covers "
                f"only the {n_records} record(s) stored before it. Fix that record and run "
                f"`{command}` to resume, or resume skipping bad records: `{command} "
                "--on-bad-record skip`")
    return (f"the import is incomplete: it did not finish (it was stopped, or is still "
            f"running), so the table covers only the {n_records} record(s) stored so far. "
            f"Resume it with `{command}` (add --on-bad-record skip to skip bad records)")


def _resume_command(path: Path, config: dict[str, Any]) -> str:
    """The `confide score` command that resumes an import: the file, the run and the options
    of the run's identity (other options, --scorers and --grader, as first given)."""
    source = config.get("source") or {}
    words = ["confide", "score", str(source.get("data_path") or "FILE"), "--out", str(path)]
    if source.get("answer") not in (None, "first"):
        words += ["--answer", str(source["answer"])]
    if isinstance(source.get("greedy_file"), dict):
        words += ["--greedy-file", str(source["greedy_file"].get("data_path"))]
    if source.get("label_field"):
        words += ["--label-field", str(source["label_field"])]
    return shlex.join(words)


def _grading_hint(path: Path, grader: str, stored: list[str]) -> str:
    """Why a table has no figures (no record holds its grade), and how to get some."""
    run = shlex.quote(str(path))
    if stored:
        return (f"no record has a {grader!r} grade; this run holds {', '.join(stored)}: read "
                f"them with confide eval {run} --grader {shlex.quote(stored[0])}")
    return (f"no record of this run is graded (its items have no references and no labels "
            f"were added): label the answers with confide label {run} LABELS.jsonl --name "
            'human, one {"id": ITEM_ID, "label": 1 or 0} per line (confide export '
            f"{run} lists the ids), then read them with confide eval {run} --grader human")


def open_run(path: str | Path) -> Run:
    """Open a stored run directory."""
    return Run(path)


def default_run_dir(config: RunConfig) -> Path:
    """``runs/<task>-<model>-<hash>``: the same settings always map to the same directory,
    so re-running a command resumes it, and different settings never collide."""
    digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{Path(config.task).stem}-{Path(config.model).name}")
    return Path("runs") / f"{slug}-{digest[:8]}"


def generate_and_evaluate(model: Backend | str | None = None, *, task: str = DEFAULT_TASK,
                          out: str | Path | None = None, progress: Progress | None = None,
                          limit: int | None = DEFAULT_LIMIT,
                          scorers: Sequence[str] = DEFAULT_SCORERS, grader: str | None = None,
                          data_path: str | None = None, max_new_tokens: int | None = None,
                          n_samples: int | None = None,
                          temperature: float = DEFAULT_TEMPERATURE, top_p: float = DEFAULT_TOP_P,
                          hidden_layers: Sequence[int] = (),
                          batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0,
                          task_options: dict[str, Any] | None = None, judge: str | None = None,
                          judge_options: dict[str, Any] | None = None,
                          on_bad_record: str = "raise",
                          reasoning_tags: tuple[str, str] | str | None = None,
                          ensemble: str | Path | None = None,
                          ensemble_greedy: str = "base") -> Run:
    """Generate, score and grade a run (or resume it) and return it with its table:
    ``confide run`` from Python, with the same defaults and meanings.

    Parameters
    ----------
    model : a loaded backend or a model name (default: the bundled model).
    task : a built-in task, a data file, or ``hf:<name>``.
    out : the run directory; the same settings resume it. None: a new temporary folder,
        named in ``run.notes`` (nothing is written into the working folder).
    progress : called as items are stored.
    limit : the first that many items (default 200, as ``confide run``); 0 or None: all.
    scorers, grader, data_path, max_new_tokens, n_samples, temperature, top_p,
    hidden_layers, batch_size, seed, task_options, judge, judge_options, on_bad_record,
    reasoning_tags :
        the :class:`~confide.pipeline.plan.RunConfig` fields of the same names (and
        ``confide run``'s options); ``reasoning_tags="<think>,</think>"`` splits each
        answer into its trace and final answer.
    ensemble, ensemble_greedy : an ensemble directory (``confide train``): every answer is
        also scored under each member, for the ``ens_*`` scorers; the greedy answer is the
        base model's (``"base"``) or the members' mean's (``"mean"``).
    """
    backend = model if model is not None and not isinstance(model, str) else None
    name = model if isinstance(model, str) else (
        backend.config().get("model", DEFAULT_MODEL) if backend is not None else DEFAULT_MODEL)
    config = RunConfig(model=str(name), task=task, data_path=data_path, limit=limit,
                       scorers=tuple(scorers), grader=grader, max_new_tokens=max_new_tokens,
                       n_samples=n_samples, temperature=temperature, top_p=top_p,
                       hidden_layers=tuple(hidden_layers), batch_size=batch_size, seed=seed,
                       task_options=dict(task_options or {}), judge=judge,
                       judge_options=dict(judge_options or {}), on_bad_record=on_bad_record,
                       reasoning_tags=reasoning_tags,  # type: ignore[arg-type]  # text: checked
                       ensemble=None if ensemble is None else str(ensemble),
                       ensemble_greedy=ensemble_greedy)
    temporary = out is None
    target = Path(tempfile.mkdtemp(prefix="confide-run-")) if out is None else Path(out)
    outcome = execute(config, target, backend=backend, progress=progress)
    run = Run(target, outcome=outcome)
    if temporary:
        run.session_notes.append(f"stored in the temporary folder {target} (no out= given): "
                                "pass out= to keep a run where you choose and to resume it")
    return run
