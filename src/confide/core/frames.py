"""Results as pandas DataFrames: the one place that imports pandas.

Every result object's ``to_pandas()`` builds plain rows (one per answer, or one per
scorer) and hands them here; pandas is imported only then, so ``import confide`` and
``confide.score`` never load it. pandas is the ``pandas`` extra
(``pip install "confide[pandas]"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["data_frame", "scorer_rows"]


def data_frame(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> Any:
    """A ``pandas.DataFrame`` of ``rows`` (columns in first-seen order, or ``columns``).

    Raises ImportError, saying which extra to install, when pandas is missing.
    """
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("to_pandas() needs pandas: pip install \"confide[pandas]\" (or "
                          "pip install pandas)") from exc
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        columns = list(seen)
    return pd.DataFrame.from_records(list(rows), columns=list(columns))


def scorer_rows(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """One flat row per scorer row of an evaluation table (``scorer``, ``n``, ``n_nan``,
    ``coverage``, then each metric as ``<metric>``, ``<metric>_low``, ``<metric>_high``,
    the AUROC on the items all scorers share and the paired difference to the best)."""
    out = []
    for row in rows:
        flat: dict[str, Any] = {"scorer": row.scorer, "n": row.n, "n_nan": row.n_nan,
                                "coverage": row.coverage}
        for metric, (point, low, high) in row.metrics.items():
            flat.update({metric: point, f"{metric}_low": low, f"{metric}_high": high})
        flat["common_auroc"] = row.common_auroc
        vs = row.vs_best or {}
        flat["vs_best"] = vs.get("best")
        for key in ("diff", "low", "high", "p_value"):
            if key in vs:
                flat[f"vs_best_{key}"] = vs[key]
        flat["nan_reasons"] = "; ".join(f"{why} ({n})" for why, n in row.nan_reasons.items())
        out.append(flat)
    return out
