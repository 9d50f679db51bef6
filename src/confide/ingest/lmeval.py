r"""lm-evaluation-harness sample logs: ``samples_<task>_<date>.jsonl`` of ``lm_eval --log_samples``.

One record per evaluated document::

    {"doc_id": 0, "doc": {...}, "target": "Paris",
     "arguments": {"gen_args_0": {"arg_0": "Q: ...\nA:", "arg_1": {"until": ["\n"]}}},
     "resps": [["Paris"]], "filtered_resps": ["Paris"], "filter": "none",
     "metrics": ["exact_match"], "exact_match": 1.0, "doc_hash": "...", ...}

``arguments`` is read in both of the harness's forms: a list of argument lists
(``[["context", " continuation"], ...]``, older releases) or a
``{"gen_args_<i>": {"arg_0": ..., "arg_1": ...}}`` object. ``resps`` and
``filtered_resps`` may hold numbers and booleans or, as newer releases write them,
their text (``["-1.25", "False"]``).

Two kinds of task are told apart by their responses:

- **generate_until** (``resps[0]`` a list of texts): the answer is
  ``filtered_resps[0]``, the text the harness graded (the raw reply is kept in
  ``Item.metadata["raw_response"]`` when the filter changed it); with
  ``repeats > 1`` the further raw replies ``resps[0][1:]`` are samples. No token
  statistics: the harness does not log them.
- **loglikelihood** (multiple choice; ``resps[i][0] == [logprob, is_greedy]``):
  ``Item.metadata["choices"]`` are the continuations (stripped),
  ``metadata["choice_loglikelihoods"]`` their log-likelihoods
  :math:`\ell_i = \log p(\text{choice}_i \mid \text{context})` and
  ``metadata["choice_is_greedy"]`` the harness's flags. The answer is the choice
  of largest log-likelihood (the first of ties), as the harness's ``acc`` takes
  it, and :func:`option_probability` gives its confidence.

Field map
---------
=====================  ==========================================================
``Item.id``            ``doc_id``, with ``/<filter>`` added when ``filter`` is not
                       ``"none"`` (one document is logged once per filter)
``Item.prompt``        the context: ``arg_0`` of the first request
``Item.references``    ``target``: text or a list of texts; for multiple choice an
                       index (or its text), a letter or the choice's text, stored as
                       ``[letter, choice text]``
``Item.metadata``      ``doc``, ``task`` (from the file name
                       ``samples_<task>_<date>.jsonl``), and the above
label                  ``label_field`` if given, else the first of ``acc``,
                       ``exact_match`` present (a number in [0, 1] or a boolean)
=====================  ==========================================================

Reasoning (generate_until): a ``<think>…</think>`` block of the raw reply is the answer's
trace (:mod:`confide.core.reasoning`; tags set by ``reasoning_tags``); a chain of thought
whose final answer the task's filter extracted (a regex filter's ``#### 7``) keeps the
raw reply as the trace of the filtered answer, and the filter's ``[invalid]`` (no answer
found) is no final answer: an empty answer with that trace, left ungraded.

``loglikelihood_rolling`` (perplexity) records have no answer and are bad records.

Capabilities: ``samples`` with ``repeats > 1``; no token statistics.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from confide.core.errors import InvalidInputError
from confide.core.needs import Need
from confide.core.records import Generation, Item
from confide.ingest.common import (
    FORMATS,
    BadField,
    Context,
    Fit,
    Imported,
    LogFormat,
    answer_with_trace,
    capabilities_of,
    label_from,
    need_list,
    references_from,
)
from confide.tasks.base import LETTERS

__all__ = ["fits", "option_probability", "parse"]

_TASK = re.compile(r"^samples_(.+?)(?:_\d{4}-\d{2}-\d{2}T[\d\-.:]+)?$")


def option_probability(loglikelihoods: Sequence[float]) -> float:
    r"""Probability of the most likely option, renormalised over the options.

    .. math::

        c = \max_i \frac{e^{\ell_i}}{\sum_j e^{\ell_j}}
          = \frac{1}{\sum_j e^{\ell_j - \ell_{\max}}}

    where :math:`\ell_i = \log p(\text{option}_i \mid \text{prompt})` is the
    log-likelihood the model gives option :math:`i`'s text (lm-evaluation-harness's
    ``loglikelihood`` responses). The chosen option is the argmax, as the
    harness's ``acc`` takes it.

    Parameters
    ----------
    loglikelihoods : sequence of float, shape (n_options,)
        Finite log-likelihoods, one per option; at least one.

    Returns
    -------
    float
        In :math:`[1/n, 1]`; higher means more likely correct. One option gives 1.

    Raises
    ------
    InvalidInputError
        No options, or a value that is not a finite number.

    Notes
    -----
    Ties leave the value well defined (the tied options share the maximum).
    Options of different lengths are compared by their total log-likelihood, not
    normalised by length (the harness's ``acc``, not ``acc_norm``).

    References
    ----------
    [1] Gao et al., 2023, "A framework for few-shot language model evaluation"
    (lm-evaluation-harness), https://github.com/EleutherAI/lm-evaluation-harness.
    [2] Hendrycks & Gimpel, 2017, "A Baseline for Detecting Misclassified and
    Out-of-Distribution Examples in Neural Networks" (maximum softmax probability),
    arXiv:1610.02136.

    >>> import math
    >>> option_probability([math.log(0.5), math.log(0.25), math.log(0.25)])
    0.5
    >>> round(option_probability([-1.0, -2.0, -3.0]), 6)
    0.665241
    """
    try:
        values = np.asarray(list(loglikelihoods), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be numbers ({exc})", field="loglikelihoods") from exc
    if values.ndim != 1 or not len(values):
        raise InvalidInputError("give one log-likelihood per option (at least one)",
                                field="loglikelihoods")
    if not np.all(np.isfinite(values)):
        raise InvalidInputError("log-likelihoods must be finite numbers",
                                field="loglikelihoods")
    return _option_probability(values)


def _option_probability(values: np.ndarray) -> float:
    return float(1.0 / np.exp(values - values.max()).sum())


def fits(obj: dict[str, Any]) -> Fit | None:
    """A record with ``doc_id`` and ``resps`` (or ``arguments``)."""
    if "doc_id" in obj and ("resps" in obj or "arguments" in obj):
        return Fit("'doc_id' with 'resps' or 'arguments' (an lm-evaluation-harness "
                   "--log_samples record)")
    return None


def _arguments(obj: dict[str, Any]) -> list[list[Any]]:
    """The requests' argument lists, in order."""
    args = obj.get("arguments")
    if args is None:
        return []
    if isinstance(args, dict):
        def order(key: str) -> tuple[int, str]:
            digits = key.rsplit("_", 1)[-1]
            return (int(digits) if digits.isdigit() else 1 << 30, key)

        out = []
        for key in sorted(args, key=order):
            request = args[key]
            if not isinstance(request, dict):
                raise BadField(f"arguments.{key}", "must be an object of arg_<i>")
            out.append([request[k] for k in sorted(request, key=order)])
        return out
    if not isinstance(args, list):
        raise BadField("arguments", "must be a list or an object")
    return [a if isinstance(a, list) else [a] for a in args]


def _number(value: Any, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise BadField(where, f"{value!r} is not a number") from None
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadField(where, f"must be a number, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value > 0:
        raise BadField(where, f"a log-likelihood must be a finite number <= 0, not {value!r}")
    return value


def _flag(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("True", "False", "true", "false"):
        return value in ("True", "true")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise BadField(where, f"must be true or false, not {value!r}")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise BadField(where, f"must be text, not {type(value).__name__}")
    return value


def _choice_references(target: Any, choices: list[str]) -> list[str]:
    value = target[0] if isinstance(target, list) and len(target) == 1 else target
    index: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, str):
        v = value.strip()
        if v.isdigit():
            index = int(v)
        elif len(v) == 1 and v.upper() in LETTERS[:len(choices)]:
            index = LETTERS.index(v.upper())
        elif v in choices:
            index = choices.index(v)
    if index is None:
        return references_from(target, "target")
    if not 0 <= index < len(choices):
        raise BadField("target", f"choice {index} of {len(choices)}")
    return [LETTERS[index], choices[index]] if index < len(LETTERS) else [choices[index]]


def _task_name(stem: str) -> str | None:
    match = _TASK.match(stem)
    return match.group(1) if match else None


#: What lm-evaluation-harness's regex filters give when the reply holds no answer.
_NO_MATCH = "[invalid]"


def _with_trace(raw: str, answer: str, ctx: Context) -> Generation:
    """The graded answer with the reasoning that led to it (:mod:`confide.core.reasoning`).

    A ``<think>`` block of the raw reply is its trace. A chain of thought whose answer the
    task's filter extracted (``#### 7``, "The answer is 7" read by a regex filter) has the
    raw reply as its trace and the filtered text as its answer; the filter's
    ``[invalid]`` (no answer found) is no final answer: an empty answer with that trace.
    A filter that changes only white space leaves the reply one answer.
    """
    tagged = answer_with_trace(Generation(text=raw.strip()), None, ctx, "resps")
    trace = tagged.trace
    if answer.strip() == raw.strip():
        return tagged
    if trace is None:
        trace = Generation(text=raw.strip())
    final = "" if answer.strip() == _NO_MATCH else answer.strip()
    return Generation(text=final, finish_reason=tagged.finish_reason, trace=trace)


def parse(obj: dict[str, Any], ctx: Context) -> Imported:
    """One sample-log record as an :class:`~confide.ingest.common.Imported`."""
    doc_id = obj.get("doc_id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, (int, str)):
        raise BadField("doc_id", "must be an integer or text")
    filt = obj.get("filter", "none")
    item_id = str(doc_id) if filt in (None, "none") else f"{doc_id}/{filt}"
    resps = need_list(obj, "resps", "resps")
    if not resps:
        raise BadField("resps", "no responses")
    args = _arguments(obj)
    context = args[0][0] if args and args[0] else ""
    if not isinstance(context, str):
        raise BadField("arguments", "the context (arg_0) must be text")
    metadata: dict[str, Any] = {}
    if "doc" in obj:
        metadata["doc"] = obj["doc"]
    task = _task_name(ctx.stem)
    if task:
        metadata["task"] = task
    first = resps[0]
    if not isinstance(first, list) or not first:
        raise BadField("resps[0]", "must be a non-empty list")
    samples: list[Generation] = []
    if (args and len(args[0]) == 1) or isinstance(first[0], (int, float)):
        raise BadField("resps", "a loglikelihood_rolling (perplexity) record has no answer "
                                "to score")
    if isinstance(first[0], list):  # loglikelihood: [[logprob, is_greedy]] per request
        lls, greedy_flags = [], []
        for i, resp in enumerate(resps):
            pair = resp[0] if isinstance(resp, list) and resp else None
            if not isinstance(pair, list) or len(pair) != 2:
                raise BadField(f"resps[{i}]", "a loglikelihood response must be "
                                              "[[logprob, is_greedy]]")
            lls.append(_number(pair[0], f"resps[{i}][0][0]"))
            greedy_flags.append(_flag(pair[1], f"resps[{i}][0][1]"))
        if len(args) != len(resps):
            raise BadField("arguments", f"{len(args)} requests but {len(resps)} responses")
        choices = []
        for i, a in enumerate(args):
            if len(a) < 2:
                raise BadField("arguments", f"request {i} has no continuation")
            choices.append(_text(a[1], f"arguments[{i}][1]").strip())
        metadata.update(choices=choices, choice_loglikelihoods=lls,
                        choice_is_greedy=greedy_flags)
        best = int(np.argmax(lls))  # the first of ties
        greedy = Generation(text=choices[best])
        references = _choice_references(obj.get("target"), choices)
    else:
        texts = [_text(r, f"resps[0][{j}]") for j, r in enumerate(first)]
        if len(resps) != 1:
            raise BadField("resps", f"a generate_until record has one request, not "
                                    f"{len(resps)}")
        filtered = obj.get("filtered_resps")
        answer = texts[0]
        if isinstance(filtered, list) and filtered:
            pick = filtered[0]
            if isinstance(pick, list) and pick and isinstance(pick[0], str):
                pick = pick[0]
            answer = _text(pick, "filtered_resps[0]")
        if answer != texts[0]:
            metadata["raw_response"] = texts[0]
        greedy = _with_trace(texts[0], answer, ctx)
        samples = [_with_trace(t, t, ctx) for t in texts[1:]]
        references = references_from(obj.get("target"), "target")
    caps = capabilities_of(greedy, samples) - {Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS,
                                               Need.TOKEN_ENTROPIES}
    return Imported(item=Item(id=item_id, prompt=context, references=references,
                              metadata=metadata),
                    greedy=greedy, samples=samples,
                    label=label_from(obj, ctx, ("acc", "exact_match")), line=ctx.line,
                    capabilities=caps)


FORMATS.add("lmeval", LogFormat("lmeval", fits, parse,
                                "lm-evaluation-harness --log_samples records"))
