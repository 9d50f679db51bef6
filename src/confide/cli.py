"""The ``confide`` command: parses options, calls :mod:`confide.api`, renders with Rich.

``ConfideError`` is caught only here and printed as ``Type: message`` with exit
code 1; Ctrl-C keeps what is stored and says how to resume.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from confide.errors import ConfideError, InvalidInputError

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="confide: tells you when to trust a language model's answer.")
console = Console()
err_console = Console(stderr=True)


@contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except ConfideError as exc:
        err_console.print(f"[red]{type(exc).__name__}[/red]: {escape(str(exc))}")
        raise typer.Exit(1) from exc


def _progress_bar(label: str) -> tuple[Any, Callable[[int, int], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.progress import TimeElapsedColumn, TimeRemainingColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn(), console=err_console, transient=False)
    task_id = bar.add_task(label, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task_id, completed=done, total=total)

    return bar, update


def _int_list(text: str | None, option: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise typer.BadParameter(f"comma-separated integers expected, got {text!r}",
                                 param_hint=option) from exc


# RunConfig fields → the `confide run` options that set them (for error messages).
_RUN_OPTIONS = {"batch_size": "--batch-size", "temperature": "--temperature",
                "top_p": "--top-p", "max_new_tokens": "--max-new-tokens", "n_samples": "--samples",
                "hidden_layers": "--hidden-layers", "limit": "--limit", "seed": "--seed",
                "on_bad_record": "--on-bad-record", "ray": "--ray", "workers": "--workers",
                "threads_per_worker": "--threads-per-worker"}


def _output(path: Path, option: str) -> Path:
    from confide.outputs import writable_file

    with _user_errors():
        return writable_file(path, option)


@app.command()
def run(
    model: Annotated[str, typer.Option(help="bundled alias, .gguf file, model dir or hub id")
                     ] = "smollm2",
    task: Annotated[str, typer.Option(help="task name or data file (.jsonl/.csv/.parquet)")
                    ] = "triviaqa",
    data: Annotated[Optional[str], typer.Option(help="full data file for a built-in task")
                    ] = None,
    limit: Annotated[Optional[int], typer.Option(
        help="number of items (0 = all); 200 TriviaQA questions give enough right answers "
             "to separate scorers (benchmarks/prompting.py)")] = 200,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="answer budget")] = None,
    scorers: Annotated[Optional[str], typer.Option(help="comma-separated scorer names")] = None,
    grader: Annotated[Optional[str], typer.Option(help="grader (default: the task's)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="run directory")] = None,
    seed: Annotated[int, typer.Option(help="run seed")] = 0,
    batch_size: Annotated[int, typer.Option(help="rows per forward pass")] = 8,
    backend: Annotated[str, typer.Option(help="model backend")] = "hf",
    report: Annotated[bool, typer.Option("--report/--no-report",
                                         help="write RUN/report.html at the end")] = True,
    base_url: Annotated[Optional[str], typer.Option(
        help="--backend openai: the server's API root, e.g. http://127.0.0.1:8080/v1")] = None,
    api_key_env: Annotated[str, typer.Option(
        help="--backend openai: environment variable holding the API key")] = "OPENAI_API_KEY",
    concurrency: Annotated[int, typer.Option(
        help="--backend openai: most requests in flight")] = 8,
    samples: Annotated[Optional[int], typer.Option(
        help="sampled answers per item (default: what the scorers need)")] = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 1.0,
    top_p: Annotated[float, typer.Option(help="sampling nucleus (top-p)")] = 0.9,
    judge: Annotated[Optional[str], typer.Option(
        help="equivalence judge: exact, numeric, ast, embedding, nli, llm "
             "(default: the task's)")] = None,
    judge_model: Annotated[Optional[str], typer.Option(
        help="--judge nli: the cross-encoder; --judge llm: a model other than the run's")
                           ] = None,
    hidden_layers: Annotated[Optional[str], typer.Option(
        help="store pooled hidden states of these layers, e.g. 8,16,-1 (for confide fit)")
                             ] = None,
    on_bad_record: Annotated[str, typer.Option(
        help="raise: stop at a malformed data record; skip: skip it and count it")] = "raise",
    json_out: Annotated[Optional[Path], typer.Option(
        "--json", help="write the table as JSON (as confide eval --json)")] = None,
    question_field: Annotated[Optional[str], typer.Option(
        help="your data file: the field holding the question (default: question)")] = None,
    reference_field: Annotated[Optional[str], typer.Option(
        help="your data file: field(s) holding accepted answers, comma-separated "
             "(default: references)")] = None,
    id_field: Annotated[Optional[str], typer.Option(
        help="your data file: the field holding item ids (default: id, else the line)")
                        ] = None,
    choices_field: Annotated[Optional[str], typer.Option(
        help="your data file: a list of options (makes the task multiple choice)")] = None,
    alias_separator: Annotated[Optional[str], typer.Option(
        help="your data file: split references into aliases at this text, e.g. ';'")] = None,
    ray: Annotated[Optional[str], typer.Option(
        help="spread the items over Ray workers: local, or a cluster address")] = None,
    workers: Annotated[Optional[int], typer.Option(
        help="--ray: workers, each loading the model once (default 2)")] = None,
    threads_per_worker: Annotated[Optional[int], typer.Option(
        help="--ray: decoding threads per worker (default: the CPUs shared out)")] = None,
    long_form: Annotated[bool, typer.Option(
        "--long-form", help="ask for paragraphs; split, score and grade each answer claim "
                            "by claim; write RUN/refined.jsonl with doubtful claims dropped")
                         ] = False,
) -> None:
    """Generate, score, grade and store a run; print how well each scorer predicts correctness."""
    from confide import api
    from confide.claims import ClaimConfig
    from confide.options import check_distribution
    from confide.runner import DEFAULT_SCORERS, RunConfig

    chosen = tuple(s.strip() for s in scorers.split(",") if s.strip()) if scorers \
        else DEFAULT_SCORERS
    mapping = {"question_field": question_field, "id_field": id_field,
               "choices_field": choices_field, "alias_separator": alias_separator,
               "reference_field": [f.strip() for f in reference_field.split(",") if f.strip()]
               if reference_field else None, "long_form": long_form or None}
    claim_config = ClaimConfig() if long_form else None
    if claim_config is not None and samples is None:  # the claim scorers' samples too
        from confide.scorers import SCORERS

        samples = max([claim_config.n_samples] + [SCORERS[s].n_samples for s in chosen
                                                  if s in SCORERS])
    try:  # the ranges live in confide.options; a bad value is a usage error naming the option
        config = RunConfig(model=model, backend=backend, task=task, data_path=data,
                           limit=limit or None, scorers=chosen, grader=grader,
                           max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size,
                           n_samples=samples, temperature=temperature, top_p=top_p,
                           judge=judge,
                           judge_options={"model": judge_model} if judge_model else {},
                           hidden_layers=_int_list(hidden_layers, "--hidden-layers"),
                           on_bad_record=on_bad_record,
                           task_options={k: v for k, v in mapping.items() if v is not None})
        check_distribution(ray, workers, threads_per_worker)
    except InvalidInputError as exc:
        raise typer.BadParameter(str(exc).removeprefix(f"{exc.field}: "),
                                 param_hint=_RUN_OPTIONS.get(exc.field or "", exc.field)
                                 ) from None
    target = out or api.default_run_dir(config)
    bar, update = _progress_bar(f"{Path(task).stem} × {Path(model).name}")
    with _user_errors():
        loaded = None
        if backend == "openai":  # HTTP options are not part of the run's identity
            loaded = api.load_model(model, backend="openai", base_url=base_url,
                                    api_key_env=api_key_env, concurrency=concurrency)
        elif claim_config is not None:  # one model for the answers and the claim stage
            loaded = api.load_model(model, backend=backend, batch_size=batch_size)
        try:
            with bar:
                outcome = api.execute(config, target, progress=update, backend=loaded, ray=ray,
                                      workers=workers, threads_per_worker=threads_per_worker)
        except KeyboardInterrupt:
            err_console.print(
                f"\nInterrupted. Every finished item is stored in {target}.\n"
                f"Resume with: confide {' '.join(shlex.quote(a) for a in sys.argv[1:])}"
                + ("" if out else f" --out {shlex.quote(str(target))}"))
            raise typer.Exit(130) from None
    claim_grader = None
    if claim_config is not None:
        claim_grader = _long_form(target, claim_config, loaded)
    eval_(target, grader=claim_grader, json_out=json_out)  # `confide eval RUN`'s table
    if outcome.generated:
        rate = outcome.generated_tokens / max(outcome.generation_seconds, 1e-9)
        console.print(f"generated {outcome.generated} item(s) in "
                      f"{outcome.generation_seconds:.1f} s ({rate:.0f} tokens/s); "
                      f"{outcome.total - outcome.generated} resumed from the store")
    else:
        console.print(f"all {outcome.total} items were already stored; nothing generated")
    if outcome.task.skipped:
        err_console.print(f"[yellow]{len(outcome.task.skipped)} bad record(s) skipped[/yellow]:")
        for where, reason in outcome.task.skipped[:10]:
            err_console.print(f"  {escape(where)}: {escape(reason)}")
    if outcome.failures:
        first = next(iter(outcome.failures.values()))
        err_console.print(f"[red]{len(outcome.failures)} item(s) failed[/red] and are recorded "
                          f"in the run (first error: {escape(first)}); run the same command "
                          "again to retry them")
    console.print(f"run stored in {target}")
    if report:
        with _user_errors():
            page = api.make_report(target)
        console.print(f"report written to {page}")


def _long_form(target: Path, claim_config: Any, loaded: Any) -> str | None:
    """The claim stage of `confide run --long-form`: claims, their table, the refined answers.
    Returns the answer grade to show in the run's table (None: the run's own grader)."""
    from confide import api
    from confide.claims import ANSWER_GRADE, add_claims, evaluate_claims, refine_run
    from confide.render import render_eval_table

    bar, update = _progress_bar("claims")
    with _user_errors():
        with bar:
            outcome = add_claims(target, claim_config, backend=loaded, progress=update)
        run = api.open_run(target)
        grader = outcome.grader or ""
        table = evaluate_claims(run.records, grader=grader, answers=False,
                                seed=run.config.get("seed", 0))
        render_eval_table(console, table.as_eval_table(),
                          title=f"claims of {table.n_answers} answers (intervals over answers)")
        summary = refine_run(run.records, scorer=claim_config.scorer_for_refine, grader=grader,
                             threshold=claim_config.threshold, action=claim_config.action,
                             out=target / "refined.jsonl", seed=run.config.get("seed", 0))
    if summary.note:
        console.print(f"refine: {escape(summary.note)}")
    else:
        console.print(f"refine ({summary.scorer} ≥ {summary.threshold:g}, calibrated): kept "
                      f"{summary.kept} of {summary.n} graded claims; right "
                      f"{summary.accuracy_all:.3f} of all → {summary.accuracy_kept:.3f} of kept "
                      f"(cross-fitted); answers in {summary.path}")
    return ANSWER_GRADE if any(ANSWER_GRADE in r.grades for r in run.records) else None


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
        out = _output(out, "--out")
    with _user_errors():
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
    from confide.errors import InvalidInputError

    with _user_errors():
        if len(run_dirs) < 2:
            raise InvalidInputError("compare needs at least two runs", field="RUN_DIRS")
        out = _output(out, "--out")
        path = api.make_report(list(run_dirs), out, n_resamples=resamples)
    console.print(f"wrote {path}")


@app.command()
def scorers() -> None:
    """List the registered scorers by family and cost, with what they need."""
    from confide.render import print_table
    from confide.scorers import FAMILIES, SCORERS, Cost

    families = list(dict.fromkeys([*FAMILIES, *(spec.family for spec in SCORERS.values())]))
    costs = list(Cost)
    rows = []
    for family in families:
        specs = sorted((s for s in SCORERS.values() if s.family == family),
                       key=lambda s: (costs.index(s.cost), s.name))
        rows += [[spec.name, family, spec.cost.value,
                  ", ".join(sorted(n.value for n in spec.needs)) or "–", escape(spec.summary)]
                 for spec in specs]
    print_table(console, ["scorer", "family", "cost", "needs", "summary"], rows)


@app.command()
def tasks() -> None:
    """List the built-in tasks with size, format and default grader."""
    from confide.render import print_table
    from confide.tasks import TASKS, load_task

    rows = []
    with _user_errors():
        for spec in TASKS.values():
            loaded = load_task(spec.name)
            rows.append([spec.name, str(len(loaded.items)), spec.format, spec.grader,
                         escape(spec.summary)])
    print_table(console, ["task", "items (bundled)", "format", "grader", "summary"], rows)


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="run directory")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl, csv or parquet")] = "jsonl",
    out: Annotated[Optional[Path], typer.Option(help="output file")] = None,
) -> None:
    """Export a run's records: one row per record, one column per scorer and grader."""
    from confide.store import RunStore

    with _user_errors(), RunStore.open(run_dir) as store:  # also a damaged store: recovers
        path = store.export(fmt, out)
        unreadable = store.unreadable
    console.print(f"wrote {path}")
    if unreadable:
        err_console.print(f"[yellow]{unreadable} damaged record(s) could not be read[/yellow]")


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
) -> None:
    """Recompute every metric of a stored run (no model, no regeneration, no rescoring)."""
    from confide import api
    from confide.render import render_eval_table

    if json_out is not None:
        json_out = _output(json_out, "--json")
    names = tuple(m.strip() for m in metrics.split(",") if m.strip())
    options = {"prr": {"max_rejection": prr_cutoff}, "risk_at_coverage": {"coverage": coverage},
               "coverage_at_risk": {"risk": risk},
               **{m: {"n_bins": n_bins} for m in ("ece", "ece_mass", "ace")}}
    with _user_errors():
        result = api.open_run(run_dir)
        if with_:
            api.apply_learned(result, with_)
        table = result.evaluate(grader=grader, metrics=names, n_resamples=resamples,
                                metric_options={k: v for k, v in options.items() if k in names})
    render_eval_table(console, table, title=str(run_dir), skipped=result.skipped_scorers)
    if json_out:
        json_out.write_text(json.dumps(table.to_dict(), indent=2))
        console.print(f"wrote {json_out}")


