"""The grader registry and what every grader shares: references and thresholds.

A grader is a plain function ``fn(answer, item, **options) -> float`` plus the
:func:`grader` decorator, which records it in :data:`GRADERS`. A *binary*
grader returns 0.0 or 1.0; a *continuous* one (``continuous=True``) returns a
degree of match in [0, 1] that the caller may threshold.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Item
from confide.core.registry import Registry
from confide.text import normalize_answer

__all__ = ["GRADERS", "GraderSpec", "apply_threshold", "grade", "grader", "normalized_references",
           "references"]


@dataclass(frozen=True)
class GraderSpec:
    """A registered grader: its name, function, whether its value is continuous, and summary."""

    name: str
    fn: Callable[..., float]
    continuous: bool = False
    summary: str = ""
    needs_backend: bool = False  # called with backend= (the LLM judge)


GRADERS: Registry[GraderSpec] = Registry("grader")


def grader(name: str, *, continuous: bool = False, needs_backend: bool = False,
           aliases: tuple[str, ...] = ()) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Register ``fn(answer, item, **options) -> float`` as grader ``name`` (and under its
    former names ``aliases``, which still find it but are not listed)."""

    def decorate(fn: Callable[..., float]) -> Callable[..., float]:
        doc = inspect.getdoc(fn) or ""
        GRADERS.add(name, GraderSpec(name=name, fn=fn, continuous=continuous,
                                     summary=doc.splitlines()[0] if doc else "",
                                     needs_backend=needs_backend))
        for old in aliases:
            GRADERS.alias(old, name)
        return fn

    return decorate


def grade(answer: str, item: Item, grader_name: str, **options: Any) -> float:
    """Grade ``answer`` for ``item`` with the grader registered as ``grader_name``.

    Parameters
    ----------
    answer : str
        The model's answer text.
    item : Item
        The question with its references.
    grader_name : str
        A name in :data:`GRADERS`.
    **options
        Passed to the grader (for example ``tolerance=`` for ``numeric``).

    Returns
    -------
    float
        Correctness in [0, 1]; higher is more correct.

    Raises
    ------
    UnknownNameError
        ``grader_name`` is not registered.
    InvalidInputError
        The item has no references.

    Examples
    --------
    >>> grade("It is Paris.", Item("q1", "Capital of France?", ["Paris"]), "contains")
    1.0
    """
    spec = GRADERS[grader_name]
    return float(spec.fn(answer, item, **options))


def references(item: Item) -> list[str]:
    """The item's text references; :class:`InvalidInputError` naming the item if it has none."""
    refs = [r for r in item.references if isinstance(r, str)]
    if not refs:
        raise InvalidInputError(
            f"item {item.id!r} has no references: it can be scored but not graded",
            field="references")
    return refs


def normalized_references(item: Item) -> list[str]:
    """The references after :func:`~confide.text.normalize_answer`, empty ones dropped."""
    refs = [normalize_answer(r) for r in references(item)]
    return [r for r in refs if r]


def apply_threshold(value: float, threshold: float | None) -> float:
    """``value`` itself, or ``1.0``/``0.0`` as it reaches ``threshold`` in [0, 1] or not."""
    if threshold is None:
        return value
    if not 0.0 <= threshold <= 1.0:
        raise InvalidInputError(f"must be in [0, 1], not {threshold!r}", field="threshold")
    return float(value >= threshold)
