r"""Acting on claim confidences: drop or mark the doubtful claims of an answer.

:func:`refine` keeps each claim whose confidence is at or above the
threshold and drops (``action="drop"``) or marks (``action="mark"``) the
others. The confidence is a claim scorer's value turned into a probability
by a :class:`~confide.decisions.Calibrator` fitted on graded claims
(:func:`fit_claim_calibrator`: the one calibration core of
:mod:`confide.metrics.crossfit`), or the raw value when no calibrator is
given. A claim without a confidence (NaN) is never read as confident: it
counts as below any threshold.

Claims listed by a model can share one sentence of the answer. A sentence is
removed only when every claim on it is below the threshold; a doubtful claim
that shares its sentence with a kept one is marked instead, so a claim at or
above the threshold is never removed.

References: [1] Mohri & Hashimoto, 2024, "Language Models with Conformal
Factuality Guarantees", ICML (removing low-confidence claims from an
answer); [2] Zadrozny & Elkan, 2002, KDD (isotonic calibration).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from confide.core.errors import InvalidInputError
from confide.core.jsonsafe import json_safe
from confide.core.options import CHOICES, check_choice, check_option
from confide.core.records import Claim, Record
from confide.decisions.calibration import Calibrator, fit_calibrator
from confide.evaluation.claims import claim_columns
from confide.metrics import crossfit_probabilities
from confide.metrics.crossfit import Method
from confide.runs.claims import claim_record

__all__ = ["ACTIONS", "ClaimDecision", "RefineSummary", "Refined", "claims_payload",
           "fit_claim_calibrator", "refine", "refine_run"]

ACTIONS = CHOICES["claim_action"]
MARK = " [unsure]"


@dataclass
class ClaimDecision:
    """One claim, its confidence (calibrated where a calibrator was given) and whether it
    stays (``kept``) and, if not, whether its text was removed (else marked)."""

    text: str
    start: int
    end: int
    confidence: float
    kept: bool
    removed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "start": self.start, "end": self.end,
                "confidence": json_safe(self.confidence),
                "kept": self.kept, "removed": self.removed}


@dataclass
class Refined:
    """An answer with its doubtful claims dropped or marked."""

    original: str
    text: str
    threshold: float
    scorer: str
    claims: list[ClaimDecision] = field(default_factory=list)

    @property
    def n_doubtful(self) -> int:
        return sum(not c.kept for c in self.claims)

    def to_dict(self) -> dict[str, Any]:
        return {"original": self.original, "text": self.text, "threshold": self.threshold,
                "scorer": self.scorer, "claims": [c.to_dict() for c in self.claims]}


def fit_claim_calibrator(records: list[Record], scorer: str, *, grader: str,
                         method: Method = "isotonic") -> Calibrator:
    """A calibrator of claim scorer ``scorer`` fitted on the graded claims of ``records``
    (:func:`~confide.decisions.calibration.fit_calibrator`)."""
    cols = claim_columns(records, grader)
    if scorer not in cols.confidence:
        raise InvalidInputError(f"no graded claim has a {scorer!r} score", field="scorer")
    return fit_calibrator(cols.confidence[scorer], cols.correct, method=method,
                          scorer=scorer, grader=grader, source="claims")


def _record_of(answer: Any) -> Record:
    record = getattr(answer, "record", answer)
    if not isinstance(record, Record) or record.claims is None:
        raise InvalidInputError("refine needs an answer split into scored claims (a record "
                                "of a long-form run, or confide.runs.claims.claim_record)",
                                field="answer")
    return record


def refine(answer: Any, threshold: float, *, scorer: str | None = None,
           calibrator: Calibrator | None = None, action: str = "drop",
           mark: str = MARK) -> Refined:
    r"""The answer with every claim below ``threshold`` dropped or marked.

    .. math:: \text{keep } C \iff \hat p(C) \ge \tau, \qquad
              \hat p(C) = g(c_s(C))

    with :math:`c_s` claim scorer ``s``'s confidence, :math:`g` the
    calibrator (identity without one) and :math:`\tau` = ``threshold``.

    Parameters
    ----------
    answer : Record or ScoredAnswer
        An answer whose claims are scored (``record.claims``).
    threshold : float
        In [0, 1] with a calibrator; in the scorer's own units without.
    scorer : str, optional
        The claim scorer; default the calibrator's, else the first scored.
    calibrator : Calibrator, optional
        Turns the scorer's values into probabilities (:func:`fit_claim_calibrator`).
    action : {"drop", "mark"}, default "drop"
    mark : str
        Appended after a marked claim.

    Returns
    -------
    :class:`Refined`: the new text and one :class:`ClaimDecision` per claim.
    """
    record = _record_of(answer)
    check_choice("claim_action", action)
    if calibrator is not None:
        check_option("claim_threshold", threshold)
    elif isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or not math.isfinite(threshold):
        raise InvalidInputError(f"must be a finite number, got {threshold!r}",
                                field="claim_threshold")
    threshold = float(threshold)
    claims: list[Claim] = record.claims or []
    if scorer is None:
        scorer = calibrator.scorer if calibrator is not None else next(
            (s for c in claims for s in c.scores), "")
    if claims and not any(scorer in c.scores for c in claims):
        # every claim would read NaN and be dropped: a misspelt name, not doubt
        raise InvalidInputError(f"the claims have no {scorer!r} score; they have "
                                f"{sorted({s for c in claims for s in c.scores})}",
                                field="scorer")
    raw = np.array([c.scores.get(scorer, math.nan) for c in claims], dtype=float)
    conf = calibrator.predict(raw) if calibrator is not None and raw.size else raw
    decisions = [ClaimDecision(c.text, c.start, c.end, float(p),
                               kept=bool(not math.isnan(p) and p >= threshold))
                 for c, p in zip(claims, conf)]
    spans: dict[tuple[int, int], list[ClaimDecision]] = {}
    for d in decisions:
        spans.setdefault((d.start, d.end), []).append(d)
    text = record.greedy.text
    for (start, end), group in sorted(spans.items(), reverse=True):
        if all(d.kept for d in group):
            continue
        if action == "drop" and not any(d.kept for d in group):
            for d in group:
                d.removed = True
            tail = end
            while tail < len(text) and text[tail].isspace():
                tail += 1
            text = text[:start] + text[tail:]
        else:
            text = text[:end] + mark + text[end:]
    return Refined(record.greedy.text, text.strip(), threshold, scorer, decisions)


@dataclass
class RefineSummary:
    """What refining a run's answers did, measured honestly.

    ``accuracy_all``: share of right claims among all graded claims;
    ``accuracy_kept``: among those kept, with each claim's probability
    cross-fitted (:func:`~confide.metrics.crossfit_probabilities`: no claim is
    calibrated on its own grade); ``kept`` / ``n``: claims kept of graded ones.
    ``note`` says why nothing was refined (too few right or wrong claims).
    """

    scorer: str
    threshold: float
    n: int = 0
    kept: int = 0
    accuracy_all: float = math.nan
    accuracy_kept: float = math.nan
    path: str | None = None
    note: str = ""


def refine_run(records: list[Record], *, scorer: str, grader: str, threshold: float,
               action: str = "drop", out: str | Path | None = None,
               seed: int = 0) -> RefineSummary:
    """Refine every answer of a long-form run with a calibrator fitted on its graded claims.

    Writes ``out`` (JSONL: one :class:`Refined` per answer, with its item id)
    and the calibrator beside it (``claims_calibrator.json``), so
    :func:`refine` and ``confide serve`` can apply it to new answers.
    """
    summary = RefineSummary(scorer, float(threshold))
    cols = claim_columns(records, grader)
    conf = cols.confidence.get(scorer, np.full(cols.correct.size, math.nan))
    keep = ~np.isnan(conf)
    try:
        calibrator = fit_claim_calibrator(records, scorer, grader=grader)
        honest = crossfit_probabilities(conf[keep], cols.correct[keep], seed=seed)
    except InvalidInputError as exc:
        summary.note = f"not refined: {str(exc).removeprefix(f'{exc.field}: ')}"
        return summary
    right = cols.correct[keep]
    summary.n, summary.kept = int(right.size), int((honest >= threshold).sum())
    summary.accuracy_all = float(right.mean())
    if summary.kept:
        summary.accuracy_kept = float(right[honest >= threshold].mean())
    if out is not None:
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8") as fh:
            for record in records:
                if record.claims is None:
                    continue
                done = refine(record, threshold, calibrator=calibrator, action=action)
                fh.write(json.dumps({"id": record.item.id, **done.to_dict()},
                                    ensure_ascii=False) + "\n")
        calibrator.save(target.with_name("claims_calibrator.json"))
        summary.path = str(target)
    return summary


def claims_payload(record: Record, config: Any, *, backend: Any = None,
                   calibrator: Calibrator | None = None) -> list[dict[str, Any]]:
    """The claim list ``confide serve`` returns in its ``confide`` object.

    Splits and scores ``record``'s claims (:func:`~confide.runs.claims.claim_record`,
    no grading: a served answer has no references) and lists each with its
    span, its confidences (null with a reason where a scorer could not
    answer) and, with a calibrator, its calibrated probability and whether
    :func:`refine` at ``config.threshold`` keeps it.
    """
    claim_record(record, replace(config, grader=None), backend=backend)
    decided = (refine(record, config.threshold, calibrator=calibrator).claims
               if calibrator is not None else None)
    out = []
    for n, claim in enumerate(record.claims or []):
        entry: dict[str, Any] = {
            "text": claim.text, "start": claim.start, "end": claim.end,
            "confidences": json_safe(claim.scores),
            "reasons": dict(claim.score_errors)}
        if decided is not None:
            entry["calibrated"] = json_safe(decided[n].confidence)
            entry["kept"] = decided[n].kept
        out.append(entry)
    return out
