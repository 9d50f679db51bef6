"""Runs spread over a Ray cluster: fixed shards, one model per worker, one writer.

``confide run --ray local|ADDRESS --workers N`` (or
``runner.execute(plan, out, executor=RayExecutor(...))``) starts ``N`` Ray
actors, each holding its own backend and pipeline (a
:class:`~confide.runs.execution.BlockRunner`: the model is loaded once per actor). The
items are cut into the run's fixed blocks (``batch_size`` items in item order,
as in a local run) and the blocks into contiguous *shards*; an idle worker takes
the next shard and sends back each block's scored, graded records as soon as
the block is done. The driver is the only process that writes the run's SQLite
store, record by record, keyed by item id, so every record is stored exactly
once:

- a worker that dies (its process killed, its node lost) loses only the blocks
  of its shard not yet sent; those are queued again as a shard of their own and
  taken by another worker (a fresh one replaces the dead), and records already
  stored are skipped;
- a driver that dies leaves a store like a killed local run: the same command
  resumes it, and so does a local run (Ray is not part of the run's identity).

Records equal those of a single-process run with the same seed (timing fields
aside) because an item's numbers depend only on (run seed, item id) and its
block, never on the worker, provided each process decodes alike: the same
dtype (stored with the run and checked) and the same number of threads, since
float sums split over more threads round differently (1 against 2 threads
moved SmolLM2's log-probabilities by up to 1.3e-5). ``threads_per_worker``
sets the workers'; ``OMP_NUM_THREADS`` sets a local run's.

Ray is imported only here and only when a run asks for it (extra ``ray``).
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confide.core.errors import BackendError, ConfideError, InvalidInputError
from confide.core.options import check_distribution
from confide.pipeline.plan import RunPlan
from confide.runs.execution import BlockResult, BlockRunner

__all__ = ["SHARDS_PER_WORKER", "RayExecutor", "ShardWorker", "local_cores", "shard_blocks",
           "worker_count"]

# Shards per worker: enough to even out uneven workers, few enough that a shard is
# many blocks long (a dead worker's loss is at most the unsent rest of one shard).
SHARDS_PER_WORKER = 4
# A shard whose workers died this many times in a row ends the run (stored work is kept).
MAX_ATTEMPTS = 3
# Environment variables the driver passes on to its workers (cache, dtype, offline mode).
_PASSED_ENV = ("CONFIDE_", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def shard_blocks(blocks: list[int], workers: int, size: int | None = None) -> list[list[int]]:
    """Cut the starts of the blocks to do into contiguous shards of ``size`` blocks
    (default: about :data:`SHARDS_PER_WORKER` shards per worker).

    >>> shard_blocks([0, 4, 8, 12, 16], 2)
    [[0], [4], [8], [12], [16]]
    >>> shard_blocks([0, 4, 8, 12, 16], 1, size=2)
    [[0, 4], [8, 12], [16]]
    """
    if size is None:
        size = max(1, math.ceil(len(blocks) / (workers * SHARDS_PER_WORKER)))
    return [blocks[i:i + size] for i in range(0, len(blocks), size)]


def worker_count(requested: int, *, blocks: int, batch_size: int,
                 cores: int | None = None) -> tuple[int, str | None]:
    """The Ray workers to start, and a note saying why when that is fewer than ``requested``.

    Never more than the ``blocks`` to generate (a worker without a block would only
    load the model), nor, on a Ray instance started on this machine (``cores``
    given), than its CPU cores (each worker loads its own model and decodes on
    them; more would only share the cores).

    >>> worker_count(4, blocks=10, batch_size=8, cores=8)
    (4, None)
    >>> count, note = worker_count(100, blocks=2, batch_size=8, cores=16)
    >>> count, note.rsplit(": ", 1)[1]
    (2, 'the run has 2 block(s) of 8 items to generate; each worker loads its own model')
    """
    limits = [(max(1, blocks), f"the run has {blocks} block(s) of {batch_size} items to "
                               "generate")]
    if cores is not None:
        limits.append((max(1, cores), f"this machine has {cores} CPU core(s)"))
    count = min([requested, *(n for n, _ in limits)])
    if count == requested:
        return count, None
    why = " and ".join(text for n, text in limits if n == count)
    return count, (f"Ray workers: {count} started, not the {requested} asked (--workers): "
                   f"{why}; each worker loads its own model")


def local_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class ShardWorker:
    """What each Ray actor holds: one :class:`~confide.runs.execution.BlockRunner`.

    A plain class: :class:`RayExecutor` makes it a Ray actor, so this module
    imports without Ray.
    """

    def __init__(self, plan: RunPlan, threads: int | None, env: dict[str, str]) -> None:
        os.environ.update(env)
        if threads is not None:
            try:
                import torch
            except ImportError:  # a backend without torch (openai) has no threads to set
                pass
            else:
                torch.set_num_threads(threads)
        self.runner = BlockRunner(plan)

    def describe(self) -> dict[str, Any]:
        """The worker's model setup and the scorers its backend cannot feed."""
        return {"backend": self.runner.backend.config(),
                "skipped": self.runner.pipe.skipped}

    def check(self, ids: set[str] | None) -> None:
        self.runner.check(ids)

    def run_block(self, start: int, skip: frozenset[str]) -> BlockResult:
        return self.runner.run_block(start, skip)


