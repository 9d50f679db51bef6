"""OpenAI-compatible logs: Chat Completions and Completions responses, as saved or batched.

One record per line (JSON Lines), one JSON array of records, or pretty-printed
objects (see :mod:`confide.ingest.common`). A record is one of:

- a **response object**: ``{"id", "object": "chat.completion" | "text_completion",
  "model", "choices": [...]}``;
- a **Batch API output line**: ``{"id", "custom_id", "response": {"status_code",
  "body": <response object>}, "error"}`` (a line with an ``error`` or a status other
  than 200 is a bad record);
- a **logging proxy's pair**: ``{"request": {...}, "response": <response object>}``;
  ``request`` may also be a Batch API *input* line (``{"custom_id", "body": {...}}``).

Field map
---------
=====================  ==========================================================
``Item.id``            ``custom_id``, else the record's ``id``, else the response's
                       ``id``, else ``<file stem>-<line>``
``Item.prompt``        the request's ``messages`` (chat) or ``prompt`` (text), else
                       the record's own ``messages`` / ``prompt`` / ``question``,
                       else ``""`` (the log did not keep the question)
``Item.references``    the record's ``references`` (text, number or a list), if any
``Item.metadata``      ``model`` of the response
label                  the record's ``label`` (or ``label_field``), if any
greedy                 ``choices`` in ``index`` order: with ``answer="first"`` choice
                       0 is the answer and the others (``n > 1``) are samples
text                   ``message.content`` (chat; null is ``""``; a list of content
                       parts is refused), ``text`` (legacy)
tokens, log-probs      chat: ``logprobs.content[t].token`` / ``.logprob``, and
                       ``.top_logprobs[j].token`` / ``.logprob`` (``bytes`` unused);
                       legacy: ``logprobs.tokens`` / ``token_logprobs`` /
                       ``top_logprobs[t]`` (``{token: logprob}``; ``text_offset`` unused)
finish_reason          ``finish_reason`` (null is ``"stop"``)
trace                  ``message.reasoning_content`` or ``message.reasoning``
                       (vLLM's reasoning parsers, DeepSeek, OpenRouter), or a
                       ``<think>…</think>`` block of the text (``reasoning_tags``);
                       ``logprobs.content`` may list the trace's tokens first
=====================  ==========================================================

Tokens past the answer text (an end-of-turn token, a stop string that was cut)
are left out, as the ``openai`` backend does. ``top_logprobs`` are the listed
alternatives (chat: in the server's order, best first; legacy: sorted), cut to
the fewest any token has. Compatible servers may list the sampled token among
them even when it is not in the top-k (the legacy API says so), so for the
entropy bounds a sampled token that is the least likely of the listed ones is set
apart (:class:`~confide.ingest.common.Step`).

Capabilities: ``token_logprobs`` and ``top_logprobs`` where the response has them,
``token_entropies`` as lower bounds from the top-k (marked in
``Imported.approximate``), ``samples`` with ``n > 1``. Logs made with ``echo``
(legacy prompts scored along with the answer: a null first log-probability) and
streamed chunks (``chat.completion.chunk``) are refused with a message saying so.

Checked before a choice is read (:mod:`confide.ingest.common`, "Untrusted input"):
the ``index`` values are ``0 .. n-1``, each once (a negative one would make a sample
the graded answer); each token's alternatives sum to at most probability 1 and agree
with the chosen token's log-probability; the tokens spell the text.

Detected (``format="auto"``) by a ``choices`` list of objects with ``message``,
``text`` or ``delta`` (or an ``object`` naming a response), by ``custom_id`` with
``response`` or ``error`` (a Batch API line), or, nested, by a ``response`` holding
such a response (a logging proxy's pair; a format whose fields are the record's own is
preferred to it).

Each choice is read by the ``openai`` backend's own reader,
:func:`confide.backends.openai_logprobs.generation_from_choice`, so a logged
reply gives the generation the backend would have made of it (the same text,
tokens and alternatives). Before that every log-probability is checked here (a
number, finite, :math:`\\le 0`; the error names the field), and after it the
entropy bounds are added by the backend's own rule too
(:func:`confide.backends.topk.topk_entropies`), so a logged reply holds the
statistics the backend gave when it made it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from confide.backends.openai_logprobs import (
    MalformedResponse,
    answer_length,
    generation_from_choice,
)
from confide.backends.topk import entropy_note, topk_entropies
from confide.core.reasoning import trace_split
from confide.core.records import Generation, Item
from confide.ingest.common import (
    FORMATS,
    LOGPROB_TOLERANCE,
    MASS_TOLERANCE,
    BadField,
    Context,
    Fit,
    Imported,
    LogFormat,
    answer_with_trace,
    capabilities_of,
    check_logprob,
    check_spelling,
    check_step,
    get_list,
    index_order,
    item_id,
    label_from,
    need_list,
    reasoning_field,
    references_from,
    text_prompt,
)

__all__ = ["fits", "parse", "parse_many"]

_OBJECTS = ("chat.completion", "text_completion", "chat.completion.chunk")
_NUMBER = (float, int)  # exact types: a bool is not a log-probability
_TOLERANCE = 1.0 + MASS_TOLERANCE
_LIST, _STR, _NUMBERS = {list}, {str}, {float, int}


def _is_response(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if value.get("object") in _OBJECTS:
        return True
    choices = value.get("choices")
    return (isinstance(choices, list) and bool(choices) and isinstance(choices[0], dict)
            and any(k in choices[0] for k in ("message", "text", "delta")))


def fits(obj: dict[str, Any]) -> Fit | None:
    """A response object, a Batch API output line, or (nested) a request/response pair."""
    if _is_response(obj):
        return Fit("a 'choices' list of objects with 'message' or 'text' (an OpenAI "
                   "response)")
    if "custom_id" in obj and ("response" in obj or "error" in obj):
        return Fit("'custom_id' with 'response' or 'error' (an OpenAI Batch API output line)")
    response = obj.get("response")
    if isinstance(response, dict) and (_is_response(response)
                                       or _is_response(response.get("body"))):
        return Fit("a 'response' holding an OpenAI response (a logging proxy's pair)",
                   nested=True)
    return None


def _unwrap(obj: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """``(response object, its field path, request body or None)``."""
    request = obj.get("request")
    if request is not None and not isinstance(request, dict):
        raise BadField("request", f"must be an object, not {type(request).__name__}")
    if isinstance(request, dict) and isinstance(request.get("body"), dict):
        request = request["body"]  # a Batch API input line
    if obj.get("error"):
        error = obj["error"]
        detail = error.get("message") if isinstance(error, dict) else error
        raise BadField("error", f"the request failed: {detail}")
    if "response" not in obj and "custom_id" not in obj:
        return obj, "", request
    response = obj.get("response")
    if not isinstance(response, dict):
        raise BadField("response", "must be a response object"
                       + ("" if response is not None else ", not null"))
    if "body" in response or "status_code" in response:  # Batch API output
        status = response.get("status_code", 200)
        body = response.get("body")
        if status != 200:
            detail = ""
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                detail = f": {body['error'].get('message')}"
            raise BadField("response.status_code", f"HTTP {status}{detail}")
        if not isinstance(body, dict):
            raise BadField("response.body", "must be a response object")
        return body, "response.body.", request
    return response, "response.", request


def _prompt(obj: dict[str, Any], request: dict[str, Any] | None
            ) -> str | list[dict[str, str]]:
    for source, where in ((request, "request."), (obj, "")):
        if not isinstance(source, dict):
            continue
        for key in ("messages", "prompt", "question"):
            if source.get(key) is None:
                continue
            value = source[key]
            if key == "prompt" and isinstance(value, list):
                if len(value) == 1 and isinstance(value[0], str):
                    return value[0]
                raise BadField(f"{where}prompt", "a list of prompts (or of token ids) is not "
                                                 "one question; log one prompt per record")
            return text_prompt(value, f"{where}{key}")
    return ""


def _chat_well_formed(content: list[Any]) -> bool:
    """Whether every entry of ``logprobs.content`` is well formed and consistent, in one
    tight loop (the common case; :func:`_check_chat` names the field at fault otherwise)."""
    inf, exp = math.inf, math.exp
    try:
        for entry in content:
            lp, token = entry["logprob"], entry["token"]
            if type(token) is not str or type(lp) not in _NUMBER or not -inf < lp <= 0:
                return False
            alts = entry.get("top_logprobs")
            if alts is None:
                continue
            if type(alts) is not list:
                return False
            mass, listed, agrees = 0.0, False, False
            for alt in alts:
                v = alt["logprob"]
                if type(alt["token"]) is not str or type(v) not in _NUMBER or not -inf < v <= 0:
                    return False
                mass += exp(v)
                if alt["token"] == token:
                    listed = True
                    agrees = agrees or abs(v - lp) <= LOGPROB_TOLERANCE
            if (mass if listed else mass + exp(lp)) > _TOLERANCE or (listed and not agrees):
                return False
    except (KeyError, TypeError):
        return False
    return True


def _check_chat(lp: dict[str, Any], where: str, text: str) -> None:
    content = lp.get("content")
    if content is None:
        return
    if not (isinstance(content, list) and _chat_well_formed(content)):
        _find_chat_fault(content, where)
    if content:
        check_spelling([entry["token"] for entry in content], text, f"{where}.content")


def _find_chat_fault(content: Any, where: str) -> None:
    if not isinstance(content, list):
        raise BadField(f"{where}.content", "must be a list")
    for t, entry in enumerate(content):
        at = f"{where}.content[{t}]"
        if not isinstance(entry, dict):
            raise BadField(at, "must be an object")
        if not isinstance(entry.get("token"), str):
            raise BadField(f"{at}.token", "must be text" if "token" in entry else "missing")
        if "logprob" not in entry:
            raise BadField(f"{at}.logprob", "missing")
        logprob = check_logprob(entry["logprob"], f"{at}.logprob")
        top = []
        for j, alt in enumerate(get_list(entry, "top_logprobs", f"{at}.top_logprobs") or []):
            aw = f"{at}.top_logprobs[{j}]"
            if not isinstance(alt, dict):
                raise BadField(aw, "must be an object")
            if not isinstance(alt.get("token"), str):
                raise BadField(f"{aw}.token", "must be text" if "token" in alt else "missing")
            top.append((alt["token"], check_logprob(alt.get("logprob"), f"{aw}.logprob")))
        if top:
            check_step(entry["token"], logprob, top, f"{at}.logprob", f"{at}.top_logprobs")


def _check_legacy(lp: dict[str, Any], where: str, text: str) -> None:
    tokens = get_list(lp, "tokens", f"{where}.tokens")
    if tokens is None:
        return
    values = need_list(lp, "token_logprobs", f"{where}.token_logprobs")
    tops = get_list(lp, "top_logprobs", f"{where}.top_logprobs") or []
    for t, value in enumerate(values):
        if value is None:
            raise BadField(f"{where}.token_logprobs[{t}]",
                           "null log-probability: a log made with echo=true holds the "
                           "prompt's tokens too; log the answers without echo")
        check_logprob(value, f"{where}.token_logprobs[{t}]")
    for t, alts in enumerate(tops):
        if alts is None:
            continue
        if not isinstance(alts, dict):
            raise BadField(f"{where}.top_logprobs[{t}]", "must be a {token: logprob} object")
        top = [(key, check_logprob(value, f"{where}.top_logprobs[{t}][{key!r}]"))
               for key, value in alts.items()]
        if t < len(tokens) and t < len(values) and isinstance(tokens[t], str):
            check_step(tokens[t], values[t], top, f"{where}.token_logprobs[{t}]",
                       f"{where}.top_logprobs[{t}]")
    if tokens and all(isinstance(token, str) for token in tokens):
        check_spelling(tokens, text, f"{where}.tokens")


def _choice(choice: Any, where: str, ctx: Context) -> tuple[Generation, dict[str, str]]:
    """One choice as its generation and notes (:func:`_choice_steps`, answered here)."""
    return _answered(_choice_steps(choice, where, ctx))


def _choice_steps(choice: Any, where: str, ctx: Context) -> _Steps[tuple[Generation,
                                                                          dict[str, str]]]:
    if not isinstance(choice, dict):
        raise BadField(where, "a choice must be an object")
    if "delta" in choice:
        raise BadField(f"{where}.delta", "a streamed chunk; log the whole response "
                                         "(stream: false) or join the chunks first")
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise BadField(f"{where}.finish_reason", "must be text")
    reasoning = reasoning_field(choice.get("message"), _REASONING, f"{where}.message.")
    if reasoning is not None:  # the trace in a field of its own
        return (yield from _reasoning_choice(choice, reasoning, where, ctx))
    lp = choice.get("logprobs")
    listed: np.ndarray | None = None
    try:  # the openai backend's reading of a choice, so both agree
        gen = generation_from_choice(choice, logprobs=False)
        if lp is not None:
            if not isinstance(lp, dict):
                raise BadField(f"{where}.logprobs", "must be an object")
            text = _raw_text(choice)
            listed = yield _STATISTICS, (choice, lp, gen, text, f"{where}.logprobs")
            if listed is None:  # not the common case: checked field by field
                if "content" in lp:
                    _check_chat(lp, f"{where}.logprobs", text)
                else:
                    _check_legacy(lp, f"{where}.logprobs", text)
                gen = generation_from_choice(choice, top_k_alternatives=1)
    except MalformedResponse as exc:
        raise BadField(f"{where}.{exc.field}" if exc.field else where, str(exc)) from None
    if not gen.tokens and gen.text:  # an empty token list with an answer: no statistics
        gen.tokens, gen.token_logprobs, gen.top_logprobs, gen.top_tokens = [], None, None, None
    notes: dict[str, str] = {}
    if ctx.entropy_bounds and gen.top_logprobs is not None:  # as the openai backend does
        gen.token_entropies, notes = yield _ENTROPIES, (gen, listed)
    return answer_with_trace(gen, None, ctx, where), notes


# Ints past this read as floats differently by two roads (an int to float32 at once, or
# through float64): the fast reading leaves them to the checked one.
_EXACT_INT = 1 << 24


def _chat_statistics(choice: dict[str, Any], lp: dict[str, Any], gen: Generation, text: str,
                     where: str) -> np.ndarray | None:
    """Fill ``gen``'s statistics from a chat choice's ``logprobs.content`` in the common
    case, all of it at once; None (``gen`` untouched) for anything else, which the
    field-by-field checks and :func:`generation_from_choice` read as before.

    The common case: every entry an object with a text ``token``, a number ``logprob``
    and a list ``top_logprobs``, of one length k >= 1 for every entry; each alternative
    an object with a text ``token`` and a number ``logprob``; every log-probability
    finite and <= 0; the chosen token's log-probability within :data:`LOGPROB_TOLERANCE`
    of its own entry where it is listed; each step's listed mass (with the chosen
    token's, when not listed) clearly below 1 + :data:`MASS_TOLERANCE`; at least one
    token of answer text. :func:`_chat_well_formed` accepts all of these, so the same
    records pass and fail; the spelling is checked as there (:func:`check_spelling`), and
    the generation equals :func:`generation_from_choice`'s
    (``tests/test_import_speed_paths.py``). :func:`_chat_statistics_many` does the same
    for many choices at once.

    Returns, for the answer's tokens, which alternatives are the chosen token (shape
    ``(T, k)``), for the entropy bounds.
    """
    gathered = _gathered(choice, lp)
    if gathered is None:
        return None
    tokens, names, values, alts, k = gathered
    n = len(tokens)
    try:
        both = np.array(values + alts, dtype=np.float64)
    except OverflowError:
        return None
    chosen, top = both[:n], both[n:].reshape(n, k)
    listed = (np.array(names, dtype=object).reshape(n, k)
              == np.array(tokens, dtype=object)[:, None])
    if _step_faults(chosen, top, listed).any():
        return None  # the checks name the fault (or the plain reading takes it)
    return _filled(gen, text, where, tokens, names, k, chosen, top, listed)


def _gathered(choice: dict[str, Any], lp: dict[str, Any]
              ) -> tuple[list[str], list[str], list[Any], list[Any], int] | None:
    """``(tokens, alternatives' tokens, log-probabilities, alternatives' log-probabilities,
    k)`` of a chat choice whose entries have the common case's shape and types
    (:func:`_chat_statistics`); None otherwise."""
    content = lp.get("content")
    if (type(content) is not list or not content
            or not (isinstance(choice.get("message"), dict) or "text" not in choice)):
        return None  # a legacy choice has its own reading
    try:
        tokens = [entry["token"] for entry in content]
        values = [entry["logprob"] for entry in content]
        rows = [entry["top_logprobs"] for entry in content]
        if set(map(type, rows)) != _LIST or len(set(map(len, rows))) != 1:
            return None
        names = [alt["token"] for row in rows for alt in row]
        alts = [alt["logprob"] for row in rows for alt in row]
    except (KeyError, TypeError):
        return None
    k = len(rows[0])
    kinds = set(map(type, values)) | set(map(type, alts))
    if (not k or set(map(type, tokens)) | set(map(type, names)) != _STR
            or not kinds <= _NUMBERS
            or (int in kinds and min(min(values), min(alts)) <= -_EXACT_INT)):
        return None
    return tokens, names, values, alts, k


def _step_faults(chosen: np.ndarray, top: np.ndarray, listed: np.ndarray) -> np.ndarray:
    """Per step (row), whether it leaves the common case: a log-probability not finite or
    above 0, the chosen token far from its own entry, or a listed mass at or too near
    1 + :data:`MASS_TOLERANCE` to tell. Each row is computed alone, so the rows of many
    answers give what each answer's give."""
    with np.errstate(all="ignore"):  # the rows at fault may overflow: they are refused
        fine = ((chosen <= 0.0) & (chosen > -math.inf)
                & ((top <= 0.0) & (top > -math.inf)).all(axis=1))
        own = listed.any(axis=1)
        agrees = (listed & (np.abs(top - chosen[:, None]) <= LOGPROB_TOLERANCE)).any(axis=1)
        mass = np.exp(top).sum(axis=1) + np.where(own, 0.0, np.exp(chosen))
        return ~fine | (own & ~agrees) | (mass > _TOLERANCE - 1e-9)


