r"""Audits of an evaluation: is a scorer's lead real, or an artefact of answer length?

Answer length drives both many confidence scores (a long answer has a low
total log-probability) and many graders (ROUGE and F1 reward or punish length).
Santilli et al. (2025) show that such a shared dependence can create, hide or
reverse a scorer's lead in AUROC. These functions check for it:

- :func:`length_correlations`: how strongly confidence and correctness each
  follow length;
- :func:`stratified_auroc`: AUROC within strata of similar length, so length
  cannot carry the ranking;
- :func:`lead_disappears`: does a scorer's win over the length baseline
  survive stratification?
- :func:`ranking_agreement`: do different graders rank the scorers alike?

References
----------
[1] A. Santilli, A. Golinski, M. Kirchhof, F. Danieli, A. Blaas, M. Xiong,
    L. Zappella, S. Williamson (2025). Revisiting Uncertainty Quantification
    Evaluation in Language Models: Spurious Interactions with Response Length
    Bias Results. ACL.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Hashable, Mapping

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

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
    equal_mass_bins,
)

__all__ = ["length_correlations", "lead_disappears", "ranking_agreement", "stratified_auroc"]

# the registered maths on validated arrays (inputs are checked once, here)
_auroc = METRICS["auroc"].helper
_spearman = METRICS["spearman"].helper


def _check_with_lengths(confidence: ArrayLike, correct: ArrayLike, lengths: ArrayLike,
                        nan_policy: str) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Validate three aligned arrays; a NaN in any of them follows ``nan_policy``."""
    check_nan_policy(nan_policy)
    conf, corr = as_1d(confidence, "confidence"), as_1d(correct, "correct")
    length = as_1d(lengths, "lengths")
    if not conf.shape == corr.shape == length.shape:
        raise InvalidInputError(f"confidence, correct and lengths have {conf.size}, {corr.size} "
                                f"and {length.size} values", field="lengths")
    if np.isnan(length).any() and nan_policy == "raise":
        raise InvalidInputError("NaN value(s); pass nan_policy='omit' to drop those rows",
                                field="lengths")
    if nan_policy == "omit":
        keep = ~(np.isnan(conf) | np.isnan(corr) | np.isnan(length))
        conf, corr, length = conf[keep], corr[keep], length[keep]
    conf, corr = check_confidence_correct(conf, corr, nan_policy)
    if not np.isfinite(length).all():
        raise InvalidInputError("must be finite", field="lengths")
    return conf, corr, length


def length_correlations(confidence: ArrayLike, correct: ArrayLike, lengths: ArrayLike, *,
                        nan_policy: NanPolicy = "raise") -> dict[str, float]:
    r"""Spearman correlations of confidence and of correctness with answer length.

    .. math::

        \rho_{c,\ell} = \mathrm{corr}\big(\mathrm{rank}(c), \mathrm{rank}(\ell)\big),
        \qquad
        \rho_{y,\ell} = \mathrm{corr}\big(\mathrm{rank}(y), \mathrm{rank}(\ell)\big)

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
    lengths : array of shape (n,)
        Answer lengths (tokens or characters).
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    dict with ``conf_length_spearman`` and ``correct_length_spearman``, each in
    [-1, 1]. Both far from 0 (with the same or opposite sign) means length can
    drive the metric.

    Notes
    -----
    Average ranks for ties. A constant array gives NaN with ``UndefinedMetricWarning``.

    References
    ----------
    [1] A. Santilli et al. (2025). Revisiting Uncertainty Quantification
        Evaluation in Language Models: Spurious Interactions with Response
        Length Bias Results. ACL.

    Examples
    --------
    >>> length_correlations([0.9, 0.2, 0.6, 0.4], [1, 0, 1, 0], [3, 40, 10, 25])
    {'conf_length_spearman': -1.0, 'correct_length_spearman': -0.8944271909999159}
    """
    conf, corr, length = _check_with_lengths(confidence, correct, lengths, nan_policy)
    return {"conf_length_spearman": _spearman(conf, length),
            "correct_length_spearman": _spearman(corr, length)}


