"""Server-sent events for ``stream: true``: OpenAI's chunk format with confidences added.

A streamed chat reply is a sequence of ``data: {json}`` events, ended by
``data: [DONE]``:

1. one chunk per choice with ``delta.role = "assistant"`` (chat only);
2. one chunk per generated token, ``choices[0]`` holding the text that is safe
   to send (:func:`confide.pipeline.streaming.safe_text`) and, when asked for, its
   log-probabilities in the API's shape; the chunk's ``confide`` object holds the
   token's ``logprob``, ``entropy`` and ``running_confidence``
   (:func:`confide.pipeline.streaming.running_confidence`);
3. a last chunk with every choice's ``finish_reason``, the rest of each answer,
   and ``confide``: the same object a reply that is not streamed carries (scores,
   calibrated probability, decision, summary, per-choice figures). With early
   abstention, choice 0's last delta is the abstention message and
   ``confide.decision_reason`` says why it stopped; when a policy abstains only
   after the full answer was sent, ``confide.abstain_message`` holds the message.

Early abstention and what a client has seen: a token of choice 0 is sent only
once the running confidence has been checked with it
(:class:`confide.pipeline.streaming.AnswerStream`): the first ``after - 1`` tokens wait
for token ``after`` and go out together with it when it passes, every later
token goes out after its own check, and the token on which the policy fires is
never sent. So when the policy fires at token ``after``, nothing of the answer
was sent and the message is the whole content; when it fires at token ``t``
later, the client has received the first ``t - 1`` tokens (each passed the
check), followed by ``"\n\n"`` and the message. The last chunk's
``confide.sent_before_abstention`` holds exactly that sent text ("" when nothing
was sent), so a client can withdraw it. An answer shorter than ``after`` tokens
is sent whole when it ends. Waiting for the check delays token ``t < after`` by
``after - t`` token times (the first by ``after - 1``) and no later token (figures
in :mod:`confide.pipeline.streaming`); the wait never trips the timeout for the next
token, since the whole answer is held to the same timeout.

A reasoning reply (``confide serve --reasoning-tags``, or an upstream that sends its
trace apart) streams its trace as ``delta.reasoning_content`` (the text completions'
choice: ``reasoning_content``) and its final answer as ``delta.content``; each token's
``confide`` object says which span it belongs to (``span``: ``trace`` or ``answer``) and
its running confidence is that span's. Early abstention and its holdback read the
answer's tokens alone (:class:`confide.pipeline.streaming.AnswerStream`): the trace goes
out as it comes; after an abstention the rest of the trace is not sent.

A failure after the reply has begun (the upstream cut the stream, sent a
malformed chunk, or went silent for longer than the timeout) ends the stream
with an event ``data: {"error": {...}}`` in the API's error shape, which the
official clients raise as an error; a failure before the first token gets the
ordinary HTTP error (502, 504) instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from confide.core.errors import BackendTimeout
from confide.core.jsonsafe import finite_or_none
from confide.core.records import Generation
from confide.pipeline.streaming import AnswerStream, TokenUpdate
from confide.serve.models import GenerationRequest, error_body

__all__ = ["StreamReply", "chat_logprobs", "event_stream", "text_logprobs"]

log = logging.getLogger(__name__)

Step = tuple[str, float, list[tuple[str, float]]]  # token, log-probability, top alternatives


def chat_logprobs(steps: list[Step]) -> dict[str, Any]:
    """Chat completions' ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    content = [{"token": token, "logprob": lp, "bytes": list(token.encode()),
                "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}
                                 for t, v in top]}
               for token, lp, top in steps]
    return {"content": content, "refusal": None}


def text_logprobs(steps: list[Step], offset: int = 0) -> dict[str, Any]:
    """Text completions' (legacy) ``logprobs``: parallel lists and a dict of alternatives.

    >>> text_logprobs([("Par", -0.1, [("Par", -0.1)]), ("is", -0.2, [])])["text_offset"]
    [0, 3]
    """
    offsets = []
    for token, _, _ in steps:
        offsets.append(offset)
        offset += len(token)
    return {"tokens": [s[0] for s in steps], "token_logprobs": [s[1] for s in steps],
            "top_logprobs": [dict(top) for _, _, top in steps], "text_offset": offsets}


