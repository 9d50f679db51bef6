"""Commands that read stored runs: ``eval``, ``report``, ``compare``, ``export``, ``fit``,
and the listings ``scorers``, ``tasks``, ``metrics``.

Each command imports :mod:`confide.api` in its body, not at the top, so that
``confide --help`` loads no model code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from confide.cli.app import app, console, err_console, output_file, user_errors
from confide.core.errors import InvalidInputError


@app.command(name="report")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="run directory")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o",
                                                help="HTML file (default: RUN/report.html)")
                   ] = None,
    resamples: Annotated[int, typer.Option(help="bootstrap resamples for the intervals")] = 1000,
) -> None:
    """Write a self-contained HTML report of a stored run (offline; the model is not loaded)."""
    from confide import api

    if out is not None:
        out = output_file(out, "--out")
    with user_errors():
        path = api.make_report(run_dir, out, n_resamples=resamples)
    console.print(f"wrote {path}")


@app.command()
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(help="two or more run directories")],
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file")] = Path("compare.html"),
    resamples: Annotated[int, typer.Option(help="bootstrap resamples for the intervals")] = 1000,
) -> None:
    """Compare runs side by side in one HTML file, with paired differences on shared items."""
    from confide import api

    with user_errors():
        if len(run_dirs) < 2:
            raise InvalidInputError("compare needs at least two runs", field="RUN_DIRS")
        out = output_file(out, "--out")
        path = api.make_report(list(run_dirs), out, n_resamples=resamples)
    console.print(f"wrote {path}")


@app.command()
def scorers() -> None:
    """List the registered scorers by family and cost, with their level (answer or claim),
    the span of a reasoning reply they read (answer, trace or both), what they need and
    their natural [0, 1] form (or why they have none)."""
    from confide import api
    from confide.cli.tables import print_table

    rows = [[spec.name, spec.family, spec.cost.value, spec.level, spec.span,
             ", ".join(sorted(n.value for n in spec.needs)) or "–", escape(spec.summary),
             escape(spec.readable.formula) if spec.readable else "–"]
            for spec in api.list_scorers()]
    print_table(console, ["scorer", "family", "cost", "level", "span", "needs", "summary",
                          "in [0, 1]"], rows)


@app.command()
def recommend(
    gives: Annotated[str, typer.Option(
        help="what the model's answers carry: none (text only), logprobs (chosen tokens), "
             "topk (top-k alternatives: OpenAI-compatible APIs), distribution (a local "
             "model), hidden (hidden states too)")] = "topk",
    samples: Annotated[int, typer.Option(help="sampled answers per question the budget "
                                              "allows (0: none)")] = 0,
    task: Annotated[str, typer.Option(help="short, choice, math, long or calls")] = "short",
    run: Annotated[Optional[Path], typer.Option(
        help="a graded run of your own: the choice is also made out of fold on it")] = None,
    grader: Annotated[Optional[str], typer.Option(help="the grade of --run to read")] = None,
    top: Annotated[int, typer.Option(help="how many scorers to propose")] = 5,
    offline: Annotated[bool, typer.Option(
        "--offline", help="the model cannot be called again (logs only)")] = False,
) -> None:
    """Propose scorers for what your model gives, a sampling budget and a kind of task,
    with the evidence for each (the quality table's AUROC with intervals, and on --run a
    choice made out of fold); says when none beats the length baseline."""
    from confide import api
    from confide.cli.tables import print_table

    with user_errors():
        rec = api.recommend(gives=gives, samples=samples, task=task, run=run,  # type: ignore[arg-type]
                            grader=grader, live=not offline, top=top)
    rows = []
    for s in rec.scorers:
        figures = "; ".join(f"{e['task']}×{e['model']} AUROC {e['auroc'][0]:.3f} "
                            f"[{e['auroc'][1]:.3f}, {e['auroc'][2]:.3f}] rank {e['rank']}/"
                            f"{e['of']}" for e in s.evidence) or "not measured"
        rows.append([s.name, s.cost, ", ".join(s.needs) or "–", escape(figures),
                     "yes" if s.beats_length else "no" if s.evidence else "–"])
    print_table(console, ["scorer", "cost", "needs", "evidence (quality table)",
                          "beats length"], rows)
    if rec.held_out is not None:
        h = rec.held_out
        console.print(f"On your run ({h.n_items} answers, {h.n_right} right, {h.folds} folds): "
                      f"chosen out of fold {h.final_choice} "
                      f"({', '.join(f'{k} {v}x' for k, v in h.chosen.items())}); held-out "
                      f"AUROC {h.held_out_auroc:.3f}, length baseline {h.length_auroc:.3f}")
    for note in rec.notes:
        console.print(f"note: {escape(note)}")
    console.print(f"{len(rec.left_out)} scorers left out (what they need is not given); "
                  "`confide.recommend(...).left_out` says why for each")


@app.command()
def tasks() -> None:
    """List the built-in tasks with size, format and default grader."""
    from confide import api
    from confide.cli.tables import print_table

    with user_errors():  # each bundled task is loaded to count its items
        rows = [[t["name"], str(t["size"]), t["format"], t["grader"], escape(t["summary"])]
                for t in api.list_tasks()]
    print_table(console, ["task", "items (bundled)", "format", "grader", "summary"], rows)


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="run directory")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl, csv or parquet (one row per "
                                                      "record), or openai (response objects)")
                   ] = "jsonl",
    out: Annotated[Optional[Path], typer.Option(help="output file")] = None,
) -> None:
    """Export a run's records: one row per record, one column per scorer and grader."""
    from confide import api

    with user_errors():  # also a damaged store: its readable records
        done = api.export(run_dir, fmt, out)
    console.print(f"wrote {done.path}")
    if done.unreadable:
        err_console.print(f"[yellow]{done.unreadable} damaged record(s) could not be "
                          "read[/yellow]")


