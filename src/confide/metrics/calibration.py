r"""Calibration metrics: do probabilities match how often the answers are right?

Expected calibration error (equal-width and equal-mass bins), adaptive
calibration error, Brier score, log loss and the Behavioral Alignment Score,
plus the reliability diagram that draws the ECE's bins. Each needs probabilities in [0, 1]:
calibrate raw scores first with :func:`confide.metrics.crossfit.crossfit_probabilities`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import xlogy

from confide.core.errors import InvalidInputError
from confide.core.jsonsafe import json_safe
from confide.metrics.core import (
    FloatArray,
    NanPolicy,
    check_confidence_correct,
    check_count,
    equal_mass_bins,
    metric,
)

__all__ = ["ReliabilityDiagram", "adaptive_calibration_error", "bas_score", "brier_loss",
           "calibration_error", "mass_calibration_error", "nll_loss", "reliability_diagram",
           "uniform_bins"]


def _binned_gap(probability: FloatArray, correct: FloatArray, bins: NDArray[np.intp],
                n_bins: int) -> float:
    """Mass-weighted mean of ``|mean(y) - mean(p)|`` over bins = ``sum_b |S_y - S_p| / n``."""
    sum_y = np.bincount(bins, weights=correct, minlength=n_bins)
    sum_p = np.bincount(bins, weights=probability, minlength=n_bins)
    return float(np.abs(sum_y - sum_p).sum() / probability.size)


def uniform_bins(probability: FloatArray, n_bins: int) -> NDArray[np.intp]:
    """Equal-width bin index of each probability: :math:`\\min(\\lfloor pB \\rfloor, B - 1)`,
    so bin ``b`` is :math:`[b/B, (b+1)/B)` and the last bin also holds 1."""
    return np.minimum((probability * n_bins).astype(np.intp), n_bins - 1)


def _ece(confidence: FloatArray, correct: FloatArray, *, n_bins: int = 10) -> float:
    return _binned_gap(confidence, correct, uniform_bins(confidence, n_bins), n_bins)


def _ece_mass(confidence: FloatArray, correct: FloatArray, *, n_bins: int = 10) -> float:
    return _binned_gap(confidence, correct, equal_mass_bins(confidence, n_bins), n_bins)


def _ace(confidence: FloatArray, correct: FloatArray, *, n_bins: int = 10) -> float:
    def class_error(probability: FloatArray, label: FloatArray, bins: NDArray[np.intp]) -> float:
        counts = np.bincount(bins, minlength=n_bins)
        used = counts > 0
        gap = (np.bincount(bins, weights=label, minlength=n_bins)
               - np.bincount(bins, weights=probability, minlength=n_bins))[used] / counts[used]
        return float(np.mean(np.abs(gap)))

    correct_class = class_error(confidence, correct, equal_mass_bins(confidence, n_bins))
    wrong_class = class_error(1.0 - confidence, 1.0 - correct,
                              equal_mass_bins(-confidence, n_bins))
    return (correct_class + wrong_class) / 2


def _brier(confidence: FloatArray, correct: FloatArray) -> float:
    return float(np.mean((confidence - correct) ** 2))


def _nll(confidence: FloatArray, correct: FloatArray) -> float:
    with np.errstate(divide="ignore"):
        return float(-np.mean(xlogy(correct, confidence) + xlogy(1.0 - correct, 1.0 - confidence)))


def _check_n_bins(n_bins: int) -> int:
    return check_count(n_bins, "n_bins")


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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy, probabilities=True)
    n_thresholds = check_count(n_thresholds, "n_thresholds")
    return _bas(conf, corr, n_thresholds=n_thresholds)



# ------------------------------------------------------------------ reliability diagram


@dataclass(frozen=True)
class ReliabilityDiagram:
    """Per-bin data of a reliability diagram (arrays of length ``n_bins``).

    ``centers``: the middle of each bin; ``lower``/``upper``: its edges;
    ``mean_confidence`` and ``accuracy``: mean probability and mean
    correctness of the items in the bin (NaN for an empty bin); ``counts``:
    items per bin.
    """

    lower: FloatArray
    upper: FloatArray
    centers: FloatArray
    mean_confidence: FloatArray
    accuracy: FloatArray
    counts: NDArray[np.int64]

    def to_dict(self) -> dict[str, list[float | None] | list[int]]:
        """Plain lists; an empty bin's NaN is null."""
        return json_safe({"lower": self.lower, "upper": self.upper, "centers": self.centers,
                          "mean_confidence": self.mean_confidence, "accuracy": self.accuracy,
                          "counts": self.counts})


def reliability_diagram(probability: ArrayLike, correct: ArrayLike, *, n_bins: int = 10,
                        strategy: Literal["uniform", "quantile"] = "uniform",
                        nan_policy: NanPolicy = "raise") -> ReliabilityDiagram:
    r"""Bin probabilities and compare each bin's accuracy with its mean probability.

    .. math:: \mathrm{acc}(B_b) = \frac{1}{|B_b|}\sum_{i \in B_b} y_i, \qquad
              \mathrm{conf}(B_b) = \frac{1}{|B_b|}\sum_{i \in B_b} p_i

    A calibrated model has :math:`\mathrm{acc}(B_b) \approx \mathrm{conf}(B_b)`
    in every bin; with ``uniform`` bins, :math:`\sum_b \frac{|B_b|}{n}
    |\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|` is :func:`calibration_error`.

    Parameters
    ----------
    probability : array of shape (n,), in [0, 1]
    correct : array of shape (n,), in [0, 1]
    n_bins : int >= 1, default 10
    strategy : {"uniform", "quantile"}, default "uniform"
        ``uniform``: the bins of :func:`uniform_bins`; ``quantile``: edges at
        the probability quantiles (equal-mass bins; tied values may leave a
        bin empty).
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    ReliabilityDiagram

    References
    ----------
    [1] M. H. DeGroot, S. E. Fienberg (1983). The comparison and evaluation of
        forecasters. The Statistician 32.
    [2] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger (2017). On Calibration of
        Modern Neural Networks. ICML.

    Examples
    --------
    >>> d = reliability_diagram([0.1, 0.2, 0.8, 0.9], [0, 1, 1, 1], n_bins=2)
    >>> d.centers.tolist(), d.accuracy.tolist(), d.counts.tolist()
    ([0.25, 0.75], [0.5, 1.0], [2, 2])
    """
    n_bins = check_count(n_bins, "n_bins")
    prob, corr = check_confidence_correct(probability, correct, nan_policy, probabilities=True)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        bins = uniform_bins(prob, n_bins)
    elif strategy == "quantile":
        edges = np.quantile(prob, np.linspace(0.0, 1.0, n_bins + 1))
        edges[0], edges[-1] = 0.0, 1.0
        bins = np.clip(np.searchsorted(edges, prob, side="right") - 1, 0, n_bins - 1)
    else:
        raise InvalidInputError(f"must be 'uniform' or 'quantile', got {strategy!r}",
                                field="strategy")
    counts = np.bincount(bins, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.bincount(bins, weights=corr, minlength=n_bins) / counts
        mean_conf = np.bincount(bins, weights=prob, minlength=n_bins) / counts
    return ReliabilityDiagram(lower=edges[:-1], upper=edges[1:],
                              centers=(edges[:-1] + edges[1:]) / 2,
                              mean_confidence=mean_conf, accuracy=accuracy, counts=counts)
