r"""Choosing one answer among samples: majority vote and confidence-informed self-consistency.

A record holds :math:`k` sampled answers :math:`s_1..s_k`; an equivalence
judge (:mod:`confide.equivalence.judges`, the run's default for its grader unless one is
named) groups them into clusters of equal meaning, with labels
:math:`a_i`.

* **Majority vote** (self-consistency, Wang et al., 2023):
  :math:`\hat a = \arg\max_a \sum_i \mathbb 1(a_i = a)`.
* **CISC** (confidence-informed self-consistency, Taubenfeld et al., 2025):
  each sample's confidence :math:`c_i` is normalised over the record's
  samples with a softmax at temperature :math:`T`, and the clusters compete
  on summed weight:

  .. math:: w_i = \frac{\exp(c_i / T)}{\sum_{j=1}^{k} \exp(c_j / T)}, \qquad
            \hat a = \arg\max_a \sum_i \mathbb 1(a_i = a)\, w_i

  :math:`T \to \infty` gives the majority vote, :math:`T \to 0` the single
  most confident sample. The sample confidence is CISC's *response
  probability* (Taubenfeld et al., 2025, §3 and §4: the model's probability
  of the sampled response, normalised by its length), i.e. the geometric
  mean token probability

  .. math:: c_i = \exp\Big(\frac{1}{T_i}\sum_{t=1}^{T_i} \log p_t(s_{i,t})\Big)
            \in [0, 1],

  and the softmax is taken over these probabilities, not over their
  logarithms (a softmax of log-probabilities at temperature :math:`T` would
  weight by :math:`c_i^{1/T}` instead). An empty sample is no answer:
  probability :math:`c_i = 0` (log-likelihood :math:`-\infty`, the package's
  rule, see :attr:`confide.core.records.Generation.empty`), the smallest
  confidence; and the judge puts every empty sample in a cluster of its own.
  The default temperature 0.1 is ours (the paper tunes :math:`T` per
  confidence method on held-out questions).

* **DeepConf offline** (confidence-filtered voting over reasoning traces, Fu et al.,
  2025): each sample's trace confidence :math:`c_i` (a DeepConf measure of its trace,
  :func:`confide.scorers.reasoning.trace_confidence`) ranks the samples; the top
  :math:`\eta` % are kept, :math:`K = \{i : \operatorname{rank}(c_i) \le \lceil \eta k /
  100 \rceil\}`, and vote, plainly or weighted by their confidence:

  .. math:: \hat a = \arg\max_a \sum_{i \in K} \mathbb 1(a_i = a)\, c_i

  The paper keeps :math:`\eta` = 10 % (DeepConf-low) or 90 % (DeepConf-high).

Ties go to the cluster that appears first in sample order. The chosen
answer is that cluster's first sample.

References
----------
[1] A. Taubenfeld, T. Sheffer, E. Ofek, A. Feder, A. Goldstein, Z. Gekhman,
    G. Yona (2025). Confidence Improves Self-Consistency in LLMs. Findings of
    ACL. arXiv:2502.06233.
[2] X. Wang, J. Wei, D. Schuurmans, Q. Le, E. Chi, S. Narang, A. Chowdhery,
    D. Zhou (2023). Self-Consistency Improves Chain of Thought Reasoning in
    Language Models. ICLR.
[3] Y. Fu, X. Wang, Y. Tian, J. Zhao (2025). Deep Think with Confidence.
    arXiv:2508.15260.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.decisions._runs import sampled_records
from confide.grading import grade

__all__ = ["FilteredItem", "FilteredVoteComparison", "VoteComparison", "check_labels",
           "cisc_vote", "cisc_weights", "compare_filtered_votes", "compare_votes",
           "filtered_vote", "majority_vote", "record_clusters", "reply_tokens",
           "sample_confidences", "trace_confidences"]

FloatArray = NDArray[np.float64]
VoteMethod = Literal["majority", "cisc"]


def check_labels(labels: ArrayLike) -> NDArray[np.intp]:
    """Cluster labels as a non-empty 1-D integer array; :class:`InvalidInputError` otherwise."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidInputError("must be a non-empty 1-D list of cluster labels", field="labels")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError("cluster labels must be integers", field="labels")
    return arr.astype(np.intp)


def _argmax_first(labels: NDArray[np.intp], totals: dict[int, float]) -> int:
    """The label with the largest total; ties to the label seen first in ``labels``."""
    best, best_value = int(labels[0]), -math.inf
    seen: set[int] = set()
    for lab in labels.tolist():
        if lab in seen:
            continue
        seen.add(lab)
        if totals[lab] > best_value + 1e-12:
            best, best_value = lab, totals[lab]
    return best


