r"""White-box scorers on the top-k alternatives of each answer token.

Each answer step :math:`t` stores the :math:`k` most likely next tokens with
their log-probabilities, taken from the full next-token distribution while
generating (``top_logprobs[t]``, sorted by probability: :math:`q_{t,1} \ge
q_{t,2} \ge \dots \ge q_{t,k}`). These scorers are arithmetic on those numbers,
so they cost nothing beyond the generation; ``ccp`` also asks the run's judge
whether each alternative means the same as the chosen token.

Methods that need the *whole* distribution at every step (Rényi and
Fisher–Rao divergence to uniform at temperature 2) cannot be computed from the
top-k alone: the ``hf`` backend computes their per-step columns while
generating, and ``renyi_negentropy`` and ``fisher_rao`` in
:mod:`confide.scorers.whitebox` read them. ``boostedprob`` reads the ``hf``
backend's ``token_boosted_prob`` column where a record has it and applies its
rule to the top-k otherwise.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Sequence

import numpy as np

from confide.core.errors import CannotScore
from confide.core.records import BOOSTEDPROB_EPSILON, BOOSTEDPROB_JUMP, Generation, Record
from confide.scorers.base import Cost, Need, ScoringContext, as_is, scorer, scorer_block
from confide.scorers.features import judge_of
from confide.scorers.whitebox import (
    Segments,
    reference_value,
    segment_extreme,
    segment_sums,
    segments,
)

__all__ = ["BOOSTEDPROB_EPSILON", "BOOSTEDPROB_JUMP", "boosted_token_probability",
           "dominant_cut", "token_alternatives"]

_NEEDS_TOP = {Need.TOP_LOGPROBS}


class _TopK:
    """One answer's validated top-k, sorted best first (float64), and what several scorers
    derive from it, each computed once (the four top-k scorers share it; an import runs them
    all on every record, ``benchmarks/results/import_speed.md``)."""

    __slots__ = ("_exp", "_negentropy", "key", "sorted", "source")

    def __init__(self, source: np.ndarray, key: tuple[object, ...], top: np.ndarray) -> None:
        self.source, self.key = source, key
        self.sorted = -np.sort(-top, axis=1)
        self._exp: np.ndarray | None = None
        self._negentropy: np.ndarray | None = None

    @property
    def exp(self) -> np.ndarray:
        """:math:`e^{q_{t,j}}` of the sorted values."""
        if self._exp is None:
            self._exp = np.exp(self.sorted)
        return self._exp

    @property
    def negentropy(self) -> np.ndarray:
        """Each step's normalised negentropy of the renormalised top-k
        (:func:`mean_topk_negentropy`)."""
        if self._negentropy is None:
            self._negentropy = _negentropy(self.sorted)
        return self._negentropy


def _negentropy(top: np.ndarray) -> np.ndarray:
    """Each row's normalised negentropy of the renormalised top-k (rows sorted best first);
    row by row, so a block of records' rows gives each row's own value."""
    p = np.exp(top - top[:, :1])  # the first is the largest
    p /= p.sum(axis=1, keepdims=True)  # renormalised over the k listed tokens
    listed = p > 0  # 0 log 0 = 0 (and a row of no mass at all gives 0 too)
    plogp = np.multiply(p, np.log(p, out=np.zeros_like(p), where=listed),
                        out=np.zeros_like(p), where=listed)
    out: np.ndarray = 1.0 + plogp.sum(axis=1) / math.log(top.shape[1])
    return out


# The last answer's _TopK: the scorers of one record run one after another on the same
# arrays. Found again only for the same array object with the same shape, type and bytes,
# so an array changed in place is read afresh.
_LAST: list[_TopK | None] = [None]


def _key(values: np.ndarray) -> tuple[object, ...]:
    return values.shape, values.dtype.str, values.tobytes()


def _topk(gen: Generation, minimum: int = 1) -> _TopK:
    """The answer's validated top-k (:class:`_TopK`); CannotScore when absent, empty, too
    short (fewer than ``minimum`` alternatives) or holding NaN."""
    values = gen.top_logprobs
    last = _LAST[0]
    if (last is not None and last.source is values and isinstance(values, np.ndarray)
            and last.key == _key(values)):
        found = last
    else:
        if values is None:
            raise CannotScore("the backend gave no top-k alternatives")
        top = np.asarray(values, dtype=np.float64)
        if top.ndim != 2 or top.shape[0] == 0:
            raise CannotScore("empty answer: no tokens to score")
        nan = bool(np.isnan(top).any())
        if nan and top.shape[1] >= minimum:
            raise CannotScore("the top-k log-probabilities contain NaN")
        found = _TopK(values, _key(values) if isinstance(values, np.ndarray) else (), top)
        if found.key and not nan:
            _LAST[0] = found
    k = found.sorted.shape[1]
    if k < minimum:  # checked before NaN, as always
        raise CannotScore(f"needs at least {minimum} alternatives per token; the backend or "
                          f"log listed {k}")
    return found


def _top(gen: Generation, minimum: int = 1) -> np.ndarray:
    """The answer's top-k log-probabilities, shape ``(T, k)``, sorted descending per row."""
    return _topk(gen, minimum).sorted