def _stratified_auroc(conf: FloatArray, corr: FloatArray, length: FloatArray, n_strata: int,
                      threshold: float) -> float:
    strata = equal_mass_bins(length, n_strata)
    total, weight = 0.0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for s in np.unique(strata):
            inside = strata == s
            value = _auroc(conf[inside], corr[inside], threshold=threshold)
            if not math.isnan(value):
                total += value * int(inside.sum())
                weight += int(inside.sum())
    if weight == 0:
        warnings.warn("no length stratum holds both correct and wrong answers; returning NaN",
                      UndefinedMetricWarning, stacklevel=3)
        return math.nan
    return total / weight


def stratified_auroc(confidence: ArrayLike, correct: ArrayLike, lengths: ArrayLike, *,
                     n_strata: int = 4, threshold: float = 0.5,
                     nan_policy: NanPolicy = "raise") -> float:
    r"""AUROC within answer-length strata, averaged weighted by stratum size.

    Split the items into ``S = n_strata`` equal-mass strata of length
    (quantiles; tied lengths share a stratum), compute AUROC inside each
    stratum :math:`s` with both classes, and average:

    .. math::

        \mathrm{AUROC}_{\text{strat}} = \frac{\sum_{s \in D} n_s\, \mathrm{AUROC}_s}
                                             {\sum_{s \in D} n_s}

    where :math:`D` is the set of strata holding both correct and wrong answers.

    Parameters
    ----------
    confidence : array of shape (n,)
    correct : array of shape (n,), values in [0, 1]
        Binarised as ``correct >= threshold``.
    lengths : array of shape (n,)
    n_strata : int >= 1, default 4
    threshold : float in (0, 1], default 0.5
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    float in [0, 1]; higher is better. Within a stratum length varies little,
    so a ranking that only follows length falls towards 0.5.

    Notes
    -----
    Strata with one class are skipped (their weight is dropped, not counted as
    0.5). Ties in confidence count 1/2 as in :func:`confide.metrics.auroc_score`.
    With ``n_strata=1`` it is the plain AUROC. Undefined (warning, NaN) when no
    stratum holds both classes.

    References
    ----------
    [1] A. Santilli et al. (2025). Revisiting Uncertainty Quantification
        Evaluation in Language Models: Spurious Interactions with Response
        Length Bias Results. ACL.

    Examples
    --------
    Three strata of two answers; the confidence ranks the pair right in the
    first and last stratum and backwards in the middle one, so (2·1 + 2·0 + 2·1)/6:

    >>> stratified_auroc([0.9, 0.8, 0.2, 0.3, 0.5, 0.4], [1, 0, 1, 0, 1, 0],
    ...                  [1, 2, 3, 4, 5, 6], n_strata=3)
    0.6666666666666666
    """
    conf, corr, length = _check_with_lengths(confidence, correct, lengths, nan_policy)
    n_strata = check_count(n_strata, "n_strata")
    threshold = check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
    return _stratified_auroc(conf, corr, length, n_strata, threshold)


