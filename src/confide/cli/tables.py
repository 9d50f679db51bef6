"""Rich rendering of tables for the CLI (no numpy, no SQL here).

Every table leads with a column of names (scorers, metrics, graders, tasks),
and :func:`print_table` never cuts one: a table wider than the console (80
columns in a pipe or a log) is printed as several narrower tables, each
repeating the name column with as many of the other columns as fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Column, Table

from confide.core.formatting import fmt_interval, fmt_number

if TYPE_CHECKING:  # only annotations: the commands import the API when they run
    from confide.api import EvalTable

__all__ = ["print_table", "render_eval_table"]


def print_table(console: Console, columns: Sequence[str | Column],
                rows: Sequence[Sequence[RenderableType]], *, title: str = "") -> None:
    """Print a table whose first column holds names, without ever cutting a name.

    The name column never wraps. When the whole table is wider than the console,
    the other columns are split, in order, into groups that fit beside the names,
    and each group is printed as a table of its own; a column too wide to fit
    even alone (a summary) gets a table to itself and wraps within it.
    """
    specs = [c if isinstance(c, Column) else Column(c) for c in columns]
    specs[0] = replace(specs[0], no_wrap=True)
    groups: list[list[int]] = []
    for j in range(1, len(specs)):
        if groups and _width(console, specs, rows, [0, *groups[-1], j]) <= console.width:
            groups[-1].append(j)
        else:
            groups.append([j])
    for n, group in enumerate(groups or [[]]):
        console.print(_table(specs, rows, [0, *group], title=title if n == 0 else ""))


def _table(specs: list[Column], rows: Sequence[Sequence[RenderableType]], keep: list[int],
           *, title: str = "") -> Table:
    table = Table(title=title or None, title_justify="left")
    for j in keep:
        spec = specs[j]
        table.add_column(spec.header, justify=spec.justify, no_wrap=spec.no_wrap)
    for row in rows:
        table.add_row(*(row[j] for j in keep))
    return table


def _width(console: Console, specs: list[Column], rows: Sequence[Sequence[RenderableType]],
           keep: list[int]) -> int:
    """Width of the table of columns ``keep`` with no cell wrapped."""
    unbounded = console.options.update_width(1_000_000)
    return Measurement.get(console, unbounded, _table(specs, rows, keep)).maximum


def render_eval_table(console: Console, table: EvalTable, *, title: str = "",
                      skipped: dict[str, str] | None = None) -> None:
    """The scorer table: metrics with intervals, the paired comparison to the best
    scorer, and the length audit (AUROC within length strata, Spearman with length)."""
    pct = int(round(table.level * 100))
    metric_names = list(table.rows[0].metrics) if table.rows else []
    columns: list[str | Column] = ["scorer"]
    columns += [Column(f"{m.upper()} [{pct}% CI]", justify="right") for m in metric_names]
    columns += [Column(h, justify="right") for h in ("Δ AUROC vs best (p)",
                                                     "AUROC in length strata",
                                                     "ρ(conf, length)", "n", "NaN",
                                                     "coverage")]
    compared = table.comparison
    rows = []
    for row in sorted(table.rows, key=lambda r: -_sort_key(r.metrics.get("auroc"))):
        vs = row.vs_best
        diff = "best" if row.scorer == compared.best else \
            "left out" if row.scorer in compared.left_out else "–"
        if vs is not None:
            diff = f"{vs['diff']:+.3f} (p={vs['p_value']:.2f})"
        strat = fmt_number(row.audit.get("stratified_auroc"))
        if row.audit.get("lead_vanishes"):
            strat += " ⚠"
        rows.append([escape(row.scorer), *(fmt_interval(row.metrics[m]) for m in metric_names),
                     diff, strat, fmt_number(row.audit.get("length_spearman"), 2), str(row.n),
                     str(row.n_nan) if row.n_nan else "",
                     "–" if math.isnan(row.coverage) else f"{row.coverage:.0%}"])
    print_table(console, columns, rows, title=title)
    if compared.best is not None:
        console.print(f"best and Δ AUROC: on the {compared.n_common} items where all "
                      f"{len(compared.scorers)} compared scorers have a value; the best is "
                      "chosen on these items, so p is post-selection (see the note)"
                      + (f"; left out (few values): {', '.join(compared.left_out)}"
                         if compared.left_out else ""))
    console.print(f"accuracy ({table.grader}): {fmt_interval(table.accuracy)} "
                  f"on {table.n_graded} graded of {table.n_items} items; "
                  f"ρ(correct, length) = {fmt_number(table.correct_length_spearman, 2)}")
    if any(r.audit.get("lead_vanishes") for r in table.rows):
        console.print("⚠ = beats the length baseline overall but not within length strata "
                      "(Santilli et al. 2025): its lead may come from answer length")
    if any(r.raw_calibration is not None for r in table.rows):
        console.print("calibration of scores that are probabilities of being right (ECE, "
                      "raw → after cross-fitted isotonic):")
    for row in table.rows:
        raw = row.raw_calibration
        if raw is None:
            continue
        console.print(f"  {row.scorer}: {fmt_number(raw.ece[0])} → "
                      f"{fmt_number(row.calibrated.ece[0])}; "
                      f"Brier {fmt_number(raw.brier[0])} → {fmt_number(row.calibrated.brier[0])}")
    for pair, tau in table.grader_agreement.items():
        console.print(f"scorer ranking agreement, Kendall τ ({pair}): {fmt_number(tau, 2)}")
    for row in table.rows:
        for reason, count in row.nan_reasons.items():
            console.print(f"  {escape(row.scorer)}: NaN on {count} item(s): {escape(reason)}")
    for name, reason in (skipped or {}).items():
        console.print(f"  skipped {escape(name)}: {escape(reason)}")
    for note in table.notes:
        console.print(f"note: {escape(note)}")


def _sort_key(values: tuple[float, float, float] | None) -> float:
    return -math.inf if values is None or math.isnan(values[0]) else values[0]
