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

__all__ = ["VoteComparison", "check_labels", "cisc_vote", "cisc_weights", "compare_votes",
           "majority_vote", "record_clusters", "sample_confidences"]

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
