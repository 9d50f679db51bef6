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
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

from confide.backends import Backend
from confide.core.errors import InvalidInputError
from confide.core.options import DEFAULT_MODEL, DEFAULT_TASK
from confide.core.records import Record
from confide.evaluation.table import DEFAULT_METRICS, EvalTable, evaluate_records, scorer_order
from confide.pipeline.plan import QUESTIONS_GRADER, RunConfig
from confide.runs.execution import Progress, RunOutcome, execute
from confide.store.exports import export_run
from confide.store.run_store import RunStore

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
        if self.hidden_states_note:
            table.notes.append(self.hidden_states_note)
        return table

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
                          **settings: Any) -> Run:
    """Generate, score and grade a run (or resume it) and return it with its table:
    ``confide run`` from Python, with the same defaults.

    ``model`` is a loaded backend or a model name (default: the bundled model).
    ``settings`` are :class:`~confide.pipeline.plan.RunConfig` fields: ``limit``
    (0: every item), ``scorers``, ``grader``, ``max_new_tokens``, ``seed``,
    ``data_path``, ...
    """
    backend = model if model is not None and not isinstance(model, str) else None
    name = model if isinstance(model, str) else (
        backend.config().get("model", DEFAULT_MODEL) if backend is not None else DEFAULT_MODEL)
    if "scorers" in settings:
        settings["scorers"] = tuple(settings["scorers"])
    config = replace(RunConfig(), model=str(name), task=task, **settings)
    out = Path(out) if out is not None else default_run_dir(config)
    outcome = execute(config, out, backend=backend, progress=progress)
    return Run(out, outcome=outcome)
