r"""The probability of a reasoning reply's extracted final answer after a "Final answer:" cue.

A reasoning reply ends its trace and then writes its answer in its own words ("So the
total is $18.", "The answer is B."). The answer span's own statistics (``mean_logprob``,
``msp`` of a reasoning record) score those words, phrasing included. This scorer asks
instead how much probability the model, having reasoned, puts on the answer *as the task
reads it*: the question, the trace as it was generated, an appended cue
``"\nFinal answer:"`` and the extracted answer are teacher-forced, and the answer's
tokens are read. The cue is Kojima et al.'s answer extraction, a fixed prompt appended
after the reasoning to make the model state its answer in a fixed form; Wang & Zhou
find that the model's confidence in the answer after a reasoning path tells right
paths from wrong ones.

Extraction (:func:`extract_final_answer`) follows the graders: the letter of the option
the answer picks (the ``choice`` grader's rule) for an item with choices; else the
content of the last ``\boxed{}``, else what follows the last final-answer marker
(``####``, "final answer:", "the answer is", "answer:"): its first number as written,
or the rest of that line; else the whole answer. Option ``final_answer_format``
(``"auto"``, default; ``"number"``: the ``numeric`` grader's final number; ``"choice"``;
``"text"``: the whole answer) fixes one rule.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from confide.backends.base import ScoresContinuation
from confide.core.errors import CannotScore
from confide.core.records import Item, Record
from confide.grading.choice import LETTERS, picked_option
from confide.scorers.base import Cost, Need, ScoringContext, exp_of, scorer
from confide.scorers.reasoning import reply_trace

__all__ = ["FINAL_ANSWER_CUE", "FINAL_ANSWER_FORMATS", "cued_answer_value",
           "extract_final_answer"]

#: The cue appended after the trace; the extracted answer follows it after one space.
FINAL_ANSWER_CUE = "\nFinal answer:"
FINAL_ANSWER_FORMATS = ("auto", "number", "choice", "text")

_BOXED = re.compile(r"\\boxed\{")
_MARKERS = re.compile(r"####|\b(?:final answer|the answer|answer)\s*(?:is|:|=)", re.IGNORECASE)
# a number as written: sign, digits with thousands separators, decimals, a simple fraction
_NUMBER = re.compile(r"(?<![\w.])[-−]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:\s?/\s?\d+)?")


# ---------------------------------------------------------------------- extraction


def _boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced), or None."""
    hits = list(_BOXED.finditer(text))
    if not hits:
        return None
    depth, start = 1, hits[-1].end()
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i].strip()
    return None  # never closed: no boxed answer


def _number(text: str, *, last: bool = False) -> str | None:
    found = [m.group(0) for m in _NUMBER.finditer(text)]
    if not found:
        return None
    return found[-1] if last else found[0]


def _clean(text: str) -> str:
    return text.strip().strip("*").strip().rstrip(".").strip()


def extract_final_answer(text: str, item: Item | None = None, form: str = "auto"
                         ) -> str | None:
    r"""The final answer of ``text`` as a task reads it, or None where none is found.

    Parameters
    ----------
    text : str
        The final answer as the reply wrote it (after its trace).
    item : Item, optional
        Its ``metadata["choices"]`` make the answer a choice letter.
    form : {"auto", "number", "choice", "text"}
        ``"auto"``: the letter of the picked option where the item has choices; else
        the last ``\boxed{}``'s content; else after the last marker (``####``, "final
        answer:", "the answer is", "answer:") its first number as written, or the rest
        of that line; else the whole text. ``"number"``: the ``numeric`` grader's
        number (the first after the last marker, else the last), as written.
        ``"choice"``: the picked option's letter. ``"text"``: the whole text.

    Returns
    -------
    str or None
        Stripped, without a closing full stop; None for no pick, no number or no text.

    Examples
    --------
    >>> extract_final_answer("She makes 9 * 2 = 18 a day.\n#### 18")
    '18'
    >>> extract_final_answer("So it is \\boxed{\\frac{1}{2}}.")
    '\\frac{1}{2}'
    >>> extract_final_answer("The answer is Paris.")
    'Paris'
    >>> extract_final_answer("B. mall", Item("q", "?", ["B"], {"choices": ["bank", "mall"]}))
    'B'
    >>> extract_final_answer("about 3 or 4", form="number")
    '4'
    """
    if form not in FINAL_ANSWER_FORMATS:
        raise CannotScore(f"option final_answer_format must be one of "
                          f"{', '.join(FINAL_ANSWER_FORMATS)}, not {form!r}")
    choices = [str(c) for c in (item.metadata.get("choices") or [])] if item else []
    if form == "choice" or (form == "auto" and choices):
        if not choices:
            raise CannotScore("final_answer_format 'choice' needs an item with choices")
        pick = picked_option(text, choices)
        return None if pick is None else LETTERS[pick]
    if form == "text":
        return _clean(text) or None
    marker = list(_MARKERS.finditer(text))
    after = text[marker[-1].end():] if marker else None
    if form == "number":
        return (_number(after) if after is not None else None) or _number(text, last=True)
    boxed = _boxed(text)
    if boxed:
        return boxed
    if after is not None:
        line = after.strip().split("\n", 1)[0]
        return _number(line) or _clean(line) or None
    return _clean(text) or None


