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
from confide.errors import ConfigMismatch, InvalidInputError, StoreError
from confide.grading import GRADERS
from confide.judges import JUDGES, default_judge, make_judge
from confide.options import (check_distribution, check_hidden_layers, check_option,
                             check_prompt_fits, check_sampling)
from confide.pipeline import DEFAULT_SCORERS, GenerationFailed, Pipeline, check_question
from confide.records import Item, Record
from confide.scorers import SCORERS
from confide.store import RunStore, config_differences
from confide.tasks import Task, load_task

__all__ = ["DEFAULT_SCORERS", "BlockResult", "BlockRunner", "Progress", "RunConfig", "RunOutcome",
           "check_backend", "check_output", "execute", "prepare", "run_identity", "todo_blocks",
           "write_block"]

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

    def __post_init__(self) -> None:
        # Refuse a bad option before anything is loaded or stored (rules: confide.options).
        for name, value in (("batch_size", self.batch_size), ("temperature", self.temperature),
                            ("top_p", self.top_p), ("seed", self.seed),
                            ("max_new_tokens", self.max_new_tokens),
                            ("n_samples", self.n_samples)):
            if value is not None:
                check_option(name, value)
        if self.limit is not None and (isinstance(self.limit, bool)
                                       or not isinstance(self.limit, int) or self.limit < 1):
            raise InvalidInputError(f"must be a positive integer or None (all), not "
                                    f"{self.limit!r}", field="limit")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in self.hidden_layers):
            raise InvalidInputError(f"must be integers, not {list(self.hidden_layers)!r}",
                                    field="hidden_layers")
        if self.on_bad_record not in ("raise", "skip"):
            raise InvalidInputError(f"must be 'raise' or 'skip', not {self.on_bad_record!r}",
                                    field="on_bad_record")

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


def run_identity(config: RunConfig, task: Task) -> dict[str, Any]:
    """What the store keeps as the run's configuration (a resume must match it)."""
    d = config.to_dict()
    d["task"] = task.config()
    d["grader"] = config.grader or task.grader
    return d


def prepare(config: RunConfig) -> tuple[Task, str, int]:
    """Check the run's names and options and load its task: ``(task, grader, max_new_tokens)``.

    Nothing is loaded but the task and nothing is stored, so a typo fails at once.
    """
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
    check_sampling(config.n_samples if config.n_samples is not None else max(
        [SCORERS[s].n_samples for s in config.scorers], default=0), config.temperature)
    return task, grader, config.max_new_tokens or task.max_new_tokens


