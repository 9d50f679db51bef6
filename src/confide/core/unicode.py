"""Text that is valid JSON but not Unicode: lone surrogates, found at the input boundary.

A JSON escape such as ``"\\udcff"`` decodes, in Python, to a string holding half of a
UTF-16 pair: a producer cut a character in two. No such text can be written as UTF-8,
so every reader of untrusted JSON (logs, data files, label files, HTTP bodies) refuses
it where it comes in, naming the field, rather than let it reach a scorer or a store.
Only a text with a ``\\ud…`` escape can decode to one (UTF-8 bytes cannot), so readers
search a decoded value only when :func:`may_escape_surrogate` says so.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["lone_surrogate", "lone_surrogate_message", "may_escape_surrogate"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def may_escape_surrogate(text: str, start: int = 0, end: int | None = None) -> bool:
    """Whether JSON ``text[start:end]`` may escape a surrogate (``\\ud800``-``\\udfff``)."""
    return text.find("\\ud", start, end) >= 0 or text.find("\\uD", start, end) >= 0


def lone_surrogate(value: Any) -> tuple[str, str] | None:
    """``(field, surrogate)`` of the first text (or key) of a decoded JSON ``value``
    holding a lone surrogate, the field written ``a.b[2]`` with any surrogate in it
    escaped; None when there is none.

    >>> lone_surrogate({"a": ["ok", "x\\udcff"]})
    ('a[1]', '\\udcff')
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # no recursion: a value may be nested up to the decoder's limit
        where, v = stack.pop()
        if isinstance(v, str):
            if m := _SURROGATE.search(v):
                return where or "record", m.group()
        elif isinstance(v, dict):
            for key, item in reversed(list(v.items())):
                at = f"{where}.{key}" if where else key
                if m := _SURROGATE.search(key):
                    return at.encode("utf-8", "backslashreplace").decode("ascii"), m.group()
                stack.append((at, item))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", v[i]) for i in reversed(range(len(v))))
    return None


def lone_surrogate_message(char: str) -> str:
    """What to tell the user of a text holding the lone surrogate ``char``."""
    return (f"invalid Unicode: a lone surrogate \\u{ord(char):04x} (half of a character cut "
            "in two; valid JSON, but no text)")
