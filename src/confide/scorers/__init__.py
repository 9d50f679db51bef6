"""Confidence scorers. Importing this package registers every built-in scorer."""

from confide.scorers import whitebox, information, forward  # noqa: F401  (registers)
from confide.scorers import sampling, semantic, consistency  # noqa: F401  (registers)
from confide.scorers import reflexive, judged  # noqa: F401  (registers)
from confide.scorers.base import SCORERS, Cost, Need, ScorerSpec, ScoringContext, run_scorer, scorer

__all__ = ["FAMILIES", "SCORERS", "Cost", "Need", "ScorerSpec", "ScoringContext", "run_scorer",
           "scorer"]

# Scorer families (their modules) in listing order: one generation's token statistics,
# then one more pass over that answer, then sampled answers, then extra questions to a model.
FAMILIES = ("whitebox", "information", "forward", "sampling", "semantic", "consistency",
            "reflexive", "judged")