def _filled(gen: Generation, text: str, where: str, tokens: list[str], names: list[str],
            k: int, chosen: np.ndarray, top: np.ndarray, listed: np.ndarray
            ) -> np.ndarray | None:
    """``gen``'s statistics from one answer's checked steps (:func:`_chat_statistics`)."""
    check_spelling(tokens, text, f"{where}.content")
    t = answer_length(tokens, text)
    if not t:
        return None
    gen.tokens = tokens[:t]
    gen.token_logprobs = chosen[:t].astype(np.float32)
    gen.top_logprobs = top[:t].astype(np.float32)
    gen.top_tokens = [names[i:i + k] for i in range(0, t * k, k)]
    return listed[:t]


def _chat_statistics_many(requests: Sequence[tuple[Any, ...]]) -> list[_Reply]:
    """:func:`_chat_statistics` of each request ``(choice, lp, gen, text, where)``, as
    ``(value, None)`` or ``(None, error)``: the same values, the checks of the answers
    of one width k made by one numpy call each (:func:`_step_faults`, row by row)."""
    out: list[_Reply] = [(None, None)] * len(requests)
    groups: dict[int, list[tuple[int, tuple[list[str], list[str], list[Any], list[Any],
                                             int]]]] = {}
    for i, (choice, lp, _, _, _) in enumerate(requests):
        gathered = _gathered(choice, lp)
        if gathered is not None:
            groups.setdefault(gathered[4], []).append((i, gathered))
    for k, members in groups.items():
        chain = itertools.chain.from_iterable
        try:
            chosen = np.array(list(chain(g[2] for _, g in members)), dtype=np.float64)
            top = np.array(list(chain(g[3] for _, g in members)), dtype=np.float64
                           ).reshape(-1, k)
        except OverflowError:  # some answer's number: each answer alone
            for i, _ in members:
                out[i] = _reply(_chat_statistics, requests[i])
            continue
        listed = (np.array(list(chain(g[1] for _, g in members)), dtype=object).reshape(-1, k)
                  == np.array(list(chain(g[0] for _, g in members)), dtype=object)[:, None])
        ends = np.cumsum([len(g[0]) for _, g in members]).tolist()
        starts = [0, *ends[:-1]]
        faulty = np.logical_or.reduceat(_step_faults(chosen, top, listed), starts).tolist()
        for (i, (tokens, names, _, _, _)), a, b, bad in zip(members, starts, ends, faulty,
                                                           strict=True):
            if not bad:
                _, _, gen, text, where = requests[i]
                out[i] = _reply(_filled, (gen, text, where, tokens, names, k, chosen[a:b],
                                          top[a:b], listed[a:b]))
    return out


