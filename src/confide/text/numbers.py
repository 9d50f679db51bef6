"""The final number of an answer (worked solutions, prices, fractions)."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["extract_final_number"]

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