@app.command(name="eval")
def eval_(
    run_dir: Annotated[Path, typer.Argument(help="run directory")],
    grader: Annotated[Optional[str], typer.Option(help="grader stored in the run")] = None,
    metrics: Annotated[str, typer.Option(help="comma-separated metric names (see "
                                              "confide metrics)")] = "auroc,prr,aurc",
    prr_cutoff: Annotated[float, typer.Option(help="PRR: largest rejection fraction")] = 0.5,
    coverage: Annotated[float, typer.Option(help="risk_at_coverage: coverage")] = 0.8,
    risk: Annotated[float, typer.Option(help="coverage_at_risk: tolerated risk")] = 0.1,
    n_bins: Annotated[int, typer.Option(help="calibration metrics: bins")] = 10,
    resamples: Annotated[int, typer.Option(help="bootstrap resamples")] = 1000,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="write the table as JSON")
                        ] = None,
    with_: Annotated[Optional[list[Path]], typer.Option(
        "--with", help="add the scores of a fitted probe/combiner (confide fit); repeatable")
                     ] = None,
    allow_other_model: Annotated[bool, typer.Option(
        "--allow-other-model", help="--with: apply a model fitted on another model's run "
                                    "(the table notes say so)")] = False,
) -> None:
    """Recompute every metric of a stored run (no model, no regeneration, no rescoring)."""
    from confide import api
    from confide.cli.tables import render_eval_table

    if json_out is not None:
        json_out = output_file(json_out, "--json")
    names = tuple(m.strip() for m in metrics.split(",") if m.strip())
    options: dict[str, dict[str, Any]] = {
        "prr": {"max_rejection": prr_cutoff}, "risk_at_coverage": {"coverage": coverage},
        "coverage_at_risk": {"risk": risk},
        **{m: {"n_bins": n_bins} for m in ("ece", "ece_mass", "ace")}}
    with user_errors():
        result = api.open_run(run_dir)
        if with_:
            api.apply_learned(result, with_, allow_other_model=allow_other_model)
        elif allow_other_model:
            raise InvalidInputError("applies to fitted models; give them with --with FILE",
                                    field="--allow-other-model")
        table = result.compute_table(grader=grader, metrics=names, n_resamples=resamples,
                                     metric_options={k: v for k, v in options.items()
                                                     if k in names})
    render_eval_table(console, table, title=str(run_dir), skipped=result.skipped_scorers)
    for stat, note in result.approximate.items():  # imported runs: bounds, not values
        console.print(f"  note: {escape(stat)} are {escape(note)}")
    if json_out:
        from confide.core.paths import write_text

        with user_errors():
            write_text(json_out, json.dumps(table.to_dict(), indent=2), "--json")
        console.print(f"wrote {json_out}")


