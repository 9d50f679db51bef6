r"""Reflexive scorers: the model is asked a second question about its own answer.

``p_true`` asks whether the proposed answer is true and reads the probability
of "True"; ``verbalized_2s`` asks for a confidence after the answer;
``verbalized_1s`` makes its own generation in which the model answers and
states its confidence in one reply. Each costs extra model calls (one forward
pass for ``p_true``, one short generation for the verbalized scorers), made per
record as the runner scores it.

Verbalized confidence is read by :func:`parse_confidence`, which accepts
numbers on 0–100, percentages, decimals in [0, 1], fractions ("8/10",
"7 out of 10"), ranges ("70-80%", read as their midpoint) and linguistic
expressions ("very likely", "not sure", "Confidence: high"). A reply it cannot
read raises :class:`~confide.core.errors.CannotScore` with one of a few fixed
reasons, so the evaluation table counts them; it is never read as confident.
"""

from __future__ import annotations

import math
import re
from typing import Any

from confide.backends.base import GenerationSpec, Prompt, item_seed
from confide.backends.binary import two_way_probability
from confide.core.errors import CannotScore
from confide.core.records import Item, Record
from confide.scorers.base import Cost, Need, ScoringContext, scorer
from confide.scorers.features import judge_of

__all__ = ["LINGUISTIC_CONFIDENCE", "P_TRUE_VARIANTS", "R_EMPTY", "R_NONE", "R_NO_ANSWER",
           "R_OTHER_ANSWER", "R_RANGE", "R_SEVERAL", "VERBALIZED_1S_MAX_NEW_TOKENS",
           "VERBALIZED_2S_MAX_NEW_TOKENS", "p_true_prompt", "parse_confidence",
           "question_text", "verbalized_1s_prompt", "verbalized_2s_prompt"]

# One-token spellings of the two answers; their probabilities are summed.
P_TRUE_VARIANTS = {"true": ("True", " True", "true", " true"),
                   "false": ("False", " False", "false", " false")}
P_TRUE_TOP_K = 20                    # alternatives read when the backend has no next_token_logprobs
VERBALIZED_1S_MAX_NEW_TOKENS = 32    # answer line + confidence line
VERBALIZED_2S_MAX_NEW_TOKENS = 12    # a number or a short phrase

# Linguistic expressions of likelihood → probability. Rounded readings of the
# medians people assign to words of estimative probability (Kent 1964;
# Fagen-Ulmschneider 2015 survey, the scale Tian et al. 2023 use for
# "Ling. 1S"), plus confidence words and levels on the same scale (ours).
LINGUISTIC_CONFIDENCE: dict[str, float] = {
    "absolutely certain": 0.99, "completely certain": 0.99, "100% sure": 0.99,
    "certain": 0.97,
    "almost certain": 0.95, "almost certainly": 0.95, "extremely likely": 0.95,
    "virtually certain": 0.95,
    "highly likely": 0.9, "very likely": 0.9, "very probable": 0.9, "highly probable": 0.9,
    "very confident": 0.9, "highly confident": 0.9, "extremely confident": 0.95,
    "very sure": 0.9,
    "very good chance": 0.8, "quite likely": 0.8, "confident": 0.8, "quite confident": 0.8,
    "pretty confident": 0.8, "fairly confident": 0.75, "pretty sure": 0.8,
    "fairly sure": 0.75, "quite sure": 0.8, "we believe": 0.75,
    "likely": 0.7, "probable": 0.7, "probably": 0.7,
    "somewhat confident": 0.6, "moderately confident": 0.6, "somewhat likely": 0.6,
    "better than even": 0.6,
    "about even": 0.5, "even chance": 0.5, "toss-up": 0.5, "fifty-fifty": 0.5,
    "not certain": 0.4, "not very confident": 0.35, "not very sure": 0.35,
    "uncertain": 0.35, "unsure": 0.35, "not sure": 0.35,
    "probably not": 0.25, "not likely": 0.25, "unlikely": 0.2, "improbable": 0.15,
    "doubtful": 0.2, "we doubt": 0.2, "not confident": 0.25,
    "little chance": 0.1, "chances are slight": 0.1, "very unlikely": 0.05,
    "highly unlikely": 0.05, "not confident at all": 0.1, "very unsure": 0.15,
    "almost no chance": 0.03, "almost certainly not": 0.03, "impossible": 0.01,
}
# Bare levels count only right after the word "confidence" or as the whole reply.
_LEVELS: dict[str, float] = {"very high": 0.95, "high": 0.85, "medium": 0.5, "moderate": 0.5,
                             "low": 0.2, "very low": 0.05}

