r"""Scorer registry: a scorer is a plain function plus one decorator.

A scorer maps a :class:`~confide.core.records.Record` (and, when it asks for one, a
:class:`ScoringContext` with shared cached features and the backend) to a
*confidence*: a float where **higher means more likely correct**. A scorer that
cannot answer raises :class:`~confide.core.errors.CannotScore` with the reason; the
runner stores NaN and keeps the reason. NaN is never read as "confident".

Every scorer sits in the one registry :data:`SCORERS`, as a :class:`ScorerSpec`
whose ``level`` says what it puts a confidence on:

``"answer"`` (default)
    ``fn(record)`` or ``fn(record, ctx) -> float``: one confidence per answer.
    The fitted kinds (:mod:`confide.scorers.fitted`: probes, combiners,
    densities) are answer-level scorers that need :attr:`Need.TRAINING`.
``"claim"``
    ``fn(record, claims, ctx)`` returns one entry per claim of a long answer
    (:mod:`confide.scorers.claims`): a number, or a
    :class:`~confide.core.errors.CannotScore` naming why that claim has none.

Places that want one level look names up with :func:`scorer_at`, which names
the level when a scorer of the other one is given.

:func:`run_scorer`, the one way the package applies a scorer, enforces two
rules for every scorer, registered now or later:

* an empty greedy answer (:attr:`Generation.empty <confide.core.records.Generation.empty>`)
  is no answer, so there is nothing to put a confidence on: every scorer
  gives NaN with a reason (a claim-level scorer, for every claim); a claim
  whose text is empty is no claim, and gets NaN with a reason, the scorer
  never seeing it;
* a value that is not a finite number (NaN, :math:`\pm\infty`) is stored as
  NaN with a reason.

Readable form
-------------
A raw confidence is on its scorer's own scale (a log-likelihood, a negated entropy,
a count). Each answer-level scorer declares, as a :class:`Readable` in its
decorator, the natural [0, 1] form of its value where one exists: a monotone
non-decreasing map that keeps the confidence order and NaN (:math:`e^{c}` of a mean
log-probability is the geometric-mean token probability, :math:`e^{c}` of a negated
entropy the inverse of the effective number of choices, a share is itself), or says
why none exists (``length``: a count of tokens). A readable value is not a
calibrated probability of being right: that needs a calibrator fitted on graded
answers of the same model (:mod:`confide.decisions.calibration`).
"""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, TypeVar, overload

import numpy as np

from confide.core.errors import CannotScore, UnknownNameError
from confide.core.needs import TOKEN_STATISTICS, Need
from confide.core.records import Claim, Record
from confide.core.registry import Registry
from confide.scorers.context import ScoringContext

__all__ = ["EMPTY_ANSWER", "EMPTY_CLAIM", "LEVELS", "SCORERS", "SPANS", "Cost", "Level", "Need",
           "Readable", "ScorerSpec", "Span", "ScoringContext", "as_is", "exp_of", "inverse_count",
           "no_readable", "one_plus", "run_scorer", "run_scorer_block", "scorer", "scorer_at",
           "scorers_at", "scorer_block"]


class Cost(str, Enum):
    """Rough price of a scorer beyond the greedy generation, cheapest first."""

    FREE = "free"              # arithmetic on statistics already stored
    FEATURES = "features"      # shared pairwise/embedding features of the answer alone
    SAMPLES = "samples"        # k sampled answers, drawn once for every sampling scorer
    MODEL_CALLS = "model_calls"  # the scorer's own extra forward passes or generations


Level = Literal["answer", "claim"]
LEVELS: tuple[Level, ...] = ("answer", "claim")
# Which span of a reasoning reply a scorer reads (confide.core.reasoning): the final
# answer (the record's generations themselves), the trace (``Generation.trace``), or both.
Span = Literal["answer", "trace", "both"]
SPANS: tuple[Span, ...] = ("answer", "trace", "both")
# Where a scorer of each level is named, said in the error for a scorer of the wrong one.
_WHERE = {"answer": "the run's scorers (confide run --scorers, RunConfig.scorers, the "
                    "server's scorers)",
          "claim": "the claim stage's scorers (ClaimConfig.scorers; confide run --long-form)"}


@dataclass(frozen=True)
class Readable:
    """The natural [0, 1] form of a scorer's value, or why it has none.

    ``transform`` maps raw values (a float or an array) into [0, 1], monotone
    non-decreasing (the confidence order is kept) and NaN to NaN; None where the value
    has no natural [0, 1] form. ``formula``: one line, the transform and what its value
    means, or why there is none. Built by :func:`as_is`, :func:`exp_of`,
    :func:`one_plus`, :func:`inverse_count` and :func:`no_readable`.
    """

    transform: Callable[[Any], Any] | None
    formula: str

    @property
    def exists(self) -> bool:
        """Whether the scorer's value has a [0, 1] form."""
        return self.transform is not None

    def __call__(self, value: float) -> float:
        """The [0, 1] form of one raw value (NaN stays NaN; NaN where none exists)."""
        if self.transform is None or math.isnan(value):
            return math.nan
        return float(self.transform(np.float64(value)))


