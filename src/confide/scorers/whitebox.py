"""White-box scorers: arithmetic on the greedy answer's own token statistics.

All statistics were computed from the next-token distributions produced while
generating, so these cost nothing beyond the generation. Notation: the answer
has tokens :math:`y_1..y_T`; :math:`p_t` is the model's next-token distribution
at step :math:`t` over a vocabulary of size :math:`V`.

Parity lines in the docstrings compare with LM-Polygraph 0.7's own pipeline on
the bundled model (float32, identical greedy tokens): Polygraph's answer keeps
the token that ended it (the stop string's token or EOS), which confide cuts;
what remains once that token is removed is the float32 rounding of two
decoding paths (``benchmarks/results/parity.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from confide.core.errors import CannotScore
from confide.core.records import Generation, Record
from confide.scorers.base import Need, as_is, exp_of, no_readable, scorer, scorer_block

__all__ = ["Segments", "block_values", "reference_value", "segment_extreme", "segment_sums",
           "segments", "token_statistic"]


def token_statistic(gen: Generation, name: str) -> np.ndarray:
    """A per-token statistic of ``gen`` as float64; CannotScore if absent, empty or not finite."""
    values = getattr(gen, name)
    if values is None:
        raise CannotScore(f"the backend gave no {name.replace('_', ' ')}")
    if len(values) == 0:
        raise CannotScore("empty answer: no tokens to score")
    out = np.asarray(values, dtype=np.float64)
    if np.isfinite(out).all():  # the common case, in one call
        return out
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:  # e.g. a -inf logit: KL(U || p) is infinite, 0 log 0 read as NaN
        raise CannotScore(f"{name.replace('_', ' ')} not finite at token {int(bad[0]) + 1} "
                          f"({out[bad[0]]})")
    return out


class _Summary:
    """A statistic's sum, minimum and maximum over the answer, as ``np.sum``, ``np.min`` and
    ``np.max`` give them (``np.mean`` is the sum over the count, as numpy divides it)."""

    __slots__ = ("key", "maximum", "minimum", "n", "source", "total")

    def __init__(self, source: np.ndarray, key: tuple[object, ...], values: np.ndarray) -> None:
        self.source, self.key, self.n = source, key, values.size
        self.total = float(np.add.reduce(values, axis=None))
        self.minimum = float(np.minimum.reduce(values, axis=None))
        self.maximum = float(np.maximum.reduce(values, axis=None))


# The last answer's summaries, by statistic: the scorers of one record run one after another
# (msp, mean_logprob and min_logprob read one array; an import runs them all on every record).
# Found again only for the same array object with the same shape, type and bytes.
_LAST: dict[str, _Summary] = {}


def _summary(gen: Generation, name: str) -> _Summary:
    """:func:`token_statistic`'s array of ``gen``, summarised (the same CannotScore)."""
    values = getattr(gen, name)
    last = _LAST.get(name)
    if isinstance(values, np.ndarray):
        key = (values.shape, values.dtype.str, values.tobytes())
        if last is not None and last.source is values and last.key == key:
            return last
        found = _Summary(values, key, token_statistic(gen, name))
        _LAST[name] = found
        return found
    return _Summary(values, (), token_statistic(gen, name))


# --- block forms: many records at once (an import scores a block of records together) ------
#
# numpy costs about a microsecond a call whatever the array's size, and a record's arrays are
# tiny (20 tokens): per record, the calls cost more than the arithmetic. The block forms
# (``run_scorer_block``) join the arrays of many records and reduce each record's segment
# (:func:`segment_sums`: the same sums as ``np.add.reduce`` of the segment alone, bit for bit;
# ``tests/test_scorer_blocks.py``). A record outside the common case (no array, not
# float, not finite, another shape) goes to the scorer itself, so its value or reason is the
# scorer's own.


@dataclass
class Segments:
    """The records (by index) whose statistic is in the common case, their values joined
    (float64; rows for a 2-D statistic), where each record's segment starts and its
    length; ``rest``: the indices of the other records."""

    where: list[int]
    rest: list[int]
    values: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray


