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

import math
from typing import Any

from confide.backends.openai_logprobs import MalformedResponse, generation_from_choice
from confide.backends.topk import topk_entropies
from confide.core.records import Generation, Item
from confide.ingest.common import (
    FORMATS,
    BadField,
    Context,
    Imported,
    LogFormat,
    capabilities_of,
    check_logprob,
    get_list,
    item_id,
    label_from,
    need_list,
    references_from,
    text_prompt,
)

__all__ = ["looks_like", "parse"]

_OBJECTS = ("chat.completion", "text_completion")
_NUMBER = (float, int)  # exact types: a bool is not a log-probability


def _is_response(value: Any) -> bool:
    return isinstance(value, dict) and (isinstance(value.get("choices"), list)
                                        or value.get("object") in _OBJECTS)


def looks_like(obj: dict[str, Any]) -> bool:
    """A response object, a Batch API output line or a request/response pair."""
    if _is_response(obj):
        return True
    response = obj.get("response")
    if isinstance(response, dict) and (_is_response(response)
                                       or _is_response(response.get("body"))):
        return True
    return "custom_id" in obj and ("response" in obj or "error" in obj)


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
    """Whether every entry of ``logprobs.content`` is well formed, in one tight loop (the
    common case; :func:`_check_chat` names the field at fault otherwise)."""
    inf = math.inf
    try:
        for entry in content:
            lp = entry["logprob"]
            if type(entry["token"]) is not str or type(lp) not in _NUMBER or not -inf < lp <= 0:
                return False
            alts = entry.get("top_logprobs")
            if alts is None:
                continue
            if type(alts) is not list:
                return False
            for alt in alts:
                v = alt["logprob"]
                if type(alt["token"]) is not str or type(v) not in _NUMBER or not -inf < v <= 0:
                    return False
    except (KeyError, TypeError):
        return False
    return True


def _check_chat(lp: dict[str, Any], where: str) -> None:
    content = lp.get("content")
    if content is None:
        return
    if isinstance(content, list) and _chat_well_formed(content):
        return
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
        check_logprob(entry["logprob"], f"{at}.logprob")
        for j, alt in enumerate(get_list(entry, "top_logprobs", f"{at}.top_logprobs") or []):
            aw = f"{at}.top_logprobs[{j}]"
            if not isinstance(alt, dict):
                raise BadField(aw, "must be an object")
            if not isinstance(alt.get("token"), str):
                raise BadField(f"{aw}.token", "must be text" if "token" in alt else "missing")
            check_logprob(alt.get("logprob"), f"{aw}.logprob")


def _check_legacy(lp: dict[str, Any], where: str) -> None:
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
        for key, value in alts.items():
            check_logprob(value, f"{where}.top_logprobs[{t}][{key!r}]")


def _choice(choice: Any, where: str, ctx: Context) -> tuple[Generation, dict[str, str]]:
    if not isinstance(choice, dict):
        raise BadField(where, "a choice must be an object")
    if "delta" in choice:
        raise BadField(f"{where}.delta", "a streamed chunk; log the whole response "
                                         "(stream: false) or join the chunks first")
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise BadField(f"{where}.finish_reason", "must be text")
    lp = choice.get("logprobs")
    if lp is not None:
        if not isinstance(lp, dict):
            raise BadField(f"{where}.logprobs", "must be an object")
        if "content" in lp:
            _check_chat(lp, f"{where}.logprobs")
        else:
            _check_legacy(lp, f"{where}.logprobs")
    try:  # the openai backend's reading of a choice, so both agree
        gen = generation_from_choice(choice, top_k_alternatives=1)
    except MalformedResponse as exc:
        raise BadField(f"{where}.{exc.field}" if exc.field else where, str(exc)) from None
    if not gen.tokens and gen.text:  # an empty token list with an answer: no statistics
        gen.tokens, gen.token_logprobs, gen.top_logprobs, gen.top_tokens = [], None, None, None
    notes: dict[str, str] = {}
    if ctx.entropy_bounds and gen.top_logprobs is not None:  # as the openai backend does
        gen.token_entropies, notes = topk_entropies(gen)
    return gen, notes


def _item_id(obj: dict[str, Any], body: dict[str, Any], ctx: Context) -> str:
    return item_id([(obj, "custom_id", "custom_id"), (obj, "id", "id"),
                    (body, "id", "response.id")], ctx.default_id)


def parse(obj: dict[str, Any], ctx: Context) -> Imported:
    """One log record as an :class:`~confide.ingest.common.Imported` (field map above)."""
    body, where, request = _unwrap(obj)
    if body.get("object") == "chat.completion.chunk":
        raise BadField(f"{where}object", "a streamed chunk; log the whole response "
                                         "(stream: false) or join the chunks first")
    if isinstance(body.get("error"), dict):
        raise BadField(f"{where}error", f"the request failed: {body['error'].get('message')}")
    choices = need_list(body, "choices", f"{where}choices")
    if not choices:
        raise BadField(f"{where}choices", "no choices")
    indexed = []
    for i, c in enumerate(choices):
        index = c.get("index", i) if isinstance(c, dict) else i
        if isinstance(index, bool) or not isinstance(index, int):
            raise BadField(f"{where}choices[{i}].index", "must be an integer")
        indexed.append((index, i, c))
    indexed.sort(key=lambda x: (x[0], x[1]))
    gens = [_choice(c, f"{where}choices[{i}]", ctx) for _, i, c in indexed]
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


FORMATS.add("openai", LogFormat("openai", looks_like, parse,
                                "OpenAI-compatible responses, Batch API output, proxy logs"))
