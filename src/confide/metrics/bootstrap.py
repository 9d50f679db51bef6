r"""Bootstrap intervals of a metric, and paired bootstrap differences between two scorers
or two runs on the same items."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.metrics.core import (
    METRICS,
    FloatArray,
    NanPolicy,
    UndefinedMetricWarning,
    as_1d,
    check_confidence_correct,
    check_count,
    check_fraction,
    check_nan_policy,
    logger,
)

__all__ = ["BootstrapInterval", "bootstrap_interval", "paired_bootstrap"]


class BootstrapInterval(NamedTuple):
    """Point estimate and percentile bootstrap interval."""

    point: float
    low: float
    high: float


def _resolve(metric_name_or_fn: str | Callable[..., float]) -> tuple[Callable[..., float],
                                                                    Callable[..., float], bool]:
    """Return ``(public fn, loop fn, needs_probabilities)``; the loop fn takes validated arrays."""
    if isinstance(metric_name_or_fn, str):
        spec = METRICS[metric_name_or_fn]
        return spec.fn, spec.helper, spec.needs_probabilities
    for spec in METRICS.values():
        if spec.fn is metric_name_or_fn:
            return spec.fn, spec.helper, spec.needs_probabilities
    if callable(metric_name_or_fn):
        return metric_name_or_fn, metric_name_or_fn, False
    raise InvalidInputError(f"must be a metric name or function, got {metric_name_or_fn!r}",
                            field="metric")


def _resample_indices(n: int, n_resamples: int, seed: int) -> NDArray[np.integer]:
    dtype = np.int32 if n < 2**31 else np.int64
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n), dtype=dtype)


def _resample_groups(groups: NDArray[Any], n_resamples: int, seed: int
                     ) -> list[NDArray[np.integer]]:
    """Cluster resamples: draw the groups with replacement, keep all rows of each drawn group."""
    _, inverse = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(inverse == g) for g in range(int(inverse.max()) + 1)]
    drawn = _resample_indices(len(members), n_resamples, seed)
    return [np.concatenate([members[g] for g in row]) for row in drawn]


def _resampled_values(loop_fn: Callable[..., float],
                      indices: NDArray[np.integer] | Sequence[NDArray[np.integer]],
                      pairs: Sequence[tuple[FloatArray, FloatArray]],
                      options: dict[str, Any]) -> FloatArray:
    """``loop_fn`` on each resample for each ``(confidence, correct)`` pair:
    shape (len(pairs), n_resamples)."""
    values = np.empty((len(pairs), len(indices)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for r, idx in enumerate(indices):
            for a, (conf, corr) in enumerate(pairs):
                values[a, r] = loop_fn(conf[idx], corr[idx], **options)
    return values


def _check_level(level: float) -> float:
    return check_fraction(level, "level", allow_zero=False, allow_one=False)


def bootstrap_interval(metric_name_or_fn: str | Callable[..., float], confidence: ArrayLike,
                       correct: ArrayLike, *, n_resamples: int = 1000, level: float = 0.95,
                       seed: int = 0, nan_policy: NanPolicy = "raise",
                       groups: ArrayLike | None = None, **options: Any) -> BootstrapInterval:
    r"""Point estimate and percentile bootstrap interval of one metric.

    Draw ``B = n_resamples`` resamples of the n items with replacement
    (indices drawn once, as a ``(B, n)`` array, from
    ``numpy.random.default_rng(seed)``), compute the metric on each, drop NaN
    resamples (one class only) and take

    .. math:: [\,\hat\theta^*_{(\alpha/2)},\ \hat\theta^*_{(1-\alpha/2)}\,],
              \quad \alpha = 1 - \text{level}

    Parameters
    ----------
    metric_name_or_fn : str or callable
        A registered name (``"auroc"``) or function; registered functions loop
        over their private helper, other callables are called as
        ``fn(confidence, correct, nan_policy=..., **options)`` for the point
        estimate and ``fn(confidence, correct, **options)`` per resample.
    confidence, correct : arrays of shape (n,)
    n_resamples : int >= 1, default 1000
    level : float in (0, 1), default 0.95
    seed : int, default 0
    nan_policy : {"raise", "omit"}, default "raise"
    groups : array of shape (n,), optional
        Group label of each row (any hashable values numpy can sort); resample
        whole groups (cluster bootstrap) instead of rows.
    **options
        Passed to the metric (``max_rejection=0.3``, ``n_bins=15``, …).

    Returns
    -------
    BootstrapInterval(point, low, high): a named tuple of floats. ``low`` and
    ``high`` are NaN if every resample was undefined.

    Notes
    -----
    Memory: the index array holds ``n_resamples * n`` int32 values. The
    percentile interval need not contain the point estimate for skewed metrics.

    References
    ----------
    [1] B. Efron, R. Tibshirani (1993). An Introduction to the Bootstrap. Chapman & Hall.
    [2] A. C. Davison, D. V. Hinkley (1997). Bootstrap Methods and their
        Application, §3.8 (resampling clusters). Cambridge University Press.

    Examples
    --------
    >>> iv = bootstrap_interval("accuracy", [0.9, 0.2, 0.6, 0.4], [1, 0, 1, 1], n_resamples=200)
    >>> iv.point, 0.0 <= iv.low <= iv.point <= iv.high <= 1.0
    (0.75, True)
    """
    fn, loop_fn, needs_probabilities = _resolve(metric_name_or_fn)
    n_resamples = check_count(n_resamples, "n_resamples")
    level = _check_level(level)
    point = float(fn(confidence, correct, nan_policy=nan_policy, **options))  # validates options
    group_of = None if groups is None else _check_groups(groups, confidence, correct,
                                                         nan_policy)
    conf, corr = check_confidence_correct(confidence, correct, nan_policy,
                                           probabilities=needs_probabilities)
    indices = (_resample_indices(corr.size, n_resamples, seed) if group_of is None
               else _resample_groups(group_of, n_resamples, seed))
    values = _resampled_values(loop_fn, indices, [(conf, corr)], options)[0]
    values = values[~np.isnan(values)]
    if values.size == 0:
        return BootstrapInterval(point, math.nan, math.nan)
    low, high = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return BootstrapInterval(point, float(low), float(high))


def _check_groups(groups: ArrayLike, confidence: ArrayLike, correct: ArrayLike,
                  nan_policy: str) -> NDArray[Any]:
    """Group labels aligned with the rows kept (``nan_policy="omit"`` drops NaN rows)."""
    labels = np.asarray(groups)
    conf, corr = as_1d(confidence, "confidence"), as_1d(correct, "correct")
    if labels.shape != conf.shape:
        raise InvalidInputError(f"{labels.size} group labels for {conf.size} rows",
                                field="groups")
    if nan_policy == "omit" and conf.shape == corr.shape:
        labels = labels[~(np.isnan(conf) | np.isnan(corr))]
    return labels


def paired_bootstrap(metric: str | Callable[..., float], conf_a: ArrayLike, conf_b: ArrayLike,
                     correct: ArrayLike, *, correct_b: ArrayLike | None = None,
                     n_resamples: int = 1000, seed: int = 0, level: float = 0.95,
                     nan_policy: NanPolicy = "raise", **options: Any) -> dict[str, float]:
    r"""Paired bootstrap of the difference of one metric between two scorers or two runs.

    Row ``i`` of both sides is the same item. Both are evaluated on the *same*
    resampled items, so item difficulty cancels:

    .. math:: \Delta = m(c_a, y_a) - m(c_b, y_b), \qquad
              \Delta^*_r = m(c_a[I_r], y_a[I_r]) - m(c_b[I_r], y_b[I_r])

    with :math:`y_a = y_b` = ``correct`` for two scorers of one run, and
    :math:`y_b` = ``correct_b`` for two runs (different models or settings)
    on the same items. The interval is the percentile interval of
    :math:`\Delta^*`; the two-sided p-value is
    :math:`\min\{1,\ 2\,\#\{r: \Delta^*_r \le 0\}/B\}` when
    :math:`\Delta > 0` (``>= 0`` when :math:`\Delta < 0`; 1 when
    :math:`\Delta = 0`), over the B resamples where both are defined.

    Parameters
    ----------
    metric : str or callable
        Registered name or function.
    conf_a, conf_b : arrays of shape (n,)
        Confidences of the two sides for the same items.
    correct : array of shape (n,)
        Correctness of side a (and of side b unless ``correct_b`` is given).
    correct_b : array of shape (n,), optional
        Correctness of side b, when the two sides answered separately.
    n_resamples : int >= 1, default 1000
    seed : int, default 0
    level : float in (0, 1), default 0.95
    nan_policy : {"raise", "omit"}, default "raise"
        "omit" drops an item if either side has NaN there.
    **options
        Passed to the metric.

    Returns
    -------
    dict with ``diff`` (a − b; in the metric's own direction), ``low``,
    ``high``, ``p_value`` and ``n`` (items used); NaN entries if no resample
    was defined.

    References
    ----------
    [1] B. Efron, R. Tibshirani (1993). An Introduction to the Bootstrap,
        ch. 15–16. Chapman & Hall.

    Examples
    --------
    >>> r = paired_bootstrap("auroc", [0.9, 0.2, 0.6, 0.4], [0.1, 0.8, 0.3, 0.5], [1, 0, 1, 1],
    ...                      n_resamples=200)
    >>> r["diff"], 0.0 <= r["p_value"] <= 1.0
    (1.0, True)
    >>> paired_bootstrap("accuracy", [0] * 4, [0] * 4, [1, 1, 0, 0], correct_b=[1, 0, 0, 0],
    ...                  n_resamples=50)["diff"]
    0.25
    """
    fn, loop_fn, needs_probabilities = _resolve(metric)
    n_resamples = check_count(n_resamples, "n_resamples")
    level = _check_level(level)
    check_nan_policy(nan_policy)
    a, b = as_1d(conf_a, "conf_a"), as_1d(conf_b, "conf_b")
    ya = as_1d(correct, "correct")
    yb = ya if correct_b is None else as_1d(correct_b, "correct_b")
    if not a.shape == b.shape == ya.shape == yb.shape:
        raise InvalidInputError(f"conf_a, conf_b and correct have {a.size}, {b.size} and "
                                f"{ya.size} values" + ("" if correct_b is None else
                                                       f", correct_b {yb.size}"),
                                field="conf_b")
    if nan_policy == "omit":
        keep = ~(np.isnan(a) | np.isnan(b) | np.isnan(ya) | np.isnan(yb))
        if not keep.all():
            logger.info("dropped %d of %d rows with NaN", int((~keep).sum()), keep.size)
        a, b, ya, yb = a[keep], b[keep], ya[keep], yb[keep]
    a, ya = check_confidence_correct(a, ya, probabilities=needs_probabilities)
    b, yb = check_confidence_correct(b, yb, probabilities=needs_probabilities)
    diff = float(fn(a, ya, **options)) - float(fn(b, yb, **options))
    indices = _resample_indices(ya.size, n_resamples, seed)
    values = _resampled_values(loop_fn, indices, [(a, ya), (b, yb)], options)
    deltas = values[0] - values[1]
    deltas = deltas[~np.isnan(deltas)]
    n = float(ya.size)
    if deltas.size == 0 or math.isnan(diff):
        return {"diff": diff, "low": math.nan, "high": math.nan, "p_value": math.nan, "n": n}
    low, high = np.percentile(deltas, [50 * (1 - level), 50 * (1 + level)])
    if diff > 0:
        p_value = min(1.0, 2 * float(np.mean(deltas <= 0)))
    elif diff < 0:
        p_value = min(1.0, 2 * float(np.mean(deltas >= 0)))
    else:
        p_value = 1.0
    return {"diff": diff, "low": float(low), "high": float(high), "p_value": p_value, "n": n}
