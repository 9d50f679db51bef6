"""From confidence to decisions: calibrate, abstain with a guarantee, route, vote, stop early.

============================  =================================================
:mod:`.calibration`           Platt, isotonic and histogram calibrators (JSON),
                              reliability-diagram data
:mod:`.abstention`            answer/abstain threshold with
                              :math:`P(\\text{error rate} \\le \\alpha) \\ge 1-\\delta`
                              (Learn then Test)
:mod:`.routing`               small → large model cascade: accuracy against cost
:mod:`.voting`                majority vote and CISC over sampled answers
:mod:`.adaptive`              sample in rounds, stop when the leader is decisive
============================  =================================================

``load_calibrator(path)`` and ``load_policy(path)`` read the JSON files that
``confide calibrate`` and ``confide abstain`` write; ``confide serve
--calibrator FILE --policy FILE`` loads them through these functions.
"""

from confide.decisions.abstention import (
    AbstentionFit,
    AbstentionPolicy,
    abstain_run,
    fit_abstention,
    load_policy,
)
from confide.decisions.adaptive import AdaptiveReport, adaptive_vote, replay_adaptive
from confide.decisions.calibration import (
    CalibrationFit,
    Calibrator,
    ReliabilityDiagram,
    calibrate_run,
    fit_calibrator,
    load_calibrator,
    reliability_diagram,
)
from confide.decisions.routing import (
    CascadeCurve,
    CascadePoint,
    cascade,
    cascade_curve,
    route_models,
)
from confide.decisions.voting import VoteComparison, cisc_vote, compare_votes, majority_vote

__all__ = [
    "AbstentionFit",
    "AbstentionPolicy",
    "AdaptiveReport",
    "CalibrationFit",
    "Calibrator",
    "CascadeCurve",
    "CascadePoint",
    "ReliabilityDiagram",
    "VoteComparison",
    "abstain_run",
    "adaptive_vote",
    "calibrate_run",
    "cascade",
    "cascade_curve",
    "cisc_vote",
    "compare_votes",
    "fit_abstention",
    "fit_calibrator",
    "load_calibrator",
    "load_policy",
    "majority_vote",
    "reliability_diagram",
    "replay_adaptive",
    "route_models",
]
