"""The public Python API: load_model, score, evaluate, open_run.

    >>> import confide
    >>> model = confide.load_model()                       # doctest: +SKIP
    >>> confide.score(model, ["Who wrote Hamlet?"])        # doctest: +SKIP
    >>> run = confide.evaluate(model, task="triviaqa", limit=20)  # doctest: +SKIP
    >>> run.table.rows[0].metrics["auroc"]                 # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from confide.backends.base import Backend, GenerationSpec, item_seed
from confide.backends.models import DEFAULT_MODEL
from confide.errors import BackendError, InvalidInputError
from confide.evaluation import EvalTable, evaluate_records
from confide.records import Item, Record
from confide.runner import (
    DEFAULT_SCORERS,
    Progress,
    RunConfig,
    RunOutcome,
    execute,
    load_backend,
    plan_scorers,
    score_record,
)
from confide.scorers import ScoringContext
from confide.store import RunStore
from confide.tasks import Task

__all__ = ["Run", "ScoredAnswer", "apply_learned", "default_run_dir", "evaluate", "execute",
           "fit_learned", "load_model", "open_run", "report", "score"]


def load_model(model: str = DEFAULT_MODEL, *, backend: str = "hf", **options: Any) -> Backend:
    """Load a model behind a backend: ``load_model()`` gives the bundled SmolLM2-135M-Instruct.

    ``model`` is a bundled alias (``smollm2``, ``gemma3-270m``), a ``.gguf``
    file, a transformers directory or a hub id; ``options`` go to the backend
    (``device``, ``batch_size``, ``dtype`` for ``hf``).
    """
    return load_backend(backend, model, **options)


@dataclass
class ScoredAnswer:
    """An answer with its confidences (higher = more likely correct) and NaN reasons."""

    question: str
    answer: str
    confidences: dict[str, float]
    reasons: dict[str, str] = field(default_factory=dict)
    record: Record | None = field(default=None, repr=False)


def score(model: Backend, questions: list[str] | list[Item], *,
          scorers: tuple[str, ...] | list[str] = DEFAULT_SCORERS, max_new_tokens: int = 32,
          stop: tuple[str, ...] = ("\n",), seed: int = 0) -> list[ScoredAnswer]:
    """Answer each question greedily and return the answers with their confidences."""
    items = [q if isinstance(q, Item) else Item(id=f"q{i}", prompt=q)
             for i, q in enumerate(questions)]
    for item in items:
        if isinstance(item.prompt, str) and not item.prompt.strip():
            raise InvalidInputError(f"question {item.id!r} is empty", field="question")
    usable, skipped = plan_scorers(tuple(scorers), model.capabilities)
    n_samples = max([s.n_samples for s in usable], default=0)
    task = Task(name="questions", items=items, grader="contains", format="open_qa")
    results = model.generate([task.render(it, chat=model.has_chat_template) for it in items],
                             GenerationSpec(max_new_tokens=max_new_tokens, stop=stop,
                                            n_samples=n_samples),
                             [item_seed(seed, it.id) for it in items])
    ctx = ScoringContext(backend=model, options={"seed": seed})
    answers = []
    for item, result in zip(items, results, strict=True):
        if result.greedy is None:  # an HTTP backend that gave up on this question
            raise BackendError(f"question {item.id!r}: {result.error or 'no answer'}")
        record = Record(item=item, greedy=result.greedy, samples=result.samples)
        score_record(record, usable, ctx)
        reasons = {**record.score_errors, **skipped}
        confidences = {**record.scores, **{name: float("nan") for name in skipped}}
        question = item.prompt if isinstance(item.prompt, str) else item.prompt[-1]["content"]
        answers.append(ScoredAnswer(question, record.greedy.text, confidences, reasons, record))
    return answers


class Run:
    """A stored run: its configuration, records and evaluation table."""

    def __init__(self, path: str | Path, *, outcome: RunOutcome | None = None) -> None:
        self.path = Path(path)
        self.outcome = outcome
        with RunStore.open(self.path) as store:
            self.config: dict[str, Any] = store.config or {}
            self.backend_config: dict[str, Any] = store.get_meta("backend", {})
            self.skipped_scorers: dict[str, str] = store.get_meta("skipped_scorers", {})

    @cached_property
    def records(self) -> list[Record]:
        with RunStore.open(self.path) as store:
            return store.records()

    @property
    def grader(self) -> str:
        return str(self.config.get("grader", "contains"))

    def evaluate(self, *, grader: str | None = None, metrics: tuple[str, ...] = ("auroc", "prr"),
                 n_resamples: int = 1000, seed: int | None = None,
                 metric_options: dict[str, dict[str, Any]] | None = None) -> EvalTable:
        """Recompute the table from the stored records (no model needed)."""
        stored = [s for s in self.config.get("scorers", []) if s not in self.skipped_scorers]
        extra = [s for r in self.records for s in r.scores if s not in stored]
        scorers = list(dict.fromkeys(stored + extra))
        return evaluate_records(self.records, grader=grader or self.grader,
                                scorers=scorers or None, metrics=metrics,
                                n_resamples=n_resamples, metric_options=metric_options,
                                seed=self.config.get("seed", 0) if seed is None else seed)

    @cached_property
    def table(self) -> EvalTable:
        return self.evaluate()

    def export(self, fmt: str = "jsonl", path: str | Path | None = None) -> Path:
        with RunStore.open(self.path) as store:
            return store.export(fmt, path)


def open_run(path: str | Path) -> Run:
    """Open a stored run directory."""
    return Run(path)


def fit_learned(run: str | Path, *, kind: str = "probe", out: str | Path | None = None,
                **options: Any) -> Any:
    """Fit a probe, lens probe or combiner (:func:`confide.learned.fit`) or a density model
    (``mahalanobis``, ``relative_mahalanobis``, ``huq``: :func:`confide.density.fit`) on a
    stored run; save it to ``out`` (JSON) when given. Returns the
    :class:`~confide.learned.Learned`."""
    from confide import density
    from confide.learned import fit_run

    if kind in density.KINDS:
        model = density.fit_run(run, kind=kind, **options)
    elif options.get("background") is not None:
        raise InvalidInputError("only relative_mahalanobis takes a background run",
                                field="background")
    else:
        model = fit_run(run, kind=kind, **options)  # type: ignore[arg-type]
    if out is not None:
        model.save(out)
    return model


def apply_learned(run: Run, files: list[str | Path] | tuple[str | Path, ...]) -> Run:
    """Add the scores of fitted models (``confide fit`` files) to ``run``'s records, in memory.

    On the run a model was fitted on, its training items get their cross-fitted
    scores; on another run, items it was trained on get NaN with the reason.
    """
    from confide.density import load_fitted
    from confide.learned import apply_to_run

    run.records = apply_to_run(run.path, [load_fitted(f) for f in files])
    return run


def report(runs: str | Path | list[str | Path] | tuple[str | Path, ...],
           out: str | Path | None = None, *, n_resamples: int = 1000) -> Path:
    """Write the self-contained HTML report of a stored run (default ``RUN/report.html``),
    or, given several runs, their side-by-side comparison (default ``compare.html``).
    Reads the stored records only; the model is not loaded."""
    from confide.report import write_comparison, write_report

    if isinstance(runs, (str, Path)):
        return write_report(runs, out, n_resamples=n_resamples)
    if len(runs) == 1:
        return write_report(runs[0], out, n_resamples=n_resamples)
    return write_comparison(list(runs), out or "compare.html", n_resamples=n_resamples)


def default_run_dir(config: RunConfig) -> Path:
    """``runs/<task>-<model>-<hash>``: the same settings always map to the same directory,
    so re-running a command resumes it, and different settings never collide."""
    digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{Path(config.task).stem}-{Path(config.model).name}")
    return Path("runs") / f"{slug}-{digest[:8]}"


def evaluate(model: Backend | str | None = None, *, task: str = "triviaqa",
             out: str | Path | None = None, progress: Progress | None = None,
             **settings: Any) -> Run:
    """Run (or resume) an evaluation and return it with its table.

    ``model`` is a loaded backend or a model name (default: the bundled model).
    ``settings`` are :class:`~confide.runner.RunConfig` fields: ``limit``,
    ``scorers``, ``grader``, ``max_new_tokens``, ``seed``, ``data_path``, ...
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