def majority_vote(labels: ArrayLike) -> int:
    r"""The most frequent cluster label (ties: the one appearing first).

    .. math:: \hat a = \arg\max_a \sum_{i=1}^{k} \mathbb 1(a_i = a)

    >>> majority_vote([2, 1, 1, 2, 0])
    2
    """
    arr = check_labels(labels)
    totals: dict[int, float] = {}
    for lab in arr.tolist():
        totals[lab] = totals.get(lab, 0.0) + 1.0
    return _argmax_first(arr, totals)


def cisc_weights(confidence: ArrayLike, temperature: float) -> FloatArray:
    r"""Softmax of the samples' confidences at temperature :math:`T` (CISC normalisation).

    .. math:: w_i = \exp(c_i/T) \big/ \textstyle\sum_j \exp(c_j/T)

    ``-inf`` confidences get weight 0; if all are ``-inf``, weights are uniform.

    >>> cisc_weights([0.0, 0.0, math.log(2)], 1.0).round(3).tolist()
    [0.25, 0.25, 0.5]
    """
    c = np.asarray(confidence, dtype=np.float64)
    if c.ndim != 1 or c.size == 0:
        raise InvalidInputError("must be a non-empty 1-D array", field="confidence")
    if np.isnan(c).any() or (c == np.inf).any():
        raise InvalidInputError("must not be NaN or +inf", field="confidence")
    try:
        temperature = float(temperature)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be a number, got {temperature!r}",
                                field="temperature") from exc
    if not temperature > 0:
        raise InvalidInputError(f"must be > 0, got {temperature!r}", field="temperature")
    if np.isneginf(c).all():
        return np.full(c.size, 1.0 / c.size)
    z = c / temperature
    z = z - z[np.isfinite(z)].max()
    w = np.exp(z)
    return w / w.sum()


def cisc_vote(labels: ArrayLike, confidence: ArrayLike, *, temperature: float = 0.1) -> int:
    r"""The cluster with the largest summed softmax weight (Taubenfeld et al., 2025).

    .. math:: \hat a = \arg\max_a \sum_i \mathbb 1(a_i = a)\, w_i

    >>> cisc_vote([0, 0, 1], [0.2, 0.2, 0.9], temperature=0.1)  # one confident sample wins
    1
    >>> cisc_vote([0, 0, 1], [0.2, 0.2, 0.9], temperature=100.0)  # ~ majority
    0
    """
    arr = check_labels(labels)
    w = cisc_weights(confidence, temperature)
    if w.size != arr.size:
        raise InvalidInputError(f"{arr.size} labels but {w.size} confidences",
                                field="confidence")
    totals: dict[int, float] = {}
    for lab, wi in zip(arr.tolist(), w.tolist()):
        totals[lab] = totals.get(lab, 0.0) + wi
    return _argmax_first(arr, totals)


def sample_confidences(record: Any) -> FloatArray:
    r"""Each sample's response probability, length-normalised (0 for an empty sample).

    .. math:: c_i = \exp\Big(\frac{1}{T_i}\sum_{t=1}^{T_i} \log p_t(s_{i,t})\Big)

    CISC's "response probability" (Taubenfeld et al., 2025).
    """
    out = np.empty(len(record.samples))
    for i, s in enumerate(record.samples):
        if s.token_logprobs is None:
            raise InvalidInputError(f"item {record.item.id!r}: the samples have no token "
                                    "log-probabilities (the backend did not give them)",
                                    field="samples")
        lp = np.asarray(s.token_logprobs, dtype=np.float64)
        out[i] = 0.0 if s.empty or lp.size == 0 else float(np.exp(lp.mean()))
    return out


def record_clusters(record: Any, judge: Any) -> NDArray[np.intp]:
    """Cluster labels of the record's samples (index 0 = first sample) by ``judge``."""
    return np.asarray(judge.clusters([s.text for s in record.samples], record.item),
                      dtype=np.intp)


@dataclass
class VoteComparison:
    """Accuracy of the greedy answer, the majority vote and CISC on one run."""

    n: int
    k: int
    temperature: float
    judge: str
    grader: str
    greedy: float
    majority: float
    cisc: float
    n_skipped: int = 0  # records without samples or grades
    cisc_by_temperature: dict[float, float] = field(default_factory=dict)
    changed: int = 0  # records where CISC and majority pick different clusters