_PHRASE_RE = re.compile(
    r"(?<![a-z])(" + "|".join(re.escape(p) for p in sorted(LINGUISTIC_CONFIDENCE, key=len,
                                                           reverse=True)) + r")(?![a-z])")
_LEVEL_RE = re.compile(
    r"(?<![a-z])(" + "|".join(re.escape(p) for p in sorted(_LEVELS, key=len, reverse=True))
    + r")(?![a-z])")
_KEYWORD_RE = re.compile(r"confiden(?:ce|t)(?:\s+(?:level|score|rating))?", re.IGNORECASE)
_LABEL_RE = re.compile(_KEYWORD_RE.pattern + r"\s*[:=]", re.IGNORECASE)
_ANSWER_LABEL_RE = re.compile(r"^\s*(?:final\s+)?answer\s*[:=]", re.IGNORECASE)
_NUM = r"(\d+(?:\.\d+)?|\.\d+)"
# Order matters: fractions and ranges before plain numbers.
_VALUE_RE = re.compile(
    rf"{_NUM}\s*(?:/|out\s+of)\s*{_NUM}"                        # 1,2: fraction
    rf"|{_NUM}\s*%?\s*(?:-|to)\s*{_NUM}\s*(%|percent\b)"         # 3,4,5: percentage range
    rf"|{_NUM}\s*(%|percent\b|per\s+cent\b)"                     # 6,7: percentage
    rf"|{_NUM}",                                                  # 8: bare number
    re.IGNORECASE)
# The scale the prompt itself states, which models often echo back.
_SCALE_RE = re.compile(r"(?:on\s+a\s+scale\s+)?(?:of\s+|from\s+)?\b0\s*(?:-|to)\s*100\b"
                       r"(?!\s*%)", re.IGNORECASE)

R_EMPTY = "verbalized: empty reply"
R_NONE = "verbalized: no number or confidence phrase in the reply"
R_SEVERAL = "verbalized: several numbers, none marked as the confidence"
R_RANGE = "verbalized: stated confidence outside 0-100"
R_NO_ANSWER = "verbalized: the reply states no answer to check against the greedy answer"
R_OTHER_ANSWER = "verbalized: the reply answered something other than the greedy answer"


def parse_confidence(reply: str) -> float:
    r"""Read a stated confidence from a model's reply, as a probability in [0, 1].

    .. math::
        c = \begin{cases} v/100 & \text{"v\%", or an integer } v \in [0, 100] \\
                          v & \text{a decimal } v \in [0, 1] \\
                          a/b & \text{"a/b", "a out of b"} \\
                          (a+b)/200 & \text{a range "a-b\%"} \\
                          \ell(w) & \text{a phrase } w
                          \text{ (see } \texttt{LINGUISTIC\_CONFIDENCE)}
            \end{cases}

    The text after the word "confidence" (or "confident") is read first,
    preferring the last one written as a label ("Confidence: 90"), so a
    "confident" inside the answer is not mistaken for the label; a numeric
    statement wins over a phrase. Without that word, a reply with
    several different numbers and no percentage is ambiguous. The prompt's own
    scale ("0 to 100") is ignored where the model echoes it.

    Parameters
    ----------
    reply : str
        The model's reply.

    Returns
    -------
    float in [0, 1]; higher = the model says its answer is more likely correct.

    Raises
    ------
    CannotScore
        With one of four fixed reasons (empty reply, nothing found, several
        numbers, out of range), so tables can count them.

    References
    ----------
    [1] Tian et al., 2023, "Just Ask for Calibration: Strategies for Eliciting
        Calibrated Confidence Scores from Language Models Fine-Tuned with
        Human Feedback", EMNLP (Verb. 1S/2S, Ling. 1S).
    [2] Xiong et al., 2024, "Can LLMs Express Their Uncertainty? An Empirical
        Evaluation of Confidence Elicitation in LLMs", ICLR.
    [3] S. Kent, 1964, "Words of Estimative Probability", Studies in Intelligence.

    Examples
    --------
    >>> [parse_confidence(s) for s in ["85%", "Confidence: 0.7", "8/10", "very likely"]]
    [0.85, 0.7, 0.8, 0.9]
    >>> parse_confidence("Answer: I am confident it is 42 / Confidence: 90")
    0.9
    """
    text = reply.strip().lower().replace("％", "%").replace("–", "-").replace("—", "-")
    if not text:
        raise CannotScore(R_EMPTY)
    text = _SCALE_RE.sub(" ", text)
    keyword = _confidence_keyword(text)
    if keyword is not None:
        focus = text[keyword.end():]
        found = _first_value(focus)
        if found is None:
            found = _first_phrase(focus, levels=True)
        if found is not None:
            return _checked(found)
    matches = list(_VALUE_RE.finditer(text))
    if matches:
        percents = [m for m in matches if m.group(3) or m.group(6)]
        if percents:
            return _checked(_value(percents[0]))
        values = {_value(m) for m in matches}
        if len(values) > 1:
            raise CannotScore(R_SEVERAL)
        return _checked(values.pop())
    found = _LEVELS.get(text.strip(" .!\n"))
    if found is None:
        found = _first_phrase(text, levels=False)
    if found is None:
        raise CannotScore(R_NONE)
    return _checked(found)


