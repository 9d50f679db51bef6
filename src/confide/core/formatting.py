"""Numbers as text, the same in the terminal tables and the HTML report."""

from __future__ import annotations

import math

__all__ = ["fmt_interval", "fmt_number"]


def fmt_number(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; ``–`` for a missing or NaN value.

    >>> fmt_number(0.12345), fmt_number(float("nan")), fmt_number(None)
    ('0.123', '–', '–')
    """
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def fmt_interval(values: tuple[float, float, float], digits: int = 3) -> str:
    """A point estimate with its interval, ``0.712 [0.650, 0.770]``; ``–`` for NaN.

    >>> fmt_interval((0.7123, 0.65, 0.77)), fmt_interval((0.5, float("nan"), float("nan")))
    ('0.712 [0.650, 0.770]', '0.500')
    """
    point, low, high = values
    if math.isnan(point):
        return "–"
    if math.isnan(low):
        return f"{point:.{digits}f}"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