@scorer("probability_margin", needs=_NEEDS_TOP,
        readable=as_is("the mean gap between the two most likely next tokens' probabilities"))
def probability_margin(record: Record) -> float:
    r"""Mean gap between the two most likely next tokens along the answer.

    .. math:: c = \frac{1}{T}\sum_{t=1}^{T} \big(e^{q_{t,1}} - e^{q_{t,2}}\big)

    In [0, 1]; 1 when every step puts all its mass on one token. Equals UQLM's
    ``probability_margin``.

    References: [1] Bouchard & Chauhan, 2025, "Uncertainty Quantification for
    Language Models: A Suite of Black-Box, White-Box, LLM Judge, and Ensemble
    Scorers", TMLR (UQLM; probability margin); [2] Scheffer, Decomain & Wrobel,
    2001, "Active Hidden Markov Models for Information Extraction", IDA
    (margin sampling).
    """
    p = _topk(record.greedy, 2).exp
    return float(np.mean(p[:, 0] - p[:, 1]))


def _topk_negentropy(gen: Generation) -> np.ndarray:
    return _topk(gen, 2).negentropy


@scorer("mean_topk_negentropy", needs=_NEEDS_TOP,
        readable=as_is("normalised negentropy 1 - H / log k of the renormalised top-k "
                       "distribution (bound log k), averaged over steps"))
def mean_topk_negentropy(record: Record) -> float:
    r"""Mean normalised negentropy of the renormalised top-k distribution of each step.

    .. math:: \tilde p_{t,j} = \frac{e^{q_{t,j}}}{\sum_{l=1}^{k} e^{q_{t,l}}}, \quad
              n_t = 1 - \frac{-\sum_{j=1}^{k}\tilde p_{t,j}\log\tilde p_{t,j}}{\log k}, \quad
              c = \frac{1}{T}\sum_{t=1}^{T} n_t

    In [0, 1]; needs :math:`k \ge 2`. Equals UQLM's ``mean_token_negentropy``
    for the same :math:`k`; UQLM drops a step that lists fewer than :math:`k`
    alternatives, while here an alternative of probability 0 (``-inf``) is a
    listed token with :math:`0 \log 0 = 0`.

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR (token negentropy);
    [2] Manakul et al., 2023, "SelfCheckGPT", EMNLP (entropy over the top
    tokens).
    """
    return float(np.mean(_topk_negentropy(record.greedy)))


@scorer("min_topk_negentropy", needs=_NEEDS_TOP,
        readable=as_is("normalised top-k negentropy 1 - H / log k (bound log k) of the most "
                       "uncertain step"))
def min_topk_negentropy(record: Record) -> float:
    r"""Normalised top-k negentropy of the answer's most uncertain step.

    .. math:: c = \min_{t} n_t \quad (n_t \text{ as in } \texttt{mean\_topk\_negentropy})

    Equals UQLM's ``min_token_negentropy``.

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR.
    """
    return float(np.min(_topk_negentropy(record.greedy)))