def lead_disappears(conf: ArrayLike, length_conf: ArrayLike, correct: ArrayLike,
                    lengths: ArrayLike, n_strata: int = 4, *, threshold: float = 0.5,
                    nan_policy: NanPolicy = "raise") -> bool:
    r"""Whether a scorer beats the length baseline by plain AUROC but not within length strata.

    .. math::

        \mathrm{AUROC}(c) > \mathrm{AUROC}(c_\ell)
        \ \wedge\
        \mathrm{AUROC}_{\text{strat}}(c) \le \mathrm{AUROC}_{\text{strat}}(c_\ell)

    Parameters
    ----------
    conf : array of shape (n,)
        The scorer under audit.
    length_conf : array of shape (n,)
        The length baseline's confidence (for example ``-lengths``).
    correct, lengths : arrays of shape (n,)
    n_strata : int >= 1, default 4
    threshold : float in (0, 1], default 0.5
    nan_policy : {"raise", "omit"}, default "raise"
        "omit" drops rows where either scorer is NaN.

    Returns
    -------
    bool: True when the lead exists overall and vanishes after stratification,
    i.e. the lead is plausibly a length artefact. False when there is no lead
    to begin with or it survives. A NaN AUROC compares False.

    Notes
    -----
    A point comparison; use :func:`confide.metrics.paired_bootstrap` for its
    uncertainty.

    References
    ----------
    [1] A. Santilli et al. (2025). Revisiting Uncertainty Quantification
        Evaluation in Language Models: Spurious Interactions with Response
        Length Bias Results. ACL.

    Examples
    --------
    Here the scorer (AUROC 5/9) does not beat the length baseline (6/9) at all:

    >>> lengths = [1, 2, 3, 4, 5, 6]
    >>> lead_disappears([0.9, 0.8, 0.2, 0.3, 0.5, 0.4], [-x for x in lengths],
    ...                 [1, 0, 1, 0, 1, 0], lengths, n_strata=3)
    False
    """
    a, b = as_1d(conf, "conf"), as_1d(length_conf, "length_conf")
    if a.shape != b.shape:
        raise InvalidInputError(f"conf has {a.size} values but length_conf has {b.size}",
                                field="length_conf")
    if nan_policy == "omit":  # drop a row for both scorers if either lacks a value
        keep = ~(np.isnan(a) | np.isnan(b))
        a, b = a[keep], b[keep]
        correct, lengths = as_1d(correct, "correct")[keep], as_1d(lengths, "lengths")[keep]
    a, y_a, length_a = _check_with_lengths(a, correct, lengths, nan_policy)
    b, y_b, length_b = _check_with_lengths(b, correct, lengths, nan_policy)
    n_strata = check_count(n_strata, "n_strata")
    threshold = check_fraction(threshold, "threshold", allow_zero=False, allow_one=True)
    plain_lead = _auroc(a, y_a, threshold=threshold) > _auroc(b, y_b, threshold=threshold)
    strat_a = _stratified_auroc(a, y_a, length_a, n_strata, threshold)
    strat_b = _stratified_auroc(b, y_b, length_b, n_strata, threshold)
    return bool(plain_lead and not strat_a > strat_b)


def ranking_agreement(scores_by_grader: Mapping[Hashable, Mapping[Hashable, float]]
                      ) -> dict[tuple[Hashable, Hashable], float]:
    r"""Kendall's tau between graders' rankings of the scorers, for every pair of graders.

    For graders :math:`g, h` and the scorers both have a value for (NaN values
    excluded),

    .. math:: \tau_{g,h} = \tau_b\big(m_g(s_1..s_K),\ m_h(s_1..s_K)\big)

    (``scipy.stats.kendalltau``, tau-b, which corrects for ties).

    Parameters
    ----------
    scores_by_grader : mapping grader -> mapping scorer -> metric value
        For example each scorer's AUROC under each grader.

    Returns
    -------
    dict mapping ``(g1, g2)`` (pairs in the mapping's order, ``g1`` first) to
    tau in [-1, 1]; 1 means the graders rank the scorers identically.

    Notes
    -----
    Fewer than two shared scorers, or a constant ranking, gives NaN with
    ``UndefinedMetricWarning``. Santilli et al. find that graders biased by
    length can reorder scorers; low tau flags it.

    References
    ----------
    [1] M. G. Kendall (1945). The treatment of ties in ranking problems. Biometrika 33(3).
    [2] A. Santilli et al. (2025). Revisiting Uncertainty Quantification
        Evaluation in Language Models: Spurious Interactions with Response
        Length Bias Results. ACL.

    Examples
    --------
    >>> tau = ranking_agreement({"exact": {"a": 0.7, "b": 0.6, "c": 0.5},
    ...                          "rouge": {"a": 0.8, "b": 0.5, "c": 0.6}})
    >>> {pair: round(t, 4) for pair, t in tau.items()}
    {('exact', 'rouge'): 0.3333}
    """
    result: dict[tuple[Hashable, Hashable], float] = {}
    for g1, g2 in itertools.combinations(scores_by_grader, 2):
        first, second = scores_by_grader[g1], scores_by_grader[g2]
        shared = [s for s in first if s in second
                  and not (math.isnan(float(first[s])) or math.isnan(float(second[s])))]
        x = np.array([float(first[s]) for s in shared])
        y = np.array([float(second[s]) for s in shared])
        if len(shared) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
            warnings.warn(f"graders {g1!r} and {g2!r}: need two or more shared scorers with "
                          "varying values; tau is NaN", UndefinedMetricWarning, stacklevel=2)
            result[(g1, g2)] = math.nan
            continue
        result[(g1, g2)] = float(stats.kendalltau(x, y).statistic)
    return result
