"""The valid range of every generation option, in one place.

The CLI (``confide run``), the Python API (:class:`~confide.pipeline.plan.RunConfig`)
and the server's request models (:mod:`confide.serve.models`) all check
options here, so a value one of them refuses is refused by all, with the same
words. A bad value raises :class:`~confide.core.errors.InvalidInputError` naming
the option; nothing is clamped silently.

    >>> check_option("top_p", 0.9)
    0.9
    >>> check_option("top_p", 1.5)
    Traceback (most recent call last):
    ...
    confide.core.errors.InvalidInputError: top_p: must be > 0 and <= 1, got 1.5
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confide.core.errors import InvalidInputError

__all__ = ["CHOICES", "DEFAULT_BATCH_SIZE", "DEFAULT_LIMIT", "DEFAULT_MODEL", "DEFAULT_SAMPLES",
           "DEFAULT_TASK", "DEFAULT_TEMPERATURE", "DEFAULT_TOP_P", "MAX_STOP_SEQUENCES", "RANGES",
           "Range", "check_choice", "check_distribution", "check_hidden_layers", "check_option",
           "check_prompt_fits", "check_sampling", "check_stop"]

MAX_STOP_SEQUENCES = 4  # what the OpenAI API allows

# How samples are drawn unless a run or a request says otherwise (CLI, API, server and
# backends read these). SmolLM2 sampled at temperature 1 without nucleus truncation
# gives mostly distinct answers, so samples keep the top-p 0.9 nucleus.
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 0.9

# What a run is made of unless it says otherwise: RunConfig (the API), `confide run` and
# `confide route` read these, so the API and the CLI make the same run by default. Here in
# core, not beside the code that uses them, because the CLI's option defaults need them
# without importing the API (`confide --help` stays fast).
DEFAULT_MODEL = "smollm2"  # the bundled SmolLM2-135M-Instruct (confide.backends.models)
DEFAULT_TASK = "triviaqa"
# 200 TriviaQA questions give SmolLM2 enough right answers to separate scorers
# (benchmarks/prompting.py). A limit of 0 (or None) means every item, in the CLI and the API.
DEFAULT_LIMIT = 200
DEFAULT_BATCH_SIZE = 8
# Samples each answer-level sampling scorer asks for (scorers/sampling.py, semantic.py,
# relevance.py, consistency.py), so a run draws this many unless it sets n_samples.
DEFAULT_SAMPLES = 10


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``<`` where ``low_open``); ``integer`` refuses fractions."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    why: str = ""

    def describe(self) -> str:
        def shown(v: float) -> str:
            return str(int(v)) if float(v).is_integer() else str(v)

        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {shown(self.low)}")
        if self.high is not None:
            parts.append(f"<= {shown(self.high)}")
        kind = "an integer " if self.integer else ""
        return f"must be {kind}" + " and ".join(parts)


RANGES: dict[str, Range] = {
    "max_new_tokens": Range(1, 1_000_000, integer=True),
    "n_samples": Range(0, 1000, integer=True),
    # Temperature 0 would make every sample the greedy answer: fake agreement
    # for the sampling scorers (checked where samples are drawn, see check_sampling).
    "temperature": Range(0, 2),
    "top_p": Range(0, 1, low_open=True),
    "batch_size": Range(1, 4096, integer=True),
    "top_logprobs": Range(0, 20, integer=True),
    "n": Range(1, 128, integer=True),
    "seed": Range(integer=True),
    "concurrency": Range(1, 1024, integer=True),
    "workers": Range(1, 4096, integer=True),
    "threads_per_worker": Range(1, 1024, integer=True),
    # Long answers (the claim stage, confide.runs.claims): a calibrated claim confidence
    # to keep a claim.
    "claim_threshold": Range(0, 1),
    # Early abstention (confide.pipeline.streaming): stop once the running confidence, a
    # geometric-mean token probability in (0, 1], falls below this after that many tokens.
    "early_abstain_below": Range(0, 1, low_open=True),
    "early_abstain_after": Range(1, 1_000_000, integer=True),
}

#: Options that take one of a few words: how claims are found and what refining does.
CHOICES: dict[str, tuple[str, ...]] = {
    "claim_splitter": ("sentences", "model"),
    "claim_action": ("drop", "mark"),
}


def check_option(name: str, value: Any, *, field: str | None = None) -> Any:
    """Return ``value`` if it lies in ``RANGES[name]``; else raise InvalidInputError.

    The message names ``field`` (default: ``name``; ``""``: no name, where the caller
    names the field itself, as pydantic does).
    """
    rule = RANGES[name]
    shown = name if field is None else (field or None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"must be a number, got {value!r}", field=shown)
    if rule.integer and not isinstance(value, int):
        raise InvalidInputError(f"must be an integer, got {value!r}", field=shown)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"must be a finite number, got {value!r}", field=shown)
    low_bad = rule.low is not None and (value <= rule.low if rule.low_open else value < rule.low)
    high_bad = rule.high is not None and value > rule.high
    if low_bad or high_bad:
        raise InvalidInputError(f"{rule.describe()}, got {value!r}", field=shown)
    return value


def check_choice(name: str, value: Any) -> str:
    """Return ``value`` if it is one of ``CHOICES[name]``; else raise InvalidInputError.

    >>> check_choice("claim_action", "mark")
    'mark'
    """
    if value not in CHOICES[name]:
        raise InvalidInputError(f"must be one of {', '.join(CHOICES[name])}, got {value!r}",
                                field=name)
    return str(value)


def check_sampling(n_samples: int, temperature: float) -> None:
    """Samples at temperature 0 all equal the greedy answer: refuse that (fake agreement)."""
    if n_samples > 0 and temperature == 0:
        raise InvalidInputError("must be > 0 when samples are drawn (at 0 every sample is the "
                                "greedy answer, so agreement-based scorers would be fooled)",
                                field="temperature")


def check_stop(stop: str | Sequence[str] | None, *,
               most: int | None = MAX_STOP_SEQUENCES) -> tuple[str, ...]:
    """Stop sequences: none empty (an empty one would stop at once); at most ``most``."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        values: tuple[Any, ...] = (stop,)
    elif isinstance(stop, (list, tuple)):
        values = tuple(stop)
    else:
        raise InvalidInputError(f"must be text or a list of texts, got {stop!r}", field="stop")
    if most is not None and len(values) > most:
        raise InvalidInputError(f"at most {most} stop sequences, got "
                                f"{len(values)}", field="stop")
    for value in values:
        if not isinstance(value, str) or not value:
            raise InvalidInputError(f"stop sequences must be non-empty text, got {value!r}",
                                    field="stop")
    return values


