"""The multiple-choice grader: which option an answer picks, by letter or by text."""

from __future__ import annotations

import re
import string
import unicodedata

from confide.core.errors import InvalidInputError
from confide.core.records import Item
from confide.grading.base import grader, references
from confide.text import normalize_answer

__all__ = ["LETTERS", "choice", "picked_option"]

LETTERS = string.ascii_uppercase

_LEADING_LETTER = (
    re.compile(r"^\(?([A-Z])\)?[.):]?$"),       # "B", "(B)", "B.", "B)"
    re.compile(r"^\(?([A-Z])[.):]\s"),          # "B. text", "B) text", "B: text"
    re.compile(r"^\(([A-Z])\)\s"),              # "(B) text"
)
# "the answer is B", "Answer: (B)", and in Markdown "**Answer:** B", "answer is **B**"
_ANSWER_IS = re.compile(r"\b(?i:answer|option|choice)\s*(?i:is|:)?[\s*]*\(?([A-Z])\b(?![’'\w])")
# a final answer in LaTeX, as reasoning models write it: "\boxed{B}", "\boxed{(B)}"
_BOXED = re.compile(r"\\boxed\{\s*(?:\\text\{)?\s*\(?([A-Z])\)?\s*\}?\s*\}")


def _named_options(norm: str, norm_choices: list[str]) -> list[int]:
    # options whose text appears as whole words, ignoring one contained in another found one
    padded = f" {norm} "
    found = [i for i, c in enumerate(norm_choices) if c and f" {c} " in padded]
    return [i for i in found if not any(j != i and norm_choices[i] in norm_choices[j]
                                        for j in found)]


def _letter_index(text: str, n: int) -> int | None:
    for pattern in (_BOXED, *_LEADING_LETTER, _ANSWER_IS):
        m = pattern.search(text)
        if m and 0 <= ord(m.group(1)) - ord("A") < n:
            return ord(m.group(1)) - ord("A")
    return None


def _choice_index(answer: str, choices: list[str]) -> int | None:
    text = unicodedata.normalize("NFKC", answer).strip()
    n = len(choices)
    norm_choices = [normalize_answer(c) for c in choices]
    boxed = _BOXED.findall(text)
    if boxed and 0 <= ord(boxed[-1]) - ord("A") < n:  # the last boxed letter: the final one
        return ord(boxed[-1]) - ord("A")
    for pattern in _LEADING_LETTER:
        m = pattern.match(text)
        if m and 0 <= ord(m.group(1)) - ord("A") < n:
            i = ord(m.group(1)) - ord("A")
            rest = normalize_answer(text[m.end():])
            if not rest or rest.startswith(norm_choices[i]) or \
                    _named_options(rest, norm_choices) in ([], [i]):
                return i
            return None  # the letter and the text name different options
    norm = normalize_answer(text)
    if norm and norm_choices.count(norm) == 1:
        return norm_choices.index(norm)
    m = _ANSWER_IS.search(text)
    if m and 0 <= ord(m.group(1)) - ord("A") < n:
        return ord(m.group(1)) - ord("A")
    # "A bank" style: a letter, a space, then that option's text
    m = re.match(r"^([A-Z])\s+(.*)$", text, re.S)
    if m:
        i = ord(m.group(1)) - ord("A")
        if 0 <= i < n and normalize_answer(m.group(2)).startswith(norm_choices[i]):
            return i
    found = _named_options(norm, norm_choices)
    return found[0] if len(found) == 1 else None


def picked_option(answer: str, choices: list[str]) -> int | None:
    """The index of the option ``answer`` picks among ``choices`` by the ``choice`` grader's
    rule (see :func:`choice`), or None when it picks none or several.

    >>> [picked_option(a, ["bank", "mall"]) for a in ["A", "(A)", "A. bank", "bank", "B. mall",
    ...                                               "mall", "A. mall", "."]]
    [0, 0, 0, 0, 1, 1, None, None]
    """
    return _choice_index(answer, choices)


@grader("choice")
def choice(answer: str, item: Item) -> float:
    r"""Multiple-choice match: the option the answer picks (by letter or text) is the reference.

    .. math:: g = \mathbb{1}[\hat{k}(a) = k^*]

    where :math:`\hat{k}(a)` is read from the answer, first match wins: the last
    ``\boxed{B}``; a letter alone or leading (``B``, ``(B)``, ``B.``, ``B) …``) — no pick if
    the text after it names another option (``A. yes`` when A is "no"); the
    whole answer equals one option's text (normalised); "the answer is B";
    a letter followed by its own option's text (``A bank``); exactly one
    option's text contained as whole words. :math:`k^*` is the reference: a letter or an
    option text.

    Parameters
    ----------
    answer : str
        The model's answer.
    item : Item
        ``metadata["choices"]`` lists the options; ``references`` hold the
        correct letter and/or option text. Without choices, references must
        be letters and only letters are read.

    Returns
    -------
    float
        1.0 or 0.0; an answer that picks no option (or several) scores 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references, or none names a valid option.

    Notes
    -----
    Not measured against human labels (no labelled multiple-choice answers
    here); hand-made cases cover letters, option texts and ambiguous answers.

    References
    ----------
    [1] Hendrycks et al. (2021), "Measuring Massive Multitask Language
        Understanding", ICLR (letter-answer multiple choice).

    Examples
    --------
    >>> it = Item("q", "?", ["B", "yes"], {"choices": ["no", "yes"]})
    >>> choice("B", it), choice("Yes, it does.", it), choice("(A)", it)
    (1.0, 1.0, 0.0)
    """
    refs = references(item)
    choices = [str(c) for c in item.metadata.get("choices", [])]
    if not choices:
        letters = {r.strip().upper() for r in refs if len(r.strip()) == 1 and r.strip().isalpha()}
        if not letters:
            raise InvalidInputError(f"item {item.id!r}: no choices in metadata and no letter "
                                    "among the references", field="references")
        picked = _letter_index(unicodedata.normalize("NFKC", answer).strip(), len(LETTERS))
        return float(picked is not None and LETTERS[picked] in letters)
    correct = set()
    for r in refs:
        r = r.strip()
        if len(r) == 1 and "A" <= r.upper() <= chr(ord("A") + len(choices) - 1):
            correct.add(ord(r.upper()) - ord("A"))
        elif r in choices:
            correct.add(choices.index(r))
    if not correct:
        raise InvalidInputError(f"item {item.id!r}: no reference names one of the "
                                f"{len(choices)} choices", field="references")
    picked = _choice_index(answer, choices)
    return float(picked in correct)

