"""``confide serve --log-run DIR``: the server's traffic stored as a resumable run.

Every reply (streamed or not; :meth:`confide.serve.replies.Replies.conclude` is the one
place each passes through) becomes one record of the run in ``DIR``, written in one
transaction: the prompt, the greedy answer and the samples with their token statistics,
the scores, and the decision. So production traffic can be labelled later
(``confide label``) and evaluated (``confide eval DIR``, ``confide report DIR``) like any
run, with no model.

What a record holds
-------------------
``item.id``
    A fresh, time-ordered id per reply (``<unix ms>-<random hex>``), the record id the
    reply names: two replies to the same question are two records, never merged.
``item.prompt``
    The request's messages (chat) or prompt text (``/v1/completions``);
    ``item.references`` is empty until the traffic is labelled.
``item.metadata["decision"]``
    ``decision`` (``"answer"``, ``"abstain"`` or None without a policy),
    ``calibrated`` (the calibrated probability or None), ``decided_on`` and
    ``decision_reason`` as in the reply's ``confide`` object.
``item.metadata["request"]``
    ``endpoint`` (``chat`` or ``text``), ``stream``, ``received_at`` (unix seconds),
    the generation settings asked (``max_tokens``, ``temperature``, ``top_p``, ``n``,
    ``stop``), the sampling ``seed`` used, ``reply_id`` (the reply's own ``id``) and
    ``prompt_sha256`` (equal for equal prompts, to group repeated questions).
``greedy``, ``samples``, ``scores``, ``score_errors``
    As in any run (choice 0: the greedy answer the scores describe).

Nothing of the HTTP request is stored beyond that: no header (``Authorization``
included), no client key, no upstream key (the stored backend identity is
:meth:`~confide.backends.Backend.config`, which holds none).

The run's identity
------------------
The store's configuration names the served setup: ``source: "serve"``, the served
model name, the backend, the scorers, the seed and the summary samples; the meta
``backend`` holds the backend's identity and ``skipped_scorers`` the scorers the
backend cannot feed. Records are appended at positions continuing from those stored,
so a restarted server on the same ``DIR`` appends to the same run; a restart with
another model or other scorers is refused at startup
(:class:`~confide.core.errors.ConfigMismatch`, naming what differs).

Labelling what a client saw
---------------------------
Each reply names its record: ``confide.record_id`` in the reply (in a stream, in the
last chunk) and the ``X-Confide-Record-Id`` response header. ``confide label DIR
LABELS.jsonl`` takes those ids (and the reply's own ``id``, ``chatcmpl-...``, which is
kept as ``metadata["request"]["reply_id"]``). A record is stored once its reply is
complete: a stream that fails or is abandoned leaves none, and a reply whose record
was dropped (below) says ``record_id: null``.

Logging never fails a request, and never loses a reply silently
-----------------------------------------------------------------
Writes go through a bounded queue (:data:`MAX_PENDING` records) to one
writer thread, off the event loop, in the order the replies were made. A reply waits
for its own write at most :attr:`TrafficLog.wait` seconds (so a reply received by a
client is, in normal operation, already stored: a server killed with SIGKILL loses no
received reply), then goes out whatever happened; while the writer is behind (a wait
ran out), replies do not wait for it at all.

A store locked by another process is waited for as long as the server lives: each
try waits :attr:`TrafficLog.busy_timeout` seconds for the lock, then the writer pauses
(0.05 s, doubling up to :data:`MAX_BACKOFF`) and tries the same record again, and
the records behind it wait in the queue. Each record's position is given inside its
write transaction (:meth:`~confide.store.run_store.RunStore.put` with no position),
so two servers logging into one ``DIR`` never give two records one position.

Only two things lose a reply's record, and both are counted and shown on ``/health``
as ``"log_run": {"path", "stored", "failed", "dropped", "pending", "retries",
"waiting_for_lock", "last_error"}`` and logged as warnings: a reply that finds the
queue full is ``dropped``; a write that fails for another reason than a lock (a full
disk, a directory that cannot be written, a run replaced by another setup's) is
``failed`` (the store is opened again at the next write). A store that cannot be
opened at startup (an unwritable directory) does not stop the server either. At
shutdown the queue is drained: the writes still waiting are made, a locked store
waited for up to :attr:`TrafficLog.drain_timeout` seconds (what is left then is
counted as dropped and logged as an error).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confide.core.errors import ConfigMismatch, StoreDamaged, StoreError
from confide.core.records import Item, Record
from confide.pipeline.plan import QUESTIONS_GRADER
from confide.store.run_store import RunStore, StoreBusy

__all__ = ["TrafficLog", "new_record_id", "traffic_identity"]

log = logging.getLogger(__name__)

_DECISION_KEYS = ("decision", "calibrated", "decided_on", "decision_reason")
#: Seconds a reply waits for its own write (then it goes out; the write goes on).
WAIT = 1.0
#: Seconds one try of a write waits for a lock another process holds (then the writer
#: pauses and tries again).
BUSY_TIMEOUT = 5.0
#: The longest pause, in seconds, between two tries of a write on a locked store.
MAX_BACKOFF = 2.0
#: Seconds a shutdown waits for a locked store to store the replies still queued.
DRAIN_TIMEOUT = 60.0
#: Records the queue holds (a reply that finds it full is not stored, and counted).
MAX_PENDING = 1000


def traffic_identity(*, model: str, backend: str, scorers: tuple[str, ...] | list[str],
                     seed: int = 0, summary_samples: int = 0,
                     reasoning_tags: tuple[str, str] | None = None) -> dict[str, Any]:
    """The stored configuration of a server's traffic run (a restart must match it).

    ``task`` and ``grader`` are there for the readers of runs (``confide eval``, the
    report): the traffic is open questions, graded with ``contains`` once labelled.
    ``reasoning_tags`` is stored only when set (a server without reasoning keeps the
    identity it always had).

    >>> traffic_identity(model="m", backend="openai", scorers=["msp"])["task"]
    'serve'
    """
    identity: dict[str, Any] = {
        "source": "serve", "task": "serve", "model": model, "backend": backend,
        "scorers": list(scorers), "grader": QUESTIONS_GRADER, "seed": seed,
        "summary_samples": summary_samples}
    if reasoning_tags is not None:
        identity["reasoning_tags"] = list(reasoning_tags)
    return identity


def new_record_id() -> str:
    """A reply's record id: milliseconds since the epoch, then 48 random bits (time-ordered
    and unique across servers)."""
    return f"{time.time_ns() // 1_000_000:013d}-{secrets.token_hex(6)}"


@dataclass
class _Write:
    """One queued record and the future its reply may wait on (True: stored)."""

    record: Record
    done: concurrent.futures.Future[bool]


class TrafficLog:
    """The run a server logs its replies into. :meth:`open` it before serving,
    :meth:`start` it once the scorers are known, :meth:`close` it at shutdown."""

    def __init__(self, path: Path, identity: dict[str, Any], backend: dict[str, Any], *,
                 wait: float | None = None, busy_timeout: float | None = None,
                 max_pending: int | None = None, drain_timeout: float | None = None) -> None:
        self.path = path
        self.identity = identity
        self.backend = backend
        self.wait = WAIT if wait is None else wait
        self.busy_timeout = BUSY_TIMEOUT if busy_timeout is None else busy_timeout
        self.max_pending = MAX_PENDING if max_pending is None else max_pending
        self.drain_timeout = DRAIN_TIMEOUT if drain_timeout is None else drain_timeout
        self.stored = 0
        self.failed = 0
        self.dropped = 0
        self.retries = 0
        self.last_error: str | None = None
        self.skipped: dict[str, str] = {}
        self._store: RunStore | None = None  # owned by the writer thread
        self._pending = 0
        self._behind = False
        self._overflowing = False  # a drop was logged; the next is not, until one is queued
        self._locked_since: float | None = None
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._drain_by: float | None = None  # set by close: the writer's last moment

    @classmethod
    def open(cls, path: str | Path, *, identity: dict[str, Any], backend: dict[str, Any],
             **options: Any) -> TrafficLog:
        """Check ``path`` against the served setup now, before the server starts.

        Raises :class:`~confide.core.errors.ConfigMismatch` when ``path`` holds another run
        (another model, other scorers) and :class:`~confide.core.errors.StoreDamaged` when
        its database is damaged. Any other failure to open it (an unwritable
        directory, a locked store) is logged: the server starts, and the writer tries again.
        """
        traffic = cls(Path(path), identity, backend, **options)
        try:
            with RunStore.open(traffic.path, identity, timeout=traffic.busy_timeout) as store:
                store.check_backend(backend)
        except (ConfigMismatch, StoreDamaged) as exc:
            raise type(exc)(f"--log-run {path}: {exc}") from exc
        except (StoreError, OSError) as exc:
            traffic.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("--log-run %s cannot be written now (%s); the server answers anyway "
                        "and tries again at each reply", path, traffic.last_error)
        return traffic

    def start(self, skipped: dict[str, str]) -> None:
        """Start the writer; ``skipped``: the scorers the backend cannot feed."""
        self.skipped = dict(skipped)
        self._drain_by = None
        self._writer = threading.Thread(target=self._run, name="confide-log", daemon=True)
        self._writer.start()

    def close(self) -> None:
        """Store the records still queued (a locked store waited for at most
        :attr:`drain_timeout` seconds), then close the store. Blocks: call it off the
        event loop."""
        if self._writer is None:
            return
        with self._lock:
            pending = self._pending
            self._drain_by = time.monotonic() + self.drain_timeout
            self._queue.put(None)  # after every record queued: the writer stores them first
        if pending:
            log.info("--log-run %s: storing the %d queued replies before stopping (waiting "
                     "at most %g s for a locked store)", self.path, pending, self.drain_timeout)
        self._writer.join()
        self._writer = None

    def to_dict(self) -> dict[str, Any]:
        """What ``/health`` shows under ``log_run``."""
        with self._lock:
            return {"path": str(self.path), "stored": self.stored, "failed": self.failed,
                    "dropped": self.dropped, "pending": self._pending,
                    "retries": self.retries,
                    "waiting_for_lock": self._locked_since is not None,
                    "last_error": self.last_error}

    # -- the request side (event loop) -----------------------------------------------

    async def store(self, record: Record, info: dict[str, Any], *, record_id: str,
                    prompt: Any, request: dict[str, Any]) -> bool:
        """Queue one reply's record as ``record_id``; never raises, waits at most
        :attr:`wait` seconds. False when the record was not queued (the queue is full, or
        the log is not running): counted as dropped, and the reply should not name it.

        ``record``: choice 0's scored record; ``info``: the reply's ``confide`` object
        (its decision is kept); ``prompt``: the request's messages or text;
        ``request``: what the request asked (stored under ``metadata["request"]``).
        """
        try:
            write = _Write(self._entry(record, info, record_id, prompt, request),
                           concurrent.futures.Future())
            with self._lock:
                if self._writer is None or self._drain_by is not None:
                    why = "the log is not running (the server is starting or stopping)"
                elif self._pending >= self.max_pending:
                    why = (f"the queue is full ({self.max_pending} records wait for the "
                           "store)")
                else:  # queued under the lock: never after close's stop signal
                    why = None
                    self._pending += 1
                    self._overflowing = False
                    behind = self._behind
                    self._queue.put(write)
            if why is not None:
                self._drop(1, why)
                return False
        except Exception as exc:  # noqa: BLE001 - logging must never fail a reply
            self._fail(f"{type(exc).__name__}: {exc}")
            return False
        if behind:
            return True
        done, _ = await asyncio.wait([asyncio.wrap_future(write.done)], timeout=self.wait)
        if not done:
            with self._lock:
                self._behind = True
            log.warning("--log-run %s: a write took over %g s; replies no longer wait for "
                        "the log until it catches up", self.path, self.wait)
        return True

    def _entry(self, record: Record, info: dict[str, Any], record_id: str, prompt: Any,
               request: dict[str, Any]) -> Record:
        metadata = {"decision": {k: info.get(k) for k in _DECISION_KEYS},
                    "request": {"received_at": time.time(), **request,
                                "prompt_sha256": record.item.id}}
        item = Item(id=record_id, prompt=prompt, references=[], metadata=metadata)
        return replace(record, item=item, grades={})

    # -- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            if write is None:
                break
            stored = False
            try:
                stored = self._write(write.record)
            finally:
                write.done.set_result(stored)
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._behind = False
        self._close_store()

    def _write(self, record: Record) -> bool:
        """Store ``record``, trying again while the store is locked; True when stored."""
        pause = 0.05
        while True:
            try:
                store = self._store or self._open_store()
                store.put(record, None)  # its position is given inside the write
            except StoreBusy as exc:
                if not self._wait_for_lock(exc, pause):
                    return False
                pause = min(2 * pause, MAX_BACKOFF)
                continue
            except Exception as exc:  # noqa: BLE001 - counted and shown on /health
                self._fail(f"{type(exc).__name__}: {exc}")
                self._close_store()  # open again at the next write (disk freed, ...)
                return False
            with self._lock:
                self.stored += 1  # False from put: stored by an earlier try, kept once
                since, self._locked_since = self._locked_since, None
            if since is not None:
                log.warning("--log-run %s: the store is free again after %.1f s; the queued "
                            "replies are being stored", self.path, time.monotonic() - since)
            return True

    def _wait_for_lock(self, exc: StoreBusy, pause: float) -> bool:
        """Pause before the next try; False when the shutdown's wait has run out (the
        record is then counted as dropped)."""
        now = time.monotonic()
        with self._lock:
            self.retries += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            first = self._locked_since is None
            if first:
                self._locked_since = now
            drain_by, pending = self._drain_by, self._pending
        if drain_by is not None and now >= drain_by:
            self._drop(pending, f"the store stayed locked for the {self.drain_timeout:g} s "
                       "the shutdown waits", level=logging.ERROR)
            self._abandon_queue()
            return False
        if first:
            log.warning("--log-run %s is locked by another process (%s); the writer waits "
                        "and tries again, replies are kept in the queue", self.path, exc)
        time.sleep(pause if drain_by is None else max(0.0, min(pause, drain_by - now)))
        return True

    def _abandon_queue(self) -> None:
        """At shutdown past the wait: release the records still queued (already counted)."""
        while True:
            try:
                write = self._queue.get_nowait()
            except queue.Empty:
                return
            if write is None:
                self._queue.put(None)  # the writer's own stop signal, for its loop
                return
            write.done.set_result(False)
            with self._lock:
                self._pending -= 1

    def _open_store(self) -> RunStore:
        store = RunStore.open(self.path, self.identity, timeout=self.busy_timeout)
        try:
            store.check_backend(self.backend)
            if store.get_meta("skipped_scorers") != self.skipped:
                store.set_meta("skipped_scorers", self.skipped)
        except BaseException:
            store.close()
            raise
        self._store = store
        return store

    def _close_store(self) -> None:
        if self._store is not None:
            try:
                self._store.close()
            finally:
                self._store = None

    def _fail(self, why: str) -> None:
        with self._lock:
            self.failed += 1
            self.last_error = why
        log.warning("--log-run %s: a reply was not stored: %s", self.path, why)

    def _drop(self, n: int, why: str, *, level: int = logging.WARNING) -> None:
        with self._lock:
            self.dropped += n
            self.last_error = f"dropped: {why}"
            quiet = self._overflowing and level == logging.WARNING
            self._overflowing = True
            total = self.dropped
        if not quiet:  # once per overflow: the count on /health goes on
            log.log(level, "--log-run %s: %d repl%s not stored: %s (%d dropped so far; "
                    "see /health)", self.path, n, "y" if n == 1 else "ies", why, total)
