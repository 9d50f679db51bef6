"""Assemble the HTML report: one self-contained file (inline CSS, JS, SVG and data).

Safety: Jinja2 autoescapes every value in the templates; the item data goes
into a ``<script type="application/json">`` block with ``<``, ``>`` and ``&``
written as ``\\u003c`` etc. (so no text can close the block), and the page's
script builds the explorer with ``textContent`` only. A Content-Security-Policy
allows only the page's own script (by its SHA-256 hash), so even an injected
``onerror=`` attribute could not run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from confide.core.errors import InvalidInputError
from confide.core.formatting import fmt_interval
from confide.core.paths import writable_file, write_text
from confide.core.records import Record
from confide.evaluation.table import RunComparison, scorer_order
from confide.report.data import SUMMARY_METRICS, RunView, run_comparison, run_view
from confide.report.svg import Series, colour, line_chart, reliability_chart
from confide.store.exports import unwritable_error
from confide.store.run_store import RunStore

__all__ = ["build_report", "render_report", "write_comparison", "write_report"]

REPORT_NAME = "report.html"


def _asset(name: str) -> str:
    # one name per joinpath: Python 3.10's Traversable takes no more
    return resources.files("confide.report").joinpath("assets").joinpath(name).read_text("utf-8")


def _json_for_script(data: Any) -> Markup:
    """JSON that is safe inside a ``<script>`` element whatever strings it holds."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, safe in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                      ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, safe)
    return Markup(text)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("confide.report", "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _fmt
    env.filters["interval"] = fmt_interval
    env.filters["percent"] = lambda x: "–" if x is None or math.isnan(x) else f"{x:.0%}"
    return env


def _load(run_dir: str | Path) -> tuple[list[Record], dict[str, Any], dict[str, str]]:
    with RunStore.open(run_dir) as store:
        return (store.records(), shareable_config(store.config or {}),
                store.get_meta("skipped_scorers", {}))


def shareable_config(config: dict[str, Any]) -> dict[str, Any]:
    """The run configuration with local paths cut to file names: a report travels, and the
    data file's or model's folder (a user name, a project) must not travel with it."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out[key] = shareable_config(value)
        elif key in ("data_file", "data_path", "model") and isinstance(value, str) \
                and (Path(value).is_absolute() or value.startswith((".", "~"))):
            out[key] = Path(value).name
        else:
            out[key] = value
    return out


def _charts(view: RunView, keys: dict[str, int]) -> dict[str, Any]:
    """SVG charts and legend of one run; colours follow ``keys`` so runs match."""
    legend, roc, rc = [], [], []
    for s in view.scorers:
        c = colour(keys[s.name], baseline=s.baseline)
        legend.append({"key": s.name, "label": s.name, "colour": c, "dashed": s.baseline})
        if s.roc:
            roc.append(Series(s.name, s.name, c, s.roc, s.baseline))
        if s.risk_coverage:
            rc.append(Series(s.name, s.name, c, s.risk_coverage, s.baseline))
    error = 1 - view.table.accuracy[0] if not math.isnan(view.table.accuracy[0]) else None
    charts: dict[str, Any] = {"legend": legend}
    charts["roc"] = line_chart(roc, title=f"ROC: {view.name}", x_label="false positive rate",
                               y_label="true positive rate",
                               reference=[(0, 0), (1, 1)]) if roc else None
    charts["rc"] = line_chart(rc, title=f"Risk–coverage: {view.name}", x_label="coverage",
                              y_label="risk (error rate)",
                              reference=[(0, error), (1, error)] if error is not None else None
                              ) if rc else None
    charts["reliability"] = {
        s.name: reliability_chart(s.reliability, title=f"Reliability: {s.name}",
                                  colour=colour(keys[s.name], baseline=s.baseline))
        for s in view.scorers if s.reliability}
    charts["raw_reliability"] = {
        s.name: reliability_chart(s.row.raw_calibration.reliability,
                                  title=f"Raw reliability: {s.name}",
                                  colour=colour(keys[s.name], baseline=s.baseline),
                                  x_label="raw confidence")
        for s in view.scorers
        if s.row.raw_calibration is not None and s.row.raw_calibration.reliability}
    return charts


def _explorer_data(views: Sequence[RunView]) -> dict[str, Any]:
    return {"runs": [{
        "name": v.name, "grader": v.grader,
        "graders": list(dict.fromkeys(g for it in v.items for g in it["g"])),
        "scorers": [{"name": s.name, "summary": s.summary} for s in v.scorers],
        "entropyScale": round(v.entropy_scale, 4), "items": v.items,
        "claimScorer": v.claim_scorer, "claimRange": list(v.claim_range),  # long answers
        "evaluation": v.table.to_dict(),  # every number of the page, as `confide eval --json`
    } for v in views]}


def render_report(views: Sequence[RunView], comparisons: Sequence[RunComparison] = (), *,
                  title: str | None = None) -> str:
    """The HTML text of a report on one run, or a comparison of several side by side."""
    if not views:
        raise InvalidInputError("a report needs at least one run", field="runs")
    keys: dict[str, int] = {}
    for v in views:
        for s in v.scorers:
            if not s.baseline:
                keys.setdefault(s.name, len(keys))
            else:
                keys.setdefault(s.name, -1)
    script = _asset("report.js")  # tests check it holds no "</script" and no innerHTML
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    compare = len(views) > 1
    template = _environment().get_template("report.html.j2")
    return template.render(
        title=title or ("confide comparison: " + " vs ".join(v.name for v in views)
                        if compare else f"confide report: {views[0].name}"),
        runs=[{"view": v, "charts": _charts(v, keys)} for v in views],
        comparisons=comparisons, compare=compare, metrics=SUMMARY_METRICS,
        any_graders=any(v.table.graders for v in views),
        any_raw=any(s.row.raw_calibration is not None for v in views for s in v.scorers),
        any_samples=any(it["ns"] for v in views for it in v.items),
        css=Markup(_asset("report.css")), script=Markup(script), csp=csp,
        data=_json_for_script(_explorer_data(views)),
        generated=time.strftime("%Y-%m-%d %H:%M"),
    )


def build_report(run_dirs: Sequence[str | Path], *, n_resamples: int = 1000,
                 seed: int | None = None, title: str | None = None) -> str:
    """Read stored runs (no model needed) and return the report's HTML.

    One run gives the run report; several give the comparison: the same
    panels side by side and, against the first run, paired differences on
    the items they share.
    """
    loaded, views = [], []
    names = _unique_names([Path(d) for d in run_dirs])
    for run_dir, name in zip(run_dirs, names, strict=True):
        records, config, skipped = _load(run_dir)
        if not records:
            with RunStore.open(run_dir) as store:
                raise store.no_records()
        run_seed = int(config.get("seed", 0)) if seed is None else seed
        views.append(run_view(records, name=name, path=str(run_dir), config=config,
                              scorers=scorer_order(config, skipped, records),
                              skipped=skipped, n_resamples=n_resamples, seed=run_seed))
        loaded.append(records)
    comparisons = [run_comparison(views[0], loaded[0], views[k], loaded[k],
                                  n_resamples=n_resamples, seed=0 if seed is None else seed)
                   for k in range(1, len(views))]
    return render_report(views, comparisons, title=title)


def _unique_names(paths: Sequence[Path]) -> list[str]:
    names = [p.resolve().name or str(p) for p in paths]
    return [n if names.count(n) == 1 else f"{n} ({i + 1})" for i, n in enumerate(names)]


def write_report(run_dir: str | Path, out: str | Path | None = None, **options: Any) -> Path:
    """Write the report of one stored run (default: ``RUN/report.html``) and return its path.

    Written whole or not at all (:func:`~confide.core.paths.write_text`): a record whose
    text cannot be written as UTF-8 is named (:class:`~confide.core.errors.StoreError`)
    and no file is left behind."""
    if out is None:  # in the run's folder, which exists once the run is read
        return _write(Path(run_dir) / REPORT_NAME, build_report([run_dir], **options),
                      [run_dir])
    target = writable_file(out, "out")  # before the work
    return _write(target, build_report([run_dir], **options), [run_dir])


def write_comparison(run_dirs: Sequence[str | Path], out: str | Path, **options: Any) -> Path:
    """Write the side-by-side comparison of several stored runs and return its path."""
    if len(run_dirs) < 2:
        raise InvalidInputError("compare needs at least two runs", field="runs")
    target = writable_file(out, "out")
    return _write(target, build_report(run_dirs, **options), run_dirs)


def _write(target: Path, html: str, run_dirs: Sequence[str | Path]) -> Path:
    """``html`` to ``target``; text UTF-8 cannot encode is traced to its record and field."""
    try:
        return write_text(target, html, "out")
    except InvalidInputError as exc:
        if not isinstance(exc.__cause__, UnicodeEncodeError):
            raise
        for run_dir in run_dirs:
            if (named := unwritable_error(run_dir, _load(run_dir)[0], target)) is not None:
                raise named from exc
        raise
