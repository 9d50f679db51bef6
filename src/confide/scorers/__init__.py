"""Confidence scorers. Importing this package registers every built-in scorer."""

from confide.scorers import whitebox  # noqa: F401  (registers)
from confide.scorers import sampling, semantic  # noqa: F401  (registers)
from confide.scorers import reflexive  # noqa: F401  (registers)
from confide.scorers import consistency, information, judged  # noqa: F401  (registers)
from confide.scorers.base import SCORERS, Cost, Need, ScorerSpec, ScoringContext, run_scorer, scorer

__all__ = ["SCORERS", "Cost", "Need", "ScorerSpec", "ScoringContext", "run_scorer", "scorer"]
