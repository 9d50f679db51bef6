r"""Evaluation metrics: how well a confidence separates right answers from wrong ones.

Every metric is a pure, vectorised numpy function

    ``fn(confidence, correct, *, nan_policy="raise", **options) -> float``

of two 1-D arrays of equal length: ``confidence`` (higher = more likely
correct; raw scores keep their natural scale) and ``correct`` (binary {0, 1},
or a continuous quality in [0, 1] where the metric defines one). Each public
function validates its input with :func:`_check_confidence_correct` and its
options, then calls a private ``_helper`` that holds the maths; the bootstrap
loops call the helpers directly on already validated arrays.

Names show the direction, as in scikit-learn: ``*_score`` is higher-better,
``*_error``/``*_loss``/``risk_*`` lower-better. The registry
:data:`METRICS` lists every metric with its direction and kind:

============================  ===========  =========  ====================================
registry name                 kind         direction  function
============================  ===========  =========  ====================================
``accuracy``                  summary      higher     :func:`accuracy_score`
``auroc``                     ranking      higher     :func:`auroc_score`
``auprc_correct``             ranking      higher     :func:`auprc_correct_score`
``auprc_error``               ranking      higher     :func:`auprc_error_score`
``spearman``                  ranking      higher     :func:`spearman_score`
``rank_calibration_error``    ranking      lower      :func:`rank_calibration_error`
``prr``                       selective    higher     :func:`prr_score`
``aurc``                      selective    lower      :func:`aurc_loss`
``eaurc``                     selective    lower      :func:`eaurc_loss`
``risk_at_coverage``          selective    lower      :func:`risk_at_coverage`
``coverage_at_risk``          selective    higher     :func:`coverage_at_risk_score`
``ece``                       calibration  lower      :func:`calibration_error`
``ece_mass``                  calibration  lower      :func:`mass_calibration_error`
``ace``                       calibration  lower      :func:`adaptive_calibration_error`
``brier``                     calibration  lower      :func:`brier_loss`
``nll``                       calibration  lower      :func:`nll_loss`
``bas``                       calibration  higher     :func:`bas_score`
============================  ===========  =========  ====================================

Undefined results (one class only, constant input) emit
:class:`UndefinedMetricWarning` and return NaN. A NaN confidence raises
:class:`~confide.errors.InvalidInputError` unless ``nan_policy="omit"``, which
drops the row and logs how many were dropped; NaN is never read as "confident".

Ties in confidence: AUROC counts a tied pair as 1/2; PRR, AURC, E-AURC,
risk at coverage and accuracy at fractions give the exact expectation over all
orders of the tied items (each tied item's quality is replaced by its tie
group's mean); AUPRC treats a tie group as one threshold (as scikit-learn);
binned metrics keep tied values in one bin. No result depends on record order.

Also here: :func:`accuracy_at_fractions` (a table, not a single number),
:func:`crossfit_probabilities` (K-fold calibration of raw scores, for the
calibration metrics), :func:`bootstrap_interval` and :func:`paired_bootstrap`.
"""

from __future__ import annotations

import inspect
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats
from scipy.special import xlogy

from confide.errors import InvalidInputError
from confide.registry import Registry

__all__ = [
    "METRICS",
    "BootstrapInterval",
    "MetricSpec",
    "UndefinedMetricWarning",
    "accuracy_at_fractions",
    "accuracy_score",
    "adaptive_calibration_error",
    "auprc_correct_score",
    "auprc_error_score",
    "auroc_score",
    "aurc_loss",
    "bas_score",
    "bootstrap_interval",
    "brier_loss",
    "calibration_error",
    "coverage_at_risk_score",
    "crossfit_probabilities",
    "eaurc_loss",
    "mass_calibration_error",
    "metric",
    "nll_loss",
    "paired_bootstrap",
    "prr_score",
    "rank_calibration_error",
    "risk_at_coverage",
    "spearman_score",
]

logger = logging.getLogger(__name__)

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


def _check_nan_policy(nan_policy: str) -> None:
    if nan_policy not in ("raise", "omit"):
        raise InvalidInputError(f"must be 'raise' or 'omit', got {nan_policy!r}",
                                field="nan_policy")


def _as_1d(values: ArrayLike, field: str) -> FloatArray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be numbers: {exc}", field=field) from exc
    if array.ndim != 1:
        raise InvalidInputError(f"must be a 1-D array, got shape {array.shape}", field=field)
    return array


def _check_confidence_correct(confidence: ArrayLike, correct: ArrayLike,
                              nan_policy: str = "raise", *,
                              probabilities: bool = False) -> tuple[FloatArray, FloatArray]:
    """Validate and return ``(confidence, correct)`` as float arrays.

    Rules: both 1-D, same length; ``correct`` in [0, 1]; a NaN in either raises
    (``nan_policy="raise"``) or drops that row (``"omit"``, count logged); nothing
    may be left empty. ``±inf`` confidence is allowed for raw scores; with
    ``probabilities=True`` confidence must lie in [0, 1].
    """
    _check_nan_policy(nan_policy)
    conf = _as_1d(confidence, "confidence")
    corr = _as_1d(correct, "correct")
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


def _check_fraction(value: float, field: str, *, allow_zero: bool, allow_one: bool) -> float:
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


