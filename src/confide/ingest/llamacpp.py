"""llama.cpp server ``/completion`` replies and Ollama ``/api/generate`` / ``/api/chat`` replies.

One reply per record, as the server sent it (not streamed), or a logging proxy's
pair ``{"request": {...}, "response": <reply>}``. Three shapes of llama.cpp's
``completion_probabilities`` (``n_probs > 0``) are read:

- newer servers: ``[{"id", "token", "logprob", "bytes", "top_logprobs": [{"id",
  "token", "logprob", "bytes"}]}]``: the model's own log-probabilities;
- newer servers asked for ``post_sampling_probs``: ``[{"id", "token", "prob",
  "top_probs": [{"id", "token", "prob"}]}]``: probabilities *after* the samplers
  (top-k/top-p truncate and renormalise them): kept, marked in
  ``Imported.approximate``, and no entropy bounds are taken from them;
- older servers: ``[{"content", "probs": [{"tok_str", "prob"}]}]``: the chosen
  token's probability is its entry in ``probs`` (none when it is not listed).
  These servers took them from the sampler's candidates, which are the model's
  own distribution only under greedy decoding: with
  ``generation_settings.temperature`` (or ``temp``) at 0 they count as exact,
  otherwise as after the samplers (as above).

Ollama replies (``{"model", "response" | "message": {"content"}, "done",
"done_reason"}``) give text, and log-probabilities where the server returns them
(``"logprobs": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]``).
A streamed chunk (``"done": false``) is refused with a message saying so.

Field map
---------
=====================  ==========================================================
``Item.id``            ``custom_id`` or ``id`` of the record, else
                       ``<file stem>-<line>`` (``id_slot`` is not an id)
``Item.prompt``        the request's ``messages`` / ``prompt``, else the reply's
                       ``prompt``, else the record's ``question``, else ``""``
``Item.references``    ``references``, if the record has it
``Item.metadata``      ``model`` of the reply
label                  ``label`` (or ``label_field``), if any
text                   ``content`` (llama.cpp), ``response`` or ``message.content``
                       (Ollama)
finish_reason          ``"length"`` for ``stop_type == "limit"``, ``stopped_limit``
                       or ``done_reason == "length"``, else ``"stop"``
=====================  ==========================================================

Reasoning: a ``<think>…</think>`` block in the text becomes the answer's trace, the text
after it the answer, each with its own tokens (:mod:`confide.core.reasoning`; tags set by
``reasoning_tags``); Ollama's ``thinking`` (``message.thinking`` of ``/api/chat``,
``thinking`` of ``/api/generate``) gives the trace from its own field.

Tokens past the answer text (the end-of-sequence token's empty piece, a stop
word) are left out. A reply is one answer: these servers give no samples
(``answer="greedy-file"`` groups nothing either).

Each token's listed probabilities may not sum above 1 and must agree with the chosen
token's, and the tokens must spell the text (:mod:`confide.ingest.common`, "Untrusted
input").

Detected (``format="auto"``) by ``completion_probabilities``, or ``content`` with one
of llama.cpp's ``stop``, ``tokens_predicted``, ``generation_settings``, ``stop_type``
(llama.cpp); by ``done`` with a text ``response`` or a ``message`` (Ollama); or,
nested, by a ``response`` holding such a reply (a format whose fields are the record's
own is preferred to it).

Capabilities: ``token_logprobs`` and ``top_logprobs`` where the reply has them;
``token_entropies`` as lower bounds from the top-n only from the model's own
log-probabilities (newer ``logprob`` shape, Ollama, older shape under greedy
decoding).
"""

from __future__ import annotations

import math
from typing import Any

from confide.core.records import Item
from confide.ingest.common import (
    FORMATS,
    BadField,
    Context,
    Fit,
    Imported,
    LogFormat,
    Step,
    answer_with_trace,
    build_generation,
    capabilities_of,
    check_logprob,
    check_mass,
    check_prob,
    check_spelling,
    check_step,
    get_list,
    get_str,
    item_id,
    label_from,
    reasoning_field,
    references_from,
    text_prompt,
)

__all__ = ["fits", "parse"]

_POST_SAMPLING = ("probabilities after llama.cpp's samplers (top-k/top-p truncate and "
                  "renormalise them), not the model's distribution")