@app.command(name="fit")
def fit_(
    run_dir: Annotated[Path, typer.Argument(help="graded run to train on")],
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
) -> None:
    """Fit a hidden-state probe, density model or scorer combiner on a graded run; apply with
    eval --with."""
    from confide import api
    from confide.render import print_table

    chosen = [s.strip() for s in scorers.split(",") if s.strip()] if scorers else None
    out = _output(out, "--out")
    with _user_errors():
        model = api.fit_learned(run_dir, kind=kind, out=out, layer=layer, scorers=chosen,
                                estimator=estimator, grader=grader, n_folds=folds, seed=seed,
                                **({"name": name} if name else {}),
                                **({"background": background} if background else {}))
    rep = model.report
    auroc = rep.get("oof_auroc")
    console.print(f"{model.kind} [bold]{escape(model.name)}[/bold] on {rep['n']} graded items "
                  f"({rep['n_correct']} correct): chosen {escape(str(rep['chosen']))}; "
                  f"cross-fitted AUROC "
                  + ("–" if auroc is None else f"{auroc:.3f}"))
    weights = rep.get("weights") or rep.get("token_weights") or rep.get("importances")
    if weights:
        print_table(console, ["input", "importance" if "importances" in rep else "weight"],
                    [[escape(key), "–" if value is None else f"{value:+.3f}"]
                     for key, value in sorted(weights.items(), key=lambda kv: -abs(kv[1] or 0.0))])
    console.print(f"wrote {out}")


