r"""Where each token stands in a text, and text compared white space aside.

Backends and logs give each generated token's text piece. Joined, the pieces spell the
answer up to white space trimmed at its ends, a multi-byte character cut across tokens
(each piece then decodes as U+FFFD, or is written as bytes) and the white-space marks of
byte-level BPE (``Ġ``, ``Ċ``) and SentencePiece (``▁``). :func:`token_spans` places every
token on the text's characters (claims use it to find their tokens, the reasoning split
to find where a trace ends); :func:`loose` is the text with those differences taken out,
what the log readers compare (:func:`confide.ingest.common.check_spelling`).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence

__all__ = ["WHITESPACE_MARKS", "loose", "spelled", "token_spans"]

#: Byte-level BPE (GPT-2's ``Ġ`` space, ``Ċ`` line break) and SentencePiece (``▁``) marks
#: of white space in a token's text.
WHITESPACE_MARKS = "\u0120\u010a\u2581"
_MARKS = str.maketrans("", "", WHITESPACE_MARKS)


def loose(text: str, *, ascii_only: bool = False) -> str:
    """``text`` white space aside: NFKC-normalised, white space and its token marks
    (:data:`WHITESPACE_MARKS`) removed; with ``ascii_only``, only its ASCII characters
    (where a token holds a character's partial bytes, only those compare).

    >>> loose("\u0120Par is\u010a")
    'Paris'
    """
    text = "".join(unicodedata.normalize("NFKC", text).translate(_MARKS).split())
    return "".join(c for c in text if c.isascii()) if ascii_only else text


_BYTE_ESCAPES = re.compile(r"\\x[0-9a-fA-F]{2}")


def spelled(tokens: Sequence[str]) -> tuple[list[str], bool]:
    r"""The tokens' pieces as text to compare, and whether some token holds a character's
    partial bytes (OpenAI's ``bytes:\xe2``, or U+FFFD as llama.cpp and vLLM write them):
    then only ASCII characters compare (:func:`loose` with ``ascii_only``), and the
    ``bytes:`` prefix and ``\xNN`` escapes are not text.

    >>> spelled(["caf", "bytes:\\xc3", "bytes:\\xa9"])
    (['caf', '', ''], True)
    """
    partial = any(t.startswith("bytes:") or "\ufffd" in t for t in tokens)
    if not partial:
        return list(tokens), False
    return [_BYTE_ESCAPES.sub("", t.removeprefix("bytes:")) for t in tokens], True


def token_spans(text: str, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Character span ``[start, end)`` in ``text`` of each token piece.

    The joined pieces are aligned to ``text``; characters that match map
    exactly, and a stretch that differs (white space trimmed off ``text``, a
    character split over tokens that each decode as U+FFFD) maps to the
    corresponding stretch of ``text``: a token starting inside it starts where
    it starts, a token ending inside it ends where it ends. So the tokens of a
    split character all cover that character.

    >>> token_spans("café au lait", ["ca", "f\\ufffd", "\\ufffd", " au", " lait"])
    [(0, 2), (2, 4), (3, 4), (4, 7), (7, 12)]
    """
    joined = "".join(pieces)
    matcher = difflib.SequenceMatcher(None, joined, text, autojunk=False)
    # position in joined -> position in text, for a token start (low) and end (high)
    low = [0] * (len(joined) + 1)
    high = [0] * (len(joined) + 1)
    opcodes = matcher.get_opcodes()
    for tag, i1, i2, j1, _ in opcodes:
        if tag == "equal":
            for k in range(i1, i2 + 1):
                low[k] = high[k] = j1 + (k - i1)
    for tag, i1, i2, j1, j2 in opcodes:
        if tag != "equal":  # a differing stretch: starts map to its start, ends to its end
            for k in range(i1 + 1, i2):
                low[k], high[k] = j1, j2
            low[i1], high[i1] = (j2, j1) if i1 == i2 else (j1, j1)
            low[i2], high[i2] = (j2, j2) if i2 > i1 else (j2, j1)
    spans, pos = [], 0
    for piece in pieces:
        a, b = pos, pos + len(piece)
        spans.append((low[a], max(low[a], high[b])))
        pos = b
    return spans
