"""Output files named by the user: checked and their folders created, the same way everywhere.

Every command that writes a file the user names (``eval --json``, ``export
--out``, ``fit -o``, ``report -o``, ``compare -o``, ``calibrate --out``,
``abstain --out``) goes through :func:`writable_file`: missing parent folders
are created, and a path that is a directory, or whose folder cannot be made,
is an :class:`~confide.errors.InvalidInputError` naming the option, not a
traceback.
"""

from __future__ import annotations

from pathlib import Path

from confide.errors import InvalidInputError

__all__ = ["writable_file"]


def writable_file(path: str | Path, option: str) -> Path:
    """``path`` as a file that can be written: parents created; a directory is refused."""
    target = Path(path)
    if target.is_dir():
        raise InvalidInputError("is a directory; give a file name", file=str(target),
                                field=option)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"cannot create its folder: {exc.strerror or exc}",
                                file=str(target), field=option) from exc
    return target
