r"""The public core every metric module builds on: the registry, input validation and
the small numeric helpers that several metrics (and the audit, the evaluation and the
decisions) share.

A metric is a pure numpy function ``fn(confidence, correct, *, nan_policy="raise",
**options) -> float``. Its public function validates with
:func:`check_confidence_correct` and the ``check_*`` option validators here, then
calls its module's private maths helper, which the registry also holds
(:attr:`MetricSpec.helper`) so that the bootstrap loops can call it on already
validated arrays.

Everything here is public on purpose: other modules import these names, never a
metric module's private helpers.
"""

from __future__ import annotations

import inspect
import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.core.registry import Registry

__all__ = ["METRICS", "FloatArray", "Kind", "MetricSpec", "NanPolicy", "UndefinedMetricWarning",
           "as_1d", "ceil_count", "check_confidence_correct", "check_count", "check_fraction",
           "check_nan_policy", "equal_mass_bins", "floor_count", "has_both_classes", "metric",
           "tie_averaged", "warn_undefined"]

logger = logging.getLogger("confide.metrics")

NanPolicy = Literal["raise", "omit"]
Kind = Literal["ranking", "selective", "calibration", "summary"]
FloatArray = NDArray[np.float64]

_KINDS = ("ranking", "selective", "calibration", "summary")
# Guards floor/ceil of fraction * n against binary rounding (0.29 * 100 = 28.999…).
_COUNT_TOL = 1e-9


class UndefinedMetricWarning(UserWarning):
    """A metric is undefined on this input (e.g. only one class); its value is NaN."""


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class MetricSpec:
    """One registered metric.

    ``fn`` is the public, validating function; ``helper`` is its private maths on
    validated arrays (``helper(confidence, correct, **options)``), which the
    bootstrap loops call. Options are validated once by ``fn``.
    """

    name: str
    fn: Callable[..., float]
    higher_is_better: bool
    kind: Kind
    needs_probabilities: bool
    summary: str
    helper: Callable[..., float]


METRICS: Registry[MetricSpec] = Registry("metric")


def metric(name: str, *, higher_is_better: bool, kind: Kind, helper: Callable[..., float],
           needs_probabilities: bool = False
           ) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Register ``fn`` as metric ``name``; ``helper`` is the private maths it calls."""
    if kind not in _KINDS:
        raise ValueError(f"metric kind must be one of {_KINDS}, got {kind!r}")

    def decorate(fn: Callable[..., float]) -> Callable[..., float]:
        doc = inspect.getdoc(fn) or ""
        METRICS.add(name, MetricSpec(name=name, fn=fn, higher_is_better=higher_is_better,
                                     kind=kind, needs_probabilities=needs_probabilities,
                                     summary=doc.splitlines()[0] if doc else "", helper=helper))
        return fn

    return decorate


# ------------------------------------------------------------------------- validation


def check_nan_policy(nan_policy: str) -> None:
    """Refuse a ``nan_policy`` other than ``"raise"`` or ``"omit"``."""
    if nan_policy not in ("raise", "omit"):
        raise InvalidInputError(f"must be 'raise' or 'omit', got {nan_policy!r}",
                                field="nan_policy")


def as_1d(values: ArrayLike, field: str) -> FloatArray:
    """``values`` as a 1-D float array; :class:`InvalidInputError` naming ``field`` otherwise."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be numbers: {exc}", field=field) from exc
    if array.ndim != 1:
        raise InvalidInputError(f"must be a 1-D array, got shape {array.shape}", field=field)
    return array