def _reply_kind(value: Any) -> str | None:
    """``"llama.cpp"`` or ``"Ollama"`` for a reply of either, else None."""
    if not isinstance(value, dict):
        return None
    if "completion_probabilities" in value:
        return "llama.cpp"
    if isinstance(value.get("content"), str) and any(
            k in value for k in ("stop", "tokens_predicted", "generation_settings", "stop_type")):
        return "llama.cpp"
    # Ollama: /api/generate has "response" text, /api/chat a "message"; both say "done"
    if "done" in value and (isinstance(value.get("response"), str)
                            or isinstance(value.get("message"), dict)):
        return "Ollama"
    return None


def _is_reply(value: Any) -> bool:
    return _reply_kind(value) is not None


_SHAPES = {"llama.cpp": "llama.cpp's 'content' with 'stop', 'tokens_predicted' or "
                        "'completion_probabilities' (a llama.cpp /completion reply)",
           "Ollama": "'done' with a text 'response' or a 'message' (an Ollama reply)"}


def fits(obj: dict[str, Any]) -> Fit | None:
    """A llama.cpp ``/completion`` reply, an Ollama reply, or (nested) a request/reply
    pair of one."""
    kind = _reply_kind(obj)
    if kind is not None:
        return Fit(_SHAPES[kind])
    kind = _reply_kind(obj.get("response"))
    if kind is not None:
        return Fit(f"a 'response' holding {_SHAPES[kind]}", nested=True)
    return None


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


def _alternatives(entries: Any, where: str, value_key: str, token_key: str
                  ) -> list[tuple[str, float]]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise BadField(where, "must be a list")
    out = []
    for j, alt in enumerate(entries):
        at = f"{where}[{j}]"
        if not isinstance(alt, dict):
            raise BadField(at, "must be an object")
        token = get_str(alt, token_key, f"{at}.{token_key}")
        if token is None:
            raise BadField(f"{at}.{token_key}", "missing")
        if value_key == "logprob":
            value = check_logprob(alt.get("logprob"), f"{at}.logprob")
        else:
            value = _log(check_prob(alt.get("prob"), f"{at}.prob"))
        out.append((token, value))
    out.sort(key=lambda tv: -tv[1])
    return out


def _token_id(entry: dict[str, Any], where: str) -> int | None:
    tid = entry.get("id")
    if tid is None:
        return None
    if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
        raise BadField(f"{where}.id", "a token id must be an integer >= 0")
    return tid


def _new_steps(probs: list[Any], where: str) -> tuple[list[Step], bool]:
    """Steps of the newer shape, and whether they are the model's own distribution."""
    steps = []
    exact = True
    for t, entry in enumerate(probs):
        at = f"{where}[{t}]"
        if not isinstance(entry, dict):
            raise BadField(at, "must be an object")
        token = get_str(entry, "token", f"{at}.token")
        if token is None:
            raise BadField(f"{at}.token", "missing")
        if "logprob" in entry:
            logprob = check_logprob(entry["logprob"], f"{at}.logprob")
            top = _alternatives(entry.get("top_logprobs"), f"{at}.top_logprobs", "logprob",
                                "token")
            check_step(token, logprob, top, f"{at}.logprob", f"{at}.top_logprobs")
        elif "prob" in entry:
            exact = False
            p = check_prob(entry["prob"], f"{at}.prob")
            if p == 0:
                raise BadField(f"{at}.prob", "the chosen token has probability 0")
            logprob = math.log(p)
            top = _alternatives(entry.get("top_probs"), f"{at}.top_probs", "prob", "token")
            check_step(token, logprob, top, f"{at}.prob", f"{at}.top_probs")
        else:
            raise BadField(at, "needs 'logprob' (or 'prob' with post_sampling_probs)")
        steps.append(Step(token, logprob, top, token_id=_token_id(entry, at)))
    return steps, exact


def _old_steps(probs: list[Any], where: str) -> list[Step]:
    steps = []
    for t, entry in enumerate(probs):
        at = f"{where}[{t}]"
        if not isinstance(entry, dict):
            raise BadField(at, "must be an object")
        token = get_str(entry, "content", f"{at}.content")
        if token is None:
            raise BadField(f"{at}.content", "missing")
        top = _alternatives(entry.get("probs"), f"{at}.probs", "prob", "tok_str")
        check_mass(sum(math.exp(v) for _, v in top), f"{at}.probs")
        chosen = next((v for tok, v in top if tok == token), None)
        if chosen is not None and chosen == -math.inf:
            raise BadField(f"{at}.probs", "the chosen token has probability 0")
        steps.append(Step(token, chosen, top))
    return steps


