"""From stored records to the evaluation table: one row per scorer, with intervals.

Reads only records, so it runs on a stored run without the model. Correctness
is the grade; for AUROC a continuous grade counts as correct at >= 0.5. Items
whose confidence is NaN are left out of that scorer's row and counted in it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from confide.metrics import UndefinedMetricWarning, bootstrap_interval
from confide.records import Record

__all__ = ["EvalTable", "ScorerRow", "evaluate_records"]


@dataclass
class ScorerRow:
    """One scorer's figures; ``metrics[name] = (point, low, high)``."""

    scorer: str
    n: int
    n_nan: int
    metrics: dict[str, tuple[float, float, float]]
    nan_reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class EvalTable:
    """The evaluation of one run under one grader."""

    grader: str
    n_items: int
    n_graded: int
    accuracy: tuple[float, float, float]
    rows: list[ScorerRow]
    level: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "grader": self.grader, "n_items": self.n_items, "n_graded": self.n_graded,
            "level": self.level,
            "accuracy": [clean(v) for v in self.accuracy],
            "scorers": [{"scorer": r.scorer, "n": r.n, "n_nan": r.n_nan,
                         "nan_reasons": r.nan_reasons,
                         **{m: [clean(v) for v in vals] for m, vals in r.metrics.items()}}
                        for r in self.rows],
        }


def _scorer_names(records: list[Record]) -> list[str]:
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(r.scores))
    return list(names)


def evaluate_records(records: list[Record], *, grader: str, scorers: list[str] | None = None,
                     metrics: tuple[str, ...] = ("auroc", "prr"), n_resamples: int = 1000,
                     level: float = 0.95, seed: int = 0) -> EvalTable:
    """Accuracy and, per scorer, each metric with a seeded bootstrap percentile interval."""
    graded = [r for r in records if grader in r.grades]
    correct = np.array([r.grades[grader] for r in graded], dtype=float)
    binary = (correct >= 0.5).astype(float)
    accuracy = _interval("accuracy", np.zeros_like(correct), correct, n_resamples, level, seed)
    rows = []
    for name in scorers or _scorer_names(records):
        conf = np.array([r.scores.get(name, math.nan) for r in graded], dtype=float)
        keep = ~np.isnan(conf)
        reasons: dict[str, int] = {}
        for r in graded:
            why = r.score_errors.get(name)
            if why:
                reasons[why] = reasons.get(why, 0) + 1
        figures = {m: _interval(m, conf[keep], binary[keep], n_resamples, level, seed)
                   for m in metrics}
        rows.append(ScorerRow(name, int(keep.sum()), int((~keep).sum()), figures, reasons))
    return EvalTable(grader, len(records), len(graded), accuracy, rows, level)


def _interval(metric: str, conf: np.ndarray, correct: np.ndarray, n_resamples: int,
              level: float, seed: int) -> tuple[float, float, float]:
    if len(correct) == 0:
        return (math.nan, math.nan, math.nan)
    with warnings.catch_warnings():  # one-class runs give NaN, shown as "–" in the table
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        point, low, high = bootstrap_interval(metric, conf, correct, n_resamples=n_resamples,
                                              level=level, seed=seed)
    return (float(point), float(low), float(high))