# ---------------------------------------------------------------------------
# BoostedProb


def dominant_cut(top_logprobs: np.ndarray, *, jump: float = BOOSTEDPROB_JUMP,
                 epsilon: float = BOOSTEDPROB_EPSILON) -> int:
    r"""Index of the last dominant token of one step's sorted top-k (``-1``: none dominant).

    The "difference_jump" rule of BoostedProb: with probabilities sorted
    :math:`q_1 \ge q_2 \ge \dots`, position :math:`i` is a cut when
    :math:`q_i - q_{i+1} > \max(\text{jump}\cdot q_i,\ \epsilon)`; the dominant
    tokens are those up to the *last* cut (:data:`BOOSTEDPROB_JUMP` = 0.3,
    :data:`BOOSTEDPROB_EPSILON` = 0.005, from :mod:`confide.core.records`).
    Beyond the listed :math:`k` tokens only a token above :math:`\epsilon` can
    start a cut, so the cut is known from the top-k when :math:`q_k \le
    \epsilon`; it is also known when the unlisted mass :math:`r = 1 - \sum_{j
    \le k} q_j` is at most :math:`\epsilon` and :math:`q_k - r` already makes a
    jump (then all listed tokens are dominant). Otherwise it is
    :class:`CannotScore`: the list is too short to tell (the ``hf`` backend
    avoids this by applying the rule to the whole distribution while decoding,
    :func:`confide.backends.hf.steps.boosted_probabilities`).

    >>> dominant_cut(np.log([0.5, 0.45, 0.004, 0.003]))
    1
    >>> dominant_cut(np.log([0.2, 0.19, 0.18, 0.004]))
    2
    """
    q = np.exp(np.asarray(top_logprobs, dtype=np.float64))
    drop = q[:-1] - q[1:]
    cuts = np.flatnonzero((drop > jump * q[:-1]) & (drop > epsilon))
    cut = int(cuts[-1]) if cuts.size else -1
    last = float(q[-1])
    if last <= epsilon:
        return cut
    rest = max(0.0, 1.0 - float(q.sum()))
    if rest <= epsilon and last - min(last, rest) > max(jump * last, epsilon):
        return len(q) - 1
    raise CannotScore(f"boostedprob: the dominant tokens may reach beyond the {len(q)} "
                      f"listed alternatives (the last has p = {last:.3g} > {epsilon})")


def boosted_token_probability(token_logprob: float, top_logprobs: np.ndarray) -> float:
    r"""BoostedProb of one chosen token: its dominant cluster's mass if it is dominant.

    .. math:: b_t = \begin{cases} \sum_{j \le \mathrm{cut}} q_{t,j}
                  & p_t(y_t) \ge q_{t,\mathrm{cut}} \text{ (the token is dominant)} \\
                  p_t(y_t) & \text{otherwise} \end{cases}

    >>> round(boosted_token_probability(math.log(0.5), np.log([0.5, 0.45, 0.004, 0.003])), 6)
    0.95
    """
    top = np.sort(np.asarray(top_logprobs, dtype=np.float64))[::-1]
    cut = dominant_cut(top)
    chosen = float(token_logprob)
    if cut >= 0 and chosen >= top[cut] - 1e-6:  # tolerance: stored float32 values
        return float(np.exp(top[:cut + 1]).sum())
    return math.exp(chosen) if chosen > -math.inf else 0.0


def _boosted_steps(chosen: np.ndarray, found: _TopK, *, jump: float = BOOSTEDPROB_JUMP,
                   epsilon: float = BOOSTEDPROB_EPSILON) -> np.ndarray:
    """:func:`boosted_token_probability` of every step at once: the same values, rounded
    alike (``tests/test_import_speed_paths.py`` compares them bit for bit), and the same
    CannotScore as the first step it refuses. Needs log-probabilities <= 0."""
    top = found.sorted
    # Steps whose cut may lie past the list, in order, as the per-step rule meets them (an
    # answer the top-k cannot tell about is refused at its first such step, cheaply)
    beyond = [t for t, v in enumerate(top[:, -1].tolist()) if math.exp(v) > epsilon]
    for t in beyond:
        refused = _refusal(top[t], jump=jump, epsilon=epsilon)
        if refused is not None:
            raise refused
    full = np.zeros(top.shape[0], dtype=bool)
    full[beyond] = True  # every listed token is dominant
    return _boosted_rows(chosen, top, full, jump=jump, epsilon=epsilon)