def _topk_entropies(gen: Generation, listed: np.ndarray | None = None
                    ) -> tuple[np.ndarray | None, dict[str, str]]:
    """:func:`~confide.backends.topk.topk_entropies` of ``gen``, the same float32 values
    and note, computed a whole answer at a time (per step it cost more than the rest of
    reading a record; ``benchmarks/results/import_speed.md``).

    Each step's sorted alternatives, the chosen token set apart or added as that function
    does, are summed in its order with its ``math.exp``, column by column, so every sum
    is rounded as there (``tests/test_import_speed_paths.py``). Answers outside the common
    case (no log-probabilities, no alternatives, a value that is not finite, rows of
    other lengths) go to that function itself.
    """
    top, chosen, names = gen.top_logprobs, gen.token_logprobs, gen.top_tokens
    if (top is None or chosen is None or names is None or top.ndim != 2
            or not top.shape[0] or not top.shape[1] or len(names) != top.shape[0]
            or len(gen.tokens) != top.shape[0] or chosen.shape != top.shape[:1]
            or not np.isfinite(top).all() or not np.isfinite(chosen).all()):
        return topk_entropies(gen)
    n, k = top.shape
    values, last = _sorted_rows(top)
    if listed is not None and listed.shape == (n, k):  # [t, j]: alternative j is the token
        # the least likely listed: set apart; not listed: its log p is known beyond the top-k
        apart = listed[np.arange(n), last] if k >= 2 else np.zeros(n, dtype=bool)
        unlisted = ~listed.any(axis=1)
    else:
        apart = np.zeros(n, dtype=bool)
        unlisted = np.zeros(n, dtype=bool)
        for t, (token, row) in enumerate(zip(gen.tokens, names, strict=True)):
            if len(row) != k:
                return topk_entropies(gen)
            if k >= 2 and row[last[t]] == token:
                apart[t] = True
            elif token not in row:
                unlisted[t] = True
    bounds = _row_bounds(values, chosen, apart, unlisted)
    some = bool(apart.any())
    return bounds.astype(np.float32), entropy_note(([k - 1] if some else [])
                                                   + ([k] if not some or not apart.all() else []))