def _unit(x: Any) -> Any:
    return np.clip(x, 0.0, 1.0)  # rounding can step past the ends; NaN stays NaN


def _exp(x: Any) -> Any:
    return np.clip(np.exp(np.minimum(x, 0.0)), 0.0, 1.0)


def _one_plus(x: Any) -> Any:
    return np.clip(1.0 + np.asarray(x, dtype=np.float64), 0.0, 1.0)


def _inverse_count(x: Any) -> Any:
    # c = -m with m >= 1 (a number of clusters); 1/m, and 1 for a count under one
    return 1.0 / np.maximum(-np.asarray(x, dtype=np.float64), 1.0)


def as_is(what: str) -> Readable:
    """The value is already in [0, 1] (clipped at the ends against rounding): ``what`` it is."""
    return Readable(_unit, f"c (already in [0, 1]): {what}")


def exp_of(what: str) -> Readable:
    """:math:`e^{c}` of a value that is at most 0 (a log-probability or a negated
    entropy, clipped at 0 against rounding): ``what`` it is."""
    return Readable(_exp, f"exp(c): {what}")


def one_plus(what: str) -> Readable:
    """:math:`1 + c` of a value in [-1, 0]: ``what`` it is."""
    return Readable(_one_plus, f"1 + c: {what}")


def inverse_count(what: str) -> Readable:
    """:math:`1 / \\max(-c, 1)` of a negated count :math:`c = -m`: ``what`` it is."""
    return Readable(_inverse_count, f"1 / max(-c, 1): {what}")


def no_readable(why: str) -> Readable:
    """The value has no natural [0, 1] form, and ``why``."""
    return Readable(None, f"none: {why}")


@dataclass(frozen=True)
class ScorerSpec:
    """A registered scorer: its function and the facts the code acts on.

    ``level``: ``"answer"`` (``fn(record)`` or ``fn(record, ctx)``, one float) or
    ``"claim"`` (``fn(record, claims, ctx)``, one float or ``CannotScore`` per
    claim). ``n_samples``: the sampled answers it wants (0: none).
    ``probability``: its values are probabilities in [0, 1] *of being correct*
    (P(True), a stated confidence, a fitted P(correct), the share of samples that
    agree with the answer), so its raw calibration (ECE, Brier score and the
    reliability diagram of the values as they are,
    :func:`confide.evaluation.table.evaluate_records`) and "the share at or above
    1/2" (:func:`~confide.scorers.claims.aggregate_claims`) mean something. A score
    that merely lies in [0, 1] (a similarity, a margin, a token probability, a
    density) is not one.
    ``summary``: the first line of its docstring.
    ``sample_needs``: the token statistics it reads from the *samples* (the rest of its
    token statistics it reads from the greedy answer alone). None (the default) means
    every token statistic it needs, for a scorer that needs samples, and none otherwise
    (:attr:`sample_statistics`); the scorer plan checks these on every sample and the
    others on the greedy answer (:class:`~confide.pipeline.scorer_plan.ScorerPlan`).
    ``readable``: the natural [0, 1] form of its values, or why none exists
    (:class:`Readable`); None: not declared (a plugin that does not say). A scorer with
    ``probability`` is its own readable form unless it declares another.
    ``span``: which span of a reasoning reply it reads: ``"answer"`` (default: the final
    answer, what ``Generation.text`` and its token statistics are), ``"trace"`` (the
    reasoning, ``Generation.trace``) or ``"both"`` (:mod:`confide.core.reasoning`).
    """

    name: str
    fn: Callable[..., object]
    needs: frozenset[Need]
    cost: Cost
    n_samples: int = 0
    takes_context: bool = False
    summary: str = ""
    level: Level = "answer"
    probability: bool = False
    sample_needs: frozenset[Need] | None = None
    readable: Readable | None = None
    span: Span = "answer"

    @property
    def sample_statistics(self) -> frozenset[Need]:
        """The token statistics this scorer reads from every sample (see ``sample_needs``)."""
        if Need.SAMPLES not in self.needs:
            return frozenset()
        if self.sample_needs is None:
            return frozenset(self.needs & set(TOKEN_STATISTICS))
        return self.sample_needs

    @property
    def family(self) -> str:
        """The module that defines the scorer (``whitebox``, ``semantic``, ...): its family."""
        return self.fn.__module__.rsplit(".", 1)[-1]


