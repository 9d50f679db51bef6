"""The model behind ``confide serve``: any backend, called without blocking the server.

An HTTP backend with ``agenerate_one`` (``openai``) is awaited directly and its
requests run concurrently. A local backend (``hf``) runs on one worker thread;
requests that arrive while it is busy and ask for the same generation settings
are generated together as one batch, which is where concurrent clients gain
throughput. Every call has a deadline: past it the caller gets
:class:`~confide.core.errors.BackendTimeout` (the server answers 504), never a hang.

A call with ``on_token`` (a streamed reply, or early abstention) is generated
alone, never batched with others: its callback may end rows early, and a
stream should not wait for its neighbours.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from dataclasses import dataclass, field
from typing import cast

from confide.backends.base import (
    Backend,
    GeneratesAsync,
    GenerationResult,
    GenerationSpec,
    Prompt,
    Streams,
    TokenCallback,
)
from confide.core.errors import BackendError, BackendTimeout

__all__ = ["Upstream"]


@dataclass
class _Job:
    prompt: Prompt
    spec: GenerationSpec
    seed: int
    future: asyncio.Future[GenerationResult] = field(repr=False)
    on_token: TokenCallback | None = field(default=None, repr=False)


class Upstream:
    """Wraps a backend for the server. Call :meth:`start` and :meth:`stop` inside the loop."""

    def __init__(self, backend: Backend, *, timeout: float = 120.0, max_batch: int = 1) -> None:
        self.backend = backend
        self.timeout = timeout
        self.max_batch = max_batch
        self._is_async = isinstance(backend, GeneratesAsync)
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def capabilities(self) -> frozenset[str]:
        return self.backend.capabilities

    @property
    def can_stream(self) -> bool:
        return isinstance(self.backend, Streams) and bool(self.backend.streaming)

    async def start(self) -> None:
        if self._is_async:
            await self.backend.aopen()  # type: ignore[attr-defined]
            await self.backend.aprobe()  # type: ignore[attr-defined]
            return
        self._queue = asyncio.Queue()
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="confide-model")
        self._worker = asyncio.create_task(self._work())

    async def stop(self) -> None:
        if self._is_async:
            await self.backend.aclose()  # type: ignore[attr-defined]
            return
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)

    async def generate(self, prompt: Prompt, spec: GenerationSpec, seed: int, *,
                       on_token: TokenCallback | None = None) -> GenerationResult:
        """Greedy answer and samples for one prompt; raises BackendError / BackendTimeout.

        ``on_token`` (backends that stream) is called per token, on the model's
        thread for a local model."""
        options = {} if on_token is None else {"on_token": on_token}
        try:
            if self._is_async:
                coro = self.backend.agenerate_one(  # type: ignore[attr-defined]
                    prompt, spec, seed, **options)
                return await asyncio.wait_for(coro, self.timeout)
            if self._queue is None:
                raise BackendError("the upstream model is not started")
            future: asyncio.Future[GenerationResult] = asyncio.get_running_loop().create_future()
            await self._queue.put(_Job(prompt, spec, seed, future, on_token))
            return await asyncio.wait_for(future, self.timeout)
        except asyncio.TimeoutError as exc:
            raise BackendTimeout(f"the model gave no answer within {self.timeout:g} s") from exc

    async def _work(self) -> None:
        queue, thread = self._queue, self._thread
        if queue is None or thread is None:  # start() sets both before creating this task
            return
        loop = asyncio.get_running_loop()
        waiting: list[_Job] = []
        while True:
            if not waiting:
                waiting.append(await queue.get())
            while not queue.empty():
                waiting.append(queue.get_nowait())
            waiting = [job for job in waiting if not job.future.done()]  # callers that gave up
            if not waiting:
                continue
            spec, hook = waiting[0].spec, waiting[0].on_token
            batch = [waiting[0]] if hook is not None else [
                job for job in waiting if job.spec == spec and job.on_token is None
            ][:self.max_batch]
            waiting = [job for job in waiting if job not in batch]
            # a hook comes only from a caller that checked can_stream: the backend Streams
            call = self.backend.generate if hook is None else functools.partial(
                cast(Streams, self.backend).generate, on_token=hook)
            try:
                results = await loop.run_in_executor(
                    thread, call, [j.prompt for j in batch], spec, [j.seed for j in batch])
            except Exception as exc:  # noqa: BLE001 - handed to each caller, who answers 502
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(_as_backend_error(exc))
                continue
            for job, result in zip(batch, results, strict=True):
                if not job.future.done():
                    job.future.set_result(result)


def _as_backend_error(exc: Exception) -> Exception:
    if isinstance(exc, (BackendError, ValueError)):
        return exc
    error = BackendError(f"the model failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error
