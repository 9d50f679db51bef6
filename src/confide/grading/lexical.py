"""Lexical graders: exact match, alias containment, token F1 and ROUGE-L.

Answers and references are compared after :func:`~confide.text.normalize_answer`
(the SQuAD evaluation script's normalisation, made unicode-aware).
"""

from __future__ import annotations

from confide.core.records import Item
from confide.grading.base import apply_threshold, grader, normalized_references, references
from confide.text import answer_tokens, normalize_answer, rouge_l_f1, rouge_tokens, token_f1

__all__ = ["contains", "exact", "f1", "rouge_l"]


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
    return float(any(a == r for r in normalized_references(item)))


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
    return float(any(f" {r} " in a for r in normalized_references(item)))



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
    pred = answer_tokens(answer)
    refs = [r.split() for r in normalized_references(item)]
    best = max((token_f1(pred, r) for r in refs), default=0.0) if pred else 0.0
    return apply_threshold(best, threshold)



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
    pred = rouge_tokens(answer)
    best = max(rouge_l_f1(pred, rouge_tokens(r)) for r in references(item))
    return apply_threshold(best, threshold)

