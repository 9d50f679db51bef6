"""Confidence scorers. Importing this package registers every built-in scorer.

Answer-level scorers (one confidence per answer) and claim-level ones
(:mod:`~confide.scorers.claims`, one per claim of a long answer) share one
registry, :data:`SCORERS`; :func:`scorer_at` looks a name up at one level.
The fitted kinds (:mod:`~confide.scorers.fitted`) are answer-level scorers
that need a model fitted on a graded run.

Other packages add scorers through the entry-point group ``confide.scorers``: each
entry point names a module (or an object in one) whose import registers scorers with
:func:`scorer`; they are loaded after the built-in ones, so they appear in
``confide scorers`` and run wherever a built-in one does. A plugin that fails to load
is left out with a warning naming it; one that reuses a built-in name is refused there.
"""

import warnings
from importlib.metadata import entry_points

from confide.scorers import (  # noqa: F401  (importing a family registers its scorers)
    asking,
    claims,
    consistency,
    ensemble,
    final_answer,
    fitted,
    forward,
    information,
    reasoning,
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

__all__ = ["FAMILIES", "LEVELS", "PLUGIN_GROUP", "SCORERS", "Cost", "Level", "Need", "ScorerSpec",
           "ScoringContext", "run_scorer", "scorer", "scorer_at", "scorers_at"]

# Scorer families (their modules) in listing order: one generation's token statistics,
# then one more pass over that answer, then sampled answers, then an ensemble's members,
# then extra questions to a model, then models fitted on a graded run; last the claim-level
# scorers.
FAMILIES = ("whitebox", "information", "reasoning", "final_answer", "forward", "sampling",
            "semantic", "relevance", "consistency",
            "ensemble", "reflexive", "asking", "fitted", "claims")

#: The entry-point group of scorer plugins (``[project.entry-points."confide.scorers"]``).
PLUGIN_GROUP = "confide.scorers"


def _load_plugins() -> None:
    for point in entry_points(group=PLUGIN_GROUP):
        try:
            point.load()
        except Exception as exc:  # a broken plugin must not take the built-in scorers down
            warnings.warn(f"scorer plugin {point.name!r} ({point.value}) was not loaded: "
                          f"{type(exc).__name__}: {exc}", stacklevel=2)


_load_plugins()
