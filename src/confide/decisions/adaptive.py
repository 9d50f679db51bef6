r"""Adaptive sampling: draw samples in rounds and stop once the leading answer is decisive.

Stopping rule (the Beta criterion of Adaptive-Consistency, Aggarwal et al.,
2023). After each round, let :math:`v_1 \ge v_2` be the vote counts of the
two largest clusters among the samples drawn so far. Under a uniform prior,
the share :math:`\theta = p_1 / (p_1 + p_2)` of the leader among the two has
posterior :math:`\mathrm{Beta}(v_1 + 1, v_2 + 1)`; stop when the leader is
the true majority with posterior probability at least :math:`C`:

.. math:: P(\theta > \tfrac12 \mid v_1, v_2) = 1 - I_{1/2}(v_1 + 1,\, v_2 + 1) \ge C

(:math:`I` the regularised incomplete beta function), or when the budget of
``max_samples`` is spent. The answer is then the majority vote over the
samples drawn. With one cluster only, :math:`v_2 = 0` and the rule stops
after :math:`\lceil \log_2(1/(1-C)) \rceil - 1` unanimous samples
(4 for :math:`C = 0.95`).

:func:`replay_adaptive` measures the rule on a stored run without a model:
it replays each record's stored samples in their stored order, as if they
were drawn in rounds, and compares the samples used and the accuracy with
fixed-:math:`k` majority voting over the first :math:`k` samples.

References
----------
[1] P. Aggarwal, A. Madaan, Y. Yang, Mausam (2023). Let's Sample Step by Step:
    Adaptive-Consistency for Efficient Reasoning and Coding with LLMs. EMNLP.
    arXiv:2305.11860.
[2] C. Huang et al. (2025). Efficient Test-Time Scaling via Self-Calibration.
    arXiv:2503.00031 (confidence-based early stopping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from confide.core.errors import InvalidInputError
from confide.decisions._runs import sampled_records
from confide.decisions.voting import check_labels, majority_vote
from confide.grading import grade

__all__ = ["AdaptiveReport", "adaptive_vote", "leader_probability", "replay_adaptive"]


def leader_probability(v1: int, v2: int) -> float:
    r"""Posterior probability that the leading cluster is the true majority of the top two.

    .. math:: P(\theta > 1/2) = 1 - I_{1/2}(v_1 + 1, v_2 + 1), \quad
              \theta \sim \mathrm{Beta}(v_1 + 1, v_2 + 1)

    >>> leader_probability(1, 0), leader_probability(4, 0)
    (0.75, 0.96875)
    """
    from scipy.special import betainc

    return float(1.0 - betainc(v1 + 1, v2 + 1, 0.5))


def _top_two(counts: dict[int, int]) -> tuple[int, int]:
    values = sorted(counts.values(), reverse=True)
    return values[0], values[1] if len(values) > 1 else 0


def adaptive_vote(labels: ArrayLike, *, confidence: float = 0.95, round_size: int = 1,
                  min_samples: int = 1, max_samples: int | None = None) -> tuple[int, int]:
    """Replay cluster labels in order, in rounds of ``round_size``; stop by the Beta rule.

    Returns ``(winning label, samples used)``. Stops at the first round end
    where at least ``min_samples`` were drawn and
    :func:`leader_probability` ``>= confidence``, or after ``max_samples``
    (default: all given labels).

    >>> adaptive_vote([3, 3, 3, 3, 1, 1, 1], confidence=0.95)
    (3, 4)
    >>> adaptive_vote([1, 2, 1, 2], confidence=0.95)   # never decisive: all four, tie -> first
    (1, 4)
    """
    arr = check_labels(labels)
    if not 0 < confidence < 1:
        raise InvalidInputError(f"must lie in (0, 1), got {confidence!r}", field="confidence")
    for name, value in (("round_size", round_size), ("min_samples", min_samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"must be a positive integer, got {value!r}", field=name)
    budget = arr.size if max_samples is None else min(int(max_samples), arr.size)
    if budget < 1:
        raise InvalidInputError(f"must be >= 1, got {max_samples!r}", field="max_samples")
    counts: dict[int, int] = {}
    used = 0
    while used < budget:
        for lab in arr[used:min(used + round_size, budget)].tolist():
            counts[lab] = counts.get(lab, 0) + 1
        used = min(used + round_size, budget)
        if used >= min_samples and leader_probability(*_top_two(counts)) >= confidence:
            break
    return majority_vote(arr[:used]), used


@dataclass
class AdaptiveReport:
    """Adaptive against fixed-k majority voting on a run's stored samples.

    ``fixed_accuracy[k]``: majority vote over the first ``k`` samples.
    ``adaptive``: per confidence level ``C``, ``(accuracy, mean samples)``.
    ``saved[C]``: samples saved per item at equal accuracy: ``k* - mean
    samples``, with ``k*`` the smallest fixed ``k`` whose accuracy is at least
    the adaptive accuracy (NaN if no fixed ``k`` reaches it).
    """

    n: int
    max_k: int
    judge: str
    grader: str
    round_size: int
    fixed_accuracy: dict[int, float]
    adaptive: dict[float, tuple[float, float]]
    saved: dict[float, float] = field(default_factory=dict)
    matched_k: dict[float, int | None] = field(default_factory=dict)


def replay_adaptive(run: Any, *, levels: tuple[float, ...] = (0.8, 0.9, 0.95, 0.99),
                    round_size: int = 1, judge: str | None = None,
                    grader: str | None = None) -> AdaptiveReport:
    """Replay each record's stored samples in order: adaptive stopping versus fixed k.

    ``run``: a :class:`~confide.api.Run` or its directory, with samples. Clusters
    come from ``judge`` (default: the run's grader's judge); the chosen
    answer (the winning cluster's first sample) is graded with the run's grader.
    """
    run, grader, judge_name, equiv, usable = sampled_records(run, grader, judge)
    max_k = min(len(r.samples) for r in usable)
    fixed: dict[int, list[float]] = {k: [] for k in range(1, max_k + 1)}
    adaptive: dict[float, list[tuple[float, int]]] = {c: [] for c in levels}
    for record in usable:
        samples = record.samples[:max_k]
        labels = np.asarray(equiv.clusters([s.text for s in samples], record.item),
                            dtype=np.intp)
        first = {int(lab): i for i, lab in reversed(list(enumerate(labels.tolist())))}
        cache: dict[int, float] = {}

        def graded(label: int, samples: list[Any] = samples, first: dict[int, int] = first,
                   cache: dict[int, float] = cache, record: Any = record) -> float:
            if label not in cache:
                cache[label] = grade(samples[first[label]].text, record.item, grader)
            return cache[label]

        for k in fixed:
            fixed[k].append(graded(majority_vote(labels[:k])))
        for c in levels:
            label, used = adaptive_vote(labels, confidence=c, round_size=round_size)
            adaptive[c].append((graded(label), used))
    fixed_acc = {k: float(np.mean(v)) for k, v in fixed.items()}
    report = AdaptiveReport(n=len(usable), max_k=max_k, judge=judge_name, grader=grader,
                            round_size=round_size, fixed_accuracy=fixed_acc, adaptive={})
    for c, rows in adaptive.items():
        acc = float(np.mean([a for a, _ in rows]))
        mean_used = float(np.mean([u for _, u in rows]))
        report.adaptive[c] = (acc, mean_used)
        reach = [k for k, a in fixed_acc.items() if a >= acc - 1e-12]
        report.matched_k[c] = min(reach) if reach else None
        report.saved[c] = (min(reach) - mean_used) if reach else math.nan
    return report
