"""Graders: from an answer and an item's references to correctness in [0, 1].

A grader is a plain function ``fn(answer, item, **options) -> float`` plus the
:func:`grader` decorator, which records it in :data:`GRADERS`. A *binary*
grader returns 0.0 or 1.0; a *continuous* one (``continuous=True``) returns a
degree of match in [0, 1] that the caller may threshold.

Every grader refuses an item without references with
:class:`~confide.errors.InvalidInputError` naming the item: such items can be
scored but not graded.

Normalisation (:func:`normalize_answer`) follows the SQuAD evaluation script
(Rajpurkar et al., 2016), made unicode-aware.
"""

from __future__ import annotations

import inspect
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confide.errors import InvalidInputError
from confide.records import Item
from confide.registry import Registry

__all__ = [
    "GRADERS",
    "GraderSpec",
    "contains",
    "exact",
    "grade",
    "grader",
    "normalize_answer",
]


@dataclass(frozen=True)
class GraderSpec:
    """A registered grader: its name, function, whether its value is continuous, and summary."""

    name: str
    fn: Callable[..., float]
    continuous: bool = False
    summary: str = ""


GRADERS: Registry[GraderSpec] = Registry("grader")


def grader(name: str, *, continuous: bool = False
           ) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Register ``fn(answer, item, **options) -> float`` as grader ``name``."""

    def decorate(fn: Callable[..., float]) -> Callable[..., float]:
        doc = inspect.getdoc(fn) or ""
        GRADERS.add(name, GraderSpec(name=name, fn=fn, continuous=continuous,
                                     summary=doc.splitlines()[0] if doc else ""))
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


# ---------------------------------------------------------------------------
# helpers

_ARTICLES = re.compile(r"\b(a|an|the)\b", flags=re.UNICODE)


def _is_punct_or_symbol(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in "PS"


def _fold_latin_accents(text: str) -> str:
    # Decompose, drop combining marks that sit on an ASCII letter (é → e, ñ → n),
    # keep marks on other scripts (they change the letter there), recompose.
    out: list[str] = []
    prev_ascii = False
    for ch in unicodedata.normalize("NFKD", text):
        if unicodedata.combining(ch):
            if prev_ascii:
                continue
        else:
            prev_ascii = ch.isascii() and ch.isalpha()
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def normalize_answer(text: str) -> str:
    r"""Normalise an answer for lexical comparison (SQuAD-style, unicode-aware).

    Steps, in order: NFKC compatibility folding (``ſ`` → ``s``, full-width →
    ASCII), accents on Latin letters dropped (``é`` → ``e``), case-folding,
    deleting punctuation and symbols (Unicode categories ``P*`` and ``S*``),
    removing the articles *a*, *an*, *the*, and collapsing whitespace.

    Parameters
    ----------
    text : str
        Any answer or reference.

    Returns
    -------
    str
        The normalised text; may be empty (for example a reference made only of
        an emoji).

    Notes
    -----
    Like the SQuAD script, punctuation is deleted rather than replaced by a
    space, so ``"Jay-Z"`` becomes ``"jayz"`` and ``"1,000"`` becomes ``"1000"``.

    References
    ----------
    [1] Rajpurkar, Zhang, Lopyrev & Liang (2016), "SQuAD: 100,000+ Questions for
        Machine Comprehension of Text", EMNLP, official evaluation script v1.1.

    Examples
    --------
    >>> normalize_answer("  The Beatles! ")
    'beatles'
    >>> normalize_answer("Pelé, an Ｏld man")
    'pele old man'
    """
    text = _fold_latin_accents(unicodedata.normalize("NFKC", text)).casefold()
    text = "".join(ch for ch in text if not _is_punct_or_symbol(ch))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _references(item: Item) -> list[str]:
    refs = [r for r in item.references if isinstance(r, str)]
    if not refs:
        raise InvalidInputError(
            f"item {item.id!r} has no references: it can be scored but not graded",
            field="references")
    return refs


def _normalized_references(item: Item) -> list[str]:
    refs = [normalize_answer(r) for r in _references(item)]
    return [r for r in refs if r]


# ---------------------------------------------------------------------------
# lexical graders


@grader("exact")
def exact(answer: str, item: Item) -> float:
    r"""Exact match after normalisation: 1 if the answer equals any reference.

    .. math:: g = \max_{r \in R} \mathbb{1}[\operatorname{norm}(a) = \operatorname{norm}(r)]

    Parameters
    ----------
    answer : str
        The model's answer.
    item : Item
        Its ``references`` are the accepted answers (aliases).

    Returns
    -------
    float
        1.0 or 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references.

    Notes
    -----
    References that normalise to the empty string (for example a lone emoji)
    are ignored. Strict: a correct answer inside a sentence scores 0.

    References
    ----------
    [1] Rajpurkar et al. (2016), "SQuAD", EMNLP — exact-match metric.

    Examples
    --------
    >>> exact("the Onion.", Item("q", "?", ["Onion", "Allium cepa"]))
    1.0
    >>> exact("It is an onion", Item("q", "?", ["Onion"]))
    0.0
    """
    a = normalize_answer(answer)
    return float(any(a == r for r in _normalized_references(item)))


@grader("contains")
def contains(answer: str, item: Item) -> float:
    r"""Alias containment: 1 if any normalised reference occurs as whole words in the answer.

    .. math:: g = \max_{r \in R} \mathbb{1}[\ \text{" "}\operatorname{norm}(r)\text{" "}
              \sqsubseteq \text{" "}\operatorname{norm}(a)\text{" "}\ ]

    where :math:`\sqsubseteq` is substring containment, so a reference must
    match a whole run of words of the answer (``"cat"`` is not found in
    ``"category"``).

    Parameters
    ----------
    answer : str
        The model's answer.
    item : Item
        Its ``references`` are the accepted answers (aliases).

    Returns
    -------
    float
        1.0 or 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references.

    Notes
    -----
    The standard TriviaQA open-domain criterion. Lenient: a long answer that
    lists several candidates is counted correct if any is an alias, so errors
    correlate with answer length (see the measured table in
    ``benchmarks/graders.py``). References normalising to "" are ignored.

    References
    ----------
    [1] Joshi, Choi, Weld & Zettlemoyer (2017), "TriviaQA: A Large Scale Distantly
        Supervised Challenge Dataset for Reading Comprehension", ACL.
    [2] Rajpurkar et al. (2016), "SQuAD", EMNLP — answer normalisation.

    Examples
    --------
    >>> contains("I think it is the onion.", Item("q", "?", ["Onion", "Allium cepa"]))
    1.0
    >>> contains("Onionskin paper", Item("q", "?", ["Onion"]))
    0.0
    """
    a = f" {normalize_answer(answer)} "
    return float(any(f" {r} " in a for r in _normalized_references(item)))