def _sorted_rows(top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each step's alternatives as float64, best first (``sorted()`` by -log p, stable:
    ties keep their order; left as they are when listed best first, as the API does), and
    the column each step's least likely one came from."""
    n, k = top.shape
    values = top.astype(np.float64)
    if (values[:, :-1] >= values[:, 1:]).all():
        return values, np.full(n, k - 1)
    order = np.argsort(-values, axis=1, kind="stable")
    return values[np.arange(n)[:, None], order], order[:, -1]


def _row_bounds(values: np.ndarray, chosen: np.ndarray, apart: np.ndarray,
                unlisted: Any) -> np.ndarray:
    """Each step's entropy lower bound (float64) from its sorted alternatives ``values``,
    rounded as :func:`~confide.backends.topk.entropy_lower_bound` rounds it: ``apart``,
    the chosen token is the least likely listed and is set apart; ``unlisted``, it is not
    listed and its log-probability ``chosen`` is added."""
    n, k = values.shape
    p = np.fromiter(map(math.exp, values.ravel().tolist()), np.float64, n * k).reshape(n, k)
    # running sums (accumulate adds in order, as the loop of entropy_lower_bound does;
    # a sum() pairs terms otherwise); 0.0 - x: that loop's sign of a zero
    mass = np.add.accumulate(p, axis=1)[:, -1]
    seen = 0.0 - np.add.accumulate(p * values, axis=1)[:, -1]
    if unlisted.any():
        lp = chosen.astype(np.float64)[unlisted]
        p_lp = np.fromiter(map(math.exp, lp.tolist()), np.float64, len(lp))
        mass[unlisted] += p_lp
        seen[unlisted] -= p_lp * lp
    least = np.where(apart, values[:, k - 2], values[:, k - 1]) if apart.any() else values[:, -1]
    tail = 1.0 - mass
    return np.where(tail > 0.0, seen + tail * -least, seen)


