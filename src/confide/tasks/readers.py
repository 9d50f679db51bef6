"""Readers of data files: JSON arrays, JSON Lines, CSV and Parquet, record by record.

Each yields ``(line, record)`` and reports a malformed record through
:class:`~confide.tasks.base.BadRecords` (raise, or skip and count), naming the file,
the line and the field; text must be UTF-8.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.unicode import lone_surrogate, lone_surrogate_message, may_escape_surrogate
from confide.tasks.base import BadRecords

__all__ = ["iter_csv", "iter_json_array", "iter_jsonl", "iter_parquet"]


def _not_utf8(path: Path, line: int, raw: bytes, exc: UnicodeDecodeError) -> InvalidInputError:
    column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
    return InvalidInputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}); "
                             "save the file as UTF-8", file=str(path), line=line,
                             field="encoding")


def _decode(path: Path, raw: bytes, first_line: int = 1) -> str:
    """UTF-8 text (a leading byte-order mark dropped) or an error naming line and column."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = first_line + raw.count(b"\n", 0, exc.start)
        raise _not_utf8(path, line, raw, exc) from None


def _is_utf8(text: str) -> bool:
    # Text read with errors="surrogateescape" holds lone surrogates where bytes were not UTF-8.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def iter_json_array(path: str | Path, bad: BadRecords) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(n, object)`` for each element of a JSON file holding one array (n 1-based)."""
    path = Path(path)
    try:
        data = json.loads(_decode(path, path.read_bytes()))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"malformed JSON ({exc.msg} at column {exc.colno})",
                                file=str(path), line=exc.lineno, field="record") from exc
    if not isinstance(data, list):
        raise InvalidInputError("expected a JSON array of records (or JSON Lines)",
                                file=str(path), field="record")
    for n, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            bad.bad(InvalidInputError(f"record {n}: expected a JSON object, got "
                                      f"{type(obj).__name__}", file=str(path), field="record"))
            continue
        if (found := lone_surrogate(obj)) is not None:
            bad.bad(InvalidInputError(f"record {n}: {lone_surrogate_message(found[1])}",
                                      file=str(path), field=found[0]))
            continue
        yield n, obj


def iter_jsonl(path: str | Path, bad: BadRecords) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, object)`` for each non-blank line of a JSON Lines file."""
    path = Path(path)
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                line = _decode(path, raw, n) if n == 1 else raw.decode("utf-8")
            except UnicodeDecodeError as exc:  # this line only: skippable
                bad.bad(_not_utf8(path, n, raw, exc))
                continue
            except InvalidInputError as exc:
                bad.bad(exc)
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                bad.bad(InvalidInputError(f"malformed JSON ({exc.msg} at column {exc.colno})",
                                          file=str(path), line=n, field="record"))
                continue
            if not isinstance(obj, dict):
                bad.bad(InvalidInputError(f"expected a JSON object, got {type(obj).__name__}",
                                          file=str(path), line=n, field="record"))
                continue
            if may_escape_surrogate(line) and (found := lone_surrogate(obj)) is not None:
                bad.bad(InvalidInputError(lone_surrogate_message(found[1]), file=str(path),
                                          line=n, field=found[0]))
                continue
            yield n, obj


def iter_csv(path: str | Path, bad: BadRecords) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, row)`` for each row of a CSV file with a header row."""
    path = Path(path)
    # utf-8-sig: a spreadsheet's "CSV UTF-8" starts with a byte-order mark, which must not
    # become part of the first column's name.
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InvalidInputError(f"malformed CSV header: {exc}", file=str(path), line=1,
                                    field="header") from exc
        if not _is_utf8("".join(header)):
            raise InvalidInputError("not UTF-8 text; save the file as UTF-8", file=str(path),
                                    line=1, field="encoding")
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                bad.bad(InvalidInputError(f"malformed CSV: {exc}", file=str(path), line=start,
                                          field="record"))
                continue
            if not row:
                continue
            if not _is_utf8("".join(row)):
                bad.bad(InvalidInputError("not UTF-8 text; save the file as UTF-8",
                                          file=str(path), line=start, field="encoding"))
                continue
            if len(row) != len(header):
                bad.bad(InvalidInputError(f"{len(row)} fields, header has {len(header)}",
                                          file=str(path), line=start, field="record"))
                continue
            yield start, dict(zip(header, row))


def iter_parquet(path: str | Path, bad: BadRecords) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(row, record)`` for each row of a Parquet file (row numbers 1-based)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise InvalidInputError(f"cannot read Parquet: {exc}", file=str(path)) from exc
    yield from enumerate(table.to_pylist(), start=1)