def _confidence_keyword(text: str) -> re.Match[str] | None:
    """The last "confidence" written as a label ("Confidence:"), else the first mention."""
    labels = list(_LABEL_RE.finditer(text))
    return labels[-1] if labels else _KEYWORD_RE.search(text)


def _value(match: re.Match[str]) -> float:
    g = match.groups()
    if g[0] is not None:  # fraction a/b
        a, b = float(g[0]), float(g[1])
        if b <= 0 or a > b:
            raise CannotScore(R_RANGE)
        return a / b
    if g[2] is not None:  # percentage range
        return (float(g[2]) + float(g[3])) / 200.0
    if g[5] is not None:  # percentage
        return float(g[5]) / 100.0
    raw = g[7]
    v = float(raw)
    if "." in raw and v <= 1.0:
        return v
    return v / 100.0


def _first_value(text: str) -> float | None:
    match = _VALUE_RE.search(text)
    return None if match is None else _value(match)


def _first_phrase(text: str, *, levels: bool) -> float | None:
    hits = [m for m in _PHRASE_RE.finditer(text)]
    if levels:
        hits += list(_LEVEL_RE.finditer(text))
    if not hits:
        return None
    best = min(hits, key=lambda m: (m.start(), -len(m.group(1))))
    word = best.group(1)
    return LINGUISTIC_CONFIDENCE.get(word, _LEVELS.get(word))


def _checked(value: float) -> float:
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise CannotScore(R_RANGE)
    return float(value)


# ----------------------------------------------------------------------- prompts


def question_text(item: Item) -> str:
    """The question as the model saw it: the prompt text (or last user turn) and any choices."""
    question = item.question
    choices = item.metadata.get("choices") or []
    if choices:
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        question += "\n" + "\n".join(f"{letters[i]}. {c}" for i, c in enumerate(choices))
    return question.strip()


def p_true_prompt(item: Item, answer: str, *, chat: bool) -> Prompt:
    """Kadavath et al. (2022)'s self-evaluation prompt: is the proposed answer true?

    >>> p_true_prompt(Item("x", "2+2?"), "4", chat=False)
    'Question: 2+2?\\nProposed answer: 4\\nIs the proposed answer true or false?\\nAnswer:'
    """
    body = (f"Question: {question_text(item)}\nProposed answer: {answer}\n"
            "Is the proposed answer true or false?")
    if chat:
        return [{"role": "user", "content": body + " Reply with one word: True or False."}]
    return body + "\nAnswer:"


_ASK_CONFIDENCE = ("How confident are you that your answer is correct? "
                   "Reply with only a number from 0 to 100.")


