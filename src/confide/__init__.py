"""confide: tells you when to trust a language model's answer.

``import confide`` stays light (no torch): the API is imported on first use.
"""

from __future__ import annotations

from typing import Any

from confide.errors import (
    BackendError,
    CannotScore,
    ConfideError,
    ConfigMismatch,
    InvalidInputError,
    ModelLoadError,
    StoreError,
    UnknownNameError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "CannotScore",
    "ConfideError",
    "ConfigMismatch",
    "InvalidInputError",
    "ModelLoadError",
    "Run",
    "ScoredAnswer",
    "StoreError",
    "UnknownNameError",
    "__version__",
    "evaluate",
    "load_model",
    "open_run",
    "score",
]

_API = {"Run", "ScoredAnswer", "evaluate", "load_model", "open_run", "score"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from confide import api

        return getattr(api, name)
    raise AttributeError(f"module 'confide' has no attribute {name!r}")
