"""Load on ``confide serve``: throughput, latency, errors and peak memory at 1, 8, 32 clients.

Starts the server on 127.0.0.1 (upstream: the bundled model through the ``hf``
backend; ``--upstream-url`` for an OpenAI-compatible server; or ``--fake-upstream``,
the tests' instant loopback server, which isolates confide's own cost per
request: HTTP, validation, scoring), then for each
client count sends the same fixed number of chat requests (bundled TriviaQA
questions, ``max_tokens`` small) with at most that many in flight, and prints
one row per client count, with the server process's peak resident memory
while that row ran. A last row sends, from as many clients as the largest
count, bodies of ``--oversized-mb`` MB in chunked transfer encoding (no
Content-Length): every one must be refused with 413, and the peak memory shows
that none was read past the server's 1 MB body limit::

    .venv/bin/python benchmarks/serve_load.py --requests 64 --max-tokens 16

Every loop is bounded in count and time; traffic goes to loopback only. Exit
status 1 when any request failed at the largest client count.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def _rss_mib() -> float:
    """This process's resident memory now (Linux /proc; else the peak so far)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakMemory:
    """Samples resident memory every 5 ms on a thread; ``peak`` in MiB over the block."""

    def __enter__(self) -> PeakMemory:
        self.before = self.peak = _rss_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_mib())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mib())


async def _oversized(url: str, clients: int, megabytes: int, timeout: float) -> dict[str, Any]:
    """Each client sends one chunked body of ``megabytes`` MB; count how each ended."""
    import httpx

    chunk = b"x" * 65536

    async def body():
        for _ in range(megabytes * 16):
            yield chunk

    outcomes: dict[str, int] = {}

    async def one(client: httpx.AsyncClient) -> None:
        try:
            response = await client.post(f"{url}/chat/completions", content=body(),
                                         headers={"content-type": "application/json"})
            key = str(response.status_code)
        except httpx.HTTPError as exc:  # closed mid-upload after the refusal
            key = type(exc).__name__
        outcomes[key] = outcomes.get(key, 0) + 1

    async with httpx.AsyncClient(timeout=timeout) as client:
        await asyncio.gather(*(one(client) for _ in range(clients)))
    return outcomes


