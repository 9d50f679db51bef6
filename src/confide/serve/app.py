"""The ``confide serve`` application: OpenAI-compatible endpoints with confidences.

``POST /v1/chat/completions`` and ``POST /v1/completions`` answer like the
OpenAI API and add a ``confide`` object to the reply::

    "confide": {
        "scored_choice": 0,
        "confidences": {"msp": -0.41, "mean_entropy": null, ...},
        "reasons": {"mean_entropy": "why it is null"},
        "skipped": {"self_certainty": "backend cannot give token_kl_uniform"},
        "calibrated": 0.83,            # with a calibrator, else null
        "decision": "answer",          # with a policy: "answer" or "abstain", else null
        "answer": "...",               # the model's own answer when it abstained
        "summary": {"text": "Most likely Paris (about 70%); ...", ...},  # with >= 2 samples
        "choices": [{"index": 1, "confidences": ..., ...}]  # with n > 1: every choice scored
    }

Choice 0 is always the greedy answer, the one the scorers (and any
calibrator fitted on confide runs) describe; with ``n > 1`` the other choices
are samples at the request's ``temperature``/``top_p``. When the policy
abstains, choice 0's content is the abstention message and the model's answer
moves to ``confide.answer``. Without a ``seed``, the sampling seed is derived
from the messages, so the same question gets the same confidences. With
``n > 1`` every choice is scored by the same scorers (a sample as the answer,
the other samples as its company) and gets its own calibrated probability and
decision in ``confide.choices``; the top-level figures stay choice 0's.
``confide.summary`` describes the sampled answers' clusters
(:func:`confide.summary.summarize`) when there are at least two samples
(``n > 2``, a sampling scorer, or the server's ``summary_samples``).

``/v1/completions`` takes one text prompt, which a local model continues as
is (no chat template) and an ``openai`` upstream receives as a user message;
``logprobs`` there is the number of top alternatives, in the legacy shape.

``stream: true`` answers with server-sent events in OpenAI's chunk format
(:mod:`confide.serve.sse`): each token's chunk carries ``confide`` with its
log-probability, entropy and running confidence, and the last chunk the same
``confide`` object as a reply that is not streamed. A client that goes away
stops the generation at the next token. An early-abstention policy
(:class:`confide.streaming.EarlyAbstention`; server default, or per request as
``"confide": {"early_abstain_below": 0.3, "early_abstain_after": 4}``) stops the
answer once its running confidence falls below the threshold: the reply (or the
stream's last chunk) then carries the abstention message, ``decision:
"abstain"``, ``decided_on: "early_abstention"`` and the reason.

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
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from confide.backends.base import Backend, GenerationResult, GenerationSpec, Prompt, item_seed
from confide.errors import BackendError, BackendTimeout, InvalidInputError
from confide.judges import ExactJudge
from confide.options import check_option
from confide.pipeline import DEFAULT_SCORERS, Pipeline
from confide.records import Generation, Item, Record
from confide.scorers import SCORERS
from confide.serve.decisions import Calibrator, Policy, decide
from confide.serve.models import (ChatCompletionRequest, CompletionRequest, GenerationRequest,
                                  Limits, error_body)
from confide.serve.sse import StreamReply, chat_logprobs, event_stream, text_logprobs
from confide.serve.upstream import Upstream
from confide.streaming import AnswerStream, EarlyAbstention
from confide.summary import summarize

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
               early_abstention: EarlyAbstention | None = None,
               summary_samples: int = 0, claims: Any = None,
               claims_calibrator: Calibrator | None = None) -> FastAPI:
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
    timeout : seconds the upstream model may take for one request (then 504); in a
        stream, the longest wait for the next token.
    max_batch : a local model's requests generated together (1: each reply independent of
        concurrent requests; more: throughput, with confidences that depend on neighbours).
    early_abstention : stop answers whose running confidence falls below a threshold
        (requests may set their own).
    summary_samples : samples drawn for every request so that ``confide.summary``
        describes the answer distribution (0: only when samples are drawn anyway).
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
    check_option("n_samples", summary_samples, field="summary_samples")
    limits = limits or Limits()
    upstream = Upstream(backend, timeout=timeout, max_batch=max_batch)
    served = model_name or str(backend.config().get("model", backend.name))
    started = int(time.time())
    seed_base = seed
    state: dict[str, Any] = {"streams": _StreamLog()}
    judge = ExactJudge()  # the summary's clusters (the server's scorers use the same)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await upstream.start()
        pipe = Pipeline.build(backend, names, judge=judge)  # after start: the upstream has
        state.update(pipeline=pipe, usable=pipe.scorers,    # probed what it gives
                     skipped=pipe.skipped)
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
                "guarantee": getattr(policy, "guarantee", None),
                "early_abstention": early_abstention and early_abstention.to_dict(),
                "streams": state["streams"].to_dict()}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list",
                "data": [{"id": served, "object": "model", "created": started,
                          "owned_by": "confide"}]}

    def prepare(body: GenerationRequest, prompt: Prompt) -> _Job:
        if body.model != served:
            raise _RequestError(404, f"the model {body.model!r} does not exist; this server "
                                     f"serves {served!r}", param="model",
                                kind="invalid_request_error", code="model_not_found")
        pipe: Pipeline = state["pipeline"]
        n_samples = max(body.n - 1, pipe.n_samples, summary_samples)
        spec = GenerationSpec(
            max_new_tokens=body.answer_budget(limits), stop=body.stop_list(),
            n_samples=n_samples,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=0.9 if body.top_p is None else body.top_p,
            top_k_alternatives=max(10, body.top_k))
        digest = hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()
        job_seed = body.seed if body.seed is not None else item_seed(seed_base, digest)
        return _Job(body, Item(id=digest[:16], prompt=prompt), prompt, spec, job_seed,
                    _early(body, early_abstention))

    async def generate(job: _Job, on_token: Any = None) -> GenerationResult:
        try:
            result = await upstream.generate(job.prompt, job.spec, job.seed, on_token=on_token)
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
        return result

    async def conclude(job: _Job, result: GenerationResult, abstained: str | None
                       ) -> tuple[dict[str, Any], list[Generation]]:
        """The ``confide`` object and the choices' generations: one code for every reply."""
        records = await asyncio.get_running_loop().run_in_executor(
            None, _score_choices, state["pipeline"], job, result)
        infos = [_confide_object(r, state["skipped"], calibrator, policy) for r in records]
        info = infos[0]
        if abstained is not None:
            info.update(decision="abstain", decided_on="early_abstention",
                        decision_reason=abstained)
        # --- long answers (confide.claims): the claim list with its confidences ---
        if claims is not None:
            from confide.claims import claims_payload

            info["claims"] = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(claims_payload, records[0], claims, backend=backend,
                                        calibrator=claims_calibrator))
        # --- end long answers ---
        if info.get("decision") == "abstain":
            info["answer"] = records[0].greedy.text
        samples = [g.text for g in result.samples]
        info["summary"] = summarize(samples, judge, item=job.item).to_dict() \
            if len(samples) >= 2 else None
        if job.body.n > 1:
            info["choices"] = [{"index": i, **each} for i, each in enumerate(infos)]
        return info, [r.greedy for r in records]

    async def reply(job: _Job, kind: str) -> JSONResponse | StreamingResponse:
        if job.body.stream:
            return await stream(job, kind)
        answer = AnswerStream(lambda update: None, early=job.early) if job.early else None
        result = await generate(job, answer)
        info, gens = await conclude(job, result, answer and answer.abstained)
        choices = [_choice(kind, i, g, job.body) for i, g in enumerate(gens)]
        if info.get("decision") == "abstain":
            _set_text(kind, choices[0], abstain_message)
            choices[0]["logprobs"] = None
        out: dict[str, Any] = {
            "id": _reply_id(kind), "object": "chat.completion" if kind == "chat" else
            "text_completion", "created": int(time.time()), "model": served,
            "choices": choices, "system_fingerprint": None, "confide": info}
        usage = _usage(backend, job.prompt, gens)
        if usage is not None:
            out["usage"] = usage
        return JSONResponse(out)

    async def stream(job: _Job, kind: str) -> StreamingResponse:
        if not upstream.can_stream:
            raise _RequestError(400, f"the {backend.name} backend cannot stream; ask without "
                                     "streaming", param="stream")
        shape = StreamReply(kind, _reply_id(kind), int(time.time()), served, job.body)
        events = await event_stream(
            job, shape, generate=generate, conclude=conclude, abstain_message=abstain_message,
            usage=lambda gens: _usage(backend, job.prompt, gens), timeout=timeout,
            log_stream=state["streams"].add)
        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        _check_limits(body, limits)
        if len(body.messages) > limits.max_messages:
            raise _RequestError(400, f"messages: at most {limits.max_messages} messages, "
                                     f"got {len(body.messages)}", param="messages")
        _check_size(sum(len(m.text()) for m in body.messages), limits)
        if not any(m.role == "user" and m.text().strip() for m in body.messages):
            raise _RequestError(400, "messages: no user message with text", param="messages")
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                    for m in body.messages]
        return await reply(prepare(body, messages), "chat")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        _check_limits(body, limits)
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            raise _RequestError(400, f"prompt: one prompt per request, got {len(body.prompt)}",
                                param="prompt")
        if body.echo:
            raise _RequestError(400, "echo: not supported (the prompt is not scored)",
                                param="echo")
        _check_size(len(body.text()), limits, param="prompt")
        if not body.text().strip():
            raise _RequestError(400, "prompt: empty", param="prompt")
        return await reply(prepare(body, body.text()), "text")

    return app


