r"""Selective-prediction metrics: what happens when the least confident answers are withheld.

Accuracy, the prediction–rejection ratio, the risk–coverage curve and its area
(AURC, E-AURC), risk at a coverage and coverage at a risk, and accuracy among
the most confident fractions. Ties in confidence give the exact expectation over
all orders of the tied items (:func:`confide.metrics.core.tie_averaged`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from confide.metrics.core import (
    FloatArray,
    NanPolicy,
    ceil_count,
    check_confidence_correct,
    check_fraction,
    floor_count,
    metric,
    tie_averaged,
    warn_undefined,
)

__all__ = ["accuracy_at_fractions", "accuracy_score", "aurc_loss", "coverage_at_risk_score",
           "eaurc_loss", "prr_score", "risk_at_coverage", "risk_coverage_curve"]


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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    return _accuracy(conf, corr)


def _prr(confidence: FloatArray, correct: FloatArray, *, max_rejection: float = 0.5) -> float:
    n = correct.size
    k_max = min(floor_count(max_rejection, n), n - 1)
    if k_max < 1 or np.all(correct == correct[0]):
        return warn_undefined("PRR needs varying correctness and at least one rejected item "
                               "(max_rejection * n >= 1); returning NaN")
    total = correct.sum()
    k = np.arange(k_max + 1)

    def area(rejection_order: FloatArray) -> float:
        rejected = np.concatenate(([0.0], np.cumsum(rejection_order[:k_max])))
        return float(np.mean((total - rejected) / (n - k)))

    scorer = area(tie_averaged(confidence, correct, descending=False))
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
    the curve, divided by its width: both ends counted, no rejection and
    :math:`K` rejections. Then

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

    This is confide's estimator, not LM-Polygraph's. Polygraph's
    ``PredictionRejectionArea(max_rejection=r)`` (the ``prr_0.5`` of its
    benchmark) averages over :math:`k = 0 .. K - 1` only, leaving out the last
    rejection:

    .. math:: A_{\text{Polygraph}} = \frac{1}{K}\sum_{k=0}^{K-1} q(k),
              \qquad K = \lfloor r n \rfloor,

    takes the random area as the mean over 1000 seeded random orders (whose
    expectation is :math:`\bar y`, used here exactly), min–max scales the
    quality first (no change for 0/1 correctness) and breaks ties by the order
    of ``np.argsort``. Without ties its figure at ``r`` is therefore this
    function's at ``max_rejection = (⌊rn⌋ − 1)/n`` up to its Monte-Carlo
    random baseline, and the two agree at ``r = 1`` (both average
    :math:`k = 0 .. n-1`). They can differ a lot on small sets: in the first
    example below (n = 4, r = 0.5) Polygraph averages :math:`q(0), q(1)` and
    gives 1.0, where this function, which also counts the second rejection (a
    right answer withheld), gives 0.25 (``tests/test_metrics.py``). Tables
    report this estimator; do not put its figures beside Polygraph's as the
    same number.

    References
    ----------
    [1] A. Malinin, M. Gales (2021). Uncertainty Estimation in Autoregressive
        Structured Prediction. ICLR.
    [2] E. Fadeeva et al. (2023). LM-Polygraph: Uncertainty Estimation for
        Language Models. EMNLP demo.

    Examples
    --------
    >>> round(prr_score([0.2, 0.9, 0.5, 0.7], [0, 1, 1, 0]), 4)  # Polygraph: 1.0
    0.25
    >>> round(prr_score([0.2, 0.9, 0.5, 0.7], [0, 1, 1, 0], max_rejection=0.25), 4)
    1.0
    >>> prr_score([0.9, 0.2, 0.6, 0.4], [1, 0, 1, 1])
    1.0
    >>> round(prr_score([0.9, 0.2, 0.6, 0.4], [0, 1, 1, 1]), 4)
    -0.6667
    """
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    max_rejection = check_fraction(max_rejection, "max_rejection", allow_zero=False,
                                    allow_one=True)
    return _prr(conf, corr, max_rejection=max_rejection)


def _selective_risks(confidence: FloatArray, correct: FloatArray) -> FloatArray:
    """Risk (1 - mean quality) of the ``k`` most confident items, ``k = 1..n``, ties averaged."""
    quality = tie_averaged(confidence, correct, descending=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    return _eaurc(conf, corr)


def _risk_at_coverage(confidence: FloatArray, correct: FloatArray, *,
                      coverage: float = 0.8) -> float:
    k = max(1, ceil_count(coverage, correct.size))
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    coverage = check_fraction(coverage, "coverage", allow_zero=False, allow_one=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    risk = check_fraction(risk, "risk", allow_zero=True, allow_one=True)
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
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    checked = [check_fraction(f, "fractions", allow_zero=False, allow_one=True) for f in fractions]
    accuracy = 1.0 - _selective_risks(conf, corr)
    return {f: float(accuracy[max(1, ceil_count(f, corr.size)) - 1]) for f in checked}



def risk_coverage_curve(confidence: ArrayLike, correct: ArrayLike, *,
                        nan_policy: NanPolicy = "raise") -> tuple[FloatArray, FloatArray]:
    r"""The risk–coverage curve: selective risk of the ``k`` most confident answers.

    .. math:: \mathrm{risk}(k) = \frac1k \sum_{j \le k} \big(1 - y_{(j)}\big),
              \qquad \mathrm{coverage}(k) = k/n, \quad k = 1..n

    with items :math:`(j)` in decreasing confidence; its mean over ``k`` is
    :func:`aurc_loss`.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    (coverage, risk): two arrays of shape (n,); coverage increases to 1.

    Notes
    -----
    Ties as in :func:`aurc_loss` (each tied item's quality replaced by its tie
    group's mean).

    References
    ----------
    [1] R. El-Yaniv, Y. Wiener (2010). On the Foundations of Noise-free Selective
        Classification. JMLR 11.

    Examples
    --------
    >>> coverage, risk = risk_coverage_curve([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0])
    >>> coverage.tolist(), risk.round(3).tolist()
    ([0.25, 0.5, 0.75, 1.0], [0.0, 0.5, 0.333, 0.5])
    """
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    return np.arange(1, corr.size + 1) / corr.size, _selective_risks(conf, corr)