class RayExecutor:
    """Generates a run's blocks on ``workers`` Ray actors
    (a :class:`~confide.runs.execution.BlockExecutor`).

    Parameters
    ----------
    address : ``"local"`` (start Ray on this machine), ``"auto"`` or a cluster address;
        a Ray connection already open in this process is used as it is.
    workers : Ray actors, each loading the model once (default 2); fewer when the run
        has fewer blocks to generate or, with ``"local"``, this machine fewer CPU cores
        (:func:`worker_count`; :attr:`notes` then says so).
    threads_per_worker : decoding threads of each worker (default: the cluster's CPUs
        divided among the workers, at least 1).
    shard_size : blocks per shard (default: about :data:`SHARDS_PER_WORKER` shards per worker).

    The run's generation time is the wall time of the distributed loop, so
    tokens per second read as the cluster's throughput.
    """

    parallel = True

    def __init__(self, address: str = "local", *, workers: int | None = None,
                 threads_per_worker: int | None = None, shard_size: int | None = None) -> None:
        check_distribution(address, workers, threads_per_worker)
        self.address, self.workers = address, workers or 2
        self.threads, self.shard_size = threads_per_worker, shard_size
        self._ray: Any = None
        self._started = False
        self._pool: _Pool | None = None
        self._plan: RunPlan | None = None
        #: what :meth:`start` changed of what was asked (a worker count cut, and why)
        self.notes: list[str] = []

    def start(self, plan: RunPlan, ids: set[str] | None) -> None:
        config = plan.config
        if config is not None and config.backend == "openai":
            raise InvalidInputError(
                "Ray workers load their own model by name (hf, vllm); the openai backend "
                "already spreads its requests over the server (--concurrency)", field="ray")
        done = set() if ids is None else {it.id for it in plan.task.items if it.id not in ids}
        self.workers, note = worker_count(
            self.workers, blocks=len(plan.todo_blocks(done)), batch_size=plan.batch_size,
            cores=local_cores() if self.address == "local" else None)
        self.notes = [note] if note else []
        self._ray = ray = _import_ray()
        self._started = _connect(ray, self.address)
        self._plan = plan
        with self._user_errors():
            self._pool = _Pool(ray, plan, self.workers, self.threads)
            ray.get(self._pool.slots[0].actor.check.remote(ids))

    @property
    def backends(self) -> list[dict[str, Any]]:
        return [info["backend"] for info in self._live.infos]

    @property
    def skipped(self) -> dict[str, str]:
        return dict(self._live.infos[0]["skipped"])

    @property
    def _live(self) -> _Pool:
        if self._pool is None:
            raise RuntimeError("RayExecutor.start() was not called")
        return self._pool

    def run(self, starts: list[int], done: set[str],
            check_backend: Callable[[dict[str, Any]], None]) -> Iterator[BlockResult]:
        """Hand out shards, yield what comes back, retry what a dead worker lost."""
        ray, pool, plan = self._ray, self._live, self._plan
        assert plan is not None
        queue = deque(_Shard(s) for s in shard_blocks(starts, len(pool.slots), self.shard_size))
        with self._user_errors():
            while queue or any(slot.pending for slot in pool.slots):
                for slot in pool.slots:  # idle workers take the next shard, all its blocks
                    if slot.starting is None and not slot.pending and queue:
                        slot.shard = queue.popleft()
                        slot.pending = {slot.actor.run_block.remote(start, frozenset(
                            it.id for it in plan.block(start) if it.id in done)): start
                            for start in slot.shard.blocks}
                owner = {ref: slot for slot in pool.slots
                         for ref in [*slot.pending, *([slot.starting] if slot.starting else [])]}
                ready, _ = ray.wait(list(owner), num_returns=1)
                slot = owner[ready[0]]
                if ready[0] == slot.starting:  # a replacement worker has loaded its model
                    check_backend(pool.started(slot))
                    continue
                try:
                    result = ray.get(ready[0])
                except ray.exceptions.RayActorError as exc:
                    queue.appendleft(_lost_shard(slot, exc))
                    pool.replace(slot)
                    continue
                start = slot.pending.pop(ready[0])
                if slot.shard is not None:
                    slot.shard.blocks.remove(start)
                    slot.shard.attempts = 0
                yield result

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._started:
            self._ray.shutdown()
            self._started = False

    @contextmanager
    def _user_errors(self) -> Iterator[None]:
        """A user's error raised in a worker is raised here as itself."""
        try:
            yield
        except self._ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ConfideError):
                raise exc.cause from None
            raise


