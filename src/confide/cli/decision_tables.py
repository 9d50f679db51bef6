"""Rich tables for the decision commands (``confide calibrate/abstain/route/vote``).

The CLI's alone: the decisions themselves return data and never print."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:  # only annotations: the commands import the API when they run
    from confide.api import (
        AbstentionFit,
        AdaptiveReport,
        CalibrationFit,
        CascadeCurve,
        CascadePoint,
        FilteredVoteComparison,
        LiveDeepConf,
        OnlineVoteComparison,
        VoteComparison,
    )

__all__ = ["render_abstention", "render_adaptive", "render_calibration", "render_cascade",
           "render_filtered_votes", "render_live_deepconf", "render_online_votes",
           "render_votes"]


def _f(value: float, digits: int = 3) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def render_calibration(console: Console, fit: CalibrationFit) -> None:
    cal = fit.calibrator
    console.print(f"[bold]{cal.method}[/bold] calibrator for [bold]{escape(cal.scorer)}[/bold] "
                  f"on {fit.n} graded items (grader {cal.grader}; accuracy "
                  f"{_f(fit.accuracy)})" + (f"; {fit.n_missing} without a score left out"
                                            if fit.n_missing else ""))
    summary = Table("ECE (in-sample)", "ECE (cross-fitted)", "Brier (cross-fitted)")
    summary.add_row(_f(fit.insample_ece), _f(fit.crossfit_ece), _f(fit.crossfit_brier))
    console.print(summary)
    rel = Table("bin", "mean confidence", "accuracy", "items",
                title="reliability (cross-fitted probabilities)", title_justify="left")
    for lo, hi, conf, acc, n in zip(fit.reliability.lower, fit.reliability.upper,
                                    fit.reliability.mean_confidence, fit.reliability.accuracy,
                                    fit.reliability.counts):
        rel.add_row(f"[{lo:.1f}, {hi:.1f})", _f(conf), _f(acc), str(int(n)))
    console.print(rel)


def render_abstention(console: Console, fit: AbstentionFit, *, max_rows: int = 10) -> None:
    p = fit.policy
    style = "green" if p.feasible else "yellow"
    console.print(f"[{style}]{escape(p.guarantee)}[/{style}]")
    if p.feasible:
        out = Table("threshold", "coverage", "errors / answered (test)", "risk",
                    f"risk bound ({1 - p.delta:g} CP)", "guaranteed bound", "p-value")
        out.add_row(f"{p.threshold:.6g}", f"{p.coverage:.1%}", f"{p.n_errors} / {p.n_answered}",
                    _f(p.risk), _f(p.risk_upper), f"{p.alpha:g}", f"{p.p_value:.3g}")
        console.print(out)
    console.print(f"Learn then Test: binomial tail p-values, fixed-sequence testing; "
                  f"{p.n_test} testing items, {p.n_grid} set aside to place and order "
                  f"{len(fit.thresholds)} thresholds")
    steps = Table("test", "threshold", "answered", "errors", "p-value", "certified",
                  title="test sequence", title_justify="left")
    stop = int(fit.rejected.sum())
    chosen = [j for j in range(stop) if fit.thresholds[j] == p.threshold]
    shown = sorted({*range(min(len(fit.thresholds), max_rows)), *chosen[:1],
                    *([stop] if stop < len(fit.thresholds) else [])})
    for j in shown:
        steps.add_row(str(j + 1), f"{fit.thresholds[j]:.6g}", str(int(fit.n_answered[j])),
                      str(int(fit.n_errors[j])), f"{fit.p_values[j]:.3g}",
                      ("yes, chosen" if chosen and j == chosen[0] else "yes")
                      if fit.rejected[j] else "no — stop" if j == stop else "–")
    console.print(steps)


def _point_row(table: Table, label: str, point: CascadePoint) -> None:
    table.add_row(label, "–" if math.isinf(point.threshold) else f"{point.threshold:.4g}",
                  f"{point.escalated:.0%}", f"{point.accuracy:.3f}", f"{point.tokens:.1f}",
                  f"{point.seconds:.3f}")


def render_cascade(console: Console, curve: CascadeCurve, *, chosen: CascadePoint | None = None,
                   rows: int = 11) -> None:
    console.print(f"cascade [bold]{escape(curve.small)}[/bold] → [bold]{escape(curve.large)}"
                  f"[/bold] on {curve.n} items (confidence {escape(curve.scorer)}, grader "
                  f"{curve.grader})" + (f"; {curve.n_unmatched} item(s) not in both runs"
                                        if curve.n_unmatched else ""))
    out = Table("point", "escalate below", "escalated", "accuracy", "tokens / item",
                "seconds / item")
    picks = sorted({int(np.argmin(np.abs(curve.escalated - f)))
                    for f in np.linspace(0.0, 1.0, rows)})
    for j in picks:
        point = curve.point(j)
        label = ("small only" if j == 0 and point.escalated == 0 else
                 "large only" if j == len(curve) - 1 else "")
        _point_row(out, label, point)
    if chosen is not None:
        _point_row(out, "[bold]chosen[/bold]", chosen)
    console.print(out)
    console.print(f"small alone {curve.small_accuracy:.3f}, large alone "
                  f"{curve.large_accuracy:.3f}, oracle routing {curve.oracle_accuracy:.3f} "
                  f"accuracy; {len(curve)} thresholds evaluated (chosen in-sample)")


def render_votes(console: Console, cmp: VoteComparison) -> None:
    console.print(f"{cmp.n} records × {cmp.k} samples; clusters by the {cmp.judge} judge, "
                  f"graded by {cmp.grader}" + (f"; {cmp.n_skipped} without samples or grade "
                                               "skipped" if cmp.n_skipped else ""))
    out = Table("answer", "accuracy")
    out.add_row("greedy", _f(cmp.greedy))
    out.add_row(f"majority vote ({cmp.k} samples)", _f(cmp.majority))
    for t, acc in cmp.cisc_by_temperature.items():
        out.add_row(f"CISC, T = {t:g}", _f(acc))
    console.print(out)
    console.print(f"CISC (T = {cmp.temperature:g}) and majority chose different clusters on "
                  f"{cmp.changed} record(s)")


def render_filtered_votes(console: Console, cmp: FilteredVoteComparison,
                          max_items: int = 20) -> None:
    how = "confidence-weighted" if cmp.weighted else "majority"
    out = Table("item", "majority", f"top {cmp.eta:g} %, {how}", "kept", "tokens kept / all",
                title=f"DeepConf offline: traces ranked by {cmp.measure} confidence",
                title_justify="left")
    for it in cmp.items[:max_items]:
        out.add_row(escape(it.id), _f(it.majority, 1), _f(it.filtered, 1), f"{it.kept}/{it.k}",
                    f"{it.tokens_kept} / {it.tokens_all}")
    out.add_row("[bold]all[/bold]", _f(cmp.majority), _f(cmp.filtered), "",
                f"{cmp.tokens_kept} / {cmp.tokens_all}")
    console.print(out)
    more = len(cmp.items) - max_items
    console.print((f"{more} more item(s) not shown; " if more > 0 else "")
                  + f"the two votes differ on {cmp.changed} record(s)"
                  + (f"; {cmp.n_skipped} record(s) without traces, samples or grade skipped"
                     if cmp.n_skipped else "")
                  + "; offline filtering generates every trace: the kept tokens are what the "
                    "kept traces cost, not tokens saved")


def render_online_votes(console: Console, cmp: OnlineVoteComparison,
                        max_items: int = 20) -> None:
    out = Table("item", "majority", "offline", "online", "s", "traces used / k",
                "stopped", "voted", "no answer", "share", "tokens / all", "saved",
                title=f"DeepConf-online replayed: warm-up {cmp.warmup}, eta {cmp.eta:g} %, "
                      f"window {cmp.window}, consensus {cmp.consensus:g}",
                title_justify="left")
    for it in cmp.items[:max_items]:
        out.add_row(escape(it.id), _f(it.majority, 1), _f(it.offline, 1), _f(it.online, 1),
                    f"{it.threshold:.4g}", f"{it.used}/{it.k}", f"{it.stopped}",
                    f"{it.voted}", f"{it.no_answer}",
                    _f(it.share, 2) + (" ✓" if it.reached else ""),
                    f"{it.tokens} / {it.tokens_all}", f"{it.saved}")
    out.add_row("[bold]all[/bold]", _f(cmp.majority), _f(cmp.offline), _f(cmp.online), "",
                f"{sum(it.used for it in cmp.items)}/{sum(it.k for it in cmp.items)}",
                f"{sum(it.stopped for it in cmp.items)}",
                f"{sum(it.voted for it in cmp.items)}",
                f"{sum(it.no_answer for it in cmp.items)}", f"{cmp.n_reached} ✓",
                f"{cmp.tokens} / {cmp.tokens_all}", f"{cmp.saved} ({_f(cmp.saved_share, 3)})")
    console.print(out)
    more = len(cmp.items) - max_items
    skipped = [f"{n} {why}" for n, why in (
        (cmp.n_skipped, "without samples or grade"),
        (cmp.n_too_few, f"with fewer traces than the warm-up of {cmp.warmup}"),
        (cmp.n_unreadable, "without a warm-up trace confidence")) if n]
    console.print((f"{more} more item(s) not shown; " if more > 0 else "")
                  + f"{cmp.n} items; majority and offline vote read every stored trace; "
                    "a replay of the stored traces in order, not a live run"
                  + (f"; skipped: {', '.join(skipped)}" if skipped else ""))


def render_live_deepconf(console: Console, out: LiveDeepConf) -> None:
    table = Table("trace", "role", "tokens", "C_least", "stopped at", "votes", "final answer",
                  title=f"DeepConf-online live: warm-up {out.warmup}, budget {out.budget}, "
                        f"eta {out.eta:g} %, window {out.window}, consensus "
                        f"{out.consensus:g}, threshold {out.threshold:.4g}",
                  title_justify="left")
    for t in out.traces:
        table.add_row(f"{t.index}", t.role, f"{t.tokens}", _f(t.confidence),
                      "" if t.stopped_at is None else f"{t.stopped_at}",
                      "yes" if t.votes else "", escape(t.answer[:60]))
    console.print(table)

    def graded(value: float | None) -> str:
        return "" if value is None else f" (graded {_f(value, 1)} by {out.grader})"

    shares = ", ".join(f"{escape(a[:40])!r} {v:.2f}" for a, v in out.shares.items())
    console.print(
        f"answer: {escape(repr(out.answer))}{graded(out.correct)}; vote shares: "
        f"{shares or 'none (no trace voted)'}"
        + (" (consensus reached)" if out.reached else " (budget spent)") + "\n"
        f"majority vote over the {sum(1 for t in out.traces if t.stopped_at is None and t.answer)}"
        " trace(s) with a final answer: "
        f"{escape(repr(out.majority))}{graded(out.majority_correct)}\n"
        f"traces: {out.count('generated')} generated, {out.count('stopped')} stopped, "
        f"{out.count('voted')} voted, {out.count('no_answer')} without a final answer\n"
        f"tokens: {out.tokens} generated against about {out.tokens_full:.0f} for all "
        f"{out.budget} traces whole (estimate: the warm-up traces' mean length x budget), "
        f"{_f(out.saved_share, 2)} saved")
    for note in out.notes:
        console.print(f"[yellow]{escape(note)}[/yellow]")


def render_adaptive(console: Console, report: AdaptiveReport) -> None:
    out = Table("sampling", "samples / item", "accuracy", "saved at equal accuracy",
                title=f"adaptive sampling (Beta rule, rounds of {report.round_size}) vs fixed k",
                title_justify="left")
    for k, acc in report.fixed_accuracy.items():
        out.add_row(f"fixed k = {k}", f"{k}", _f(acc), "")
    for c, (acc, used) in report.adaptive.items():
        matched = report.matched_k[c]
        saved = ("no fixed k reaches it" if matched is None else
                 f"{report.saved[c]:+.2f} vs k = {matched}")
        out.add_row(f"adaptive, C = {c:g}", f"{used:.2f}", _f(acc), saved)
    console.print(out)
