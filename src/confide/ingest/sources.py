"""Where a log's bytes come from: a file, plain or compressed.

A file compressed with gzip, bzip2 or xz (Python's own modules) is decompressed as it
is read (:func:`open_log`); the compression is told by the file's first bytes, not by
its name.

Refused by name, with what to do instead: a Parquet file (a ``confide export``; its
``openai`` or ``jsonl`` export is what ``score`` reads), a zip archive, zstd (the
``zstandard`` module is not a dependency), a directory, a pipe or device, and standard
input (``-``: an import resumes by its file's hash, which a stream does not have).
"""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from confide.core.errors import InvalidInputError

__all__ = ["LogSource", "is_compressed", "log_source", "log_stem", "open_log"]

# first bytes → (what the file is, how to read it); see the module's notes.
_COMPRESSED: dict[bytes, tuple[str, Callable[[IO[bytes]], Any]]] = {
    b"\x1f\x8b": ("gzip", lambda fh: gzip.GzipFile(fileobj=fh)),
    b"BZh": ("bzip2", lambda fh: bz2.BZ2File(fh)),
    b"\xfd7zXZ\x00": ("xz", lambda fh: lzma.LZMAFile(fh)),
}
_REFUSED = {
    b"PAR1": "a Parquet file; confide score reads JSON logs: for a confide run, export it "
             "with 'confide export RUN --format openai' (keeps the token statistics) or "
             "'--format jsonl', and score that",
    b"PK\x03\x04": "a zip archive; unzip it first, or pipe one file of it: "
                   "unzip -p ARCHIVE FILE | confide score - ...",
    b"\x28\xb5\x2f\xfd": "zstd-compressed (the zstandard module is not installed); "
                         "decompress it, or pipe it: zstd -dc FILE | confide score - ...",
}
_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
# Decompression errors, raised at any read of a damaged or cut compressed file.
_DAMAGED = (OSError, EOFError, zlib.error, lzma.LZMAError)


@dataclass(frozen=True)
class LogSource:
    """A log to read: ``name`` as messages give it (the path given) and ``path``, the
    regular file that holds its bytes."""

    name: str
    path: Path

    @property
    def stem(self) -> str:
        return log_stem(self.name)


@functools.lru_cache(maxsize=64)  # asked once a record, of the same few files
def log_stem(name: str | Path) -> str:
    """A log's file name without folder, compression and format suffixes (``samples_x``
    of ``logs/samples_x.jsonl.gz``): default ids and lm-eval task names read it."""
    base = Path(name).name
    for suffix in _SUFFIXES:
        base = base.removesuffix(suffix)
    return Path(base).stem


def log_source(path: str | Path) -> LogSource:
    """The :class:`LogSource` of a path given by the user.

    Raises :class:`~confide.core.errors.InvalidInputError` for a missing path, a
    directory, or a pipe or device.
    """
    if str(path) in ("-", "/dev/stdin"):
        raise InvalidInputError("standard input is not read: save the log to a file and "
                                "give its path (an import resumes by the file's hash)",
                                file=str(path))
    p = Path(path)
    if p.is_file():
        return LogSource(str(p), p)
    if p.is_dir():
        raise InvalidInputError("is a directory, not a log file", file=str(p))
    if p.exists():
        raise InvalidInputError("not a regular file (a pipe or a device): save the log to a "
                                "file first", file=str(p))
    raise InvalidInputError("no such file", file=str(p))


def is_compressed(path: Path) -> bool:
    """Whether ``path`` starts like a gzip, bzip2 or xz file (:func:`open_log` reads it)."""
    with path.open("rb") as fh:
        head = fh.read(6)
    return any(head.startswith(magic) for magic in _COMPRESSED)


def open_log(path: Path, name: str) -> IO[bytes]:
    """The bytes of a log file, decompressed as they are read (see the module's notes).

    ``name`` is how messages name the file. Raises
    :class:`~confide.core.errors.InvalidInputError` for a file that cannot be opened or is
    of a kind confide does not read; a damaged compressed file raises it when the damage
    is read.
    """
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=name) from exc
    head = fh.read(6)
    fh.seek(0)
    for magic, why in _REFUSED.items():
        if head.startswith(magic):
            fh.close()
            raise InvalidInputError(why, file=name)
    for magic, (kind, opener) in _COMPRESSED.items():
        if head.startswith(magic):
            return io.BufferedReader(_Checked(opener(fh), fh, kind, name))
    return fh


class _Checked(io.RawIOBase):
    """A decompressing stream whose read errors name the file and the compression."""

    def __init__(self, inner: IO[bytes], raw: IO[bytes], kind: str, name: str) -> None:
        self.inner, self.raw, self.kind, self.name = inner, raw, kind, name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._checked(lambda: self.inner.seek(offset, whence))

    def tell(self) -> int:
        return self.inner.tell()

    def readinto(self, buffer: Any) -> int:
        return self._checked(lambda: self.inner.readinto(buffer))  # type: ignore[attr-defined]

    def close(self) -> None:
        self.inner.close()  # a decompressor given a file object leaves it open
        self.raw.close()
        super().close()

    def _checked(self, read: Callable[[], int]) -> int:
        try:
            return read()
        except _DAMAGED as exc:
            raise InvalidInputError(f"the {self.kind} data is damaged or cut short ({exc})",
                                    file=self.name, field="encoding") from exc
