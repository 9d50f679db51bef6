"""The official OpenAI client with confidences: :func:`wrap`.

    >>> import openai, confide
    >>> client = confide.wrap(openai.OpenAI(base_url="http://127.0.0.1:8080/v1"))  # doctest: +SKIP
    >>> reply = client.chat.completions.create(model="m", messages=[...])          # doctest: +SKIP
    >>> reply.choices[0].message.content, reply.confide["confidences"]["msp"]      # doctest: +SKIP

The wrapped client is a copy of the caller's (:meth:`openai.OpenAI.copy`: the same
connection pool, base URL, key and retries; the caller's own client is left as it
was) whose ``chat.completions.create`` returns what it returned before, the same
:class:`~openai.types.chat.ChatCompletion` with the same choices, plus a
``confide`` attribute (:mod:`confide.integrations.scoring` draws it). The attribute
is a JSON-safe dict stored as the reply's extra field, so ``reply.model_dump()`` and
``reply.model_dump_json()`` carry it; a server's own ``confide`` field
(``confide serve``) moves to ``reply.confide["server"]``.

What the wrapper adds to a request, and only where the caller did not set it:
``logprobs=True`` and ``top_logprobs`` (default 10). A caller's ``logprobs=False``
is kept, and the scorers that read log-probabilities are then null with
``reply.confide["logprobs"]`` saying why, as for a server that returns none: the
scorers that need none still run (the sampling scorers, black-box, on the samples).
When a chosen scorer needs samples (``agreement``, ``semantic_entropy``, ...), the
wrapper draws them with a second request, the caller's with ``n`` set to the
samples and a temperature above 0 (the caller's, else 1.0), so the reply itself
keeps the caller's ``n`` and temperature; a server that returns fewer choices than
``n`` (llama.cpp's) is asked again for the rest, at most ``samples`` requests.

``stream=True``: the chunks pass through as the server sent them, in the same
:class:`openai.Stream` (or :class:`openai.AsyncStream`) object; once it is read to
its end, the stream's ``confide`` attribute holds the same object, built from the
streamed text and log-probabilities (a stream left early has none). With an
``openai`` package whose streams lack the private iterator this replaces, streams
pass through unscored (``stream.confide`` is never set).

Only ``chat.completions.create`` is scored; ``with_raw_response``, ``parse`` and the
other endpoints are the client's own.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from confide.core.errors import InvalidInputError
from confide.integrations.scoring import DEFAULT_TOP_LOGPROBS, Choice, Scoring, confide_object

__all__ = ["wrap"]

#: Request fields the sampling request drops: it is never streamed, and draws its own n.
_NOT_FOR_SAMPLES = ("stream", "stream_options", "n")


def wrap(client: Any, *, scorers: str | Sequence[str] = "free", samples: int | None = None,
         judge: str | None = None, top_logprobs: int = DEFAULT_TOP_LOGPROBS,
         temperature: float | None = None) -> Any:
    """An OpenAI client whose chat completions carry confidences.

    Parameters
    ----------
    client : openai.OpenAI or openai.AsyncOpenAI (Azure's clients included).
    scorers : scorer names (a list or one comma-separated text), ``"free"`` (default:
        the free scorers of the token log-probabilities) or ``"all"``; as
        :func:`confide.score_answers` takes them.
    samples : answers drawn per reply for the sampling scorers (default: the most any
        chosen scorer asks for; 0 when none needs samples).
    judge : equivalence judge of the sampling scorers (default: ``exact``).
    top_logprobs : alternatives asked per token when the caller does not set them
        (0 to 20).
    temperature : of the sampling request (default: the caller's when above 0, else 1.0).

    Returns
    -------
    A copy of ``client`` (same type) whose ``chat.completions.create`` returns the
    same reply with ``reply.confide``; see the module docstring.

    Raises
    ------
    InvalidInputError
        ``client`` is not an OpenAI client, or a setting is out of range (the field
        named); an unknown scorer raises UnknownNameError with suggestions.
    """
    import openai

    scoring = Scoring.of(scorers, samples=samples, judge=judge, top_logprobs=top_logprobs,
                         temperature=temperature)
    if isinstance(client, openai.AsyncOpenAI):
        make: Callable[[Any, Scoring], Any] = _async_create
    elif isinstance(client, openai.OpenAI):
        make = _sync_create
    else:
        raise InvalidInputError(f"wrap takes an openai.OpenAI or openai.AsyncOpenAI client, "
                                f"not {type(client).__name__}; for a LangChain chat model "
                                "use confide.integrations.langchain.ConfidenceChatModel",
                                field="client")
    wrapped = client.copy()
    completions = wrapped.chat.completions  # a cached resource: the attribute below stays
    original = completions.create
    # the instance attribute shadows the method (mypy refuses a plain assignment to one)
    setattr(completions, "create", functools.wraps(original)(make(original, scoring)))  # noqa: B010
    return wrapped


# -- the request -----------------------------------------------------------------------------


def _unset(value: Any) -> bool:
    import openai

    return value is None or isinstance(value, (openai.NotGiven, openai.Omit))


@dataclass
class _Request:
    """The caller's request as sent: with what the wrapper added, and why there may be no
    log-probabilities."""

    caller: dict[str, Any]
    sent: dict[str, Any]
    added: dict[str, Any]
    logprobs: bool

    @classmethod
    def of(cls, kwargs: dict[str, Any], scoring: Scoring) -> _Request:
        sent, added = dict(kwargs), dict[str, Any]()
        if _unset(kwargs.get("logprobs")):
            sent["logprobs"] = added["logprobs"] = True
        logprobs = sent["logprobs"] is True
        if logprobs and _unset(kwargs.get("top_logprobs")):
            sent["top_logprobs"] = added["top_logprobs"] = scoring.top_logprobs
        return cls(kwargs, sent, added, logprobs)

    def sampling(self, scoring: Scoring, want: int, round_: int) -> dict[str, Any]:
        """The request that draws ``want`` more samples (the ``round_``-th such request:
        a caller's seed moves with it, so a repeated request is not the same draw)."""
        ask = {k: v for k, v in self.sent.items() if k not in _NOT_FOR_SAMPLES}
        ask["n"] = want
        ask["temperature"] = scoring.sample_temperature(self.caller.get("temperature"))
        seed = self.caller.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            ask["seed"] = seed + 1 + round_
        return ask

    def no_logprobs(self, choices: Sequence[Choice]) -> str | None:
        if not self.logprobs:
            return "the request set logprobs=False"
        if all(c.logprobs is None for c in choices if c.text is not None):
            return ("the server returned no log-probabilities (asked with logprobs=True); "
                    "only the scorers that need none ran")
        return None

    def requested(self, scoring: Scoring) -> dict[str, Any]:
        out = dict(self.added)
        if scoring.samples:
            out["n"] = scoring.samples
            out["temperature"] = scoring.sample_temperature(self.caller.get("temperature"))
        return out


# -- a reply ---------------------------------------------------------------------------------


def _logprobs(logprobs: Any) -> list[Any] | None:
    content = getattr(logprobs, "content", None) if logprobs is not None else None
    if content is None:
        return None
    return [e.model_dump() if hasattr(e, "model_dump") else e for e in content]


def _choices(response: Any) -> list[Choice]:
    ordered = sorted(response.choices, key=lambda c: c.index)
    return [Choice(c.message.content, _logprobs(c.logprobs)) for c in ordered]


def _server_object(obj: Any) -> Any:
    return (getattr(obj, "model_extra", None) or {}).get("confide")


def _attach(response: Any, scoring: Scoring, request: _Request, choices: list[Choice],
            samples: list[Choice], rounds: int, server: Any) -> None:
    value = confide_object(scoring, request.caller.get("messages"), choices, samples=samples,
                           requested=request.requested(scoring), sample_requests=rounds,
                           no_logprobs=request.no_logprobs(choices), server=server)
    response.confide = value  # an extra field: model_dump carries it


def _is_completion(response: Any) -> bool:
    from openai.types.chat import ChatCompletion

    return isinstance(response, ChatCompletion)


# -- the streamed reply ----------------------------------------------------------------------


@dataclass
class _Streamed:
    """The choices of a stream as its chunks arrive: text, log-probabilities, and the
    server's last ``confide`` field."""

    texts: dict[int, list[str]] = field(default_factory=dict)
    logprobs: dict[int, list[Any] | None] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    server: Any = None

    def add(self, chunk: Any) -> None:
        self.server = _server_object(chunk) or self.server
        for choice in getattr(chunk, "choices", None) or []:
            i = choice.index
            self.seen.add(i)
            content = getattr(choice.delta, "content", None)
            if content is not None:
                self.texts.setdefault(i, []).append(content)
            entries = _logprobs(choice.logprobs)
            if entries is not None:
                kept = self.logprobs.get(i) or []
                self.logprobs[i] = kept + entries

    def choices(self) -> list[Choice]:
        return [Choice("".join(self.texts[i]) if i in self.texts else None,
                       self.logprobs.get(i)) for i in sorted(self.seen)]


# -- sync ------------------------------------------------------------------------------------


def _draw(create: Callable[..., Any], request: _Request, scoring: Scoring
          ) -> tuple[list[Choice], int]:
    drawn: list[Choice] = []
    rounds = 0
    while len(drawn) < scoring.samples and rounds < scoring.samples:
        reply = create(**request.sampling(scoring, scoring.samples - len(drawn), rounds))
        rounds += 1
        got = _choices(reply)
        if not got:
            break
        drawn += got
    return drawn[:scoring.samples], rounds


def _sync_create(create: Callable[..., Any], scoring: Scoring) -> Callable[..., Any]:
    def scored_create(**kwargs: Any) -> Any:
        request = _Request.of(kwargs, scoring)
        response = create(**request.sent)
        if request.sent.get("stream") is True:
            if hasattr(response, "_iterator"):
                response._iterator = _sync_chunks(response._iterator, response, create,
                                                  request, scoring)
            return response
        if not _is_completion(response):
            return response
        samples, rounds = _draw(create, request, scoring)
        _attach(response, scoring, request, _choices(response), samples, rounds,
                _server_object(response))
        return response

    return scored_create


def _sync_chunks(chunks: Iterator[Any], stream: Any, create: Callable[..., Any],
                 request: _Request, scoring: Scoring) -> Iterator[Any]:
    streamed = _Streamed()
    for chunk in chunks:
        streamed.add(chunk)
        yield chunk
    samples, rounds = _draw(create, request, scoring)
    _attach(stream, scoring, request, streamed.choices(), samples, rounds, streamed.server)


# -- async -----------------------------------------------------------------------------------


async def _adraw(create: Callable[..., Awaitable[Any]], request: _Request, scoring: Scoring
                 ) -> tuple[list[Choice], int]:
    drawn: list[Choice] = []
    rounds = 0
    while len(drawn) < scoring.samples and rounds < scoring.samples:
        reply = await create(**request.sampling(scoring, scoring.samples - len(drawn),
                                                rounds))
        rounds += 1
        got = _choices(reply)
        if not got:
            break
        drawn += got
    return drawn[:scoring.samples], rounds


def _async_create(create: Callable[..., Awaitable[Any]], scoring: Scoring
                  ) -> Callable[..., Awaitable[Any]]:
    import asyncio

    async def scored_create(**kwargs: Any) -> Any:
        request = _Request.of(kwargs, scoring)
        response = await create(**request.sent)
        if request.sent.get("stream") is True:
            if hasattr(response, "_iterator"):
                response._iterator = _async_chunks(response._iterator, response, create,
                                                   request, scoring)
            return response
        if not _is_completion(response):
            return response
        samples, rounds = await _adraw(create, request, scoring)
        # scoring reads no network but may embed or judge: off the event loop
        await asyncio.to_thread(_attach, response, scoring, request, _choices(response),
                                samples, rounds, _server_object(response))
        return response

    return scored_create


async def _async_chunks(chunks: AsyncIterator[Any], stream: Any,
                        create: Callable[..., Awaitable[Any]], request: _Request,
                        scoring: Scoring) -> AsyncIterator[Any]:
    import asyncio

    streamed = _Streamed()
    async for chunk in chunks:
        streamed.add(chunk)
        yield chunk
    samples, rounds = await _adraw(create, request, scoring)
    await asyncio.to_thread(_attach, stream, scoring, request, streamed.choices(), samples,
                            rounds, streamed.server)