def segments(arrays: Sequence[object], ndim: int = 1) -> Segments:
    """:class:`Segments` of ``arrays`` (one per record): the common case is a non-empty
    float ndarray of ``ndim`` dimensions, every value finite."""
    where, rest, kept = [], [], []
    for i, values in enumerate(arrays):
        if (type(values) is np.ndarray and values.ndim == ndim and values.shape[0]
                and values.dtype.kind == "f"):
            where.append(i)
            kept.append(values)
        else:
            rest.append(i)
    if not kept:
        return Segments([], rest, np.zeros((0,) * ndim), np.zeros(0, np.intp),
                        np.zeros(0, np.intp))
    sizes = np.array([len(v) for v in kept], dtype=np.intp)
    values = np.concatenate(kept).astype(np.float64)
    finite: np.ndarray = np.isfinite(values)
    if not finite.all():  # those records go to the scorer itself (its reason names the token)
        if ndim > 1:
            finite = np.asarray(finite.reshape(len(values), -1).all(axis=1))
        ok = np.logical_and.reduceat(finite, _starts(sizes))
        rest = sorted(rest + [i for i, good in zip(where, ok.tolist(), strict=True)
                              if not good])
        where = [i for i, good in zip(where, ok.tolist(), strict=True) if good]
        values, sizes = values[np.repeat(ok, sizes)], sizes[ok]
    return Segments(where, rest, values, _starts(sizes), sizes)


def _starts(sizes: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(sizes), dtype=np.intp)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts


def segment_sums(values: np.ndarray, seg: Segments) -> np.ndarray:
    """``np.add.reduce`` of each record's segment of ``values`` (1-D, one value per row of
    ``seg``), bit for bit. Segments of one length are stacked and reduced along their rows,
    which numpy sums as it sums one segment alone (pairwise, with the same blocks of 8);
    ``np.add.reduceat`` would not (it rounds some sums otherwise)."""
    out = np.empty(len(seg.sizes))
    if not len(out):
        return out
    first = int(seg.sizes[0])
    if (seg.sizes == first).all():  # the common block: every answer of one length
        out[:] = np.add.reduce(values.reshape(len(out), first), axis=1)
        return out
    for size in np.unique(seg.sizes).tolist():
        members = np.flatnonzero(seg.sizes == size)
        rows = seg.starts[members][:, None] + np.arange(size)
        out[members] = np.add.reduce(values[rows], axis=1)
    return out


