"""The run loop: plan → blocks → store, resumable at any point.

Items are processed in fixed blocks of ``batch_size`` in item order, so an
item's batch neighbours (and with them every floating-point detail of its
generation) are the same on a first run and on a resume; sampling seeds come
from (run seed, item id). A block is regenerated on resume only if one of its
items is missing, and only the missing ones are stored.

:func:`execute` owns the sequence every run goes through, wherever its blocks
are generated: check the output, open the store, check the model setup, hand
the blocks to do to a :class:`BlockExecutor` and store what comes back, this
process being the one writer. :class:`LocalExecutor` generates the blocks
here; :class:`confide.runs.ray_executor.RayExecutor` on Ray workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confide.backends import (
    Backend,
    HasContextWindow,
    HasLayers,
    Tokenizes,
    item_seed,
    load_backend,
)
from confide.core.errors import ConfigMismatch, InvalidInputError, StoreError
from confide.core.options import check_hidden_layers, check_prompt_fits
from confide.core.records import Item, Record
from confide.equivalence.judges import make_judge
from confide.pipeline.answering import GenerationFailed, Pipeline
from confide.pipeline.plan import RunConfig, RunPlan, prepare
from confide.store.run_store import RunStore
from confide.tasks import Task

__all__ = ["BlockExecutor", "BlockResult", "BlockRunner", "LocalExecutor", "Progress",
           "RunOutcome", "check_against_model", "check_output", "execute"]

Progress = Callable[[int, int], None]


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
    #: what the executor changed of what was asked (a Ray worker count cut, and why);
    #: stored as the run's meta ``execution_notes``
    notes: list[str] = field(default_factory=list)


@dataclass
class BlockResult:
    """What one block of items gave: ``(position, record)`` pairs, failures, seconds."""

    start: int
    records: list[tuple[int, Record]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # item id → why it failed
    seconds: float = 0.0


class BlockRunner:
    """One backend with its pipeline: generates, scores and grades blocks of a plan's items.

    A local run holds one; each Ray worker holds its own, so every item goes
    through the same generate → record → score → grade path wherever it runs.
    """

    def __init__(self, plan: RunPlan, backend: Backend | None = None) -> None:
        config = plan.config or RunConfig()
        self.plan = plan
        self.backend = backend if backend is not None else load_backend(
            config.backend, config.model, batch_size=plan.batch_size)
        if config.ensemble is not None:  # before the scorers are planned: members feed some
            use_ensemble = getattr(self.backend, "use_ensemble", None)
            if use_ensemble is None:
                raise InvalidInputError("ensemble members score answers with the hf backend "
                                        "only", field="ensemble")
            use_ensemble(config.ensemble, greedy=config.ensemble_greedy)
        elif getattr(self.backend, "ensemble", None) is not None:
            # members a caller's earlier run attached: this run asked for none
            self.backend.use_ensemble(None)  # type: ignore[attr-defined]
        judge = make_judge(plan.judge, backend=self.backend, **plan.judge_options)
        self.pipe = Pipeline.build(self.backend, plan.scorers, judge=judge, grader=plan.grader,
                                   seed=plan.seed, reasoning_tags=plan.spec.reasoning_tags)

    def check(self, ids: set[str] | None = None) -> None:
        """Check the items (those in ``ids``; default all) against the model."""
        items = [it for it in self.plan.task.items if ids is None or it.id in ids]
        check_against_model(self.backend, self.plan, items)

    def run_block(self, start: int, skip: frozenset[str] = frozenset()) -> BlockResult:
        """Generate the whole block at ``start`` (its neighbours fix its numbers) and
        complete the records of the items not in ``skip``."""
        block = self.plan.block(start)
        began = time.perf_counter()
        results = self.pipe.generate(self.plan.task, block, self.plan.spec,
                                     [item_seed(self.plan.seed, it.id) for it in block])
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


class BlockExecutor(Protocol):
    """Where a run's blocks are generated: this process, or workers elsewhere.

    :func:`execute` calls :meth:`start` (load the model(s); check ``ids``
    against them: all items of a new run, the missing ones of a resumed run),
    reads :attr:`backends`, :attr:`skipped` and :attr:`notes`, then iterates
    :meth:`run` and stores each result; :meth:`close` always ends it. ``parallel``
    says whether blocks overlap in time (then the generation time is the loop's wall
    time, else the sum of the blocks' own). ``notes``: what :meth:`start` changed of
    what was asked (fewer workers than asked, and why), one sentence each.
    """

    parallel: bool
    notes: list[str]

    def start(self, plan: RunPlan, ids: set[str] | None) -> None: ...

    @property
    def backends(self) -> list[dict[str, Any]]: ...

    @property
    def skipped(self) -> dict[str, str]: ...

    def run(self, starts: list[int], done: set[str],
            check_backend: Callable[[dict[str, Any]], None]) -> Iterator[BlockResult]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Generates the blocks in this process, on ``backend`` (default: the plan's model)."""

    parallel = False

    def __init__(self, backend: Backend | None = None) -> None:
        self._backend = backend
        self.runner: BlockRunner | None = None
        self.notes: list[str] = []

    def start(self, plan: RunPlan, ids: set[str] | None) -> None:
        self.runner = BlockRunner(plan, self._backend)
        self.runner.check(ids)

    @property
    def backends(self) -> list[dict[str, Any]]:
        return [self._started.backend.config()]

    @property
    def skipped(self) -> dict[str, str]:
        return self._started.pipe.skipped

    @property
    def _started(self) -> BlockRunner:
        if self.runner is None:
            raise RuntimeError("LocalExecutor.start() was not called")
        return self.runner

    def run(self, starts: list[int], done: set[str],
            check_backend: Callable[[dict[str, Any]], None]) -> Iterator[BlockResult]:
        for start in starts:
            yield self._started.run_block(start, frozenset(done))

    def close(self) -> None:
        pass


def check_output(out: str | Path) -> bool:
    """Whether ``out`` holds a run already; refuse a file where a run directory belongs."""
    if Path(out).exists() and not Path(out).is_dir():
        raise StoreError(f"{out}: is a file; the run's output must be a directory")
    return (Path(out) / "run.sqlite").exists()


def execute(plan: RunPlan | RunConfig, out: str | Path, *,
            executor: BlockExecutor | None = None, backend: Backend | None = None,
            progress: Progress | None = None) -> RunOutcome:
    """Generate, score, grade and store every item of the run not stored yet.

    ``executor`` generates the blocks (default: :class:`LocalExecutor` on
    ``backend``, or on the plan's model). A new run is checked against the
    model before its directory exists, so a bad option never leaves a
    half-made run that refuses the corrected command; a finished run loads no
    model.
    """
    plan = prepare(plan) if isinstance(plan, RunConfig) else plan
    executor = executor if executor is not None else LocalExecutor(backend)
    identity = plan.identity()
    total = len(plan.task.items)
    existed = check_output(out)
    store = RunStore.open(out, identity) if existed else None
    try:
        if store is not None and (stale := store.hidden_states_note()):
            raise ConfigMismatch(f"{stale}; resuming would mix states of both kinds")
        done = store.done_ids() if store is not None else set()
        todo = {it.id for it in plan.task.items if it.id not in done}
        if progress:
            progress(total - len(todo), total)
        if store is not None and not todo:
            return RunOutcome(Path(out), plan.task, total, 0,
                              store.get_meta("skipped_scorers", {}))
        executor.start(plan, todo if existed else None)
        if store is None:
            store = RunStore.open(out, identity)

        def same_backend(wanted: dict[str, Any]) -> None:
            store.check_backend(wanted)

        for wanted in executor.backends:  # every model must be the setup that began the run
            same_backend(wanted)
        store.set_meta("skipped_scorers", executor.skipped)
        store.set_meta("execution_notes", executor.notes)  # this execution's: a resume's own
        outcome = RunOutcome(Path(out), plan.task, total, 0, executor.skipped,
                             notes=list(executor.notes))
        stored = total - len(todo)
        began = time.perf_counter()
        for result in executor.run(plan.todo_blocks(done), done, same_backend):
            outcome.generation_seconds += result.seconds
            stored += _write_block(store, outcome, result)
            done.update(record.item.id for _, record in result.records)
            if progress:
                progress(stored, total)
        if executor.parallel:  # blocks overlapped: the cluster's throughput
            outcome.generation_seconds = time.perf_counter() - began
        return outcome
    finally:
        executor.close()
        if store is not None:
            store.close()


def _write_block(store: RunStore, outcome: RunOutcome, result: BlockResult) -> int:
    """Store a block's new records and failures; return how many records were new."""
    new = 0
    for item_id, reason in result.failures.items():
        store.record_failure(item_id, reason)
        outcome.failures[item_id] = reason
    for position, record in result.records:
        if store.put(record, position):
            new += 1
            outcome.generated += 1
            outcome.generated_tokens += sum(  # a reasoning reply's trace tokens too
                g.n_tokens + (g.trace.n_tokens if g.trace is not None else 0)
                for g in (record.greedy, *record.samples))
    return new


def check_against_model(backend: Backend, plan: RunPlan, items: list[Item]) -> None:
    """Hidden layers the model has, and prompts that fit its context window (where known)."""
    spec = plan.spec
    if spec.hidden_layers and isinstance(backend, HasLayers) and backend.n_layers is not None:
        check_hidden_layers(spec.hidden_layers, backend.n_layers)
    if not (isinstance(backend, HasContextWindow) and isinstance(backend, Tokenizes)):
        return
    window = backend.context_window
    if window is None:
        return
    for item in items:
        prompt = plan.task.render(item, chat=backend.has_chat_template)
        chars = len(prompt) if isinstance(prompt, str) else sum(len(m["content"]) for m in prompt)
        # A prompt far too long is refused by its length alone: tokenizing megabytes
        # first would only keep the user waiting.
        check_prompt_fits(item.id, spec.max_new_tokens, window, n_chars=chars)
        # counted as generation reads it: a reasoning run's in thinking mode
        check_prompt_fits(item.id, spec.max_new_tokens, window, n_tokens=len(
            backend.encode(prompt, thinking=spec.reasoning_tags is not None)))
