r"""Calibrators: map one scorer's raw confidence to the probability that the answer is right.

Three methods, each fitted on a graded run (or on two arrays) and saved as a
small JSON file that holds the scorer name, the method and its fitted
parameters (never a pickle):

=============  ============================================================
``platt``      :math:`\hat p(c) = \sigma(a c + b)`, fitted by logistic
               regression with Platt's smoothed targets (Platt, 1999)
``isotonic``   the monotone step-and-ramp function of pool-adjacent-violators
               (Zadrozny & Elkan, 2002); stored as its knots
``histogram``  equal-mass bins of the raw score, each mapped to its mean
               correctness (Zadrozny & Elkan, 2001)
=============  ============================================================

A fitted :class:`Calibrator` answers ``predict(confidence)`` for one value (a
float back) or an array (an array back); NaN stays NaN — an answer without
a confidence is never read as confident. :func:`load_calibrator` reads the
JSON back (``confide serve --calibrator FILE`` uses it), and
:func:`reliability_diagram` gives the data of a reliability diagram.

References
----------
[1] J. Platt (1999). Probabilistic outputs for support vector machines and
    comparisons to regularized likelihood methods.
[2] B. Zadrozny, C. Elkan (2001). Obtaining calibrated probability estimates
    from decision trees and naive Bayesian classifiers. ICML (histogram binning).
[3] B. Zadrozny, C. Elkan (2002). Transforming classifier scores into accurate
    multiclass probability estimates. KDD (isotonic regression).
[4] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger (2017). On Calibration of
    Modern Neural Networks. ICML (reliability diagrams).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.errors import InvalidInputError

__all__ = ["CALIBRATION_METHODS", "CalibrationFit", "Calibrator", "ReliabilityDiagram",
           "calibrate_run", "crossfit_calibrated", "fit_calibrator",
           "load_calibrator", "reliability_diagram"]

Method = Literal["platt", "isotonic", "histogram"]
CALIBRATION_METHODS: tuple[str, ...] = ("platt", "isotonic", "histogram")
_KIND = "confide.calibrator"
_VERSION = 1
FloatArray = NDArray[np.float64]


# --------------------------------------------------------------------------- the object


@dataclass
class Calibrator:
    """A fitted calibrator for scorer ``scorer``.

    ``params`` per method: ``platt``: ``{"a": float, "b": float}``;
    ``isotonic``: ``{"x": [...], "y": [...]}`` (knots; linear between them,
    constant outside); ``histogram``: ``{"edges": [...], "values": [...]}``
    (``len(values) == len(edges) + 1``; bin ``j`` holds
    ``edges[j-1] < c <= edges[j]``). ``n_fit`` counts the graded items it was
    fitted on; ``source`` says where they came from.
    """

    scorer: str
    method: str
    params: dict[str, Any]
    n_fit: int = 0
    grader: str | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @overload
    def predict(self, confidence: float) -> float: ...

    @overload
    def predict(self, confidence: ArrayLike) -> FloatArray: ...

    def predict(self, confidence: float | ArrayLike) -> float | FloatArray:
        """Calibrated probability in [0, 1] of each raw confidence (NaN stays NaN).

        >>> Calibrator("msp", "platt", {"a": 2.0, "b": 0.0}).predict(0.0)
        0.5
        """
        scalar = np.ndim(confidence) == 0
        try:
            raw = np.asarray(confidence, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"must be numbers: {exc}", field="confidence") from exc
        out = _predict(self.method, self.params, np.atleast_1d(raw))
        return float(out[0]) if scalar else out.reshape(raw.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": _KIND, "version": _VERSION, "scorer": self.scorer,
                "method": self.method, "params": self.params, "n_fit": self.n_fit,
                "grader": self.grader, "source": self.source, "extra": self.extra}

    @classmethod
    def from_dict(cls, d: Any, *, file: str | None = None) -> Calibrator:
        """Validate a JSON object (as written by :meth:`to_dict`) and build the calibrator."""
        check_header(d, _KIND, _VERSION, file)
        scorer = d.get("scorer")
        if not isinstance(scorer, str) or not scorer:
            raise InvalidInputError("must name the scorer", file=file, field="scorer")
        method = d.get("method")
        if method not in CALIBRATION_METHODS:
            raise InvalidInputError(f"must be one of {', '.join(CALIBRATION_METHODS)}, "
                                    f"got {method!r}", file=file, field="method")
        params = _check_params(method, d.get("params"), file)
        n_fit = d.get("n_fit", 0)
        if isinstance(n_fit, bool) or not isinstance(n_fit, int) or n_fit < 0:
            raise InvalidInputError(f"must be a count, got {n_fit!r}", file=file, field="n_fit")
        return cls(scorer=scorer, method=method, params=params, n_fit=n_fit,
                   grader=d.get("grader"), source=d.get("source"),
                   extra=dict(d.get("extra") or {}))

    def save(self, path: str | Path) -> Path:
        """Write the calibrator as JSON to ``path`` (parent folders are created)."""
        return write_json(path, self.to_dict())


def load_calibrator(path: str | Path) -> Calibrator:
    """Read a calibrator saved by :meth:`Calibrator.save`.

    Raises :class:`~confide.errors.InvalidInputError` naming the file (and the
    line of a JSON syntax error, or the bad field).
    """
    return Calibrator.from_dict(read_json(path), file=str(path))


def check_header(d: Any, kind: str, version: int, file: str | None) -> None:
    """A saved decision file must be a JSON object of this ``kind`` and ``version``."""
    if not isinstance(d, dict):
        raise InvalidInputError("must be a JSON object", file=file)
    if d.get("kind") != kind:
        raise InvalidInputError(f"expected {kind!r}, got {d.get('kind')!r}", file=file,
                                field="kind")
    if d.get("version") != version:
        raise InvalidInputError(f"unsupported version {d.get('version')!r} "
                                f"(this confide reads {version})", file=file, field="version")


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON, creating parent folders; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def read_json(path: str | Path) -> Any:
    """Parse a JSON file, with errors that name the file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=str(path)) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not valid JSON: {exc.msg} (column {exc.colno})",
                                file=str(path), line=exc.lineno) from exc


