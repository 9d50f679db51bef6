"""Errors raised by confide.

One base to catch; every error a user can cause says where (file, line, field)
and what to do about it::

    ConfideError
    ├── InvalidInputError(ValueError)    bad data file, field, option or question
    ├── UnknownNameError(KeyError)       unknown scorer/grader/metric/backend/task
    ├── ModelLoadError                   model path or id that cannot be loaded
    ├── BackendError                     a model backend failed
    │   ├── RateLimited                  429 after all retries
    │   └── BackendTimeout               no answer within the timeout
    └── StoreError                       the run store cannot be used
        ├── ConfigMismatch               resuming a run with another configuration
        └── StoreDamaged                 run.sqlite is damaged (export recovers what is readable)

``CannotScore`` is not an error the user sees: a scorer raises it to say why it
produced no value, and the runner stores NaN with that reason.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendTimeout",
    "CannotScore",
    "ConfideError",
    "ConfigMismatch",
    "InvalidInputError",
    "ModelLoadError",
    "RateLimited",
    "StoreDamaged",
    "StoreError",
    "UnknownNameError",
]


class ConfideError(Exception):
    """Base class of every error confide raises on purpose."""


class InvalidInputError(ConfideError, ValueError):
    """Input that cannot be used; the message starts with ``file:line: field:``."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = ""
        if file is not None:
            where = f"{file}:{line}: " if line is not None else f"{file}: "
        if field is not None:
            where += f"{field}: "
        super().__init__(where + message)
        self.file, self.line, self.field = file, line, field


class UnknownNameError(ConfideError, KeyError):
    """A name that is not registered; the message suggests close names and lists all."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ModelLoadError(ConfideError):
    """A model that cannot be found or loaded."""


class BackendError(ConfideError):
    """A model backend failed to produce a generation."""


class RateLimited(BackendError):
    """The backend kept answering 429 after all retries."""


class BackendTimeout(BackendError):
    """The backend did not answer within the timeout."""


class StoreError(ConfideError):
    """The run directory or its database cannot be used."""


class ConfigMismatch(StoreError):
    """An existing run directory holds a run with a different configuration."""


class StoreDamaged(StoreError):
    """The run database is damaged: nothing more is written; its readable records can be
    exported (``confide export``)."""


class CannotScore(Exception):
    """Raised by a scorer that cannot produce a value for a record; carries the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