def _topk_entropies_many(requests: Sequence[tuple[Any, ...]]) -> list[_Reply]:
    """:func:`_topk_entropies` of each request ``(gen, listed)``, as ``(value, None)`` or
    ``(None, error)``: the same float32 values and notes, the answers of one width k in
    one pass. Each step's row is computed as that function computes it (a row sorted
    best first is left as it is by the stable sort too; sums run along the row), so the
    answers together give what each gives alone. An answer outside the common case goes
    to that function itself."""
    out: list[_Reply] = [(None, None)] * len(requests)
    groups: dict[int, list[int]] = {}
    for i, (gen, listed) in enumerate(requests):
        top, chosen, names = gen.top_logprobs, gen.token_logprobs, gen.top_tokens
        if (listed is None or top is None or chosen is None or names is None
                or top.ndim != 2 or not top.shape[0] or not top.shape[1]
                or len(names) != top.shape[0] or len(gen.tokens) != top.shape[0]
                or chosen.shape != top.shape[:1] or listed.shape != top.shape
                or top.dtype != np.float32 or chosen.dtype != np.float32):
            out[i] = _reply(_topk_entropies, requests[i])
        else:
            groups.setdefault(top.shape[1], []).append(i)
    for k, members in groups.items():
        try:
            bounds, ends, some, every, finite = _bounds_of(
                [requests[i][0] for i in members], [requests[i][1] for i in members], k)
        except Exception:  # some answer's values: each answer alone
            for i in members:
                out[i] = _reply(_topk_entropies, requests[i])
            continue
        for i, a, b, s, e, f in zip(members, [0, *ends[:-1]], ends, some, every, finite,
                                    strict=True):
            if not f:  # not finite: that function's own way
                out[i] = _reply(_topk_entropies, requests[i])
                continue
            note = _NOTES.get((k, s, e))
            if note is None:
                note = _NOTES[k, s, e] = entropy_note(([k - 1] if s else [])
                                                      + ([k] if not s or not e else []))
            out[i] = (bounds[a:b].copy(), dict(note)), None
    return out