def compare_votes(run: Any, *, temperature: float = 0.1, k: int | None = None,
                  judge: str | None = None, grader: str | None = None,
                  temperatures: tuple[float, ...] = ()) -> VoteComparison:
    """Grade the majority vote and the CISC vote over each record's first ``k`` samples.

    ``run``: a :class:`~confide.api.Run` or its directory, with samples (run
    with ``n_samples``). ``judge``: the equivalence judge forming the clusters
    (default: the one matching the run's grader, see
    :func:`confide.equivalence.judges.default_judge`). ``temperatures``: extra CISC
    temperatures to report in ``cisc_by_temperature``. The chosen answer is
    graded with the run's grader.
    """
    run, grader, judge_name, equiv, usable = sampled_records(run, grader, judge)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InvalidInputError(f"must be a positive integer, got {k!r}", field="k")
    temps = tuple(dict.fromkeys((temperature, *temperatures)))
    greedy, majority, changed = [], [], 0
    cisc: dict[float, list[float]] = {t: [] for t in temps}
    k_used = 0
    for record in usable:
        samples = record.samples[:k] if k else record.samples
        k_used = max(k_used, len(samples))
        view = _Subset(record, samples)
        labels = record_clusters(view, equiv)
        conf = sample_confidences(view)
        first = {int(lab): i for i, lab in reversed(list(enumerate(labels.tolist())))}

        def graded(label: int, samples: list[Any] = samples,
                   first: dict[int, int] = first, record: Any = record) -> float:
            return grade(samples[first[label]].text, record.item, grader)

        greedy.append(record.grades[grader])
        m = majority_vote(labels)
        majority.append(graded(m))
        for t in temps:
            c = cisc_vote(labels, conf, temperature=t)
            cisc[t].append(graded(c))
            if t == temperature and c != m:
                changed += 1
    return VoteComparison(
        n=len(usable), k=k_used, temperature=temperature, judge=judge_name, grader=grader,
        greedy=float(np.mean(greedy)), majority=float(np.mean(majority)),
        cisc=float(np.mean(cisc[temperature])), n_skipped=len(run.records) - len(usable),
        cisc_by_temperature={t: float(np.mean(v)) for t, v in cisc.items()}, changed=changed)


@dataclass
class _Subset:
    """A record seen with only some of its samples."""

    record: Any
    samples: list[Any]

    @property
    def item(self) -> Any:
        return self.record.item


# ------------------------------------------------------------------------- DeepConf offline


def filtered_vote(labels: ArrayLike, confidence: ArrayLike, *, eta: float = 90.0,
                  weighted: bool = True) -> tuple[int, NDArray[np.intp]]:
    r"""DeepConf's offline vote: keep the top ``eta`` % of samples by confidence, then vote.

    .. math:: K = \text{the } \lceil \eta k / 100 \rceil \text{ most confident samples},
              \qquad \hat a = \arg\max_a \sum_{i \in K} \mathbb 1(a_i = a)\, w_i

    with :math:`w_i = c_i` (``weighted``, the paper's confidence-weighted vote) or 1
    (majority among the kept). A NaN confidence (a sample whose trace has none) is never
    kept; ties in confidence keep the earlier sample.

    Returns the chosen label and the indices of the kept samples (sample order).
    Raises :class:`InvalidInputError` when no sample has a confidence, ``eta`` is not in
    (0, 100], or a weighted vote meets a negative confidence.

    >>> filtered_vote([0, 0, 1, 1, 1], [2.0, 1.9, 0.5, 0.4, 0.3], eta=40)
    (0, array([0, 1]))
    >>> int(filtered_vote([0, 0, 1, 1, 1], [2.0, 1.9, 0.5, 0.4, 0.3], eta=100)[0])
    0
    >>> int(filtered_vote([0, 0, 1, 1, 1], [2.0, 1.9, 0.5, 0.4, 0.3], eta=100,
    ...                   weighted=False)[0])
    1
    """
    arr = check_labels(labels)
    c = np.asarray(confidence, dtype=np.float64)
    if c.shape != arr.shape:
        raise InvalidInputError(f"{arr.size} labels but {c.size} confidences",
                                field="confidence")
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not 0 < eta <= 100:
        raise InvalidInputError(f"must be a percentage in (0, 100], got {eta!r}", field="eta")
    ranked = [i for i in np.argsort(-c, kind="stable").tolist() if not math.isnan(c[i])]
    if not ranked:
        raise InvalidInputError("no sample has a confidence to rank it by", field="confidence")
    if weighted and (c[ranked] < 0).any():
        raise InvalidInputError("a confidence-weighted vote needs confidences >= 0",
                                field="confidence")
    keep = np.sort(np.asarray(ranked[:math.ceil(eta * arr.size / 100 - 1e-9)], dtype=np.intp))
    if keep.size == 0:  # fewer than one sample's share: the single most confident
        keep = np.asarray(ranked[:1], dtype=np.intp)
    totals: dict[int, float] = {}
    for i in keep.tolist():
        totals[int(arr[i])] = totals.get(int(arr[i]), 0.0) + (float(c[i]) if weighted else 1.0)
    return _argmax_first(arr[keep], totals), keep


