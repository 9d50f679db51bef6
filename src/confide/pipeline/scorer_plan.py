"""Which scorers an answer can feed, and scoring it: one rule for every path.

A generated record (``confide run``, ``confide.score``, the server) and an imported
one (``confide score``) are planned and scored here alike, in two steps:

1. :func:`plan_scorers`, once for a run: the chosen scorers its *source* can ever feed
   (a backend's :attr:`~confide.backends.Backend.capabilities`, or what a log can hold:
   :data:`IMPORTABLE`); the others are skipped with why;
2. :func:`score_record`, for each record: a scorer whose needs the record itself does
   not meet (a reply without log-probabilities, samples without statistics) gets NaN
   with the reason, the others run through :func:`~confide.scorers.run_scorer`.
   :class:`ScorerPlan` remembers the split for each kind of record.

What a record holds is read from the record (:func:`record_capabilities`), whatever
path brought it; what only a live model gives (a second prompt, attentions, the
answer without the question, hidden states) comes from the source.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from confide.core.needs import (
    FULL_DISTRIBUTION,
    MEMBER_STATISTICS,
    MODEL_PASSES,
    TOKEN_STATISTICS,
    Need,
)
from confide.core.records import Generation, Record
from confide.scorers import ScorerSpec, ScoringContext, run_scorer, scorer_at

__all__ = ["IMPORTABLE", "Capabilities", "ScorerPlan", "plan_scorers", "record_capabilities",
           "score_record", "skip_reason"]

#: What an imported record can hold: a log has no model behind it and at most the top-k
#: (and, from confide's jsonl, each ensemble member's chosen-token log-probabilities).
IMPORTABLE = frozenset({Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS, Need.TOKEN_ENTROPIES,
                        Need.SAMPLES, Need.CHOICE_LOGLIKELIHOODS, Need.TRACE,
                        Need.MEMBER_LOGPROBS})
#: Needs a record carries itself, so each record is checked for them.
_HELD = frozenset({*TOKEN_STATISTICS, *MEMBER_STATISTICS, Need.SAMPLES,
                   Need.CHOICE_LOGLIKELIHOODS, Need.TRACE})

#: ``(what the greedy answer holds, what the greedy answer and every sample hold)``.
Capabilities = tuple[frozenset[Need], frozenset[Need]]


def _fitted_reason(name: str) -> str:
    return (f"fitted on a graded run afterwards (confide fit RUN --kind {name}; "
            "confide eval RUN --with FILE)")


def skip_reason(spec: ScorerSpec, capabilities: Iterable[Need], *,
                imported: bool = False) -> str | None:
    """Why no answer from a source with ``capabilities`` can feed ``spec`` (None: one may).

    ``imported``: the source is a log file (its capabilities :data:`IMPORTABLE`), and
    the reason says what a log lacks; otherwise it names what the backend cannot give.
    """
    have = frozenset(capabilities)
    if imported:
        if Need.TRAINING in spec.needs:
            return _fitted_reason(spec.name)
        model = sorted(n.value for n in spec.needs & (MODEL_PASSES | {Need.HIDDEN_STATES}))
        if model:
            return f"needs the model ({', '.join(model)}): imported generations have no model"
        full = sorted(n.value for n in spec.needs & FULL_DISTRIBUTION)
        if full:
            return (f"imported generations: no {', '.join(full)} (it needs the whole "
                    "next-token distribution; a log holds at most the top-k log-probabilities)")
        return None
    missing = sorted(n.value for n in spec.needs if n not in have and n is not Need.TRAINING)
    why = [f"backend cannot give {', '.join(missing)}"] if missing else []
    if Need.TRAINING in spec.needs:
        why.append(_fitted_reason(spec.name))
    return "; ".join(why) or None


def plan_scorers(names: Sequence[str], capabilities: Iterable[Need], *, imported: bool = False
                 ) -> tuple[list[ScorerSpec], dict[str, str]]:
    """Split chosen answer-level scorers into those the source can feed and those skipped
    (with why, :func:`skip_reason`).

    A name that is not an answer-level scorer raises
    :class:`~confide.core.errors.UnknownNameError`; for a claim-level scorer the message
    says so (those go to the claim stage). A fitted kind (needs ``training``) is skipped:
    it is fitted on the graded run afterwards (``confide fit``) and applied with
    ``confide eval --with``.
    """
    have = frozenset(capabilities)
    usable, skipped = [], {}
    for name in names:
        spec = scorer_at(name, "answer")
        why = skip_reason(spec, have, imported=imported)
        if why is None:
            usable.append(spec)
        else:
            skipped[name] = why
    return usable, skipped


def record_capabilities(record: Record, live: Iterable[Need] = ()) -> Capabilities:
    """What ``record`` holds, for its greedy answer alone and for all its answers, plus the
    ``live`` capabilities a model behind it gives (those it does not carry itself)."""
    answers = [record.greedy, *record.samples]
    greedy = {s for s in TOKEN_STATISTICS if getattr(record.greedy, s.value) is not None}
    every = {s for s in TOKEN_STATISTICS
             if all(getattr(g, s.value) is not None for g in answers)}
    greedy |= _member_statistics(record.greedy)
    every |= frozenset.intersection(*(_member_statistics(g) for g in answers))
    if record.greedy.trace is not None:  # a reasoning reply: its trace is a span of its own
        greedy.add(Need.TRACE)
        if all(g.trace is not None for g in answers):
            every.add(Need.TRACE)
    extra = {n for n in live if n not in _HELD}
    if record.samples:
        extra.add(Need.SAMPLES)
    if "choice_loglikelihoods" in record.item.metadata:
        extra.add(Need.CHOICE_LOGLIKELIHOODS)
    return frozenset(greedy | extra), frozenset(every | extra)


def _member_statistics(gen: Generation) -> frozenset[Need]:
    """What ``gen``'s ensemble member statistics hold: ``member_logprobs`` when it has
    any, ``member_entropies`` when the three statistics of whole distributions are there."""
    stats = gen.members
    if stats is None:
        return frozenset()
    whole = (stats.entropies, stats.mean_entropy, stats.mean_cross_entropy)
    if any(s is None for s in whole):
        return frozenset({Need.MEMBER_LOGPROBS})
    return MEMBER_STATISTICS


def _from_samples(spec: ScorerSpec) -> frozenset[Need]:
    """The statistics ``spec`` reads from every sample: its sample statistics, and the
    member statistics of a scorer that needs samples (an ensemble's Monte Carlo over them)."""
    if Need.SAMPLES not in spec.needs:
        return spec.sample_statistics
    return spec.sample_statistics | (spec.needs & MEMBER_STATISTICS)


class ScorerPlan:
    """Which of a run's scorers a record of given capabilities feeds, and why the others
    give NaN: worked out once per kind of record and looked up after that.

    The rule is per statistic: a token statistic a scorer reads from the samples
    (:attr:`ScorerSpec.sample_statistics <confide.scorers.ScorerSpec.sample_statistics>`)
    must be held by every answer, any other need by the greedy answer. So ``cocoa``, which
    weighs the greedy answer's log-probabilities by its agreement with the samples' texts,
    runs on samples that are plain text. Ensemble member statistics
    (:data:`~confide.core.needs.MEMBER_STATISTICS`) are read from every answer by a scorer
    that needs samples (``ens_seq_*``), from the greedy answer otherwise (``ens_*``).
    """

    def __init__(self, specs: Sequence[ScorerSpec], *, imported: bool = False) -> None:
        self.specs = list(specs)
        self._source = " (imported generations)" if imported else ""
        self._cache: dict[Capabilities, list[tuple[ScorerSpec, str | None]]] = {}

    def fed(self, caps: Capabilities) -> list[str]:
        """The scorers a record of these capabilities feeds."""
        return [spec.name for spec, why in self.split(caps) if why is None]

    def split(self, caps: Capabilities) -> list[tuple[ScorerSpec, str | None]]:
        """Each scorer with None (it runs) or why a record of ``caps`` cannot feed it."""
        found = self._cache.get(caps)
        if found is None:
            greedy, every = caps
            found = []
            for spec in self.specs:
                absent = sorted(n.value for n in spec.needs
                                if n not in greedy and n is not Need.TRAINING)
                unsampled = sorted(n.value for n in _from_samples(spec)
                                   if n in greedy and n not in every)
                why = [f"this record has no {', '.join(absent)}"] if absent else []
                if unsampled:
                    why.append(f"not every sample has {', '.join(unsampled)}")
                found.append((spec, "; ".join(why) + self._source if why else None))
            self._cache[caps] = found
        return found


def score_record(record: Record, plan: ScorerPlan, ctx: ScoringContext,
                 caps: Capabilities | None = None) -> Capabilities:
    """Fill ``record.scores``: NaN with the reason where the record cannot feed a scorer
    or the scorer cannot answer. Returns the capabilities that decided (``caps``, else
    the record's own with the context's backend as its live source)."""
    if caps is None:
        live = ctx.backend.capabilities if ctx.backend is not None else ()
        caps = record_capabilities(record, live)
    for spec, why in plan.split(caps):
        if why is None:
            value, reason = run_scorer(spec, record, ctx)
        else:
            value, reason = math.nan, why
        record.scores[spec.name] = value
        if reason is not None:
            record.score_errors[spec.name] = reason
    return caps
