"""confide: tells you when to trust a language model's answer.

``import confide`` stays light (no torch, no scikit-learn): each public name is
imported on first use, the errors from :mod:`confide.core.errors` (catching one
loads nothing else), the rest from :mod:`confide.api`. ``confide.api.__all__`` is
the one list of public names: type checkers and IDEs read it through the star
import below, and ``confide.__all__``, ``dir(confide)`` and the lookup read it
from api.py's source, so none of them imports the API.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confide.api import *  # noqa: F403  (every name of confide.api.__all__)

__version__ = "0.1.0"


@functools.cache
def _api_names() -> tuple[str, ...]:
    """``confide.api.__all__``, read from api.py's source without importing it (nor torch);
    the imported list where the source is not shipped."""
    import ast
    from pathlib import Path

    try:
        tree = ast.parse(Path(__file__).with_name("api.py").read_text(encoding="utf-8"))
        return next(tuple(ast.literal_eval(node.value)) for node in tree.body
                    if isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets] == ["__all__"])
    except (OSError, StopIteration, ValueError):
        from confide import api

        return tuple(api.__all__)


def __getattr__(name: str) -> Any:
    if name == "__all__":  # computed on first use, so `import confide` reads no file
        return sorted({*_api_names(), "__version__"})
    if name in _api_names():
        from confide.core import errors

        if name in errors.__all__:  # `except confide.ConfideError` loads no model code
            return getattr(errors, name)
        from confide import api

        return getattr(api, name)
    raise AttributeError(f"module 'confide' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_api_names()))