@app.command(name="fit")
def fit_(
    run_dirs: Annotated[list[Path], typer.Argument(
        help="graded run to train on; several runs of one model: one probe or lens across "
             "their tasks (--weighting)", show_default=False)],
    out: Annotated[Path, typer.Option("-o", "--out", help="model file to write (JSON)")],
    kind: Annotated[str, typer.Option(
        help="probe, lens (probe + token features), combiner, or a hidden-state density: "
             "mahalanobis, relative_mahalanobis, huq")] = "probe",
    layer: Annotated[str, typer.Option(
        help="probe/lens: hidden key (8:mean, -1:last), a layer (8 = 8:mean) or 'best'")
                     ] = "best",
    scorers: Annotated[Optional[str], typer.Option(
        help="combiner: comma-separated input scorers (default: all in the run)")] = None,
    estimator: Annotated[str, typer.Option(
        help="combiner: logistic, boosting or auto (whichever cross-validates better)")
                         ] = "logistic",
    grader: Annotated[Optional[str], typer.Option(help="grade that labels correctness")] = None,
    folds: Annotated[int, typer.Option(help="cross-fitting folds")] = 5,
    seed: Annotated[int, typer.Option(help="fold and tree seed")] = 0,
    name: Annotated[Optional[str], typer.Option(help="score name (default: KIND:RUN)")] = None,
    background: Annotated[Optional[Path], typer.Option(
        help="relative_mahalanobis: a run of the same model on other text")] = None,
    weighting: Annotated[Optional[str], typer.Option(
        help="several runs: equal (each task's mean loss weighs 1), uncertainty (each "
             "task's weight learned, Kendall et al. 2018) or per-task (one probe per task; the "
             "one that ranks the other tasks best is applied) [default: equal]")
                         ] = None,
) -> None:
    """Fit a hidden-state probe, density model or scorer combiner on a graded run (a probe or
    lens on several runs at once: --weighting); apply with eval --with."""
    from confide import api
    from confide.cli.tables import print_table

    chosen = [s.strip() for s in scorers.split(",") if s.strip()] if scorers else None
    out = output_file(out, "--out")
    with user_errors():
        model = api.fit_learned(run_dirs[0] if len(run_dirs) == 1 else run_dirs, kind=kind,
                                out=out, layer=layer, scorers=chosen,
                                estimator=estimator, grader=grader, n_folds=folds, seed=seed,
                                **({"name": name} if name else {}),
                                **({"background": background} if background else {}),
                                **({"weighting": weighting} if weighting else {}))
    for run_dir in run_dirs if kind != "combiner" else ():
        if stale := api.open_run(run_dir).hidden_states_note:
            err_console.print(f"[yellow]warning[/yellow]: {escape(str(run_dir))}: "
                              f"{escape(stale)}")
    rep = model.report
    auroc = rep.get("oof_auroc")
    inputs = (f" from {len(model.features)} scorers ({', '.join(model.features)})"
              if model.kind == "combiner" else "")
    console.print(f"{model.kind} [bold]{escape(model.name)}[/bold]{escape(inputs)} fitted on "
                  f"{escape(', '.join(map(str, run_dirs)))} ({escape(model.model_name())}): "
                  f"{rep['n']} items "
                  f"graded with {escape(repr(model.training.get('grader')))} "
                  f"({rep['n_correct']} correct); chosen {escape(str(rep['chosen']))}; "
                  f"cross-fitted AUROC "
                  + ("–" if auroc is None else f"{auroc:.3f}"))
    for name, reason in (rep.get("left_out") or {}).items():
        console.print(f"  left out {escape(name)}: {escape(reason)}")
    if model.multitask is not None:  # each task: its counts, cross-fitted AUROC and weight
        uncertainty = rep["weighting"] == "uncertainty"
        print_table(console, ["task", "items", "correct", "cross-fitted AUROC"]
                    + (["sigma", "weight"] if uncertainty else []),
                    [[escape(task), str(t["n"]), str(t["n_correct"]),
                      "–" if t["oof_auroc"] is None else f"{t['oof_auroc']:.3f}"]
                     + ([f"{t['sigma']:.3f}", f"{t['weight']:.3f}"] if uncertainty else [])
                     for task, t in rep["tasks"].items()])
        if rep.get("applied"):
            console.print(escape(rep["applied"]))
    weights = rep.get("weights") or rep.get("token_weights") or rep.get("importances")
    if weights:
        print_table(console, ["input", "importance" if "importances" in rep else "weight"],
                    [[escape(key), "–" if value is None else f"{value:+.3f}"]
                     for key, value in sorted(weights.items(), key=lambda kv: -abs(kv[1] or 0.0))])
    console.print(f"wrote {out}")


@app.command(name="metrics")
def list_metrics() -> None:
    """List the registered evaluation metrics."""
    from confide import api
    from confide.cli.tables import print_table

    print_table(console, ["metric", "kind", "direction", "on probabilities", "summary"],
                [[spec.name, spec.kind, "higher better" if spec.higher_is_better
                  else "lower better", "yes" if spec.needs_probabilities else "",
                  escape(spec.summary)] for spec in api.list_metrics()])