# ---------------------------------------------------------------------- the scorer


def cued_answer_value(answer_logprobs: Any) -> float:
    r"""The extracted answer's log-probability: the sum over its tokens.

    .. math:: c = \sum_{t=1}^{T} \log p(a_t \mid x, z, q, a_{<t})

    >>> round(cued_answer_value(np.log([0.5, 0.8])), 6)  # log 0.4
    -0.916291
    """
    lp = np.asarray(answer_logprobs, dtype=np.float64)
    if lp.ndim != 1 or lp.size == 0:
        raise CannotScore("the extracted answer has no tokens to score")
    if not np.isfinite(lp).all():
        raise CannotScore("an answer token has probability 0 (or NaN) after the cue")
    return float(lp.sum())


@scorer("cued_answer_logprob", needs={Need.TRACE, Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        span="both", readable=exp_of("the probability of the extracted final answer after the "
                                     "trace and a 'Final answer:' cue"))
def cued_answer_logprob(record: Record, ctx: ScoringContext) -> float:
    r"""Log-probability of the extracted final answer after the trace and a "Final answer:" cue.

    .. math:: c = \log P(a \mid x, z, q) = \sum_{t=1}^{T} \log p(a_t \mid x, z, q, a_{<t})

    :math:`x` the prompt as the answer was generated from it (a reasoning run's chat
    template in thinking mode), :math:`z` the trace's tokens as generated (closing tag
    included), :math:`q` the cue ``"\nFinal answer:"`` and a space, :math:`a` the final
    answer as the task's extraction reads it (:func:`extract_final_answer`: ``18``
    from "So she makes $18.\n#### 18", ``B`` from "The answer is (B)"). One
    teacher-forced pass of the backend
    (:meth:`~confide.backends.hf.passes.ExtraPasses.continuation_logprobs`); the
    answer's tokens are those holding its characters (a space that is a token of its
    own stays with the cue). Readable form :math:`e^{c} = P(a \mid x, z, q)`.

    The sum, not the mean: the extracted answer is a short normalised string (a number,
    a letter, a few words) and the quantity asked for is its probability as a whole,
    which :math:`e^{c}` is; :math:`e^{\text{mean}}` would be a geometric-mean token
    probability, the probability of nothing. The price is a length bias: an answer of
    more tokens ("1,000", five tokens for SmolLM2) has less probability than a shorter
    one at equal per-token certainty; the evaluation's length audit shows it.

    Reads both spans: refuses, with the reason, a reply without a trace, with an empty
    trace or without a final answer (:func:`~confide.scorers.reasoning.reply_trace`), a
    trace whose token ids are unknown, an answer from which nothing is extracted (no
    option picked, no number), and a backend that cannot teacher-force (an
    OpenAI-compatible server); never reading such a reply as confident. The prompt is
    the one the pipeline passes (``ctx.prompt``), else the item's own.

    References: [1] Kojima, Gu, Reid, Matsuo & Iwasawa, 2022, "Large Language Models
    are Zero-Shot Reasoners", NeurIPS, arXiv:2205.11916 (an answer-extraction cue
    appended after the reasoning); [2] Wang & Zhou, 2024, "Chain-of-Thought Reasoning
    without Prompting", NeurIPS, arXiv:2402.10200 (the confidence of the answer decoded
    after a reasoning path separates right paths from wrong).
    """
    gen = record.greedy
    trace = reply_trace(gen)
    if not trace.token_ids:
        raise CannotScore("the trace's token ids are unknown: it cannot be fed to the model "
                          "again")
    form = ctx.options.get("final_answer_format", "auto")
    answer = extract_final_answer(gen.text, record.item, form)
    if not answer:
        raise CannotScore(f"no final answer extracted from {gen.text[:80]!r} "
                          f"(final_answer_format {form!r})")
    backend = ctx.backend
    if backend is None or not isinstance(backend, ScoresContinuation):
        raise CannotScore("the backend cannot teacher-force a continuation (a local model "
                          "can: hf)")
    prompt = ctx.prompt if ctx.prompt is not None else record.item.prompt
    trace_ids = list(trace.token_ids)

    def compute() -> np.ndarray:
        cue, ids = backend.cue_and_answer_ids(FINAL_ANSWER_CUE + " ", answer)
        # a reply with a trace came from a reasoning run: its prompt in thinking mode
        lp = backend.continuation_logprobs([prompt], [trace_ids + cue], [ids],
                                           thinking=ctx.thinking(gen))
        return np.asarray(lp[0], dtype=np.float64)

    return cued_answer_value(ctx.cached(record, f"cued_answer_logprobs:{form}", compute))
