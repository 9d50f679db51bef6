"""One choice of an OpenAI response object as a :class:`~confide.core.records.Generation`.

The ``openai`` backend reads every reply (and every assembled stream) with
:func:`generation_from_choice`; an importer of saved OpenAI logs can read their
choices with it too, so both give the same generation for the same choice.

Field map (one choice; ``t`` a token of the answer, ``j`` an alternative):

======================  =================================================
``Generation``          Chat Completions choice
======================  =================================================
``text``                ``message.content``, stripped (null is ``""``)
``finish_reason``       ``finish_reason`` (null or missing is ``"stop"``)
``tokens[t]``           ``logprobs.content[t].token``
``token_logprobs[t]``   ``logprobs.content[t].logprob``
``top_tokens[t][j]``    ``logprobs.content[t].top_logprobs[j].token``
``top_logprobs[t, j]``  ``logprobs.content[t].top_logprobs[j].logprob``
======================  =================================================

======================  =====================================================
``Generation``          legacy Completions choice
======================  =====================================================
``text``                ``text``, stripped (null is ``""``)
``finish_reason``       ``finish_reason`` (null or missing is ``"stop"``)
``tokens[t]``           ``logprobs.tokens[t]``
``token_logprobs[t]``   ``logprobs.token_logprobs[t]``
``top_tokens[t][j]``    the keys of ``logprobs.top_logprobs[t]`` (a ``{token:
                        logprob}`` object; null: none), by log-probability
``top_logprobs[t, j]``  their values, in that order (a stable sort)
======================  =====================================================

A reasoning reply (``reasoning=True``) whose message keeps the trace apart,
``message.reasoning_content`` (vLLM's reasoning parsers, DeepSeek) or
``message.reasoning`` (vLLM from 0.10, OpenRouter), is the final answer
(``message.content``) with that trace (:func:`confide.core.reasoning.with_trace`): the
log-probabilities then cover the trace's tokens and the answer's (vLLM), or the answer's
alone, and :func:`confide.core.reasoning.trace_split` finds where they part.

Chat alternatives keep the server's order (the API lists them best first). Not
read: ``index`` (the caller orders the choices), ``bytes``, ``text_offset``,
``message.role``, ``refusal`` and tool calls. Unless ``api`` says which, a choice
with a ``message`` (or without ``text``) is read as chat.

Tokens past the answer text (an end-of-turn token, the tokens of a stop
sequence the server cut off) are left out: the shortest prefix of tokens whose
characters cover the unstripped text is kept (:func:`answer_length`), as the
``hf`` backend keeps the tokens that carry answer text. The alternatives are cut
to the fewest any kept token has, so ``top_logprobs`` is a ``(T, k)`` array;
with no alternatives at all both stay None, except that an answer of no tokens
whose alternatives were asked for (``top_k_alternatives``) gets an empty
``(0, 0)`` array and ``[]``. Entropies and divergences are never filled: a top-k
list is not the full next-token distribution.

A choice that cannot be read raises :class:`MalformedResponse`, whose ``field``
names the part of the choice at fault (the backend retries such a reply; an
importer can name the file and line).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from confide.core.reasoning import DEFAULT_TAGS, Tags, with_trace
from confide.core.records import Generation

__all__ = ["REASONING_FIELDS", "MalformedResponse", "answer_length", "generation_from_choice",
           "reasoning_of"]

#: The message fields that hold a reasoning model's trace, in the order they are read.
REASONING_FIELDS = ("reasoning_content", "reasoning")

# One answer's (tokens, log-probabilities, alternatives per token) as a reply lists them.
Steps = tuple[list[str], list[float], list[list[tuple[str, float]]]]


class MalformedResponse(ValueError):
    """A response object, or one of its choices, that cannot be read.

    ``field`` is the path of the part at fault inside the choice (or the
    response), e.g. ``"logprobs.content"``; ``""`` for the whole object.
    """

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def generation_from_choice(choice: Any, *, logprobs: bool | None = None,
                           top_k_alternatives: int = 0,
                           api: Literal["chat", "completions"] | None = None,
                           reasoning: bool = False, tags: Tags | None = DEFAULT_TAGS
                           ) -> Generation:
    """The :class:`~confide.core.records.Generation` of one choice of an OpenAI response.

    Parameters
    ----------
    choice : one element of a response's ``choices``: a Chat Completions choice
        (``message``) or a legacy Completions one (``text``); field map in the
        module's notes.
    logprobs : True: the log-probabilities were asked for and must be there;
        False: ignore any (text only); None (default): read them where present.
    top_k_alternatives : how many alternatives were asked for (0: none); only
        decides whether an answer of no tokens gets empty ``top_logprobs``.
    api : ``"chat"`` or ``"completions"``: the shape the choice must have; None
        (default): chat where the choice has a ``message`` or no ``text``.
    reasoning : read a chat message's reasoning field (:data:`REASONING_FIELDS`) as the
        trace (module notes); False (default): the content alone.
    tags : where the trace's tokens end when they hold the closing tag.

    Returns
    -------
    Generation
        ``text`` and ``finish_reason``; with log-probabilities also ``tokens``,
        ``token_logprobs`` (float32) and, where every answer token lists
        alternatives, ``top_tokens`` and ``top_logprobs`` (float32, best first).

    Raises
    ------
    MalformedResponse
        The choice has neither message nor text, its text is not text, its
        log-probabilities are missing (with ``logprobs=True``), malformed or
        not finite.

    Examples
    --------
    A chat choice whose last token ends the turn (left out of the answer):

    >>> gen = generation_from_choice({"message": {"content": "Paris"}, "logprobs": {
    ...     "content": [{"token": "Paris", "logprob": -0.25,
    ...                  "top_logprobs": [{"token": "Lyon", "logprob": -2.0}]},
    ...                 {"token": "<|im_end|>", "logprob": 0.0}]}})
    >>> gen.text, gen.tokens, gen.token_logprobs.tolist(), gen.top_tokens
    ('Paris', ['Paris'], [-0.25], [['Lyon']])

    A legacy Completions choice, its alternatives sorted:

    >>> legacy = generation_from_choice({"text": " 4", "finish_reason": "length",
    ...     "logprobs": {"tokens": [" 4"], "token_logprobs": [-0.5],
    ...                  "top_logprobs": [{" 5": -3.0, " 4": -0.5}]}})
    >>> legacy.text, legacy.finish_reason, legacy.top_tokens, legacy.top_logprobs.tolist()
    ('4', 'length', [[' 4', ' 5']], [[-0.5, -3.0]])
    """
    if not isinstance(choice, dict):
        raise MalformedResponse("a choice has no message")
    if api is None:
        api = "chat" if isinstance(choice.get("message"), dict) or "text" not in choice \
            else "completions"
    if api == "chat":
        raw = _chat_text(choice)
        trace = reasoning_of(choice["message"]) if reasoning else None
        if trace is None:
            return _generation(choice, raw, logprobs, top_k_alternatives, _chat_steps)
        whole = _generation(choice, raw, logprobs, top_k_alternatives, _chat_steps, cut=False)
        try:
            return with_trace(raw, trace, whole if whole.tokens else None, tags=tags,
                              finish_reason=whole.finish_reason)
        except ValueError as exc:
            raise MalformedResponse(f"{exc} (the message's reasoning and content)",
                                    field="logprobs.content") from exc
    return _generation(choice, _legacy_text(choice), logprobs, top_k_alternatives,
                       _legacy_steps)


def _chat_text(choice: dict[str, Any]) -> str:
    if not isinstance(choice.get("message"), dict):
        raise MalformedResponse("a choice has no message", field="message")
    raw = choice["message"].get("content")
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        raise MalformedResponse("a choice's message content is not text",
                                field="message.content")
    return raw


def reasoning_of(message: Any) -> str | None:
    """A message's (or a stream delta's) trace: the first of :data:`REASONING_FIELDS` it
    holds and is not null; None for none. :class:`MalformedResponse` for one not text."""
    if not isinstance(message, dict):
        return None
    for key in REASONING_FIELDS:
        value = message.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise MalformedResponse(f"a message's {key} is not text", field=f"message.{key}")
        return value
    return None


def _legacy_text(choice: dict[str, Any]) -> str:
    raw = choice.get("text")
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        raise MalformedResponse("a choice's text is not text", field="text")
    return raw


def _generation(choice: dict[str, Any], raw: str, logprobs: bool | None,
                top_k_alternatives: int, steps_of: Any, cut: bool = True) -> Generation:
    finish = str(choice.get("finish_reason") or "stop")
    gen = Generation(text=raw.strip(), finish_reason=finish)
    if logprobs is False:
        return gen
    lp = choice.get("logprobs")
    steps: Steps | None = steps_of(lp) if isinstance(lp, dict) else None
    if steps is None:
        if logprobs:
            raise MalformedResponse("log-probabilities were asked for but the reply has none",
                                    field="logprobs")
        return gen
    tokens, values, tops = steps
    if not all(math.isfinite(v) for v in values) or not all(
            math.isfinite(v) for step in tops for _, v in step):
        raise MalformedResponse("a log-probability is not finite", field="logprobs")
    # uncut (a reasoning reply): every token, the trace's and the answer's
    n = answer_length(tokens, raw) if cut else len(tokens)
    gen.tokens = tokens[:n]
    gen.token_logprobs = np.asarray(values[:n], dtype=np.float32)
    k = min([len(step) for step in tops[:n]], default=0)
    if k:
        gen.top_logprobs = np.asarray([[v for _, v in step[:k]] for step in tops[:n]],
                                      dtype=np.float32)
        gen.top_tokens = [[t for t, _ in step[:k]] for step in tops[:n]]
    elif n == 0 and top_k_alternatives:
        gen.top_logprobs = np.zeros((0, 0), dtype=np.float32)
        gen.top_tokens = []
    return gen


def _chat_steps(lp: dict[str, Any]) -> Steps | None:
    """``logprobs.content``: a list of ``{token, logprob, top_logprobs: [{token, logprob}]}``."""
    content = lp.get("content")
    if not isinstance(content, list):
        return None
    tokens: list[str] = []
    values: list[float] = []
    tops: list[list[tuple[str, float]]] = []
    try:
        for entry in content:
            tokens.append(str(entry["token"]))
            values.append(float(entry["logprob"]))
            tops.append([(str(t["token"]), float(t["logprob"]))
                         for t in entry.get("top_logprobs") or []])
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedResponse(f"a log-probability entry is malformed ({exc!r})",
                                field=f"logprobs.content[{len(tops)}]") from exc
    return tokens, values, tops


def _legacy_steps(lp: dict[str, Any]) -> Steps | None:
    """``logprobs.tokens``, ``.token_logprobs`` and ``.top_logprobs`` (``{token: logprob}``
    objects), parallel lists."""
    tokens, values, alternatives = (lp.get(key) for key in
                                    ("tokens", "token_logprobs", "top_logprobs"))
    if not isinstance(tokens, list):
        return None
    if not isinstance(values, list) or len(values) != len(tokens) or not (
            alternatives is None or (isinstance(alternatives, list)
                                     and len(alternatives) == len(tokens))):
        raise MalformedResponse("logprobs.tokens, token_logprobs and top_logprobs are not "
                                "lists of one length", field="logprobs.token_logprobs")
    floats: list[float] = []
    tops: list[list[tuple[str, float]]] = []
    for t, token in enumerate(tokens):
        if not isinstance(token, str):
            raise MalformedResponse("a token is not text", field=f"logprobs.tokens[{t}]")
        if values[t] is None:
            raise MalformedResponse("a null log-probability: a log made with echo=true holds "
                                    "the prompt's tokens too",
                                    field=f"logprobs.token_logprobs[{t}]")
        try:
            floats.append(float(values[t]))
        except (TypeError, ValueError) as exc:
            raise MalformedResponse(f"a log-probability entry is malformed ({exc!r})",
                                    field=f"logprobs.token_logprobs[{t}]") from exc
        step = None if alternatives is None else alternatives[t]
        try:
            pairs = [(str(k), float(v)) for k, v in (step or {}).items()]
        except (AttributeError, TypeError, ValueError) as exc:
            raise MalformedResponse(f"a log-probability entry is malformed ({exc!r})",
                                    field=f"logprobs.top_logprobs[{t}]") from exc
        tops.append(sorted(pairs, key=lambda pair: -pair[1]))  # stable: ties keep their order
    return list(tokens), floats, tops


def answer_length(tokens: list[str], text: str) -> int:
    """How many leading tokens carry the answer text.

    Servers may list tokens past the returned text: the end-of-turn token, or
    the tokens of a stop sequence that was cut off. Keep the shortest prefix
    whose characters cover the text, as the hf backend does.

    >>> answer_length(["Par", "is", "\\n", "<|im_end|>"], "Paris")
    2
    >>> answer_length(["Par", "is"], "Paris")
    2
    >>> answer_length(["<|im_end|>"], "")
    0
    """
    n = len(tokens)
    while n and len("".join(tokens[:n - 1])) >= len(text):
        n -= 1
    return n