def check_confidence_correct(confidence: ArrayLike, correct: ArrayLike,
                              nan_policy: str = "raise", *,
                              probabilities: bool = False) -> tuple[FloatArray, FloatArray]:
    """Validate and return ``(confidence, correct)`` as float arrays.

    Rules: both 1-D, same length; ``correct`` in [0, 1]; a NaN in either raises
    (``nan_policy="raise"``) or drops that row (``"omit"``, count logged); nothing
    may be left empty. ``±inf`` confidence is allowed for raw scores; with
    ``probabilities=True`` confidence must lie in [0, 1].
    """
    check_nan_policy(nan_policy)
    conf = as_1d(confidence, "confidence")
    corr = as_1d(correct, "correct")
    if conf.shape != corr.shape:
        raise InvalidInputError(f"confidence has {conf.size} values but correct has {corr.size}",
                                field="correct")
    missing = np.isnan(conf) | np.isnan(corr)
    if missing.any():
        if nan_policy == "raise":
            field = "confidence" if np.isnan(conf).any() else "correct"
            first = int(np.flatnonzero(np.isnan(conf) if field == "confidence" else missing)[0])
            raise InvalidInputError(
                f"{int(missing.sum())} NaN value(s), first at index {first}; "
                "pass nan_policy='omit' to drop those rows", field=field)
        logger.info("dropped %d of %d rows with NaN confidence or correctness",
                    int(missing.sum()), conf.size)
        conf, corr = conf[~missing], corr[~missing]
    if conf.size == 0:
        raise InvalidInputError("no rows to evaluate", field="confidence")
    if np.isinf(corr).any() or corr.min() < 0 or corr.max() > 1:
        raise InvalidInputError("correctness must lie in [0, 1]", field="correct")
    if probabilities and (np.isinf(conf).any() or conf.min() < 0 or conf.max() > 1):
        raise InvalidInputError(
            "this metric needs probabilities in [0, 1]; calibrate raw scores first "
            "(see crossfit_probabilities)", field="confidence")
    return conf, corr


def check_fraction(value: float, field: str, *, allow_zero: bool, allow_one: bool) -> float:
    """``value`` as a float in [0, 1] (ends open or closed as asked), else an error
    naming ``field``."""
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be a number, got {value!r}", field=field) from exc
    low_ok = value >= 0 if allow_zero else value > 0
    high_ok = value <= 1 if allow_one else value < 1
    if not (low_ok and high_ok):
        lo, hi = "[" if allow_zero else "(", "]" if allow_one else ")"
        raise InvalidInputError(f"must lie in {lo}0, 1{hi}, got {value!r}", field=field)
    return value


def check_count(value: int, field: str, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (booleans refused), else an error naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidInputError(f"must be an integer >= {minimum}, got {value!r}", field=field)
    return int(value)


def warn_undefined(message: str) -> float:
    """Emit :class:`UndefinedMetricWarning` at the caller's caller and return NaN."""
    warnings.warn(message, UndefinedMetricWarning, stacklevel=3)
    return math.nan


# ----------------------------------------------------------------- shared maths helpers


def floor_count(fraction: float, n: int) -> int:
    r""":math:`\lfloor f n \rfloor`, robust to binary rounding of ``f * n``."""
    return int(math.floor(fraction * n + _COUNT_TOL))


def ceil_count(fraction: float, n: int) -> int:
    r""":math:`\lceil f n \rceil`, robust to binary rounding of ``f * n``."""
    return int(math.ceil(fraction * n - _COUNT_TOL))


def tie_averaged(confidence: FloatArray, quality: FloatArray, *, descending: bool) -> FloatArray:
    """``quality`` in confidence order, each tied item replaced by its tie group's mean.

    Any selective quantity built from sums over the first ``k`` sorted items is
    linear in the quality at each position. Under a uniformly random order of a
    tie group, each of its positions holds each of its members with equal
    probability, so its expected quality is the group mean. Substituting the
    group mean therefore gives the exact expectation over all tie orders.
    """
    order = np.argsort(-confidence if descending else confidence, kind="stable")
    sorted_conf = confidence[order]
    sorted_quality = quality[order]
    starts = np.concatenate(([0], np.flatnonzero(sorted_conf[1:] != sorted_conf[:-1]) + 1))
    counts = np.diff(np.append(starts, sorted_conf.size))
    means = np.add.reduceat(sorted_quality, starts) / counts
    return np.repeat(means, counts)


def equal_mass_bins(values: FloatArray, n_bins: int) -> NDArray[np.intp]:
    """Bin index in ``0..n_bins-1`` per item: equal-mass bins by rank, ties kept together.

    Item with average rank ``r`` (1-based, ties averaged) goes to bin
    ``floor((r - 1) * n_bins / n)``, so tied values share a bin and the binning
    does not depend on record order. Bins may be empty (ties, ``n_bins > n``).
    """
    from scipy.stats import rankdata  # 0.4 s to import: only where a table is binned

    ranks = rankdata(values, method="average") - 1.0
    return np.minimum((ranks * n_bins / values.size).astype(np.intp), n_bins - 1)


def has_both_classes(y: NDArray[np.bool_]) -> bool:
    """Whether a boolean array holds both True and False."""
    return bool(y.any() and not y.all())

