"""Any LangChain chat model with confidences: :class:`ConfidenceChatModel`.

    >>> from langchain_openai import ChatOpenAI                                  # doctest: +SKIP
    >>> from confide.integrations.langchain import ConfidenceChatModel           # doctest: +SKIP
    >>> chat = ConfidenceChatModel(model=ChatOpenAI(model="gpt-4o-mini"))         # doctest: +SKIP
    >>> reply = chat.invoke("Who wrote Hamlet?")                                   # doctest: +SKIP
    >>> reply.response_metadata["confide"]["confidences"]                         # doctest: +SKIP

Needs the ``langchain`` extra (``langchain-core``; ``langchain-openai`` for
``ChatOpenAI``). The wrapper is itself a chat model (a ``BaseChatModel`` around
the one it is given), not a callback: a callback sees a reply only after it is made,
so it could neither ask for log-probabilities nor draw samples, nor put its result
into the message the caller receives. As a chat model it is a drop-in for the one it
wraps in chains, agents and LangGraph nodes, and ``invoke``, ``ainvoke``,
``stream``, ``astream``, ``batch`` and ``generate`` all work: the inner model's
call runs as a child of the wrapper's (its callbacks and cache as they are).

Each reply's ``AIMessage.response_metadata["confide"]`` is the object of
:mod:`confide.integrations.scoring` (with ``"scored_choice"``: the generation it
describes), computed by :func:`confide.score_answers` from the text and the
``response_metadata["logprobs"]`` the inner model returns. A model with a
``logprobs`` setting (``ChatOpenAI``) left unset is asked for ``logprobs=True``
and ``top_logprobs``; one built with ``logprobs=False``, or one that returns none,
gets the scorers that need no log-probabilities only, and the rest named in
``confide["skipped"]`` with ``confide["logprobs"]`` saying why.

Sampling scorers draw their samples with a second call of the inner model with
``n`` and a temperature above 0, so the model must take ``n`` (``ChatOpenAI``); a
server that returns fewer generations is asked again for the rest. Streaming
passes the inner model's chunks through and ends with one empty chunk whose
``response_metadata["confide"]`` holds the object: adding the chunks up
(``chunk_a + chunk_b``, as LangChain does) gives a message that carries it.

The options of a call (``chat.invoke(messages, max_tokens=8)``, ``chat.bind(...)``)
reach the inner model's call as they are. ``bind_tools`` is not delegated (bind the
provider's tool schemas with ``chat.bind(tools=[...])``); a generation holding only
tool calls has no text to score, and its scorers are null with that reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, PrivateAttr

from confide.core.errors import InvalidInputError
from confide.integrations.scoring import DEFAULT_TOP_LOGPROBS, Choice, Scoring, confide_object

__all__ = ["ConfidenceChatModel"]


def _logprobs(message: BaseMessage) -> list[Any] | None:
    found = message.response_metadata.get("logprobs")
    if isinstance(found, dict):
        found = found.get("content")
    return list(found) if isinstance(found, list) else None


def _choice(message: BaseMessage) -> Choice:
    text = message.text
    if not text and getattr(message, "tool_calls", None):
        return Choice(None)
    return Choice(text, _logprobs(message))


def _child(run: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None
           ) -> CallbackManager | None:
    """The callbacks of the inner model's call: a child run of the wrapper's, so traces
    show the inner call under it (an LLM run has no ``get_child`` of its own)."""
    if run is None:
        return None
    manager = CallbackManager(handlers=[], parent_run_id=run.run_id)
    manager.set_handlers(run.inheritable_handlers)
    manager.add_tags(run.inheritable_tags)
    manager.add_metadata(run.inheritable_metadata)
    return manager


def _for_choice(obj: dict[str, Any], index: int) -> dict[str, Any]:
    row = obj["choices"][index] if index < len(obj["choices"]) else None
    if row is None:
        return {**obj, "scored_choice": index}
    return {**obj, "scored_choice": index, "confidences": row["confidences"],
            "reasons": row["reasons"]}


class ConfidenceChatModel(BaseChatModel):
    """A LangChain chat model whose replies carry confidences in
    ``response_metadata["confide"]``.

    Parameters
    ----------
    model : the chat model to wrap (any ``BaseChatModel``; ``ChatOpenAI`` gives
        log-probabilities).
    scorers : scorer names (a list or one comma-separated text), ``"free"`` (default)
        or ``"all"``, as :func:`confide.score_answers` takes them.
    samples : answers drawn per reply for the sampling scorers (default: the most any
        chosen scorer asks for; 0 when none needs samples).
    judge : equivalence judge of the sampling scorers (default ``exact``).
    top_logprobs : alternatives asked per token when the model leaves them unset.
    sample_temperature : of the sampling call (default: the model's when above 0,
        else 1.0).

    Raises
    ------
    InvalidInputError
        A setting out of range, or sampling scorers with a model that takes no ``n``.
    """

    model: BaseChatModel
    scorers: str | list[str] = "free"
    samples: int | None = None
    judge: str | None = None
    top_logprobs: int = DEFAULT_TOP_LOGPROBS
    sample_temperature: float | None = None

    model_config = ConfigDict(arbitrary_types_allowed=True)
    _scoring: Scoring = PrivateAttr()

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        # checked here, not in a validator, so the error is confide's own (not pydantic's)
        self._scoring = Scoring.of(self.scorers, samples=self.samples, judge=self.judge,
                                   top_logprobs=self.top_logprobs,
                                   temperature=self.sample_temperature)
        if self._scoring.samples and "n" not in type(self.model).model_fields:
            raise InvalidInputError(
                f"the sampling scorers need {self._scoring.samples} samples a reply, drawn "
                f"with n, which {type(self.model).__name__} does not take; choose scorers "
                "that need no samples or a model that takes n (ChatOpenAI)", field="scorers")

    @property
    def _llm_type(self) -> str:
        return f"confide-{self.model._llm_type}"

    # -- the calls ---------------------------------------------------------------------------

    def _asks(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The inner call's options (the caller's, plus ``logprobs``/``top_logprobs``
        where the model has them unset) and what was added."""
        fields = type(self.model).model_fields
        added: dict[str, Any] = {}
        if "logprobs" in fields and getattr(self.model, "logprobs", None) is None \
                and "logprobs" not in kwargs:
            added["logprobs"] = True
            if "top_logprobs" in fields and getattr(self.model, "top_logprobs", None) is None \
                    and "top_logprobs" not in kwargs:
                added["top_logprobs"] = self._scoring.top_logprobs
        return {**added, **kwargs}, added

    def _no_logprobs(self, ask: dict[str, Any], choices: Sequence[Choice]) -> str | None:
        if ask.get("logprobs", getattr(self.model, "logprobs", None)) is False:
            return "the model was asked with logprobs=False"
        if all(c.logprobs is None for c in choices if c.text is not None):
            return (f"{type(self.model).__name__} returned no log-probabilities "
                    "(response_metadata['logprobs']); only the scorers that need none ran")
        return None

    def _sampling(self, ask: dict[str, Any], want: int) -> dict[str, Any]:
        temperature = ask.get("temperature", getattr(self.model, "temperature", None))
        return {**ask, "n": want, "temperature": self._scoring.sample_temperature(temperature)}

    def _requested(self, ask: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
        out = dict(added)
        if self._scoring.samples:
            out.update({k: v for k, v in self._sampling(ask, self._scoring.samples).items()
                        if k in ("n", "temperature")})
        return out

    def _object(self, messages: list[BaseMessage], choices: list[Choice], ask: dict[str, Any],
                added: dict[str, Any], samples: list[Choice], rounds: int) -> dict[str, Any]:
        return confide_object(self._scoring, convert_to_openai_messages(messages), choices,
                              samples=samples, requested=self._requested(ask, added),
                              sample_requests=rounds, no_logprobs=self._no_logprobs(ask, choices))

    def _draw(self, messages: list[BaseMessage], stop: list[str] | None, ask: dict[str, Any],
              callbacks: Any) -> tuple[list[Choice], int]:
        drawn: list[Choice] = []
        rounds = 0
        while len(drawn) < self._scoring.samples and rounds < self._scoring.samples:
            result = self.model.generate(
                [messages], stop=stop, callbacks=callbacks,
                **self._sampling(ask, self._scoring.samples - len(drawn)))
            rounds += 1
            got = [_choice(g.message) for g in result.generations[0]
                   if isinstance(g, ChatGeneration)]
            if not got:
                break
            drawn += got
        return drawn[:self._scoring.samples], rounds

    async def _adraw(self, messages: list[BaseMessage], stop: list[str] | None,
                     ask: dict[str, Any], callbacks: Any) -> tuple[list[Choice], int]:
        drawn: list[Choice] = []
        rounds = 0
        while len(drawn) < self._scoring.samples and rounds < self._scoring.samples:
            result = await self.model.agenerate(
                [messages], stop=stop, callbacks=callbacks,
                **self._sampling(ask, self._scoring.samples - len(drawn)))
            rounds += 1
            got = [_choice(g.message) for g in result.generations[0]
                   if isinstance(g, ChatGeneration)]
            if not got:
                break
            drawn += got
        return drawn[:self._scoring.samples], rounds

    @staticmethod
    def _result(generations: list[Any], obj: dict[str, Any], llm_output: Any) -> ChatResult:
        out = []
        for i, g in enumerate(generations):
            g.message.response_metadata["confide"] = _for_choice(obj, i)
            out.append(ChatGeneration(message=g.message, generation_info=g.generation_info))
        return ChatResult(generations=out, llm_output=llm_output)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                  ) -> ChatResult:
        ask, added = self._asks(kwargs)
        callbacks = _child(run_manager)
        result = self.model.generate([messages], stop=stop, callbacks=callbacks, **ask)
        generations = [g for g in result.generations[0] if isinstance(g, ChatGeneration)]
        samples, rounds = self._draw(messages, stop, ask, callbacks)
        obj = self._object(messages, [_choice(g.message) for g in generations], ask, added,
                           samples, rounds)
        return self._result(generations, obj, result.llm_output)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        ask, added = self._asks(kwargs)
        callbacks = _child(run_manager)
        result = await self.model.agenerate([messages], stop=stop, callbacks=callbacks, **ask)
        generations = [g for g in result.generations[0] if isinstance(g, ChatGeneration)]
        samples, rounds = await self._adraw(messages, stop, ask, callbacks)
        # scoring reads no network but may embed or judge: off the event loop
        obj = await asyncio.to_thread(self._object, messages,
                                      [_choice(g.message) for g in generations], ask, added,
                                      samples, rounds)
        return self._result(generations, obj, result.llm_output)

    # -- streams -----------------------------------------------------------------------------

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                ) -> Iterator[ChatGenerationChunk]:
        ask, added = self._asks(kwargs)
        callbacks = _child(run_manager)
        whole: Any = None  # the chunks added up (BaseMessage's + is typed loosely)
        for chunk in self.model.stream(messages, {"callbacks": callbacks}, stop=stop, **ask):
            whole = chunk if whole is None else whole + chunk
            out = ChatGenerationChunk(message=chunk)
            if run_manager:
                run_manager.on_llm_new_token(out.text, chunk=out)
            yield out
        samples, rounds = self._draw(messages, stop, ask, callbacks)
        choices = [] if whole is None else [_choice(whole)]
        obj = self._object(messages, choices, ask, added, samples, rounds)
        yield self._last_chunk(obj)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        ask, added = self._asks(kwargs)
        callbacks = _child(run_manager)
        whole: Any = None  # the chunks added up (BaseMessage's + is typed loosely)
        async for chunk in self.model.astream(messages, {"callbacks": callbacks}, stop=stop,
                                              **ask):
            whole = chunk if whole is None else whole + chunk
            out = ChatGenerationChunk(message=chunk)
            if run_manager:
                await run_manager.on_llm_new_token(out.text, chunk=out)
            yield out
        samples, rounds = await self._adraw(messages, stop, ask, callbacks)
        choices = [] if whole is None else [_choice(whole)]
        obj = await asyncio.to_thread(self._object, messages, choices, ask, added, samples,
                                      rounds)
        yield self._last_chunk(obj)

    @staticmethod
    def _last_chunk(obj: dict[str, Any]) -> ChatGenerationChunk:
        return ChatGenerationChunk(message=AIMessageChunk(
            content="", response_metadata={"confide": _for_choice(obj, 0)}))
