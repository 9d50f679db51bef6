"""The ``openai`` backend: any OpenAI-compatible chat-completions server over HTTP.

Hosted APIs, vLLM's server and llama.cpp's server all speak this protocol. Each
prompt becomes one greedy request (``temperature=0``) and, when samples are
wanted, one request with ``n`` samples; both ask for ``logprobs`` and
``top_logprobs`` when the server offers them. Servers that return fewer than
``n`` choices (llama.cpp ignores ``n``) are asked for the rest one sample at a
time, seeded ``seed + j``, so what an item gets never depends on its
neighbours.

What the server gives decides :attr:`OpenAIBackend.capabilities`:
``token_logprobs`` and ``top_logprobs`` when it returns log-probabilities
(found by one small probe request unless ``logprobs`` is set), and then
``token_entropies`` as **lower bounds from the top-k** alternatives, by the rule
every path follows (:mod:`confide.backends.topk`: a saved reply imported with
``confide score`` gets the same), said in :meth:`OpenAIBackend.config`
(``approximate``); never ``token_kl_uniform``, ``token_renyi_uniform`` or
``token_fisher_rao_uniform``: an API's top-k alternatives are not the full
next-token distribution; nor ``unconditioned_logprobs`` or ``attentions``
(``pmi``, ``cpmi``, ``rauq``, ``attention_score``): the protocol cannot score
given tokens or return attention weights. The runner skips scorers that need
more and stores which and why. Each choice of a reply is read by
:func:`~confide.backends.openai_logprobs.generation_from_choice`, whose notes give
the field map.

Requests run concurrently up to ``concurrency``, each with a ``timeout``.
Timeouts, connection errors, 5xx answers, 429 answers (waiting what
``Retry-After`` asks), and truncated or malformed bodies are retried with
exponential backoff up to ``max_retries`` times; other 4xx answers are not.
A prompt that still fails comes back as ``GenerationResult(greedy=None,
error=...)``: the runner records it as a failure and a resumed run retries it.

A reasoning model's trace that the server keeps apart (``message.reasoning_content`` or
``message.reasoning``, and the ``delta`` fields of the same names in a stream) is the
answer's :attr:`~confide.core.records.Generation.trace`, whatever the run's setting
(:func:`~confide.backends.openai_logprobs.generation_from_choice`, ``reasoning=True``):
the ``content`` alone is the final answer. A ``<think>`` block inside ``content`` is
split by the pipeline's rule (``reasoning_tags``), as every backend's answers are; a
reasoning pipeline counts the trace (:attr:`~confide.core.needs.Need.TRACE`) among what
any backend gives, this one included.

With ``on_token`` (streaming) the greedy answer is asked with ``stream: true``
and each chunk's tokens are reported as they arrive, with the server's
log-probabilities when it sends them (no entropy while streaming; the assembled
answer gets its bounds); the samples are asked as usual. A streamed request is not
retried (its tokens were already handed on): a stream cut midway, a malformed
chunk or an error event raises :class:`~confide.core.errors.BackendError`, a
silence longer than ``timeout`` :class:`~confide.core.errors.BackendTimeout`. When
``on_token`` returns a reason the response is closed, which stops the server.

The API key is read from the environment variable named by ``api_key_env`` and
sent only in the ``Authorization`` header: it is never logged, never part of
:meth:`OpenAIBackend.config` (which is stored with a run), and is masked in
every error message built from a server's reply.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from confide.backends.base import (
    Backend,
    GeneratesAsync,
    GenerationResult,
    GenerationSpec,
    Prompt,
    Streams,
    TokenCallback,
    TokenEvent,
)
from confide.backends.openai_logprobs import (
    REASONING_FIELDS,
    MalformedResponse,
    generation_from_choice,
)
from confide.backends.topk import TOPK_STATISTICS, topk_entropies
from confide.core.errors import BackendError, BackendTimeout, InvalidInputError, RateLimited
from confide.core.needs import Need
from confide.core.reasoning import DEFAULT_TAGS, with_trace
from confide.core.records import Generation, Message

__all__ = ["OpenAIBackend", "endpoint_url"]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_TOP_LOGPROBS = 20  # the OpenAI API's limit on top_logprobs


class _Secret:
    """Holds the API key; its repr never shows it (tracebacks print locals)."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value or None

    @property
    def value(self) -> str | None:
        return self._value

    def mask(self, text: str) -> str:
        return text.replace(self._value, "***") if self._value else text

    def __repr__(self) -> str:
        return "<secret>" if self._value else "<no secret>"


