"""Answer text normalised for comparison, and split into words (SQuAD-style, unicode-aware).

Graders and equivalence judges compare answers through these functions, so
"the same answer" means one thing everywhere.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["answer_key", "answer_tokens", "collapse_whitespace", "normalize_answer",
           "rouge_tokens"]

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
    ASCII), deleting punctuation and symbols (Unicode categories ``P*`` and
    ``S*``), case-folding, accents on Latin letters dropped (``é`` → ``e``),
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
    return " ".join(_ARTICLES.sub(" ", _without_punctuation(text)).split())


# The ASCII punctuation and symbols (categories P* and S*), for str.translate to delete.
_ASCII_PUNCT = {c: None for c in range(128) if _is_punct_or_symbol(chr(c))}


def _without_punctuation(text: str) -> str:
    if text.isascii():  # NFKC and accent folding leave ASCII as it is; casefold is lower
        return text.translate(_ASCII_PUNCT).lower()
    text = unicodedata.normalize("NFKC", text)
    # punctuation goes before accents are folded: deleting it can put a combining mark
    # next to an ASCII letter ("B{̀"), which folding must then see
    text = "".join(ch for ch in text if not _is_punct_or_symbol(ch))
    return _fold_latin_accents(text.casefold())


def answer_key(text: str) -> str:
    """The form two answers are compared by: :func:`normalize_answer`, unless that is empty.

    SQuAD normalisation deletes articles and punctuation, so ``"A"``, ``"A."``,
    ``"(A)"``, ``"The"`` and ``"."`` all normalise to the empty text, and equal
    empty forms would make them one answer. An answer whose normalised text is empty
    is keyed instead on its words with punctuation deleted and articles kept
    (``"A"``, ``"(A)"`` → ``"a"``; ``"The"`` → ``"the"``), and if that is empty too,
    on its text with whitespace collapsed (``"."``, ``"?!"``). Neither can equal a
    non-empty normalised text (which holds no article as a word and no punctuation),
    and a non-blank answer never gets the empty key. The graders keep
    :func:`normalize_answer` (SQuAD's exact match and F1 are defined by it).

    >>> [answer_key(t) for t in ["A", "(A)", "B.", "The", ".", "The Beatles!"]]
    ['a', 'a', 'b', 'the', '.', 'beatles']
    """
    norm = normalize_answer(text)
    if norm:
        return norm
    return " ".join(_without_punctuation(text).split()) or collapse_whitespace(text)



def answer_tokens(text: str) -> list[str]:
    """The words of :func:`normalize_answer` (the tokens of the F1 grader).

    >>> answer_tokens("The Eiffel Tower!")
    ['eiffel', 'tower']
    """
    return normalize_answer(text).split()


def rouge_tokens(text: str) -> list[str]:
    """Case-folded words with punctuation and symbols as separators; articles are kept.

    On ASCII text this equals rouge-score's default tokenizer (lower-case,
    non-alphanumerics become spaces).

    >>> rouge_tokens("Jay-Z's song")
    ['jay', 'z', 's', 'song']
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(" " if _is_punct_or_symbol(ch) else ch for ch in text).split()


def collapse_whitespace(text: str) -> str:
    """``text`` with runs of whitespace made one space and the ends stripped.

    >>> collapse_whitespace("  a \\n b ")
    'a b'
    """
    return " ".join(text.split())
