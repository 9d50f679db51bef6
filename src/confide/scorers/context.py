"""What scorers share within a run: the feature cache, the backend, the judge and settings.

It sits below both :mod:`confide.scorers.features` (the shared intermediates, which
compute through :meth:`ScoringContext.cached`) and :mod:`confide.scorers`
(which re-exports it), so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confide.backends.base import Backend, Prompt
from confide.core.reasoning import Tags
from confide.core.records import Generation, Record
from confide.equivalence.clustering import Judge

__all__ = ["Fitted", "FittedModel", "ScoringContext"]


class FittedModel(Protocol):
    """What the fitted kinds (:mod:`confide.scorers.fitted`) read: a model of that kind."""

    kind: str
    name: str

    def confidence(self, record: Record, ctx: ScoringContext) -> float:
        """One record's confidence; raises :class:`~confide.core.errors.CannotScore`."""


@dataclass(frozen=True)
class Fitted:
    """A fitted model being applied, and to what.

    ``run``: the digest of the run whose records are scored (its own training run gets
    out-of-fold scores); ``final``: the final model's score for every record, items it
    was trained on included.
    """

    model: FittedModel
    run: str | None = None
    final: bool = False


@dataclass
class ScoringContext:
    """What scorers share within a run.

    ``backend`` answers the scorers that ask the model again; ``judge`` decides which
    answers mean the same; ``seed`` seeds their draws (per item, through
    :func:`~confide.backends.item_seed`); ``prompt`` is the rendered prompt of the record
    being scored; ``judge_backends`` the models a judge panel asks (default: ``backend``);
    ``fitted`` the fitted model the fitted kinds apply; ``reasoning_tags`` the run's trace
    tags, set in a reasoning run (its prompts were rendered in a chat template's thinking
    mode, replies with no trace included: :meth:`thinking`). ``features`` maps (item id,
    feature name) to a computed value (:meth:`cached`); ``options`` holds a scorer's own
    settings by name (``rauq_alpha``, ``attention_layer``, ``eigenscore_key``,
    ``p_true_samples``, ``verbalized_1s_max_new_tokens``, ...), each read by that scorer.
    """

    backend: Backend | None = None
    judge: Judge | None = None
    features: dict[tuple[str, str], Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    prompt: Prompt | None = None
    judge_backends: list[Backend] = field(default_factory=list)
    fitted: Fitted | None = None
    reasoning_tags: Tags | None = None

    def thinking(self, gen: Generation) -> bool:
        """Whether ``gen`` was generated from its prompt rendered in thinking mode, so a pass
        over it renders the prompt so too (``thinking=`` of the backend's passes): in a
        reasoning run, every reply (one without a trace too: the model skipped or never
        closed it, the prompt was the same); elsewhere, a reply that has a trace.

        >>> ScoringContext(reasoning_tags=("<think>", "</think>")).thinking(Generation("4"))
        True
        >>> ScoringContext().thinking(Generation("4"))
        False
        """
        return self.reasoning_tags is not None or gen.trace is not None

    def cached(self, record: Record, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per (record's item id, ``name``), then the stored value."""
        key = (record.item.id, name)
        if key not in self.features:
            self.features[key] = compute()
        return self.features[key]
