"""The Typer application and what every command shares: the consoles, the error
boundary (``ConfideError`` → ``Type: message``, exit 1), progress bars, output checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from confide.core.errors import ConfideError

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="confide: tells you when to trust a language model's answer.")


console = Console()


err_console = Console(stderr=True)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except ConfideError as exc:
        err_console.print(f"[red]{type(exc).__name__}[/red]: {escape(str(exc))}")
        raise typer.Exit(1) from exc


def progress_bar(label: str, *, loss: bool = False) -> tuple[Any, Callable[..., None]]:
    """A Rich bar of ``label`` and its ``update(done, total)``; with ``loss``, a loss
    column too, and ``update(done, total, loss)`` (NaN: no step yet)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn(),
               *([TextColumn("loss {task.fields[loss]}")] if loss else []),
               TimeElapsedColumn(), TimeRemainingColumn()]
    bar = Progress(*columns, console=err_console, transient=False)
    task_id = bar.add_task(label, total=None, loss="…")

    def update(done: int, total: int | None, value: float = float("nan")) -> None:
        shown = "…" if value != value else f"{value:.3f}"
        bar.update(task_id, completed=done, total=total, loss=shown)

    return bar, update


def int_list(text: str | None, option: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise typer.BadParameter(f"comma-separated integers expected, got {text!r}",
                                 param_hint=option) from exc


# RunConfig fields → the `confide run` options that set them (for error messages).
RUN_OPTIONS = {"batch_size": "--batch-size", "temperature": "--temperature",
                "top_p": "--top-p", "max_new_tokens": "--max-new-tokens", "n_samples": "--samples",
                "hidden_layers": "--hidden-layers", "limit": "--limit", "seed": "--seed",
                "on_bad_record": "--on-bad-record", "ray": "--ray", "workers": "--workers",
                "threads_per_worker": "--threads-per-worker"}


def output_file(path: Path, option: str) -> Path:
    from confide.core.paths import writable_file

    with user_errors():
        return writable_file(path, option)


def output_dir(path: Path, option: str) -> Path:
    from confide.core.paths import writable_dir

    with user_errors():
        return writable_dir(path, option)
