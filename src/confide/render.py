"""Rich rendering of tables for the CLI (no numpy, no SQL here)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from confide.evaluation import EvalTable
from confide.formatting import fmt_interval, fmt_number

__all__ = ["render_eval_table"]


def render_eval_table(console: Console, table: EvalTable, *, title: str = "",
                      skipped: dict[str, str] | None = None) -> None:
    """The scorer table: metrics with intervals, the paired comparison to the best
    scorer, and the length audit (AUROC within length strata, Spearman with length)."""
    pct = int(round(table.level * 100))
    metric_names = list(table.rows[0].metrics) if table.rows else []
    out = Table(title=title or None, title_justify="left")
    out.add_column("scorer")
    for m in metric_names:
        out.add_column(f"{m.upper()} [{pct}% CI]", justify="right")
    out.add_column("Δ AUROC vs best (p)", justify="right")
    out.add_column("AUROC in length strata", justify="right")
    out.add_column("ρ(conf, length)", justify="right")
    out.add_column("n", justify="right")
    out.add_column("NaN", justify="right")
    for row in sorted(table.rows, key=lambda r: -_sort_key(r.metrics.get("auroc"))):
        vs = row.vs_best
        diff = "best" if vs is None and "auroc" in row.metrics and \
            not math.isnan(row.metrics["auroc"][0]) else "–"
        if vs is not None:
            diff = f"{vs['diff']:+.3f} (p={vs['p_value']:.2f})"
        strat = fmt_number(row.audit.get("stratified_auroc"))
        if row.audit.get("lead_vanishes"):
            strat += " ⚠"
        out.add_row(row.scorer, *(fmt_interval(row.metrics[m]) for m in metric_names), diff,
                    strat, fmt_number(row.audit.get("length_spearman"), 2), str(row.n),
                    str(row.n_nan) if row.n_nan else "")
    console.print(out)
    console.print(f"accuracy ({table.grader}): {fmt_interval(table.accuracy)} "
                  f"on {table.n_graded} graded of {table.n_items} items; "
                  f"ρ(correct, length) = {fmt_number(table.correct_length_spearman, 2)}")
    if any(r.audit.get("lead_vanishes") for r in table.rows):
        console.print("⚠ = beats the length baseline overall but not within length strata "
                      "(Santilli et al. 2025): its lead may come from answer length")
    if any(r.raw_calibration is not None for r in table.rows):
        console.print("calibration of scores that are probabilities (ECE, raw → after "
                      "cross-fitted isotonic):")
    for row in table.rows:
        raw = row.raw_calibration
        if raw is None:
            continue
        console.print(f"  {row.scorer}: {_num(raw.ece[0])} → {_num(row.calibrated.ece[0])}; "
                      f"Brier {_num(raw.brier[0])} → {_num(row.calibrated.brier[0])}")
    for pair, tau in table.grader_agreement.items():
        console.print(f"scorer ranking agreement, Kendall τ ({pair}): {fmt_number(tau, 2)}")
    for row in table.rows:
        for reason, count in row.nan_reasons.items():
            console.print(f"  {row.scorer}: NaN on {count} item(s): {reason}")
    for name, reason in (skipped or {}).items():
        console.print(f"  skipped {name}: {reason}")


def _sort_key(values: tuple[float, float, float] | None) -> float:
    return -math.inf if values is None or math.isnan(values[0]) else values[0]
