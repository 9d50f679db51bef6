r"""Calibrators: map one scorer's raw confidence to the probability that the answer is right.

The methods ``platt``, ``isotonic`` and ``histogram`` are those of
:mod:`confide.metrics.crossfit` (its docstring has their formulas). Each is fitted
on a graded run (or on two arrays) and saved as a small JSON file that holds the
scorer name, the method and its fitted parameters (never a pickle).

A fitted :class:`Calibrator` answers ``predict(confidence)`` for one value (a
float back) or an array (an array back); NaN stays NaN — an answer without
a confidence is never read as confident. :func:`load_calibrator` reads the
JSON back (``confide serve --calibrator FILE`` uses it).

The fitting, the cross-fitting and the reliability diagram are the calibration
core of :mod:`confide.metrics.crossfit` and :mod:`confide.metrics.calibration`,
shared with the evaluation and the report; this module adds the saved object.

References
----------
Platt (1999), Zadrozny & Elkan (2001, 2002) for the methods: see
:mod:`confide.metrics.crossfit`.

[1] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger (2017). On Calibration of
    Modern Neural Networks. ICML (reliability diagrams).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.core.frames import data_frame
from confide.decisions._runs import run_column
from confide.metrics.calibration import (
    ReliabilityDiagram,
    brier_loss,
    calibration_error,
    reliability_diagram,
)
from confide.metrics.crossfit import (
    CALIBRATION_METHODS,
    DEFAULT_FOLDS,
    Method,
    apply_calibration,
    check_calibration_data,
    crossfit_probabilities,
    fit_calibration,
)

__all__ = ["CALIBRATION_METHODS", "CalibrationFit", "Calibrator", "ReliabilityDiagram",
           "calibrate_run", "fit_calibrator", "load_calibrator", "reliability_diagram"]

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
        out = apply_calibration(self.method, self.params, np.atleast_1d(raw))
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

    Raises :class:`~confide.core.errors.InvalidInputError` naming the file (and the
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


# --------------------------------------------------------------------------- fitting


def fit_calibrator(confidence: ArrayLike, correct: ArrayLike, *, method: Method = "isotonic",
                   scorer: str = "confidence", n_bins: int = 10, grader: str | None = None,
                   source: str | None = None) -> Calibrator:
    """Fit a calibrator of raw confidences to correctness, as a :class:`Calibrator` to save.

    The fit is :func:`confide.metrics.fit_calibration` (the one calibration core: its
    formula, methods and references) on the rows where neither value is NaN; this adds
    what the saved file keeps besides the parameters: the scorer, how many items the
    fit saw (``n_fit``) and where they came from.

    Parameters
    ----------
    confidence, correct, method, n_bins
        As :func:`~confide.metrics.fit_calibration`; rows with a NaN are dropped
        (``nan_policy="omit"``) and not counted in ``n_fit``.
    scorer : str
        Name of the scorer whose values these are (stored with the calibrator).
    grader, source : str, optional
        Stored with the calibrator, for the record.

    Returns
    -------
    Calibrator

    Raises
    ------
    InvalidInputError
        As :func:`~confide.metrics.crossfit.check_calibration_data`: unknown method,
        mismatched lengths, correctness outside [0, 1], non-binary correctness for
        Platt, infinite scores, fewer than two usable items, or only one class.

    Examples
    --------
    >>> cal = fit_calibrator([0.1, 0.2, 0.7, 0.9], [0, 1, 0, 1], method="isotonic")
    >>> cal.predict([0.1, 0.9]).round(2).tolist()
    [0.0, 1.0]
    """
    # NaN rows are dropped here, so that n_fit counts the rows the fit sees
    conf, corr = check_calibration_data(confidence, correct, method=method, nan_policy="omit")
    return Calibrator(scorer=scorer, method=method,
                      params=fit_calibration(conf, corr, method=method, n_bins=n_bins),
                      n_fit=int(conf.size), grader=grader, source=source)


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

    def to_pandas(self) -> Any:
        """One row per reliability bin of the cross-fitted probabilities (``lower``,
        ``upper``, ``mean_confidence``, ``accuracy``, ``count``), the fit's figures in the
        frame's ``attrs``. Needs pandas."""
        d = self.reliability
        frame = data_frame([{"lower": float(d.lower[b]), "upper": float(d.upper[b]),
                             "mean_confidence": float(d.mean_confidence[b]),
                             "accuracy": float(d.accuracy[b]), "count": int(d.counts[b])}
                            for b in range(len(d.counts))])
        frame.attrs.update({"scorer": self.calibrator.scorer,
                            "method": self.calibrator.method, "n": self.n,
                            "n_missing": self.n_missing, "accuracy": self.accuracy,
                            "insample_ece": self.insample_ece,
                            "crossfit_ece": self.crossfit_ece,
                            "crossfit_brier": self.crossfit_brier})
        return frame


def calibrate_run(run: Any, scorer: str, *, method: Method = "isotonic",
                  grader: str | None = None, n_bins: int = 10, n_folds: int = DEFAULT_FOLDS,
                  seed: int = 0) -> CalibrationFit:
    """Fit a calibrator of ``scorer`` on a graded run (a :class:`~confide.api.Run` or its
    directory) and measure it by cross-fitting; records without that score are left out
    and counted."""
    col = run_column(run, scorer, grader)
    calibrator = fit_calibrator(col.confidence, col.correct, method=method, scorer=scorer,
                                n_bins=n_bins, grader=col.grader, source=col.source)
    crossfit = crossfit_probabilities(col.confidence, col.correct, method=method,
                                      n_folds=n_folds, n_bins=n_bins, seed=seed)
    return CalibrationFit(
        calibrator=calibrator, n=int(col.confidence.size), n_missing=col.n_missing,
        accuracy=float(col.correct.mean()),
        insample_ece=calibration_error(calibrator.predict(col.confidence), col.correct),
        crossfit_ece=calibration_error(crossfit, col.correct),
        crossfit_brier=brier_loss(crossfit, col.correct),
        reliability=reliability_diagram(crossfit, col.correct, n_bins=10))
