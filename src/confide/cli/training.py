"""``confide train``: ensemble members of a local model (LoRA, singular values, MC dropout).

A thin call of :func:`confide.api.train` with a progress bar that shows the loss and the
time left. The command imports :mod:`confide.api` in its body, so ``confide --help``
loads no model code."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from confide.cli.app import app, console, err_console, output_dir, progress_bar, user_errors
from confide.core.options import DEFAULT_MODEL


@app.command()
def train(
    model: Annotated[str, typer.Argument(help="bundled alias, .gguf file or model dir")
                     ] = DEFAULT_MODEL,
    out: Annotated[Path, typer.Option(help="ensemble directory (resumed if it exists)")
                   ] = Path("ensembles/latest"),
    method: Annotated[str, typer.Option(help="lora, sve (singular values) or mc-dropout")
                      ] = "lora",
    members: Annotated[int, typer.Option(help="ensemble members (mc-dropout: passes K)")] = 4,
    steps: Annotated[int, typer.Option(help="optimiser steps (each member sees "
                                            "--batch-size items a step)")] = 100,
    task: Annotated[Optional[str], typer.Option(
        help="built-in task whose items to train on (with --data: its full data file)")
                    ] = None,
    data: Annotated[Optional[Path], typer.Option(
        help="question-answer file (.jsonl/.csv/.parquet), or a built-in --task's full file")
                    ] = None,
    offset: Annotated[int, typer.Option(
        help="skip the data's first K items (those a run evaluates: TriviaQA's first 1000)")
                      ] = 0,
    limit: Annotated[Optional[int], typer.Option(help="use at most this many items")] = None,
    rank: Annotated[int, typer.Option(help="LoRA rank")] = 8,
    lr: Annotated[Optional[float], typer.Option(
        help="learning rate (default: 2e-4 lora, 1e-3 sve)")] = None,
    batch_size: Annotated[int, typer.Option(help="items per member a step")] = 8,
    seed: Annotated[int, typer.Option(help="seed of the members and their data orders")] = 0,
    targets: Annotated[Optional[str], typer.Option(
        help="comma-separated layer names (default: q_proj,v_proj; mc-dropout: down_proj)")
                       ] = None,
    layers: Annotated[Optional[str], typer.Option(
        help="decoder layers the members adapt: top-K (the top K; scoring runs the layers "
             "below once for all members) or all (default: the top quarter; resuming: as "
             "trained)")] = None,
    dropout: Annotated[float, typer.Option(help="mc-dropout: the dropout rate")] = 0.1,
    checkpoint_every: Annotated[int, typer.Option(help="steps between checkpoints")] = 10,
    dtype: Annotated[Optional[str], typer.Option(help="float32 or bfloat16 (default: the "
                                                      "faster here)")] = None,
    reference_field: Annotated[Optional[str], typer.Option(
        help="your data file: the field holding the answer (e.g. answer)")] = None,
    question_field: Annotated[Optional[str], typer.Option(
        help="your data file: the field holding the question (default: question)")] = None,
) -> None:
    """Train ensemble members of a local model on question-answer pairs (resumable)."""
    from confide import api

    target = output_dir(out, "--out")
    options = {k: v for k, v in {"reference_field": reference_field,
                                 "question_field": question_field}.items() if v is not None}
    chosen = tuple(t.strip() for t in targets.split(",") if t.strip()) if targets else None
    bar, update = progress_bar(f"{method} × {members}", loss=True)
    with user_errors():
        try:
            with bar:
                info = api.train(model, None if data is None else str(data), task=task,
                                 out=target, method=method, members=members, steps=steps,
                                 dtype=dtype, offset=offset, limit=limit, rank=rank, lr=lr,
                                 batch_size=batch_size, seed=seed, targets=chosen,
                                 layers=layers, dropout=dropout, checkpoint_every=checkpoint_every,
                                 task_options=options, progress=update)
        except KeyboardInterrupt:
            err_console.print(
                f"\nInterrupted. Training resumes from the last checkpoint in {target}:\n"
                f"confide {' '.join(shlex.quote(a) for a in sys.argv[1:])}")
            raise typer.Exit(130) from None
    sizes = info.sizes
    member_bytes = sum(v for k, v in sizes.items() if k.startswith("member-"))
    console.print(f"{info.count} {escape(info.method)} member(s) of "
                  f"{escape(str(info.base.get('name')))} in {target}: {info.steps_done} "
                  f"step(s) on {info.data.get('items')} item(s) of "
                  f"{escape(str(info.data.get('file')))}, {info.seconds:.1f} s of training; "
                  f"layers {escape(str(info.settings.get('layers', 'all')))}")
    if info.loss_curve:
        first = sum(info.loss_curve[0]) / info.count
        last = sum(info.loss_curve[-1]) / info.count
        console.print(f"answer loss {first:.3f} → {last:.3f} (mean over members); member "
                      f"files {member_bytes / 1e6:.2f} MB")