@dataclass
class StreamReply:
    """Builds the chunks of one streamed reply (``kind``: ``"chat"`` or ``"text"``)."""

    kind: str
    id: str
    created: int
    model: str
    body: GenerationRequest

    def _event(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        chunk = {"id": self.id,
                 "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
                 "created": self.created, "model": self.model, "system_fingerprint": None,
                 "choices": choices, **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    def _choice(self, index: int, text: str, finish: str | None,
                logprobs: dict[str, Any] | None = None, *, trace: str = "",
                in_trace: bool = False) -> dict[str, Any]:
        """One choice of a chunk: ``text`` of the answer, ``trace`` of the reasoning
        (``in_trace``: a trace token's chunk, whose delta is the trace's alone)."""
        choice: dict[str, Any] = {"index": index, "logprobs": logprobs, "finish_reason": finish}
        if self.kind == "chat":
            delta: dict[str, Any] = {}
            if trace or in_trace:
                delta["reasoning_content"] = trace
            if text or (finish is None and not in_trace):
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["text"] = text
            if trace or in_trace:
                choice["reasoning_content"] = trace
        return choice

    def start(self) -> str | None:
        if self.kind != "chat":
            return None
        return self._event([{"index": i, "delta": {"role": "assistant", "content": ""},
                             "logprobs": None, "finish_reason": None}
                            for i in range(self.body.n)])

    def token(self, update: TokenUpdate, offset: int) -> str:
        logprobs = None
        if self.body.wants_logprobs and update.logprob is not None:
            step = [(update.token, float(update.logprob), list(update.top[:self.body.top_k]))]
            logprobs = chat_logprobs(step) if self.kind == "chat" else text_logprobs(step, offset)
        return self._event(
            [self._choice(update.choice, update.delta, None, logprobs,
                          trace=update.trace_delta, in_trace=update.span == "trace")],
            confide={"index": update.choice, "token": update.token,
                     "logprob": finite_or_none(update.logprob),
                     "entropy": finite_or_none(update.entropy),
                     "running_confidence": finite_or_none(update.running_confidence),
                     "n_tokens": update.n_tokens, "span": update.span})

    def end(self, info: dict[str, Any], gens: list[Generation], answer: AnswerStream,
            abstain_message: str, usage: dict[str, int] | None) -> str:
        choices = []
        for i, gen in enumerate(gens):
            rest = answer.closing_delta(i, gen.text)
            withheld = i == 0 and (answer.abstained is not None
                                   or info.get("decision") == "abstain")
            trace = "" if gen.trace is None or withheld else \
                answer.closing_trace_delta(i, gen.trace.text)
            if i == 0 and answer.abstained is not None:
                sent = answer.choices[0].sent
                info["sent_before_abstention"] = sent
                rest = ("\n\n" if sent else "") + abstain_message
            elif i == 0 and info.get("decision") == "abstain":
                info["abstain_message"] = abstain_message
            choices.append(self._choice(i, rest, "length" if gen.finish_reason == "length"
                                        else "stop", trace=trace))
        extra: dict[str, Any] = {"confide": info}
        include = self.body.stream_options is not None and self.body.stream_options.include_usage
        if usage is not None and include:
            extra["usage"] = usage
        return self._event(choices, **extra)


_END = object()


async def event_stream(job: Any, shape: StreamReply, *,
                       generate: Callable[[Any, Any], Awaitable[Any]],
                       conclude: Callable[[Any, Any, str | None], Awaitable[Any]],
                       abstain_message: str,
                       usage: Callable[[list[Generation]], dict[str, int] | None],
                       timeout: float, log_stream: Callable[[dict[str, Any]], None]
                       ) -> AsyncIterator[str]:
    """Start generating and wait for the first token; return the events of the reply.

    Errors before the first token propagate (the caller answers with an HTTP
    error). ``generate(job, on_token)`` runs the model; ``conclude(job, result,
    abstained)`` gives the final ``confide`` object and the choices' generations.
    """
    loop = asyncio.get_running_loop()
    updates: asyncio.Queue[Any] = asyncio.Queue()

    def sink(update: TokenUpdate) -> None:  # called on the model's thread
        loop.call_soon_threadsafe(updates.put_nowait, update)

    answer = AnswerStream(sink, n_choices=job.body.n, stop=job.spec.stop, early=job.early,
                          tags=job.spec.reasoning_tags)
    task = asyncio.ensure_future(generate(job, answer))

    def ended(_: Any = None) -> None:  # on the loop, after every token the model sent
        for held in answer.finish():  # a short answer the policy never judged
            updates.put_nowait(held)
        updates.put_nowait(_END)

    task.add_done_callback(lambda _: loop.call_soon_threadsafe(ended))

    outcome = ["cancelled"]

    def record(_: Any = None) -> None:
        log_stream({"id": shape.id, "outcome": outcome[0], "tokens": answer.tokens,
                    "max_tokens": job.spec.max_new_tokens})

    try:
        first = await asyncio.wait_for(updates.get(), timeout)
    except asyncio.TimeoutError as exc:
        answer.cancel()
        task.cancel()
        raise BackendTimeout(f"no token within {timeout:g} s") from exc
    except BaseException:
        answer.cancel()
        raise
    if first is _END:
        task.result()  # a failure before any token: the caller's HTTP error

    async def events() -> AsyncIterator[str]:
        offsets = [0] * job.body.n
        try:
            start = shape.start()
            if start is not None:
                yield start
            got = first
            while got is not _END:
                yield shape.token(got, offsets[got.choice])
                offsets[got.choice] += len(got.token)
                try:
                    got = await asyncio.wait_for(updates.get(), timeout)
                except asyncio.TimeoutError as exc:
                    raise BackendTimeout(f"the model sent no token for {timeout:g} s") from exc
            info, gens = await conclude(job, task.result(), answer.abstained)
            yield shape.end(info, gens, answer, abstain_message, usage(gens))
            yield "data: [DONE]\n\n"
            outcome[0] = "abstained" if answer.abstained else "finished"
        except Exception as exc:  # noqa: BLE001 - after the 200, a failure is an error event
            outcome[0] = "failed"
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            log.warning("stream %s failed: %s", shape.id, message)
            error = error_body(message, kind=getattr(exc, "kind", "server_error"))
            yield f"data: {json.dumps(error)}\n\n"
        finally:
            answer.cancel()  # a client that went away stops the model at its next token
            if task.done():
                record()
            else:
                if outcome[0] == "failed":
                    task.cancel()
                task.add_done_callback(record)

    return events()
