"""Output paths named by the user: checked the same way everywhere, before any work is done.

Every option of every command that names something confide writes goes through
one check: a file (``eval --json``, ``run --json``, ``export --out``,
``fit -o``, ``report -o``, ``compare -o``, ``calibrate --out``, ``abstain
--out``, the run's ``report.html`` and ``refined.jsonl``) through
:func:`writable_file`, a folder (``run --out``, ``route --out``) through
:func:`writable_dir`. Both refuse, with an :class:`~confide.core.errors.InvalidInputError`
naming the path and the option:

* a directory given as a file (or a file given as a folder);
* a folder that cannot be made: a parent that is a file, a read-only folder, a
  missing mount;
* a place no file can be created in, though its folder exists (``/proc``,
  ``/sys``, a read-only file system): the check creates the file and removes it
  again, so what the operating system refuses is refused here, before the
  command spends any time;
* an existing file that cannot be opened for writing, or that is a socket.

A file's missing parent folders are created (and removed again when the check
fails); a folder is not created by the check (a command that fails on its
input leaves nothing behind).

Every file is written whole or not at all: :func:`atomic_output` (a file handle for
writers that stream) and :func:`write_text` (one string) write to a temporary file
in the target's folder and rename it over the target only once everything is
written and flushed to disk, so a crash, a full disk or an exception half way
(text that cannot be encoded as UTF-8) never leaves an empty or partial file and
never destroys an older good one. They go through the same check and turn a
failure during the write itself into the same error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal, overload

from confide.core.errors import InvalidInputError

__all__ = ["atomic_output", "writable_dir", "writable_file", "write_text"]


def _refuse(target: Path, option: str, why: str) -> InvalidInputError:
    return InvalidInputError(why, file=str(target), field=option)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _which(exc: OSError, target: Path) -> str:
    """``/proc/x``: the folder exists but refuses new files with "No such file": say so."""
    if exc.errno == errno.ENOENT and target.absolute().parent.is_dir():
        return f" ({target.absolute().parent} takes no new files)"
    return ""


def _existing_ancestor(path: Path) -> Path:
    """The nearest folder of ``path`` (itself included) that exists."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _make_parents(target: Path, option: str) -> list[Path]:
    """Create ``target``'s missing parent folders; return those created (deepest last)."""
    missing = []
    parent = target.absolute().parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise _refuse(target, option, f"cannot create its folder: {parent} is a file")
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
    except OSError as exc:
        _remove(made)
        raise _refuse(target, option, f"cannot create its folder: {_reason(exc)}") from exc
    return made


def _remove(folders: list[Path]) -> None:
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            pass


def writable_file(path: str | Path, option: str) -> Path:
    """``path`` as a file that can be written: missing parents created, the rest refused.

    Parameters
    ----------
    path : the file the user named.
    option : the option that named it (``"--out"``), quoted in the error.

    Returns
    -------
    Path : ``path``; an existing file is left unchanged (opened for appending, not
        truncated), a new one is created and removed again.

    Raises
    ------
    InvalidInputError : ``path:`` ``option:`` and why no file can be written there.
    """
    target = Path(path)
    if target.is_dir():
        raise _refuse(target, option, "is a directory; give a file name")
    if target.exists():
        mode = target.stat().st_mode
        if stat.S_ISSOCK(mode):
            raise _refuse(target, option, "is a socket, not a file")
        if not stat.S_ISREG(mode):  # a device or a pipe (/dev/null, /dev/stdout): never opened
            if not os.access(target, os.W_OK):
                raise _refuse(target, option, "cannot be written: permission denied")
            return target
        try:
            with open(target, "ab"):
                pass
        except OSError as exc:
            raise _refuse(target, option, f"cannot be written: {_reason(exc)}") from exc
        return target
    made = _make_parents(target, option)
    try:
        with open(target, "xb"):
            pass
        target.unlink()
    except OSError as exc:
        _remove(made)
        raise _refuse(target, option, f"cannot write a file there{_which(exc, target)}: "
                                      f"{_reason(exc)}") from exc
    return target