def verbalized_2s_prompt(item: Item, answer: str, *, chat: bool) -> Prompt:
    """The answer given, then a second turn asking for a confidence from 0 to 100.

    >>> verbalized_2s_prompt(Item("x", "2+2?"), "4", chat=True)[1]
    {'role': 'assistant', 'content': '4'}
    """
    question = question_text(item)
    if chat:
        return [{"role": "user", "content": question},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": _ASK_CONFIDENCE}]
    return f"Question: {question}\nAnswer: {answer}\n{_ASK_CONFIDENCE}\nConfidence:"


def verbalized_1s_prompt(item: Item, *, chat: bool) -> Prompt:
    """One request for an answer and a confidence (0–100) in a fixed two-line format.

    >>> print(verbalized_1s_prompt(Item("x", "2+2?"), chat=False))  # doctest: +ELLIPSIS
    Answer the question, then say how confident you are...
    Question: 2+2?
    Answer:
    """
    instruction = ("Answer the question, then say how confident you are that your answer is "
                   "correct, from 0 to 100. Reply in exactly this format:\n"
                   "Answer: <a few words>\nConfidence: <a number from 0 to 100>")
    question = question_text(item)
    if chat:
        return [{"role": "user", "content": f"{instruction}\n\nQuestion: {question}"}]
    return f"{instruction}\n\nQuestion: {question}\nAnswer:"


# ----------------------------------------------------------------------- scorers


def _backend(ctx: ScoringContext) -> Any:
    if ctx.backend is None:
        raise CannotScore("no backend to ask the extra question")
    return ctx.backend


def _seed(record: Record, ctx: ScoringContext) -> int:
    return item_seed(ctx.seed, record.item.id)


def _reply(record: Record, ctx: ScoringContext, prompt: Prompt, max_new_tokens: int,
           stop: tuple[str, ...]) -> str:
    backend = _backend(ctx)
    spec = GenerationSpec(max_new_tokens=max_new_tokens, stop=stop, top_k_alternatives=0)
    result = backend.generate([prompt], spec, [_seed(record, ctx)])[0]
    if result.greedy is None:
        raise CannotScore(f"extra generation failed: {result.error or 'no answer'}")
    return str(result.greedy.text)


@scorer("p_true", needs={Need.EXTRA_PROMPT, Need.TOP_LOGPROBS}, cost=Cost.MODEL_CALLS,
        probability=True)
def p_true(record: Record, ctx: ScoringContext) -> float:
    r"""P(True): the probability the model gives "True" when asked if its answer is true.

    .. math::
        c = \frac{P(\text{True} \mid q, y)}{P(\text{True} \mid q, y) + P(\text{False} \mid q, y)}

    where :math:`P(\text{True})` sums the probabilities of the one-token
    spellings ``True``, `` True``, ``true``, `` true`` (likewise False) as the
    first token of the reply to :func:`p_true_prompt`. On backends with
    ``next_token_logprobs`` (``hf``) this is one forward pass and exact; on
    others the probabilities come from the top-20 alternatives of a one-token
    generation, and a spelling outside the top 20 counts with the smallest
    listed probability (an upper bound on it). Cost: one extra forward pass
    per record (made as the record is scored, not batched across items).

    LM-Polygraph's ``PTrue`` differs by definition: it reads one spelling,
    not renormalised against False, after its own prompt
    (``Question: {q}\n Possible answer:{a}\n Is the possible answer:\n (A)
    True\n (B) False\n The possible answer is:``), and returns
    :math:`U = -\log p(\text{True} \mid q, y)`. Fed log p("True") after our
    prompt, its :math:`e^{-U}` differs from :math:`c` by up to 0.18 on the
    bundled model (``benchmarks/peers/polygraph.py``): the renormalisation
    makes :math:`c` the probability of True against False, whatever mass
    the model puts on other replies. On LM-Polygraph's own pipeline, its
    prompt and its single spelling, the two differ by up to 0.65
    (``benchmarks/results/parity.md``).

    References: [1] Kadavath et al., 2022, "Language Models (Mostly) Know What
    They Know", arXiv:2207.05221.
    """
    backend = _backend(ctx)
    answer = record.greedy.text
    if not answer.strip():
        raise CannotScore("empty answer: nothing to judge")
    prompt = p_true_prompt(record.item, answer, chat=bool(backend.has_chat_template))
    try:
        return two_way_probability(backend, prompt, P_TRUE_VARIANTS["true"],
                                   P_TRUE_VARIANTS["false"], seed=_seed(record, ctx),
                                   top_k=P_TRUE_TOP_K)
    except CannotScore as exc:
        raise CannotScore(f"p_true: {exc.reason}") from exc


@scorer("verbalized_2s", needs={Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS, probability=True)
def verbalized_2s(record: Record, ctx: ScoringContext) -> float:
    r"""Verbalized confidence, two stages: after its answer, the model is asked how sure it is.

    .. math:: c = \mathrm{parse}\big(\mathrm{LM}(q, y, \text{"How confident \dots 0 to 100?"})\big)

    The greedy answer :math:`y` is put back as the model's own turn
    (:func:`verbalized_2s_prompt`) and a greedy reply of at most 12 tokens is
    read by :func:`parse_confidence` (percentages, decimals, fractions,
    phrases). An unreadable reply is NaN with its reason. Cost: one extra
    short generation per record.

    References: [1] Tian et al., 2023, "Just Ask for Calibration", EMNLP
    (Verb. 2S); [2] Xiong et al., 2024, "Can LLMs Express Their
    Uncertainty?", ICLR.
    """
    backend = _backend(ctx)
    if not record.greedy.text.strip():
        raise CannotScore("empty answer: nothing to judge")
    prompt = verbalized_2s_prompt(record.item, record.greedy.text,
                                  chat=bool(backend.has_chat_template))
    reply = _reply(record, ctx, prompt,
                   int(ctx.options.get("verbalized_2s_max_new_tokens",
                                       VERBALIZED_2S_MAX_NEW_TOKENS)),
                   ("\n",))
    return parse_confidence(reply)


def _split_reply(reply: str) -> tuple[str, str]:
    """A one-stage reply cut into (its answer, the part that states the confidence).

    The confidence part starts at the last "Confidence:" label; without one,
    it is the lines after the first, or a lone percentage. The answer is what
    comes before, without an "Answer:" label.
    """
    labels = list(_LABEL_RE.finditer(reply))
    if labels:
        answer, part = reply[:labels[-1].start()], reply[labels[-1].start():]
    else:
        lines = [ln for ln in reply.strip().splitlines() if ln.strip()]
        if len(lines) > 1:
            answer, part = lines[0], "\n".join(lines[1:])
        else:
            percent = re.search(rf"{_NUM}\s*(?:%|percent\b)", reply, re.IGNORECASE)
            if percent is None:
                raise CannotScore(R_NONE)
            answer, part = reply[:percent.start()], percent.group(0)
    answer = _ANSWER_LABEL_RE.sub("", answer.strip()).strip(" \t\n/;|,(-")
    return answer, part


@scorer("verbalized_1s", needs={Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS, probability=True)
def verbalized_1s(record: Record, ctx: ScoringContext) -> float:
    r"""Verbalized confidence, one stage: the model answers and states its confidence in one reply.

    .. math:: (\tilde y, c) = \mathrm{parse}\big(\mathrm{LM}(\text{"Answer, then confidence
              0 to 100"}, q)\big), \qquad
              \text{value} = \begin{cases} c & \tilde y \equiv y \\
                                           \text{NaN} & \text{otherwise} \end{cases}

    This scorer makes **its own extra generation** with
    :func:`verbalized_1s_prompt` (greedy, at most 32 tokens); the run's task
    prompt and greedy answer are left unchanged. The reply is cut into its
    answer :math:`\tilde y` and the confidence it states (the part from the
    last "Confidence:" label, or the lines after the answer line), read by
    :func:`parse_confidence`. The stated confidence is about :math:`\tilde
    y`, so it is attached to the record's greedy answer :math:`y` only when
    the run's equivalence judge finds :math:`\tilde y \equiv y`; otherwise
    (the prompt differs, so the model may answer differently) the value is
    NaN with the reason :data:`R_OTHER_ANSWER`. An unreadable reply is NaN
    with its reason. Cost: one extra generation of up to 32 tokens per
    record (plus one judgment for pair judges).

    References: [1] Tian et al., 2023, "Just Ask for Calibration", EMNLP
    (Verb. 1S); [2] Xiong et al., 2024, "Can LLMs Express Their
    Uncertainty?", ICLR.
    """
    backend = _backend(ctx)
    prompt = verbalized_1s_prompt(record.item, chat=bool(backend.has_chat_template))
    reply = _reply(record, ctx, prompt, int(ctx.options.get("verbalized_1s_max_new_tokens",
                                                            VERBALIZED_1S_MAX_NEW_TOKENS)), ())
    if not reply.strip():
        raise CannotScore(R_EMPTY)
    answer, part = _split_reply(reply)
    if not answer:
        raise CannotScore(R_NO_ANSWER)
    if not judge_of(ctx).decide(answer, record.greedy.text, record.item).equivalent:
        raise CannotScore(R_OTHER_ANSWER)
    return parse_confidence(part)