@dataclass
class BlockResult:
    """What one block of items gave: ``(position, record)`` pairs, failures, seconds."""

    start: int
    records: list[tuple[int, Record]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # item id → why it failed
    seconds: float = 0.0


class BlockRunner:
    """One backend with its pipeline: generates, scores and grades blocks of a run's items.

    The local run loop holds one; each Ray worker (:mod:`confide.distributed`)
    holds its own, so every item goes through the same generate → record →
    score → grade path wherever it runs.
    """

    def __init__(self, config: RunConfig, task: Task, max_new_tokens: int,
                 backend: Backend | None = None) -> None:
        self.config, self.task = config, task
        self.backend = backend if backend is not None else load_backend(
            config.backend, config.model, batch_size=config.batch_size)
        judge = make_judge(config.judge or default_judge(task.grader), backend=self.backend,
                           **config.judge_options)
        self.pipe = Pipeline.build(self.backend, config.scorers, judge=judge,
                                   grader=config.grader or task.grader, seed=config.seed)
        self.spec = GenerationSpec(
            max_new_tokens=max_new_tokens,
            stop=tuple(task.stop),
            n_samples=config.n_samples if config.n_samples is not None else self.pipe.n_samples,
            temperature=config.temperature, top_p=config.top_p,
            hidden_layers=tuple(config.hidden_layers))

    def check(self, ids: set[str] | None = None) -> None:
        """Check the items (those in ``ids``; default all) against the model."""
        items = [it for it in self.task.items if ids is None or it.id in ids]
        _check_against_model(self.backend, self.task, items, self.config.hidden_layers,
                             self.spec.max_new_tokens)

    def run_block(self, start: int, skip: frozenset[str] = frozenset()) -> BlockResult:
        """Generate the whole block at ``start`` (its neighbours fix its numbers) and
        complete the records of the items not in ``skip``."""
        block = self.task.items[start:start + self.config.batch_size]
        began = time.perf_counter()
        results = self.pipe.generate(self.task, block, self.spec,
                                     [item_seed(self.config.seed, it.id) for it in block])
        seconds = time.perf_counter() - began
        out = BlockResult(start, seconds=seconds)
        for offset, (item, result) in enumerate(zip(block, results, strict=True)):
            if item.id in skip:
                continue
            try:
                record = self.pipe.complete(item, result, seconds=seconds / len(block))
            except GenerationFailed as exc:  # keep why; a resumed run retries the item
                out.failures[item.id] = exc.reason
                continue
            out.records.append((start + offset, record))
        return out


def todo_blocks(config: RunConfig, task: Task, done: set[str]) -> list[int]:
    """Starts of the fixed blocks (``batch_size`` items in item order) with an item not done."""
    return [start for start in range(0, len(task.items), config.batch_size)
            if not all(it.id in done for it in task.items[start:start + config.batch_size])]


def write_block(store: RunStore, outcome: RunOutcome, result: BlockResult) -> int:
    """Store a block's new records and failures (the one writer); return how many were new."""
    new = 0
    for item_id, reason in result.failures.items():
        store.record_failure(item_id, reason)
        outcome.failures[item_id] = reason
    for position, record in result.records:
        if store.put(record, position):
            new += 1
            outcome.generated += 1
            outcome.generated_tokens += record.greedy.n_tokens + sum(
                s.n_tokens for s in record.samples)
    return new


def check_output(out: str | Path) -> bool:
    """Whether ``out`` holds a run already; refuse a file where a run directory belongs."""
    if Path(out).exists() and not Path(out).is_dir():
        raise StoreError(f"{out}: is a file; the run's output must be a directory")
    return (Path(out) / "run.sqlite").exists()


def execute(config: RunConfig, out: str | Path, *, backend: Backend | None = None,
            progress: Progress | None = None, ray: str | None = None,
            workers: int | None = None, threads_per_worker: int | None = None) -> RunOutcome:
    """Generate, score, grade and store every item of the run not stored yet.

    With ``ray`` (``"local"`` or a cluster address) the items are spread over
    ``workers`` Ray actors (:func:`confide.distributed.execute_ray`); the
    stored records are the same.
    """
    check_distribution(ray, workers, threads_per_worker)
    if ray is not None:
        if backend is not None or config.backend == "openai":
            raise InvalidInputError(
                "Ray workers load their own model by name (hf, vllm); the openai backend "
                "already spreads its requests over the server (--concurrency)", field="ray")
        from confide.distributed import execute_ray

        return execute_ray(config, out, address=ray, workers=workers or 2,
                           threads_per_worker=threads_per_worker, progress=progress)
    task, _, max_new_tokens = prepare(config)
    checked = False
    if not check_output(out):
        # A new run: check what only the model can tell before the run directory exists,
        # so a bad option never leaves a half-made run that refuses the corrected command.
        if backend is None:
            backend = load_backend(config.backend, config.model, batch_size=config.batch_size)
        _check_against_model(backend, task, task.items, config.hidden_layers, max_new_tokens)
        checked = True
    store = RunStore.open(out, run_identity(config, task))
    try:
        done = store.done_ids()
        total = len(task.items)
        if progress:
            progress(len(done & {it.id for it in task.items}), total)
        todo = {it.id for it in task.items if it.id not in done}
        if not todo:
            skipped = store.get_meta("skipped_scorers", {})
            return RunOutcome(Path(out), task, total, 0, skipped)
        runner = BlockRunner(config, task, max_new_tokens, backend)
        if not checked:
            runner.check(todo)
        check_backend(store, runner.backend.config())
        store.set_meta("skipped_scorers", runner.pipe.skipped)
        outcome = RunOutcome(Path(out), task, total, 0, runner.pipe.skipped)
        stored = total - len(todo)
        for start in todo_blocks(config, task, done):
            result = runner.run_block(start, frozenset(done))
            outcome.generation_seconds += result.seconds
            stored += write_block(store, outcome, result)
            if progress:
                progress(stored, total)
        return outcome
    finally:
        store.close()


def _check_against_model(backend: Backend, task: Task, items: list[Item],
                         hidden_layers: tuple[int, ...], max_new_tokens: int) -> None:
    """Hidden layers the model has, and prompts that fit its context window (where known)."""
    n_layers = getattr(backend, "n_layers", None)
    if hidden_layers and n_layers is not None:
        check_hidden_layers(hidden_layers, n_layers)
    window = getattr(backend, "context_window", None)
    encode = getattr(backend, "encode", None)
    if window is None or encode is None:
        return
    for item in items:
        prompt = task.render(item, chat=backend.has_chat_template)
        chars = len(prompt) if isinstance(prompt, str) else sum(len(m["content"]) for m in prompt)
        # A prompt far too long is refused by its length alone: tokenizing megabytes
        # first would only keep the user waiting.
        check_prompt_fits(item.id, max_new_tokens, window, n_chars=chars)
        check_prompt_fits(item.id, max_new_tokens, window, n_tokens=len(encode(prompt)))


def check_backend(store: RunStore, wanted: dict[str, Any]) -> None:
    """The model setup (``Backend.config()``) must be the one that began the run."""
    stored = store.get_meta("backend")
    if stored is None:
        store.set_meta("backend", wanted)
    elif stored != wanted:
        raise ConfigMismatch(f"{store.path} was generated by another model setup:\n  "
                             + "\n  ".join(config_differences(stored, wanted)))