@dataclass
class _Job:
    """One request, ready to generate."""

    body: GenerationRequest
    item: Item
    prompt: Prompt
    spec: GenerationSpec
    seed: int
    early: EarlyAbstention | None


def _early(body: GenerationRequest, default: EarlyAbstention | None
           ) -> EarlyAbstention | None:
    """The request's early-abstention policy: its own ``confide`` options over the server's."""
    own = body.confide
    if own is None or (own.early_abstain_below is None and own.early_abstain_after is None):
        return default
    below = own.early_abstain_below if own.early_abstain_below is not None else \
        (default.below if default else None)
    if below is None:
        raise _RequestError(400, "confide.early_abstain_after needs early_abstain_below",
                            param="confide.early_abstain_below")
    after = own.early_abstain_after if own.early_abstain_after is not None else \
        (default.after if default else EarlyAbstention(below).after)
    return EarlyAbstention(below, after)


def _score_choices(pipe: Pipeline, job: _Job, result: GenerationResult) -> list[Record]:
    """Choice 0's record (the greedy answer) and, with ``n > 1``, each returned sample's,
    scored by the pipeline with the other samples as its company."""
    first = pipe.complete(job.item, result, seed=job.seed)
    records = [first]
    for sample in result.samples[:job.body.n - 1]:
        records.append(pipe.complete(job.item, GenerationResult(sample, result.samples),
                                     seed=job.seed))
    return records


