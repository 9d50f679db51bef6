"""The server's replies: a request becomes a job, the job a generation, the generation
a reply with its ``confide`` object (streamed or not). :class:`Replies` holds what every
reply shares: the upstream model queue, the scorers, the decisions and the limits."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse, StreamingResponse

from confide.backends.base import (
    Backend,
    GenerationResult,
    GenerationSpec,
    Prompt,
    Tokenizes,
    item_seed,
)
from confide.core.errors import BackendError, BackendTimeout
from confide.core.jsonsafe import finite_or_none, json_safe
from confide.core.reasoning import Tags, final_answer_missing, missing_answer_reason
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.equivalence.summary import summarize
from confide.pipeline.answering import Pipeline
from confide.pipeline.plan import generation_spec
from confide.pipeline.streaming import AnswerStream, EarlyAbstention
from confide.runs.answers import backend_model
from confide.scorers import SCORERS
from confide.serve.decisions import Calibrator, Policy, decide
from confide.serve.guards import RequestError
from confide.serve.models import GenerationRequest, Limits
from confide.serve.sse import StreamReply, chat_logprobs, event_stream, text_logprobs
from confide.serve.traffic import new_record_id
from confide.serve.upstream import Upstream

if TYPE_CHECKING:  # claims_payload calls predict on arrays: the fitted class, not the Protocol
    from confide.decisions.calibration import Calibrator as ClaimCalibrator

__all__ = ["RECORD_HEADER", "Job", "Replies", "StreamLog"]


@dataclass
class Replies:
    """Everything a reply needs; :meth:`reply` answers one request."""

    backend: Backend
    upstream: Upstream
    served: str
    limits: Limits
    calibrator: Calibrator | None
    policy: Policy | None
    abstain_message: str
    timeout: float
    seed: int
    early_abstention: EarlyAbstention | None
    summary_samples: int
    claims: Any = None
    claims_calibrator: ClaimCalibrator | None = None
    pipe: Pipeline | None = None  # set once the upstream has started (it probes capabilities)
    traffic: Any = None  # a TrafficLog (``--log-run``): every reply stored as a record
    reasoning_tags: Tags | None = None  # split each reply into trace and final answer

    def __post_init__(self) -> None:
        self.judge = ExactJudge()  # the summary's clusters (the server's scorers use the same)
        self.streams = StreamLog()

    @property
    def pipeline(self) -> Pipeline:
        if self.pipe is None:
            raise RuntimeError("the server has not started")
        return self.pipe

    def job(self, body: GenerationRequest, prompt: Prompt) -> Job:
        """The request checked against the served model, with its generation spec and seed."""
        if body.model != self.served:
            raise RequestError(404, f"the model {body.model!r} does not exist; this server "
                                    f"serves {self.served!r}", param="model",
                               kind="invalid_request_error", code="model_not_found")
        spec = generation_spec(
            self.pipeline.scorers, max_new_tokens=body.answer_budget(self.limits),
            stop=body.stop_list(), at_least=max(body.n - 1, self.summary_samples),
            temperature=body.temperature, top_p=body.top_p,
            top_k_alternatives=max(10, body.top_k), reasoning_tags=self.reasoning_tags)
        digest = hashlib.sha256(json.dumps(prompt, sort_keys=True).encode()).hexdigest()
        job_seed = body.seed if body.seed is not None else item_seed(self.seed, digest)
        kind = "text" if isinstance(prompt, str) else "chat"
        return Job(body, Item(id=digest[:16], prompt=prompt), prompt, spec, job_seed,
                   request_early_abstention(body, self.early_abstention), reply_id(kind),
                   new_record_id() if self.traffic is not None else None)

    async def generate(self, job: Job, on_token: Any = None) -> GenerationResult:
        try:
            result = await self.upstream.generate(job.prompt, job.spec, job.seed,
                                                  on_token=on_token)
        except BackendTimeout as exc:
            raise RequestError(504, f"upstream model timed out: {exc}",
                               kind="upstream_timeout") from exc
        except BackendError as exc:
            raise RequestError(502, f"upstream model failed: {exc}",
                               kind="upstream_error") from exc
        except ValueError as exc:  # the backend refused the prompt (InvalidInputError)
            raise RequestError(400, str(exc), param="messages") from exc
        if result.greedy is None:
            raise RequestError(502, f"upstream model failed: {result.error or 'no answer'}",
                               kind="upstream_error")
        return result

    async def conclude(self, job: Job, result: GenerationResult, abstained: str | None
                       ) -> tuple[dict[str, Any], list[Generation]]:
        """The ``confide`` object and the choices' generations: one code for every reply."""
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(None, score_choices, self.pipeline, job, result)
        style = "chat" if not isinstance(job.prompt, str) else None
        infos = [confide_object(r, self.pipeline.skipped, self.calibrator, self.policy,
                                model=backend_model(self.backend), prompt_style=style)
                 for r in records]
        info = infos[0]
        if abstained is not None:
            info.update(decision="abstain", decided_on="early_abstention",
                        decision_reason=abstained)
        if self.claims is not None:  # long answers: the claim list with its confidences
            from confide.decisions.refining import claims_payload  # scipy: long answers only

            info["claims"] = await loop.run_in_executor(None, functools.partial(
                claims_payload, records[0], self.claims, backend=self.backend,
                calibrator=self.claims_calibrator))
        if info.get("decision") == "abstain":
            info["answer"] = records[0].greedy.text
        samples = [g.text for g in records[0].samples]  # the final answers, traces apart
        info["summary"] = summarize(samples, self.judge, item=job.item).to_dict() \
            if len(samples) >= 2 else None
        if job.body.n > 1:
            info["choices"] = [{"index": i, **each} for i, each in enumerate(infos)]
        if self.traffic is not None and job.record_id is not None:
            # before the reply goes out; never fails it. A record not queued is not named.
            queued = await self.traffic.store(records[0], info, record_id=job.record_id,
                                              prompt=job.prompt, request=logged_request(job))
            info["record_id"] = job.record_id if queued else None
        return info, [r.greedy for r in records]

    async def reply(self, job: Job, kind: str) -> JSONResponse | StreamingResponse:
        """Answer ``job`` as a ``kind`` (``chat`` or ``text``) completion."""
        if job.body.stream:
            return await self.stream(job, kind)
        # the policy reads the final answer's tokens alone (a trace is never judged)
        answer = AnswerStream(lambda update: None, early=job.early,
                              tags=job.spec.reasoning_tags) if job.early else None
        result = await self.generate(job, answer)
        info, gens = await self.conclude(job, result, answer.abstained if answer else None)
        choices = [choice(kind, i, g, job.body) for i, g in enumerate(gens)]
        if info.get("decision") == "abstain":
            set_text(kind, choices[0], self.abstain_message)
            choices[0]["logprobs"] = None
        out: dict[str, Any] = {
            "id": job.reply_id, "object": "chat.completion" if kind == "chat" else
            "text_completion", "created": int(time.time()), "model": self.served,
            "choices": choices, "system_fingerprint": None, "confide": info}
        counted = usage(self.backend, job.prompt, gens, job.spec)
        if counted is not None:
            out["usage"] = counted
        return JSONResponse(out, headers=record_header(info.get("record_id")))

    async def stream(self, job: Job, kind: str) -> StreamingResponse:
        if not self.upstream.can_stream:
            raise RequestError(400, f"the {self.backend.name} backend cannot stream; ask "
                                    "without streaming", param="stream")
        shape = StreamReply(kind, job.reply_id, int(time.time()), self.served, job.body)
        events = await event_stream(
            job, shape, generate=self.generate, conclude=self.conclude,
            abstain_message=self.abstain_message,
            usage=lambda gens: usage(self.backend, job.prompt, gens, job.spec),
            timeout=self.timeout,
            log_stream=self.streams.add)
        # the header comes before the record is stored: the last chunk's
        # confide.record_id confirms it (null when the record was dropped)
        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"cache-control": "no-cache",
                                          **record_header(job.record_id)})


