"""From stored records to the evaluation table: one row per scorer, with intervals,
paired comparisons and an audit of the evaluation itself.

Reads only records, so it runs on a stored run without the model. Correctness
is the grade (continuous grades count as correct at >= 0.5 for rank metrics).
Items whose confidence is NaN are left out of that scorer's row and counted in
it, with their reasons. Raw scores are not probabilities: calibration metrics
are computed on cross-fitted isotonic probabilities (K folds; no item is
calibrated on its own label).

The audit follows Santilli et al. (2025): Spearman correlation of each
confidence with answer length, AUROC within length-quantile strata next to the
plain AUROC, and a flag when a scorer's lead over the ``length`` baseline
vanishes within strata; with several graders, Kendall's tau between the scorer
rankings they induce.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from confide.audit import lead_disappears, length_correlations, ranking_agreement, stratified_auroc
from confide.metrics import (
    METRICS,
    UndefinedMetricWarning,
    bootstrap_interval,
    crossfit_probabilities,
    paired_bootstrap,
)
from confide.records import Record

__all__ = ["DEFAULT_METRICS", "EvalTable", "ScorerRow", "evaluate_records"]

DEFAULT_METRICS = ("auroc", "prr")
LENGTH_BASELINE = "length"

Interval = tuple[float, float, float]


@dataclass
class ScorerRow:
    """One scorer's figures; ``metrics[name] = (point, low, high)``.

    ``audit`` holds ``length_spearman`` (confidence vs answer length),
    ``stratified_auroc`` and ``lead_vanishes`` (True when the scorer beats the
    length baseline by plain AUROC but not within length strata).
    ``vs_best`` is the paired bootstrap of AUROC against the best scorer.
    """

    scorer: str
    n: int
    n_nan: int
    metrics: dict[str, Interval]
    nan_reasons: dict[str, int] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    vs_best: dict[str, float] | None = None


@dataclass
class EvalTable:
    """The evaluation of one run under one grader."""

    grader: str
    n_items: int
    n_graded: int
    accuracy: Interval
    rows: list[ScorerRow]
    level: float = 0.95
    correct_length_spearman: float = math.nan
    grader_agreement: dict[str, float] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def row(self, scorer: str) -> ScorerRow:
        return next(r for r in self.rows if r.scorer == scorer)

    def to_dict(self) -> dict[str, Any]:
        return _clean({
            "grader": self.grader, "n_items": self.n_items, "n_graded": self.n_graded,
            "level": self.level, "accuracy": list(self.accuracy),
            "correct_length_spearman": self.correct_length_spearman,
            "grader_agreement": self.grader_agreement, "options": self.options,
            "scorers": [{"scorer": r.scorer, "n": r.n, "n_nan": r.n_nan,
                         "nan_reasons": r.nan_reasons, "audit": r.audit, "vs_best": r.vs_best,
                         **{m: list(vals) for m, vals in r.metrics.items()}}
                        for r in self.rows],
        })


def _clean(value: Any) -> Any:
    """JSON-safe: NaN → None, numpy scalars → Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _scorer_names(records: list[Record]) -> list[str]:
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(r.scores))
    return list(names)