def _greedy_settings(reply: dict[str, Any]) -> bool:
    settings = reply.get("generation_settings")
    if not isinstance(settings, dict):
        return False
    for key in ("temperature", "temp"):
        value = settings.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value <= 0
    return False


def _unwrap(obj: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    if _is_reply(obj.get("response")):
        request = obj.get("request")
        if request is not None and not isinstance(request, dict):
            raise BadField("request", "must be an object")
        return obj["response"], "response.", request
    return obj, "", None


def parse(obj: dict[str, Any], ctx: Context) -> Imported:
    """One reply as an :class:`~confide.ingest.common.Imported` (field map above)."""
    reply, where, request = _unwrap(obj)
    if reply.get("done") is False:
        raise BadField(f"{where}done", "a streamed chunk; log the final reply "
                                       "(stream: false) or join the chunks first")
    steps: list[Step] | None = None
    notes: dict[str, str] = {}
    bounds = ctx.entropy_bounds
    thinking = None
    if "content" in reply or "completion_probabilities" in reply:  # llama.cpp
        text = get_str(reply, "content", f"{where}content", default="", allow_none=True) or ""
        where_steps = "completion_probabilities"
        probs = get_list(reply, "completion_probabilities", f"{where}completion_probabilities")
        if probs:
            first = probs[0] if isinstance(probs[0], dict) else {}
            if "probs" in first or ("content" in first and "token" not in first):
                steps = _old_steps(probs, f"{where}completion_probabilities")
                exact = _greedy_settings(reply)
            else:
                steps, exact = _new_steps(probs, f"{where}completion_probabilities")
            if not exact:
                bounds = False
                notes = {"token_logprobs": _POST_SAMPLING, "top_logprobs": _POST_SAMPLING}
        elif probs is not None:
            steps = []
        limit = (reply.get("stop_type") == "limit" or reply.get("stopped_limit") is True)
    else:  # Ollama
        message = reply.get("message")
        if isinstance(message, dict):
            text = get_str(message, "content", f"{where}message.content", default="",
                           allow_none=True) or ""
            thinking = reasoning_field(message, ("thinking",), f"{where}message.")
        else:
            text = get_str(reply, "response", f"{where}response", default="",
                           allow_none=True) or ""
            thinking = reasoning_field(reply, ("thinking",), where)
        where_steps = "logprobs"
        lps = get_list(reply, "logprobs", f"{where}logprobs")
        if lps is not None:
            steps, _ = _new_steps(lps, f"{where}logprobs")
        limit = reply.get("done_reason") == "length"
    if steps and thinking is None:  # with a trace, answer_with_trace checks them
        check_spelling([s.token for s in steps], text, f"{where}{where_steps}")
    greedy, more = build_generation(text, steps, finish_reason="length" if limit else "stop",
                                    bounds=bounds, cut=thinking is None)
    greedy = answer_with_trace(greedy, thinking, ctx, f"{where}{where_steps}")
    notes = {**more, **notes}
    the_id = item_id([(obj, "custom_id", "custom_id"), (obj, "id", "id")], ctx.default_id)
    prompt: str | list[dict[str, str]] = ""
    for source, at in ((request, "request."), (reply, where), (obj, "")):
        if not isinstance(source, dict):
            continue
        found = next((k for k in ("messages", "prompt", "question")
                      if source.get(k) is not None), None)
        if found is None or (source is reply and not isinstance(source[found], str)):
            continue  # a reply's prompt may be token ids: not a question
        prompt = text_prompt(source[found], f"{at}{found}")
        break
    metadata = {"model": reply["model"]} if isinstance(reply.get("model"), str) else {}
    caps = capabilities_of(greedy, [])
    return Imported(item=Item(id=the_id, prompt=prompt,
                              references=references_from(obj.get("references"), "references"),
                              metadata=metadata),
                    greedy=greedy, label=label_from(obj, ctx, ("label",)), line=ctx.line,
                    capabilities=caps, approximate={k: v for k, v in notes.items() if k in caps})


FORMATS.add("llamacpp", LogFormat("llamacpp", fits, parse,
                                  "llama.cpp /completion and Ollama replies"))
