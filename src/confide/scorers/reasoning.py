r"""Scorers of a reasoning model's reply: its trace, and its final answers with stated confidence.

A reasoning reply is two spans (:class:`~confide.core.records.Generation`): the record's
greedy generation is the **final answer**, and its ``trace`` the reasoning before it, a
generation of its own with its own tokens and statistics. The scorers here read:

``trace`` (the reasoning span)
    DeepConf's confidences (Fu et al., 2025) from the trace's top-k log-probabilities:
    ``deepconf_mean``, ``deepconf_lowest_group``, ``deepconf_bottom10``,
    ``deepconf_tail``; and ``trace_length`` (Devic et al., 2025).
``answer`` (the final answers of the greedy reply and the samples)
    ``sc_verbalized``: self-consistency over the final answers combined with the
    confidence the model states after each (Del et al., 2026).

The answer span's own statistics need no scorer here: every answer-level scorer of the
token statistics (``mean_logprob``, ``msp``, ``mean_entropy``, ...) reads the greedy
generation, which for a reasoning reply *is* the final answer, its tokens scored while
generating after the trace. So ``mean_logprob`` of such a record is the final answer's
mean log-probability given the question and the trace,
:math:`\frac1T\sum_t \log p(y_t \mid x, \text{trace}, y_{<t})`, and ``msp`` its
sequence probability.

Token confidence (Fu et al., 2025, eq. 2): at trace step :math:`i` with the top-:math:`k`
log-probabilities :math:`\log P_i(1) \ge \dots \ge \log P_i(k)`,

.. math:: C_i = -\frac{1}{k}\sum_{j=1}^{k} \log P_i(j)

It is *high* when the step is peaked: the chosen token takes the mass and the other
:math:`k-1` listed tokens are improbable, so their negated log-probabilities are large.
It needs :math:`k \ge 2` (with :math:`k = 1` it is :math:`-\log P_i(1)`, which grows as the
step flattens: the opposite sign), and its scale grows with :math:`k`, so values are
comparable only between traces listed with the same :math:`k` (the paper lists 20).
Group confidences are the means of :math:`C_i` over the sliding windows of
:math:`n` consecutive trace tokens (the paper's :math:`n` is 2048, option
``deepconf_window``); a trace shorter than :math:`n` is one window, :math:`n =
\min(n, T)`, so the group scorers of a short trace equal ``deepconf_mean``.

Every scorer here refuses, with the reason, a reply without a trace, an empty trace, a
trace without a final answer (``gen.trace is not None and gen.empty``: a trace cut by the
token budget), top-k log-probabilities missing, fewer than two alternatives a step, or
NaN or infinite; never reading such a reply as confident.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from confide.backends.base import GenerationSpec, item_seed
from confide.core.errors import CannotScore
from confide.core.records import Generation, Record
from confide.scorers.asking import after_thinking
from confide.scorers.base import Cost, Need, ScoringContext, no_readable, scorer
from confide.scorers.features import clusters, require_samples
from confide.scorers.reflexive import (
    VERBALIZED_2S_MAX_NEW_TOKENS,
    parse_confidence,
    verbalized_2s_prompt,
)

__all__ = ["DEEPCONF_BOTTOM_SHARE", "DEEPCONF_TAIL", "DEEPCONF_WINDOW", "R_EMPTY_TRACE",
           "R_NO_FINAL_ANSWER", "R_NO_TRACE", "SC_VERBALIZED_SAMPLES", "TRACE_MEASURES",
           "group_confidences", "reply_trace", "token_confidences", "trace_confidence"]

DEEPCONF_WINDOW = 2048      # Fu et al. (2025): group (sliding window) size n
DEEPCONF_TAIL = 2048        # Fu et al. (2025): tail confidence over the last 2048 tokens
DEEPCONF_BOTTOM_SHARE = 0.1  # Fu et al. (2025): bottom 10 % of the group confidences
SC_VERBALIZED_SAMPLES = 2   # Del et al. (2026): the hybrid already leads with two samples

R_NO_TRACE = "no reasoning trace: the reply is not a reasoning model's"
R_EMPTY_TRACE = "empty reasoning trace: no trace tokens to read"
R_NO_FINAL_ANSWER = ("the trace has no final answer (cut by the token budget, or never "
                     "closed): nothing to put a confidence on")

_TRACE_TOP = {Need.TRACE, Need.TOP_LOGPROBS}
_NO_READABLE_C = no_readable("a mean of negated top-k log-probabilities (nats): unbounded, "
                             "its scale set by k")


# ---------------------------------------------------------------------- the arithmetic


def token_confidences(top_logprobs: Any) -> np.ndarray:
    r"""DeepConf's token confidence of each step from its top-k log-probabilities.

    .. math:: C_i = -\frac{1}{k}\sum_{j=1}^{k} \log P_i(j)

    Parameters
    ----------
    top_logprobs : array of shape (T, k), k >= 2
        Each step's top-k log-probabilities (any order).

    Returns
    -------
    ndarray of shape (T,), each >= 0; higher = a more peaked step (more confident).

    Raises
    ------
    CannotScore
        No steps, fewer than two alternatives a step, or a NaN or infinite entry
        (:math:`-\infty` would make :math:`C_i` infinite: the most confident value).

    References
    ----------
    [1] Fu, Wang, Tian & Zhao, 2025, "Deep Think with Confidence", arXiv:2508.15260.

    Examples
    --------
    >>> token_confidences([[-0.1, -2.3], [-0.7, -0.7]]).round(2).tolist()
    [1.2, 0.7]
    """
    top = np.asarray(top_logprobs, dtype=np.float64)
    if top.ndim != 2 or top.shape[0] == 0:
        raise CannotScore(R_EMPTY_TRACE)
    if top.shape[1] < 2:
        raise CannotScore(f"token confidence needs at least 2 alternatives a step (with one "
                          f"its sign flips); the trace lists {top.shape[1]}")
    if not np.isfinite(top).all():
        raise CannotScore("the trace's top-k log-probabilities hold NaN or infinity")
    return -top.mean(axis=1)


def group_confidences(confidences: Any, window: int) -> np.ndarray:
    r"""Means of the token confidences over every window of ``n`` consecutive tokens.

    .. math:: C_{G_i} = \frac{1}{n}\sum_{t=i}^{i+n-1} C_t, \qquad
              i = 1, \dots, T - n + 1, \quad n = \min(\text{window}, T)

    A trace shorter than the window is one group (its mean).

    >>> group_confidences([1.0, 2.0, 3.0, 5.0], 2).tolist()
    [1.5, 2.5, 4.0]
    >>> group_confidences([1.0, 2.0], 2048).tolist()
    [1.5]
    """
    c = np.asarray(confidences, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise CannotScore(R_EMPTY_TRACE)
    n = min(_positive(window, "deepconf_window"), c.size)
    sums = np.cumsum(np.concatenate([[0.0], c]))
    return np.asarray((sums[n:] - sums[:-n]) / n, dtype=np.float64)


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise CannotScore(f"option {name} must be a positive integer, not {value!r}")
    return int(value)


def reply_trace(gen: Generation) -> Generation:
    """The trace of a reasoning reply with a final answer; :class:`CannotScore` otherwise."""
    if gen.trace is None:
        raise CannotScore(R_NO_TRACE)
    if gen.empty:
        raise CannotScore(R_NO_FINAL_ANSWER)
    trace = gen.trace
    if trace.empty or trace.n_tokens == 0:
        raise CannotScore(R_EMPTY_TRACE)
    return trace


def _trace_tokens(gen: Generation) -> np.ndarray:
    trace = reply_trace(gen)
    if trace.top_logprobs is None:
        raise CannotScore("the trace has no top-k log-probabilities (the backend or log "
                          "gave none)")
    return token_confidences(trace.top_logprobs)


#: The trace confidences by name, as ``trace_confidence`` and the vote read them.
TRACE_MEASURES = ("mean", "lowest_group", "bottom10", "tail")


def trace_confidence(gen: Generation, measure: str = "bottom10", *,
                     window: int = DEEPCONF_WINDOW, tail: int = DEEPCONF_TAIL,
                     share: float = DEEPCONF_BOTTOM_SHARE) -> float:
    r"""One of DeepConf's trace confidences of a reasoning reply (higher = more confident).

    .. math::
        C_\text{mean} = \frac1T\sum_{i=1}^T C_i, \quad
        C_\text{lowest} = \min_i C_{G_i}, \quad
        C_\text{bottom} = \frac{1}{|B|}\sum_{G \in B} C_G, \quad
        C_\text{tail} = \frac{1}{m}\sum_{i=T-m+1}^{T} C_i

    with :math:`B` the :math:`\max(1, \lceil \eta G \rceil)` lowest of the :math:`G`
    group confidences (:math:`\eta` = ``share``, 10 %) and :math:`m = \min(\text{tail},
    T)`.

    Parameters
    ----------
    gen : Generation
        A reasoning reply: its final answer, with ``trace`` and the trace's top-k.
    measure : {"mean", "lowest_group", "bottom10", "tail"}
    window, tail : int >= 1
        Group size :math:`n` and tail length (the paper's 2048 each).
    share : float in (0, 1]
        The bottom share of groups averaged by ``bottom10``.

    Raises
    ------
    CannotScore
        No trace, an empty trace, no final answer, or unusable top-k
        (:func:`token_confidences`).

    References
    ----------
    [1] Fu, Wang, Tian & Zhao, 2025, "Deep Think with Confidence", arXiv:2508.15260
        (§2: token, average trace, group, bottom-10 %, lowest group and tail confidence).
    """
    if measure not in TRACE_MEASURES:
        raise ValueError(f"measure must be one of {TRACE_MEASURES}, not {measure!r}")
    c = _trace_tokens(gen)
    if measure == "mean":
        return float(c.mean())
    if measure == "tail":
        return float(c[-min(_positive(tail, "deepconf_tail"), c.size):].mean())
    groups = group_confidences(c, window)
    if measure == "lowest_group":
        return float(groups.min())
    if not 0.0 < share <= 1.0:
        raise CannotScore(f"option deepconf_bottom_share must be in (0, 1], not {share!r}")
    m = max(1, math.ceil(share * groups.size))
    return float(np.sort(groups)[:m].mean())


def _options(ctx: ScoringContext) -> dict[str, Any]:
    o = ctx.options
    return {"window": o.get("deepconf_window", DEEPCONF_WINDOW),
            "tail": o.get("deepconf_tail", DEEPCONF_TAIL),
            "share": o.get("deepconf_bottom_share", DEEPCONF_BOTTOM_SHARE)}


# ---------------------------------------------------------------------- trace scorers


@scorer("deepconf_mean", needs=_TRACE_TOP, readable=_NO_READABLE_C, span="trace")
def deepconf_mean(record: Record) -> float:
    r"""DeepConf average trace confidence: the mean token confidence over the whole trace.

    .. math:: c = \frac{1}{T}\sum_{i=1}^{T} C_i, \qquad
              C_i = -\frac{1}{k}\sum_{j=1}^{k} \log P_i(j)

    over the :math:`T` trace tokens (the final answer excluded). Reads the trace.

    References: [1] Fu et al., 2025, "Deep Think with Confidence", arXiv:2508.15260
    (average trace confidence, after Kang et al.'s self-certainty).
    """
    return trace_confidence(record.greedy, "mean")


@scorer("deepconf_lowest_group", needs=_TRACE_TOP, readable=_NO_READABLE_C, span="trace")
def deepconf_lowest_group(record: Record, ctx: ScoringContext) -> float:
    r"""DeepConf lowest group confidence: the least confident window of the trace.

    .. math:: c = \min_{i} C_{G_i}, \qquad
              C_{G_i} = \frac{1}{n}\sum_{t=i}^{i+n-1} C_t, \quad n = \min(2048, T)

    Window :math:`n` from option ``deepconf_window`` (default the paper's 2048); a
    shorter trace is one window. Reads the trace.

    References: [1] Fu et al., 2025, "Deep Think with Confidence", arXiv:2508.15260
    (lowest group confidence, also the online stopping signal).
    """
    o = _options(ctx)
    return trace_confidence(record.greedy, "lowest_group", window=o["window"])


@scorer("deepconf_bottom10", needs=_TRACE_TOP, readable=_NO_READABLE_C, span="trace")
def deepconf_bottom10(record: Record, ctx: ScoringContext) -> float:
    r"""DeepConf bottom-10 % group confidence: the mean of the trace's lowest windows.

    .. math:: c = \frac{1}{|B|}\sum_{G \in B} C_G, \qquad
              |B| = \max(1, \lceil 0.1\, (T - n + 1) \rceil)

    :math:`B` the lowest 10 % of the sliding-window group confidences (option
    ``deepconf_bottom_share``; window as ``deepconf_lowest_group``). Reads the trace.

    References: [1] Fu et al., 2025, "Deep Think with Confidence", arXiv:2508.15260
    (bottom 10 % group confidence).
    """
    o = _options(ctx)
    return trace_confidence(record.greedy, "bottom10", window=o["window"], share=o["share"])


@scorer("deepconf_tail", needs=_TRACE_TOP, readable=_NO_READABLE_C, span="trace")
def deepconf_tail(record: Record, ctx: ScoringContext) -> float:
    r"""DeepConf tail confidence: the mean token confidence of the trace's last tokens.

    .. math:: c = \frac{1}{m}\sum_{i=T-m+1}^{T} C_i, \qquad m = \min(2048, T)

    The end of the trace, where the answer is settled (option ``deepconf_tail``,
    default the paper's 2048). Reads the trace.

    References: [1] Fu et al., 2025, "Deep Think with Confidence", arXiv:2508.15260
    (tail confidence).
    """
    return trace_confidence(record.greedy, "tail", tail=_options(ctx)["tail"])


@scorer("trace_length", needs={Need.TRACE}, span="trace",
        readable=no_readable("a count of trace tokens, not a probability"))
def trace_length(record: Record) -> float:
    r"""Negated length of the reasoning trace in tokens: a longer trace, less confidence.

    .. math:: c = -T_\text{trace}

    Sign: Devic et al. (2025) find that after reasoning post-training, replies whose
    traces are longer are less often right, across models, datasets and prompts, even
    after adjusting for problem difficulty, and that trace length used so discriminates
    about as well as verbalized confidence (and complements it). A model not
    post-trained to reason need not show this; compare with ``length`` (the answer's
    own length). Reads the trace.

    References: [1] Devic, Peale, Bradley, Williamson, Nakkiran & Gollakota, 2025,
    "Trace Length is a Simple Uncertainty Signal in Reasoning Models",
    arXiv:2510.10409.
    """
    return -float(reply_trace(record.greedy).n_tokens)


# ---------------------------------------------------------------------- the hybrid


@scorer("sc_verbalized", needs={Need.SAMPLES, Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        n_samples=SC_VERBALIZED_SAMPLES, sample_needs=(), probability=True, span="answer")
def sc_verbalized(record: Record, ctx: ScoringContext) -> float:
    r"""Self-consistency over final answers weighted by the confidence stated after each.

    .. math:: c = \frac{1}{k}\sum_{i=1}^{k} \mathbb 1\big[s_i \equiv y^*\big]\, v(s_i),
              \qquad v(s) = \mathrm{parse}\big(\mathrm{LM}(q, s,
              \text{"How confident \dots 0 to 100?"})\big)

    over the :math:`k` sampled final answers :math:`s_i` (the run's judge decides
    :math:`\equiv`, as for ``agreement``); :math:`v(s)` is the two-stage verbalized
    confidence (``verbalized_2s``: its prompt and reader) asked **after the final
    answer**, never after the trace, one short generation per distinct agreeing answer,
    a thinking block in the reply skipped. With :math:`v \equiv 1` it is ``agreement``
    (self-consistency); with every sample agreeing, the mean stated confidence. In
    [0, 1]; a disagreeing or empty sample adds 0, so no sample agreeing gives 0 (no
    model call). Reads the final answers (greedy and samples), not the traces, so it
    scores replies with or without a trace.

    Del et al. (2026) combine the two signals over parallel samples of reasoning models
    and find the hybrid ahead of either alone with only two samples (up to +12 AUROC on
    average over 17 tasks); this product form, which keeps both the agreement and the
    level of the stated confidence, is ours (Xiong et al.'s Avg-Conf normalises it by
    :math:`\sum_i v(s_i)` instead, losing the level).

    Raises CannotScore with the reason when every sample is empty or a stated confidence
    cannot be read.

    References: [1] Del, Kängsepp, Domnich, Tampuu, Yankovskaya, Kull & Fishel, 2026,
    "How Uncertainty Estimation Scales with Sampling in Reasoning Models",
    arXiv:2603.19118; [2] Xiong et al., 2024, "Can LLMs Express Their Uncertainty?",
    ICLR (Avg-Conf); [3] Wang et al., 2023, "Self-Consistency Improves Chain of Thought
    Reasoning in Language Models", ICLR.
    """
    samples = require_samples(record, 2)
    if all(s.empty for s in samples):
        raise CannotScore("every sample is empty: no final answers to agree")
    labels = clusters(record, ctx)
    agree = [bool(lab == labels[0]) and not s.empty for s, lab in zip(samples, labels[1:],
                                                                       strict=True)]
    texts = sorted({s.text for s, a in zip(samples, agree, strict=True) if a})
    if not texts:
        return 0.0
    backend = ctx.backend
    if backend is None:
        raise CannotScore("no backend to ask the stated confidence")
    chat = bool(getattr(backend, "has_chat_template", False))
    spec = GenerationSpec(max_new_tokens=int(ctx.options.get(
        "verbalized_2s_max_new_tokens", VERBALIZED_2S_MAX_NEW_TOKENS)), stop=("\n",),
        top_k_alternatives=0)
    seed = item_seed(ctx.seed, record.item.id)
    results = backend.generate([verbalized_2s_prompt(record.item, t, chat=chat)
                                for t in texts], spec, [seed] * len(texts))
    stated: dict[str, float] = {}
    for text, result in zip(texts, results, strict=True):
        if result.greedy is None:
            raise CannotScore(f"extra generation failed: {result.error or 'no answer'}")
        stated[text] = parse_confidence(after_thinking(str(result.greedy.text)))
    return float(sum(stated[s.text] for s, a in zip(samples, agree, strict=True) if a)
                 / len(samples))