_NOTES: dict[tuple[int, bool, bool], dict[str, str]] = {}


def _bounds_of(gens: list[Generation], listeds: list[np.ndarray], k: int
               ) -> tuple[np.ndarray, list[int], list[bool], list[bool], list[bool]]:
    """The rows of :func:`_topk_entropies` for answers of width ``k``, joined: the float32
    bounds, each answer's end row, whether any and every step of it sets the chosen token
    apart, and whether its values are finite (the others' rows are not meant)."""
    top = np.concatenate([g.top_logprobs for g in gens])
    chosen32 = np.concatenate([g.token_logprobs for g in gens])
    listed = np.concatenate(listeds)
    ends = np.cumsum([len(g.tokens) for g in gens]).tolist()
    starts = [0, *ends[:-1]]
    finite = np.logical_and.reduceat(np.isfinite(top).all(axis=1) & np.isfinite(chosen32),
                                     starts).tolist()
    n = top.shape[0]
    values, last = _sorted_rows(top)
    apart = listed[np.arange(n), last] if k >= 2 else np.zeros(n, dtype=bool)
    unlisted = ~listed.any(axis=1)
    bounds = _row_bounds(values, chosen32, apart, unlisted).astype(np.float32)
    some = np.logical_or.reduceat(apart, starts).tolist()
    every = np.logical_and.reduceat(apart, starts).tolist()
    return bounds, ends, some, every, finite


