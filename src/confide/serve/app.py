"""The ``confide serve`` application: an OpenAI-compatible chat endpoint with confidences.

``POST /v1/chat/completions`` answers like the OpenAI API and adds a
``confide`` object to the reply::

    "confide": {
        "scored_choice": 0,
        "confidences": {"msp": -0.41, "mean_entropy": null, ...},
        "reasons": {"mean_entropy": "why it is null"},
        "skipped": {"self_certainty": "backend cannot give token_kl_uniform"},
        "calibrated": 0.83,            # with a calibrator, else null
        "decision": "answer",          # with a policy: "answer" or "abstain", else null
        "answer": "..."                # the model's own answer when it abstained
    }

Choice 0 is always the greedy answer, the one the scorers (and any
calibrator fitted on confide runs) describe; with ``n > 1`` the other choices
are samples at the request's ``temperature``/``top_p``. When the policy
abstains, choice 0's content is the abstention message and the model's answer
moves to ``confide.answer``. Without a ``seed``, the sampling seed is derived
from the messages, so the same question gets the same confidences.

``GET /v1/models`` lists the served model, ``GET /health`` says what is
loaded. Every error is in the OpenAI error shape: invalid requests get 400,
a model name other than the served one 404 (``model_not_found``), an unknown
path 404, a wrong method 405, a body over ``Limits.max_body_bytes`` 413
(counted as it arrives, so a chunked body is never read past the limit); an
upstream failure gets 502, an upstream timeout 504.

A reply does not depend on what else the server is doing: with the default
``max_batch=1`` a local model generates each request alone, so the same
question gets the same confidences alone or under load. ``max_batch > 1``
generates concurrent requests together for throughput, but then padding to
the batch's longest prompt changes floating-point rounding, and a reply's
confidences depend on its batch neighbours: on 16 TriviaQA prompts, SmolLM2's
mean_logprob moved by a median 0.007 and at most 0.023 nats between alone and
a batch of 8, and 1 answer in 16 changed (``benchmarks/batch_neighbours.py``),
enough to flip an abstention threshold near the boundary.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from confide.backends.base import Backend, GenerationSpec, item_seed
from confide.errors import BackendError, BackendTimeout, InvalidInputError
from confide.pipeline import DEFAULT_SCORERS, Pipeline
from confide.records import Generation, Item, Record
from confide.scorers import SCORERS
from confide.serve.decisions import Calibrator, Policy, decide
from confide.serve.models import ChatCompletionRequest, Limits, error_body
from confide.serve.upstream import Upstream

__all__ = ["DEFAULT_ABSTAIN_MESSAGE", "create_app"]

log = logging.getLogger(__name__)

DEFAULT_ABSTAIN_MESSAGE = "I am not confident enough to answer this."


class _RequestError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = (
            status, message, param, kind, code)


def create_app(backend: Backend, *, model_name: str | None = None,
               scorers: tuple[str, ...] | list[str] | None = None,
               calibrator: Calibrator | None = None, policy: Policy | None = None,
               abstain_message: str = DEFAULT_ABSTAIN_MESSAGE, limits: Limits | None = None,
               timeout: float = 120.0, max_batch: int = 1, seed: int = 0,
               claims: Any = None, claims_calibrator: Calibrator | None = None) -> FastAPI:
    """Build the server around a loaded backend.

    Parameters
    ----------
    backend : the model (``hf`` for a local model, ``openai`` for an upstream URL).
    model_name : the id shown by ``/v1/models`` and in replies (default: the backend's).
    scorers : scorer names to report (default: confide's default white-box set); those
        the backend cannot feed are listed in ``confide.skipped``.
    calibrator, policy : fitted decisions (see :mod:`confide.serve.decisions`).
    abstain_message : choice 0's content when the policy abstains.
    limits : per-request limits (``n``, ``max_tokens``, prompt size).
    timeout : seconds the upstream model may take for one request (then 504).
    max_batch : a local model's requests generated together (1: each reply independent of
        concurrent requests; more: throughput, with confidences that depend on neighbours).
    claims, claims_calibrator : a :class:`~confide.claims.ClaimConfig` to add
        ``confide.claims`` (each claim of the answer with its confidences;
        :func:`~confide.claims.claims_payload`), and a calibrator of claim confidences.
    """
    names = tuple(scorers) if scorers is not None else DEFAULT_SCORERS
    for name in names:
        SCORERS[name]  # unknown names raise UnknownNameError now, not per request
    if calibrator is not None and calibrator.scorer not in names:
        raise InvalidInputError(f"the calibrator reads scorer {calibrator.scorer!r}, which is "
                                f"not among the served scorers ({', '.join(names)})",
                                field="scorers")
    if policy is not None and policy.scorer is None and calibrator is None:
        raise InvalidInputError("the policy reads the calibrated probability: load a "
                                "calibrator too", field="policy")
    wanted = getattr(policy, "calibrator_scorer", None)
    if policy is not None and policy.scorer is None and calibrator is not None and wanted \
            and wanted != calibrator.scorer:
        raise InvalidInputError(f"the policy was fitted on calibrated {wanted!r} but the "
                                f"calibrator maps {calibrator.scorer!r}", field="policy")
    if policy is not None and policy.scorer is not None and policy.scorer not in names:
        raise InvalidInputError(f"the policy reads scorer {policy.scorer!r}, which is not "
                                f"among the served scorers", field="scorers")
    limits = limits or Limits()
    upstream = Upstream(backend, timeout=timeout, max_batch=max_batch)
    served = model_name or str(backend.config().get("model", backend.name))
    started = int(time.time())
    seed_base = seed
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await upstream.start()
        pipe = Pipeline.build(backend, names)  # after start: the upstream has probed what it gives
        state.update(pipeline=pipe, usable=pipe.scorers, skipped=pipe.skipped)
        for name, why in pipe.skipped.items():
            log.warning("scorer %s is skipped: %s", name, why)
        try:
            yield
        finally:
            await upstream.stop()

    app = FastAPI(title="confide serve", lifespan=lifespan, docs_url=None, redoc_url=None)

    app.add_middleware(_BodyLimit, max_bytes=limits.max_body_bytes)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Unknown paths (404) and methods (405) answer in the OpenAI error shape too.
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(error_body(message, kind=kind), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return JSONResponse(error_body(message, param=param), status_code=400)

    @app.exception_handler(_RequestError)
    async def request_error(request: Request, exc: _RequestError) -> JSONResponse:
        return JSONResponse(error_body(exc.message, kind=exc.kind, param=exc.param,
                                       code=exc.code), status_code=exc.status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": served, "upstream": backend.config(),
                "scorers": [s.name for s in state.get("usable", [])],
                "skipped": state.get("skipped", {}),
                "calibrator": calibrator is not None, "policy": policy is not None,
                "guarantee": getattr(policy, "guarantee", None)}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list",
                "data": [{"id": served, "object": "model", "created": started,
                          "owned_by": "confide"}]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> JSONResponse:
        if body.model != served:
            raise _RequestError(404, f"the model {body.model!r} does not exist; this server "
                                     f"serves {served!r}", param="model",
                                kind="invalid_request_error", code="model_not_found")
        _check_limits(body, limits)
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                    for m in body.messages]
        pipe: Pipeline = state["pipeline"]
        n_samples = max(body.n - 1, pipe.n_samples)
        spec = GenerationSpec(
            max_new_tokens=body.answer_budget(limits), stop=body.stop_list(),
            n_samples=n_samples,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=0.9 if body.top_p is None else body.top_p,
            top_k_alternatives=max(10, body.top_logprobs or 0))
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        seed = body.seed if body.seed is not None else item_seed(seed_base, digest)
        try:
            result = await upstream.generate(messages, spec, seed)
        except BackendTimeout as exc:
            raise _RequestError(504, f"upstream model timed out: {exc}",
                                kind="upstream_timeout") from exc
        except BackendError as exc:
            raise _RequestError(502, f"upstream model failed: {exc}",
                                kind="upstream_error") from exc
        except ValueError as exc:  # the backend refused the prompt (InvalidInputError)
            raise _RequestError(400, str(exc), param="messages") from exc
        if result.greedy is None:
            raise _RequestError(502, f"upstream model failed: {result.error or 'no answer'}",
                                kind="upstream_error")
        record = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(pipe.complete, Item(id=digest[:16], prompt=messages), result,
                                    seed=seed))
        info = _confide_object(record, state["skipped"], calibrator, policy)
        # --- long answers (confide.claims): the claim list with its confidences ---
        if claims is not None:
            from confide.claims import claims_payload

            info["claims"] = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(claims_payload, record, claims, backend=backend,
                                        calibrator=claims_calibrator))
        # --- end long answers ---
        gens = [record.greedy, *record.samples[:body.n - 1]]
        choices = [_choice(i, g, body) for i, g in enumerate(gens)]
        if info.get("decision") == "abstain":
            info["answer"] = record.greedy.text
            choices[0]["message"]["content"] = abstain_message
            choices[0]["logprobs"] = None
        reply: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": served, "choices": choices,
            "system_fingerprint": None, "confide": info}
        usage = _usage(backend, messages, gens)
        if usage is not None:
            reply["usage"] = usage
        return JSONResponse(reply)

    return app


class _BodyLimit:
    """Refuse a request body over ``max_bytes`` with 413, counting bytes as they arrive.

    A declared Content-Length over the limit is refused before anything is read;
    a chunked body (no length) is read only up to the limit, so one request never
    holds more than ``max_bytes`` of body in memory, whatever its transfer encoding.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, f"{int(declared)} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Any, receive: Any, send: Any, size: str) -> None:
        reply = JSONResponse(error_body(
            f"request body of {size} exceeds the limit of {self.max_bytes} bytes",
            code="request_too_large"), status_code=413, headers={"connection": "close"})
        await reply(scope, receive, send)


def _check_limits(body: ChatCompletionRequest, limits: Limits) -> None:
    if body.stream:
        raise _RequestError(400, "stream=true is not supported by confide serve; "
                                 "ask without streaming", param="stream")
    if body.n > limits.max_n:
        raise _RequestError(400, f"n: at most {limits.max_n} choices per request, got {body.n}",
                            param="n")
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(body, name)
        if value is not None and value > limits.max_tokens:
            raise _RequestError(400, f"{name}: at most {limits.max_tokens}, got {value}",
                                param=name)
    if len(body.messages) > limits.max_messages:
        raise _RequestError(400, f"messages: at most {limits.max_messages} messages, "
                                 f"got {len(body.messages)}", param="messages")
    size = sum(len(m.text()) for m in body.messages)
    if size > limits.max_prompt_chars:
        raise _RequestError(400, f"messages: the prompt has {size} characters; the limit is "
                                 f"{limits.max_prompt_chars}", param="messages",
                            code="context_length_exceeded")
    if not any(m.role == "user" and m.text().strip() for m in body.messages):
        raise _RequestError(400, "messages: no user message with text", param="messages")


def _finite(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else float(value)


def _confide_object(record: Record, skipped: dict[str, str], calibrator: Calibrator | None,
                    policy: Policy | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "scored_choice": 0,
        "confidences": {k: _finite(v) for k, v in record.scores.items()},
        "reasons": dict(record.score_errors),
        "skipped": dict(skipped),
        "calibrated": None,
        "decision": None,
    }
    if calibrator is not None:
        raw = record.scores.get(calibrator.scorer, math.nan)
        if math.isnan(raw):
            info["reasons"]["calibrated"] = f"no {calibrator.scorer} confidence to calibrate"
        else:
            info["calibrated"] = _finite(float(calibrator.predict(raw)))
    if policy is not None:
        info.update(decide(policy, record.scores, info["calibrated"]))
    return info


def _choice(index: int, gen: Generation, body: ChatCompletionRequest) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": index, "message": {"role": "assistant", "content": gen.text},
        "finish_reason": "length" if gen.finish_reason == "length" else "stop",
        "logprobs": None}
    if body.logprobs and gen.token_logprobs is not None:
        k = body.top_logprobs or 0
        content = []
        for t, token in enumerate(gen.tokens):
            tops = []
            if k and gen.top_logprobs is not None and gen.top_tokens is not None:
                tops = [{"token": tok, "logprob": float(lp), "bytes": list(tok.encode())}
                        for tok, lp in zip(gen.top_tokens[t][:k], gen.top_logprobs[t][:k])]
            content.append({"token": token, "logprob": float(gen.token_logprobs[t]),
                            "bytes": list(token.encode()), "top_logprobs": tops})
        choice["logprobs"] = {"content": content, "refusal": None}
    return choice


def _usage(backend: Backend, messages: list[dict[str, str]],
           gens: list[Generation]) -> dict[str, int] | None:
    """Token counts when the backend can count the prompt (a local model); else None."""
    encode = getattr(backend, "encode", None)
    if encode is None or any(g.n_tokens == 0 and g.text for g in gens):
        return None
    prompt_tokens = len(encode(messages))
    completion = sum(g.n_tokens for g in gens)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}