def segment_extreme(values: np.ndarray, seg: Segments, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc.reduce`` (``np.minimum``, ``np.maximum``) of each record's segment of
    ``values``; a zero is reduced again from the segment alone (which of ``0.0`` and
    ``-0.0`` comes out may depend on the loop)."""
    out = ufunc.reduceat(values, seg.starts)
    for j in np.flatnonzero(out == 0.0).tolist():
        a = int(seg.starts[j])
        out[j] = ufunc.reduce(values[a:a + int(seg.sizes[j])])
    return out


def block_values(records: Sequence[Record], seg: Segments, values: np.ndarray,
                 reference: Callable[[Record], float]) -> list[float | CannotScore]:
    """Each record's value: ``values`` (in ``seg.where`` order) for the common case, the
    scorer ``reference`` itself (its value or its :class:`CannotScore`) for the rest."""
    out: list[float | CannotScore] = [math.nan] * len(records)
    for i, value in zip(seg.where, values.tolist(), strict=True):
        out[i] = value
    for i in seg.rest:
        out[i] = reference_value(reference, records[i])
    return out


def reference_value(reference: Callable[[Record], float], record: Record
                    ) -> float | CannotScore:
    """``reference(record)``, or the :class:`CannotScore` it raises."""
    try:
        return reference(record)
    except CannotScore as exc:
        return exc


def _logprob_block(records: Sequence[Record], reference: Callable[[Record], float],
                   name: str, value: Callable[[np.ndarray, Segments], np.ndarray]
                   ) -> list[float | CannotScore]:
    seg = segments([getattr(r.greedy, name) for r in records])
    return block_values(records, seg, value(seg.values, seg) if seg.where else seg.values,
                        reference)


@scorer("msp", needs={Need.TOKEN_LOGPROBS},
        readable=exp_of("the greedy answer's sequence probability P(y | x)"))
def msp(record: Record) -> float:
    r"""Maximum sequence probability, in log space: the greedy answer's log-likelihood.

    .. math:: c = \log P(y \mid x) = \sum_{t=1}^{T} \log p_t(y_t)

    Longer answers get lower values, so this score is length-biased by design.
    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 1.1e-4 once its
    answer's end token is removed, 1.8 with it (``benchmarks/results/parity.md``).

    References: [1] Fadeeva et al., 2023, "LM-Polygraph: Uncertainty Estimation
    for Language Models", EMNLP demo (Maximum Sequence Probability).
    """
    return _summary(record.greedy, "token_logprobs").total


@scorer("mean_logprob", needs={Need.TOKEN_LOGPROBS},
        readable=exp_of("the geometric-mean token probability (1 / perplexity)"))
def mean_logprob(record: Record) -> float:
    r"""Length-normalised log-likelihood, i.e. negative log-perplexity.

    .. math:: c = \frac{1}{T}\sum_{t=1}^{T} \log p_t(y_t) = -\log \mathrm{PPL}(y)

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in
    Autoregressive Structured Prediction", ICLR (length-normalised scores);
    [2] Fadeeva et al., 2023, LM-Polygraph (Perplexity).

    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 6.2e-6 once its
    answer's end token is removed, 1.4 with it (``benchmarks/results/parity.md``).
    """
    found = _summary(record.greedy, "token_logprobs")
    return found.total / found.n


@scorer("min_logprob", needs={Need.TOKEN_LOGPROBS},
        readable=exp_of("the probability of the answer's least likely token"))
def min_logprob(record: Record) -> float:
    r"""Log-probability of the least likely token of the answer.

    .. math:: c = \min_{t} \log p_t(y_t)

    References: [1] Manakul et al., 2023, "SelfCheckGPT", EMNLP (Max(-log p)
    baseline, negated here so that higher means more confident).
    """
    return _summary(record.greedy, "token_logprobs").minimum


@scorer("mean_entropy", needs={Need.TOKEN_ENTROPIES},
        readable=exp_of("1 / exp(mean H): the inverse of the effective number of next-token "
                        "choices (normalised negentropy 1 - H / log V would need the vocabulary "
                        "size V, which the value does not carry)"))
def mean_entropy(record: Record) -> float:
    r"""Negative mean entropy of the next-token distributions along the answer.

    .. math:: c = -\frac{1}{T}\sum_{t=1}^{T} H(p_t), \quad H(p) = -\sum_v p(v)\log p(v)

    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 1.8e-5 once its
    answer's end token is removed, 2.6 with it (``benchmarks/results/parity.md``).

    References: [1] Malinin & Gales, 2021, ICLR (average token entropy);
    [2] Manakul et al., 2023, "SelfCheckGPT" (Avg(H)).
    """
    found = _summary(record.greedy, "token_entropies")
    return -(found.total / found.n)


@scorer("max_entropy", needs={Need.TOKEN_ENTROPIES},
        readable=exp_of("1 / exp(max H): the inverse of the effective number of next-token "
                        "choices at the most uncertain step (bound log V not carried by the "
                        "value)"))
def max_entropy(record: Record) -> float:
    r"""Negative entropy of the most uncertain step of the answer.

    .. math:: c = -\max_{t} H(p_t)

    References: [1] Manakul et al., 2023, "SelfCheckGPT", EMNLP (Max(H)).
    """
    return -_summary(record.greedy, "token_entropies").maximum


def _mean(values: np.ndarray, seg: Segments) -> np.ndarray:
    return segment_sums(values, seg) / seg.sizes  # np.mean: the sum over the count


@scorer_block("msp")
def _msp_block(records: Sequence[Record]) -> list[float | CannotScore]:
    return _logprob_block(records, msp, "token_logprobs", segment_sums)


@scorer_block("mean_logprob")
def _mean_logprob_block(records: Sequence[Record]) -> list[float | CannotScore]:
    return _logprob_block(records, mean_logprob, "token_logprobs", _mean)


@scorer_block("min_logprob")
def _min_logprob_block(records: Sequence[Record]) -> list[float | CannotScore]:
    return _logprob_block(records, min_logprob, "token_logprobs",
                          lambda v, seg: segment_extreme(v, seg, np.minimum))


@scorer_block("mean_entropy")
def _mean_entropy_block(records: Sequence[Record]) -> list[float | CannotScore]:
    return _logprob_block(records, mean_entropy, "token_entropies",
                          lambda v, seg: -_mean(v, seg))


@scorer_block("max_entropy")
def _max_entropy_block(records: Sequence[Record]) -> list[float | CannotScore]:
    return _logprob_block(records, max_entropy, "token_entropies",
                          lambda v, seg: -segment_extreme(v, seg, np.maximum))


@scorer("self_certainty", needs={Need.TOKEN_KL_UNIFORM},
        readable=no_readable("KL(U || p_t) is unbounded above (it grows without limit as "
                             "p_t leaves some token near 0) and its largest finite value depends "
                             "on the vocabulary; no [0, 1] form without an arbitrary scale"))
def self_certainty(record: Record) -> float:
    r"""Self-certainty: mean KL divergence from the uniform distribution to each p_t.

    .. math::
        c = \frac{1}{T}\sum_{t=1}^{T} \mathrm{KL}(U \,\|\, p_t)
          = \frac{1}{T}\sum_{t=1}^{T}\Big(-\log V - \frac{1}{V}\sum_{v=1}^{V}\log p_t(v)\Big)

    Needs every logit at every step, so only backends with the full
    distribution (``hf``) can give it. A step where some token has
    probability 0 (a :math:`-\infty` logit, e.g. a masked token) has
    :math:`\mathrm{KL}(U \| p_t) = +\infty`; such a record is refused (NaN
    with the reason), never read as infinitely confident.

    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 3.9e-4 once its
    answer's end token is removed, 1.5 with it (``benchmarks/results/parity.md``).

    References: [1] Kang, Zhao, Zhang, Song & Levine, 2025, "Scalable
    Best-of-N Selection for Large Language Models via Self-Certainty",
    arXiv:2502.18581.
    """
    return float(np.mean(token_statistic(record.greedy, "token_kl_uniform")))


@scorer("renyi_negentropy", needs={Need.TOKEN_RENYI_UNIFORM},
        readable=no_readable("its bound log V (a certain step) depends on the model's "
                             "vocabulary size V, which the value does not carry"))
def renyi_negentropy(record: Record) -> float:
    r"""Mean Rényi divergence (order 1/2) of each tempered next-token distribution from uniform.

    .. math::
        q_t \propto p_t^{1/\tau}, \qquad
        c = \frac{1}{T}\sum_{t=1}^{T} D_\alpha(q_t \,\|\, U)
          = \frac{1}{T}\sum_{t=1}^{T}\Big(\log V + \frac{1}{\alpha-1}
            \log\sum_{v=1}^{V} q_t(v)^\alpha\Big), \qquad \alpha = \tfrac12,\ \tau = 2

    The Rényi negentropy :math:`\log V - H_\alpha(q_t)`: 0 for a uniform
    distribution, :math:`\log V` for a certain one, so higher means more
    confident. Reads the ``token_renyi_uniform`` column, computed from every
    logit while generating (``hf`` only).

    LM-Polygraph 0.7's ``RenyiNeg`` computes :math:`-H_\alpha(q_t) - \log V`
    (the sign of :math:`\log V` flipped, a constant shift of
    :math:`2\log V`) and returns it as an uncertainty although it grows
    with confidence (an open upstream pull request, 465, proposes a ``score_type``
    option; 0.7 has none):
    on the same distributions :math:`c = U + 2\log V`.
    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 4.6e-5 once its
    answer's end token is removed, 0.35 with it (``benchmarks/results/parity.md``).

    References: [1] Darrin, Piantanida & Colombo, 2023, "Rainproof: An
    Umbrella to Shield Text Generators from Out-of-Distribution Data", EMNLP
    (Rényi divergence to uniform); [2] Fadeeva et al., 2023, LM-Polygraph,
    EMNLP demo (RenyiNeg).
    """
    return float(np.mean(token_statistic(record.greedy, "token_renyi_uniform")))


@scorer("fisher_rao", needs={Need.TOKEN_FISHER_RAO_UNIFORM},
        readable=as_is("Fisher-Rao distance from uniform over its maximum pi/2 (0 uniform, near "
                       "1 certain)"))
def fisher_rao(record: Record) -> float:
    r"""Mean Fisher–Rao distance of each tempered next-token distribution from uniform, over pi.

    .. math::
        c = \frac{1}{T}\sum_{t=1}^{T} \frac{2}{\pi}
            \arccos\Big(\sum_{v=1}^{V}\sqrt{q_t(v)\,\tfrac{1}{V}}\Big),
        \qquad q_t \propto p_t^{1/2}

    In [0, 1): 0 for a uniform distribution, near 1 for a certain one
    (higher means more confident). Reads the ``token_fisher_rao_uniform``
    column, computed from every logit while generating (``hf`` only).
    Equals LM-Polygraph's ``FisherRao`` value, which Polygraph 0.7 returns
    as an uncertainty although it grows with confidence (:math:`c = U`).
    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 1.1e-5 once its
    answer's end token is removed, 0.093 with it (``benchmarks/results/parity.md``).

    References: [1] Darrin, Piantanida & Colombo, 2023, "Rainproof", EMNLP
    (Fisher–Rao distance to uniform); [2] Fadeeva et al., 2023,
    LM-Polygraph, EMNLP demo (FisherRao).
    """
    return float(np.mean(token_statistic(record.greedy, "token_fisher_rao_uniform")))


@scorer("length",
        readable=no_readable("a count of tokens, not a confidence (a diagnostic baseline)"))
def length(record: Record) -> float:
    r"""Diagnostic baseline: the negated answer length in tokens.

    .. math:: c = -T

    Not an uncertainty estimate: it shows how much of another scorer's AUROC
    could come from answer length alone.

    References: [1] Santilli et al., 2025, "Revisiting Uncertainty
    Quantification Evaluation in Language Models: Spurious Interactions with
    Response Length Bias Results", ACL.
    """
    n = record.greedy.n_tokens
    if n == 0:
        raise CannotScore("empty answer: no tokens to count" if not record.greedy.text
                          else "the backend gave no tokens")
    return -float(n)


@scorer("option_probability", needs={Need.CHOICE_LOGLIKELIHOODS}, probability=True)
def option_probability(record: Record) -> float:
    r"""Probability of the chosen option, renormalised over a multiple-choice item's options.

    .. math::

        c = \frac{e^{\ell_a}}{\sum_{j=1}^{n} e^{\ell_j}}
          = \frac{1}{\sum_j e^{\ell_j - \ell_a}}

    where :math:`\ell_j = \log p(\text{option}_j \mid \text{prompt})` is the
    log-likelihood the model gives option :math:`j`'s text and :math:`a` the
    option the answer is. For lm-evaluation-harness ``loglikelihood`` records
    (:mod:`confide.ingest.lmeval`) the answer is the option of largest
    log-likelihood, as the harness's ``acc`` takes it, so :math:`c = \max_j
    e^{\ell_j} / \sum_j e^{\ell_j}`
    (:func:`confide.ingest.lmeval.option_probability`).

    Reads ``item.metadata["choices"]`` and ``item.metadata["choice_loglikelihoods"]``
    (what the lmeval reader stores); an answer that is none of the options, or
    missing or malformed log-likelihoods, cannot be scored.

    Returns a probability in :math:`[1/n, 1]` for the argmax option (in
    :math:`(0, 1]` otherwise); higher means more likely correct. One option gives 1.

    References: [1] Kadavath et al., 2022, "Language Models (Mostly) Know What
    They Know", arXiv:2207.05221 (option probabilities as calibrated confidence on
    multiple-choice questions); [2] Gao et al., 2021/2024, lm-evaluation-harness
    (``loglikelihood`` requests, ``acc`` by the argmax option).

    >>> from confide.core.records import Generation, Item, Record
    >>> item = Item("q", "2+2?", metadata={"choices": ["4", "5", "6"],
    ...                                    "choice_loglikelihoods": [-1.0, -2.0, -3.0]})
    >>> round(option_probability(Record(item, Generation(text="4"))), 6)
    0.665241
    """
    meta = record.item.metadata
    choices, values = meta.get("choices"), meta.get("choice_loglikelihoods")
    if not isinstance(choices, list) or not isinstance(values, list):
        raise CannotScore("the item has no options with log-likelihoods "
                          "(metadata choices and choice_loglikelihoods)")
    if len(choices) != len(values) or not choices:
        raise CannotScore(f"{len(choices)} options but {len(values)} log-likelihoods")
    try:
        ll = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise CannotScore("an option's log-likelihood is not a number") from None
    if not np.all(np.isfinite(ll)):
        raise CannotScore("an option's log-likelihood is not finite")
    texts = [str(c).strip() for c in choices]
    answer = record.greedy.text.strip()
    if answer not in texts:
        raise CannotScore("the answer is none of the item's options")
    a = texts.index(answer)
    return float(1.0 / np.exp(ll - ll[a]).sum())