def check_distribution(ray: str | None, workers: int | None,
                       threads_per_worker: int | None = None) -> None:
    """Where a run spreads (``--ray``) and over how many workers (``--workers``).

    ``ray`` is ``"local"`` (a Ray instance started on this machine), ``"auto"``
    (the cluster this machine belongs to), ``host:port`` or ``ray://host:port``.
    ``workers`` and ``threads_per_worker`` only mean something with ``ray``.

    >>> check_distribution("local", 2)
    >>> check_distribution(None, 2)
    Traceback (most recent call last):
    ...
    confide.core.errors.InvalidInputError: workers: needs --ray (local or a cluster address)
    """
    if ray is None:
        for name, value in (("workers", workers), ("threads_per_worker", threads_per_worker)):
            if value is not None:
                raise InvalidInputError("needs --ray (local or a cluster address)", field=name)
        return
    if not isinstance(ray, str) or not _RAY_ADDRESS.fullmatch(ray):
        raise InvalidInputError(f"must be local, auto, HOST:PORT or ray://HOST:PORT, got {ray!r}",
                                field="ray")
    if workers is not None:
        check_option("workers", workers)
    if threads_per_worker is not None:
        check_option("threads_per_worker", threads_per_worker)


_RAY_ADDRESS = re.compile(r"local|auto|(ray://)?[A-Za-z0-9.\-]+:\d{1,5}")


def check_hidden_layers(layers: Sequence[int], n_layers: int) -> None:
    """Layer indices a model with ``n_layers`` blocks can give (0 = embeddings, -1 = last)."""
    for layer in layers:
        if not -(n_layers + 1) <= layer <= n_layers:
            raise InvalidInputError(f"layer {layer} does not exist: the model has {n_layers} "
                                    f"layers (use 0..{n_layers}, or -1 for the last)",
                                    field="hidden_layers")


def check_prompt_fits(item_id: str, max_new_tokens: int, context_window: int, *,
                      n_tokens: int | None = None, n_chars: int | None = None) -> None:
    """A prompt plus its answer budget must fit the model's context window.

    Give ``n_tokens``, or only ``n_chars`` for a prompt so long (more than 64
    characters per token of the window) that it cannot fit whatever the tokenizer.
    """
    if n_tokens is None:
        if n_chars is not None and n_chars > 64 * context_window:
            size = f"{n_chars} characters"
        else:
            return
    elif n_tokens + max_new_tokens > context_window:
        size = f"{n_tokens} tokens"
    else:
        return
    raise InvalidInputError(
        f"item {item_id!r}: the prompt has {size} and the answer budget is {max_new_tokens} "
        f"tokens: more than the model's context window of {context_window} tokens; shorten "
        "the question or leave it out", field="question")
