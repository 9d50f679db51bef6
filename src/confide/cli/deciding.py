"""The decision commands: ``calibrate``, ``abstain``, ``route``, ``vote``, ``deepconf``.

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


@app.command()
def deepconf(
    question: Annotated[str, typer.Argument(help="the question (with --prompt text: the "
                                                 "whole prompt)")],
    model: Annotated[str, typer.Option(help="bundled alias, model dir or hub id")
                     ] = DEFAULT_MODEL,
    backend: Annotated[str, typer.Option(help="a backend that streams its samples (hf)")
                       ] = "hf",
    prompt: Annotated[str, typer.Option(
        help="cot (GSM8K's k-shot chain-of-thought exemplars, traces in <think> tags; the "
             "bundled models), chat (one user turn: a reasoning model's thinking mode), or "
             "text (the question as the whole prompt)")] = "cot",
    reference: Annotated[Optional[str], typer.Option(
        help="the accepted answer: grade the DeepConf and majority answers")] = None,
    warmup: Annotated[int, typer.Option(help="warm-up traces generated whole (paper: 16)")
                      ] = 4,
    budget: Annotated[int, typer.Option(help="most traces in all, warm-up included")] = 16,
    eta: Annotated[float, typer.Option(
        help="the stop threshold is the (100 - ETA)-th percentile of the warm-up traces' "
             "lowest group confidence (10: DeepConf-low, 90: DeepConf-high)")] = 10.0,
    consensus: Annotated[float, typer.Option(
        help="stop sampling once the weighted vote's leader holds this share")] = 0.95,
    window: Annotated[Optional[int], typer.Option(
        help="group size in trace tokens (default 2048)")] = None,
    threshold: Annotated[Optional[float], typer.Option(
        help="a fixed stop threshold instead of the warm-up's percentile")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(
        help="per trace (default 384 with --prompt cot, else 1024)")] = None,
    stop: Annotated[Optional[str], typer.Option(
        help="a stop sequence, \\n for a line break (default: --prompt cot's next question, "
             "else none)")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="sampling temperature")] = None,
    top_p: Annotated[Optional[float], typer.Option(help="sampling nucleus (top-p)")] = None,
    batch: Annotated[int, typer.Option(help="traces drawn per call after the warm-up")] = 1,
    seed: Annotated[int, typer.Option(help="trace j draws from seed + j")] = 0,
    judge: Annotated[Optional[str], typer.Option(
        help="equivalence judge of final answers (default: numeric with cot, else exact)")
                     ] = None,
    reasoning_tags: Annotated[Optional[str], typer.Option(
        help="the trace's tags, '<open>,<close>' (default '<think>,</think>')")] = None,
) -> None:
    """DeepConf-online live: warm-up traces set a threshold, later traces are stopped as
    they are generated once their window confidence falls below it, and sampling stops
    at consensus. Prints the answer, the vote, each trace and the tokens generated."""
    from confide import api
    from confide.cli.decision_tables import render_live_deepconf

    with user_errors():
        item = api.Item(id="q0", prompt=question,
                        references=[] if reference is None else [reference])
        loaded = api.load_model(model, backend=backend)
        out = api.deepconf(loaded, item, warmup=warmup, budget=budget, eta=eta,
                           consensus=consensus, window=window, threshold=threshold,
                           prompt=prompt, max_new_tokens=max_new_tokens,
                           stop=None if stop is None else (stop.replace("\\n", "\n"),),
                           temperature=temperature, top_p=top_p, batch=batch, seed=seed,
                           judge=judge, reasoning_tags=reasoning_tags)
    render_live_deepconf(console, out)
