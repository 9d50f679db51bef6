"""Confidence scorers. Importing this package registers every built-in scorer.

Answer-level scorers (one confidence per answer) and claim-level ones
(:mod:`~confide.scorers.claims`, one per claim of a long answer) share one
registry, :data:`SCORERS`; :func:`scorer_at` looks a name up at one level.
The fitted kinds (:mod:`~confide.scorers.fitted`) are answer-level scorers
that need a model fitted on a graded run.
"""

from confide.scorers import (  # noqa: F401  (importing a family registers its scorers)
    asking,
    claims,
    consistency,
    fitted,
    forward,
    information,
    reflexive,
    relevance,
    sampling,
    semantic,
    whitebox,
)
from confide.scorers.base import (
    LEVELS,
    SCORERS,
    Cost,
    Level,
    Need,
    ScorerSpec,
    ScoringContext,
    run_scorer,
    scorer,
    scorer_at,
    scorers_at,
)

__all__ = ["FAMILIES", "LEVELS", "SCORERS", "Cost", "Level", "Need", "ScorerSpec",
           "ScoringContext", "run_scorer", "scorer", "scorer_at", "scorers_at"]

# Scorer families (their modules) in listing order: one generation's token statistics,
# then one more pass over that answer, then sampled answers, then extra questions to a
# model, then models fitted on a graded run; last the claim-level scorers.
FAMILIES = ("whitebox", "information", "forward", "sampling", "semantic", "relevance",
            "consistency",
            "reflexive", "asking", "fitted", "claims")