def trace_confidences(record: Any, measure: str = "bottom10", *, window: int | None = None
                      ) -> FloatArray:
    """Each sample's DeepConf trace confidence (NaN for a sample without a usable trace or
    without a final answer): :func:`confide.scorers.reasoning.trace_confidence`."""
    from confide.core.errors import CannotScore
    from confide.scorers.reasoning import DEEPCONF_WINDOW, trace_confidence

    out = np.full(len(record.samples), math.nan)
    for i, s in enumerate(record.samples):
        try:
            out[i] = trace_confidence(s, measure, window=window or DEEPCONF_WINDOW)
        except CannotScore:
            continue
    return out


def reply_tokens(gen: Any) -> int:
    """Tokens a reply cost: its final answer's and its trace's."""
    return int(gen.n_tokens) + (0 if gen.trace is None else int(gen.trace.n_tokens))


@dataclass
class FilteredItem:
    """One record under DeepConf's offline vote against the plain majority vote."""

    id: str
    majority: float      # the majority vote's grade over every sample
    filtered: float      # the filtered vote's grade
    kept: int            # samples kept (of ``k``)
    k: int
    tokens_kept: int     # trace + answer tokens of the kept samples
    tokens_all: int      # of every sample


@dataclass
class FilteredVoteComparison:
    """Accuracy of DeepConf's offline (filtered) vote against majority voting, per item and
    overall, with the tokens of the kept traces. Offline filtering generates every trace:
    ``tokens_kept`` is what the kept ones cost, not tokens saved."""

    n: int
    k: int
    eta: float
    measure: str
    weighted: bool
    judge: str
    grader: str
    majority: float
    filtered: float
    tokens_kept: int
    tokens_all: int
    items: list[FilteredItem] = field(default_factory=list)
    n_skipped: int = 0   # graded records with samples but no sample with a trace confidence
    changed: int = 0     # records where the two votes pick different clusters


def compare_filtered_votes(run: Any, *, eta: float = 90.0, measure: str = "bottom10",
                           weighted: bool = True, window: int | None = None,
                           k: int | None = None, judge: str | None = None,
                           grader: str | None = None) -> FilteredVoteComparison:
    """Grade DeepConf's offline vote and the majority vote over each record's sampled traces.

    ``run``: a :class:`~confide.api.Run` or its directory whose samples are reasoning
    replies (a trace with top-k log-probabilities and a final answer). ``measure``: the
    trace confidence that ranks the samples (``mean``, ``lowest_group``, ``bottom10``,
    ``tail``; ``window`` its group size, default 2048). ``eta``: the percentage kept;
    ``weighted``: vote weighted by the confidence (else majority among the kept). The
    majority vote counts every sample's final answer; both are graded with the run's
    grader. A record none of whose samples has a trace confidence is skipped and counted.
    """
    from confide.scorers.reasoning import TRACE_MEASURES

    if measure not in TRACE_MEASURES:
        raise InvalidInputError(f"must be one of {', '.join(TRACE_MEASURES)}, got {measure!r}",
                                field="measure")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InvalidInputError(f"must be a positive integer, got {k!r}", field="k")
    run, grader, judge_name, equiv, usable = sampled_records(run, grader, judge)
    items: list[FilteredItem] = []
    changed, k_used, skipped = 0, 0, 0
    for record in usable:
        samples = record.samples[:k] if k else record.samples
        view = _Subset(record, samples)
        conf = trace_confidences(view, measure, window=window)
        if np.isnan(conf).all():
            skipped += 1
            continue
        k_used = max(k_used, len(samples))
        labels = record_clusters(view, equiv)
        first = {int(lab): i for i, lab in reversed(list(enumerate(labels.tolist())))}
        m = majority_vote(labels)
        f, keep = filtered_vote(labels, conf, eta=eta, weighted=weighted)
        changed += int(f != m)
        items.append(FilteredItem(
            id=record.item.id,
            majority=grade(samples[first[m]].text, record.item, grader),
            filtered=grade(samples[first[f]].text, record.item, grader),
            kept=int(keep.size), k=len(samples),
            tokens_kept=sum(reply_tokens(samples[i]) for i in keep.tolist()),
            tokens_all=sum(reply_tokens(s) for s in samples)))
    if not items:
        raise InvalidInputError("no sample of any graded record has a reasoning trace with "
                                "top-k log-probabilities and a final answer",
                                file=str(run.path), field="samples")
    return FilteredVoteComparison(
        n=len(items), k=k_used, eta=float(eta), measure=measure, weighted=weighted,
        judge=judge_name, grader=grader,
        majority=float(np.mean([it.majority for it in items])),
        filtered=float(np.mean([it.filtered for it in items])),
        tokens_kept=sum(it.tokens_kept for it in items),
        tokens_all=sum(it.tokens_all for it in items), items=items,
        n_skipped=skipped + len(run.records) - len(usable), changed=changed)
