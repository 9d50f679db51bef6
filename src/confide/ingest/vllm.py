"""vLLM offline dumps: ``RequestOutput`` objects written as JSON, one per record.

vLLM has no JSON form of its outputs of its own; this reads the one that keeps
the attribute names of ``vllm.RequestOutput`` and ``vllm.CompletionOutput``
(``dataclasses.asdict``-like, or built by hand)::

    {"request_id": "0", "prompt": "Q: ...", "prompt_token_ids": [...],
     "outputs": [{"index": 0, "text": " Paris", "token_ids": [3681, 2],
                  "cumulative_logprob": -0.11, "finish_reason": "stop", "stop_reason": null,
                  "logprobs": [{"3681": {"logprob": -0.1, "rank": 1, "decoded_token": " Paris"},
                                "5011": {"logprob": -2.5, "rank": 2, "decoded_token": " Rome"}},
                               {"2": {"logprob": -0.01, "rank": 1, "decoded_token": "</s>"}}]}]}

JSON keys are text, so a token id key is its decimal digits. A step's entry may
also be a bare number (the log-probability).

Field map
---------
=====================  ==========================================================
``Item.id``            ``id``, else ``request_id``, else ``<file stem>-<line>``
``Item.prompt``        ``prompt`` (text), else ``messages``/``question``, else ``""``
``Item.references``    ``references``, if the record has it
``Item.metadata``      ``prompt_token_ids`` are not kept
label                  ``label`` (or ``label_field``), if any
greedy, samples        ``outputs`` in ``index`` order: with ``answer="first"``
                       output 0 is the answer, the others (``n > 1``) samples
text                   ``outputs[i].text``
token ids              ``outputs[i].token_ids``
log-probs              ``outputs[i].logprobs[t][str(token_ids[t])].logprob``; the
                       alternatives are the step's entries ranked ``1, 2, ...``
                       (``rank``); tokens' text from ``decoded_token``
finish_reason          ``finish_reason`` (``"length"`` stays, anything else ``"stop"``)
=====================  ==========================================================

``cumulative_logprob`` and ``prompt_logprobs`` are not used. The ``index`` values
must be ``0 .. n-1``, each once; a step's entries (distinct token ids) may not sum
above probability 1, and the decoded tokens must spell the text
(:mod:`confide.ingest.common`, "Untrusted input").

Reasoning: the ``<think>…</think>`` block of an output's ``text`` (a DeepSeek-R1-style
text holds only the closing tag: its opening one was in the prompt) becomes the
answer's trace, the text after it the answer, each with its own tokens
(:mod:`confide.core.reasoning`; tags set by ``reasoning_tags``); an output that keeps the
reasoning apart, in ``reasoning_content`` or ``reasoning``, gives the trace from it (its
tokens then cover the trace and the answer, or the answer alone).

Detected (``format="auto"``) by an ``outputs`` list of objects with ``text`` or
``token_ids``.

Answer tokens, as the ``vllm`` backend takes them: a final end-of-sequence (or
stop-token) token is left out (``finish_reason == "stop"`` with ``stop_reason``
null, or equal to the last token id), and, when every token's
``decoded_token`` is there, tokens that carry only a cut stop string too.

Capabilities: ``token_logprobs``, ``top_logprobs`` (the entries vLLM ranked
``1..K``; the sampled token vLLM adds beyond the top-K is not an alternative),
``token_entropies`` as lower bounds from those top-K (marked in
``Imported.approximate``, the ``vllm`` backend's rule), and ``samples`` with
several outputs. Without ``rank`` the entries are sorted by log-probability and
are all alternatives, but for the entropy bounds a sampled token that is the least
likely of them is set apart (it may be the one vLLM adds).
"""

from __future__ import annotations

import math
from typing import Any

from confide.backends.topk import contiguous_ranks
from confide.core.records import Generation, Item
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
    check_spelling,
    get_list,
    get_str,
    index_order,
    item_id,
    label_from,
    need_list,
    reasoning_field,
    references_from,
    text_prompt,
)

__all__ = ["fits", "parse"]


def fits(obj: dict[str, Any]) -> Fit | None:
    """A record with an ``outputs`` list of objects holding ``text`` or ``token_ids``."""
    outputs = obj.get("outputs")
    if (isinstance(outputs, list) and bool(outputs) and isinstance(outputs[0], dict)
            and ("token_ids" in outputs[0] or "text" in outputs[0])):
        return Fit("an 'outputs' list of objects with 'text' or 'token_ids' (a vLLM "
                   "RequestOutput)")
    return None


def _entry(value: Any, where: str) -> tuple[float, int | None, str | None]:
    """``(logprob, rank, decoded_token)`` of one entry of a step."""
    if not isinstance(value, dict):
        return check_logprob(value, where), None, None
    if "logprob" not in value:
        raise BadField(f"{where}.logprob", "missing")
    logprob = check_logprob(value["logprob"], f"{where}.logprob")
    rank = value.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise BadField(f"{where}.rank", f"must be an integer >= 1, not {rank!r}")
    decoded = get_str(value, "decoded_token", f"{where}.decoded_token", allow_none=True)
    return logprob, rank, decoded