def _check_count(value: int, field: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidInputError(f"must be an integer >= {minimum}, got {value!r}", field=field)
    return int(value)


def _warn_undefined(message: str) -> float:
    warnings.warn(message, UndefinedMetricWarning, stacklevel=3)
    return math.nan


# ----------------------------------------------------------------- shared maths helpers


def _floor_count(fraction: float, n: int) -> int:
    return int(math.floor(fraction * n + _COUNT_TOL))


def _ceil_count(fraction: float, n: int) -> int:
    return int(math.ceil(fraction * n - _COUNT_TOL))


def _tie_averaged(confidence: FloatArray, quality: FloatArray, *, descending: bool) -> FloatArray:
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


def _equal_mass_bins(values: FloatArray, n_bins: int) -> NDArray[np.intp]:
    """Bin index in ``0..n_bins-1`` per item: equal-mass bins by rank, ties kept together.

    Item with average rank ``r`` (1-based, ties averaged) goes to bin
    ``floor((r - 1) * n_bins / n)``, so tied values share a bin and the binning
    does not depend on record order. Bins may be empty (ties, ``n_bins > n``).
    """
    ranks = stats.rankdata(values, method="average") - 1.0
    return np.minimum((ranks * n_bins / values.size).astype(np.intp), n_bins - 1)


def _has_both_classes(y: NDArray[np.bool_]) -> bool:
    return bool(y.any() and not y.all())


# --------------------------------------------------------------------------- summary


def _accuracy(confidence: FloatArray, correct: FloatArray) -> float:
    return float(np.mean(correct))


@metric("accuracy", higher_is_better=True, kind="summary", helper=_accuracy)
def accuracy_score(confidence: ArrayLike, correct: ArrayLike, *,
                   nan_policy: NanPolicy = "raise") -> float:
    r"""Mean correctness of all answers (confidence is ignored except for NaN rows).

    .. math:: \mathrm{Acc} = \frac{1}{n}\sum_{i=1}^{n} y_i

    Parameters
    ----------
    confidence : array of shape (n,)
        Only used to drop rows under ``nan_policy="omit"``.
    correct : array of shape (n,), values in [0, 1]
        Binary correctness or continuous quality.
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    float in [0, 1]; higher is better.

    Notes
    -----
    Always defined for non-empty input.

    References
    ----------
    Standard.

    Examples
    --------
    >>> accuracy_score([0.9, 0.2, 0.6, 0.4], [1, 0, 1, 1])
    0.75
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    return _accuracy(conf, corr)


# --------------------------------------------------------------------------- ranking


def _auroc(confidence: FloatArray, correct: FloatArray, *, threshold: float = 0.5) -> float:
    positive = correct >= threshold
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return _warn_undefined("AUROC needs both correct and wrong answers; returning NaN")
    ranks = stats.rankdata(confidence, method="average")
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@metric("auroc", higher_is_better=True, kind="ranking", helper=_auroc)
def auroc_score(confidence: ArrayLike, correct: ArrayLike, *, nan_policy: NanPolicy = "raise",
                threshold: float = 0.5) -> float:
    r"""Area under the ROC curve of confidence for telling correct from wrong answers.

    The probability that a random correct answer gets a higher confidence than a
    random wrong one (Mann–Whitney U over ``n_1`` correct and ``n_0`` wrong):

    .. math::

        \mathrm{AUROC} = \frac{1}{n_1 n_0}\sum_{i: y_i = 1}\sum_{j: y_j = 0}
            \Big(\mathbb{1}[c_i > c_j] + \tfrac12 \mathbb{1}[c_i = c_j]\Big)

    computed as :math:`(\sum_{i: y_i=1} R_i - n_1(n_1+1)/2)/(n_1 n_0)` with
    average ranks :math:`R_i`.

    Parameters
    ----------
    confidence : array of shape (n,)
        Raw scores or probabilities; higher = more likely correct.
    correct : array of shape (n,), values in [0, 1]
        Binary correctness, or continuous quality binarised as ``correct >= threshold``.
    nan_policy : {"raise", "omit"}, default "raise"
    threshold : float in (0, 1], default 0.5
        Quality at or above which an answer counts as correct.

    Returns
    -------
    float in [0, 1]; higher is better, 0.5 is chance.

    Notes
    -----
    Ties count 1/2, so the value equals ``sklearn.metrics.roc_auc_score``.
    Invariant to strictly increasing transforms of confidence. Undefined
    (``UndefinedMetricWarning``, NaN) when all answers are correct or all wrong.

    References
    ----------
    [1] J. A. Hanley, B. J. McNeil (1982). The meaning and use of the area under
        a receiver operating characteristic (ROC) curve. Radiology 143(1).

    Examples
    --------
    >>> auroc_score([0.9, 0.4, 0.6, 0.4], [1, 0, 1, 1])
    0.8333333333333334
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    threshold = _check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
    return _auroc(conf, corr, threshold=threshold)


def _average_precision(score: FloatArray, positive: NDArray[np.bool_]) -> float:
    """Average precision, thresholds at each distinct score (sklearn's step definition)."""
    order = np.argsort(-score, kind="stable")
    sorted_score, sorted_pos = score[order], positive[order]
    # last index of each run of equal scores = one threshold
    ends = np.append(np.flatnonzero(sorted_score[1:] != sorted_score[:-1]), score.size - 1)
    true_pos = np.cumsum(sorted_pos)[ends]
    precision = true_pos / (ends + 1)
    recall = true_pos / true_pos[-1]
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))


def _auprc_correct(confidence: FloatArray, correct: FloatArray, *, threshold: float = 0.5) -> float:
    positive = correct >= threshold
    if not _has_both_classes(positive):
        return _warn_undefined("AUPRC needs both correct and wrong answers; returning NaN")
    return _average_precision(confidence, positive)


def _auprc_error(confidence: FloatArray, correct: FloatArray, *, threshold: float = 0.5) -> float:
    positive = correct < threshold
    if not _has_both_classes(positive):
        return _warn_undefined("AUPRC needs both correct and wrong answers; returning NaN")
    return _average_precision(-confidence, positive)


@metric("auprc_correct", higher_is_better=True, kind="ranking", helper=_auprc_correct)
def auprc_correct_score(confidence: ArrayLike, correct: ArrayLike, *,
                        nan_policy: NanPolicy = "raise", threshold: float = 0.5) -> float:
    r"""Area under the precision–recall curve with correct answers as the positive class.

    Average precision of ``confidence`` for finding correct answers:

    .. math::

        \mathrm{AP} = \sum_{k} (R_k - R_{k-1})\, P_k

    over the distinct confidence thresholds in decreasing order, with precision
    :math:`P_k` and recall :math:`R_k` of the items scored at or above the
    ``k``-th threshold and :math:`R_0 = 0`.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
        Binarised as ``correct >= threshold``.
    nan_policy : {"raise", "omit"}, default "raise"
    threshold : float in (0, 1], default 0.5

    Returns
    -------
    float in (0, 1]; higher is better; chance level is the accuracy.

    Notes
    -----
    Tied scores form one threshold (no interpolation), so the value equals
    ``sklearn.metrics.average_precision_score``. Undefined (warning, NaN)
    with only one class.

    References
    ----------
    [1] Y. Zhu (2004). Recall, precision and average precision. Univ. of Waterloo.
    [2] J. Davis, M. Goadrich (2006). The relationship between precision-recall
        and ROC curves. ICML.

    Examples
    --------
    >>> round(auprc_correct_score([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1]), 4)
    0.8333
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    threshold = _check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
    return _auprc_correct(conf, corr, threshold=threshold)


@metric("auprc_error", higher_is_better=True, kind="ranking", helper=_auprc_error)
def auprc_error_score(confidence: ArrayLike, correct: ArrayLike, *,
                      nan_policy: NanPolicy = "raise", threshold: float = 0.5) -> float:
    r"""Area under the precision–recall curve with wrong answers as the positive class.

    Average precision of ``-confidence`` for finding wrong answers
    (:math:`y' = 1 - y`):

    .. math::

        \mathrm{AP} = \sum_{k} (R_k - R_{k-1})\, P_k

    over the distinct values of :math:`-c` in decreasing order, with precision
    :math:`P_k` and recall :math:`R_k` for the wrong answers and :math:`R_0 = 0`.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
        An answer is wrong when ``correct < threshold``.
    nan_policy : {"raise", "omit"}, default "raise"
    threshold : float in (0, 1], default 0.5

    Returns
    -------
    float in (0, 1]; higher is better; chance level is the error rate.

    Notes
    -----
    Equals ``sklearn.metrics.average_precision_score(1 - y, -confidence)``.
    Undefined (warning, NaN) with only one class.

    References
    ----------
    [1] J. Davis, M. Goadrich (2006). The relationship between precision-recall
        and ROC curves. ICML.

    Examples
    --------
    >>> round(auprc_error_score([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1]), 4)
    0.8333
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    threshold = _check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
    return _auprc_error(conf, corr, threshold=threshold)