def _float_list(value: Any, name: str, file: str | None) -> list[float]:
    if not isinstance(value, list) or not value:
        raise InvalidInputError("must be a non-empty list of numbers", file=file,
                                field=f"params.{name}")
    try:
        out = [float(v) for v in value]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be numbers: {exc}", file=file,
                                field=f"params.{name}") from exc
    if not all(math.isfinite(v) for v in out):
        raise InvalidInputError("must be finite", file=file, field=f"params.{name}")
    return out


def _check_params(method: str, params: Any, file: str | None) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise InvalidInputError("must be a JSON object", file=file, field="params")
    if method == "platt":
        out: dict[str, Any] = {}
        for name in ("a", "b"):
            value = params.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise InvalidInputError(f"must be a finite number, got {value!r}", file=file,
                                        field=f"params.{name}")
            out[name] = float(value)
        return out
    if method == "isotonic":
        x, y = _float_list(params.get("x"), "x", file), _float_list(params.get("y"), "y", file)
        if len(x) != len(y):
            raise InvalidInputError(f"x has {len(x)} knots but y has {len(y)}", file=file,
                                    field="params.y")
        if any(b < a for a, b in zip(x, x[1:])):
            raise InvalidInputError("knots must be sorted", file=file, field="params.x")
        if any(not 0 <= v <= 1 for v in y):
            raise InvalidInputError("values must lie in [0, 1]", file=file, field="params.y")
        return {"x": x, "y": y}
    values = _float_list(params.get("values"), "values", file)
    edges = params.get("edges")
    edges = [] if edges == [] else _float_list(edges, "edges", file)
    if len(values) != len(edges) + 1:
        raise InvalidInputError(f"needs len(edges) + 1 = {len(edges) + 1} values, "
                                f"got {len(values)}", file=file, field="params.values")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise InvalidInputError("edges must be strictly increasing", file=file,
                                field="params.edges")
    if any(not 0 <= v <= 1 for v in values):
        raise InvalidInputError("values must lie in [0, 1]", file=file, field="params.values")
    return {"edges": edges, "values": values}


# --------------------------------------------------------------------------- the maths


def _predict(method: str, params: dict[str, Any], raw: FloatArray) -> FloatArray:
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


