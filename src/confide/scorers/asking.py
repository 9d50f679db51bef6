r"""Scorers that ask a model about the answer: LLM judges, P(True) variants, BSDetector.

Each makes extra model calls through the run's backend (``ctx.backend``): the
model judges its own answer unless ``ctx.judge_backends`` names
other backends (a list of loaded backends; the panel asks each of them).
Replies are read by fixed rules; a reply that cannot be read raises
:class:`~confide.core.errors.CannotScore` with the reason, never a guess.

Notation: question :math:`q`, greedy answer :math:`y^*`, samples
:math:`s_1..s_k`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from confide.backends.base import Backend, GenerationSpec, Prompt, item_seed
from confide.backends.binary import two_way_probability
from confide.core.errors import CannotScore
from confide.core.reasoning import DEFAULT_TAGS, Tags, split_reasoning
from confide.core.records import Generation, Item, Record
from confide.scorers.base import Cost, Need, ScoringContext, as_is, scorer
from confide.scorers.features import affinity, require_samples
from confide.scorers.reflexive import (
    P_TRUE_VARIANTS,
    p_true_prompt,
    parse_confidence,
    question_text,
)

__all__ = ["BSDETECTOR_ALPHA", "BSDETECTOR_BETA", "CATEGORICAL_SCORES", "JUDGE_MAX_NEW_TOKENS",
           "P_TRUE_EMPIRICAL_SAMPLES", "R_THINKING", "TEMPLATES", "after_thinking",
           "answer_step", "judge_prompt", "p_true_sampling_prompt", "parse_categorical"]

BSDETECTOR_ALPHA = 0.8   # Chen & Mueller (2024): weight of semantic vs exact agreement
BSDETECTOR_BETA = 0.7    # Chen & Mueller (2024): weight of observed consistency vs reflection
P_TRUE_EMPIRICAL_SAMPLES = 10  # sampled one-token replies (LM-Polygraph's default)
JUDGE_MAX_NEW_TOKENS = 8
TOP_K = 20

# UQLM's keyword table, read in this order ("incorrect" contains "correct").
CATEGORICAL_SCORES: tuple[tuple[float, tuple[str, ...]], ...] = (
    (0.0, ("incorrect", "not correct", "not right", "wrong")),
    (0.5, ("not sure", "not certain", "unsure", "uncertain")),
    (1.0, ("correct", "right")),
)

_CATEGORICAL = ('Your task is to look at the question and answer provided and determine if '
                'the answer is correct. You are to respond with ONLY one of: "Correct", '
                '"Incorrect", or "I am not sure". DO NOT ANSWER THE QUESTION AGAIN.')
_CONTINUOUS = ("How likely is the above answer to be correct? Give your confidence in this "
               "answer between 0 (lowest) and 100 (highest), with 100 being certain the answer "
               "is correct, and 0 being certain the answer is incorrect. ONLY RETURN YOUR "
               "NUMERICAL SCORE WITH NO SURROUNDING TEXT OR EXPLANATION.")
TEMPLATES = {"categorical": _CATEGORICAL, "continuous": _CONTINUOUS}


# A thinking model opens its reply to any question, ours included, with a thinking block.
R_THINKING = ("the reply is an unfinished thinking block (a thinking model ran out of "
              "tokens before answering)")


def after_thinking(reply: str, tags: Tags = DEFAULT_TAGS) -> str:
    r"""The reply after its thinking block (:func:`~confide.core.reasoning.split_reasoning`);
    the reply itself when it has none.

    Raises :class:`CannotScore` when the block never closes: the model never answered,
    and its thinking must not be read as the answer ("So…", "Okay…").

    >>> after_thinking("<think>Paris? Yes.</think>\n\nTrue"), after_thinking("True")
    ('True', 'True')
    """
    gen = split_reasoning(Generation(reply), tags)
    if gen.trace is None:
        return reply
    if gen.empty:
        raise CannotScore(R_THINKING)
    return gen.text


def answer_step(tokens: list[str], tags: Tags = DEFAULT_TAGS) -> int:
    r"""Index of a reply's first answer token: 0, or the first token after its thinking
    block that is not white space (the token a first-token reader must read).

    Raises :class:`CannotScore` when the block never closes, or nothing follows it.

    >>> answer_step(["<think>", "hm", "</think>", "\n\n", "True"]), answer_step(["True"])
    (4, 0)
    """
    gen = split_reasoning(Generation("".join(tokens), tokens=list(tokens)), tags)
    if gen.trace is None:
        return 0
    start = len(tokens) - len(gen.tokens)
    rest = [i for i in range(start, len(tokens)) if tokens[i].strip()]
    if gen.empty or not rest:
        raise CannotScore(R_THINKING)
    return rest[0]


def judge_prompt(item: Item, answer: str, template: str, *, chat: bool) -> Prompt:
    """UQLM's judge prompt: the question and proposed answer, then the template's instruction.

    >>> judge_prompt(Item("x", "2+2?"), "4", "categorical", chat=False)[:38]
    'Question: 2+2?, Proposed Answer: 4. Yo'
    """
    text = f"Question: {question_text(item)}, Proposed Answer: {answer}. {TEMPLATES[template]}"
    if chat:
        return [{"role": "user", "content": text}]
    return text + "\nScore:"


def parse_categorical(reply: str) -> float:
    """Correct → 1, I am not sure → 0.5, Incorrect → 0 (UQLM's keywords, in UQLM's order).

    >>> [parse_categorical(r) for r in ["Correct.", "Incorrect", "I am not sure"]]
    [1.0, 0.0, 0.5]
    """
    text = reply.lower()
    for value, words in CATEGORICAL_SCORES:
        if any(w in text for w in words):
            return value
    raise CannotScore("judge: the reply names none of Correct, Incorrect, I am not sure")


def _backends(ctx: ScoringContext) -> list[Any]:
    chosen = ctx.judge_backends or ([ctx.backend] if ctx.backend else [])
    if not chosen:
        raise CannotScore("no backend to ask")
    return list(chosen)


def _seed(record: Record, ctx: ScoringContext) -> int:
    return item_seed(ctx.seed, record.item.id)


def _answer(record: Record) -> str:
    answer = record.greedy.text
    if not answer.strip():
        raise CannotScore("empty answer: nothing to judge")
    return answer


def _judge_reply(backend: Backend, record: Record, ctx: ScoringContext, template: str) -> float:
    prompt = judge_prompt(record.item, _answer(record), template,
                          chat=bool(backend.has_chat_template))
    spec = GenerationSpec(max_new_tokens=JUDGE_MAX_NEW_TOKENS, stop=("\n",),
                          top_k_alternatives=0)
    result = backend.generate([prompt], spec, [_seed(record, ctx)])[0]
    if result.greedy is None:
        raise CannotScore(f"judge: generation failed: {result.error or 'no answer'}")
    reply = after_thinking(str(result.greedy.text))
    if template == "categorical":
        return parse_categorical(reply)
    return parse_confidence(reply)


@scorer("llm_judge", needs={Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        readable=as_is("the judge's verdict coded 0, 1/2 or 1"))
def llm_judge(record: Record, ctx: ScoringContext) -> float:
    r"""Categorical LLM-as-a-judge: is the answer Correct (1), Incorrect (0) or uncertain (0.5)?

    .. math:: c = \mathrm{read}\big(\mathrm{LM}(\text{"Question: } q \text{, Proposed
              Answer: } y^*\text{. ... Correct, Incorrect, or I am not sure"})\big)
              \in \{0, \tfrac12, 1\}

    UQLM's ``true_false_uncertain`` template and keyword reading
    (:func:`parse_categorical`); one greedy reply of at most 8 tokens from the
    first judge backend (the run's model unless ``judge_backends`` is set). A
    verdict coded in [0, 1], not a stated probability: the table gives it no raw
    calibration (``probability`` is False).

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR (LLM-as-a-judge
    scorers); [2] Zheng et al., 2023, "Judging LLM-as-a-Judge with MT-Bench
    and Chatbot Arena", NeurIPS.
    """
    return _judge_reply(_backends(ctx)[0], record, ctx, "categorical")


@scorer("llm_judge_continuous", needs={Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        probability=True)
def llm_judge_continuous(record: Record, ctx: ScoringContext) -> float:
    r"""Continuous LLM-as-a-judge: the judge's 0–100 rating of the answer's correctness, over 100.

    .. math:: c = \frac{1}{100}\,\mathrm{read}\big(\mathrm{LM}(\text{"Question: } q
              \text{, Proposed Answer: } y^*\text{. How likely ... 0 to 100"})\big)

    UQLM's ``continuous`` template. The reply is read by
    :func:`~confide.scorers.reflexive.parse_confidence`; UQLM instead joins
    every digit of the reply into one number (so "7 out of 10" reads 0.71
    there, 0.7 here). The judge is asked how likely the answer is correct, so
    the value is a stated P(correct) and the table shows its raw calibration.

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR.
    """
    return _judge_reply(_backends(ctx)[0], record, ctx, "continuous")


@scorer("judge_panel", needs={Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        readable=as_is("the panel's mean verdict"))
def judge_panel(record: Record, ctx: ScoringContext) -> float:
    r"""Mean of a panel of judges: every judge backend, each with both templates.

    .. math:: c = \frac{1}{|P|}\sum_{(m, \tau) \in P} c_{m,\tau}

    over the judges :math:`m` (``ctx.judge_backends``, default the
    run's model) and templates :math:`\tau \in` {categorical, continuous};
    a member whose reply cannot be read is left out (all unreadable:
    :class:`CannotScore`). UQLM's ``LLMPanel`` "avg" aggregate. It averages
    categorical verdicts with stated probabilities, so it is no probability of
    being correct: the table gives it no raw calibration.

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR (LLMPanel);
    [2] Verga et al., 2024, "Replacing Judges with Juries: Evaluating LLM
    Generations with a Panel of Diverse Models", arXiv:2404.18796.
    """
    _answer(record)
    votes, reasons = [], []
    for backend in _backends(ctx):
        for template in TEMPLATES:
            try:
                votes.append(_judge_reply(backend, record, ctx, template))
            except CannotScore as exc:
                reasons.append(exc.reason)
    if not votes:
        raise CannotScore("judge panel: no judge gave a readable reply (" + "; ".join(
            sorted(set(reasons))) + ")")
    return float(np.mean(votes))


# ---------------------------------------------------------------------------
# P(True) variants


def p_true_sampling_prompt(item: Item, answer: str, ideas: list[str], *, chat: bool) -> Prompt:
    """The P(True) prompt with the sampled answers shown as brainstormed ideas.

    >>> p_true_sampling_prompt(Item("x", "2+2?"), "4", ["4", "5"], chat=False).splitlines()[1]
    'Here are some ideas that were brainstormed: 4, 5'
    """
    body = (f"Question: {question_text(item)}\n"
            f"Here are some ideas that were brainstormed: {', '.join(ideas)}\n"
            f"Proposed answer: {answer}\nIs the proposed answer true or false?")
    if chat:
        return [{"role": "user", "content": body + " Reply with one word: True or False."}]
    return body + "\nAnswer:"


@scorer("p_true_sampling", needs={Need.SAMPLES, Need.EXTRA_PROMPT, Need.TOP_LOGPROBS},
        cost=Cost.MODEL_CALLS, n_samples=5, sample_needs=(),  # the samples' texts only
        probability=True)
def p_true_sampling(record: Record, ctx: ScoringContext) -> float:
    r"""P(True) with the sampled answers in the prompt as brainstormed ideas.

    .. math:: c = \frac{P(\text{True} \mid q, s_{1..k}, y^*)}
              {P(\text{True} \mid q, s_{1..k}, y^*) + P(\text{False} \mid q, s_{1..k}, y^*)}

    Same reading as ``p_true`` (one-token spellings of True/False summed,
    renormalised), prompt :func:`p_true_sampling_prompt`; the samples are listed
    in sorted order (so the value ignores sampling order), empty ones are
    not shown (all empty: :class:`CannotScore`). LM-Polygraph's
    ``PTrueSampling`` reports :math:`\log P(\text{True})` without the
    renormalisation over True/False, and its prompt lists "(A) True (B)
    False"; the ranking agrees when P(True)+P(False) is the same across items.

    References: [1] Kadavath et al., 2022, "Language Models (Mostly) Know
    What They Know", arXiv:2207.05221 (P(True) with brainstormed samples).
    """
    # sorted: the value must not depend on the order the samples were drawn in
    ideas = sorted(s.text for s in require_samples(record) if s.text.strip())
    backend = _backends(ctx)[0]
    answer = _answer(record)
    if not ideas:
        raise CannotScore("every sample is empty: no ideas to show")
    prompt = p_true_sampling_prompt(record.item, answer, ideas,
                                    chat=bool(backend.has_chat_template))
    try:
        return two_way_probability(backend, prompt, P_TRUE_VARIANTS["true"],
                                   P_TRUE_VARIANTS["false"], seed=_seed(record, ctx), top_k=TOP_K)
    except CannotScore as exc:
        raise CannotScore(f"p_true_sampling: {exc.reason}") from exc


@scorer("p_true_empirical", needs={Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        probability=True)
def p_true_empirical(record: Record, ctx: ScoringContext) -> float:
    r"""Empirical P(True): the share of sampled one-token replies that say True.

    .. math:: c = \frac{1}{N}\sum_{n=1}^{N} \mathbb 1\big[r_n \text{ starts with "true"}\big],
              \qquad r_n \sim \mathrm{LM}(\cdot \mid \text{P(True) prompt}),\ N = 10

    The P(True) prompt of ``p_true``
    (:func:`~confide.scorers.reflexive.p_true_prompt`), sampled at temperature
    1 without nucleus truncation. Needs no log-probabilities, so it works
    with any backend. LM-Polygraph's ``PTrueEmpirical`` counts replies
    containing "True" (case-sensitive) after its own prompt.

    References: [1] Kadavath et al., 2022, arXiv:2207.05221 (P(True));
    [2] Fadeeva et al., 2023, LM-Polygraph (empirical P(True)).
    """
    backend = _backends(ctx)[0]
    prompt = p_true_prompt(record.item, _answer(record), chat=bool(backend.has_chat_template))
    n = int(ctx.options.get("p_true_samples", P_TRUE_EMPIRICAL_SAMPLES))
    spec = GenerationSpec(max_new_tokens=1, n_samples=n, temperature=1.0, top_p=1.0,
                          top_k_alternatives=0, greedy=False)
    result = backend.generate([prompt], spec, [_seed(record, ctx)])[0]
    replies = [s.text for s in result.samples]
    if not replies:
        raise CannotScore(f"p_true_empirical: sampling failed: {result.error or 'no replies'}")
    read = []
    for reply in replies:  # a thinking block is not a reply: read after it, never as False
        try:
            read.append(after_thinking(reply))
        except CannotScore:
            continue
    if not read:
        raise CannotScore(f"p_true_empirical: {R_THINKING}")
    return float(np.mean([r.strip().lower().startswith("true") for r in read]))


# ---------------------------------------------------------------------------
# BSDetector


@scorer("bsdetector", needs={Need.SAMPLES, Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        n_samples=5,
        readable=as_is("the weighted sum of affinity, match rate and self-reflection"))
def bsdetector(record: Record, ctx: ScoringContext) -> float:
    r"""BSDetector: observed consistency with the samples combined with self-reflection.

    .. math::
        O = \alpha\,\frac1k\sum_{i=1}^{k} W_{y^*, s_i}
            + (1-\alpha)\,\frac1k\sum_{i=1}^{k} \mathbb 1[s_i = y^*], \qquad
        c = \beta\,O + (1-\beta)\,S

    :math:`W` is the run judge's affinity, :math:`S` the categorical
    self-reflection (``llm_judge``: 1, 0.5 or 0), :math:`\alpha = 0.8`,
    :math:`\beta = 0.7`. UQLM's BSDetector ensemble uses weights 0.56, 0.14,
    0.3 on (non-contradiction, exact match, self-reflection), the same
    numbers; its non-contradiction is :math:`1 - p_{\text{contra}}` of an NLI
    model where confide uses the judge's affinity. A weighted sum of a similarity,
    a match rate and a verdict, not a probability of being correct: the table
    gives it no raw calibration.

    References: [1] Chen & Mueller, 2024, "Quantifying Uncertainty in Answers
    from any Language Model and Enhancing their Trustworthiness", ACL
    (BSDetector); [2] Bouchard & Chauhan, 2025, UQLM, TMLR.
    """
    samples = require_samples(record)
    answer = _answer(record)
    w = affinity(record, ctx)[0, 1:]
    exact = np.mean([s.text == answer for s in samples])
    observed = BSDETECTOR_ALPHA * float(np.mean(w)) + (1 - BSDETECTOR_ALPHA) * float(exact)
    reflection = _judge_reply(_backends(ctx)[0], record, ctx, "categorical")
    return BSDETECTOR_BETA * observed + (1 - BSDETECTOR_BETA) * reflection
