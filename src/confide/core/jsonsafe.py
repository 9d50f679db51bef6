"""Values JSON can hold: the one conversion every stage's files and replies use.

JSON has no NaN and no infinity, and :func:`json.dumps` does not know numpy
scalars or arrays. confide writes a missing or undefined number (a scorer that
could not answer, a metric undefined on one class, an infeasible threshold) as
``null``, so :func:`json.dumps` with ``allow_nan=False`` never fails and every
reader gets standard JSON. :func:`finite_or_none` converts one number,
:func:`json_safe` a whole nested value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["finite_or_none", "json_safe"]


def finite_or_none(value: Any) -> float | None:
    """``value`` as a Python float, or ``None`` when it is missing, NaN or infinite.

    >>> finite_or_none(np.float32(0.5)), finite_or_none(float("nan")), finite_or_none(None)
    (0.5, None, None)
    >>> finite_or_none(float("-inf")), finite_or_none(2)
    (None, 2.0)
    """
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def json_safe(value: Any) -> Any:
    """``value`` with every part JSON can hold, recursively.

    Floats (Python or numpy) that are NaN or infinite become ``None``, other
    numpy floats Python floats (:func:`finite_or_none`); numpy integers and
    booleans become ``int`` and ``bool``; numpy arrays, tuples and lists become
    lists; dict keys become strings. Anything else (str, int, bool, None, …) is
    returned as it is, so :func:`json.dumps` of the result with
    ``allow_nan=False`` succeeds whenever the only obstacles were these.

    >>> json_safe({"auroc": float("nan"), 1: (np.float64(0.25), np.int64(3)),
    ...            "ok": np.bool_(True), "edges": np.array([0.5, np.inf]), "n": None})
    {'auroc': None, '1': [0.25, 3], 'ok': True, 'edges': [0.5, None], 'n': None}
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, (float, np.floating)):
        return finite_or_none(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