class _StreamLog:
    """What the server's streams did (``/health``): counts and the most recent few."""

    def __init__(self, keep: int = 20) -> None:
        self.counts: dict[str, int] = {}
        self.recent: list[dict[str, Any]] = []
        self.keep = keep

    def add(self, entry: dict[str, Any]) -> None:
        self.counts[entry["outcome"]] = self.counts.get(entry["outcome"], 0) + 1
        self.recent = [*self.recent, entry][-self.keep:]

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "recent": list(self.recent)}


def _reply_id(kind: str) -> str:
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"


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


def _check_limits(body: GenerationRequest, limits: Limits) -> None:
    if body.n > limits.max_n:
        raise _RequestError(400, f"n: at most {limits.max_n} choices per request, got {body.n}",
                            param="n")
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(body, name, None)
        if value is not None and value > limits.max_tokens:
            raise _RequestError(400, f"{name}: at most {limits.max_tokens}, got {value}",
                                param=name)


def _check_size(size: int, limits: Limits, param: str = "messages") -> None:
    if size > limits.max_prompt_chars:
        raise _RequestError(400, f"{param}: the prompt has {size} characters; the limit is "
                                 f"{limits.max_prompt_chars}", param=param,
                            code="context_length_exceeded")


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


def _choice(kind: str, index: int, gen: Generation, body: GenerationRequest) -> dict[str, Any]:
    """One choice of a reply: chat (``message``) or text completion (``text``)."""
    finish = "length" if gen.finish_reason == "length" else "stop"
    choice: dict[str, Any] = {"index": index, "finish_reason": finish, "logprobs": None}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": gen.text}
    else:
        choice["text"] = gen.text
    if body.wants_logprobs and gen.token_logprobs is not None:
        steps = [(token, float(gen.token_logprobs[t]), _top(gen, t, body.top_k))
                 for t, token in enumerate(gen.tokens)]
        choice["logprobs"] = (chat_logprobs(steps) if kind == "chat" else
                              text_logprobs(steps))
    return choice


def _top(gen: Generation, t: int, k: int) -> list[tuple[str, float]]:
    if not k or gen.top_logprobs is None or gen.top_tokens is None:
        return []
    return [(tok, float(lp)) for tok, lp in zip(gen.top_tokens[t][:k], gen.top_logprobs[t][:k])]


def _set_text(kind: str, choice: dict[str, Any], text: str) -> None:
    if kind == "chat":
        choice["message"]["content"] = text
    else:
        choice["text"] = text


def _usage(backend: Backend, prompt: Prompt, gens: list[Generation]) -> dict[str, int] | None:
    """Token counts when the backend can count the prompt (a local model); else None."""
    encode = getattr(backend, "encode", None)
    if encode is None or any(g.n_tokens == 0 and g.text for g in gens):
        return None
    prompt_tokens = len(encode(prompt))
    completion = sum(g.n_tokens for g in gens)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}