def _start(app) -> tuple[str, object, threading.Thread]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                           backlog=256))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit("the server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1", server, thread


async def _drive(url: str, questions: list[str], clients: int, requests: int,
                 max_tokens: int, timeout: float) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    tokens: int | None = None
    errors = 0
    next_index = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:

        async def worker() -> None:
            nonlocal next_index, tokens, errors
            while next_index < requests:
                i = next_index
                next_index += 1
                body = {"model": "served", "max_tokens": max_tokens,
                        "messages": [{"role": "user", "content": questions[i % len(questions)]}]}
                began = time.perf_counter()
                try:
                    response = await client.post(f"{url}/chat/completions", json=body)
                    ok = response.status_code == 200
                    if ok:
                        usage = response.json().get("usage")
                        if usage:  # only local models report token counts
                            tokens = (tokens or 0) + int(usage["completion_tokens"])
                except Exception:  # noqa: BLE001 - every failure counts as an error
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - began)
                else:
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - began
    lat = np.asarray(latencies) if latencies else np.asarray([np.nan])
    return {"clients": clients, "requests": requests, "wall_s": wall,
            "req_per_s": len(latencies) / wall,
            "tok_per_s": None if tokens is None else tokens / wall,
            "p50_s": float(np.percentile(lat, 50)), "p95_s": float(np.percentile(lat, 95)),
            "p99_s": float(np.percentile(lat, 99)), "errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64, help="requests per client count")
    parser.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=1,
                        help="hf: requests per batch (above 1, replies depend on neighbours)")
    parser.add_argument("--oversized-mb", type=int, default=20,
                        help="size of the chunked bodies of the last row (0: no such row)")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--upstream-url", default=None,
                        help="an OpenAI-compatible upstream instead of the local model")
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    parser.add_argument("--device", default=None, help="hf: cpu or cuda")
    parser.add_argument("--threads", type=int, default=None,
                        help="hf: torch intra-op threads (1 avoids thread spin on a busy CPU)")
    parser.add_argument("--fake-upstream", action="store_true",
                        help="upstream: the instant fault-free test server (tests/faultserver.py)")
    args = parser.parse_args(argv)

    from confide.backends import load_backend
    from confide.serve.app import create_app
    from confide.tasks import load_task

    fake = None
    if args.fake_upstream:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from faultserver import FaultServer

        fake = FaultServer().__enter__()
        args.upstream_url = fake.base_url
    if args.upstream_url:
        backend = load_backend("openai", args.model, base_url=args.upstream_url,
                               concurrency=64)
    else:
        backend = load_backend("hf", args.model, batch_size=args.max_batch, device=args.device)
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
    task = load_task("triviaqa", limit=100)
    questions = [it.prompt if isinstance(it.prompt, str) else it.prompt[-1]["content"]
                 for it in task.items]
    app = create_app(backend, model_name="served", max_batch=args.max_batch,
                     timeout=args.timeout)
    url, server, thread = _start(app)
    counts = [int(c) for c in args.clients.split(",")]
    load = os.getloadavg()
    rows = []
    oversized: dict[str, Any] | None = None
    try:
        asyncio.run(_drive(url, questions, 1, 2, args.max_tokens, args.timeout))  # warm-up
        for clients in counts:
            with PeakMemory() as memory:
                rows.append(asyncio.run(_drive(url, questions, clients, args.requests,
                                               args.max_tokens, args.timeout)))
            r = rows[-1]
            r.update(rss_before=memory.before, rss_peak=memory.peak)
            print(f"clients {clients:>3}: {r['req_per_s']:.2f} req/s, errors {r['errors']}",
                  file=sys.stderr, flush=True)
        if args.oversized_mb:
            with PeakMemory() as memory:
                refused = asyncio.run(_oversized(url, max(counts), args.oversized_mb,
                                                 args.timeout))
            oversized = {"outcomes": refused, "rss_before": memory.before,
                         "rss_peak": memory.peak}
    finally:
        server.should_exit = True  # type: ignore[attr-defined]
        thread.join(30)
        if fake is not None:
            fake.__exit__(None, None, None)
    config = backend.config()
    print(f"\nconfide serve load: upstream {config.get('backend')} {config.get('model')}, "
          f"{args.requests} requests per row, max_tokens {args.max_tokens}, "
          f"max_batch {args.max_batch}, torch threads {args.threads or 'default'}; "
          f"load average before/after {load[0]:.1f}/{os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores\n")
    print("| clients | requests | wall s | req/s | tokens/s | p50 s | p95 s | p99 s | errors "
          "| peak RSS MiB (+ over start of row) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['clients']} | {r['requests']} | {r['wall_s']:.1f} | {r['req_per_s']:.2f} | "
              f"{'n/a' if r['tok_per_s'] is None else format(r['tok_per_s'], '.1f')} | "
              f"{r['p50_s']:.2f} | {r['p95_s']:.2f} | {r['p99_s']:.2f} | "
              f"{r['errors']} | {r['rss_peak']:.0f} (+{r['rss_peak'] - r['rss_before']:.0f}) |")
    if oversized is not None:
        print(f"\n{max(counts)} clients each sending a chunked {args.oversized_mb} MB body: "
              f"{oversized['outcomes']}; peak RSS {oversized['rss_peak']:.0f} MiB "
              f"(+{oversized['rss_peak'] - oversized['rss_before']:.0f} over the start of the "
              f"row; unbounded reading would need about {max(counts) * args.oversized_mb} MB)")
    if len(rows) > 1 and rows[0]["req_per_s"] > 0:
        print(f"\nthroughput ratio, {rows[-1]['clients']} clients / {rows[0]['clients']} client: "
              f"{rows[-1]['req_per_s'] / rows[0]['req_per_s']:.2f}x")
    # A client still uploading when the server answers 413 and closes may see the close
    # (ReadError/WriteError) instead of the answer; either way the body was refused.
    refused_all = oversized is None or set(oversized["outcomes"]) <= {
        "413", "ReadError", "WriteError", "RemoteProtocolError"}
    return 1 if (rows and rows[-1]["errors"]) or not refused_all else 0


if __name__ == "__main__":
    raise SystemExit(main())