@app.command(name="metrics")
def list_metrics() -> None:
    """List the registered evaluation metrics."""
    from confide.metrics import METRICS
    from confide.render import print_table

    print_table(console, ["metric", "kind", "direction", "on probabilities", "summary"],
                [[spec.name, spec.kind, "higher better" if spec.higher_is_better
                  else "lower better", "yes" if spec.needs_probabilities else "",
                  escape(spec.summary)] for spec in METRICS.values()])


@app.command()
def serve(
    model: Annotated[str, typer.Option(help="hf: bundled alias, .gguf, dir or hub id; "
                                            "openai: the upstream's model name")] = "smollm2",
    backend: Annotated[str, typer.Option(help="hf (local model) or openai (upstream URL)")
                       ] = "hf",
    base_url: Annotated[Optional[str], typer.Option(help="--backend openai: upstream API root")
                        ] = None,
    api_key_env: Annotated[str, typer.Option(help="variable holding the upstream API key")
                           ] = "OPENAI_API_KEY",
    scorers: Annotated[Optional[str], typer.Option(help="comma-separated scorer names")] = None,
    calibrator: Annotated[Optional[Path], typer.Option(help="fitted calibrator (JSON)")] = None,
    policy: Annotated[Optional[Path], typer.Option(help="fitted abstention policy (JSON)")
                      ] = None,
    abstain_message: Annotated[Optional[str], typer.Option(
        help="reply content when the policy abstains")] = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    max_n: Annotated[int, typer.Option(help="most choices per request")] = 8,
    max_tokens: Annotated[int, typer.Option(help="largest max_tokens a request may ask")] = 512,
    max_prompt_chars: Annotated[int, typer.Option(help="largest prompt, in characters")
                                ] = 32_000,
    timeout: Annotated[float, typer.Option(help="seconds the model may take (then 504)")
                       ] = 120.0,
    max_batch: Annotated[int, typer.Option(
        help="hf: requests generated together; above 1 a reply's confidences depend on "
             "its batch neighbours (see confide.serve.app)")] = 1,
    long_form: Annotated[bool, typer.Option(
        "--long-form", help="list each answer's claims with their confidences")] = False,
    early_abstain_below: Annotated[Optional[float], typer.Option(
        help="stop an answer once its running confidence (geometric-mean token "
             "probability) falls below this, and abstain")] = None,
    early_abstain_after: Annotated[int, typer.Option(
        help="tokens generated before early abstention may stop an answer")] = 4,
    summary_samples: Annotated[int, typer.Option(
        help="samples drawn per request for confide.summary (0: only when drawn anyway)")
                               ] = 0,
) -> None:
    """Serve a model over an OpenAI-compatible API, with confidences in every reply."""
    from confide.serve.launch import build_app
    from confide.serve.launch import serve as run_server
    from confide.serve.models import Limits

    chosen = tuple(s.strip() for s in scorers.split(",") if s.strip()) if scorers else None
    with _user_errors():
        server = build_app(model=model, backend=backend, base_url=base_url,
                           api_key_env=api_key_env, scorers=chosen,
                           calibrator=str(calibrator) if calibrator else None,
                           policy=str(policy) if policy else None,
                           abstain_message=abstain_message,
                           limits=Limits(max_n=max_n, max_tokens=max_tokens,
                                         max_prompt_chars=max_prompt_chars),
                           timeout=timeout, max_batch=max_batch, long_form=long_form,
                           early_abstain_below=early_abstain_below,
                           early_abstain_after=early_abstain_after,
                           summary_samples=summary_samples)
    err_console.print(f"serving {model} on http://{host}:{port}/v1")
    run_server(server, host=host, port=port)


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
    from confide.decisions.calibration import calibrate_run
    from confide.decisions.render import render_calibration

    with _user_errors():
        fit = calibrate_run(run_dir, scorer, method=method, grader=grader,  # type: ignore[arg-type]
                            n_bins=bins)
        path = fit.calibrator.save(_output(out or run_dir / f"calibrator-{scorer}-{method}.json",
                                           "--out"))
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
    from confide.decisions.abstention import abstain_run
    from confide.decisions.calibration import load_calibrator
    from confide.decisions.render import render_abstention

    with _user_errors():
        cal = load_calibrator(calibrator) if calibrator else None
        fit = abstain_run(run_dir, scorer, alpha=alpha, delta=delta, calibrator=cal,
                          grader=grader, seed=seed)
        path = fit.policy.save(_output(
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
        help="without runs: the small model to run")] = "smollm2",
    large_model: Annotated[str, typer.Option(
        help="without runs: the large model to run on the same items")] = "gemma3-270m",
    task: Annotated[str, typer.Option(help="with models: the task")] = "triviaqa",
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
    from confide.decisions.render import render_cascade
    from confide.decisions.routing import cascade, route_models

    with _user_errors():
        if small_run and large_run:
            curve = cascade(small_run, large_run, scorer=scorer, grader=grader)
        elif small_run or large_run:
            raise InvalidInputError("give both --small-run and --large-run, or neither (then "
                                    "--small-model and --large-model run on --task)",
                                    field="route")
        else:
            settings: dict[str, Any] = {"limit": limit}
            if max_new_tokens:
                settings["max_new_tokens"] = max_new_tokens
            curve = route_models(small_model, large_model, task=task, scorer=scorer, out=out,
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
) -> None:
    """Majority vote vs confidence-weighted vote (CISC) over samples; adaptive stopping."""
    from confide.decisions.adaptive import replay_adaptive
    from confide.decisions.render import render_adaptive, render_votes
    from confide.decisions.voting import compare_votes

    with _user_errors():
        cmp = compare_votes(run_dir, temperature=temperature, k=k, judge=judge, grader=grader,
                            temperatures=(0.01, 1.0, 100.0))
        report = replay_adaptive(run_dir, judge=judge, grader=grader) if adaptive else None
    render_votes(console, cmp)
    if report is not None:
        render_adaptive(console, report)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
