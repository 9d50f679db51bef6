"""The seam between ``confide serve`` and fitted decisions (calibrators, abstention policies).

A calibrator maps one scorer's raw confidence to a probability of being
correct; an abstention policy maps a confidence (the calibrated probability,
or one scorer's raw value) to *answer* or *abstain*. Both are fitted by
:mod:`confide.decisions` (``confide calibrate``, ``confide abstain``) and
saved as JSON files; this module loads them with the decisions' own loaders, which
refuse a file they cannot read with its path and field named.

What the server needs from the loaded objects (:class:`Calibrator`,
:class:`Policy`) is small, so anything with that shape can be passed to
:func:`confide.serve.app.create_app` directly.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from confide.core.errors import InvalidInputError

__all__ = ["Calibrator", "Policy", "decide", "load_calibrator", "load_policy"]


@runtime_checkable
class Calibrator(Protocol):
    """Maps the raw confidence of scorer ``scorer`` to a probability in [0, 1]."""

    scorer: str

    def predict(self, confidence: float) -> float: ...


@runtime_checkable
class Policy(Protocol):
    """Answers or abstains given a confidence.

    ``scorer`` names the raw confidence it reads, or is ``None`` to read the
    calibrated probability. ``decide`` returns True / ``"answer"`` to answer and
    False / ``"abstain"`` to abstain.
    """

    scorer: str | None

    def decide(self, confidence: float) -> bool | str: ...


def load_calibrator(path: str | Path) -> Calibrator:
    """Load a fitted calibrator (JSON: :func:`confide.decisions.calibration.load_calibrator`)."""
    from confide.decisions.calibration import load_calibrator as load  # scipy: only when asked

    obj = load(path)
    if not isinstance(obj, Calibrator):
        raise InvalidInputError("the loaded object has no `scorer` and `predict(confidence)`",
                                file=str(path))
    return obj


def load_policy(path: str | Path) -> Policy:
    """Load a fitted abstention policy (JSON: :func:`confide.decisions.abstention.load_policy`).
    """
    from confide.decisions.abstention import load_policy as load  # scipy: only when asked

    obj = load(path)
    if not isinstance(obj, Policy):
        raise InvalidInputError("the loaded object has no `scorer` and `decide(confidence)`",
                                file=str(path))
    return obj


def decide(policy: Policy, confidences: dict[str, float],
           calibrated: float | None) -> dict[str, Any]:
    """Apply ``policy``; a missing or NaN confidence abstains (never read as confident).

    >>> class Threshold:
    ...     scorer = "msp"
    ...     def decide(self, c): return c >= -1.0
    >>> decide(Threshold(), {"msp": -0.5}, None)["decision"]
    'answer'
    >>> decide(Threshold(), {"msp": float("nan")}, None)["decision"]
    'abstain'
    """
    source = policy.scorer if policy.scorer is not None else "calibrated"
    value = calibrated if policy.scorer is None else confidences.get(policy.scorer)
    if value is None or math.isnan(value):
        return {"decision": "abstain", "decided_on": source,
                "decision_reason": f"no {source} confidence for this answer"}
    verdict = policy.decide(float(value))
    if isinstance(verdict, str):
        if verdict not in ("answer", "abstain"):
            raise InvalidInputError(f"policy returned {verdict!r}, not 'answer' or 'abstain'",
                                    field="policy")
        answer = verdict == "answer"
    else:
        answer = bool(verdict)
    return {"decision": "answer" if answer else "abstain", "decided_on": source}
