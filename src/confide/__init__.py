"""confide: tells you when to trust a language model's answer.

``import confide`` stays light (no torch, no scikit-learn): the errors are
imported now, the API of :mod:`confide.api` on first use. IDEs and type
checkers see every public name through the ``TYPE_CHECKING`` imports below,
and ``dir(confide)`` lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confide.core.errors import (
    BackendError,
    CannotScore,
    ConfideError,
    ConfigMismatch,
    InvalidInputError,
    ModelLoadError,
    StoreError,
    UnknownNameError,
)

if TYPE_CHECKING:
    from confide.api import (
        EarlyAbstention,
        Run,
        RunConfig,
        RunPlan,
        ScoredAnswer,
        SelfReflectResult,
        StreamEnd,
        TokenUpdate,
        UncertaintySummary,
        apply_learned,
        default_run_dir,
        evaluate,
        execute,
        fit_learned,
        load_model,
        make_report,
        open_run,
        prepare,
        refine,
        score,
        selfreflect_distance,
        stream,
        summarize,
    )

__version__ = "0.1.0"

# confide.api.__all__, loaded on first use (tests/test_api.py keeps the two equal)
_API = ("EarlyAbstention", "Run", "RunConfig", "RunPlan", "ScoredAnswer", "SelfReflectResult",
        "StreamEnd", "TokenUpdate", "UncertaintySummary", "apply_learned", "default_run_dir",
        "evaluate", "execute", "fit_learned", "load_model", "make_report", "open_run", "prepare",
        "refine", "score", "selfreflect_distance", "stream", "summarize")

__all__ = [
    "BackendError",
    "CannotScore",
    "ConfideError",
    "ConfigMismatch",
    "EarlyAbstention",
    "InvalidInputError",
    "ModelLoadError",
    "Run",
    "RunConfig",
    "RunPlan",
    "ScoredAnswer",
    "SelfReflectResult",
    "StoreError",
    "StreamEnd",
    "TokenUpdate",
    "UncertaintySummary",
    "UnknownNameError",
    "__version__",
    "apply_learned",
    "default_run_dir",
    "evaluate",
    "execute",
    "fit_learned",
    "load_model",
    "make_report",
    "open_run",
    "prepare",
    "refine",
    "score",
    "selfreflect_distance",
    "stream",
    "summarize",
]


def __getattr__(name: str) -> Any:
    if name in _API:
        from confide import api

        return getattr(api, name)
    raise AttributeError(f"module 'confide' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
