"""Long answers, claim by claim: split, score, grade, evaluate and refine.

A paragraph is rarely all right or all wrong, so a long answer is split into
claims, each mapped to its characters and tokens (:mod:`.split`); each claim
gets confidences from the claim scorers (:mod:`.scorers`, their own registry
:data:`CLAIM_SCORERS`) and a grade (:mod:`.grading`); the claim stage of a run
(:mod:`.run`) stores them with each record; :mod:`.evaluation` measures the
claim scorers with intervals bootstrapped over answers; :mod:`.refining`
drops or marks the claims below a calibrated confidence.

===================  =========================================================
:mod:`.split`        ``split_claims``: sentences (no model) or listed by a model
:mod:`.scorers`      claim scorers and the answer-level aggregates
:mod:`.grading`      claim grades (a grader, or the data file's labels)
:mod:`.run`          ``claim_record``, ``add_claims``: the claim stage of a run
:mod:`.evaluation`   ``evaluate_claims``: the claim-level table
:mod:`.refining`     ``refine``, ``refine_run``, ``claims_payload`` (the server)
===================  =========================================================
"""

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
from confide.claims.scorers import (
    CLAIM_SCORERS,
    DEFAULT_CLAIM_SCORERS,
    ClaimScorerSpec,
    aggregate_claims,
    claim_scorer,
    run_claim_scorer,
)
from confide.claims.split import sentence_spans, split_claims, token_spans

__all__ = ["ANSWER_GRADE", "CLAIM_SCORERS", "DEFAULT_CLAIM_SCORERS", "LABELS", "ClaimConfig",
           "ClaimDecision", "ClaimOutcome", "ClaimScorerSpec", "ClaimTable", "RefineSummary",
           "Refined", "add_claims", "aggregate_claims", "answer_grade", "claim_columns",
           "claim_record", "claim_scorer", "claims_payload", "evaluate_claims",
           "fit_claim_calibrator", "grade_claims", "refine", "refine_run", "run_claim_scorer",
           "sentence_spans", "split_claims", "token_spans"]