def evaluate_records(records: list[Record], *, grader: str, scorers: list[str] | None = None,
                     metrics: tuple[str, ...] = DEFAULT_METRICS, n_resamples: int = 1000,
                     level: float = 0.95, seed: int = 0, n_strata: int = 4,
                     metric_options: dict[str, dict[str, Any]] | None = None,
                     compare: bool = True) -> EvalTable:
    """Accuracy and, per scorer, each metric with a seeded bootstrap percentile interval,
    the length audit, and (``compare``) a paired bootstrap of AUROC against the best scorer.

    ``metric_options`` maps a metric name to its options, e.g.
    ``{"prr": {"max_rejection": 0.3}}``.
    """
    for name in metrics:
        METRICS[name]  # unknown names fail early with suggestions
    options = metric_options or {}
    graded = [r for r in records if grader in r.grades]
    correct = np.array([r.grades[grader] for r in graded], dtype=float)
    binary = (correct >= 0.5).astype(float)
    lengths = np.array([r.greedy.n_tokens for r in graded], dtype=float)
    accuracy = _interval("accuracy", np.zeros_like(correct), correct, n_resamples, level, seed,
                         {})
    names = list(scorers or _scorer_names(records))
    confidences = {n: np.array([r.scores.get(n, math.nan) for r in graded], dtype=float)
                   for n in names}
    if LENGTH_BASELINE not in names and len(graded):
        # the length baseline sits in every table, so length-driven leads are visible
        names.append(LENGTH_BASELINE)
        confidences[LENGTH_BASELINE] = np.where(lengths > 0, -lengths, math.nan)
    rows = []
    for name in names:
        conf = confidences[name]
        keep = ~np.isnan(conf)
        reasons: dict[str, int] = {}
        for r in graded:
            why = r.score_errors.get(name)
            if why:
                reasons[why] = reasons.get(why, 0) + 1
        figures = {}
        for m in metrics:
            values = conf[keep]
            if METRICS[m].needs_probabilities and len(values):
                values = _calibrated(values, binary[keep], seed)
            figures[m] = _interval(m, values, binary[keep], n_resamples, level, seed,
                                   options.get(m, {}))
        audit = _audit(conf[keep], binary[keep], lengths[keep], n_strata)
        rows.append(ScorerRow(name, int(keep.sum()), int((~keep).sum()), figures, reasons, audit))
    _flag_length_lead(rows, confidences, binary, lengths, n_strata)
    if compare:
        _compare_to_best(rows, confidences, binary, n_resamples, level, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        corr_len = (length_correlations(np.zeros_like(binary), correct, lengths)
                    ["correct_length_spearman"] if len(graded) > 2 else math.nan)
    return EvalTable(grader, len(records), len(graded), accuracy, rows, level,
                     correct_length_spearman=float(corr_len),
                     grader_agreement=_grader_agreement(graded, names, grader),
                     options={"metrics": list(metrics), "metric_options": options,
                              "n_resamples": n_resamples, "seed": seed, "n_strata": n_strata})


def _calibrated(conf: np.ndarray, correct: np.ndarray, seed: int) -> np.ndarray:
    if len(conf) < 10 or correct.min() == correct.max():
        return np.full_like(conf, correct.mean())
    return crossfit_probabilities(conf, correct, method="isotonic",
                                  n_folds=min(5, len(conf) // 2), seed=seed)


def _audit(conf: np.ndarray, correct: np.ndarray, lengths: np.ndarray,
           n_strata: int) -> dict[str, Any]:
    if len(conf) < 3:
        return {"length_spearman": math.nan, "stratified_auroc": math.nan}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)  # constant input to Spearman
        return {
            "length_spearman": float(length_correlations(conf, correct, lengths)
                                     ["conf_length_spearman"]),
            "stratified_auroc": float(stratified_auroc(conf, correct, lengths,
                                                       n_strata=n_strata)),
        }


def _flag_length_lead(rows: list[ScorerRow], confidences: dict[str, np.ndarray],
                      binary: np.ndarray, lengths: np.ndarray, n_strata: int) -> None:
    """Mark scorers whose AUROC lead over the length baseline vanishes within strata."""
    baseline = -lengths
    for row in rows:
        if row.scorer == LENGTH_BASELINE:
            continue
        conf = confidences[row.scorer]
        keep = ~np.isnan(conf)
        if keep.sum() < 3:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            row.audit["lead_vanishes"] = bool(lead_disappears(
                conf[keep], baseline[keep], binary[keep], lengths[keep], n_strata))


def _compare_to_best(rows: list[ScorerRow], confidences: dict[str, np.ndarray],
                     binary: np.ndarray, n_resamples: int, level: float, seed: int) -> None:
    """Paired bootstrap of AUROC difference (scorer − best) on the items both scored."""
    ranked = [r for r in rows if "auroc" in r.metrics and not math.isnan(r.metrics["auroc"][0])]
    if len(ranked) < 2:
        return
    best = max(ranked, key=lambda r: r.metrics["auroc"][0])
    for row in ranked:
        if row is best:
            continue
        a, b = confidences[row.scorer], confidences[best.scorer]
        keep = ~np.isnan(a) & ~np.isnan(b)
        if keep.sum() < 3:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            result = paired_bootstrap("auroc", a[keep], b[keep], binary[keep],
                                      n_resamples=n_resamples, level=level, seed=seed)
        row.vs_best = {"best": best.scorer, **{k: float(v) for k, v in result.items()}}


def _grader_agreement(graded: list[Record], names: list[str], grader: str) -> dict[str, float]:
    """Kendall's tau between the AUROC rankings of scorers induced by each pair of graders."""
    graders = sorted({g for r in graded for g in r.grades})
    if len(graders) < 2:
        return {}
    by_grader: dict[str, dict[str, float]] = {}
    for g in graders:
        subset = [r for r in graded if g in r.grades]
        correct = np.array([r.grades[g] >= 0.5 for r in subset], dtype=float)
        by_grader[g] = {}
        for name in names:
            conf = np.array([r.scores.get(name, math.nan) for r in subset], dtype=float)
            keep = ~np.isnan(conf)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UndefinedMetricWarning)
                value = METRICS["auroc"].fn(conf[keep], correct[keep]) if keep.sum() else math.nan
            by_grader[g][name] = value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        taus = ranking_agreement(by_grader)
    return {f"{a} vs {b}": float(t) for (a, b), t in taus.items()}


def _interval(metric: str, conf: np.ndarray, correct: np.ndarray, n_resamples: int,
              level: float, seed: int, options: dict[str, Any]) -> Interval:
    if len(correct) == 0:
        return (math.nan, math.nan, math.nan)
    with warnings.catch_warnings():  # one-class runs give NaN, shown as "–" in the table
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        point, low, high = bootstrap_interval(metric, conf, correct, n_resamples=n_resamples,
                                              level=level, seed=seed, **options)
    return (float(point), float(low), float(high))