def _spearman(confidence: FloatArray, correct: FloatArray) -> float:
    if np.all(confidence == confidence[0]) or np.all(correct == correct[0]):
        return _warn_undefined("Spearman correlation needs non-constant confidence and "
                               "correctness; returning NaN")
    return float(stats.spearmanr(confidence, correct).statistic)


@metric("spearman", higher_is_better=True, kind="ranking", helper=_spearman)
def spearman_score(confidence: ArrayLike, correct: ArrayLike, *,
                   nan_policy: NanPolicy = "raise") -> float:
    r"""Spearman rank correlation between confidence and answer quality.

    .. math:: \rho = \mathrm{corr}\big(\mathrm{rank}(c), \mathrm{rank}(y)\big)

    with average ranks for ties (``scipy.stats.spearmanr``).

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
        Continuous quality (binary works too).
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    float in [-1, 1]; higher is better, 0 is chance.

    Notes
    -----
    Undefined (warning, NaN) when either array is constant.

    References
    ----------
    [1] C. Spearman (1904). The proof and measurement of association between two
        things. American Journal of Psychology 15(1).

    Examples
    --------
    >>> round(spearman_score([0.9, 0.2, 0.6, 0.4], [1.0, 0.1, 0.5, 0.7]), 4)
    0.8
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    return _spearman(conf, corr)


def _rank_calibration_error(confidence: FloatArray, correct: FloatArray, *,
                            n_bins: int = 20) -> float:
    if np.all(correct == correct[0]):
        return _warn_undefined("rank-calibration error needs varying correctness; returning NaN")
    bins = _equal_mass_bins(confidence, n_bins)
    counts = np.bincount(bins, minlength=n_bins)
    used = counts > 0
    weight = counts[used] / confidence.size               # mass of each bin, low → high conf
    reg = np.bincount(bins, weights=correct, minlength=n_bins)[used] / counts[used]
    conf_share = np.cumsum(weight[::-1])[::-1]                  # P(conf' >= conf_b)
    reg_share = (weight[None, :] * (reg[None, :] >= reg[:, None])).sum(axis=1)  # P(reg' >= reg_b)
    return float(np.sum(weight * np.abs(reg_share - conf_share)))


@metric("rank_calibration_error", higher_is_better=False, kind="ranking",
        helper=_rank_calibration_error)
def rank_calibration_error(confidence: ArrayLike, correct: ArrayLike, *,
                           nan_policy: NanPolicy = "raise", n_bins: int = 20) -> float:
    r"""Rank-calibration error: does higher confidence mean higher expected correctness?

    With :math:`\mathrm{reg}(c) = E[y \mid c]`, confidence is rank-calibrated
    when ranking by confidence equals ranking by :math:`\mathrm{reg}`. Written
    for confidence (higher = more sure, so :math:`u' \le u` becomes
    :math:`c' \ge c`):

    .. math::

        \mathrm{RCE} = E_{c}\Big|\, P_{c'}\big(\mathrm{reg}(c') \ge \mathrm{reg}(c)\big)
                               - P_{c'}\big(c' \ge c\big) \Big|

    Binned estimate: ``n_bins`` equal-mass confidence bins :math:`b` with mass
    :math:`w_b` and mean correctness :math:`\widehat{\mathrm{reg}}_b`;

    .. math::

        \widehat{\mathrm{RCE}} = \sum_b w_b \Big| \sum_{b'} w_{b'}
            \mathbb{1}[\widehat{\mathrm{reg}}_{b'} \ge \widehat{\mathrm{reg}}_b]
            - \sum_{b' \ge b} w_{b'} \Big|

    Parameters
    ----------
    confidence : array of shape (n,)
        Raw scores or probabilities (only the order matters).
    correct : array of shape (n,), values in [0, 1]
        Binary correctness or continuous quality.
    nan_policy : {"raise", "omit"}, default "raise"
    n_bins : int >= 1, default 20

    Returns
    -------
    float in [0, 1); lower is better, 0 when bin accuracy increases with confidence.

    Notes
    -----
    Equal-mass bins by average rank keep tied confidences in one bin, so the
    value is invariant to record order and to strictly increasing transforms of
    confidence. Undefined (warning, NaN) when correctness is constant: no
    ranking of expected correctness exists then.

    References
    ----------
    [1] X. Huang, S. Li, M. Yu, M. Sesia, H. Hassani, I. Lee, O. Bastani,
        E. Dobriban (2024). Uncertainty in Language Models: Assessment through
        Rank-Calibration. EMNLP.

    Examples
    --------
    Two bins of two items; the confident bin is less often correct:

    >>> rank_calibration_error([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 1], n_bins=2)
    0.5
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    n_bins = _check_count(n_bins, "n_bins")
    return _rank_calibration_error(conf, corr, n_bins=n_bins)


# ------------------------------------------------------------------------- selective


def _prr(confidence: FloatArray, correct: FloatArray, *, max_rejection: float = 0.5) -> float:
    n = correct.size
    k_max = min(_floor_count(max_rejection, n), n - 1)
    if k_max < 1 or np.all(correct == correct[0]):
        return _warn_undefined("PRR needs varying correctness and at least one rejected item "
                               "(max_rejection * n >= 1); returning NaN")
    total = correct.sum()
    k = np.arange(k_max + 1)

    def area(rejection_order: FloatArray) -> float:
        rejected = np.concatenate(([0.0], np.cumsum(rejection_order[:k_max])))
        return float(np.mean((total - rejected) / (n - k)))

    scorer = area(_tie_averaged(confidence, correct, descending=False))
    oracle = area(np.sort(correct))
    random = float(total / n)
    return (scorer - random) / (oracle - random)


@metric("prr", higher_is_better=True, kind="selective", helper=_prr)
def prr_score(confidence: ArrayLike, correct: ArrayLike, *, nan_policy: NanPolicy = "raise",
              max_rejection: float = 0.5) -> float:
    r"""Prediction–rejection ratio: share of the oracle's rejection gain the confidence achieves.

    Reject the ``k`` least-confident items, ``k = 0 .. K`` with
    :math:`K = \lfloor r_{\max} n \rfloor` (at most ``n - 1``); let :math:`q(k)`
    be the mean quality of the :math:`n - k` retained items and
    :math:`A = \frac{1}{K+1}\sum_{k=0}^{K} q(k)` the (discrete) area under
    the curve, divided by its width. Then

    .. math::

        \mathrm{PRR} = \frac{A_{\text{conf}} - A_{\text{random}}}
                            {A_{\text{oracle}} - A_{\text{random}}}

    where random has :math:`q(k) = \bar y` for every ``k`` and the oracle rejects
    the lowest-quality items first.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
        Binary correctness or continuous quality.
    nan_policy : {"raise", "omit"}, default "raise"
    max_rejection : float in (0, 1], default 0.5
        Largest rejected fraction :math:`r_{\max}`.

    Returns
    -------
    float, at most 1; higher is better; 1 = oracle, 0 = random, < 0 worse than random.

    Notes
    -----
    Ties: the value is the exact expectation over all orders of tied items. A
    is linear in the quality at each sorted position, and a tied item is equally
    likely to sit at any position of its tie group, so each tied item's quality
    is replaced by its tie group's mean. Undefined (warning, NaN) when quality
    is constant or :math:`K < 1`.

    References
    ----------
    [1] A. Malinin, M. Gales (2021). Uncertainty Estimation in Autoregressive
        Structured Prediction. ICLR.
    [2] E. Fadeeva et al. (2023). LM-Polygraph: Uncertainty Estimation for
        Language Models. EMNLP demo.

    Examples
    --------
    >>> prr_score([0.9, 0.2, 0.6, 0.4], [1, 0, 1, 1])
    1.0
    >>> round(prr_score([0.9, 0.2, 0.6, 0.4], [0, 1, 1, 1]), 4)
    -0.6667
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    max_rejection = _check_fraction(max_rejection, "max_rejection", allow_zero=False,
                                    allow_one=True)
    return _prr(conf, corr, max_rejection=max_rejection)


def _selective_risks(confidence: FloatArray, correct: FloatArray) -> FloatArray:
    """Risk (1 - mean quality) of the ``k`` most confident items, ``k = 1..n``, ties averaged."""
    quality = _tie_averaged(confidence, correct, descending=True)
    return 1.0 - np.cumsum(quality) / np.arange(1, quality.size + 1)


def _oracle_risks(correct: FloatArray) -> FloatArray:
    quality = np.sort(correct)[::-1]
    return 1.0 - np.cumsum(quality) / np.arange(1, quality.size + 1)


def _aurc(confidence: FloatArray, correct: FloatArray) -> float:
    return float(np.mean(_selective_risks(confidence, correct)))


def _eaurc(confidence: FloatArray, correct: FloatArray) -> float:
    return float(np.mean(_selective_risks(confidence, correct)) - np.mean(_oracle_risks(correct)))


@metric("aurc", higher_is_better=False, kind="selective", helper=_aurc)
def aurc_loss(confidence: ArrayLike, correct: ArrayLike, *,
              nan_policy: NanPolicy = "raise") -> float:
    r"""Area under the risk–coverage curve.

    Answer the ``k`` most confident items, ``k = 1..n``; the selective risk is
    :math:`\mathrm{risk}(k) = \frac1k\sum_{j \le k} (1 - y_{(j)})` and

    .. math:: \mathrm{AURC} = \frac1n \sum_{k=1}^{n} \mathrm{risk}(k)

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
        Binary correctness or continuous quality (risk = 1 - quality).
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    float in [0, 1]; lower is better.

    Notes
    -----
    One point per item (coverage ``k/n``). Ties: exact expectation over all
    orders of tied items (each tied item's quality replaced by its tie group's
    mean). Always defined; it also reflects accuracy, see :func:`eaurc_loss`.

    References
    ----------
    [1] Y. Geifman, G. Uziel, R. El-Yaniv (2019). Bias-Reduced Uncertainty
        Estimation for Deep Neural Classifiers. ICLR.

    Examples
    --------
    >>> round(aurc_loss([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1]), 4)
    0.3333
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    return _aurc(conf, corr)


@metric("eaurc", higher_is_better=False, kind="selective", helper=_eaurc)
def eaurc_loss(confidence: ArrayLike, correct: ArrayLike, *,
               nan_policy: NanPolicy = "raise") -> float:
    r"""Excess AURC: the AURC above that of an oracle ordering by correctness.

    .. math:: \mathrm{E\text{-}AURC} = \mathrm{AURC}(c, y) - \mathrm{AURC}(y, y)

    with :func:`aurc_loss`'s discrete AURC; the oracle answers the best items first.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    float in [0, 1]; lower is better, 0 = oracle ranking.

    Notes
    -----
    Removes the part of AURC due to the error rate alone. Ties as in
    :func:`aurc_loss`. Always defined (0 when correctness is constant).

    References
    ----------
    [1] Y. Geifman, G. Uziel, R. El-Yaniv (2019). Bias-Reduced Uncertainty
        Estimation for Deep Neural Classifiers. ICLR.

    Examples
    --------
    >>> round(eaurc_loss([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1]), 4)
    0.125
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    return _eaurc(conf, corr)


def _risk_at_coverage(confidence: FloatArray, correct: FloatArray, *,
                      coverage: float = 0.8) -> float:
    k = max(1, _ceil_count(coverage, correct.size))
    return float(_selective_risks(confidence, correct)[k - 1])


@metric("risk_at_coverage", higher_is_better=False, kind="selective", helper=_risk_at_coverage)
def risk_at_coverage(confidence: ArrayLike, correct: ArrayLike, *,
                     nan_policy: NanPolicy = "raise", coverage: float = 0.8) -> float:
    r"""Selective risk when answering the most confident ``coverage`` share of items.

    .. math:: \mathrm{risk}@\kappa = \frac1k \sum_{j=1}^{k} (1 - y_{(j)}),
              \quad k = \max(1, \lceil \kappa n \rceil)

    with items :math:`(j)` in decreasing confidence.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"
    coverage : float in (0, 1], default 0.8

    Returns
    -------
    float in [0, 1]; lower is better.

    Notes
    -----
    Ties straddling the cut: expectation over all orders of tied items (random
    tie-breaking). Always defined.

    References
    ----------
    [1] R. El-Yaniv, Y. Wiener (2010). On the Foundations of Noise-free Selective
        Classification. JMLR 11.

    Examples
    --------
    >>> risk_at_coverage([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1], coverage=0.5)
    0.5
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    coverage = _check_fraction(coverage, "coverage", allow_zero=False, allow_one=True)
    return _risk_at_coverage(conf, corr, coverage=coverage)


def _coverage_at_risk(confidence: FloatArray, correct: FloatArray, *, risk: float = 0.1) -> float:
    within = np.flatnonzero(_selective_risks(confidence, correct) <= risk + 1e-12)
    return float((within[-1] + 1) / correct.size) if within.size else 0.0


@metric("coverage_at_risk", higher_is_better=True, kind="selective", helper=_coverage_at_risk)
def coverage_at_risk_score(confidence: ArrayLike, correct: ArrayLike, *,
                           nan_policy: NanPolicy = "raise", risk: float = 0.1) -> float:
    r"""Largest coverage whose selective risk stays within ``risk``.

    .. math:: \mathrm{cov}@\rho = \max\{k/n : \mathrm{risk}(k) \le \rho\}
              \quad (0 \text{ if no } k \text{ qualifies})

    with :math:`\mathrm{risk}(k)` the mean of :math:`1 - y` over the ``k``
    most confident items.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"
    risk : float in [0, 1], default 0.1

    Returns
    -------
    float in [0, 1]; higher is better.

    Notes
    -----
    In-sample; it carries no guarantee on new data (see the risk-controlled
    decisions for that). Ties: the maximum is taken over the risk curve
    expected over tie orders (as in :func:`risk_at_coverage`); being a maximum,
    this is not the coverage expected over tie orders. Always defined.

    References
    ----------
    [1] Y. Geifman, R. El-Yaniv (2017). Selective Classification for Deep Neural
        Networks. NeurIPS.

    Examples
    --------
    >>> coverage_at_risk_score([0.9, 0.2, 0.6, 0.4], [1, 0, 1, 1], risk=0.0)
    0.75
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    risk = _check_fraction(risk, "risk", allow_zero=True, allow_one=True)
    return _coverage_at_risk(conf, corr, risk=risk)


def accuracy_at_fractions(confidence: ArrayLike, correct: ArrayLike,
                          fractions: Sequence[float] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
                                                        0.9, 1.0),
                          *, nan_policy: NanPolicy = "raise") -> dict[float, float]:
    r"""Accuracy among the most confident fraction of answers, for several fractions.

    .. math:: \mathrm{Acc}@f = \frac1k \sum_{j=1}^{k} y_{(j)},
              \quad k = \max(1, \lceil f n \rceil)

    with items :math:`(j)` in decreasing confidence.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
    fractions : sequence of floats in (0, 1], default 0.1, 0.2, …, 1.0
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    dict mapping each fraction to the accuracy of the answered items (higher is
    better); ``Acc@1`` is the plain accuracy.

    Notes
    -----
    Ties as in :func:`risk_at_coverage`. Not registered: it returns a table.

    References
    ----------
    [1] S. Farquhar, J. Kossen, L. Kuhn, Y. Gal (2024). Detecting hallucinations
        in large language models using semantic entropy. Nature 630.

    Examples
    --------
    >>> accuracy_at_fractions([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1], fractions=(0.25, 0.5, 1.0))
    {0.25: 1.0, 0.5: 0.5, 1.0: 0.5}
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy)
    checked = [_check_fraction(f, "fractions", allow_zero=False, allow_one=True) for f in fractions]
    accuracy = 1.0 - _selective_risks(conf, corr)
    return {f: float(accuracy[max(1, _ceil_count(f, corr.size)) - 1]) for f in checked}


# ----------------------------------------------------------------------- calibration


def _binned_gap(probability: FloatArray, correct: FloatArray, bins: NDArray[np.intp],
                n_bins: int) -> float:
    """Mass-weighted mean of ``|mean(y) - mean(p)|`` over bins = ``sum_b |S_y - S_p| / n``."""
    sum_y = np.bincount(bins, weights=correct, minlength=n_bins)
    sum_p = np.bincount(bins, weights=probability, minlength=n_bins)
    return float(np.abs(sum_y - sum_p).sum() / probability.size)


def _ece(confidence: FloatArray, correct: FloatArray, *, n_bins: int = 10) -> float:
    bins = np.minimum((confidence * n_bins).astype(np.intp), n_bins - 1)
    return _binned_gap(confidence, correct, bins, n_bins)


def _ece_mass(confidence: FloatArray, correct: FloatArray, *, n_bins: int = 10) -> float:
    return _binned_gap(confidence, correct, _equal_mass_bins(confidence, n_bins), n_bins)


def _ace(confidence: FloatArray, correct: FloatArray, *, n_bins: int = 10) -> float:
    def class_error(probability: FloatArray, label: FloatArray, bins: NDArray[np.intp]) -> float:
        counts = np.bincount(bins, minlength=n_bins)
        used = counts > 0
        gap = (np.bincount(bins, weights=label, minlength=n_bins)
               - np.bincount(bins, weights=probability, minlength=n_bins))[used] / counts[used]
        return float(np.mean(np.abs(gap)))

    correct_class = class_error(confidence, correct, _equal_mass_bins(confidence, n_bins))
    wrong_class = class_error(1.0 - confidence, 1.0 - correct,
                              _equal_mass_bins(-confidence, n_bins))
    return (correct_class + wrong_class) / 2


def _brier(confidence: FloatArray, correct: FloatArray) -> float:
    return float(np.mean((confidence - correct) ** 2))


def _nll(confidence: FloatArray, correct: FloatArray) -> float:
    with np.errstate(divide="ignore"):
        return float(-np.mean(xlogy(correct, confidence) + xlogy(1.0 - correct, 1.0 - confidence)))


def _check_n_bins(n_bins: int) -> int:
    return _check_count(n_bins, "n_bins")


@metric("ece", higher_is_better=False, kind="calibration", helper=_ece, needs_probabilities=True)
def calibration_error(confidence: ArrayLike, correct: ArrayLike, *,
                      nan_policy: NanPolicy = "raise", n_bins: int = 10) -> float:
    r"""Expected calibration error with equal-width bins.

    .. math::

        \mathrm{ECE} = \sum_{b=1}^{B} \frac{n_b}{n}
            \big|\bar y_b - \bar p_b\big|

    Bin ``b`` holds the probabilities in :math:`[(b-1)/B, b/B)`, the last one
    also holds 1 (index :math:`\min(\lfloor pB \rfloor, B - 1)`).

    Parameters
    ----------
    confidence : array of shape (n,), probabilities in [0, 1]
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"
    n_bins : int >= 1, default 10

    Returns
    -------
    float in [0, 1]; lower is better.

    Raises
    ------
    InvalidInputError
        If a confidence lies outside [0, 1] (calibrate raw scores first, e.g.
        with :func:`crossfit_probabilities`).

    Notes
    -----
    Empty bins contribute nothing. Biased upwards for small n. Always defined.

    References
    ----------
    [1] M. P. Naeini, G. Cooper, M. Hauskrecht (2015). Obtaining Well Calibrated
        Probabilities Using Bayesian Binning. AAAI.
    [2] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger (2017). On Calibration of
        Modern Neural Networks. ICML.

    Examples
    --------
    >>> round(calibration_error([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1], n_bins=2), 4)
    0.225
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
    return _ece(conf, corr, n_bins=_check_n_bins(n_bins))


@metric("ece_mass", higher_is_better=False, kind="calibration", helper=_ece_mass,
        needs_probabilities=True)
def mass_calibration_error(confidence: ArrayLike, correct: ArrayLike, *,
                           nan_policy: NanPolicy = "raise", n_bins: int = 10) -> float:
    r"""Expected calibration error with equal-mass (quantile) bins.

    .. math::

        \mathrm{ECE}_{\text{mass}} = \sum_{b=1}^{B} \frac{n_b}{n}
            \big|\bar y_b - \bar p_b\big|

    where the item with average rank :math:`r` (1-based) falls in bin
    :math:`\lfloor (r-1) B / n \rfloor`.

    Parameters
    ----------
    confidence : array of shape (n,), probabilities in [0, 1]
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"
    n_bins : int >= 1, default 10

    Returns
    -------
    float in [0, 1]; lower is better.

    Raises
    ------
    InvalidInputError
        If a confidence lies outside [0, 1].

    Notes
    -----
    Tied probabilities share a bin, so bins can be unequal or empty under ties.
    Always defined.

    References
    ----------
    [1] J. Nixon, M. W. Dusenberry, L. Zhang, G. Jerfel, D. Tran (2019).
        Measuring Calibration in Deep Learning. CVPR Workshops.

    Examples
    --------
    >>> round(mass_calibration_error([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1], n_bins=2), 4)
    0.225
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
    return _ece_mass(conf, corr, n_bins=_check_n_bins(n_bins))


@metric("ace", higher_is_better=False, kind="calibration", helper=_ace, needs_probabilities=True)
def adaptive_calibration_error(confidence: ArrayLike, correct: ArrayLike, *,
                               nan_policy: NanPolicy = "raise", n_bins: int = 10) -> float:
    r"""Adaptive calibration error: unweighted mean gap over equal-mass ranges, per class.

    The answer's two outcomes are the classes: "correct" with probability
    :math:`p` and label :math:`y`, "wrong" with :math:`1 - p` and :math:`1 - y`.
    Each class's probabilities are split into ``R`` equal-mass ranges
    :math:`r` (empty ranges dropped):

    .. math::

        \mathrm{ACE} = \frac{1}{K}\sum_{k=1}^{K} \frac{1}{R_k}\sum_{r=1}^{R_k}
            \big|\mathrm{acc}(r, k) - \mathrm{conf}(r, k)\big|, \quad K = 2

    Parameters
    ----------
    confidence : array of shape (n,), probabilities in [0, 1]
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"
    n_bins : int >= 1, default 10
        Ranges ``R`` per class.

    Returns
    -------
    float in [0, 1]; lower is better.

    Raises
    ------
    InvalidInputError
        If a confidence lies outside [0, 1].

    Notes
    -----
    Unlike :func:`mass_calibration_error` each range counts equally. When ``R``
    divides ``n`` and there are no ties, both classes give the same ranges and
    the value is the plain mean gap over equal-mass bins. Tied probabilities
    share a range. Always defined.

    References
    ----------
    [1] J. Nixon, M. W. Dusenberry, L. Zhang, G. Jerfel, D. Tran (2019).
        Measuring Calibration in Deep Learning. CVPR Workshops.

    Examples
    --------
    >>> round(adaptive_calibration_error([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1], n_bins=2), 4)
    0.225
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
    return _ace(conf, corr, n_bins=_check_n_bins(n_bins))


@metric("brier", higher_is_better=False, kind="calibration", helper=_brier,
        needs_probabilities=True)
def brier_loss(confidence: ArrayLike, correct: ArrayLike, *,
               nan_policy: NanPolicy = "raise") -> float:
    r"""Brier score: mean squared difference between probability and correctness.

    .. math:: \mathrm{BS} = \frac1n \sum_{i=1}^{n} (p_i - y_i)^2

    Parameters
    ----------
    confidence : array of shape (n,), probabilities in [0, 1]
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    float in [0, 1]; lower is better.

    Raises
    ------
    InvalidInputError
        If a confidence lies outside [0, 1].

    Notes
    -----
    A strictly proper scoring rule (for binary y). Always defined.

    References
    ----------
    [1] G. W. Brier (1950). Verification of forecasts expressed in terms of
        probability. Monthly Weather Review 78(1).

    Examples
    --------
    >>> round(brier_loss([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1]), 4)
    0.1925
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
    return _brier(conf, corr)


@metric("nll", higher_is_better=False, kind="calibration", helper=_nll, needs_probabilities=True)
def nll_loss(confidence: ArrayLike, correct: ArrayLike, *,
             nan_policy: NanPolicy = "raise") -> float:
    r"""Negative log-likelihood (log loss) of correctness under the probability.

    .. math:: \mathrm{NLL} = -\frac1n \sum_{i=1}^{n}
              \big[y_i \ln p_i + (1 - y_i) \ln(1 - p_i)\big]

    Parameters
    ----------
    confidence : array of shape (n,), probabilities in [0, 1]
    correct : array of shape (n,), values in [0, 1]
        Continuous quality gives the cross-entropy.
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    float in [0, inf]; lower is better.

    Raises
    ------
    InvalidInputError
        If a confidence lies outside [0, 1].

    Notes
    -----
    No clipping: a probability of exactly 0 or 1 on the wrong outcome gives
    ``inf`` (``0 ln 0 = 0``). Always defined.

    References
    ----------
    [1] I. J. Good (1952). Rational Decisions. JRSS B 14(1).

    Examples
    --------
    >>> round(nll_loss([0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1]), 4)
    0.5403
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
    return _nll(conf, corr)


def _bas(confidence: FloatArray, correct: FloatArray, *, n_thresholds: int = 100) -> float:
    t = (np.arange(n_thresholds) + 0.5) / n_thresholds              # midpoints, never 1
    order = np.argsort(confidence, kind="stable")
    sorted_conf, sorted_correct = confidence[order], correct[order]
    # sums of y and 1 - y over the items with confidence >= t, via suffix sums
    right = np.append(np.cumsum(sorted_correct[::-1])[::-1], 0.0)
    wrong = np.append(np.cumsum((1.0 - sorted_correct)[::-1])[::-1], 0.0)
    first = np.searchsorted(sorted_conf, t, side="left")
    utility = right[first] - wrong[first] * t / (1.0 - t)
    return float(utility.mean() / confidence.size)


@metric("bas", higher_is_better=True, kind="calibration", helper=_bas, needs_probabilities=True)
def bas_score(confidence: ArrayLike, correct: ArrayLike, *, nan_policy: NanPolicy = "raise",
              n_thresholds: int = 100) -> float:
    r"""Behavioral Alignment Score: realised answer-or-abstain utility over risk thresholds.

    At risk threshold :math:`t`, answer iff :math:`p \ge t`. An answered
    correct item earns 1, an answered wrong item costs :math:`t/(1-t)` (the
    loss at which answering at probability :math:`t` breaks even), an
    abstention earns 0. With ``T = n_thresholds`` grid midpoints
    :math:`t_j = (j + \tfrac12)/T`:

    .. math::

        \mathrm{BAS} = \frac{1}{T}\sum_{j=0}^{T-1} \frac1n \sum_{i=1}^{n}
            \mathbb{1}[p_i \ge t_j]\Big(y_i - (1 - y_i)\frac{t_j}{1 - t_j}\Big)

    Parameters
    ----------
    confidence : array of shape (n,), probabilities in [0, 1]
    correct : array of shape (n,), values in [0, 1]
        Continuous quality is used linearly: utility :math:`y - (1-y)\,t/(1-t)`.
    nan_policy : {"raise", "omit"}, default "raise"
    n_thresholds : int >= 1, default 100
        Grid size on [0, 1] (midpoint rule, so t = 1 is never used).

    Returns
    -------
    float in (-inf, 1]; higher is better; abstaining always scores 0.

    Raises
    ------
    InvalidInputError
        If a confidence lies outside [0, 1].

    Notes
    -----
    As the grid refines, one item's contribution tends to
    :math:`y p + (1-y)(p + \ln(1-p))`, so a confidently wrong answer costs far
    more than an unconfident right one earns (an asymmetric, log-loss-like
    penalty). Ties play no special role. Always defined.

    References
    ----------
    [1] S. Wu, F. K. Gustafsson, E. Phillips, B. Gao, A. Thakur, D. A. Clifton
        (2026). BAS: A Decision-Theoretic Approach to Evaluating Large Language
        Model Confidence. arXiv:2604.03216.

    Examples
    --------
    Two thresholds (1/4, 3/4): the right answer at 0.9 earns 1 + 1, the wrong one
    at 0.6 earns -1/3 at t = 1/4 and abstains at t = 3/4:

    >>> round(bas_score([0.9, 0.6], [1, 0], n_thresholds=2), 4)
    0.4167
    """
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
    n_thresholds = _check_count(n_thresholds, "n_thresholds")
    return _bas(conf, corr, n_thresholds=n_thresholds)


# ------------------------------------------------------------------- cross-fitting


def crossfit_probabilities(confidence: ArrayLike, correct: ArrayLike, *,
                           method: Literal["isotonic", "platt"] = "isotonic", n_folds: int = 5,
                           seed: int = 0, nan_policy: NanPolicy = "raise") -> FloatArray:
    r"""Turn raw scores into probabilities by K-fold cross-fitting, for calibration metrics.

    Items are split at random into ``K`` folds; each item's probability comes
    from a calibrator fitted on the other ``K - 1`` folds only, so no item's
    own label influences its probability:

    .. math:: \hat p_i = g_{-k(i)}(c_i)

    ``isotonic``: ``IsotonicRegression(out_of_bounds="clip")``, increasing, in
    [0, 1]; ``platt``: :math:`\sigma(a c + b)` fitted by unpenalised logistic
    regression on the standardised score with Platt's smoothed targets
    :math:`(N_+ + 1)/(N_+ + 2)` and :math:`1/(N_- + 2)`.

    Parameters
    ----------
    confidence : array of shape (n,)
        Raw scores, finite.
    correct : array of shape (n,), values in [0, 1]
        Isotonic accepts continuous quality; Platt needs binary {0, 1}.
    method : {"isotonic", "platt"}, default "isotonic"
    n_folds : int >= 2, default 5
        At most n.
    seed : int, default 0
        Seeds the fold assignment.
    nan_policy : {"raise", "omit"}, default "raise"
        Under "omit", rows with NaN get NaN and are not used for fitting.

    Returns
    -------
    array of shape (n,), probabilities in [0, 1] (input order).

    Raises
    ------
    InvalidInputError
        On bad options or non-finite scores.

    Notes
    -----
    Metrics on cross-fitted probabilities measure the calibration a
    calibrator could reach on new data, not the in-sample fit.

    References
    ----------
    [1] J. Platt (1999). Probabilistic outputs for support vector machines.
    [2] B. Zadrozny, C. Elkan (2002). Transforming classifier scores into
        accurate multiclass probability estimates. KDD.
    [3] V. Chernozhukov et al. (2018). Double/debiased machine learning.
        Econometrics Journal (cross-fitting).

    Examples
    --------
    >>> p = crossfit_probabilities([3.0, -1.0, 2.0, 0.5, 1.0, -2.0], [1, 0, 1, 0, 1, 0], n_folds=2)
    >>> p.shape, bool(((p >= 0) & (p <= 1)).all())
    ((6,), True)
    """
    from sklearn.isotonic import IsotonicRegression

    raw_conf = _as_1d(confidence, "confidence")
    conf, corr = _check_confidence_correct(raw_conf, correct, nan_policy)
    keep = ~(np.isnan(raw_conf) | np.isnan(_as_1d(correct, "correct")))
    if method not in ("isotonic", "platt"):
        raise InvalidInputError(f"must be 'isotonic' or 'platt', got {method!r}", field="method")
    n_folds = _check_count(n_folds, "n_folds", minimum=2)
    if n_folds > conf.size:
        raise InvalidInputError(f"n_folds={n_folds} exceeds the {conf.size} items", field="n_folds")
    if not np.isfinite(conf).all():
        raise InvalidInputError("scores must be finite to be calibrated", field="confidence")
    if method == "platt" and not np.isin(corr, (0.0, 1.0)).all():
        raise InvalidInputError("Platt scaling needs binary correctness", field="correct")

    folds = np.random.default_rng(seed).permutation(conf.size) % n_folds
    out = np.empty(conf.size)
    for k in range(n_folds):
        test, train = folds == k, folds != k
        if method == "isotonic":
            iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0, increasing=True)
            out[test] = iso.fit(conf[train], corr[train]).predict(conf[test])
        else:
            out[test] = _platt(conf[train], corr[train], conf[test])
    result = np.full(raw_conf.size, np.nan)
    result[keep] = np.clip(out, 0.0, 1.0)
    return result


def _platt(train_score: FloatArray, train_label: FloatArray, test_score: FloatArray) -> FloatArray:
    """Platt scaling with Platt's smoothed targets, fitted by unpenalised logistic regression.

    Targets are ``(N+ + 1)/(N+ + 2)`` for correct and ``1/(N- + 2)`` for wrong
    answers (Platt 1999), which keeps the fit finite on separable data. Soft
    targets are fitted exactly by giving each item a positive copy of weight
    ``t`` and a negative copy of weight ``1 - t``.
    """
    from sklearn.linear_model import LogisticRegression

    n_pos = float(train_label.sum())
    n_neg = train_label.size - n_pos
    target = np.where(train_label == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    center, scale = train_score.mean(), train_score.std() or 1.0
    x = ((train_score - center) / scale)[:, None]
    model = LogisticRegression(C=np.inf, solver="newton-cholesky", max_iter=1000)
    model.fit(np.vstack([x, x]), np.r_[np.ones(x.shape[0]), np.zeros(x.shape[0])],
              sample_weight=np.r_[target, 1 - target])
    return model.predict_proba(((test_score - center) / scale)[:, None])[:, 1]


# ------------------------------------------------------------------------- intervals


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


def _resampled_values(loop_fn: Callable[..., float], indices: NDArray[np.integer],
                      arrays: Sequence[FloatArray], correct: FloatArray,
                      options: dict[str, Any]) -> FloatArray:
    """``loop_fn`` on each resample for each confidence array: shape (len(arrays), n_resamples)."""
    values = np.empty((len(arrays), indices.shape[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for r, idx in enumerate(indices):
            y = correct[idx]
            for a, conf in enumerate(arrays):
                values[a, r] = loop_fn(conf[idx], y, **options)
    return values


def _check_level(level: float) -> float:
    return _check_fraction(level, "level", allow_zero=False, allow_one=False)


def bootstrap_interval(metric_name_or_fn: str | Callable[..., float], confidence: ArrayLike,
                       correct: ArrayLike, *, n_resamples: int = 1000, level: float = 0.95,
                       seed: int = 0, nan_policy: NanPolicy = "raise",
                       **options: Any) -> BootstrapInterval:
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

    Examples
    --------
    >>> iv = bootstrap_interval("accuracy", [0.9, 0.2, 0.6, 0.4], [1, 0, 1, 1], n_resamples=200)
    >>> iv.point, 0.0 <= iv.low <= iv.point <= iv.high <= 1.0
    (0.75, True)
    """
    fn, loop_fn, needs_probabilities = _resolve(metric_name_or_fn)
    n_resamples = _check_count(n_resamples, "n_resamples")
    level = _check_level(level)
    point = float(fn(confidence, correct, nan_policy=nan_policy, **options))  # validates options
    conf, corr = _check_confidence_correct(confidence, correct, nan_policy,
                                           probabilities=needs_probabilities)
    indices = _resample_indices(corr.size, n_resamples, seed)
    values = _resampled_values(loop_fn, indices, [conf], corr, options)[0]
    values = values[~np.isnan(values)]
    if values.size == 0:
        return BootstrapInterval(point, math.nan, math.nan)
    low, high = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return BootstrapInterval(point, float(low), float(high))


def paired_bootstrap(metric: str | Callable[..., float], conf_a: ArrayLike, conf_b: ArrayLike,
                     correct: ArrayLike, *, n_resamples: int = 1000, seed: int = 0,
                     level: float = 0.95, nan_policy: NanPolicy = "raise",
                     **options: Any) -> dict[str, float]:
    r"""Paired bootstrap of the difference of one metric between two scorers on the same items.

    Both scorers are evaluated on the *same* resampled items, so item
    difficulty cancels:

    .. math:: \Delta = m(c_a, y) - m(c_b, y), \qquad
              \Delta^*_r = m(c_a[I_r], y[I_r]) - m(c_b[I_r], y[I_r])

    The interval is the percentile interval of :math:`\Delta^*`; the two-sided
    p-value is :math:`\min\{1,\ 2\,\#\{r: \Delta^*_r \le 0\}/B\}` when
    :math:`\Delta > 0` (``>= 0`` when :math:`\Delta < 0`; 1 when
    :math:`\Delta = 0`), over the B resamples where both are defined.

    Parameters
    ----------
    metric : str or callable
        Registered name or function.
    conf_a, conf_b : arrays of shape (n,)
        Confidences of the two scorers for the same items.
    correct : array of shape (n,)
    n_resamples : int >= 1, default 1000
    seed : int, default 0
    level : float in (0, 1), default 0.95
    nan_policy : {"raise", "omit"}, default "raise"
        "omit" drops an item if either scorer has NaN there.
    **options
        Passed to the metric.

    Returns
    -------
    dict with ``diff`` (a − b; in the metric's own direction), ``low``,
    ``high`` and ``p_value``; NaN entries if no resample was defined.

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
    """
    fn, loop_fn, needs_probabilities = _resolve(metric)
    n_resamples = _check_count(n_resamples, "n_resamples")
    level = _check_level(level)
    _check_nan_policy(nan_policy)
    a, b = _as_1d(conf_a, "conf_a"), _as_1d(conf_b, "conf_b")
    y = _as_1d(correct, "correct")
    if a.shape != b.shape or a.shape != y.shape:
        raise InvalidInputError(f"conf_a, conf_b and correct have {a.size}, {b.size} and {y.size} "
                                "values", field="conf_b")
    if nan_policy == "omit":
        keep = ~(np.isnan(a) | np.isnan(b) | np.isnan(y))
        if not keep.all():
            logger.info("dropped %d of %d rows with NaN", int((~keep).sum()), keep.size)
        a, b, y = a[keep], b[keep], y[keep]
    a, corr = _check_confidence_correct(a, y, probabilities=needs_probabilities)
    b, _ = _check_confidence_correct(b, y, probabilities=needs_probabilities)
    diff = float(fn(a, corr, **options)) - float(fn(b, corr, **options))
    indices = _resample_indices(corr.size, n_resamples, seed)
    values = _resampled_values(loop_fn, indices, [a, b], corr, options)
    deltas = values[0] - values[1]
    deltas = deltas[~np.isnan(deltas)]
    if deltas.size == 0 or math.isnan(diff):
        return {"diff": diff, "low": math.nan, "high": math.nan, "p_value": math.nan}
    low, high = np.percentile(deltas, [50 * (1 - level), 50 * (1 + level)])
    if diff > 0:
        p_value = min(1.0, 2 * float(np.mean(deltas <= 0)))
    elif diff < 0:
        p_value = min(1.0, 2 * float(np.mean(deltas >= 0)))
    else:
        p_value = 1.0
    return {"diff": diff, "low": float(low), "high": float(high), "p_value": p_value}
