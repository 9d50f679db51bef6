r"""Word-overlap similarity of two token lists: token F1 and ROUGE-L.

Both take tokens (:func:`~confide.text.normalize.answer_tokens` or
:func:`~confide.text.normalize.rouge_tokens`), so a caller comparing one text
with many tokenises it once. The F1 and ROUGE-L graders and the
``lexical_similarity`` scorer compute through them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["rouge_l_f1", "token_f1"]


def token_f1(pred: Sequence[str], gold: Sequence[str]) -> float:
    r"""F1 of the multiset overlap of two token lists.

    .. math:: P = \frac{|a \cap b|}{|a|},\quad R = \frac{|a \cap b|}{|b|},\quad
              F_1 = \frac{2PR}{P + R}

    0 when the lists share no token (and when either is empty).

    References: [1] Rajpurkar et al., 2016, "SQuAD", EMNLP (token F1).

    >>> token_f1(["eiffel", "tower", "paris"], ["eiffel", "tower"])
    0.8
    """
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l_f1(pred: Sequence[str], ref: Sequence[str]) -> float:
    r"""ROUGE-L F-measure: F1 of the longest common subsequence of two token lists.

    .. math:: P = \frac{\mathrm{LCS}(a, b)}{|a|},\quad R = \frac{\mathrm{LCS}(a, b)}{|b|},\quad
              F = \frac{2PR}{P + R}

    0 when either list is empty. Dynamic programming, :math:`O(|a|\,|b|)` time,
    :math:`O(\min(|a|, |b|))` memory.

    References: [1] Lin, 2004, "ROUGE: A Package for Automatic Evaluation of
    Summaries", ACL workshop.

    >>> rouge_l_f1("police killed the gunman".split(), "the gunman was killed by police".split())
    0.4
    """
    if not pred or not ref:
        return 0.0
    lcs = _lcs_length(pred, ref)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(pred), lcs / len(ref)
    return 2 * p * r / (p + r)