SCORERS: Registry[ScorerSpec] = Registry("scorer")
EMPTY_ANSWER = "empty answer: nothing to put a confidence on"
EMPTY_CLAIM = "empty claim: nothing to put a confidence on"

F = TypeVar("F", bound=Callable[..., object])  # a decorated scorer keeps its type


def scorer(name: str, *, level: Level = "answer", needs: Iterable[Need] = (),
           cost: Cost = Cost.FREE, n_samples: int = 0, probability: bool = False,
           sample_needs: Iterable[Need] | None = None, readable: Readable | None = None,
           span: Span = "answer") -> Callable[[F], F]:
    """Register ``fn`` as scorer ``name`` of ``level``.

    An answer-level ``fn`` is ``fn(record)`` or ``fn(record, ctx)``; a
    claim-level one is ``fn(record, claims, ctx)``. ``sample_needs``: the token
    statistics among ``needs`` it reads from the samples (default: all of them, when it
    needs samples; see :class:`ScorerSpec`). ``readable``: the natural [0, 1] form of
    its values or why none exists (:func:`exp_of`, :func:`as_is`, :func:`no_readable`,
    ...; a ``probability`` scorer defaults to :func:`as_is`). ``span``: the span of a
    reasoning reply it reads (:class:`ScorerSpec`). A duplicate name raises
    ``ValueError``, as does an unknown level or span, a claim scorer of another shape or a
    ``sample_needs`` that is not token statistics the scorer needs.
    """
    if level not in LEVELS:
        raise ValueError(f"scorer {name!r}: level must be one of {LEVELS}, not {level!r}")
    if span not in SPANS:
        raise ValueError(f"scorer {name!r}: span must be one of {SPANS}, not {span!r}")
    needs = frozenset(needs)
    if readable is not None and not isinstance(readable, Readable):
        raise ValueError(f"scorer {name!r}: readable must be a Readable (as_is, exp_of, "
                         f"one_plus, inverse_count, no_readable), not {readable!r}")
    if readable is None and probability:
        readable = as_is("a probability of being correct")
    from_samples = None if sample_needs is None else frozenset(sample_needs)
    if from_samples is not None and not from_samples <= needs & set(TOKEN_STATISTICS):
        raise ValueError(f"scorer {name!r}: sample_needs must be token statistics among its "
                         "needs")

    def decorate(fn: F) -> F:
        n_params = len(inspect.signature(fn).parameters)
        if level == "claim" and n_params != 3:
            raise ValueError(f"claim scorer {name!r} must take (record, claims, ctx)")
        doc = inspect.getdoc(fn) or ""
        SCORERS.add(name, ScorerSpec(name=name, fn=fn, needs=needs, cost=cost,
                                     n_samples=n_samples, takes_context=n_params >= 2,
                                     summary=doc.splitlines()[0] if doc else "",
                                     level=level, probability=probability,
                                     sample_needs=from_samples, readable=readable,
                                     span=span))
        return fn

    return decorate


def scorers_at(level: Level) -> list[ScorerSpec]:
    """The registered scorers of ``level``, sorted by name."""
    _check_level(level)
    return [spec for spec in SCORERS.values() if spec.level == level]


