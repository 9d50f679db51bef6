"""Scorer registry: a scorer is a plain function plus one decorator.

A scorer maps a :class:`~confide.records.Record` (and, when it asks for one, a
:class:`ScoringContext` with shared cached features and the backend) to a
*confidence*: a float where **higher means more likely correct**. A scorer that
cannot answer raises :class:`~confide.errors.CannotScore` with the reason; the
runner stores NaN and keeps the reason. NaN is never read as "confident".

:func:`run_scorer`, the one way the package applies a scorer, enforces two
rules for every scorer, registered now or later:

* an empty greedy answer (:attr:`Generation.empty <confide.records.Generation.empty>`)
  is no answer, so there is
  nothing to put a confidence on: every scorer gives NaN with a reason;
* a value that is not a finite number (NaN, :math:`\pm\infty`) is stored as
  NaN with a reason.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from confide.errors import CannotScore
from confide.records import Record
from confide.registry import Registry

__all__ = ["EMPTY_ANSWER", "SCORERS", "Cost", "Need", "ScorerSpec", "ScoringContext", "scorer", "run_scorer"]


class Need(str, Enum):
    """What a scorer needs from the run; the runner skips scorers whose needs are unmet."""

    TOKEN_LOGPROBS = "token_logprobs"      # log p of each chosen token
    TOKEN_ENTROPIES = "token_entropies"    # entropy of the full next-token distribution
    FULL_DISTRIBUTION = "token_kl_uniform"  # statistics needing every logit (self-certainty)
    RENYI_UNIFORM = "token_renyi_uniform"  # every logit: Rényi divergence to uniform
    FISHER_RAO_UNIFORM = "token_fisher_rao_uniform"  # every logit: Fisher-Rao distance
    TOP_LOGPROBS = "top_logprobs"          # top-k alternatives
    SAMPLES = "samples"                    # k sampled answers
    HIDDEN_STATES = "hidden_states"        # pooled hidden states
    EXTRA_PROMPT = "extra_prompt"          # asks the model a second question
    TRAINING = "training"                  # must be fitted on graded records first
    UNCONDITIONED = "unconditioned_logprobs"  # the answer scored again without the question
    ATTENTIONS = "attentions"              # attention weights of a pass over prompt + answer


class Cost(str, Enum):
    """Rough price of a scorer beyond the greedy generation."""

    FREE = "free"              # arithmetic on statistics already stored
    FEATURES = "features"      # shared pairwise/embedding features
    MODEL_CALLS = "model_calls"  # extra forward passes or generations


@dataclass
class ScoringContext:
    """What scorers share within a run: a feature cache, the backend and options."""

    backend: Any = None
    judge: Any = None
    features: dict[tuple[str, str], Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def cached(self, record: Record, name: str, compute: Callable[[], Any]) -> Any:
        key = (record.item.id, name)
        if key not in self.features:
            self.features[key] = compute()
        return self.features[key]


@dataclass(frozen=True)
class ScorerSpec:
    name: str
    fn: Callable[..., float]
    needs: frozenset[Need]
    cost: Cost
    n_samples: int = 0
    takes_context: bool = False
    summary: str = ""

    @property
    def family(self) -> str:
        """The module that defines the scorer (``whitebox``, ``semantic``, ...): its family."""
        return self.fn.__module__.rsplit(".", 1)[-1]


SCORERS: Registry[ScorerSpec] = Registry("scorer")
EMPTY_ANSWER = "empty answer: nothing to put a confidence on"


def scorer(name: str, *, needs: Iterable[Need] = (), cost: Cost = Cost.FREE,
           n_samples: int = 0) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Register ``fn`` as scorer ``name``; ``fn(record)`` or ``fn(record, ctx)``."""

    def decorate(fn: Callable[..., float]) -> Callable[..., float]:
        takes_context = len(inspect.signature(fn).parameters) >= 2
        doc = inspect.getdoc(fn) or ""
        SCORERS.add(name, ScorerSpec(name=name, fn=fn, needs=frozenset(needs), cost=cost,
                                     n_samples=n_samples, takes_context=takes_context,
                                     summary=doc.splitlines()[0] if doc else ""))
        return fn

    return decorate


def run_scorer(spec: ScorerSpec, record: Record, ctx: ScoringContext | None = None
               ) -> tuple[float, str | None]:
    """Apply one scorer; return ``(confidence, None)`` or ``(nan, reason)``.

    An empty greedy answer and a non-finite value give ``(nan, reason)``.
    """
    if record.greedy.empty:
        return math.nan, EMPTY_ANSWER
    try:
        value = spec.fn(record, ctx or ScoringContext()) if spec.takes_context else spec.fn(record)
    except CannotScore as exc:
        return math.nan, exc.reason
    value = float(value)
    if not math.isfinite(value):
        return math.nan, f"scorer returned {value} (not a finite number)"
    return value, None
