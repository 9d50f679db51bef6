r"""Ranking metrics: does higher confidence go with right answers?

AUROC, AUPRC (correct or wrong answers as the positive class), Spearman
correlation and the rank-calibration error. All depend on the order of the
confidences only.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from confide.metrics.core import (
    FloatArray,
    NanPolicy,
    check_confidence_correct,
    check_count,
    check_fraction,
    equal_mass_bins,
    has_both_classes,
    metric,
    warn_undefined,
)

__all__ = ["auprc_correct_score", "auprc_error_score", "auroc_score", "rank_calibration_error",
           "spearman_score"]


def _auroc(confidence: FloatArray, correct: FloatArray, *, threshold: float = 0.5) -> float:
    positive = correct >= threshold
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return warn_undefined("AUROC needs both correct and wrong answers; returning NaN")
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    threshold = check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
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
    if not has_both_classes(positive):
        return warn_undefined("AUPRC needs both correct and wrong answers; returning NaN")
    return _average_precision(confidence, positive)


def _auprc_error(confidence: FloatArray, correct: FloatArray, *, threshold: float = 0.5) -> float:
    positive = correct < threshold
    if not has_both_classes(positive):
        return warn_undefined("AUPRC needs both correct and wrong answers; returning NaN")
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    threshold = check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    threshold = check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
    return _auprc_error(conf, corr, threshold=threshold)


def _spearman(confidence: FloatArray, correct: FloatArray) -> float:
    if np.all(confidence == confidence[0]) or np.all(correct == correct[0]):
        return warn_undefined("Spearman correlation needs non-constant confidence and "
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    return _spearman(conf, corr)


def _rank_calibration_error(confidence: FloatArray, correct: FloatArray, *,
                            n_bins: int = 20) -> float:
    if np.all(correct == correct[0]):
        return warn_undefined("rank-calibration error needs varying correctness; returning NaN")
    bins = equal_mass_bins(confidence, n_bins)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    n_bins = check_count(n_bins, "n_bins")
    return _rank_calibration_error(conf, corr, n_bins=n_bins)