class _BearerAuth(httpx.Auth):
    def __init__(self, secret: _Secret) -> None:
        self._secret = secret

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._secret.value:
            request.headers["Authorization"] = f"Bearer {self._secret.value}"
        yield request


@dataclass
class _Session:
    client: httpx.AsyncClient
    limit: asyncio.Semaphore


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from synchronous code, also when an event loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # e.g. inside a notebook
        return pool.submit(asyncio.run, coro).result()


def endpoint_url(base_url: str, endpoint: str) -> str:
    """``base_url`` with ``/endpoint`` added to its path; a query string is kept.

    >>> endpoint_url("https://x.example/openai/v1?api-version=2024-06-01", "chat/completions")
    'https://x.example/openai/v1/chat/completions?api-version=2024-06-01'
    """
    parts = urlsplit(base_url)
    path = f"{parts.path.rstrip('/')}/{endpoint}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def _public_url(url: str) -> str:
    """The URL without user:password, query or fragment (safe to store and print)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds asked by a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _as_messages(prompt: Prompt) -> list[Message]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]


class OpenAIBackend(Backend, Streams, GeneratesAsync):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Parameters
    ----------
    model : the model name the server expects (``"gpt-4o-mini"``, a vLLM model id, ...).
    base_url : the API root, ending in ``/v1`` (default: ``$OPENAI_BASE_URL``, else
        the OpenAI API).
    api_key_env : name of the environment variable holding the API key (default
        ``OPENAI_API_KEY``); unset means no ``Authorization`` header (local servers).
    logprobs : ``"auto"`` (one probe request finds out), ``True`` or ``False``.
    concurrency : most requests in flight at once.
    timeout : seconds one request may take, from sending to the last byte.
    max_retries : retries after the first attempt (timeouts, 429, 5xx, bad bodies).
    backoff, max_backoff : the first retry waits about ``backoff`` seconds, doubling
        each time up to ``max_backoff``; a ``Retry-After`` header overrides it (up to
        ``max_retry_after``).
    batch_size : accepted for the runner's common options; requests are bounded by
        ``concurrency`` (the runner hands over ``batch_size`` prompts at a time).
    """

    name = "openai"
    has_chat_template = True
    streaming = True  # generate(..., on_token=) streams the greedy answer

    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY",
                 logprobs: bool | Literal["auto"] = "auto", concurrency: int = 8,
                 timeout: float = 60.0, max_retries: int = 4, backoff: float = 0.5,
                 max_backoff: float = 30.0, max_retry_after: float = 120.0,
                 batch_size: int | None = None) -> None:
        if not model or not model.strip():
            raise InvalidInputError("give the model name the server expects", field="model")
        url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise InvalidInputError(f"{_public_url(url)!r} is not an http(s) URL",
                                    field="base_url")
        if not concurrency >= 1:
            raise InvalidInputError(f"must be at least 1, got {concurrency!r}",
                                    field="concurrency")
        if not timeout > 0:
            raise InvalidInputError(f"must be positive, got {timeout!r}", field="timeout")
        if not max_retries >= 0:
            raise InvalidInputError(f"must be 0 or more, got {max_retries!r}",
                                    field="max_retries")
        if not (backoff >= 0 and max_backoff >= 0 and max_retry_after >= 0):
            raise InvalidInputError("must be 0 or more", field="backoff")
        if logprobs not in (True, False, "auto"):
            raise InvalidInputError(f"must be true, false or 'auto', got {logprobs!r}",
                                    field="logprobs")
        self.model = model
        self.base_url = url
        self.api_key_env = api_key_env
        self._secret = _Secret(os.environ.get(api_key_env))
        self.concurrency = int(concurrency)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_retry_after = float(max_retry_after)
        self.batch_size = batch_size
        self._logprobs: bool | None = None if logprobs == "auto" else bool(logprobs)
        self._shared: _Session | None = None

    def __repr__(self) -> str:
        return f"OpenAIBackend(model={self.model!r}, base_url={_public_url(self.base_url)!r})"

    # -- identity and capabilities -------------------------------------------------

    @property
    def logprobs(self) -> bool:
        """Whether the server returns log-probabilities (probed once if not set)."""
        if self._logprobs is None:
            self._logprobs = _run_sync(self.aprobe())
        return self._logprobs

    @property
    def capabilities(self) -> frozenset[Need]:  # type: ignore[override]
        caps = {Need.SAMPLES, Need.EXTRA_PROMPT}
        if self.logprobs:
            caps |= TOPK_STATISTICS  # entropies: lower bounds from the top-k
        return frozenset(caps)

    def config(self) -> dict[str, Any]:
        """The model's identity, stored with a run: no key, no credentials in the URL;
        with log-probabilities, which statistics are bounds (``approximate``)."""
        config: dict[str, Any] = {"backend": self.name, "model": self.model,
                                  "base_url": _public_url(self.base_url),
                                  "logprobs": self.logprobs}
        if self.logprobs:
            config["approximate"] = ("token_entropies: lower bounds from the top-k "
                                     "log-probabilities")
        return config

    async def aprobe(self) -> bool:
        """Ask for one token with log-probabilities; True if the server returned them."""
        if self._logprobs is not None:
            return self._logprobs
        payload = {"model": self.model, "messages": [{"role": "user", "content": "Hi"}],
                   "max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 1}
        async with self._session() as session:
            try:
                data = await self._post(session, payload, lambda d: d)
            except BackendError as exc:
                if "HTTP 400" in str(exc) or "HTTP 422" in str(exc):  # logprobs refused
                    self._logprobs = False
                    return False
                raise
        choices = data.get("choices") or [{}]
        lp = choices[0].get("logprobs") if isinstance(choices[0], dict) else None
        self._logprobs = bool(isinstance(lp, dict) and lp.get("content"))
        log.info("%s %s log-probabilities", _public_url(self.base_url),
                 "returns" if self._logprobs else "does not return")
        return self._logprobs

    # -- sessions --------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            auth=_BearerAuth(self._secret), timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=self.concurrency,
                                max_keepalive_connections=self.concurrency))

    async def aopen(self) -> None:
        """Keep one client open across calls (a server calls this at start-up)."""
        if self._shared is None:
            self._shared = _Session(self._client(), asyncio.Semaphore(self.concurrency))

    async def aclose(self) -> None:
        if self._shared is not None:
            await self._shared.client.aclose()
            self._shared = None

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[_Session]:
        if self._shared is not None:
            yield self._shared
            return
        async with self._client() as client:
            yield _Session(client, asyncio.Semaphore(self.concurrency))

    # -- generation ------------------------------------------------------------------

    def generate(self, prompts: list[Prompt], spec: GenerationSpec, seeds: list[int], *,
                 on_token: TokenCallback | None = None) -> list[GenerationResult]:
        """One result per prompt, in input order; a failed prompt has ``greedy=None``
        and ``error`` set (it is never left out)."""
        return _run_sync(self.agenerate(prompts, spec, seeds, on_token=on_token))

    async def agenerate(self, prompts: list[Prompt], spec: GenerationSpec,
                        seeds: list[int], *, on_token: TokenCallback | None = None
                        ) -> list[GenerationResult]:
        """The asynchronous form of :meth:`generate`."""
        if len(prompts) != len(seeds):
            raise InvalidInputError(f"{len(prompts)} prompts but {len(seeds)} seeds",
                                    field="seeds")
        if self._logprobs is None:
            await self.aprobe()
        async with self._session() as session:
            return list(await asyncio.gather(
                *(self._generate_safely(session, p, spec, s, on_token, i)
                  for i, (p, s) in enumerate(zip(prompts, seeds)))))

    async def agenerate_one(self, prompt: Prompt, spec: GenerationSpec, seed: int, *,
                            on_token: TokenCallback | None = None) -> GenerationResult:
        """One prompt; raises :class:`~confide.core.errors.BackendError` (or a subclass) on failure.
        """
        if self._logprobs is None:
            await self.aprobe()
        async with self._session() as session:
            return await self._generate(session, prompt, spec, seed, on_token)

    async def _generate_safely(self, session: _Session, prompt: Prompt, spec: GenerationSpec,
                               seed: int, on_token: TokenCallback | None = None,
                               index: int = 0) -> GenerationResult:
        try:
            return await self._generate(session, prompt, spec, seed, on_token, index)
        except BackendError as exc:
            message = self._secret.mask(f"{type(exc).__name__}: {exc}")
            log.warning("a prompt failed: %s", message)
            return GenerationResult(greedy=None, error=message)

    async def _generate(self, session: _Session, prompt: Prompt, spec: GenerationSpec,
                        seed: int, on_token: TokenCallback | None = None,
                        index: int = 0) -> GenerationResult:
        messages = _as_messages(prompt)

        def parse(data: Any) -> list[Generation]:
            return self._parse(data, spec)

        async def greedy() -> Generation | None:
            if not spec.greedy:
                return None
            payload = self._payload(messages, spec, temperature=0.0, n=1, seed=seed)
            if on_token is not None:
                return await self._stream(session, payload, spec, on_token, index)
            return (await self._post(session, payload, parse))[0]

        async def samples() -> list[Generation]:
            n = spec.n_samples
            if not n:
                return []
            payload = self._payload(messages, spec, temperature=spec.temperature, n=n,
                                    seed=seed, top_p=spec.top_p)
            gens = (await self._post(session, payload, parse))[:n]
            while len(gens) < n:  # the server ignored n: one seeded request per sample
                payload = self._payload(messages, spec, temperature=spec.temperature, n=1,
                                        seed=seed + len(gens), top_p=spec.top_p)
                gens += (await self._post(session, payload, parse))[:1]
            return gens

        # wait for both before raising, so no request outlives the session it runs in
        first, rest = await asyncio.gather(greedy(), samples(), return_exceptions=True)
        for outcome in (first, rest):
            if isinstance(outcome, BaseException):
                raise outcome
        return GenerationResult(greedy=first, samples=rest)  # type: ignore[arg-type]

    def _payload(self, messages: list[Message], spec: GenerationSpec, *, temperature: float,
                 n: int, seed: int, top_p: float | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "messages": messages,
                                   "max_tokens": spec.max_new_tokens,
                                   "temperature": temperature, "seed": seed % 2**31}
        if n != 1:
            payload["n"] = n
        if top_p is not None and top_p < 1.0:
            payload["top_p"] = top_p
        if spec.stop:
            payload["stop"] = list(spec.stop)[:4]  # the API's limit
        if self.logprobs:
            payload["logprobs"] = True
            k = min(spec.top_k_alternatives, MAX_TOP_LOGPROBS)
            if k:
                payload["top_logprobs"] = k
        return payload

    # -- one HTTP request with retries -------------------------------------------------

    def _delay(self, attempt: int) -> float:
        """Exponential backoff with jitter: about ``backoff * 2**attempt``, capped."""
        base = min(self.max_backoff, self.backoff * 2 ** attempt)
        return base * (0.5 + random.random() / 2)

    async def _post(self, session: _Session, payload: dict[str, Any],
                    parse: Callable[[Any], T]) -> T:
        """POST one request; retry what can be retried; return ``parse(json)``."""
        url = endpoint_url(self.base_url, "chat/completions")
        shown = _public_url(url)
        attempts = self.max_retries + 1
        failure: BackendError = BackendError("no attempt made")
        for attempt in range(attempts):
            wait: float | None = None
            try:
                async with session.limit:
                    response = await asyncio.wait_for(session.client.post(url, json=payload),
                                                      self.timeout)
            except (asyncio.TimeoutError, httpx.TimeoutException):
                failure = BackendTimeout(f"{shown}: no answer within {self.timeout:g} s")
            except httpx.TransportError as exc:
                failure = BackendError(
                    f"{shown}: {type(exc).__name__}: {self._secret.mask(str(exc)) or 'no detail'}")
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return parse(response.json())
                    except ValueError as exc:  # bad JSON, or a MalformedResponse
                        failure = BackendError(f"{shown}: unusable reply: {self._short(exc)}")
                elif status == 429:
                    wait = _retry_after(response)
                    failure = RateLimited(f"{shown}: HTTP 429 (rate limited): "
                                          f"{self._short(response.text)}")
                    if wait is not None:
                        wait = min(wait, self.max_retry_after)
                elif status >= 500:
                    failure = BackendError(f"{shown}: HTTP {status}: {self._short(response.text)}")
                else:
                    hint = (f"; is ${self.api_key_env} set to a valid key?"
                            if status in (401, 403) else "")
                    raise BackendError(f"{shown}: HTTP {status}: "
                                       f"{self._short(response.text)}{hint}")
            if attempt + 1 == attempts:
                break
            delay = wait if wait is not None else self._delay(attempt)
            log.warning("%s; retrying in %.2f s (attempt %d of %d)", failure, delay,
                        attempt + 2, attempts)
            await asyncio.sleep(delay)
        raise type(failure)(f"{failure} (gave up after {attempts} attempts)")

    async def _stream(self, session: _Session, payload: dict[str, Any], spec: GenerationSpec,
                      on_token: TokenCallback, index: int) -> Generation:
        """One streamed request: report each token as it arrives; the assembled answer."""
        url = endpoint_url(self.base_url, "chat/completions")
        shown = _public_url(url)
        pieces: list[str] = []
        thoughts: list[str] = []  # the trace's deltas (reasoning_content), when it sends any
        entries: list[Any] = []
        finish: str | None = None
        try:
            async with session.limit, session.client.stream(
                    "POST", url, json={**payload, "stream": True}) as response:
                if response.status_code != 200:
                    detail = self._short((await response.aread()).decode(errors="replace"))
                    kind = RateLimited if response.status_code == 429 else BackendError
                    raise kind(f"{shown}: HTTP {response.status_code}: {detail}")
                ended = False
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, comments, event names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        ended = True
                        break
                    stop, finished = self._stream_chunk(data, shown, pieces, entries, index,
                                                        on_token, thoughts)
                    finish = stop or finished or finish
                    if stop is not None:
                        ended = True
                        break
                if not ended and finish is None:
                    raise BackendError(f"{shown}: the stream ended before its last chunk")
        except httpx.TimeoutException as exc:
            raise BackendTimeout(f"{shown}: the stream sent nothing for {self.timeout:g} s"
                                 ) from exc
        except httpx.TransportError as exc:
            raise BackendError(f"{shown}: the stream was cut: {type(exc).__name__}: "
                               f"{self._secret.mask(str(exc)) or 'no detail'}") from exc
        text = "".join(pieces)
        trace = "".join(thoughts) if thoughts else None
        if not entries:  # the server sent no log-probabilities: text only
            if trace is not None:
                return with_trace(text, trace, finish_reason=finish or "stop")
            return Generation(text=text.strip(), finish_reason=finish or "stop")
        message = {"content": text} if trace is None else {"content": text,
                                                            "reasoning_content": trace}
        try:
            return self._parse_choice({"message": message, "finish_reason": finish,
                                       "logprobs": {"content": entries}}, spec)
        except MalformedResponse as exc:
            raise BackendError(f"{shown}: unusable stream: {exc}") from exc

    def _stream_chunk(self, data: str, shown: str, pieces: list[str], entries: list[Any],
                      index: int, on_token: TokenCallback, thoughts: list[str] | None = None
                      ) -> tuple[str | None, str | None]:
        """Take one ``data:`` chunk and report its tokens. Returns the reason ``on_token``
        gave to stop (or None) and the chunk's finish reason (or None). A delta of the
        trace (``reasoning_content``, ``reasoning``) goes to ``thoughts``, its tokens
        reported with ``trace`` and ``in_trace`` set (:class:`TokenEvent`)."""
        thoughts = [] if thoughts is None else thoughts
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise BackendError(f"{shown}: a malformed stream chunk: {self._short(data)}") from exc
        if not isinstance(chunk, dict):
            raise BackendError(f"{shown}: a malformed stream chunk: {self._short(data)}")
        if chunk.get("error"):
            raise BackendError(f"{shown}: the stream reported an error: "
                               f"{self._short(chunk['error'])}")
        finish = None
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            piece = delta.get("content") or "" if isinstance(delta, dict) else None
            thought = next((delta.get(k) for k in REASONING_FIELDS if delta.get(k)), None) \
                if isinstance(delta, dict) else None
            lp = choice.get("logprobs")
            got = (lp.get("content") if isinstance(lp, dict) else None) or []
            if not isinstance(piece, str) or not isinstance(got, list) or not (
                    thought is None or isinstance(thought, str)):
                raise BackendError(f"{shown}: a malformed stream chunk: {self._short(data)}")
            # before any answer text, a token without it is the trace's (its tags too)
            in_trace = not any(pieces) and (thought is not None or not piece)
            if thought is not None:
                thoughts.append(thought)
            pieces.append(piece)
            so_far = "".join(pieces)
            trace = "".join(thoughts) if thoughts or in_trace else None
            steps: list[tuple[str, float | None, tuple[tuple[str, float], ...]]] = []
            try:
                for entry in got:
                    top = tuple((str(t["token"]), float(t["logprob"]))
                                for t in entry.get("top_logprobs") or [])
                    steps.append((str(entry["token"]), float(entry["logprob"]), top))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise BackendError(f"{shown}: a malformed log-probability in the stream "
                                   f"({exc!r})") from exc
            entries.extend(got)
            if not steps and (piece or thought):
                steps.append((piece or thought or "", None, ()))
            for token, logprob, top in steps:
                reason = on_token(TokenEvent(index, None, so_far, token, logprob, None, top,
                                             trace=trace, in_trace=in_trace))
                if reason:
                    return reason, finish
        return None, finish

    def _short(self, detail: object) -> str:
        text = " ".join(str(detail).split())
        text = self._secret.mask(text)
        return text[:300] + ("…" if len(text) > 300 else "") if text else "no detail"

    # -- parsing -----------------------------------------------------------------------

    def _parse(self, data: Any, spec: GenerationSpec) -> list[Generation]:
        """The choices of a reply, in index order; :class:`MalformedResponse` (retried) if
        unusable."""
        if not isinstance(data, dict):
            raise MalformedResponse("the reply is not a JSON object")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise MalformedResponse("the reply has no choices", field="choices")
        ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        return [self._parse_choice(c, spec) for c in ordered]

    def _parse_choice(self, choice: Any, spec: GenerationSpec) -> Generation:
        """One chat choice (:func:`~confide.backends.openai_logprobs.generation_from_choice`);
        its log-probabilities are required exactly when the server returns them, and its
        entropies are bounded from its top-k as an imported reply's are
        (:func:`~confide.backends.topk.topk_entropies`)."""
        gen = generation_from_choice(choice, logprobs=self.logprobs,
                                     top_k_alternatives=spec.top_k_alternatives, api="chat",
                                     reasoning=True, tags=spec.reasoning_tags or DEFAULT_TAGS)
        for span in (gen, gen.trace):  # a reasoning reply's trace gets its bounds too
            if span is not None and span.top_logprobs is not None:
                span.token_entropies = topk_entropies(span)[0]
        return gen
