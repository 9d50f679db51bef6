r"""Evaluating claim confidences: claim-level AUROC and PRR, the length audit, the answer table.

Claims of one answer share its question, its model state and often its
errors, so they are not independent draws: every interval here comes from the
cluster bootstrap over *answers* (:func:`confide.metrics.bootstrap_interval`
with ``groups``), never over claims. The length audit of Santilli et al.
(2025) runs at claim level (:func:`confide.metrics.length_audit.length_correlations`,
:func:`confide.metrics.length_audit.stratified_auroc`; length = the claim's tokens, or its
characters when the backend gave no tokens). The answer-level table is the
ordinary evaluation (:func:`confide.evaluation.table.evaluate_records`) under the
answer grade ``claims``, where the claim aggregates (``<scorer>.min``,
``.mean``, ``.share``) sit beside the answer-level scorers.

References: [1] Fadeeva et al., 2024, "Fact-Checking the Output of Large
Language Models via Token-Level Uncertainty Quantification", ACL Findings
(claim-level ROC-AUC and PRR); [2] Davison & Hinkley, 1997, Bootstrap Methods
and their Application, §3.8 (cluster bootstrap); [3] Santilli et al., 2025,
ACL (length audit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from confide.core.frames import data_frame, scorer_rows
from confide.core.jsonsafe import json_safe
from confide.core.records import Record
from confide.evaluation.notebook import html_table
from confide.evaluation.table import EvalTable, ScorerRow, evaluate_records
from confide.grading.claims import ANSWER_GRADE
from confide.metrics import UndefinedMetricWarning, bootstrap_interval
from confide.metrics.length_audit import length_correlations, stratified_auroc

__all__ = ["CLAIM_METRICS", "ClaimColumns", "ClaimTable", "claim_columns", "evaluate_claims"]

CLAIM_METRICS = ("auroc", "prr")
_NAN = (math.nan, math.nan, math.nan)


@dataclass
class ClaimColumns:
    """Every claim of the records as aligned arrays: its answer (``group``), length,
    grade, and each claim scorer's confidence (NaN where missing, reasons kept)."""

    group: np.ndarray
    length: np.ndarray
    correct: np.ndarray
    confidence: dict[str, np.ndarray]
    reasons: dict[str, list[str | None]]


def claim_columns(records: list[Record], grader: str) -> ClaimColumns:
    """The graded claims (grade ``grader``) of ``records``, one row each."""
    rows = [(n, r, c) for n, r in enumerate(records) for c in (r.claims or [])
            if grader in c.grades]
    names = list(dict.fromkeys(s for _, _, c in rows for s in c.scores))
    return ClaimColumns(
        group=np.array([n for n, _, _ in rows], dtype=np.int64),
        length=np.array([len(c.tokens) or len(c.text) for _, _, c in rows], dtype=float),
        correct=np.array([c.grades[grader] >= 0.5 for _, _, c in rows], dtype=float),
        confidence={s: np.array([c.scores.get(s, math.nan) for _, _, c in rows], dtype=float)
                    for s in names},
        reasons={s: [c.score_errors.get(s) for _, _, c in rows] for s in names})


@dataclass
class ClaimTable:
    """The evaluation of a long-form run claim by claim, and its answer-level table."""

    grader: str
    n_answers: int
    n_claims: int
    accuracy: tuple[float, float, float]
    rows: list[ScorerRow]
    answers: EvalTable | None = None
    level: float = 0.95
    notes: list[str] = field(default_factory=list)

    def to_pandas(self) -> Any:
        """One row per claim scorer, as :meth:`EvalTable.to_pandas`. Needs pandas."""
        return data_frame(scorer_rows(self.rows))

    def _repr_html_(self) -> str:
        return html_table(self.as_eval_table())

    def as_eval_table(self) -> EvalTable:
        """The claim rows in the shape of an answer table (one row per claim scorer), for
        the renderers that show evaluation tables; its "items" are claims."""
        return EvalTable(f"{self.grader}, per claim", self.n_claims, self.n_claims,
                         self.accuracy, self.rows, self.level, notes=list(self.notes))

    def to_dict(self) -> dict[str, Any]:
        return json_safe({"grader": self.grader, "n_answers": self.n_answers,
                       "n_claims": self.n_claims, "accuracy": list(self.accuracy),
                       "level": self.level, "notes": self.notes,
                       "scorers": [r.to_dict() for r in self.rows],
                       "answers": None if self.answers is None else self.answers.to_dict()})


def _quiet_interval(metric: str, conf: np.ndarray, correct: np.ndarray, groups: np.ndarray,
                    n_resamples: int, level: float, seed: int) -> tuple[float, float, float]:
    import warnings

    if conf.size == 0:
        return _NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        iv = bootstrap_interval(metric, conf, correct, groups=groups, n_resamples=n_resamples,
                                level=level, seed=seed)
    return (iv.point, iv.low, iv.high)


def _claim_audit(conf: np.ndarray, correct: np.ndarray, length: np.ndarray,
                 n_strata: int) -> dict[str, Any]:
    import warnings

    if conf.size < 3:
        return {"length_spearman": math.nan, "stratified_auroc": math.nan}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"length_spearman": length_correlations(conf, correct, length)
                ["conf_length_spearman"],
                "stratified_auroc": stratified_auroc(conf, correct, length, n_strata=n_strata)}


def evaluate_claims(records: list[Record], *, grader: str, n_resamples: int = 1000,
                    level: float = 0.95, seed: int = 0, n_strata: int = 4,
                    answers: bool = True) -> ClaimTable:
    """Claim-level AUROC and PRR of every claim scorer, with intervals bootstrapped over
    answers, the claim-level length audit, and (``answers``) the answer-level table.

    ``grader`` names the claim grade (``judge``, ``labels``, ...). A claim
    without that grade is left out; one without a confidence is left out of
    that scorer's row and counted with its reason.
    """
    cols = claim_columns(records, grader)
    with_claims = len({int(g) for g in cols.group})
    accuracy = _quiet_interval("accuracy", np.zeros_like(cols.correct), cols.correct, cols.group,
                               n_resamples, level, seed)
    rows = []
    for name, conf in cols.confidence.items():
        keep = ~np.isnan(conf)
        reasons: dict[str, int] = {}
        for why in cols.reasons[name]:
            if why:
                reasons[why] = reasons.get(why, 0) + 1
        row = ScorerRow(name, int(keep.sum()), int((~keep).sum()), {}, reasons)
        for m in CLAIM_METRICS:
            row.metrics[m] = _quiet_interval(m, conf[keep], cols.correct[keep],
                                             cols.group[keep], n_resamples, level, seed)
        row.audit = _claim_audit(conf[keep], cols.correct[keep], cols.length[keep], n_strata)
        rows.append(row)
    table = ClaimTable(grader, with_claims, int(cols.correct.size), accuracy, rows, level=level)
    if answers and any(ANSWER_GRADE in r.grades for r in records):
        table.answers = evaluate_records(records, grader=ANSWER_GRADE, n_resamples=n_resamples,
                                         level=level, seed=seed, n_strata=n_strata)
    if cols.correct.size == 0:
        table.notes.append(f"no claim has a {grader!r} grade")
    return table