@dataclass
class Job:
    """One request, ready to generate."""

    body: GenerationRequest
    item: Item
    prompt: Prompt
    spec: GenerationSpec
    seed: int
    early: EarlyAbstention | None
    reply_id: str = ""  # the reply's ``id`` (``chatcmpl-...``)
    record_id: str | None = None  # with ``--log-run``: the id of the record it is stored as


def request_early_abstention(body: GenerationRequest, default: EarlyAbstention | None
           ) -> EarlyAbstention | None:
    """The request's early-abstention policy: its own ``confide`` options over the server's."""
    own = body.confide
    if own is None or (own.early_abstain_below is None and own.early_abstain_after is None):
        return default
    below = own.early_abstain_below if own.early_abstain_below is not None else \
        (default.below if default else None)
    if below is None:
        raise RequestError(400, "confide.early_abstain_after needs early_abstain_below",
                            param="confide.early_abstain_below")
    after = own.early_abstain_after if own.early_abstain_after is not None else \
        (default.after if default else EarlyAbstention(below).after)
    return EarlyAbstention(below, after)


def logged_request(job: Job) -> dict[str, Any]:
    """What ``--log-run`` keeps of a request: the endpoint and the generation settings
    (never a header or a key)."""
    body = job.body
    return {"endpoint": "text" if isinstance(job.prompt, str) else "chat",
            "stream": bool(body.stream), "max_tokens": body.max_tokens, "n": body.n,
            "temperature": body.temperature, "top_p": body.top_p,
            "stop": list(body.stop_list()), "seed": job.seed, "reply_id": job.reply_id}


def score_choices(pipe: Pipeline, job: Job, result: GenerationResult) -> list[Record]:
    """Choice 0's record (the greedy answer) and, with ``n > 1``, each returned sample's,
    scored by the pipeline with the other samples as its company."""
    first = pipe.complete(job.item, result, seed=job.seed)
    records = [first]
    for sample in result.samples[:job.body.n - 1]:
        records.append(pipe.complete(job.item, GenerationResult(sample, result.samples),
                                     seed=job.seed))
    return records


