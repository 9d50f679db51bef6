"""The run loop: task → backend → scorers → grader → store, resumable at any point.

Items are processed in fixed blocks of ``batch_size`` in item order, so an
item's batch neighbours (and with them every floating-point detail of its
generation) are the same on a first run and on a resume; sampling seeds come
from (run seed, item id). A block is regenerated on resume only if one of its
items is missing, and only the missing ones are stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confide.backends import Backend, GenerationSpec, item_seed, load_backend
from confide.backends.models import DEFAULT_MODEL
from confide.errors import ConfigMismatch
from confide.grading import GRADERS
from confide.judges import JUDGES, default_judge, make_judge
from confide.pipeline import DEFAULT_SCORERS, GenerationFailed, Pipeline, check_question
from confide.scorers import SCORERS
from confide.store import RunStore, config_differences
from confide.tasks import Task, load_task

__all__ = ["DEFAULT_SCORERS", "Progress", "RunConfig", "RunOutcome", "execute"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's numbers (stored with the run)."""

    model: str = DEFAULT_MODEL
    backend: str = "hf"
    task: str = "triviaqa"
    data_path: str | None = None
    limit: int | None = 100
    scorers: tuple[str, ...] = DEFAULT_SCORERS
    grader: str | None = None
    max_new_tokens: int | None = None
    n_samples: int | None = None
    temperature: float = 1.0
    top_p: float = 0.9
    hidden_layers: tuple[int, ...] = ()
    batch_size: int = 8
    seed: int = 0
    task_options: dict[str, Any] = field(default_factory=dict)
    judge: str | None = None  # semantic scorers' equivalence judge; None: the task's default
    judge_options: dict[str, Any] = field(default_factory=dict)
    on_bad_record: str = "raise"  # "skip": skip malformed data records, counted in Task.skipped

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["scorers"] = list(self.scorers)
        d["hidden_layers"] = list(self.hidden_layers)
        return d


@dataclass
class RunOutcome:
    """What :func:`execute` did: stored items, newly generated ones, skipped scorers."""

    path: Path
    task: Task
    total: int
    generated: int
    skipped_scorers: dict[str, str]
    generation_seconds: float = 0.0
    generated_tokens: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # item id → error (retried on resume)


def _identity(config: RunConfig, task: Task) -> dict[str, Any]:
    d = config.to_dict()
    d["task"] = task.config()
    d["grader"] = config.grader or task.grader
    return d


def execute(config: RunConfig, out: str | Path, *, backend: Backend | None = None,
            progress: Progress | None = None) -> RunOutcome:
    """Generate, score, grade and store every item of the run not stored yet."""
    for name in config.scorers:  # fail on a typo before loading anything
        SCORERS[name]
    if config.judge is not None:
        JUDGES[config.judge]
    task = load_task(config.task, limit=config.limit, data_path=config.data_path,
                     on_bad_record=config.on_bad_record, **config.task_options)
    grader = config.grader or task.grader
    GRADERS[grader]
    for item in task.items:
        check_question(item)
    store = RunStore.open(out, _identity(config, task))
    try:
        done = store.done_ids()
        total = len(task.items)
        if progress:
            progress(len(done & {it.id for it in task.items}), total)
        todo = [it for it in task.items if it.id not in done]
        if not todo:
            skipped = store.get_meta("skipped_scorers", {})
            return RunOutcome(Path(out), task, total, 0, skipped)
        if backend is None:
            backend = load_backend(config.backend, config.model, batch_size=config.batch_size)
        _check_backend(store, backend)
        judge = make_judge(config.judge or default_judge(task.grader), backend=backend,
                           **config.judge_options)
        pipe = Pipeline.build(backend, config.scorers, judge=judge, grader=grader,
                              seed=config.seed)
        store.set_meta("skipped_scorers", pipe.skipped)
        spec = GenerationSpec(
            max_new_tokens=config.max_new_tokens or task.max_new_tokens,
            stop=tuple(task.stop),
            n_samples=config.n_samples if config.n_samples is not None else pipe.n_samples,
            temperature=config.temperature, top_p=config.top_p,
            hidden_layers=tuple(config.hidden_layers))
        outcome = RunOutcome(Path(out), task, total, 0, pipe.skipped)
        stored = total - len(todo)
        for start in range(0, total, config.batch_size):
            block = task.items[start:start + config.batch_size]
            if all(it.id in done for it in block):
                continue
            began = time.perf_counter()
            results = pipe.generate(task, block, spec,
                                    [item_seed(config.seed, it.id) for it in block])
            seconds = time.perf_counter() - began
            outcome.generation_seconds += seconds
            for offset, (item, result) in enumerate(zip(block, results, strict=True)):
                if item.id in done:
                    continue
                try:
                    record = pipe.complete(item, result, seconds=seconds / len(block))
                except GenerationFailed as exc:  # keep why; a resumed run retries the item
                    store.record_failure(item.id, exc.reason)
                    outcome.failures[item.id] = exc.reason
                    continue
                outcome.generated_tokens += record.greedy.n_tokens + sum(
                    s.n_tokens for s in record.samples)
                if store.put(record, start + offset):
                    stored += 1
                    outcome.generated += 1
            if progress:
                progress(stored, total)
        return outcome
    finally:
        store.close()


def _check_backend(store: RunStore, backend: Backend) -> None:
    wanted = backend.config()
    stored = store.get_meta("backend")
    if stored is None:
        store.set_meta("backend", wanted)
    elif stored != wanted:
        raise ConfigMismatch(f"{store.path} was generated by another model setup:\n  "
                             + "\n  ".join(config_differences(stored, wanted)))
