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
        "choices": [{"index": 1, "confidences": ..., ...}],  # with n > 1: every choice scored
        "record_id": "1718000000000-9f2c4e1a7b3d"  # with log_run: the stored record's id
    }

With ``log_run``, the ``X-Confide-Record-Id`` header names the stored record too, and
``confide label`` takes that id (:mod:`confide.serve.traffic`).

Choice 0 is always the greedy answer, the one the scorers (and any
calibrator fitted on confide runs) describe; with ``n > 1`` the other choices
are samples at the request's ``temperature``/``top_p``. When the policy
abstains, choice 0's content is the abstention message and the model's answer
moves to ``confide.answer``. Without a ``seed``, the sampling seed is derived
from the messages, so the same question gets the same confidences. With
``n > 1`` every choice is scored by the same scorers (a sample as the answer,
the other samples as its company) and gets its own calibrated probability and
decision in ``confide.choices``; the top-level figures stay choice 0's.
``confide.equivalence.summary`` describes the sampled answers' clusters
(:func:`confide.equivalence.summary.summarize`) when there are at least two samples
(``n > 2``, a sampling scorer, or the server's ``summary_samples``).

``/v1/completions`` takes one text prompt, which a local model continues as
is (no chat template) and an ``openai`` upstream receives as a user message;
``logprobs`` there is the number of top alternatives, in the legacy shape.

``stream: true`` answers with server-sent events in OpenAI's chunk format
(:mod:`confide.serve.sse`): each token's chunk carries ``confide`` with its
log-probability, entropy and running confidence, and the last chunk the same
``confide`` object as a reply that is not streamed. A client that goes away
stops the generation at the next token. An early-abstention policy
(:class:`confide.pipeline.streaming.EarlyAbstention`; server default, or per request as
``"confide": {"early_abstain_below": 0.3, "early_abstain_after": 4}``) stops the
answer once its running confidence falls below the threshold: the reply (or the
stream's last chunk) then carries the abstention message, ``decision:
"abstain"``, ``decided_on: "early_abstention"`` and the reason.

With ``reasoning_tags`` (``confide serve --reasoning-tags "<think>,</think>"``) a reply
is two spans (:mod:`confide.core.reasoning`): ``message.content`` is the final answer,
the one scored, graded and decided on, and ``message.reasoning_content`` the trace (as
vLLM's and DeepSeek's reasoning replies carry it; null when the reply has none); a
stream sends the trace as ``delta.reasoning_content`` and the answer as
``delta.content``. An ``openai`` upstream's own ``reasoning_content`` is the trace
whatever the setting. ``confide.spans`` names the span each scorer read (``answer`` or
``trace``), and ``confide.trace`` holds the trace's token count and whether the final
answer is missing (a trace the budget cut).

``GET /v1/models`` lists the served model, ``GET /health`` says what is
loaded (with ``log_run``, how many replies were stored in the traffic run, how many
wait in its queue and how many were dropped or failed: :mod:`confide.serve.traffic`).
Every error is in the OpenAI error shape: invalid requests get 400 (text that is not
valid Unicode, such as a lone surrogate escape ``"\\udcff"``, included, the field named),
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
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from confide.backends.base import Backend
from confide.core.errors import InvalidInputError
from confide.core.options import check_option
from confide.core.reasoning import Tags
from confide.core.reasoning import reasoning_tags as reasoning_tags_of
from confide.pipeline.answering import DEFAULT_SCORERS, Pipeline
from confide.pipeline.streaming import EarlyAbstention
from confide.scorers import scorer_at
from confide.serve.decisions import Calibrator, Policy
from confide.serve.guards import BodyLimit, RequestError, check_limits, check_size
from confide.serve.models import ChatCompletionRequest, CompletionRequest, Limits, error_body
from confide.serve.replies import Replies
from confide.serve.traffic import TrafficLog, traffic_identity
from confide.serve.upstream import Upstream

if TYPE_CHECKING:  # claims_payload calls predict on arrays: the fitted class, not the Protocol
    from confide.decisions.calibration import Calibrator as ClaimCalibrator

__all__ = ["DEFAULT_ABSTAIN_MESSAGE", "create_app"]

log = logging.getLogger(__name__)

DEFAULT_ABSTAIN_MESSAGE = "I am not confident enough to answer this."


def create_app(backend: Backend, *, model_name: str | None = None,
               scorers: tuple[str, ...] | list[str] | None = None,
               calibrator: Calibrator | None = None, policy: Policy | None = None,
               abstain_message: str = DEFAULT_ABSTAIN_MESSAGE, limits: Limits | None = None,
               timeout: float = 120.0, max_batch: int = 1, seed: int = 0,
               early_abstention: EarlyAbstention | None = None,
               summary_samples: int = 0, claims: Any = None,
               claims_calibrator: ClaimCalibrator | None = None,
               log_run: str | Path | None = None,
               reasoning_tags: Tags | None = None) -> FastAPI:
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
    summary_samples : samples drawn for every request so that ``confide.equivalence.summary``
        describes the answer distribution (0: only when samples are drawn anyway).
    claims, claims_calibrator : a :class:`~confide.runs.claims.ClaimConfig` to add
        ``claims`` (each claim of the answer with its confidences;
        :func:`~confide.decisions.refining.claims_payload`), and a calibrator of claim confidences
        (:func:`~confide.decisions.refining.fit_claim_calibrator`).
    log_run : a run directory where every reply is stored as a record
        (:mod:`confide.serve.traffic`); a directory holding another setup's run is
        refused here.
    reasoning_tags : a reasoning model's trace tags (``("<think>", "</think>")``); each
        reply is split into trace and final answer (module notes). None: read whole.
    """
    names = tuple(scorers) if scorers is not None else DEFAULT_SCORERS
    reasoning_tags = reasoning_tags_of(reasoning_tags)  # text ("<think>,</think>") checked
    for name in names:
        scorer_at(name, "answer")  # unknown or claim-level names raise now, not per request
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
    replies = Replies(backend, upstream, model_name or str(backend.config().get(
        "model", backend.name)), limits, calibrator, policy, abstain_message, timeout, seed,
        early_abstention, summary_samples, claims, claims_calibrator,
        reasoning_tags=reasoning_tags)
    if log_run is not None:
        replies.traffic = TrafficLog.open(log_run, backend=backend.config(), identity=(
            traffic_identity(model=replies.served, backend=backend.name, scorers=names,
                             seed=seed, summary_samples=summary_samples,
                             reasoning_tags=reasoning_tags)))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await upstream.start()
        # after start: the upstream has probed what it gives
        replies.pipe = Pipeline.build(backend, names, judge=replies.judge,
                                      reasoning_tags=reasoning_tags)
        for name, why in replies.pipe.skipped.items():
            log.warning("scorer %s is skipped: %s", name, why)
        if replies.traffic is not None:
            replies.traffic.start(replies.pipe.skipped)
        try:
            yield
        finally:
            await upstream.stop()
            if replies.traffic is not None:  # drains the queued writes: off the loop
                await asyncio.to_thread(replies.traffic.close)

    app = FastAPI(title="confide serve", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    _add_error_handlers(app)
    _add_routes(app, replies, started=int(time.time()))
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error in the OpenAI error shape."""

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

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(error_body(exc.message, kind=exc.kind, param=exc.param,
                                       code=exc.code), status_code=exc.status)


def _add_routes(app: FastAPI, replies: Replies, *, started: int) -> None:
    """``/health``, ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions``."""
    limits, policy, early = replies.limits, replies.policy, replies.early_abstention

    @app.get("/health")
    async def health() -> dict[str, Any]:
        pipe = replies.pipe
        return {"status": "ok", "model": replies.served, "upstream": replies.backend.config(),
                "scorers": [s.name for s in pipe.scorers] if pipe else [],
                "skipped": pipe.skipped if pipe else {},
                "calibrator": replies.calibrator is not None, "policy": policy is not None,
                "guarantee": getattr(policy, "guarantee", None),
                "early_abstention": early and early.to_dict(),
                "streams": replies.streams.to_dict(),
                "log_run": replies.traffic.to_dict() if replies.traffic else None}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list",
                "data": [{"id": replies.served, "object": "model", "created": started,
                          "owned_by": "confide"}]}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        check_limits(body, limits)
        if len(body.messages) > limits.max_messages:
            raise RequestError(400, f"messages: at most {limits.max_messages} messages, "
                                    f"got {len(body.messages)}", param="messages")
        check_size(sum(len(m.text()) for m in body.messages), limits)
        if not any(m.role == "user" and m.text().strip() for m in body.messages):
            raise RequestError(400, "messages: no user message with text", param="messages")
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                    for m in body.messages]
        return await replies.reply(replies.job(body, messages), "chat")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        check_limits(body, limits)
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            raise RequestError(400, f"prompt: one prompt per request, got {len(body.prompt)}",
                               param="prompt")
        if body.echo:
            raise RequestError(400, "echo: not supported (the prompt is not scored)",
                               param="echo")
        check_size(len(body.text()), limits, param="prompt")
        if not body.text().strip():
            raise RequestError(400, "prompt: empty", param="prompt")
        return await replies.reply(replies.job(body, body.text()), "text")