class StreamLog:
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


def reply_id(kind: str) -> str:
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"


#: The response header naming the stored record of a reply (``--log-run``).
RECORD_HEADER = "X-Confide-Record-Id"


def record_header(record_id: str | None) -> dict[str, str]:
    """The reply's headers naming its stored record (none without one)."""
    return {RECORD_HEADER: record_id} if record_id else {}


def confide_object(record: Record, skipped: dict[str, str], calibrator: Calibrator | None,
                    policy: Policy | None, *, model: str | None = None,
                    prompt_style: str | None = None) -> dict[str, Any]:
    """The ``confide`` object of one choice. With a calibrator that keeps its provenance
    (:meth:`confide.decisions.calibration.Calibrator.calibrate`), ``calibration`` holds it
    and the warnings where this reply lies outside it (``model``: the served model;
    ``prompt_style``: ``"chat"`` for chat messages, unknown for a text prompt)."""
    info: dict[str, Any] = {
        "scored_choice": 0,
        "confidences": {k: finite_or_none(v) for k, v in record.scores.items()},
        "reasons": dict(record.score_errors),
        "skipped": dict(skipped),
        "calibrated": None,
        "decision": None,
    }
    trace = record.greedy.trace
    if trace is not None:  # a reasoning reply: which span each score read, and the trace
        info["spans"] = {k: SCORERS[k].span for k in record.scores if k in SCORERS}
        info["trace"] = {"n_tokens": trace.n_tokens,
                         "final_answer_missing": final_answer_missing(record.greedy),
                         "reason": missing_answer_reason(record.greedy)}
    if calibrator is not None:
        raw = record.scores.get(calibrator.scorer, math.nan)
        if math.isnan(raw):
            info["reasons"]["calibrated"] = f"no {calibrator.scorer} confidence to calibrate"
        else:
            info["calibrated"] = finite_or_none(calibrator.predict(raw))
        calibrate = getattr(calibrator, "calibrate", None)
        if callable(calibrate):
            info["calibration"] = json_safe(calibrate(
                raw, model=model, prompt_style=prompt_style,
                reason=record.score_errors.get(calibrator.scorer))[1])
    if policy is not None:
        info.update(decide(policy, record.scores, info["calibrated"]))
    return info


def choice(kind: str, index: int, gen: Generation, body: GenerationRequest) -> dict[str, Any]:
    """One choice of a reply: chat (``message``) or text completion (``text``)."""
    finish = "length" if gen.finish_reason == "length" else "stop"
    choice: dict[str, Any] = {"index": index, "finish_reason": finish, "logprobs": None}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": gen.text}
        if gen.trace is not None:  # a reasoning reply: the trace apart, as vLLM gives it
            choice["message"]["reasoning_content"] = gen.trace.text
    else:
        choice["text"] = gen.text
        if gen.trace is not None:
            choice["reasoning_content"] = gen.trace.text
    if body.wants_logprobs and gen.token_logprobs is not None:
        steps = [(token, float(gen.token_logprobs[t]), top_alternatives(gen, t, body.top_k))
                 for t, token in enumerate(gen.tokens)]
        choice["logprobs"] = (chat_logprobs(steps) if kind == "chat" else
                              text_logprobs(steps))
    return choice


def top_alternatives(gen: Generation, t: int, k: int) -> list[tuple[str, float]]:
    if not k or gen.top_logprobs is None or gen.top_tokens is None:
        return []
    return [(tok, float(lp)) for tok, lp in zip(gen.top_tokens[t][:k], gen.top_logprobs[t][:k])]


def set_text(kind: str, choice: dict[str, Any], text: str) -> None:
    """Replace a choice's answer (the abstention message); a trace that led to the answer
    withheld is withheld too (it is in ``confide.answer``'s record, not the reply)."""
    if kind == "chat":
        choice["message"]["content"] = text
        if "reasoning_content" in choice["message"]:
            choice["message"]["reasoning_content"] = None
    else:
        choice["text"] = text
        if "reasoning_content" in choice:
            choice["reasoning_content"] = None


def usage(backend: Backend, prompt: Prompt, gens: list[Generation],
          spec: GenerationSpec | None = None) -> dict[str, int] | None:
    """Token counts when the backend can count the prompt (a local model); else None. The
    prompt is counted as ``spec``'s generation read it (a reasoning run's in thinking mode)."""
    if not isinstance(backend, Tokenizes) or any(g.n_tokens == 0 and g.text for g in gens):
        return None
    thinking = spec is not None and spec.reasoning_tags is not None
    prompt_tokens = len(backend.encode(prompt, thinking=thinking))
    # a reasoning reply's trace tokens were generated too
    completion = sum(g.n_tokens + (g.trace.n_tokens if g.trace is not None else 0)
                     for g in gens)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}