def writable_dir(path: str | Path, option: str) -> Path:
    """``path`` as a folder confide can write into (it may not exist yet; it is not created).

    The nearest existing folder on the way must be a folder in which a file can be
    created (checked by creating one and removing it).

    Raises
    ------
    InvalidInputError : ``path:`` ``option:`` and why nothing can be written there.
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise _refuse(target, option, "is a file; give a folder")
    base = _existing_ancestor(target)
    if not base.is_dir():
        raise _refuse(target, option, f"cannot create the folder: {base} is a file")
    try:
        fd, probe = tempfile.mkstemp(prefix=".confide-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = "" if base == target.absolute() else f" (in {base})"
        if not where:
            where = _which(exc, target / "x")
        raise _refuse(target, option,
                      f"cannot write a file there{where}: {_reason(exc)}") from exc
    return target


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` would, for all threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _unencodable(exc: UnicodeEncodeError) -> str:
    bad = exc.object[exc.start:exc.end]
    return (f"holds text that is not valid Unicode ({bad!r} at character {exc.start}: "
            f"{exc.reason}); nothing was written")


@overload
def atomic_output(path: str | Path, option: str, *, binary: Literal[False] = ...
                  ) -> contextlib.AbstractContextManager[IO[str]]: ...
@overload
def atomic_output(path: str | Path, option: str, *, binary: Literal[True]
                  ) -> contextlib.AbstractContextManager[IO[bytes]]: ...
def atomic_output(path: str | Path, option: str, *, binary: bool = False
                  ) -> contextlib.AbstractContextManager[IO[Any]]:
    """A file handle whose content replaces ``path`` only if the ``with`` block completes.

    ``path`` is checked by :func:`writable_file`; the handle writes a temporary file in
    the same folder (UTF-8 text, or bytes with ``binary``), which is flushed, synced
    and renamed over ``path`` (``os.replace``: atomic) when the block ends without an
    exception. On an exception the temporary file is removed and ``path`` is left as it
    was: absent, or the older file. A symbolic link is written through (the link
    stays); a device or a pipe (``/dev/stdout``) is written directly, as it cannot be
    replaced. The file gets the mode of the file it replaces, or the umask's default.

    Raises
    ------
    InvalidInputError : ``path:`` ``option:`` when the file cannot be written (a full
        disk, a folder made read-only meanwhile) or, in text mode, when the text holds
        characters UTF-8 cannot encode (a lone surrogate).

    Examples
    --------
    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_output(target, "--out") as fh:
    ...     _ = fh.write("kept")
    >>> try:
    ...     with atomic_output(target, "--out") as fh:
    ...         _ = fh.write("half")
    ...         raise RuntimeError("stopped")
    ... except RuntimeError:
    ...     pass
    >>> target.read_text()
    'kept'
    """
    return _atomic_output(Path(path), option, binary)


@contextlib.contextmanager
def _atomic_output(path: Path, option: str, binary: bool) -> Iterator[IO[Any]]:
    target = writable_file(path, option)
    mode = "wb" if binary else "w"
    encoding = None if binary else "utf-8"
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):  # /dev/stdout, a pipe
        try:
            with open(target, mode, encoding=encoding) as fh:
                yield fh
        except OSError as exc:
            raise _refuse(target, option, f"cannot be written: {_reason(exc)}") from exc
        except UnicodeEncodeError as exc:
            raise _refuse(target, option, _unencodable(exc)) from exc
        return
    real = Path(os.path.realpath(target))  # through a symbolic link; the link stays
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise _refuse(target, option, f"cannot be written: {_reason(exc)}") from exc
    try:
        try:
            with os.fdopen(fd, mode, encoding=encoding) as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            keep = real.stat().st_mode if real.exists() else 0o666 & ~_umask()
            os.chmod(tmp, stat.S_IMODE(keep))
            os.replace(tmp, real)
        except OSError as exc:
            raise _refuse(target, option, f"cannot be written: {_reason(exc)}") from exc
        except UnicodeEncodeError as exc:
            raise _refuse(target, option, _unencodable(exc)) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str, option: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (:func:`atomic_output`,
    after :func:`writable_file`); a failing write (a full disk, text UTF-8 cannot encode)
    is the same :class:`~confide.core.errors.InvalidInputError` and leaves ``path`` as
    it was."""
    with atomic_output(path, option) as fh:
        fh.write(text)
    return Path(path)