@dataclass
class _Shard:
    blocks: list[int]
    attempts: int = 0


@dataclass
class _Slot:
    """A live worker, the shard it is doing and the calls it has not answered yet."""

    actor: Any
    shard: _Shard | None = None
    pending: dict[Any, int] = field(default_factory=dict)  # object ref → block start
    starting: Any = None  # while a replacement loads its model: the ref of its description


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise InvalidInputError("--ray needs Ray: pip install 'confide[ray]'",
                                field="ray") from exc
    return ray


def _connect(ray: Any, address: str) -> bool:
    """Join (or start) Ray; True when this call started the connection (and must end it)."""
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if address == "local":
        # The cores worker_count allowed for: a worker each.
        ray.init(num_cpus=local_cores(), **quiet)
    else:
        ray.init(address=address, **quiet)
    return True


def _resources(ray: Any, workers: int, threads: int | None) -> tuple[float, float, int]:
    """Ray CPUs and GPUs reserved per worker, and its decoding threads."""
    total = ray.cluster_resources()
    cpus = float(total.get("CPU", 1)) / workers
    gpus = float(total.get("GPU", 0))
    per_gpu = float(math.floor(gpus / workers)) if gpus >= workers else 0.0
    threads = threads or max(1, int(cpus))
    return min(cpus, float(threads)), per_gpu, threads


def _lost_shard(slot: _Slot, exc: Exception) -> _Shard:
    """The unsent blocks of a dead worker's shard, as a shard to retry."""
    shard = slot.shard or _Shard([])
    shard.attempts += 1
    if shard.attempts >= MAX_ATTEMPTS:
        raise BackendError(f"the blocks at items {shard.blocks} were lost with their worker "
                           f"{MAX_ATTEMPTS} times in a row (last: {exc}); what was stored is "
                           "kept, run the same command again to resume") from exc
    slot.pending.clear()
    slot.shard = None
    return shard


class _Pool:
    """The Ray actors of a run; a dead one is replaced by a fresh one."""

    def __init__(self, ray: Any, plan: RunPlan, workers: int, threads: int | None) -> None:
        self.ray = ray
        cpus, gpus, threads = _resources(ray, workers, threads)
        env = {k: v for k, v in os.environ.items() if k.startswith(_PASSED_ENV)}
        self._actor_class = ray.remote(ShardWorker).options(num_cpus=cpus, num_gpus=gpus,
                                                              max_restarts=0)
        self._args = (ray.put(plan), threads, env)
        self.slots: list[_Slot] = []
        self.infos: list[dict[str, Any]] = []
        # The first worker loads alone: a setting a backend measures once per machine at
        # load and remembers (hf's CPU dtype) is then read, not raced, by the rest.
        actors = [self._actor_class.remote(*self._args)]
        try:  # wait for every model to load; an error loading it is the user's to see
            self.infos = ray.get([actors[0].describe.remote()])
            actors += [self._actor_class.remote(*self._args) for _ in range(workers - 1)]
            self.infos += ray.get([a.describe.remote() for a in actors[1:]])
        except ray.exceptions.RayActorError as exc:
            for actor in actors:
                ray.kill(actor)
            raise BackendError(f"a Ray worker could not start: {exc}") from exc
        self.slots = [_Slot(a) for a in actors]

    def replace(self, dead: _Slot) -> None:
        """Swap a dead worker for a fresh one; it takes work once it has loaded the model
        (:meth:`started`), and the other workers go on meanwhile."""
        dead.actor = self._actor_class.remote(*self._args)
        dead.starting = dead.actor.describe.remote()

    def started(self, slot: _Slot) -> dict[str, Any]:
        """A replacement's model setup, once loaded; raises if it could not start."""
        try:
            info: dict[str, Any] = self.ray.get(slot.starting)
        except self.ray.exceptions.RayActorError as exc:
            raise BackendError(f"a Ray worker could not start: {exc}") from exc
        slot.starting = None
        self.infos.append(info)
        return info["backend"]

    def close(self) -> None:
        for slot in self.slots:
            self.ray.kill(slot.actor)
