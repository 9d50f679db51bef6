r"""The calibration core: calibrators of raw scores and the one cross-fitting fold rule.

Three calibrators map a raw confidence to the probability that the answer is
right; each is fitted to plain parameters (JSON-safe lists and floats) and
applied by :func:`apply_calibration`:

=============  ============================================================
``platt``      :math:`\hat p(c) = \sigma(a c + b)`, fitted by logistic
               regression with Platt's smoothed targets (Platt, 1999);
               params ``{"a", "b"}``
``isotonic``   the monotone step-and-ramp function of pool-adjacent-violators
               (Zadrozny & Elkan, 2002); params: its knots ``{"x", "y"}``
``histogram``  equal-mass bins of the raw score, each mapped to its mean
               correctness (Zadrozny & Elkan, 2001); params ``{"edges", "values"}``
=============  ============================================================

**The fold rule.** Every cross-fitted number in confide (calibration metrics in
the evaluation, the report's reliability diagrams, ``confide calibrate``'s
out-of-fold error, the learned probes' out-of-fold scores) uses
:func:`crossfit_splits`: ``K = min(n_folds, n_right, n_wrong)`` stratified,
shuffled, seeded folds (scikit-learn's ``StratifiedKFold``), with correctness
binarised at 0.5. So every training split holds right and wrong answers, and
cross-fitting needs at least two of each.

References
----------
[1] J. Platt (1999). Probabilistic outputs for support vector machines and
    comparisons to regularized likelihood methods.
[2] B. Zadrozny, C. Elkan (2001). Obtaining calibrated probability estimates
    from decision trees and naive Bayesian classifiers. ICML (histogram binning).
[3] B. Zadrozny, C. Elkan (2002). Transforming classifier scores into accurate
    multiclass probability estimates. KDD (isotonic regression).
[4] V. Chernozhukov et al. (2018). Double/debiased machine learning for
    treatment and structural parameters. Econometrics Journal (cross-fitting).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.metrics.core import (
    FloatArray,
    NanPolicy,
    as_1d,
    check_confidence_correct,
    check_count,
)

__all__ = ["CALIBRATION_METHODS", "DEFAULT_FOLDS", "CrossfitCV", "Method", "apply_calibration",
           "check_calibration_data", "crossfit_folds", "crossfit_probabilities",
           "crossfit_splits", "fit_calibration"]

Method = Literal["platt", "isotonic", "histogram"]
CALIBRATION_METHODS: tuple[str, ...] = ("platt", "isotonic", "histogram")
#: Upper bound on the folds of every cross-fit (fewer when a class is smaller).
DEFAULT_FOLDS = 5


# --------------------------------------------------------------------------- folds


def crossfit_splits(correct: ArrayLike, *, n_folds: int = DEFAULT_FOLDS, seed: int = 0
                    ) -> list[tuple[NDArray[np.intp], NDArray[np.intp]]]:
    r"""The one fold rule: ``(train, test)`` index pairs of a stratified, seeded K-fold split.

    .. math:: K = \min(n_{\text{folds}},\ n_{\text{right}},\ n_{\text{wrong}})

    with an answer right when ``correct >= 0.5``; scikit-learn's
    ``StratifiedKFold(K, shuffle=True, random_state=seed)``. Each test fold
    holds about ``1/K`` of each class, and each training split both classes.

    Parameters
    ----------
    correct : array of shape (n,), values in [0, 1]
    n_folds : int >= 2, default 5
        Upper bound on K.
    seed : int, default 0

    Returns
    -------
    list of K ``(train_indices, test_indices)`` pairs; the test folds partition
    ``0..n-1``. Usable as ``cv=`` of scikit-learn's ``cross_val_predict`` and
    ``GridSearchCV``.

    Raises
    ------
    InvalidInputError
        When fewer than two answers are right or fewer than two wrong.

    Examples
    --------
    >>> [test.tolist() for _, test in crossfit_splits([1, 0, 1, 0, 1, 0], n_folds=2)]
    [[2, 3, 4], [0, 1, 5]]
    """
    from sklearn.model_selection import StratifiedKFold

    n_folds = check_count(n_folds, "n_folds", minimum=2)
    right = as_1d(correct, "correct") >= 0.5
    n_right = int(right.sum())
    k = min(n_folds, n_right, right.size - n_right)
    if k < 2:
        raise InvalidInputError(
            f"cross-fitting needs at least 2 correct and 2 wrong answers; got {n_right} "
            f"correct of {right.size}", field="correct")
    splitter = StratifiedKFold(k, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(right.size), right))


def crossfit_folds(correct: ArrayLike, *, n_folds: int = DEFAULT_FOLDS, seed: int = 0
                   ) -> NDArray[np.intp]:
    """Fold index of each item under :func:`crossfit_splits`.

    >>> crossfit_folds([1, 0, 1, 0, 1, 0], n_folds=2).tolist()
    [1, 1, 0, 0, 0, 1]
    """
    splits = crossfit_splits(correct, n_folds=n_folds, seed=seed)
    fold = np.empty(sum(test.size for _, test in splits), dtype=np.intp)
    for k, (_, test) in enumerate(splits):
        fold[test] = k
    return fold


class CrossfitCV:
    """The fold rule of :func:`crossfit_splits` as a scikit-learn CV splitter, for
    ``cv=`` of ``cross_val_predict`` or ``GridSearchCV`` where the labels are only
    known at fit time (nested cross-validation).

    >>> CrossfitCV(3).get_n_splits(None, [1, 1, 0, 0, 0, 1, 1])
    3
    """

    def __init__(self, n_folds: int = DEFAULT_FOLDS, seed: int = 0) -> None:
        self.n_folds, self.seed = n_folds, seed

    def split(self, x: Any = None, y: ArrayLike | None = None, groups: Any = None
              ) -> list[tuple[NDArray[np.intp], NDArray[np.intp]]]:
        if y is None:
            raise InvalidInputError("cross-fitting splits by correctness; pass y",
                                    field="correct")
        return crossfit_splits(y, n_folds=self.n_folds, seed=self.seed)

    def get_n_splits(self, x: Any = None, y: ArrayLike | None = None, groups: Any = None) -> int:
        return len(self.split(x, y))


# --------------------------------------------------------------------------- calibrators


def _fit_platt(score: FloatArray, label: FloatArray) -> dict[str, float]:
    r"""Platt scaling: maximise the likelihood of smoothed targets under :math:`\sigma(a c + b)`.

    Targets :math:`t_+ = (N_+ + 1)/(N_+ + 2)` for right and :math:`t_- = 1/(N_- + 2)`
    for wrong answers (Platt 1999) keep the fit finite on separable data. Fitted
    by unpenalised logistic regression on the standardised score (each item a
    positive copy of weight t and a negative copy of weight 1 - t); the slope and
    intercept are mapped back to the raw scale.
    """
    from sklearn.linear_model import LogisticRegression

    n_pos = float(label.sum())
    n_neg = label.size - n_pos
    target = np.where(label == 1, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    center, scale = float(score.mean()), float(score.std()) or 1.0
    x = ((score - center) / scale)[:, None]
    model = LogisticRegression(C=np.inf, solver="newton-cholesky", max_iter=1000)
    model.fit(np.vstack([x, x]), np.r_[np.ones(x.shape[0]), np.zeros(x.shape[0])],
              sample_weight=np.r_[target, 1 - target])
    w, w0 = float(model.coef_[0, 0]), float(model.intercept_[0])
    return {"a": w / scale, "b": w0 - w * center / scale}


def _fit_isotonic(score: FloatArray, label: FloatArray) -> dict[str, list[float]]:
    """Pool-adjacent-violators fit (scikit-learn); keep its knots for ``np.interp``."""
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0, increasing=True)
    iso.fit(score, label)
    return {"x": [float(v) for v in iso.X_thresholds_],
            "y": [float(v) for v in np.clip(iso.y_thresholds_, 0.0, 1.0)]}


def _fit_histogram(score: FloatArray, label: FloatArray, n_bins: int) -> dict[str, list[float]]:
    """Equal-mass bins: inner edges at the ``j/B`` quantiles (data values), bin ``j`` is
    ``(e_{j-1}, e_j]``, so tied scores share a bin."""
    qs = np.quantile(score, np.arange(1, n_bins) / n_bins, method="inverted_cdf")
    # the quantiles are data values, so every bin (e_{j-1}, e_j] holds its upper edge; only
    # the last bin (c > e_last) can be empty, when e_last is the largest score: drop that edge
    edges = np.unique(qs)
    edges = edges[edges < score.max()]
    bins = np.searchsorted(edges, score, side="left")
    counts = np.bincount(bins, minlength=edges.size + 1)
    values = np.bincount(bins, weights=label, minlength=edges.size + 1) / np.maximum(counts, 1)
    return {"edges": [float(e) for e in edges], "values": [float(v) for v in values]}


def check_calibration_data(confidence: ArrayLike, correct: ArrayLike, *, method: str,
                           nan_policy: NanPolicy = "raise") -> tuple[FloatArray, FloatArray]:
    """Validate scores and correctness for fitting a calibrator; return them as float arrays.

    Refuses an unknown ``method``, infinite scores, fewer than two items, a
    single class (nothing to calibrate against) and, for Platt, non-binary
    correctness (:class:`~confide.core.errors.InvalidInputError` naming the field).
    """
    if method not in CALIBRATION_METHODS:
        raise InvalidInputError(f"must be one of {', '.join(CALIBRATION_METHODS)}, "
                                f"got {method!r}", field="method")
    conf, corr = check_confidence_correct(confidence, correct, nan_policy)
    if not np.isfinite(conf).all():
        raise InvalidInputError("scores must be finite to be calibrated", field="confidence")
    if conf.size < 2:
        raise InvalidInputError(f"needs at least 2 graded items, got {conf.size}",
                                field="confidence")
    if corr.min() == corr.max():
        raise InvalidInputError("all items have the same correctness; a calibrator needs "
                                "both right and wrong answers", field="correct")
    if method == "platt" and not np.isin(corr, (0.0, 1.0)).all():
        raise InvalidInputError("Platt scaling needs binary correctness", field="correct")
    return conf, corr


def fit_calibration(confidence: ArrayLike, correct: ArrayLike, *, method: Method = "isotonic",
                    n_bins: int = 10, nan_policy: NanPolicy = "raise") -> dict[str, Any]:
    r"""Fit a calibrator of raw confidences to correctness; return its parameters.

    .. math:: \hat g = \arg\min_{g \in \mathcal G} \sum_i \ell(g(c_i), y_i)

    with :math:`\mathcal G` the sigmoids :math:`\sigma(a c + b)` (``platt``,
    log loss on smoothed targets), the non-decreasing functions
    (``isotonic``, squared loss) or the functions constant on ``n_bins``
    equal-mass bins (``histogram``, squared loss, i.e. bin means).

    Parameters
    ----------
    confidence : array of shape (n,)
        Raw scores, finite.
    correct : array of shape (n,), values in [0, 1]
        Platt needs binary correctness; isotonic and histogram accept
        continuous quality.
    method : {"platt", "isotonic", "histogram"}, default "isotonic"
    n_bins : int >= 1, default 10
        Histogram only; fewer bins result where scores tie.
    nan_policy : {"raise", "omit"}, default "raise"

    Returns
    -------
    dict of plain floats and lists, read by :func:`apply_calibration`.

    Raises
    ------
    InvalidInputError
        See :func:`check_calibration_data`.

    References
    ----------
    Platt (1999); Zadrozny & Elkan (2001, 2002); see the module docstring.

    Examples
    --------
    >>> fit_calibration([0.1, 0.2, 0.7, 0.9], [0, 1, 0, 1], method="isotonic")
    {'x': [0.1, 0.2, 0.7, 0.9], 'y': [0.0, 0.5, 0.5, 1.0]}
    """
    n_bins = check_count(n_bins, "n_bins")
    conf, corr = check_calibration_data(confidence, correct, method=method,
                                        nan_policy=nan_policy)
    if method == "platt":
        return _fit_platt(conf, corr)
    if method == "isotonic":
        return _fit_isotonic(conf, corr)
    return _fit_histogram(conf, corr, n_bins)


def apply_calibration(method: str, params: dict[str, Any], confidence: ArrayLike) -> FloatArray:
    r"""Calibrated probabilities of raw confidences under fitted ``params`` (NaN stays NaN).

    ``platt``: :math:`\sigma(a c + b)`; ``isotonic``: linear between the knots,
    constant outside; ``histogram``: the value of the bin ``(e_{j-1}, e_j]``.

    >>> apply_calibration("platt", {"a": 2.0, "b": 0.0}, [0.0, float("nan")]).tolist()
    [0.5, nan]
    """
    raw = np.asarray(confidence, dtype=np.float64)
    out = np.full(raw.shape, np.nan)
    ok = ~np.isnan(raw)
    c = raw[ok]
    if method == "platt":
        from scipy.special import expit

        with np.errstate(invalid="ignore"):  # 0 * inf when a == 0 and c == ±inf
            z = params["a"] * c + params["b"]
        out[ok] = expit(np.where(np.isnan(z), params["b"], z))
    elif method == "isotonic":
        out[ok] = np.interp(c, params["x"], params["y"])
    elif method == "histogram":
        out[ok] = np.asarray(params["values"])[np.searchsorted(params["edges"], c, side="left")]
    else:
        raise InvalidInputError(f"unknown method {method!r}", field="method")
    return out


# --------------------------------------------------------------------------- cross-fitting


def crossfit_probabilities(confidence: ArrayLike, correct: ArrayLike, *,
                           method: Method = "isotonic", n_folds: int = DEFAULT_FOLDS,
                           n_bins: int = 10, seed: int = 0,
                           nan_policy: NanPolicy = "raise") -> FloatArray:
    r"""Turn raw scores into probabilities by K-fold cross-fitting, for calibration metrics.

    Items are split by :func:`crossfit_splits` (the one fold rule); each
    item's probability comes from a calibrator (:func:`fit_calibration`)
    fitted on the other folds only, so no item's own label influences its
    probability:

    .. math:: \hat p_i = g_{-k(i)}(c_i)

    Parameters
    ----------
    confidence : array of shape (n,)
        Raw scores, finite.
    correct : array of shape (n,), values in [0, 1]
        Isotonic and histogram accept continuous quality; Platt needs binary {0, 1}.
    method : {"isotonic", "platt", "histogram"}, default "isotonic"
    n_folds : int >= 2, default 5
        Upper bound on the folds (see :func:`crossfit_splits`).
    n_bins : int >= 1, default 10
        Histogram only.
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
        On bad options, non-finite scores, or fewer than two right or two
        wrong answers.

    Notes
    -----
    Metrics on cross-fitted probabilities measure the calibration a
    calibrator could reach on new data, not the in-sample fit.

    References
    ----------
    See the module docstring.

    Examples
    --------
    >>> p = crossfit_probabilities([3.0, -1.0, 2.0, 0.5, 1.0, -2.0], [1, 0, 1, 0, 1, 0], n_folds=2)
    >>> p.shape, bool(((p >= 0) & (p <= 1)).all())
    ((6,), True)
    """
    raw_conf = as_1d(confidence, "confidence")
    conf, corr = check_calibration_data(raw_conf, correct, method=method, nan_policy=nan_policy)
    n_bins = check_count(n_bins, "n_bins")
    keep = ~(np.isnan(raw_conf) | np.isnan(as_1d(correct, "correct")))
    out = np.empty(conf.size)
    for train, test in crossfit_splits(corr, n_folds=n_folds, seed=seed):
        params = fit_calibration(conf[train], corr[train], method=method, n_bins=n_bins)
        out[test] = apply_calibration(method, params, conf[test])
    result = np.full(raw_conf.size, np.nan)
    result[keep] = np.clip(out, 0.0, 1.0)
    return result
