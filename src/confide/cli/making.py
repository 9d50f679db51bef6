"""Commands that make or add to a run: ``run``, ``score`` (import existing generations),
``label`` (attach correctness later).

Each command imports :mod:`confide.api` in its body, not at the top, so that
``confide --help`` loads no model code."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from confide.cli.app import (
    RUN_OPTIONS,
    app,
    console,
    err_console,
    int_list,
    output_dir,
    output_file,
    progress_bar,
    user_errors,
)
from confide.core.errors import InvalidInputError
from confide.core.options import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LIMIT,
    DEFAULT_MODEL,
    DEFAULT_TASK,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
)


@app.command()
def run(
    model: Annotated[str, typer.Option(help="bundled alias, .gguf file, model dir or hub id")
                     ] = DEFAULT_MODEL,
    task: Annotated[str, typer.Option(help="task name or data file (.jsonl/.csv/.parquet)")
                    ] = DEFAULT_TASK,
    data: Annotated[Optional[str], typer.Option(help="full data file for a built-in task")
                    ] = None,
    limit: Annotated[Optional[int], typer.Option(
        help="number of items (0 = all); 200 TriviaQA questions give enough right answers "
             "to separate scorers (benchmarks/prompting.py)")] = DEFAULT_LIMIT,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="answer budget")] = None,
    scorers: Annotated[Optional[str], typer.Option(help="comma-separated scorer names")] = None,
    grader: Annotated[Optional[str], typer.Option(help="grader (default: the task's)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="run directory")] = None,
    seed: Annotated[int, typer.Option(help="run seed")] = 0,
    batch_size: Annotated[int, typer.Option(help="rows per forward pass")] = DEFAULT_BATCH_SIZE,
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
    temperature: Annotated[float, typer.Option(help="sampling temperature")
                           ] = DEFAULT_TEMPERATURE,
    top_p: Annotated[float, typer.Option(help="sampling nucleus (top-p)")] = DEFAULT_TOP_P,
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
    prompt: Annotated[str, typer.Option(
        help="your QA file: kshot (Question:/Answer: exemplars, short answers), chat, or "
             "auto (kshot for short-answer QA without choices, else chat); gsm8k: cot "
             "(k-shot chain of thought, each trace in <think> tags)")] = "auto",
    fewshot: Annotated[Optional[Path], typer.Option(
        help="your QA file: exemplars in the data's format, never evaluated (default with "
             "kshot: TriviaQA's five)")] = None,
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
    ensemble: Annotated[Optional[Path], typer.Option(
        help="ensemble directory (confide train): score every answer under each member too, "
             "for the ens_* scorers (hf backend)")] = None,
    ensemble_greedy: Annotated[str, typer.Option(
        help="--ensemble: the greedy answer is the base model's (base: what the deployed "
             "model answers, one pass cheaper) or the members' mean's (mean: slower)")
                               ] = "base",
    reasoning_tags: Annotated[Optional[str], typer.Option(
        help="tags of a reasoning model's trace ('<open>,<close>', as confide score): each "
             "answer is split into its trace and final answer, which is graded and scored; "
             "none (default; --prompt cot: '<think>,</think>'): answers are read whole")
                              ] = None,
) -> None:
    """Generate, score, grade and store a run; print how well each scorer predicts correctness."""
    from confide import api
    from confide.core.options import check_distribution

    chosen = tuple(s.strip() for s in scorers.split(",") if s.strip()) if scorers \
        else api.DEFAULT_SCORERS
    mapping = {"question_field": question_field, "id_field": id_field,
               "choices_field": choices_field, "alias_separator": alias_separator,
               "reference_field": [f.strip() for f in reference_field.split(",") if f.strip()]
               if reference_field else None, "long_form": long_form or None,
               "prompt": None if prompt == "auto" else prompt,
               "fewshot": str(fewshot) if fewshot else None}
    claim_config = api.ClaimConfig() if long_form else None
    if claim_config is not None and samples is None:  # the claim scorers' samples too
        samples = api.samples_needed(chosen, at_least=claim_config.n_samples)
    try:  # the ranges live in confide.core.options; a bad value is a usage error naming the option
        config = api.RunConfig(model=model, backend=backend, task=task, data_path=data,
                               limit=limit, scorers=chosen, grader=grader,
                               max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size,
                               n_samples=samples, temperature=temperature, top_p=top_p,
                               judge=judge,
                               judge_options={"model": judge_model} if judge_model else {},
                               hidden_layers=int_list(hidden_layers, "--hidden-layers"),
                               on_bad_record=on_bad_record,
                               ensemble=None if ensemble is None else str(ensemble),
                               ensemble_greedy=ensemble_greedy,
                               task_options={k: v for k, v in mapping.items()
                                             if v is not None},
                               reasoning_tags=reasoning_tags)  # type: ignore[arg-type]
        check_distribution(ray, workers, threads_per_worker)
    except InvalidInputError as exc:
        raise typer.BadParameter(str(exc).removeprefix(f"{exc.field}: "),
                                 param_hint=RUN_OPTIONS.get(exc.field or "", exc.field)
                                 ) from None
    target = output_dir(out or api.default_run_dir(config), "--out")  # before generating
    if json_out is not None:
        json_out = output_file(json_out, "--json")
    bar, update = progress_bar(f"{Path(task).stem} × {Path(model).name}")
    with user_errors():
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
    from confide.cli.reading import eval_  # here: `run` registers before `eval`

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
        with user_errors():
            page = api.make_report(target)
        console.print(f"report written to {page}")


@app.command()
def score(
    file: Annotated[Path, typer.Argument(help="file of existing generations (another tool's "
                                              "log)")],
    out: Annotated[Path, typer.Option(help="run directory")],
    fmt: Annotated[str, typer.Option("--format", help="auto, openai, vllm, llamacpp, lmeval "
                                                      "or jsonl")] = "auto",
    scorers: Annotated[Optional[str], typer.Option(
        help="comma-separated scorer names; all (default: every scorer, those the file "
             "cannot feed skipped with why) or free (the no-cost ones)")] = None,
    grader: Annotated[Optional[str], typer.Option(
        help="grader of records with references (default: choice for multiple choice, "
             "else contains)")] = None,
    answer: Annotated[str, typer.Option(
        help="first: a record's first choice is the answer, the others samples; "
             "greedy-file: every choice is a sample, the answer is in --greedy-file")
                      ] = "first",
    greedy_file: Annotated[Optional[Path], typer.Option(
        help="--answer greedy-file: the file of greedy answers, by id")] = None,
    on_bad_record: Annotated[str, typer.Option(
        help="raise: stop at a bad record; skip: skip it and list it")] = "raise",
    label_field: Annotated[Optional[str], typer.Option(
        help="record field holding correctness (default: label; lmeval: acc)")] = None,
    workers: Annotated[Optional[int], typer.Option(
        help="processes reading and scoring a JSON Lines file (default: one per CPU for "
             "files of 32 MB or more; 1: this process only)")] = None,
    reasoning_tags: Annotated[str, typer.Option(
        help="tags of a reasoning model's trace in an answer ('<open>,<close>'): the text "
             "up to the closing tag is the trace, the rest the answer; none: read answers "
             "whole")] = "<think>,</think>",
) -> None:
    """Score a file of existing generations into a run (then eval, report, calibrate ...)."""
    from confide import api

    target = output_dir(out, "--out")
    with user_errors():
        if fmt == "auto":
            chosen, why = api.detect(file)
            console.print(f"reading {escape(str(file))} as {chosen} (detected: {escape(why)}; "
                          "--format overrides)")
        else:
            console.print(f"reading {escape(str(file))} as {fmt}")
        bar, update = progress_bar(file.name)

        def tick(n: int) -> None:  # records read; the total is not known before the end
            if n % 200 == 0:
                update(n, None)

        try:
            with bar:
                outcome = api.import_file(
                    file, target, format=fmt, scorers=scorers, grader=grader, answer=answer,
                    greedy_file=greedy_file, on_bad_record=on_bad_record,
                    label_field=label_field, progress=tick, workers=workers,
                    reasoning_tags=reasoning_tags)
        except KeyboardInterrupt:
            command = " ".join(shlex.quote(a) for a in sys.argv[1:])
            err_console.print(f"\nInterrupted. Every record read is stored in {target}.\n"
                              f"Resume with: confide {command}")
            raise typer.Exit(130) from None
    for note in outcome.notes():
        console.print(escape(note))
    if outcome.graded:
        from confide.cli.reading import eval_

        eval_(target)
    else:
        for name, why in outcome.skipped_scorers.items():
            console.print(f"  skipped {escape(name)}: {escape(why)}")
        console.print("no record is graded (no references, no labels): attach labels with "
                      "confide label RUN LABELS.jsonl --name human")
    console.print(f"run stored in {target}")


@app.command()
def label(
    run_dir: Annotated[Path, typer.Argument(help="run directory")],
    labels: Annotated[Path, typer.Argument(help="JSON Lines: {\"id\": ..., \"label\": 0..1}")],
    name: Annotated[str, typer.Option(help="the grade's name (eval --grader NAME)")] = "human",
    id_field: Annotated[str, typer.Option(help="field holding the item id")] = "id",
    label_field: Annotated[str, typer.Option(help="field holding correctness in [0, 1]")
                           ] = "label",
) -> None:
    """Attach correctness labels from a file to a run, as a grader of their own name."""
    from confide import api

    with user_errors():
        n = api.label(run_dir, labels, name=name, id_field=id_field, label_field=label_field)
    console.print(f"labelled {n} record(s) of {run_dir} as {escape(name)!r}; read them with "
                  f"confide eval {run_dir} --grader {escape(name)}")


def _long_form(target: Path, claim_config: Any, loaded: Any) -> str | None:
    """The claim stage of `confide run --long-form`: claims, their table, the refined answers.
    Returns the answer grade to show in the run's table (None: the run's own grader)."""
    from confide import api
    from confide.cli.tables import render_eval_table

    refined = output_file(target / "refined.jsonl", "--long-form")
    bar, update = progress_bar("claims")
    with user_errors(), bar:
        stage = api.claim_stage(target, claim_config, backend=loaded, progress=update,
                                refined_out=refined)
    table, summary = stage.table, stage.refined
    render_eval_table(console, table.as_eval_table(),
                      title=f"claims of {table.n_answers} answers (intervals over answers)")
    if summary.note:
        console.print(f"refine: {escape(summary.note)}")
    else:
        console.print(f"refine ({summary.scorer} ≥ {summary.threshold:g}, calibrated): kept "
                      f"{summary.kept} of {summary.n} graded claims; right "
                      f"{summary.accuracy_all:.3f} of all → {summary.accuracy_kept:.3f} of kept "
                      f"(cross-fitted); answers in {summary.path}")
    return stage.answer_grader
