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
    A fresh, time-ordered id per reply (``<unix ms>-<random hex>``): two replies to
    the same question are two records, never merged.
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
    ``stop``), the sampling ``seed`` used, and ``prompt_sha256`` (equal for equal
    prompts, to group repeated questions).
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

Logging never fails a request
-----------------------------
Writes run on one writer thread, off the event loop. A reply waits for its own
write at most :attr:`TrafficLog.wait` seconds (so a reply received by a client is, in
normal operation, already stored: a server killed with SIGKILL loses no received
reply), then goes out whatever happened. A store that is locked by another process
(for longer than :attr:`TrafficLog.busy_timeout`), a full disk, or a directory that
cannot be written makes the write fail, never the request: failures are counted and
the last one is shown on ``/health`` as ``"log_run": {"path", "stored", "failed",
"pending", "last_error"}``. While the writer is behind (a wait ran out), replies do not
wait for it at all. A store that cannot be opened at startup (an unwritable
directory) does not stop the server either: each write tries to open it again. A
record whose write failed is dropped (the client got its reply): failures are lost
traffic, which is why they are counted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from confide.core.errors import ConfigMismatch, StoreDamaged, StoreError
from confide.core.records import Item, Record
from confide.pipeline.plan import QUESTIONS_GRADER
from confide.store.run_store import RunStore

__all__ = ["TrafficLog", "traffic_identity"]

log = logging.getLogger(__name__)

_DECISION_KEYS = ("decision", "calibrated", "decided_on", "decision_reason")
#: Seconds a reply waits for its own write (then it goes out; the write goes on).
WAIT = 1.0
#: Seconds a write waits for a lock another process holds on the store (then it fails).
BUSY_TIMEOUT = 5.0


def traffic_identity(*, model: str, backend: str, scorers: tuple[str, ...] | list[str],
                     seed: int = 0, summary_samples: int = 0) -> dict[str, Any]:
    """The stored configuration of a server's traffic run (a restart must match it).

    ``task`` and ``grader`` are there for the readers of runs (``confide eval``, the
    report): the traffic is open questions, graded with ``contains`` once labelled.

    >>> traffic_identity(model="m", backend="openai", scorers=["msp"])["task"]
    'serve'
    """
    return {"source": "serve", "task": "serve", "model": model, "backend": backend,
            "scorers": list(scorers), "grader": QUESTIONS_GRADER, "seed": seed,
            "summary_samples": summary_samples}


def _reply_id() -> str:
    """Time-ordered and unique: milliseconds since the epoch, then 48 random bits."""
    return f"{time.time_ns() // 1_000_000:013d}-{secrets.token_hex(6)}"


class TrafficLog:
    """The run a server logs its replies into. :meth:`open` it before serving,
    :meth:`start` it once the scorers are known, :meth:`close` it at shutdown."""

    def __init__(self, path: Path, identity: dict[str, Any], backend: dict[str, Any], *,
                 wait: float | None = None, busy_timeout: float | None = None,
                 max_pending: int = 1000) -> None:
        self.path = path
        self.identity = identity
        self.backend = backend
        self.wait = WAIT if wait is None else wait
        self.busy_timeout = BUSY_TIMEOUT if busy_timeout is None else busy_timeout
        self.max_pending = max_pending
        self.stored = 0
        self.failed = 0
        self.last_error: str | None = None
        self.skipped: dict[str, str] = {}
        self._store: Any = None  # RunStore, owned by the writer thread
        self._next = 0
        self._pending = 0
        self._behind = False
        self._lock = threading.Lock()
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def open(cls, path: str | Path, *, identity: dict[str, Any], backend: dict[str, Any],
             **options: Any) -> TrafficLog:
        """Check ``path`` against the served setup now, before the server starts.

        Raises :class:`~confide.core.errors.ConfigMismatch` when ``path`` holds another run
        (another model, other scorers) and :class:`~confide.core.errors.StoreDamaged` when
        its database is damaged. Any other failure to open it (an unwritable
        directory, a locked store) is logged and counted: the server starts, and each
        write tries again.
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
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="confide-log")

    def close(self) -> None:
        """Finish the writes already asked for, then close the store."""
        if self._writer is None:
            return
        self._writer.submit(self._close_store)
        self._writer.shutdown(wait=True)
        self._writer = None

    def to_dict(self) -> dict[str, Any]:
        """What ``/health`` shows under ``log_run``."""
        return {"path": str(self.path), "stored": self.stored, "failed": self.failed,
                "pending": self._pending, "last_error": self.last_error}

    # -- the request side (event loop) -----------------------------------------------

    async def store(self, record: Record, info: dict[str, Any], *, prompt: Any,
                    request: dict[str, Any]) -> None:
        """Store one reply's record; never raises, waits at most :attr:`wait` seconds.

        ``record``: choice 0's scored record; ``info``: the reply's ``confide`` object
        (its decision is kept); ``prompt``: the request's messages or text;
        ``request``: what the request asked (stored under ``metadata["request"]``).
        """
        try:
            entry = self._entry(record, info, prompt, request)
            with self._lock:
                if self._writer is None or self._pending >= self.max_pending:
                    self._fail("not stored: " + ("the log is not started" if self._writer
                               is None else f"{self._pending} writes are already waiting"))
                    return
                self._pending += 1
                behind = self._behind
            future = self._writer.submit(self._write, entry)
        except Exception as exc:  # noqa: BLE001 - logging must never fail a reply
            self._fail(f"{type(exc).__name__}: {exc}")
            return
        if behind:
            return
        done, _ = await asyncio.wait([asyncio.wrap_future(future)], timeout=self.wait)
        if not done:
            with self._lock:
                self._behind = True
            log.warning("--log-run %s: a write took over %g s; replies no longer wait for "
                        "the log until it catches up", self.path, self.wait)

    def _entry(self, record: Record, info: dict[str, Any], prompt: Any,
               request: dict[str, Any]) -> Record:
        metadata = {"decision": {k: info.get(k) for k in _DECISION_KEYS},
                    "request": {"received_at": time.time(), **request,
                                "prompt_sha256": record.item.id}}
        item = Item(id=_reply_id(), prompt=prompt, references=[], metadata=metadata)
        return replace(record, item=item, grades={})

    # -- the writer thread -----------------------------------------------------------------

    def _write(self, record: Record) -> None:
        try:
            if self._store is None:
                self._open_store()
            if self._store.put(record, self._next):
                self._next += 1
                self.stored += 1
        except Exception as exc:  # noqa: BLE001 - counted and shown on /health
            self._fail(f"{type(exc).__name__}: {exc}")
            if "busy" not in str(exc):  # open again at the next write (disk freed, ...)
                self._close_store()
        finally:
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._behind = False

    def _open_store(self) -> None:
        store = RunStore.open(self.path, self.identity, timeout=self.busy_timeout)
        try:
            store.check_backend(self.backend)
            if store.get_meta("skipped_scorers") != self.skipped:
                store.set_meta("skipped_scorers", self.skipped)
            self._next = len(store)  # positions continue from what is stored
        except BaseException:
            store.close()
            raise
        self._store = store

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