# --- one record, or many at once ----------------------------------------------------------

# A record's reading asks for its answers' statistics (:func:`_chat_statistics`) and entropy
# bounds (:func:`_topk_entropies`) by yielding ``(kind, arguments)``; :func:`parse` answers
# each at once, :func:`parse_many` those of many records together. Either way the reading is
# the same code, its checks in the same order.
_STATISTICS, _ENTROPIES = "statistics", "entropies"
_T = TypeVar("_T")
_Steps = Generator[tuple[str, tuple[Any, ...]], Any, _T]
_Reply = tuple[Any, "Exception | None"]


def _one(kind: str) -> Callable[..., Any]:  # looked up when asked: a test may replace one
    return _chat_statistics if kind == _STATISTICS else _topk_entropies


def _many(kind: str) -> Callable[[Sequence[tuple[Any, ...]]], list[_Reply]]:
    return _chat_statistics_many if kind == _STATISTICS else _topk_entropies_many


def _reply(fn: Callable[..., Any], args: tuple[Any, ...]) -> _Reply:
    try:
        return fn(*args), None
    except Exception as exc:  # raised where the reading asked, in order
        return None, exc


def _step(steps: _Steps[_T], reply: _Reply) -> tuple[str, tuple[Any, ...]]:
    """Send a reply (a value, or an error raised where the reading asked) to ``steps``;
    its next request (StopIteration at its end)."""
    value, error = reply
    return steps.throw(error) if error is not None else steps.send(value)


def _answered(steps: _Steps[_T]) -> _T:
    """The end of ``steps``, each request answered at once."""
    reply: _Reply = (None, None)
    while True:
        try:
            kind, args = _step(steps, reply)
        except StopIteration as stop:
            return stop.value
        reply = _reply(_one(kind), args)


#: The message fields that hold a reasoning model's trace: vLLM's and DeepSeek's
#: ``reasoning_content``; ``reasoning`` (vLLM from 0.10, OpenRouter).
_REASONING = ("reasoning_content", "reasoning")


def _reasoning_choice(choice: dict[str, Any], reasoning: str, where: str, ctx: Context
                      ) -> _Steps[tuple[Generation, dict[str, str]]]:
    """A choice whose message keeps the trace apart (:data:`_REASONING`): the final answer
    with its trace, each read as a choice of its own (:func:`_choice`, every check
    included) from its share of ``logprobs.content``, which covers the trace's tokens and
    then the answer's (vLLM's reasoning parsers), or the answer's alone
    (:func:`confide.core.reasoning.trace_split` finds where they part)."""
    message = {k: v for k, v in choice["message"].items() if k not in _REASONING}
    answer = message.get("content")
    answer = answer if isinstance(answer, str) else ""
    lp = choice.get("logprobs")
    entries = lp.get("content") if isinstance(lp, dict) else None
    n = 0
    if isinstance(entries, list) and entries:
        if not _chat_well_formed(entries):  # named with its index in the whole list
            _find_chat_fault(entries, f"{where}.logprobs")
        tokens = [e.get("token") if isinstance(e, dict) else None for e in entries]
        if all(isinstance(t, str) for t in tokens):
            try:
                n = trace_split(tokens, reasoning, answer, ctx.reasoning_tags)  # type: ignore[arg-type]
            except ValueError as exc:
                raise BadField(f"{where}.logprobs.content", f"{exc} (the message's reasoning "
                                                            "and content)") from None
    plain = replace(ctx, reasoning_tags=None)  # each share is read as it is
    shares = []
    for part, text, chosen in ((0, reasoning, None if entries is None else entries[:n]),
                               (1, answer, None if entries is None else entries[n:])):
        if part == 0 and chosen:  # the trace's tokens spell its tags too: keep them all
            text = "".join(e["token"] for e in chosen)
        elif part == 1 and chosen:  # the white space the answer's tokens begin with
            joined = "".join(e["token"] for e in chosen)
            text = joined[:len(joined) - len(joined.lstrip())] + text.lstrip()
        logprobs = lp if entries is None else {**lp, "content": chosen}  # type: ignore[dict-item]
        shares.append((yield from _choice_steps({**choice, "message": {**message,
                                                                       "content": text},
                                                 "logprobs": logprobs}, where, plain)))
    (trace, trace_notes), (gen, notes) = shares
    trace.text = reasoning.strip()
    trace.finish_reason = gen.finish_reason if gen.empty else "stop"
    gen.trace = trace
    return gen, {**trace_notes, **notes}


