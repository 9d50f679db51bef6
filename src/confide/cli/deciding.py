"""The decision commands: ``calibrate``, ``abstain``, ``route``, ``vote``.

Each command imports :mod:`confide.api` in its body, not at the top, so that
``confide --help`` loads no model code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from confide.cli.app import app, console, output_dir, output_file, user_errors
from confide.core.errors import InvalidInputError
from confide.core.options import DEFAULT_MODEL, DEFAULT_TASK


@app.command()
def calibrate(
    run_dir: Annotated[Path, typer.Argument(help="graded run directory")],
    scorer: Annotated[str, typer.Option(help="scorer whose confidence to calibrate")] = "msp",
    method: Annotated[str, typer.Option(help="platt, isotonic or histogram")] = "isotonic",
    bins: Annotated[int, typer.Option(help="histogram: number of equal-mass bins")] = 10,
    grader: Annotated[Optional[str], typer.Option(help="grader stored in the run")] = None,
    out: Annotated[Optional[Path], typer.Option(help="calibrator JSON file "
                                                     "(default: in the run directory)")] = None,
) -> None:
    """Fit a calibrator (confidence → probability of being right) on a graded run; save JSON."""
    from confide import api
    from confide.cli.decision_tables import render_calibration

    with user_errors():
        fit = api.calibrate(run_dir, scorer, method=method, grader=grader,
                            n_bins=bins)
        path = fit.calibrator.save(output_file(
            out or run_dir / f"calibrator-{scorer}-{method}.json", "--out"))
    render_calibration(console, fit)
    console.print(f"wrote {path}")


@app.command()
def abstain(
    run_dir: Annotated[Path, typer.Argument(help="graded calibration run directory")],
    scorer: Annotated[str, typer.Option(help="scorer whose confidence to threshold")] = "msp",
    alpha: Annotated[float, typer.Option(help="largest error rate among answered items")
                     ] = 0.1,
    delta: Annotated[float, typer.Option(help="chance that the guarantee fails")] = 0.1,
    calibrator: Annotated[Optional[Path], typer.Option(
        help="threshold this calibrator's probability (fit it on another run)")] = None,
    grader: Annotated[Optional[str], typer.Option(help="grader stored in the run")] = None,
    seed: Annotated[int, typer.Option(help="seed of the grid split")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="policy JSON file "
                                                     "(default: in the run directory)")] = None,
) -> None:
    """Choose an answer/abstain threshold with P(error rate <= alpha) >= 1 - delta; save JSON."""
    from confide import api
    from confide.cli.decision_tables import render_abstention

    with user_errors():
        cal = api.load_calibrator(calibrator) if calibrator else None
        fit = api.abstain(run_dir, scorer, alpha=alpha, delta=delta, calibrator=cal,
                          grader=grader, seed=seed)
        path = fit.policy.save(output_file(
            out or run_dir / f"policy-{scorer}-a{alpha:g}-d{delta:g}.json", "--out"))
    render_abstention(console, fit)
    console.print(f"wrote {path}")


@app.command()
def route(
    small_run: Annotated[Optional[Path], typer.Option(help="stored run of the small model")
                         ] = None,
    large_run: Annotated[Optional[Path], typer.Option(help="stored run of the large model")
                         ] = None,
    small_model: Annotated[str, typer.Option(
        help="without runs: the small model to run")] = DEFAULT_MODEL,
    large_model: Annotated[str, typer.Option(
        help="without runs: the large model to run on the same items")] = "gemma3-270m",
    task: Annotated[str, typer.Option(help="with models: the task")] = DEFAULT_TASK,
    limit: Annotated[int, typer.Option(help="with models: number of items")] = 40,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="with models: answer budget")
                              ] = None,
    out: Annotated[Optional[Path], typer.Option(help="with models: folder for both runs")
                   ] = None,
    scorer: Annotated[str, typer.Option(help="the small model's confidence")] = "msp",
    grader: Annotated[Optional[str], typer.Option(help="grader stored in the runs")] = None,
    target_accuracy: Annotated[Optional[float], typer.Option(
        help="pick the cheapest threshold reaching this accuracy")] = None,
    budget: Annotated[Optional[float], typer.Option(
        help="pick the most accurate threshold within this cost per item")] = None,
    cost: Annotated[str, typer.Option(help="cost for --budget: tokens or seconds")] = "tokens",
) -> None:
    """Small → large model cascade: accuracy against cost at every confidence threshold.

    With no runs given, runs both bundled models (SmolLM2-135M → Gemma-3-270m) on the
    same items of --task first (resumable)."""
    from confide import api
    from confide.cli.decision_tables import render_cascade

    if out is not None:
        out = output_dir(out, "--out")
    with user_errors():
        if small_run and large_run:
            curve = api.cascade(small_run, large_run, scorer=scorer, grader=grader)
        elif small_run or large_run:
            raise InvalidInputError("give both --small-run and --large-run, or neither (then "
                                    "--small-model and --large-model run on --task)",
                                    field="route")
        else:
            settings: dict[str, Any] = {"limit": limit}
            if max_new_tokens:
                settings["max_new_tokens"] = max_new_tokens
            curve = api.route(small_model, large_model, task=task, scorer=scorer, out=out,
                              **settings)
        chosen = None
        if target_accuracy is not None or budget is not None:
            chosen = curve.choose(target_accuracy=target_accuracy, budget=budget,
                                  cost=cost)  # type: ignore[arg-type]
    render_cascade(console, curve, chosen=chosen)


@app.command()
def vote(
    run_dir: Annotated[Path, typer.Argument(help="run directory with samples")],
    temperature: Annotated[float, typer.Option(help="CISC softmax temperature")] = 0.1,
    k: Annotated[Optional[int], typer.Option(help="use the first k samples")] = None,
    judge: Annotated[Optional[str], typer.Option(help="equivalence judge for the clusters")
                     ] = None,
    grader: Annotated[Optional[str], typer.Option(help="grader stored in the run")] = None,
    adaptive: Annotated[bool, typer.Option(
        help="also replay adaptive sampling against fixed k")] = True,
    eta: Annotated[Optional[float], typer.Option(
        help="DeepConf offline: keep the top ETA % of sampled traces by trace confidence "
             "and vote (the paper: 10 or 90)")] = None,
    trace_confidence: Annotated[str, typer.Option(
        help="the trace confidence that ranks them: mean, lowest_group, bottom10, tail")
    ] = "bottom10",
    online: Annotated[bool, typer.Option(
        "--online", help="also replay DeepConf-online on the stored traces: a threshold from "
                         "the warm-up traces (the (100 - ETA)-th percentile, ETA default 10), "
                         "later traces stopped below it, sampling stopped at consensus")
    ] = False,
    warmup: Annotated[int, typer.Option(help="DeepConf-online: warm-up traces (paper: 16)")
                      ] = 4,
    consensus: Annotated[float, typer.Option(
        help="DeepConf-online: stop sampling once the weighted vote's leader holds this "
             "share")] = 0.95,
    window: Annotated[Optional[int], typer.Option(
        help="DeepConf group size in trace tokens (default 2048)")] = None,
) -> None:
    """Majority vote vs confidence-weighted vote (CISC) over samples; adaptive stopping;
    with --eta, DeepConf's confidence-filtered vote over reasoning traces; with --online,
    DeepConf-online replayed on them (tokens saved, accuracy)."""
    from confide import api
    from confide.cli.decision_tables import (
        render_adaptive,
        render_filtered_votes,
        render_online_votes,
        render_votes,
    )

    with user_errors():
        cmp = api.compare_votes(run_dir, temperature=temperature, k=k, judge=judge,
                                grader=grader, temperatures=(0.01, 1.0, 100.0))
        report = api.replay_adaptive(run_dir, judge=judge, grader=grader) if adaptive else None
        filtered = None if eta is None else api.compare_filtered_votes(
            run_dir, eta=eta, measure=trace_confidence, k=k, judge=judge, grader=grader,
            window=window)
        replayed = None if not online else api.replay_deepconf_online(
            run_dir, warmup=warmup, eta=10.0 if eta is None else eta, consensus=consensus,
            window=window, budget=k, judge=judge, grader=grader)
    render_votes(console, cmp)
    if report is not None:
        render_adaptive(console, report)
    if filtered is not None:
        render_filtered_votes(console, filtered)
    if replayed is not None:
        render_online_votes(console, replayed)