def scorer_at(name: str, level: Level = "answer") -> ScorerSpec:
    """The registered scorer ``name``, which must be of ``level``.

    Raises :class:`~confide.core.errors.UnknownNameError` for a name not registered
    at that level: close names of the level are suggested, all of them listed,
    and a scorer of the other level is named as such.

    >>> scorer_at("msp").level
    'answer'
    """
    _check_level(level)
    spec = SCORERS[name] if name in SCORERS else None
    if spec is not None and spec.level == level:
        return spec
    known = [s.name for s in scorers_at(level)]
    if spec is not None:
        head = (f"scorer {name!r} is {_a(spec.level)}-level scorer, not {_a(level)}-level "
                f"one: name it among {_WHERE[spec.level]}.")
    else:
        close = difflib.get_close_matches(str(name), known, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        head = f"unknown {level}-level scorer {name!r}.{hint}"
    raise UnknownNameError(f"{head} Known {level}-level scorers: {', '.join(known)}")


def _a(level: str) -> str:
    return f"an {level}" if level[0] in "aeiou" else f"a {level}"


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")


@overload
def run_scorer(spec: ScorerSpec, record: Record, ctx: ScoringContext | None = None, *,
               claims: None = None) -> tuple[float, str | None]: ...


@overload
def run_scorer(spec: ScorerSpec, record: Record, ctx: ScoringContext | None = None, *,
               claims: Sequence[Claim]) -> list[tuple[float, str | None]]: ...


def run_scorer(spec: ScorerSpec, record: Record, ctx: ScoringContext | None = None, *,
               claims: Sequence[Claim] | None = None
               ) -> tuple[float, str | None] | list[tuple[float, str | None]]:
    """Apply one scorer: ``(confidence, None)`` or ``(nan, reason)``.

    An answer-level scorer gives one pair; a claim-level scorer is given the
    record's ``claims`` and gives one pair per claim, in order. An empty greedy
    answer, an empty claim and a non-finite value give ``(nan, reason)``; so
    does a :class:`~confide.core.errors.CannotScore`, for the record (every claim)
    or for one claim.

    Raises ``TypeError`` when ``claims`` are given to an answer-level scorer
    or missing for a claim-level one (a bug in the caller).
    """
    if (claims is not None) != (spec.level == "claim"):
        raise TypeError(f"scorer {spec.name!r} is {spec.level}-level: "
                        + ("pass the record's claims" if spec.level == "claim"
                           else "it takes no claims"))
    ctx = ctx or ScoringContext()
    if claims is not None:
        return _run_claims(spec, record, list(claims), ctx)
    if record.greedy.empty:
        return math.nan, EMPTY_ANSWER
    try:
        value = spec.fn(record, ctx) if spec.takes_context else spec.fn(record)
    except CannotScore as exc:
        return math.nan, exc.reason
    return _finite(value)


#: A scorer's block form: its values on many records at once, in order (a value, or the
#: :class:`~confide.core.errors.CannotScore` it raises on that record), equal to ``fn``'s.
BlockFn = Callable[[Sequence[Record]], list[float | CannotScore]]
#: Block forms by scorer name (:func:`scorer_block`); optional, the per-record ``fn`` stays
#: the reference.
BLOCKS: dict[str, BlockFn] = {}

B = TypeVar("B", bound=BlockFn)


def scorer_block(name: str) -> Callable[[B], B]:
    """Register ``fn`` as the block form of the answer-level scorer ``name`` (one that
    takes no context): ``fn(records)`` gives, for records whose greedy answers are not
    empty, what the scorer gives on each, bit for bit, with the same
    :class:`~confide.core.errors.CannotScore` reasons (an import scores records a block at
    a time: :func:`run_scorer_block`)."""

    def decorate(fn: B) -> B:
        BLOCKS[name] = fn
        return fn

    return decorate


def run_scorer_block(spec: ScorerSpec, records: Sequence[Record],
                     ctxs: Sequence[ScoringContext | None] | None = None
                     ) -> list[tuple[float, str | None]]:
    """:func:`run_scorer` of an answer-level scorer on each of ``records`` (``ctxs``: each
    record's context), through the scorer's block form where it has one (:data:`BLOCKS`):
    the same pairs, with numpy's cost per call paid once per block instead of per record."""
    block = BLOCKS.get(spec.name)
    if block is None or spec.level != "answer" or spec.takes_context:
        return [run_scorer(spec, r, None if ctxs is None else ctxs[i])
                for i, r in enumerate(records)]
    out: list[tuple[float, str | None]] = [(math.nan, EMPTY_ANSWER)] * len(records)
    keep = [i for i, r in enumerate(records) if not r.greedy.empty]
    values = block([records[i] for i in keep])
    for i, value in zip(keep, values, strict=True):
        out[i] = (math.nan, value.reason) if isinstance(value, CannotScore) else _finite(value)
    return out


def _finite(value: object) -> tuple[float, str | None]:
    number = float(value)  # type: ignore[arg-type]  # a scorer returns a real number
    if not math.isfinite(number):
        return math.nan, f"scorer returned {number} (not a finite number)"
    return number, None


def _run_claims(spec: ScorerSpec, record: Record, claims: list[Claim], ctx: ScoringContext
                ) -> list[tuple[float, str | None]]:
    if record.greedy.empty:
        return [(math.nan, EMPTY_ANSWER)] * len(claims)
    out: list[tuple[float, str | None]] = [(math.nan, EMPTY_CLAIM)] * len(claims)
    keep = [i for i, c in enumerate(claims) if c.text.strip()]
    if not keep:
        return out
    try:
        result = spec.fn(record, [claims[i] for i in keep], ctx)
        values = list(result)  # type: ignore[call-overload]  # a claim scorer gives a sequence
    except CannotScore as exc:
        for i in keep:
            out[i] = (math.nan, exc.reason)
        return out
    if len(values) != len(keep):  # a bug in the scorer, not the input
        raise RuntimeError(f"claim scorer {spec.name} gave {len(values)} values for "
                           f"{len(keep)} claims")
    for i, value in zip(keep, values, strict=True):
        out[i] = (math.nan, value.reason) if isinstance(value, CannotScore) else _finite(value)
    return out