def _refusal(row: np.ndarray, *, jump: float, epsilon: float) -> CannotScore | None:
    """Why a step whose last listed probability is above ``epsilon`` cannot be scored from
    its top-k (sorted ``row``), or None when every listed token is dominant."""
    k = len(row)
    q = np.fromiter(map(math.exp, row.tolist()), np.float64, k)
    last, rest = float(q[-1]), max(0.0, 1.0 - float(q.sum()))
    if not (rest <= epsilon and last - min(last, rest) > max(jump * last, epsilon)):
        return _beyond_list(k, last, epsilon)
    return None


def _told(rows: np.ndarray, *, jump: float = BOOSTEDPROB_JUMP,
          epsilon: float = BOOSTEDPROB_EPSILON) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_refusal` of many sorted rows at once: whether each is told (every listed token
    dominant) and its last probability; the same exponentials (``math.exp``) and sums (a
    row's own, ``np.add.reduce`` along it)."""
    n, k = rows.shape
    q = np.fromiter(map(math.exp, rows.ravel().tolist()), np.float64, n * k).reshape(n, k)
    last = q[:, -1]
    rest = np.maximum(1.0 - np.add.reduce(q, axis=1), 0.0)
    told = (rest <= epsilon) & (last - np.minimum(last, rest) > np.maximum(jump * last,
                                                                          epsilon))
    return told, last


def _beyond_list(k: int, last: float, epsilon: float = BOOSTEDPROB_EPSILON) -> CannotScore:
    return CannotScore(f"boostedprob: the dominant tokens may reach beyond the {k} listed "
                       f"alternatives (the last has p = {last:.3g} > {epsilon})")


def _boosted_rows(chosen: np.ndarray, top: np.ndarray, full: np.ndarray, *, jump: float,
                  epsilon: float) -> np.ndarray:
    """Each step's boosted probability (rows of sorted ``top``, ``chosen`` log-probabilities;
    ``full``: steps whose every listed token is dominant), row by row, so a block of
    records' rows gives each row's own value."""
    n, k = top.shape
    # math.exp, as the per-step rule's np.exp of a reversed (strided) view computes it
    # (numpy's vectorised exp of a contiguous row differs in the last bit now and then)
    q = np.fromiter(map(math.exp, top.ravel().tolist()), np.float64, n * k).reshape(n, k)
    drop = q[:, :-1] - q[:, 1:]
    is_cut = (drop > jump * q[:, :-1]) & (drop > epsilon)
    cut = np.where(full, k - 1, np.where(is_cut.any(axis=1),
                                         k - 2 - np.argmax(is_cut[:, ::-1], axis=1), -1))
    rows = np.arange(n)
    dominant = (cut >= 0) & (chosen >= top[rows, np.maximum(cut, 0)] - 1e-6)
    # a dominant token: its group's mass, summed as ndarray.sum sums it (in order below 8
    # terms, which a running sum repeats; pairwise from 8 on, so per step there)
    mass = np.cumsum(q, axis=1)[rows, np.maximum(cut, 0)]
    for t in np.flatnonzero(dominant & (cut >= 7)).tolist():
        mass[t] = q[t, :cut[t] + 1].sum()
    own = np.fromiter((math.exp(v) if v > -math.inf else 0.0 for v in chosen.tolist()),
                      np.float64, n)
    return np.where(dominant, mass, own)


@scorer("boostedprob", needs={Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS},
        readable=as_is("the mean boosted token probability"))
def boostedprob(record: Record) -> float:
    r"""Mean BoostedProb of the answer tokens: probability boosted to its dominant cluster's mass.

    .. math:: c = \frac{1}{T}\sum_{t=1}^{T} b_t, \qquad
              b_t = \begin{cases} \sum_{j \le \mathrm{cut}_t} q_{t,j}
                  & p_t(y_t) \ge q_{t,\mathrm{cut}_t} \\
                  p_t(y_t) & \text{otherwise} \end{cases}

    with :math:`q_{t,1} \ge q_{t,2} \ge \dots` the sorted next-token
    probabilities of step :math:`t` and :math:`\mathrm{cut}_t` the last
    position where :math:`q_{t,i} - q_{t,i+1} > \max(0.3\,q_{t,i},\ 0.005)`
    (BoostedProb's default "difference_jump" rule; no such position: no token
    is dominant). A token that several near-equal candidates compete with is
    not penalised for the split: its confidence is the mass of the whole
    dominant group. In [0, 1].

    Where each :math:`b_t` comes from:

    - the record's ``token_boosted_prob`` column when it has one: the ``hf``
      backend applies the rule to the *whole* distribution of every step while
      decoding (:func:`confide.backends.hf.steps.boosted_probabilities`), so
      every answer it generates has a value;
    - otherwise (imported logs, the ``openai`` and ``vllm`` backends) the rule on
      the stored top-k (:func:`boosted_token_probability`,
      :func:`dominant_cut`). That is exact whenever the :math:`k`-th listed
      probability is at most 0.005; where a step's dominant group may reach past
      the list, the answer is :class:`CannotScore`, never a guess. With the 10
      alternatives a run keeps, that is most uncertain answers. All steps are
      computed at once (the same values as step by step, bit for bit:
      ``tests/test_import_speed_paths.py``).

    The needs stay the top-k's (``token_logprobs``, ``top_logprobs``), which
    every ``hf`` record holds too, so an imported record is planned exactly as
    before and the decoded column is read whenever it is there.

    Equals LM-Polygraph's ``BoostedProbSequence`` (negated) on the same
    distributions; parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 2.1e-6
    once its answer's end token is removed, 0.44 with it
    (``benchmarks/results/parity.md``, measured when the ``hf`` path applied
    the rule to a stored top-200). The decoded column equals that rule on the
    same step's top-200 to float32 rounding (``.venv/bin/python -m pytest
    tests/backends/test_hf_statistics.py -k boosted``).

    References: [1] Dinh & Niehues, 2025, "BoostedProb: Boosting Model
    Probabilities for Quality Estimation", EMNLP (aclanthology
    2025.emnlp-main.166).
    """
    gen = record.greedy
    if gen.token_boosted_prob is not None:
        boosted = np.asarray(gen.token_boosted_prob, dtype=np.float64)
        if boosted.size == 0:
            raise CannotScore("empty answer: no tokens to score")
        if boosted.size != gen.n_tokens:
            raise CannotScore("token_boosted_prob and the answer's tokens differ in length")
        if np.isnan(boosted).any():
            raise CannotScore("token_boosted_prob contains NaN")
        return float(np.mean(boosted))
    found = _topk(gen, 2)
    top = found.sorted
    if gen.token_logprobs is None:
        raise CannotScore("the backend gave no token logprobs")
    chosen = np.asarray(gen.token_logprobs, dtype=np.float64)
    if chosen.size != top.shape[0]:
        raise CannotScore("token logprobs and top-k alternatives differ in length")
    if chosen.ndim != 1:  # one number a token (a (T, 1) array read as T steps failed)
        raise CannotScore(f"token logprobs must be one number per token, not an array of "
                          f"shape {chosen.shape}")
    try:
        if (top <= 0.0).all() and not np.isnan(chosen).any():
            return float(np.mean(_boosted_steps(chosen, found)))
        return float(np.mean([boosted_token_probability(lp, row)  # unusual values: per step
                              for lp, row in zip(chosen, top)]))
    except CannotScore as exc:
        raise _without_column(exc) from exc


def _without_column(exc: CannotScore) -> CannotScore:
    return CannotScore(f"{exc.reason}; the record has no token_boosted_prob taken from the "
                       "whole distribution (the hf backend computes it while decoding)")


# ---------------------------------------------------------------------------
# block forms (an import scores a block of records at once: confide.scorers.whitebox says why)


def _top_groups(records: Sequence[Record]) -> tuple[list[tuple[Segments, np.ndarray]], list[int]]:
    """The records whose top-k is in the common case (a float ndarray ``(T, k)``, ``T >= 1``,
    ``k >= 2``, every value finite), grouped by ``k``: each group's :class:`Segments` (indices
    into ``records``) with its rows sorted best first as :class:`_TopK` sorts them; and the
    indices of the other records."""
    by_k: dict[int, list[int]] = {}
    rest: list[int] = []
    for i, record in enumerate(records):
        values = record.greedy.top_logprobs
        if type(values) is np.ndarray and values.ndim == 2 and values.shape[1] >= 2:
            by_k.setdefault(values.shape[1], []).append(i)
        else:
            rest.append(i)
    groups = []
    for idx in by_k.values():
        seg = segments([records[i].greedy.top_logprobs for i in idx], ndim=2)
        rest += [idx[j] for j in seg.rest]
        seg.where, seg.rest = [idx[j] for j in seg.where], []
        if seg.where:
            groups.append((seg, -np.sort(-seg.values, axis=1)))
    return groups, sorted(rest)


def _top_block(records: Sequence[Record], reference: Callable[[Record], float],
               value: Callable[[np.ndarray, Segments], np.ndarray]) -> list[float | CannotScore]:
    groups, rest = _top_groups(records)
    out: list[float | CannotScore] = [math.nan] * len(records)
    for seg, top in groups:
        for i, v in zip(seg.where, value(top, seg).tolist(), strict=True):
            out[i] = v
    for i in rest:
        out[i] = reference_value(reference, records[i])
    return out


def _mean(values: np.ndarray, seg: Segments) -> np.ndarray:
    return segment_sums(values, seg) / seg.sizes  # np.mean: the sum over the count


@scorer_block("probability_margin")
def _probability_margin_block(records: Sequence[Record]) -> list[float | CannotScore]:
    def value(top: np.ndarray, seg: Segments) -> np.ndarray:
        p = np.exp(top)
        return _mean(p[:, 0] - p[:, 1], seg)

    return _top_block(records, probability_margin, value)


@scorer_block("mean_topk_negentropy")
def _mean_topk_negentropy_block(records: Sequence[Record]) -> list[float | CannotScore]:
    return _top_block(records, mean_topk_negentropy,
                      lambda top, seg: _mean(_negentropy(top), seg))


@scorer_block("min_topk_negentropy")
def _min_topk_negentropy_block(records: Sequence[Record]) -> list[float | CannotScore]:
    return _top_block(records, min_topk_negentropy,
                      lambda top, seg: segment_extreme(_negentropy(top), seg, np.minimum))


@scorer_block("boostedprob")
def _boostedprob_block(records: Sequence[Record]) -> list[float | CannotScore]:
    """:func:`boostedprob` of many records: the rule on the top-k of every step at once
    where a record has no decoded column, finite log-probabilities at most 0 and one
    chosen log-probability per step; the scorer itself for any other record."""
    fast: list[int] = []
    rest: list[int] = []
    for i, record in enumerate(records):
        gen = record.greedy
        chosen, top = gen.token_logprobs, gen.top_logprobs
        if (gen.token_boosted_prob is None and type(chosen) is np.ndarray and chosen.ndim == 1
                and chosen.dtype.kind == "f" and type(top) is np.ndarray and top.ndim == 2
                and top.shape[0] == chosen.size):
            fast.append(i)
        else:
            rest.append(i)
    groups, others = _top_groups([records[i] for i in fast])
    rest += [fast[j] for j in others]
    out: list[float | CannotScore] = [math.nan] * len(records)
    for seg, top in groups:
        where = [fast[j] for j in seg.where]
        chosen = np.concatenate([records[i].greedy.token_logprobs for i in where]
                                ).astype(np.float64)
        # the per-record path's fast case: every listed value <= 0, no NaN chosen (here:
        # finite, -inf left to the scorer)
        usable = np.logical_and.reduceat((top <= 0.0).all(axis=1) & np.isfinite(chosen),
                                         seg.starts)
        # the steps whose cut may lie past the list: math.exp decides as per step, where
        # numpy's exp (within an ulp or two of it) is too near epsilon to tell
        p_last = np.exp(top[:, -1])
        beyond_mask = p_last > BOOSTEDPROB_EPSILON * (1 + 1e-9)
        for t in np.flatnonzero(np.abs(p_last - BOOSTEDPROB_EPSILON)
                                <= BOOSTEDPROB_EPSILON * 1e-9).tolist():
            beyond_mask[t] = math.exp(float(top[t, -1])) > BOOSTEDPROB_EPSILON
        steps = np.flatnonzero(beyond_mask)
        owners = np.repeat(np.arange(len(seg.sizes)), seg.sizes)[steps]  # each step's record
        refused: dict[int, CannotScore] = {}
        # _refusal of such steps at once: each record's first one, then the others of the
        # records it did not refuse (most answers stop at their first, as per step)
        first = np.ones(len(steps), dtype=bool)
        first[1:] = owners[1:] != owners[:-1]
        alive = usable[owners]
        for round_ in (first & alive, ~first & alive):
            if refused:
                round_ &= ~np.isin(owners, list(refused))
            picked = np.flatnonzero(round_)
            told, last = _told(top[steps[picked]])
            for j, p in zip(owners[picked][~told].tolist(), last[~told].tolist(), strict=True):
                if j not in refused:  # a record's first such step refuses it
                    refused[j] = _without_column(_beyond_list(top.shape[1], p))
        for j, why in refused.items():
            out[where[j]] = why
        rest += [where[j] for j in np.flatnonzero(~usable).tolist()]
        keep = usable.copy()
        keep[list(refused)] = False
        if not keep.any():
            continue
        full = beyond_mask  # every listed token is dominant there
        rows = np.repeat(keep, seg.sizes)
        sizes = seg.sizes[keep]
        kept = Segments([where[j] for j in np.flatnonzero(keep).tolist()], [], np.zeros(0),
                        np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.intp), sizes)
        steps = _boosted_rows(chosen[rows], top[rows], full[rows], jump=BOOSTEDPROB_JUMP,
                              epsilon=BOOSTEDPROB_EPSILON)
        for i, v in zip(kept.where, _mean(steps, kept).tolist(), strict=True):
            out[i] = v
    for i in rest:
        out[i] = reference_value(boostedprob, records[i])
    return out


# ---------------------------------------------------------------------------
# claim-conditioned probability over token alternatives


def _word(piece: str) -> str:
    return piece.strip(string.punctuation + " \n")


# The docstring's first line is the scorer's summary (`confide scorers`, the README), read
# whole: it stays one line, hence the noqa at the docstring's end.
@scorer("ccp", needs={Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS}, cost=Cost.FEATURES,
        readable=as_is("the product of claim-conditioned token probabilities"))
def ccp(record: Record, ctx: ScoringContext) -> float:
    r"""Claim-conditioned probability: each token's probability among alternatives that change the meaning.

    .. math::
        \mathrm{CCP}_t = \frac{p_t(y_t) + \sum_{v \in A_t,\ v \equiv y_t} p_t(v)}
                              {p_t(y_t) + \sum_{v \in A_t} p_t(v)}, \qquad
        c = \prod_{t=1}^{T} \mathrm{CCP}_t

    :math:`A_t` are the stored top-k alternatives at step :math:`t` other
    than the chosen token :math:`y_t`, and :math:`v \equiv y_t` is decided by
    the run's equivalence judge on the two token texts stripped of spaces
    and punctuation (as LM-Polygraph strips them); two tokens that both strip
    to nothing (``"."`` and ``".\n"``) carry no word and are equivalent, so
    punctuation choices never lower confidence. Alternatives that merely
    rephrase the chosen token do not lower confidence; those that change the
    answer do. In [0, 1].

    >>> from confide.core.records import Item
    >>> gen = Generation("Paris.", token_ids=[1, 2], tokens=["Paris", "."],
    ...                  token_logprobs=np.log([0.9, 0.5]),
    ...                  top_logprobs=np.log([[0.9, 0.05], [0.5, 0.4]]),
    ...                  top_tokens=[["Paris", "Lyon"], [".", ".\n"]])
    >>> round(ccp(Record(Item("q", "Capital of France?"), gen), ScoringContext()), 3)
    0.947

    Differs from LM-Polygraph's ``CCP`` in the judge only: Polygraph asks an
    NLI model and drops *neutral* alternatives from both sums; a confide judge
    says equivalent or not, so every non-equivalent alternative counts as a
    contradiction. With an ``nli`` judge of the same model the two agree
    wherever the NLI model never answers neutral. Fed this judge's decisions
    on the same top-10 alternatives (:func:`token_alternatives`), LM-Polygraph
    0.7's ``CCP`` agrees to 3.5e-18 (``benchmarks/results/parity.md``).

    References: [1] Fadeeva et al., 2024, "Fact-Checking the Output of Large
    Language Models via Token-Level Uncertainty Quantification", Findings of
    ACL (CCP).
    """  # noqa: E501
    gen = record.greedy
    top = np.asarray(gen.top_logprobs, dtype=np.float64) if gen.top_logprobs is not None else None
    if top is None or gen.top_tokens is None:
        raise CannotScore("the backend gave no top-k alternatives")
    if gen.token_logprobs is None:
        raise CannotScore("the backend gave no token logprobs")
    chosen = np.asarray(gen.token_logprobs, dtype=np.float64)
    if chosen.size == 0:
        raise CannotScore("empty answer: no tokens to score")
    if len(gen.tokens) != chosen.size or len(gen.top_tokens) != chosen.size \
            or top.shape[0] != chosen.size:
        raise CannotScore("token texts, logprobs and alternatives differ in length")
    log_ccp = 0.0
    for lp, alternatives in token_alternatives(record, ctx):
        same = [lp] + [alt_lp for _, alt_lp, equivalent in alternatives if equivalent]
        other = [alt_lp for _, alt_lp, equivalent in alternatives if not equivalent]
        entail = float(np.logaddexp.reduce(same))
        total = float(np.logaddexp.reduce(same + other))
        if total == -math.inf:
            return 0.0  # every listed token has probability 0: no support at all
        log_ccp += entail - total
    return math.exp(log_ccp)


def token_alternatives(record: Record, ctx: ScoringContext
                       ) -> list[tuple[float, list[tuple[str, float, bool]]]]:
    """Per greedy token: its log p and each other stored alternative's (text, log p,
    whether the judge finds it equivalent), the decisions :func:`ccp` sums over.

    The chosen token is dropped once from its own top-k list; tokens are compared as
    words stripped of spaces and punctuation, and two empty words are equivalent.
    Lengths are checked by :func:`ccp` before it calls this.
    """
    gen = record.greedy
    if gen.token_logprobs is None or gen.top_tokens is None or gen.top_logprobs is None:
        raise CannotScore("the backend gave no top-k alternatives or token logprobs")
    judge = judge_of(ctx)
    out = []
    for token, lp, alt_tokens, alt_lps in zip(gen.tokens, gen.token_logprobs, gen.top_tokens,
                                              gen.top_logprobs, strict=True):
        word = _word(token)
        alternatives = []
        skipped_self = False
        for alt, alt_lp in zip(alt_tokens, alt_lps):
            if not skipped_self and alt == token and abs(float(alt_lp) - float(lp)) < 1e-4:
                skipped_self = True  # the chosen token itself, listed among the top-k
                continue
            alt_word = _word(alt)
            equivalent = (not word and not alt_word) or judge.decide(
                word, alt_word, record.item).equivalent
            alternatives.append((alt, float(alt_lp), bool(equivalent)))
        out.append((float(lp), alternatives))
    return out
