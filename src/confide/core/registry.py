"""One generic registry per kind of plug-in: scorers, graders, metrics, backends, tasks.

Entries are frozen dataclasses registered by decorators, so the CLI, the report
and the docs list them from the same source. A duplicate name raises
``ValueError``; an unknown one raises :class:`UnknownNameError` with close
matches and the full list.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Generic, TypeVar

from confide.core.errors import UnknownNameError

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Generic[T]):
    """A name → entry mapping filled by decorators."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}  # a former name -> the name it has now

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def alias(self, old: str, name: str) -> None:
        """Let the former name ``old`` find ``name``'s entry; listings show only ``name``."""
        if old in self._entries or old in self._aliases:
            raise ValueError(f"{self.kind} {old!r} is already registered")
        self._aliases[old] = name

    def canonical(self, name: str) -> str:
        """The registered name ``name`` stands for (itself unless it is a former name)."""
        return self._aliases.get(name, name)

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[self.canonical(name)]
        except KeyError:
            raise UnknownNameError(self._unknown_message(name)) from None

    def _unknown_message(self, name: str) -> str:
        known = sorted(self._entries)
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        return f"unknown {self.kind} {name!r}.{hint} Known {self.kind}s: {', '.join(known)}"

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> list[T]:
        return [self._entries[k] for k in sorted(self._entries)]
