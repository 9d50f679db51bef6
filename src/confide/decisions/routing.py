r"""Cascade routing: answer with a small model, escalate to a large one when it is unsure.

For items :math:`i = 1..n` answered by both models, with the small model's
confidence :math:`c_i`, correctness :math:`y^S_i, y^L_i` and costs
:math:`t^S_i, t^L_i` (generated tokens, or seconds), the cascade with
threshold :math:`\tau` keeps the small answer when :math:`c_i \ge \tau` and
escalates otherwise:

.. math::

    \mathrm{Acc}(\tau) = \frac{1}{n}\sum_i \big[\mathbb 1(c_i \ge \tau)\, y^S_i
                         + \mathbb 1(c_i < \tau)\, y^L_i\big], \qquad
    \mathrm{Cost}(\tau) = \frac{1}{n}\sum_i \big[t^S_i + \mathbb 1(c_i < \tau)\, t^L_i\big]

— the small model always runs (its confidence decides), the large one only on
escalated items. :func:`cascade` evaluates every distinct threshold (from
"never escalate" to "always escalate") on two stored runs of the same task,
matched by item id, so nothing is regenerated; :meth:`CascadeCurve.choose`
picks the cheapest threshold reaching a target accuracy, or the most accurate
within a budget. The choice is made on the same items it is measured on
(in-sample); check it on fresh items before relying on it. Items whose small
confidence is NaN are always escalated.

References
----------
[1] L. Chen, M. Zaharia, J. Zou (2023). FrugalGPT: How to Use Large Language
    Models While Reducing Cost and Improving Performance. arXiv:2305.05176.
[2] N. Varshney, C. Baral (2022). Model Cascading: Towards Jointly Improving
    Efficiency and Accuracy of NLP Systems. EMNLP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.core.options import DEFAULT_TASK
from confide.decisions._runs import as_run
from confide.metrics.core import as_1d
from confide.pipeline.answering import DEFAULT_SCORERS
from confide.runs.stored import generate_and_evaluate

__all__ = ["CascadeCurve", "CascadePoint", "cascade", "cascade_curve", "route_models"]

FloatArray = NDArray[np.float64]
CostKind = Literal["tokens", "seconds"]


@dataclass(frozen=True)
class CascadePoint:
    """One operating point: escalate when the small confidence is below ``threshold``."""

    threshold: float
    escalated: float  # share of items sent to the large model
    accuracy: float
    tokens: float  # mean generated tokens per item (small + escalated large)
    seconds: float  # mean generation seconds per item


@dataclass
class CascadeCurve:
    """Accuracy and cost of the cascade at every distinct threshold (ascending).

    ``thresholds[0]`` escalates nothing (only NaN-confidence items), the last
    (``inf``) escalates everything.
    """

    thresholds: FloatArray
    escalated: FloatArray
    accuracy: FloatArray
    tokens: FloatArray
    seconds: FloatArray
    n: int
    small_accuracy: float
    large_accuracy: float
    oracle_accuracy: float  # escalate exactly the items the small model gets wrong
    small: str = "small"
    large: str = "large"
    scorer: str = "confidence"
    grader: str | None = None
    n_unmatched: int = 0

    def __len__(self) -> int:
        return int(self.thresholds.size)

    def point(self, j: int) -> CascadePoint:
        return CascadePoint(float(self.thresholds[j]), float(self.escalated[j]),
                            float(self.accuracy[j]), float(self.tokens[j]),
                            float(self.seconds[j]))

    def points(self) -> list[CascadePoint]:
        return [self.point(j) for j in range(len(self))]

    def choose(self, *, target_accuracy: float | None = None, budget: float | None = None,
               cost: CostKind = "tokens") -> CascadePoint:
        """The cheapest point reaching ``target_accuracy``, or the most accurate within ``budget``.

        ``budget`` is in mean ``cost`` per item (tokens or seconds). Ties go
        to the cheaper point, then to the lower threshold (fewer escalations).

        Raises :class:`~confide.core.errors.InvalidInputError` when neither or both
        are given, or when no threshold meets the target or the budget.
        """
        if (target_accuracy is None) == (budget is None):
            raise InvalidInputError("give exactly one of target_accuracy and budget",
                                    field="target_accuracy")
        if cost not in ("tokens", "seconds"):
            raise InvalidInputError(f"must be 'tokens' or 'seconds', got {cost!r}", field="cost")
        spend = self.tokens if cost == "tokens" else self.seconds
        if target_accuracy is not None:
            ok = self.accuracy >= float(target_accuracy) - 1e-12
            if not ok.any():
                raise InvalidInputError(
                    f"no threshold reaches accuracy {target_accuracy:g}; the best is "
                    f"{self.accuracy.max():.3f}", field="target_accuracy")
            candidates = np.flatnonzero(ok)
            j = candidates[np.lexsort((candidates, spend[candidates]))[0]]
        else:
            ok = spend <= float(budget) + 1e-12  # type: ignore[arg-type]
            if not ok.any():
                raise InvalidInputError(
                    f"no threshold fits a budget of {budget:g} {cost} per item; the "
                    f"cheapest costs {spend.min():.3g}", field="budget")
            candidates = np.flatnonzero(ok)
            j = candidates[np.lexsort((candidates, spend[candidates],
                                       -self.accuracy[candidates]))[0]]
        return self.point(int(j))


def cascade_curve(small_confidence: ArrayLike, small_correct: ArrayLike,
                  large_correct: ArrayLike, *, small_tokens: ArrayLike | None = None,
                  large_tokens: ArrayLike | None = None, small_seconds: ArrayLike | None = None,
                  large_seconds: ArrayLike | None = None) -> CascadeCurve:
    r"""Accuracy and mean cost of the cascade at every distinct threshold (module formula).

    Parameters
    ----------
    small_confidence : array of shape (n,)
        The small model's confidence; NaN always escalates.
    small_correct, large_correct : arrays of shape (n,), in [0, 1]
    small_tokens, large_tokens, small_seconds, large_seconds : arrays of shape (n,), optional
        Per-item costs (default 0).

    Returns
    -------
    CascadeCurve
        Thresholds ascending: the distinct confidences, then ``inf``.

    Examples
    --------
    >>> cur = cascade_curve([0.9, 0.2, 0.6], [1, 0, 0], [1, 1, 1], small_tokens=[1, 1, 1],
    ...                     large_tokens=[10, 10, 10])
    >>> cur.thresholds.tolist(), cur.accuracy.round(3).tolist(), cur.tokens.round(3).tolist()
    ([0.2, 0.6, 0.9, inf], [0.333, 0.667, 1.0, 1.0], [1.0, 4.333, 7.667, 11.0])
    """
    conf = as_1d(small_confidence, "small_confidence")
    n = conf.size
    if n == 0:
        raise InvalidInputError("no items to route", field="small_confidence")

    def column(values: ArrayLike | None, name: str, unit: bool) -> FloatArray:
        if values is None:
            return np.zeros(n)
        arr = as_1d(values, name)
        if arr.size != n:
            raise InvalidInputError(f"has {arr.size} values, expected {n}", field=name)
        if np.isnan(arr).any() or (arr < 0).any() or (unit and (arr > 1).any()):
            raise InvalidInputError("must be " + ("in [0, 1]" if unit else "non-negative")
                                    + " and not NaN", field=name)
        return arr

    ys, yl = column(small_correct, "small_correct", True), column(large_correct,
                                                                   "large_correct", True)
    ts, tl = column(small_tokens, "small_tokens", False), column(large_tokens,
                                                                  "large_tokens", False)
    ss, sl = column(small_seconds, "small_seconds", False), column(large_seconds,
                                                                    "large_seconds", False)
    c = np.where(np.isnan(conf), -np.inf, conf)
    finite = c[c > -np.inf]
    thresholds: FloatArray = np.r_[np.unique(finite) if finite.size else np.empty(0), np.inf]
    # escalated at tau: c < tau. Sort by c and count with searchsorted.
    order = np.argsort(c, kind="stable")
    k = np.searchsorted(c[order], thresholds, side="left")  # items escalated at each tau

    def gain(escalated_value: FloatArray, kept_value: FloatArray) -> FloatArray:
        cum = np.r_[0.0, np.cumsum((escalated_value - kept_value)[order])]
        return cum[k]

    accuracy = (ys.sum() + gain(yl, ys)) / n
    tokens = (ts.sum() + gain(tl, np.zeros(n))) / n
    seconds = (ss.sum() + gain(sl, np.zeros(n))) / n
    oracle = float(np.maximum(ys, yl).mean())
    return CascadeCurve(thresholds=thresholds, escalated=k / n, accuracy=accuracy,
                        tokens=tokens, seconds=seconds, n=n, small_accuracy=float(ys.mean()),
                        large_accuracy=float(yl.mean()), oracle_accuracy=oracle)


def _generated_tokens(record: Any) -> int:
    return int(record.greedy.n_tokens + sum(s.n_tokens for s in record.samples))


def cascade(small_run: Any, large_run: Any, *, scorer: str = "msp",
            grader: str | None = None) -> CascadeCurve:
    """The cascade curve of two stored runs of the same task, items matched by id.

    ``small_run``/``large_run`` are :class:`~confide.api.Run` objects or run
    directories. Costs are each record's generated tokens (greedy and samples:
    what its confidence needed) and its stored generation seconds. Only items
    graded in both runs are used; the others are counted in ``n_unmatched``.
    """
    small, large = as_run(small_run), as_run(large_run)
    grader = grader or small.grader
    s_records = {r.item.id: r for r in small.records if grader in r.grades}
    l_records = {r.item.id: r for r in large.records if grader in r.grades}
    if not any(scorer in r.scores for r in s_records.values()):
        known = sorted({n for r in small.records for n in r.scores})
        raise InvalidInputError(f"the small run has no scorer {scorer!r}; it has: "
                                f"{', '.join(known) or 'none'}", file=str(small.path),
                                field="scorer")
    ids = [i for i in s_records if i in l_records]
    if not ids:
        raise InvalidInputError(f"no item is graded by {grader!r} in both runs (item ids must "
                                f"match: same task and data)", file=str(large.path),
                                field="item.id")
    sr, lr = [s_records[i] for i in ids], [l_records[i] for i in ids]
    curve = cascade_curve(
        [r.scores.get(scorer, math.nan) for r in sr], [r.grades[grader] for r in sr],
        [r.grades[grader] for r in lr],
        small_tokens=[_generated_tokens(r) for r in sr],
        large_tokens=[_generated_tokens(r) for r in lr],
        small_seconds=[r.seconds for r in sr], large_seconds=[r.seconds for r in lr])
    curve.small = str(small.config.get("model", small.path))
    curve.large = str(large.config.get("model", large.path))
    curve.scorer, curve.grader = scorer, grader
    curve.n_unmatched = len(set(s_records) ^ set(l_records))
    return curve


def route_models(small: Any, large: Any, *, task: str = DEFAULT_TASK, scorer: str = "msp",
                 out: str | Path | None = None, **settings: Any) -> CascadeCurve:
    """Run (or resume) ``small`` and ``large`` on the same task via
    :func:`confide.generate_and_evaluate`, then build their cascade curve.

    ``small``/``large``: model names (``smollm2``, ``gemma3-270m``, a path or a
    hub id) or loaded backends (:func:`confide.api.load_model`).

    ``out``: a folder holding the two runs (``<out>/small``, ``<out>/large``);
    default: each run's default directory. ``settings`` go to both runs
    (``limit``, ``max_new_tokens``, ``seed``, ...); the small run also computes
    ``scorer``.
    """
    scorers = tuple(settings.pop("scorers", DEFAULT_SCORERS))
    if scorer not in scorers:
        scorers = (*scorers, scorer)
    base = Path(out) if out is not None else None
    small_run = generate_and_evaluate(small, task=task, scorers=scorers,
                                      out=base / "small" if base else None, **settings)
    large_run = generate_and_evaluate(large, task=task, scorers=scorers,
                                      out=base / "large" if base else None, **settings)
    return cascade(small_run, large_run, scorer=scorer)