def _fit_platt(score: FloatArray, label: FloatArray) -> dict[str, float]:
    """Platt scaling: maximise the likelihood of smoothed targets under :math:`\\sigma(a c + b)`.

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
    edges = np.unique(qs)
    # a bin [e_{j-1}, e_j) must hold at least one fitted score, else drop its upper edge
    # the quantiles are data values, so every bin (e_{j-1}, e_j] holds its upper edge; only
    # the last bin (c > e_last) can be empty, when e_last is the largest score
    edges = edges[edges < score.max()]
    bins = np.searchsorted(edges, score, side="left")
    counts = np.bincount(bins, minlength=edges.size + 1)
    values = np.bincount(bins, weights=label, minlength=edges.size + 1) / np.maximum(counts, 1)
    return {"edges": [float(e) for e in edges], "values": [float(v) for v in values]}


def fit_calibrator(confidence: ArrayLike, correct: ArrayLike, *, method: Method = "isotonic",
                   scorer: str = "confidence", n_bins: int = 10, grader: str | None = None,
                   source: str | None = None) -> Calibrator:
    r"""Fit a calibrator of raw confidences to correctness.

    .. math:: \hat g = \arg\min_{g \in \mathcal G} \sum_i \ell(g(c_i), y_i)

    with :math:`\mathcal G` the sigmoids :math:`\sigma(a c + b)` (``platt``,
    log loss on smoothed targets), the non-decreasing functions
    (``isotonic``, squared loss) or the functions constant on ``n_bins``
    equal-mass bins (``histogram``, squared loss, i.e. bin means).

    Parameters
    ----------
    confidence : array of shape (n,)
        Raw scores (higher = more likely correct); NaN rows are dropped.
    correct : array of shape (n,), values in [0, 1]
        Platt needs binary correctness; isotonic and histogram accept
        continuous quality.
    method : {"platt", "isotonic", "histogram"}, default "isotonic"
    scorer : str
        Name of the scorer whose values these are (stored with the calibrator).
    n_bins : int >= 1, default 10
        Histogram binning only; fewer bins result where scores tie.
    grader, source : str, optional
        Stored with the calibrator, for the record.

    Returns
    -------
    Calibrator

    Raises
    ------
    InvalidInputError
        Unknown method, mismatched lengths, correctness outside [0, 1],
        non-binary correctness for Platt, infinite scores, fewer than two
        usable items, or only one class (nothing to calibrate against).

    References
    ----------
    Platt (1999); Zadrozny & Elkan (2001, 2002); see the module docstring.

    Examples
    --------
    >>> cal = fit_calibrator([0.1, 0.2, 0.7, 0.9], [0, 1, 0, 1], method="isotonic")
    >>> cal.predict([0.1, 0.9]).round(2).tolist()
    [0.0, 1.0]
    """
    from confide.metrics import _check_confidence_correct, _check_count

    if method not in CALIBRATION_METHODS:
        raise InvalidInputError(f"must be one of {', '.join(CALIBRATION_METHODS)}, "
                                f"got {method!r}", field="method")
    n_bins = _check_count(n_bins, "n_bins")
    conf, corr = _check_confidence_correct(confidence, correct, "omit")
    if not np.isfinite(conf).all():
        raise InvalidInputError("scores must be finite to be calibrated", field="confidence")
    if conf.size < 2:
        raise InvalidInputError(f"needs at least 2 graded items, got {conf.size}",
                                field="confidence")
    if corr.min() == corr.max():
        raise InvalidInputError("all items have the same correctness; a calibrator needs "
                                "both right and wrong answers", field="correct")
    if method == "platt":
        if not np.isin(corr, (0.0, 1.0)).all():
            raise InvalidInputError("Platt scaling needs binary correctness", field="correct")
        params: dict[str, Any] = _fit_platt(conf, corr)
    elif method == "isotonic":
        params = _fit_isotonic(conf, corr)
    else:
        params = _fit_histogram(conf, corr, n_bins)
    return Calibrator(scorer=scorer, method=method, params=params, n_fit=int(conf.size),
                      grader=grader, source=source)


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
        def clean(a: FloatArray) -> list[float | None]:
            return [None if math.isnan(v) else float(v) for v in a]

        return {"lower": clean(self.lower), "upper": clean(self.upper),
                "centers": clean(self.centers), "mean_confidence": clean(self.mean_confidence),
                "accuracy": clean(self.accuracy), "counts": [int(c) for c in self.counts]}


def reliability_diagram(probability: ArrayLike, correct: ArrayLike, *, n_bins: int = 10,
                        strategy: Literal["uniform", "quantile"] = "uniform"
                        ) -> ReliabilityDiagram:
    r"""Bin calibrated probabilities and compare each bin's accuracy with its confidence.

    .. math:: \mathrm{acc}(B_b) = \frac{1}{|B_b|}\sum_{i \in B_b} y_i, \qquad
              \mathrm{conf}(B_b) = \frac{1}{|B_b|}\sum_{i \in B_b} p_i

    A calibrated model has :math:`\mathrm{acc}(B_b) \approx \mathrm{conf}(B_b)`
    in every bin (Guo et al., 2017).

    Parameters
    ----------
    probability : array of shape (n,), in [0, 1]
    correct : array of shape (n,), in [0, 1]
    n_bins : int >= 1, default 10
    strategy : {"uniform", "quantile"}, default "uniform"
        ``uniform``: bins :math:`[(b-1)/B, b/B)` (the last one holds 1, as
        :func:`confide.metrics.calibration_error`); ``quantile``: edges at
        the probability quantiles (equal-mass bins; tied values may leave a
        bin empty).

    Returns
    -------
    ReliabilityDiagram

    Examples
    --------
    >>> d = reliability_diagram([0.1, 0.2, 0.8, 0.9], [0, 1, 1, 1], n_bins=2)
    >>> d.centers.tolist(), d.accuracy.tolist(), d.counts.tolist()
    ([0.25, 0.75], [0.5, 1.0], [2, 2])
    """
    from confide.metrics import _check_confidence_correct, _check_count

    n_bins = _check_count(n_bins, "n_bins")
    prob, corr = _check_confidence_correct(probability, correct, "raise", probabilities=True)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        bins = np.minimum((prob * n_bins).astype(np.intp), n_bins - 1)
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


# ------------------------------------------------------------------------ on a stored run


@dataclass
class CalibrationFit:
    """A calibrator fitted on a run, with how well it calibrates new data.

    ``crossfit_ece`` / ``crossfit_brier`` and ``reliability`` come from
    K-fold cross-fitting (each item's probability from a calibrator fitted on
    the other folds), so they estimate the calibration on unseen items;
    ``insample_ece`` is the fitted calibrator on its own training data
    (optimistic).
    """

    calibrator: Calibrator
    n: int
    n_missing: int
    accuracy: float
    insample_ece: float
    crossfit_ece: float
    crossfit_brier: float
    reliability: ReliabilityDiagram


def crossfit_calibrated(confidence: ArrayLike, correct: ArrayLike, *,
                        method: Method = "isotonic", n_folds: int = 5, n_bins: int = 10,
                        seed: int = 0) -> FloatArray:
    r"""Out-of-fold calibrated probabilities: :math:`\hat p_i = \hat g_{-k(i)}(c_i)`.

    Items are split into ``n_folds`` random folds (seeded); each fold is
    predicted by a calibrator (:func:`fit_calibrator`) fitted on the others.
    A training split with only one class predicts its constant accuracy.

    >>> p = crossfit_calibrated([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], [0, 0, 1, 0, 1, 1], n_folds=2)
    >>> p.shape
    (6,)
    """
    from confide.metrics import _check_confidence_correct, _check_count

    conf, corr = _check_confidence_correct(confidence, correct, "raise")
    n_folds = _check_count(n_folds, "n_folds", minimum=2)
    if n_folds > conf.size:
        raise InvalidInputError(f"n_folds={n_folds} exceeds the {conf.size} items",
                                field="n_folds")
    folds = np.random.default_rng(seed).permutation(conf.size) % n_folds
    out = np.empty(conf.size)
    for k in range(n_folds):
        test, train = folds == k, folds != k
        if corr[train].min() == corr[train].max():
            out[test] = corr[train][0]
            continue
        out[test] = fit_calibrator(conf[train], corr[train], method=method,
                                   n_bins=n_bins).predict(conf[test])
    return out


def calibrate_run(run: Any, scorer: str, *, method: Method = "isotonic",
                  grader: str | None = None, n_bins: int = 10, n_folds: int = 5,
                  seed: int = 0) -> CalibrationFit:
    """Fit a calibrator of ``scorer`` on a graded run (a :class:`~confide.api.Run` or its
    directory) and measure it by cross-fitting; records without that score are left out
    and counted."""
    from confide.decisions._runs import run_column
    from confide.metrics import _brier, _ece

    col = run_column(run, scorer, grader)
    calibrator = fit_calibrator(col.confidence, col.correct, method=method, scorer=scorer,
                                n_bins=n_bins, grader=col.grader, source=col.source)
    folds = min(n_folds, col.confidence.size)
    crossfit = crossfit_calibrated(col.confidence, col.correct, method=method, n_folds=folds,
                                   n_bins=n_bins, seed=seed)
    return CalibrationFit(
        calibrator=calibrator, n=int(col.confidence.size), n_missing=col.n_missing,
        accuracy=float(col.correct.mean()),
        insample_ece=_ece(calibrator.predict(col.confidence), col.correct),
        crossfit_ece=_ece(crossfit, col.correct), crossfit_brier=_brier(crossfit, col.correct),
        reliability=reliability_diagram(crossfit, col.correct, n_bins=10))
