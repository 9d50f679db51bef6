"""What scorers share within a run: the feature cache, the backend, the judge and options.

It sits below both :mod:`confide.scorers.features` (the shared intermediates, which
compute through :meth:`ScoringContext.cached`) and :mod:`confide.scorers`
(which re-exports it), so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confide.core.records import Record

__all__ = ["ScoringContext"]


@dataclass
class ScoringContext:
    """What scorers share within a run: a feature cache, the backend and options.

    ``features`` maps (item id, feature name) to a computed value
    (:meth:`cached`); ``options`` holds run settings a scorer may read (the
    item's ``seed``, the rendered ``prompt``, a fitted model for the fitted
    kinds of :mod:`confide.scorers.fitted`).
    """

    backend: Any = None
    judge: Any = None
    features: dict[tuple[str, str], Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def cached(self, record: Record, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per (record's item id, ``name``), then the stored value."""
        key = (record.item.id, name)
        if key not in self.features:
            self.features[key] = compute()
        return self.features[key]