def _step(entries: Any, chosen: int, where: str) -> tuple[Step, bool]:
    """One step's :class:`Step` and whether its chosen token's text is known."""
    if not isinstance(entries, dict):
        raise BadField(where, "must be a {token id: logprob} object")
    parsed: dict[int, tuple[float, int | None, str | None]] = {}
    for key, value in entries.items():
        try:
            tid = int(key)
        except ValueError:
            raise BadField(where, f"key {key!r} is not a token id") from None
        parsed[tid] = _entry(value, f"{where}[{key!r}]")
    if chosen not in parsed:
        raise BadField(where, f"the chosen token {chosen} is not among the step's entries")
    check_mass(sum(math.exp(v[0]) for v in parsed.values()), where)
    logprob, _, decoded = parsed[chosen]

    def text(tid: int) -> str:
        piece = parsed[tid][2]
        return piece if piece is not None else str(tid)

    listed = list(parsed)
    # past the contiguous top-K: the sampled token vLLM adds (the vllm backend's rule)
    at = contiguous_ranks([parsed[tid][1] for tid in listed])
    ranked = at is not None
    if at is not None:
        top_ids = [listed[i] for i in at]
    else:
        top_ids = sorted(parsed, key=lambda tid: -parsed[tid][0])
    top = [(text(tid), parsed[tid][0]) for tid in top_ids]
    step = Step(decoded if decoded is not None else str(chosen), logprob, top,
                token_id=chosen, extra_possible=not ranked)
    return step, decoded is not None


def _output(out: Any, where: str, ctx: Context) -> tuple[Generation, dict[str, str]]:
    if not isinstance(out, dict):
        raise BadField(where, "an output must be an object")
    text = get_str(out, "text", f"{where}.text", default="", allow_none=True) or ""
    ids = get_list(out, "token_ids", f"{where}.token_ids") or []
    for t, tid in enumerate(ids):
        if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
            raise BadField(f"{where}.token_ids[{t}]", "a token id must be an integer >= 0")
    finish = get_str(out, "finish_reason", f"{where}.finish_reason", default=None,
                     allow_none=True)
    stop_reason = out.get("stop_reason")
    if stop_reason is not None and (isinstance(stop_reason, bool)
                                    or not isinstance(stop_reason, (int, str))):
        raise BadField(f"{where}.stop_reason", "must be a token id, text or null")
    n = len(ids)
    if finish == "stop" and n and (stop_reason is None or stop_reason == ids[-1]):
        n -= 1  # the end-of-sequence (or stop) token is not part of the answer
    steps_raw = get_list(out, "logprobs", f"{where}.logprobs")
    steps: list[Step] | None = None
    known = True
    if steps_raw is not None:
        if len(steps_raw) != len(ids):
            raise BadField(f"{where}.logprobs", f"{len(steps_raw)} steps for {len(ids)} "
                                                "token ids")
        steps = []
        for t in range(n):
            step, has_text = _step(steps_raw[t], ids[t], f"{where}.logprobs[{t}]")
            steps.append(step)
            known = known and has_text
    reasoning = reasoning_field(out, ("reasoning_content", "reasoning"), f"{where}.")
    if steps and known and reasoning is None:  # with a trace, answer_with_trace checks them
        check_spelling([s.token for s in steps], text, f"{where}.logprobs")
    gen, notes = build_generation(text, steps, finish_reason="length" if finish == "length"
                                  else "stop", cut=known and reasoning is None,
                                  bounds=ctx.entropy_bounds, token_ids=ids[:n],
                                  tokens_known=known)
    return answer_with_trace(gen, reasoning, ctx, f"{where}.logprobs"), notes


def parse(obj: dict[str, Any], ctx: Context) -> Imported:
    """One ``RequestOutput`` record as an :class:`~confide.ingest.common.Imported`."""
    outputs = need_list(obj, "outputs", "outputs")
    if not outputs:
        raise BadField("outputs", "no outputs")
    order = index_order([o.get("index") if isinstance(o, dict) else None for o in outputs],
                        lambda i: f"outputs[{i}].index")
    gens = [_output(outputs[i], f"outputs[{i}]", ctx) for i in order]
    greedy, notes = gens[0]
    samples = [g for g, _ in gens[1:]]
    for _, more in gens[1:]:
        notes = {**more, **notes}
    the_id = item_id([(obj, "id", "id"), (obj, "request_id", "request_id")], ctx.default_id)
    prompt: str | list[dict[str, str]] = ""
    for key in ("prompt", "messages", "question"):
        if obj.get(key) is not None:
            prompt = text_prompt(obj[key], key)
            break
    caps = capabilities_of(greedy, samples)
    return Imported(item=Item(id=the_id, prompt=prompt,
                              references=references_from(obj.get("references"), "references")),
                    greedy=greedy, samples=samples, label=label_from(obj, ctx, ("label",)),
                    line=ctx.line, capabilities=caps,
                    approximate={k: v for k, v in notes.items() if k in caps})


FORMATS.add("vllm", LogFormat("vllm", fits, parse,
                              "vLLM offline RequestOutput dumps (outputs[*].logprobs)"))
