"""Long answers, claim by claim: split, score, grade, evaluate and refine.

A paragraph is rarely all right or all wrong, so a long answer is split into
claims, each mapped to its characters and tokens (:mod:`.split`); each claim
gets confidences from the claim-level scorers (:mod:`confide.scorers.claims`,
``level="claim"`` in the one :data:`~confide.scorers.SCORERS`) and a grade
(:mod:`.grading`); the claim stage of a run (:mod:`.run`) stores them with
each record; :mod:`.evaluation` measures the claim scorers with intervals
bootstrapped over answers; :mod:`.refining` drops or marks the claims below a
calibrated confidence.

===================  =========================================================
:mod:`.split`        ``split_claims``: sentences (no model) or listed by a model
:mod:`.grading`      claim grades (a grader, or the data file's labels)
:mod:`.run`          ``claim_record``, ``add_claims``: the claim stage of a run
:mod:`.evaluation`   ``evaluate_claims``: the claim-level table
:mod:`.refining`     ``refine``, ``refine_run``, ``claims_payload`` (the server)
===================  =========================================================

The names below are imported on first use: :mod:`.split` sits below the
scorers (they read claims' spans) while the claim stage sits above them, so
importing ``confide.claims.split`` must not import the whole stage.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confide.claims.evaluation import ClaimTable, claim_columns, evaluate_claims
    from confide.claims.grading import ANSWER_GRADE, LABELS, answer_grade, grade_claims
    from confide.claims.refining import (
        ClaimDecision,
        Refined,
        RefineSummary,
        claims_payload,
        fit_claim_calibrator,
        refine,
        refine_run,
    )
    from confide.claims.run import ClaimConfig, ClaimOutcome, add_claims, claim_record
    from confide.claims.split import sentence_spans, split_claims, token_spans
    from confide.scorers.claims import DEFAULT_CLAIM_SCORERS, aggregate_claims

# name -> the module that defines it
_WHERE = {
    **dict.fromkeys(("ClaimTable", "claim_columns", "evaluate_claims"),
                    "confide.claims.evaluation"),
    **dict.fromkeys(("ANSWER_GRADE", "LABELS", "answer_grade", "grade_claims"),
                    "confide.claims.grading"),
    **dict.fromkeys(("ClaimDecision", "Refined", "RefineSummary", "claims_payload",
                     "fit_claim_calibrator", "refine", "refine_run"), "confide.claims.refining"),
    **dict.fromkeys(("ClaimConfig", "ClaimOutcome", "add_claims", "claim_record"),
                    "confide.claims.run"),
    **dict.fromkeys(("sentence_spans", "split_claims", "token_spans"), "confide.claims.split"),
    **dict.fromkeys(("DEFAULT_CLAIM_SCORERS", "aggregate_claims"), "confide.scorers.claims"),
}

__all__ = ["ANSWER_GRADE", "DEFAULT_CLAIM_SCORERS", "LABELS", "ClaimConfig", "ClaimDecision",
           "ClaimOutcome", "ClaimTable", "RefineSummary", "Refined", "add_claims",
           "aggregate_claims", "answer_grade", "claim_columns", "claim_record",
           "claims_payload", "evaluate_claims", "fit_claim_calibrator", "grade_claims",
           "refine", "refine_run", "sentence_spans", "split_claims", "token_spans"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'confide.claims' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
