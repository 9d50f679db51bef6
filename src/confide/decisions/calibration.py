r"""Calibrators: map one scorer's raw confidence to the probability that the answer is right.

The methods ``platt``, ``isotonic`` and ``histogram`` are those of
:mod:`confide.metrics.crossfit` (its docstring has their formulas). Each is fitted
on a graded run (or on two arrays) and saved as a small JSON file that holds the
scorer name, the method and its fitted parameters (never a pickle).

A fitted :class:`Calibrator` answers ``predict(confidence)`` for one value (a
float back) or an array (an array back); NaN stays NaN — an answer without
a confidence is never read as confident. :func:`load_calibrator` reads the
JSON back (``confide serve --calibrator FILE`` uses it).

Provenance
----------
A probability holds for the answers a calibrator was fitted on: one model, one task,
one prompt style. :func:`calibrate_run` keeps them in the calibrator's ``extra``
(:data:`PROVENANCE_KEYS`: ``model``, ``task``, ``prompt_style`` ``"chat"`` or
``"k-shot"``, ``num_fewshot``, ``accuracy`` and the cross-fitted (out-of-fold)
``crossfit_ece`` and ``crossfit_brier``), beside ``n_fit`` (items) and ``grader``;
:attr:`Calibrator.provenance` gathers them. :meth:`Calibrator.calibrate` gives an
answer's probability with that provenance and a ``warnings`` list that says when the
answer comes from another model or another prompt style, or when the calibrator does
not say (a file written before provenance was kept still loads). Calibrators shipped
for the bundled model lie in ``confide/decisions/calibrators/``
(:func:`shipped_calibrator`; ``benchmarks/ship_calibrators.py`` writes them).

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.core.frames import data_frame
from confide.decisions._runs import as_run, run_column
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

__all__ = ["CALIBRATION_METHODS", "PROMPT_STYLES", "PROVENANCE_KEYS", "SHIPPED_DIR",
           "CalibrationFit", "Calibrator", "ReliabilityDiagram", "as_calibrator",
           "calibrate_answers", "calibrate_run", "fit_calibrator", "load_calibrator",
           "reliability_diagram", "run_provenance", "shipped_calibrator"]

_KIND = "confide.calibrator"
_VERSION = 1
FloatArray = NDArray[np.float64]

#: How the answers' prompts were written: chat messages, or one completion text with
#: ``num_fewshot`` worked examples before the question.
PROMPT_STYLES = ("chat", "k-shot")
#: The keys of :attr:`Calibrator.extra` that say what a calibrator was fitted on.
PROVENANCE_KEYS = ("model", "task", "prompt_style", "num_fewshot", "accuracy",
                   "crossfit_ece", "crossfit_brier")
#: The calibrators shipped with the package, one ``<model>-<scorer>.json`` each.
SHIPPED_DIR = Path(__file__).parent / "calibrators"


# --------------------------------------------------------------------------- the object


@dataclass
class Calibrator:
    """A fitted calibrator for scorer ``scorer``.

    ``params`` per method: ``platt``: ``{"a": float, "b": float}``;
    ``isotonic``: ``{"x": [...], "y": [...]}`` (knots; linear between them,
    constant outside); ``histogram``: ``{"edges": [...], "values": [...]}``
    (``len(values) == len(edges) + 1``; bin ``j`` holds
    ``edges[j-1] < c <= edges[j]``). ``n_fit`` counts the graded items it was
    fitted on; ``source`` says where they came from; ``extra`` holds what they were
    (:data:`PROVENANCE_KEYS`, see the module's notes). ``file``: the JSON it was
    loaded from (not saved).
    """

    scorer: str
    method: str
    params: dict[str, Any]
    n_fit: int = 0
    grader: str | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    file: str | None = field(default=None, compare=False)

    @property
    def provenance(self) -> dict[str, Any]:
        """What the calibrator was fitted on: scorer, method, model, task, prompt style,
        number of few-shot examples, items (``n_items``), grader, accuracy, cross-fitted
        ECE and Brier score, source run and file (None where not recorded), and
        ``shipped`` (whether it came with confide)."""
        out: dict[str, Any] = {"scorer": self.scorer, "method": self.method}
        out.update({key: self.extra.get(key) for key in PROVENANCE_KEYS})
        out.update({"n_items": self.n_fit, "grader": self.grader, "source": self.source,
                    "file": self.file,
                    "shipped": self.file is not None
                    and Path(self.file).resolve().parent == SHIPPED_DIR.resolve()})
        return out

    def calibrate(self, confidence: float, *, model: str | None = None,
                  prompt_style: str | None = None, num_fewshot: int | None = None,
                  reason: str | None = None) -> tuple[float, dict[str, Any]]:
        """An answer's probability of being right, with the calibration's provenance.

        ``confidence`` is the answer's raw value of :attr:`scorer` (NaN: none, then
        ``reason`` says why); ``model``, ``prompt_style`` (``"chat"`` or ``"k-shot"``)
        and ``num_fewshot`` describe the answer (None: not known). Returns the
        probability (NaN without a confidence) and :attr:`provenance` plus
        ``applied_to`` (the answer's model and prompt) and ``warnings``: one line each
        where the answer lies outside what the calibrator was fitted on, or where
        either side does not say.

        >>> cal = Calibrator("msp", "platt", {"a": 1.0, "b": 0.0},
        ...                  extra={"model": "smollm2", "prompt_style": "chat"})
        >>> p, info = cal.calibrate(0.0, model="other", prompt_style="chat")
        >>> p, info["warnings"][0][:45]
        (0.5, "fitted on answers of model 'smollm2', applied")
        """
        info = self.provenance
        info["applied_to"] = {"model": model, "prompt_style": prompt_style,
                              "num_fewshot": num_fewshot}
        warnings = self._conditions(model, prompt_style, num_fewshot)
        if math.isnan(confidence):
            warnings.append(f"no {self.scorer} value for this answer"
                            + (f" ({reason})" if reason else "") + ": no probability")
        info["warnings"] = warnings
        return (math.nan if math.isnan(confidence) else self.predict(confidence)), info

    def _conditions(self, model: str | None, style: str | None, shots: int | None
                    ) -> list[str]:
        fitted_model = self.extra.get("model")
        fitted_style = self.extra.get("prompt_style")
        fitted_shots = self.extra.get("num_fewshot")
        out = []
        if fitted_model is None:
            out.append("the calibrator does not say which model it was fitted on (a file "
                       "written before provenance was kept): refit it with confide calibrate "
                       "to know the probability holds for this model")
        elif model is None:
            out.append(f"the answers' model is not stated (pass model=): the calibrator "
                       f"was fitted on answers of {fitted_model!r}")
        elif model != fitted_model:
            out.append(f"fitted on answers of model {fitted_model!r}, applied to answers of "
                       f"{model!r}: the probability is calibrated for {fitted_model!r} only; "
                       f"fit a calibrator on graded answers of {model!r} (confide calibrate)")
        fitted = _prompt_words(fitted_style, fitted_shots)
        applied = _prompt_words(style, shots)
        if fitted_style is None:
            out.append("the calibrator does not say which prompt style it was fitted on")
        elif style is None:
            out.append(f"the answers' prompt style is not stated (pass prompt_style=): "
                       f"the calibrator was fitted on answers to {fitted} prompts")
        elif style != fitted_style or (shots is not None and fitted_shots is not None
                                       and shots != fitted_shots):
            task = self.extra.get("task")
            out.append(f"fitted on answers to {fitted} prompts"
                       + (f" ({task})" if task else "")
                       + f", applied to answers to {applied} prompts: the prompt changes the "
                       "answers' length and confidence, so the probability may be off")
        return out

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
        extra = d.get("extra") or {}
        if not isinstance(extra, dict):
            raise InvalidInputError("must be a JSON object", file=file, field="extra")
        _check_provenance(extra, file)
        return cls(scorer=scorer, method=method, params=params, n_fit=n_fit,
                   grader=d.get("grader"), source=d.get("source"), extra=dict(extra),
                   file=file)

    def save(self, path: str | Path) -> Path:
        """Write the calibrator as JSON to ``path`` (parent folders are created)."""
        return write_json(path, self.to_dict())


def load_calibrator(path: str | Path) -> Calibrator:
    """Read a calibrator saved by :meth:`Calibrator.save`.

    Raises :class:`~confide.core.errors.InvalidInputError` naming the file (and the
    line of a JSON syntax error, or the bad field).
    """
    return Calibrator.from_dict(read_json(path), file=str(path))


def as_calibrator(calibrator: Calibrator | str | Path) -> Calibrator:
    """A :class:`Calibrator` given as itself or as the path of its JSON file."""
    if isinstance(calibrator, Calibrator):
        return calibrator
    if isinstance(calibrator, (str, Path)):
        return load_calibrator(calibrator)
    raise InvalidInputError(f"a calibrator is a Calibrator (confide.calibrate(...).calibrator, "
                            f"fit_calibrator) or the path of its JSON file, not "
                            f"{type(calibrator).__name__}", field="calibrator")


def shipped_calibrator(model: str | None, scorers: Sequence[str]) -> Calibrator | None:
    """The calibrator shipped for ``model`` of the first of ``scorers`` that has one
    (``SHIPPED_DIR/<model>-<scorer>.json``), or None."""
    if not model:
        return None
    for name in scorers:
        path = SHIPPED_DIR / f"{model}-{name}.json"
        if path.is_file():
            return load_calibrator(path)
    return None


def _prompt_words(style: str | None, shots: int | None) -> str:
    if style == "k-shot":
        return f"{shots}-shot completion" if shots is not None else "k-shot completion"
    if style == "chat" and shots:
        return f"chat ({shots} example turns)"
    return str(style)


def _check_provenance(extra: dict[str, Any], file: str | None) -> None:
    for key in ("model", "task"):
        value = extra.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidInputError(f"must be a name, got {value!r}", file=file,
                                    field=f"extra.{key}")
    style = extra.get("prompt_style")
    if style is not None and style not in PROMPT_STYLES:
        raise InvalidInputError(f"must be one of {', '.join(PROMPT_STYLES)}, got {style!r}",
                                file=file, field="extra.prompt_style")
    shots = extra.get("num_fewshot")
    if shots is not None and (isinstance(shots, bool) or not isinstance(shots, int)
                              or shots < 0):
        raise InvalidInputError(f"must be a count, got {shots!r}", file=file,
                                field="extra.num_fewshot")
    for key in ("accuracy", "crossfit_ece", "crossfit_brier"):
        value = extra.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value <= 1):
            raise InvalidInputError(f"must be a number in [0, 1], got {value!r}", file=file,
                                    field=f"extra.{key}")


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
    and counted. The calibrator keeps its provenance (:func:`run_provenance`, the
    accuracy and the cross-fitted ECE and Brier score) in ``extra``."""
    run = as_run(run)
    col = run_column(run, scorer, grader)
    return _measured_fit(col.confidence, col.correct, scorer=scorer, method=method,
                         grader=col.grader, source=col.source, n_missing=col.n_missing,
                         n_bins=n_bins, n_folds=n_folds, seed=seed,
                         provenance=run_provenance(run))


def calibrate_answers(answers: Sequence[Any], scorer: str, labels: Sequence[Any] | None = None,
                      *, method: Method = "isotonic", grader: str | None = None,
                      model: str | None = None, task: str | None = None,
                      prompt_style: str | None = None, n_bins: int = 10,
                      n_folds: int = DEFAULT_FOLDS, seed: int = 0) -> CalibrationFit:
    """Fit a calibrator of ``scorer`` on scored answers (``confide.score`` or
    ``confide.score_answers``) and the user's labels, measured by cross-fitting.

    ``labels``: one correctness per answer (1/0, true/false, or a number in [0, 1]);
    None reads each answer's grade (``grader``, or its only grade). Answers without a
    value of ``scorer`` are left out and counted (``n_missing``). ``model``, ``task`` and
    ``prompt_style`` are the provenance the calibrator carries (it warns when applied
    outside them).
    """
    answers = list(answers)
    if not answers:
        raise InvalidInputError("no answers to fit on", field="answers")
    if labels is not None and len(labels) != len(answers):
        raise InvalidInputError(f"give one label per answer: {len(labels)} labels for "
                                f"{len(answers)} answers", field="labels")
    correct = []
    for i, answer in enumerate(answers):
        if labels is not None:
            value = labels[i]
        else:
            grades = answer.grades
            name = grader or (next(iter(grades)) if len(grades) == 1 else None)
            if name is None or name not in grades:
                raise InvalidInputError(f"answer {i} has grades {sorted(grades) or 'none'}: "
                                        "pass labels=, or grader= naming one",
                                        field="labels" if not grades else "grader")
            value = grades[name]
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise InvalidInputError(f"label {i} must be true/false or a number in [0, 1], "
                                    f"not {value!r}", field="labels")
        correct.append(float(value))
    values = [float(a.confidences.get(scorer, math.nan)) for a in answers]
    if all(math.isnan(v) for v in values):
        raise InvalidInputError(f"no answer has a value of {scorer!r}", field="scorer")
    keep = [i for i, v in enumerate(values) if not math.isnan(v)]
    return _measured_fit(np.asarray([values[i] for i in keep]),
                         np.asarray([correct[i] for i in keep]), scorer=scorer, method=method,
                         grader=grader or ("labels" if labels is not None else None),
                         source="answers", n_missing=len(answers) - len(keep), n_bins=n_bins,
                         n_folds=n_folds, seed=seed,
                         provenance={"model": model, "task": task,
                                     "prompt_style": prompt_style, "num_fewshot": None})


def _measured_fit(confidence: FloatArray, correct: FloatArray, *, scorer: str, method: Method,
                  grader: str | None, source: str | None, n_missing: int, n_bins: int,
                  n_folds: int, seed: int, provenance: dict[str, Any]) -> CalibrationFit:
    """The calibrator fitted on all items, measured by cross-fitting, its provenance kept."""
    calibrator = fit_calibrator(confidence, correct, method=method, scorer=scorer,
                                n_bins=n_bins, grader=grader, source=source)
    crossfit = crossfit_probabilities(confidence, correct, method=method, n_folds=n_folds,
                                      n_bins=n_bins, seed=seed)
    fit = CalibrationFit(
        calibrator=calibrator, n=int(confidence.size), n_missing=n_missing,
        accuracy=float(correct.mean()),
        insample_ece=calibration_error(calibrator.predict(confidence), correct),
        crossfit_ece=calibration_error(crossfit, correct),
        crossfit_brier=brier_loss(crossfit, correct),
        reliability=reliability_diagram(crossfit, correct, n_bins=10))
    calibrator.extra.update({**provenance, "accuracy": fit.accuracy,
                             "crossfit_ece": fit.crossfit_ece,
                             "crossfit_brier": fit.crossfit_brier})
    return fit


def run_provenance(run: Any) -> dict[str, Any]:
    """The model, task and prompt style of a stored run's answers (None where the run
    does not say: an imported log names no prompt style).

    A task whose formats have no chat template (TriviaQA) prompts every model with
    its ``num_fewshot``-shot completion text; otherwise a model with a chat template
    was given chat messages (``chat_fewshot`` example turns).
    """
    run = as_run(run)
    config = run.config or {}
    task: dict[str, Any] = config["task"] if isinstance(config.get("task"), dict) else {}
    model = config.get("model") or run.backend_config.get("model")
    out: dict[str, Any] = {"model": str(model) if model else None,
                           "task": task.get("name") or None,
                           "prompt_style": None, "num_fewshot": None}
    templates = task.get("templates")
    chat_template = run.backend_config.get("chat_template")
    if isinstance(templates, dict) and chat_template is not None:
        chat = bool(chat_template) and templates.get("chat") is not None
        out["prompt_style"] = "chat" if chat else "k-shot"
        shots = task.get("chat_fewshot" if chat else "num_fewshot")
        out["num_fewshot"] = shots if isinstance(shots, int) else None
    return out
