"""A small OpenAI-compatible chat-completions server on 127.0.0.1 that misbehaves on cue.

It answers ``POST /v1/chat/completions`` with a deterministic reply (the
answer text, per-token log-probabilities and top alternatives), except where
its ``plan`` says otherwise. ``plan(question, attempt)`` sees the last user
message and how many requests with that message (and that temperature) came
before, and returns one of :data:`FAULTS`:

``ok``          a normal reply
``429``         HTTP 429 with ``Retry-After: <retry_after>``
``500``         HTTP 500
``timeout``     waits ``delay`` seconds before answering (longer than the client waits)
``truncated``   promises a longer body than it sends, then closes the connection
``malformed``   HTTP 200 whose body is not JSON
``nologprobs``  a normal reply without ``logprobs``
``401echo``     HTTP 401 whose message repeats the Authorization header it got

``FaultServer(logprobs=False)`` never returns log-probabilities (a text-only API).
Every request is logged in :attr:`FaultServer.requests`.

:func:`running` serves an ASGI app (``confide serve``) with uvicorn on a free
loopback port for the length of a ``with`` block.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("ok", "429", "500", "timeout", "truncated", "malformed", "nologprobs", "401echo")

Plan = Callable[[str, int], str]


@dataclass
class Request:
    at: float
    question: str
    temperature: float
    n: int
    fault: str
    authorization: str | None
    body: dict[str, Any] = field(repr=False, default_factory=dict)
    path: str = ""  # as requested, query string included


def answer_for(question: str, seed: int, temperature: float) -> str:
    """The server's deterministic answer: greedy 'answer N', samples vary with the seed."""
    base = sum(question.encode()) % 97
    if temperature == 0:
        return f"answer {base}"
    return f"answer {base + seed % 3}"


def _choice(index: int, text: str, *, logprobs: bool, top: int) -> dict[str, Any]:
    words = text.split(" ")
    tokens = [w if i == 0 else " " + w for i, w in enumerate(words)]
    content = []
    for t, tok in enumerate(tokens):
        lp = -0.25 * (t + 1)
        alternatives = [{"token": tok, "logprob": lp, "bytes": list(tok.encode())}]
        alternatives += [{"token": f"alt{j}", "logprob": lp - j - 1.0, "bytes": None}
                         for j in range(max(0, top - 1))]
        content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                        "top_logprobs": alternatives[:top]})
    # like llama.cpp, list the end-of-turn token after the answer
    content.append({"token": "<|im_end|>", "logprob": -0.01, "bytes": None,
                    "top_logprobs": [{"token": "<|im_end|>", "logprob": -0.01, "bytes": None}]
                    + [{"token": f"end{j}", "logprob": -5.0 - j, "bytes": None}
                       for j in range(max(0, top - 1))]})
    choice: dict[str, Any] = {"index": index, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}
    choice["logprobs"] = {"content": content} if logprobs else None
    return choice


class FaultServer:
    """Start with ``with FaultServer(plan) as server:``; ``server.base_url`` ends in ``/v1``."""

    def __init__(self, plan: Plan | None = None, *, logprobs: bool = True,
                 retry_after: float = 1.0, delay: float = 3.0, honour_n: bool = True) -> None:
        self.plan: Plan = plan or (lambda question, attempt: "ok")
        self.logprobs = logprobs
        self.retry_after = retry_after
        self.delay = delay
        self.honour_n = honour_n
        self.requests: list[Request] = []
        self._attempts: Counter[tuple[str, float]] = Counter()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def faults(self) -> Counter[str]:
        return Counter(r.fault for r in self.requests)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                      length: int | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) if length is None else length))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(size) or b"{}")
                if not self.path.split("?", 1)[0].endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                messages = body.get("messages") or [{}]
                question = next((m.get("content", "") for m in reversed(messages)
                                 if m.get("role") == "user"), "")
                temperature = float(body.get("temperature", 1.0))
                with server._lock:
                    key = (question, temperature)
                    attempt = server._attempts[key]
                    server._attempts[key] += 1
                    fault = server.plan(question, attempt)
                    server.requests.append(Request(time.monotonic(), question, temperature,
                                                   int(body.get("n", 1)), fault,
                                                   self.headers.get("Authorization"), body,
                                                   self.path))
                try:
                    self._answer(fault, body, question, temperature)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (timeouts)

            def _answer(self, fault: str, body: dict[str, Any], question: str,
                        temperature: float) -> None:
                if fault == "429":
                    self._send(429, b'{"error": {"message": "slow down"}}',
                               {"Retry-After": f"{server.retry_after:g}"})
                    return
                if fault == "500":
                    self._send(500, b'{"error": {"message": "internal error"}}')
                    return
                if fault == "401echo":
                    said = self.headers.get("Authorization", "")
                    msg = json.dumps({"error": {"message": f"Incorrect API key provided: {said}"}})
                    self._send(401, msg.encode())
                    return
                if fault == "malformed":
                    self._send(200, b'{"id": "x", "choices": [ {"message": ')
                    return
                if fault == "timeout":
                    time.sleep(server.delay)
                want_lp = bool(body.get("logprobs")) and server.logprobs and fault != "nologprobs"
                top = int(body.get("top_logprobs") or 0)
                n = int(body.get("n", 1)) if server.honour_n else 1
                seed = int(body.get("seed", 0))
                choices = [_choice(i, answer_for(question, seed + i, temperature),
                                   logprobs=want_lp, top=top) for i in range(n)]
                reply = {"id": "chatcmpl-fault", "object": "chat.completion",
                         "created": int(time.time()), "model": body.get("model", "fault"),
                         "choices": choices,
                         "usage": {"prompt_tokens": 1, "completion_tokens": 2,
                                   "total_tokens": 3}}
                data = json.dumps(reply).encode()
                if fault == "truncated":
                    self._send(200, data[: len(data) // 2], length=len(data))
                    self.close_connection = True
                    return
                self._send(200, data)

        return Handler


@contextmanager
def running(app: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free 127.0.0.1 port; yield its ``/v1`` URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
