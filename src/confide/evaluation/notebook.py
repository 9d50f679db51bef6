"""Evaluation tables in a notebook: the HTML Jupyter shows for an ``EvalTable``.

Written by hand (a dozen lines of ``html.escape``): pandas' ``to_html`` would make
pandas a dependency of showing a table, and the report's Jinja2 templates render whole
pages, not one table.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

__all__ = ["html_table"]


def _cell(value: float, digits: int = 3) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _interval(point: float, low: float, high: float) -> str:
    if point is None or math.isnan(point):
        return "–"
    return f"{_cell(point)} [{_cell(low)}, {_cell(high)}]"


def html_table(table: Any) -> str:
    """``table`` (an :class:`~confide.evaluation.table.EvalTable`) as an HTML fragment:
    a caption (grader, graded items, accuracy with its interval), one row per scorer with
    its coverage and each metric as ``point [low, high]``, then the notes."""
    metrics = list(table.rows[0].metrics) if table.rows else []
    level = round(100 * table.level)
    caption = (f"grader {table.grader}: {table.n_graded} of {table.n_items} items graded, "
               f"accuracy {_interval(*table.accuracy)} ({level}% intervals)")
    head = "".join(f"<th>{escape(h)}</th>" for h in ["scorer", "coverage", *metrics])
    body = []
    for row in table.rows:
        cells = [escape(row.scorer), _cell(row.coverage, 2),
                 *(_interval(*row.metrics[m]) for m in metrics)]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    notes = "".join(f"<li>{escape(n)}</li>" for n in table.notes)
    return (f"<table><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>"
            + (f"<ul>{notes}</ul>" if notes else ""))