def _raw_text(choice: dict[str, Any]) -> str:
    """The choice's answer text, unstripped (read after ``generation_from_choice``
    accepted the choice: the message or text is there, as text or null)."""
    message = choice.get("message")
    raw = message.get("content") if isinstance(message, dict) else choice.get("text")
    return raw or ""


def _item_id(obj: dict[str, Any], body: dict[str, Any], ctx: Context) -> str:
    return item_id([(obj, "custom_id", "custom_id"), (obj, "id", "id"),
                    (body, "id", "response.id")], ctx.default_id)


def parse(obj: dict[str, Any], ctx: Context) -> Imported:
    """One log record as an :class:`~confide.ingest.common.Imported` (field map above)."""
    return _answered(_parse_steps(obj, ctx))


def _parse_steps(obj: dict[str, Any], ctx: Context) -> _Steps[Imported]:
    body, where, request = _unwrap(obj)
    if body.get("object") == "chat.completion.chunk":
        raise BadField(f"{where}object", "a streamed chunk; log the whole response "
                                         "(stream: false) or join the chunks first")
    if isinstance(body.get("error"), dict):
        raise BadField(f"{where}error", f"the request failed: {body['error'].get('message')}")
    choices = need_list(body, "choices", f"{where}choices")
    if not choices:
        raise BadField(f"{where}choices", "no choices")
    order = index_order([c.get("index") if isinstance(c, dict) else None for c in choices],
                        lambda i: f"{where}choices[{i}].index")
    gens = []
    for i in order:
        gens.append((yield from _choice_steps(choices[i], f"{where}choices[{i}]", ctx)))
    greedy, notes = gens[0]
    samples = [g for g, _ in gens[1:]]
    for _, more in gens[1:]:
        notes = {**more, **notes}
    metadata: dict[str, Any] = {}
    if isinstance(body.get("model"), str):
        metadata["model"] = body["model"]
    item = Item(id=_item_id(obj, body, ctx), prompt=_prompt(obj, request),
                references=references_from(obj.get("references"), "references"),
                metadata=metadata)
    caps = capabilities_of(greedy, samples)
    return Imported(item=item, greedy=greedy, samples=samples,
                    label=label_from(obj, ctx, ("label",)), line=ctx.line, capabilities=caps,
                    approximate={k: v for k, v in notes.items() if k in caps})


def parse_many(records: Sequence[tuple[dict[str, Any], Context]]
               ) -> list[Imported | Exception]:
    """:func:`parse` of each ``(record, context)``: each record's :class:`Imported`, or
    the exception its reading raised (:class:`~confide.ingest.common.BadField`, ...), to be
    raised in its turn. The same records and errors, the statistics and entropy bounds of
    all the records' answers computed together (:func:`_chat_statistics_many`,
    :func:`_topk_entropies_many`): the numpy calls once made for each record are made once
    for all of them (``benchmarks/results/import_speed.md``)."""
    results: list[Imported | Exception] = [BadField("record", "not read")] * len(records)
    steps = [_parse_steps(obj, ctx) for obj, ctx in records]
    replies: dict[int, _Reply] = {i: (None, None) for i in range(len(records))}
    while replies:
        asked: dict[str, list[tuple[int, tuple[Any, ...]]]] = {}
        for i, reply in replies.items():
            try:
                kind, args = _step(steps[i], reply)
            except StopIteration as stop:
                results[i] = stop.value
            except Exception as exc:  # the caller raises it in its turn
                results[i] = exc
            else:
                asked.setdefault(kind, []).append((i, args))
        replies = {}
        for kind, requests in asked.items():
            answers = _many(kind)([args for _, args in requests])
            replies.update(zip([i for i, _ in requests], answers, strict=True))
    return results


FORMATS.add("openai", LogFormat("openai", fits, parse,
                                "OpenAI-compatible responses, Batch API output, proxy logs",
                                parse_many=parse_many))
