"""confide's own minimal log form: one answer per record, with what statistics you have.

::

    {"id": "q1", "question": "Capital of France?", "answer": "Paris",
     "tokens": ["Par", "is"], "token_logprobs": [-0.05, -0.01],
     "top_logprobs": [{"Par": -0.05, "Lyon": -3.2}, {"is": -0.01, "ise": -5.0}],
     "samples": ["Paris", {"answer": "Lyon", "token_logprobs": [-3.2]}],
     "references": ["Paris"], "label": 1}

Field map
---------
=====================  ==========================================================
``id``                 text or integer (optional: ``<file stem>-<line>``)
``question``           required: text, or chat messages (``role``, ``content``)
``answer``             required: the answer's text
``tokens``             optional: the answer's tokens (exactly the answer: nothing
                       past it is cut)
``token_logprobs``     optional: :math:`\\log p(y_t)` per token, finite and
                       :math:`\\le 0`
``top_logprobs``       optional: per token a ``{token: logprob}`` object of the
                       model's **top-k** alternatives (any order; sorted here); the
                       entropy lower bounds rely on them being the top-k
``reasoning``          optional: the reasoning trace's text, when kept apart from
                       ``answer`` (the tokens and statistics then cover the trace
                       and the answer, or the answer alone)
``member_logprobs``    optional: the answer's tokens under each of :math:`M`
                       ensemble members (teacher forcing), one list per member:
                       ``[[log p_1(y_1), ..., log p_1(y_T)], ..., [log p_M(y_1), ...]]``,
                       each finite and :math:`\\le 0`, every list as long as the
                       answer's tokens (``tokens``/``token_logprobs`` when given)
``samples``            optional: sampled answers, each a text or an object with
                       ``answer`` and the optional statistics above
``references``         optional: accepted answers (text, number or a list)
``label``              optional: correctness, true/false or a number in [0, 1]
other fields           kept in ``Item.metadata``
=====================  ==========================================================

The lengths of ``tokens``, ``token_logprobs`` and ``top_logprobs`` must agree, the
tokens must spell the answer, and each token's statistics must agree with each other
(:mod:`confide.ingest.common`, "Untrusted input"). Empty statistics lists with a
non-empty answer mean no statistics.

A reasoning model's ``<think>…</think>`` block in ``answer`` (or the ``reasoning`` field)
becomes the answer's trace, and the text after it the answer
(:mod:`confide.core.reasoning`; tags set by ``reasoning_tags``).

Detected (``format="auto"``) by ``question`` with a text ``answer``.

Capabilities: ``token_logprobs``, ``top_logprobs`` and ``token_entropies`` (lower
bounds from the top-k, marked in ``Imported.approximate``) when the answer and
every sample have them; ``samples`` with samples. ``member_logprobs`` become the
answer's :class:`~confide.core.records.MemberStatistics` (chosen-token
log-probabilities only: the members' entropies need whole distributions), which feed
the sequence-level ensemble scorers (``ens_seq_total_pe``/``_ep``,
``ens_seq_rmi_pe``/``_ep``) when every sample has them; a log from ``confide run
--ensemble`` exported as JSON Lines carries them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from confide.core.records import Generation, Item, MemberStatistics
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
    check_spelling,
    check_step,
    get_list,
    item_id,
    label_from,
    reasoning_field,
    references_from,
    text_prompt,
)

__all__ = ["fits", "parse"]

_KNOWN = ("id", "question", "answer", "reasoning", "tokens", "token_logprobs", "top_logprobs",
          "member_logprobs", "samples", "references", "label")


def fits(obj: dict[str, Any]) -> Fit | None:
    """A record with ``question`` and a text ``answer`` (confide's own form)."""
    if "question" in obj and isinstance(obj.get("answer"), str):
        return Fit("'question' and a text 'answer' (confide's own form)")
    return None


def _answer(obj: dict[str, Any], where: str, ctx: Context) -> tuple[Generation, dict[str, str]]:
    text = obj.get("answer")
    if not isinstance(text, str):
        raise BadField(f"{where}answer", "missing" if text is None
                       else f"must be text, not {type(text).__name__}")
    tokens = get_list(obj, "tokens", f"{where}tokens")
    values = get_list(obj, "token_logprobs", f"{where}token_logprobs")
    tops = get_list(obj, "top_logprobs", f"{where}top_logprobs")
    lengths = {name: len(v) for name, v in (("tokens", tokens), ("token_logprobs", values),
                                            ("top_logprobs", tops)) if v is not None}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{n} {name}" for name, n in lengths.items())
        raise BadField(f"{where}token_logprobs", f"lengths differ: {shown}")
    for t, token in enumerate(tokens or []):
        if not isinstance(token, str):
            raise BadField(f"{where}tokens[{t}]", "must be text")
    reasoning = reasoning_field(obj, ("reasoning",), where)
    if tokens and reasoning is None:  # with a trace, answer_with_trace checks the tokens
        check_spelling(tokens, text, f"{where}tokens")
    members = _member_logprobs(obj, where, next(iter(lengths.values()), None))
    if values is None and tops is None:
        gen = Generation(text=text.strip(), tokens=list(tokens or []), members=members)
        return answer_with_trace(gen, reasoning, ctx, f"{where}tokens"), {}
    n = next(iter(lengths.values()))
    steps = []
    for t in range(n):
        logprob = (None if values is None
                   else check_logprob(values[t], f"{where}token_logprobs[{t}]"))
        top: list[tuple[str, float]] | None = None
        if tops is not None:
            alts = tops[t]
            if not isinstance(alts, dict):
                raise BadField(f"{where}top_logprobs[{t}]", "must be a {token: logprob} object")
            top = sorted(((k, check_logprob(v, f"{where}top_logprobs[{t}][{k!r}]"))
                          for k, v in alts.items()), key=lambda tv: -tv[1])
            check_step(None if tokens is None else tokens[t], logprob, top,
                       f"{where}token_logprobs[{t}]", f"{where}top_logprobs[{t}]")
        steps.append(Step(tokens[t] if tokens is not None else "", logprob, top))
    gen, notes = build_generation(text, steps, cut=False, bounds=ctx.entropy_bounds,
                                  tokens_known=tokens is not None)
    gen.members = members
    return answer_with_trace(gen, reasoning, ctx, f"{where}tokens"), notes


def _member_logprobs(obj: dict[str, Any], where: str, n: int | None
                     ) -> MemberStatistics | None:
    """``member_logprobs``: one list of ``n`` log-probabilities per member (``n`` the
    answer's tokens when known), as chosen-token member statistics."""
    rows = get_list(obj, "member_logprobs", f"{where}member_logprobs")
    if rows is None:
        return None
    if not rows:
        raise BadField(f"{where}member_logprobs", "needs one list per ensemble member, "
                                                  "got none")
    values = []
    for m, row in enumerate(rows):
        field = f"{where}member_logprobs[{m}]"
        if not isinstance(row, list):
            raise BadField(field, "must be a list of the answer's token log-probabilities "
                                  "under this member")
        want = n if n is not None else len(rows[0]) if isinstance(rows[0], list) else None
        if len(row) != want:
            raise BadField(field, f"{len(row)} log-probabilities for {want} tokens: every "
                                  "member scores each of the answer's tokens")
        values.append([check_logprob(v, f"{field}[{t}]") for t, v in enumerate(row)])
    return MemberStatistics(logprobs=np.asarray(values, dtype=np.float64), method="imported")


def parse(obj: dict[str, Any], ctx: Context) -> Imported:
    """One record of confide's own form as an :class:`~confide.ingest.common.Imported`."""
    if "question" not in obj:
        raise BadField("question", "missing")
    prompt = text_prompt(obj["question"], "question")
    greedy, notes = _answer(obj, "", ctx)
    samples = []
    for i, s in enumerate(get_list(obj, "samples", "samples") or []):
        if isinstance(s, str):
            samples.append(answer_with_trace(Generation(text=s.strip()), None, ctx, ""))
            continue
        if not isinstance(s, dict):
            raise BadField(f"samples[{i}]", "a sample must be text or an object with 'answer'")
        gen, more = _answer(s, f"samples[{i}].", ctx)
        samples.append(gen)
        notes = {**more, **notes}
    the_id = item_id([(obj, "id", "id")], ctx.default_id)
    metadata = {k: v for k, v in obj.items() if k not in _KNOWN}
    caps = capabilities_of(greedy, samples)
    return Imported(item=Item(id=the_id, prompt=prompt,
                              references=references_from(obj.get("references"), "references"),
                              metadata=metadata),
                    greedy=greedy, samples=samples, label=label_from(obj, ctx, ("label",)),
                    line=ctx.line, capabilities=caps,
                    approximate={k: v for k, v in notes.items() if k in caps})


FORMATS.add("jsonl", LogFormat("jsonl", fits, parse,
                               "confide's own form: question, answer, optional statistics"))
