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

A request with ``"stream": true`` gets server-sent events in OpenAI's chunk
format, one chunk per token (with ``logprobs`` when asked and offered), a last
chunk with the finish reason and ``data: [DONE]``; ``answer_words`` makes the
answers longer. Faults for streams:

``cut``         sends half the tokens, then closes the connection mid-body
``badchunk``    sends one token, then a chunk that is not JSON
``slow``        waits ``token_delay`` seconds before each token

(``500``, ``429``, ``401echo`` answer streams as they answer other requests.)
The time each streamed token left is logged in :attr:`FaultServer.sent`, and a
stream whose reader went away is counted in :attr:`FaultServer.abandoned`.

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

FAULTS = ("ok", "429", "500", "timeout", "truncated", "malformed", "nologprobs", "401echo",
          "cut", "badchunk", "slow")

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


def answer_for(question: str, seed: int, temperature: float, words: int = 0) -> str:
    """The server's deterministic answer: greedy 'answer N', samples vary with the seed;
    ``words`` more words ('w1 w2 ...') make it longer."""
    base = sum(question.encode()) % 97
    tail = "".join(f" w{i + 1}" for i in range(words))
    if temperature == 0:
        return f"answer {base}{tail}"
    return f"answer {base + seed % 3}{tail}"


def _tokens(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def _entry(t: int, tok: str, top: int) -> dict[str, Any]:
    """Token t's log-probability entry: log p = -0.25 (t + 1), the alternatives two nats
    apart (so the listed probabilities sum below 1, as a real model's do)."""
    lp = -0.25 * (t + 1)
    alternatives = [{"token": tok, "logprob": lp, "bytes": list(tok.encode())}]
    alternatives += [{"token": f"alt{j}", "logprob": lp - 2.0 * (j + 1), "bytes": None}
                     for j in range(max(0, top - 1))]
    return {"token": tok, "logprob": lp, "bytes": list(tok.encode()),
            "top_logprobs": alternatives[:top]}


def _choice(index: int, text: str, *, logprobs: bool, top: int) -> dict[str, Any]:
    content = [_entry(t, tok, top) for t, tok in enumerate(_tokens(text))]
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
                 retry_after: float = 1.0, delay: float = 3.0, honour_n: bool = True,
                 answer_words: int = 0, token_delay: float = 0.3) -> None:
        self.plan: Plan = plan or (lambda question, attempt: "ok")
        self.logprobs = logprobs
        self.retry_after = retry_after
        self.delay = delay
        self.honour_n = honour_n
        self.answer_words = answer_words
        self.token_delay = token_delay
        self.requests: list[Request] = []
        self.sent: list[float] = []  # when each streamed token left (time.monotonic)
        self.abandoned = 0           # streams whose reader went away before the end
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
                    if body.get("stream") and fault not in ("429", "500", "401echo"):
                        self._stream(fault, body, question, temperature)
                    else:
                        self._answer(fault, body, question, temperature)
                except (BrokenPipeError, ConnectionResetError):
                    with server._lock:
                        server.abandoned += bool(body.get("stream"))
                    # the client gave up first (timeouts, a closed stream)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, fault: str, body: dict[str, Any], question: str,
                        temperature: float) -> None:
                want_lp = bool(body.get("logprobs")) and server.logprobs
                top = int(body.get("top_logprobs") or 0)
                text = answer_for(question, int(body.get("seed", 0)), temperature,
                                  server.answer_words)
                tokens = _tokens(text)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def event(delta: dict[str, Any], logprobs: Any, finish: str | None) -> bytes:
                    chunk = {"id": "chatcmpl-fault", "object": "chat.completion.chunk",
                             "created": int(time.time()), "model": body.get("model", "fault"),
                             "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                          "finish_reason": finish}]}
                    return f"data: {json.dumps(chunk)}\n\n".encode()

                self._chunk(event({"role": "assistant", "content": ""}, None, None))
                for t, tok in enumerate(tokens):
                    if fault == "cut" and t == len(tokens) // 2:
                        self.close_connection = True  # mid-body, no last chunk
                        return
                    if fault == "badchunk" and t == 1:
                        self._chunk(b'data: {"choices": [{"delta": \n\n')
                        self._chunk(b"")
                        return
                    if fault == "slow":
                        time.sleep(server.token_delay)
                    logprobs = {"content": [_entry(t, tok, top)]} if want_lp else None
                    self._chunk(event({"content": tok}, logprobs, None))
                    with server._lock:
                        server.sent.append(time.monotonic())
                self._chunk(event({}, None, "stop"))
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

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
                choices = [_choice(i, answer_for(question, seed + i, temperature,
                                                 server.answer_words),
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
