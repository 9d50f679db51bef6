"""The run store: one directory per run, holding ``run.sqlite`` (WAL) and exports.

Each item's record is written in one transaction when it is complete, keyed by
item id, so a run killed at any moment (SIGKILL included) resumes with the same
command, redoes only unfinished items and never stores one twice. The run's
configuration is stored with it; opening the directory with a different one
raises :class:`~confide.core.errors.ConfigMismatch` naming what differs.

A database damaged on disk raises :class:`~confide.core.errors.StoreDamaged`, which
says how many records are still readable; :meth:`RunStore.readable_records` reads
those (record by record, past the damage) for :func:`confide.store.exports.export_run`,
and a resumed run refuses to write into a damaged store.
"""

from __future__ import annotations

import io
import itertools
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from confide.core.errors import ConfigMismatch, StoreDamaged, StoreError
from confide.core.jsonsafe import json_safe
from confide.core.records import Record

__all__ = ["FORMAT_VERSION", "HIDDEN_STATES_FIXED", "RunStore", "StoreBusy", "record_row"]

#: The version of what a run stores, written when a run is created (runs made before
#: versions were written read as 1). 2: a pooled hidden state is the answer token's own
#: (before, each came from the token before it: ``:last`` of a one-token answer was the
#: prompt's last state). Not raised for a reasoning reply's trace (``Generation.trace``)
#: nor a record's ``grade_errors``: both are added keys, written only where present, so
#: every record without them is stored byte for byte as before and every stored run
#: reads as it did; a reader older than them ignores the keys (it reads the final answer
#: as the answer, and a missing final answer as an ungraded empty one). No value
#: changes meaning, so no reader has anything to convert.
FORMAT_VERSION = 2
HIDDEN_STATES_FIXED = 2
# The grade under which a file's own correctness labels are stored (imports, `export`).
LABEL_GRADE = "label"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    position INTEGER NOT NULL,
    item_id TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    hidden BLOB,
    stored_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_position ON records(position);
CREATE TABLE IF NOT EXISTS failures (
    item_id TEXT PRIMARY KEY, error TEXT NOT NULL, attempts INTEGER NOT NULL, failed_at REAL
);
"""


class StoreBusy(StoreError):
    """Another connection held the run database's lock for longer than the store's
    ``timeout``; nothing was written, and the same write may be tried again."""


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def config_differences(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """Human-readable list of settings that differ between two configurations."""
    a, b = _flatten(stored), _flatten(wanted)
    return [f"{k}: stored {a.get(k)!r}, now {b.get(k)!r}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _pack_hidden(record: Record) -> bytes | None:
    arrays: dict[str, np.ndarray] = {}
    for i, gen in enumerate([record.greedy, *record.samples]):
        for key, vec in (gen.hidden or {}).items():
            arrays[f"{i}|{key}"] = vec
    if not arrays:
        return None
    buf = io.BytesIO()
    # numpy's stub: mypy reads **arrays as able to fill savez's `allow_pickle: bool` too
    np.savez(buf, **arrays)  # type: ignore[arg-type]  # plain arrays, no pickle
    return buf.getvalue()


def _unpack_hidden(record: Record, blob: bytes | None) -> None:
    if not blob:
        return
    gens = [record.greedy, *record.samples]
    with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
        for name in npz.files:
            index, key = name.split("|", 1)
            gen = gens[int(index)]
            gen.hidden = gen.hidden or {}
            gen.hidden[key] = npz[name]


class RunStore:
    """A run directory. Use :meth:`open`; close with :meth:`close` or ``with``."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self.unreadable = 0  # records the last export_run could not read (a damaged store)

    @classmethod
    def open(cls, path: str | Path, config: dict[str, Any] | None = None, *,
             create: bool = True, timeout: float = 30.0) -> RunStore:
        """Open (or create) the run at ``path``.

        With ``config``, a new run stores it and an existing run must match it;
        without, the run must exist (read-only use: eval, report, export).
        ``timeout``: seconds a write waits for another connection's lock (then
        :class:`StoreBusy`, a :class:`~confide.core.errors.StoreError`).
        """
        path = Path(path)
        db = path / "run.sqlite"
        if not db.exists() and (config is None or not create):
            raise StoreError(f"{path}: no run here (missing run.sqlite)")
        existed = db.exists()
        if existed and config is None and db.stat().st_size == 0:  # never write the schema
            raise StoreError(f"{path}: no run here (run.sqlite is empty)")
        try:
            path.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(db, timeout=timeout, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{db}: cannot open run database: {exc}") from exc
        store = cls(path, conn)
        try:
            with store._guard():
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
                if config is not None and existed:
                    store._check_integrity()  # never write into a damaged store
            if config is not None:
                wanted = json.loads(json.dumps(config))
                stored = store.config
                if stored is None:
                    store.set_meta("config", config)
                    store.set_meta("created_at", time.time())
                    store.set_meta("format_version", FORMAT_VERSION)
                elif stored != wanted:
                    raise ConfigMismatch(
                        f"{path} holds a run with a different configuration:\n  "
                        + "\n  ".join(config_differences(stored, wanted))
                        + "\nUse another output directory, or the same settings to resume.")
        except BaseException:
            conn.close()
            raise
        return store

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- damage ------------------------------------------------------------------

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Turn SQLite's low-level errors into errors that say what happened and what to do."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if "locked" in text or "busy" in text:
                raise StoreBusy(f"{self.path}: the run database is busy ({exc}); another "
                                "confide process is writing it, try again when it ends"
                                ) from exc
            raise self._damaged(str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            raise self._damaged(str(exc)) from exc

    def _damaged(self, detail: str) -> StoreDamaged:
        try:
            readable, unreadable = self.count_readable()
            saved = (f"{readable} record(s) are still readable"
                     + (f" and {unreadable} are not" if unreadable else ""))
        except sqlite3.Error:
            saved = "no record can be read"
        return StoreDamaged(
            f"{self.path / 'run.sqlite'} is damaged ({detail}); {saved}. Recover them with "
            f"`confide export {self.path} --out FILE`, then run again into a new directory.")

    def _check_integrity(self) -> None:
        problems = [r[0] for r in self._conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise self._damaged("; ".join(problems))

    def _readable_rows(self) -> Iterator[tuple[int, str, bytes | None]]:
        """``(position, data, NULL)`` of each record that can still be read, in rowid order.

        One query per record, each asking for the first row past the last one found
        (``rowid > ?``), so the walk never trusts a stored count or ``max(rowid)``: on a
        damaged leaf page ``max(rowid)`` can be any 64-bit number (a walk from 1 to it
        never ended: issue 23, ``tests/hostile``). A query that fails has reached a
        damaged page; the walk then probes past it at steps of 1, 2, 4, ... and bisects
        back to the first rowid past the damage. Every query moves forward, so a walk
        takes at most one query per stored row plus 128 per damaged stretch: it is bounded
        by the size of the file, whatever the damage.
        """
        last = 0
        while True:
            try:
                row = self._next_row(last)
            except sqlite3.DatabaseError:
                past = self._past_damage(last)
                if past is None:
                    return
                last = past
                try:  # the first row past the damage may be ``past`` itself
                    row = self._conn.execute("SELECT position, data FROM records "
                                             "WHERE rowid = ?", (past,)).fetchone()
                except sqlite3.DatabaseError:
                    row = None
                if row is not None:
                    yield row[0], row[1], None
                continue
            if row is None:
                return
            rowid, position, data = row
            if not isinstance(rowid, int) or rowid <= last:  # a damaged page's garbage
                last += 1
                continue
            last = rowid
            yield position, data, None

    def _next_row(self, after: int) -> tuple[Any, Any, Any] | None:
        return self._conn.execute("SELECT rowid, position, data FROM records WHERE rowid > ? "
                                  "ORDER BY rowid LIMIT 1", (after,)).fetchone()

    def _past_damage(self, last: int) -> int | None:
        """The smallest ``s > last`` from which the next row can be read (None: none can)."""
        top = 2 ** 63 - 1
        step, good = 1, None
        while last + step < top:
            try:
                self._next_row(last + step)
                good = last + step
                break
            except sqlite3.DatabaseError:
                step *= 2
        if good is None:
            return None
        bad = last + step // 2  # fails (or is ``last`` itself)
        while good - bad > 1:
            middle = (bad + good) // 2
            try:
                self._next_row(middle)
                good = middle
            except sqlite3.DatabaseError:
                bad = middle
        return good

    def count_readable(self) -> tuple[int, int]:
        """``(readable, unreadable)`` records; unreadable counts those found but not parsed."""
        readable = unreadable = 0
        for _, data, _ in self._readable_rows():
            try:
                Record.from_dict(json.loads(data))
                readable += 1
            except (ValueError, KeyError, TypeError):
                unreadable += 1
        return readable, unreadable

    def readable_records(self) -> tuple[list[Record], int]:
        """Every record that can be read (all of them in an intact store) and the count of
        those that could not; for :func:`~confide.store.exports.export_run` of a damaged
        store."""
        try:
            return self.records(), 0
        except StoreDamaged:
            pass
        found: list[tuple[int, Record]] = []
        bad = 0
        for position, data, _ in self._readable_rows():
            try:
                found.append((position, Record.from_dict(json.loads(data))))
            except (ValueError, KeyError, TypeError):
                bad += 1
        found.sort(key=lambda pr: pr[0])
        return [r for _, r in found], bad

    # -- metadata ----------------------------------------------------------------

    def set_meta(self, key: str, value: Any) -> None:
        with self._guard():
            self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                               (key, json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        with self._guard():
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            return default
        try:
            return json.loads(row[0])
        except ValueError as exc:
            raise self._damaged(f"metadata {key!r} is not JSON") from exc

    def check_backend(self, wanted: dict[str, Any]) -> None:
        """The model setup (``Backend.config()``) must be the one that began the run: the
        first one is stored, another raises :class:`~confide.core.errors.ConfigMismatch`."""
        stored = self.get_meta("backend")
        if stored is None:
            self.set_meta("backend", wanted)
        elif stored != wanted:
            raise ConfigMismatch(f"{self.path} was generated by another model setup:\n  "
                                 + "\n  ".join(config_differences(stored, wanted)))

    @property
    def format_version(self) -> int:
        """What this run's records follow (:data:`FORMAT_VERSION`; 1: written before)."""
        return int(self.get_meta("format_version", 1))

    def hidden_states_note(self) -> str | None:
        """Why this run's stored hidden states cannot be trusted, or None."""
        if self.format_version >= HIDDEN_STATES_FIXED:
            return None
        if not (self.config or {}).get("hidden_layers"):
            return None
        return (f"{self.path}: its hidden states predate the fix of format version "
                f"{HIDDEN_STATES_FIXED} (each pooled state is that of the token before: a "
                "one-token answer got the prompt's last state); generate the run again "
                "before fitting probes or density models on it")

    @property
    def config(self) -> dict[str, Any] | None:
        return self.get_meta("config")

    # -- records -----------------------------------------------------------------

    def done_ids(self) -> set[str]:
        with self._guard():
            return {r[0] for r in self._conn.execute("SELECT item_id FROM records")}

    def __len__(self) -> int:
        with self._guard():
            return int(self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])

    def put(self, record: Record, position: int | None) -> bool:
        """Store one complete record in one transaction; False if it was already stored.

        ``position``: the record's place in the run; None appends it after the last
        one stored, the position read inside the write transaction, so writers in
        several processes (two servers logging into one run) never share one.
        """
        data = self.encode(record)
        with self._guard(), self._conn:
            self._conn.execute("BEGIN IMMEDIATE")  # the write lock: no one appends meanwhile
            if position is None:
                position = int(self._conn.execute(
                    "SELECT COALESCE(MAX(position) + 1, 0) FROM records").fetchone()[0])
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO records(position, item_id, data, hidden, stored_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (position, record.item.id, data, _pack_hidden(record), time.time()))
            self._conn.execute("DELETE FROM failures WHERE item_id = ?", (record.item.id,))
        return cur.rowcount == 1

    def replace(self, record: Record) -> None:
        """Rewrite a stored record (new scores or grades); its hidden states are kept."""
        data = self.encode(record)
        with self._guard(), self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("UPDATE records SET data = ? WHERE item_id = ?",
                               (data, record.item.id))

    def record_failure(self, item_id: str, error: str) -> None:
        """Remember an item that failed (it is retried on resume, never dropped)."""
        with self._guard(), self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(
                "INSERT INTO failures(item_id, error, attempts, failed_at) VALUES (?, ?, 1, ?) "
                "ON CONFLICT(item_id) DO UPDATE SET error = excluded.error, "
                "attempts = attempts + 1, failed_at = excluded.failed_at",
                (item_id, error, time.time()))

    def failures(self) -> dict[str, str]:
        with self._guard():
            return dict(self._conn.execute("SELECT item_id, error FROM failures"))

    def no_records(self) -> StoreError:
        """The error for a run with nothing to evaluate: ``eval``, ``report`` and the API
        refuse it alike (an n = 0 table would look like a result)."""
        failures = self.failures()
        if failures:
            first = next(iter(failures.values()))
            why = (f"; {len(failures)} item(s) failed (first error: {first}); run the same "
                   "command again to retry them")
        elif self.config is None:
            why = " and no settings: no run was stored here"
        else:
            why = "; finish it with the `confide run` command that started it"
        return StoreError(f"{self.path}: the run holds no records yet{why}")

    def iter_records(self, *, hidden: bool = False) -> Iterator[Record]:
        column = "hidden" if hidden else "NULL"
        with self._guard():
            for item_id, data, blob in self._conn.execute(
                    f"SELECT item_id, data, {column} FROM records ORDER BY position"):
                try:
                    record = Record.from_dict(json.loads(data))
                    _unpack_hidden(record, blob)
                except (ValueError, KeyError, TypeError, OSError) as exc:
                    raise self._damaged(f"record {item_id!r} cannot be read: "
                                        f"{type(exc).__name__}: {exc}") from exc
                yield record

    def records(self, *, hidden: bool = False) -> list[Record]:
        return list(self.iter_records(hidden=hidden))

    # -- batches and added grades (imported runs, confide label) -----------------------

    @staticmethod
    def encode(record: Record) -> str:
        """A record's stored text (as :meth:`put` stores it), for :meth:`put_many`.

        Written by ``msgspec`` (a tenth of :func:`json.dumps`' time on an imported record,
        ``benchmarks/results/import_speed.md``) when every part of it is plain JSON
        (:func:`_plain`), else by :func:`json.dumps`, which refuses NaN and infinities
        (``ValueError``) and what JSON cannot hold (``TypeError``) as it always did; the
        text read back is the same either way (``tests/test_import_speed_paths.py``).
        """
        d = record.to_dict()
        try:
            if _plain(d):
                return _FAST_ENCODER.encode(d).decode("utf-8")
        except (msgspec.MsgspecError, TypeError, ValueError, OverflowError, RecursionError):
            pass  # a lone surrogate, an int past 64 bits (msgspec), deep nesting: json's way
        return json.dumps(d, allow_nan=False)

    def put_many(self, rows: list[tuple[int, str, str]], meta: dict[str, Any] | None = None
                 ) -> int:
        """Store complete records, ``(position, item id, encode(record))`` rows, and
        ``meta`` in one transaction.

        The records carry no hidden states (imported runs have none). Ids already stored
        are left as they are (never duplicated); returns how many records were new. An
        interrupted batch stores none of its records, so every batch that returned is
        kept whole.
        """
        now = time.time()
        params = [(position, item_id, data, None, now) for position, item_id, data in rows]
        with self._guard(), self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            before = self._conn.total_changes
            self._conn.executemany(
                "INSERT OR IGNORE INTO records(position, item_id, data, hidden, stored_at) "
                "VALUES (?, ?, ?, ?, ?)", params)
            new = self._conn.total_changes - before
            for key, value in (meta or {}).items():
                self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                   (key, json.dumps(value)))
        return new

    def drop_scores(self, names: list[str]) -> int:
        """Remove scorers ``names`` (value and reason) from every record, in one transaction;
        returns how many records changed. Everything else stored is left as it was."""
        wanted = set(names)
        changed = 0
        with self._guard(), self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            rows = self._conn.execute("SELECT item_id, data FROM records").fetchall()
            for item_id, data in rows:
                d = json.loads(data)
                hit = wanted & (set(d.get("scores", {})) | set(d.get("score_errors", {})))
                if not hit:
                    continue
                for name in hit:
                    d.get("scores", {}).pop(name, None)
                    d.get("score_errors", {}).pop(name, None)
                self._conn.execute("UPDATE records SET data = ? WHERE item_id = ?",
                                   (json.dumps(d, allow_nan=False), item_id))
                changed += 1
        return changed

    def add_grades(self, name: str, values: dict[str, float]) -> int:
        """Add grade ``name`` to the records ``values`` names (item id → correctness), in
        one transaction: every record or none. Only the grade is added: the rest of each
        record's stored text (scores, other grades) is left byte for byte, and hidden
        states are not touched. Raises :class:`~confide.core.errors.StoreError` for an id not
        stored or a record that already has the grade (nothing is written)."""
        with self._guard(), self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            for item_id, value in values.items():
                row = self._conn.execute("SELECT data FROM records WHERE item_id = ?",
                                         (item_id,)).fetchone()
                if row is None:
                    raise StoreError(f"{self.path}: no record with id {item_id!r}")
                d = json.loads(row[0])
                grades = d.setdefault("grades", {})
                if name in grades:
                    raise StoreError(f"{self.path}: record {item_id!r} already has a "
                                     f"{name!r} grade")
                grades[name] = float(value)
                self._conn.execute("UPDATE records SET data = ? WHERE item_id = ?",
                                   (json.dumps(d, allow_nan=False), item_id))
        return len(values)


def record_row(record: Record) -> dict[str, Any]:
    """A flat, JSON-safe row, as the row exports write it (:mod:`confide.store.exports`):
    NaN scores become None (with the reason in ``why.<scorer>``)."""
    row: dict[str, Any] = {
        "id": record.item.id,
        "question": record.item.question,
        "answer": record.greedy.text,
        "references": list(record.item.references),
        "n_tokens": record.greedy.n_tokens,
        "finish_reason": record.greedy.finish_reason,
        "seconds": record.seconds,
    }
    if record.greedy.trace is not None:  # a reasoning reply: the answer above, its trace here
        row["reasoning"] = record.greedy.trace.text
        row["reasoning_tokens"] = record.greedy.trace.n_tokens
    for name, value in record.grades.items():
        row[f"grade.{name}"] = value
    for name, reason in record.grade_errors.items():
        row[f"ungraded.{name}"] = reason
    for name, value in record.scores.items():
        row[f"score.{name}"] = json_safe(value)
    for name, reason in record.score_errors.items():
        row[f"why.{name}"] = reason
    return row


# --- the stored text -------------------------------------------------------------------------

_FAST_ENCODER = msgspec.json.Encoder()
# What msgspec writes as json.dumps would (json.dumps refuses, or writes otherwise, the rest:
# msgspec writes NaN as null, and sets, bytes, enums, dates, UUIDs and dataclasses its own way).
_SCALARS = frozenset({str, int, bool, type(None)})
_NUMBERS = frozenset({float, int, bool})
_SEQUENCES = frozenset({list, tuple})


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only dicts with text keys, lists, tuples, text, integers,
    booleans, None and finite floats, all of exactly those types."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is float:
        return value - value == 0.0  # NaN and infinities give NaN
    if kind is dict:
        return all(type(key) is str for key in value) and _all_plain(value.values())
    if kind in _SEQUENCES:
        return _all_plain(value)
    return False


def _all_plain(values: Any) -> bool:
    """:func:`_plain` of every element of a sized collection; a list of numbers, of
    texts, or of such lists (the token statistics) checked at once."""
    kinds = set(map(type, values))
    if kinds <= _SCALARS:
        return True
    if kinds <= _NUMBERS:
        total = sum(values)  # finite only if every element is (an overflow: json's way)
        return total - total == 0
    if kinds <= _SEQUENCES:
        return _rows_plain(values)
    return all(_plain(v) for v in values)


def _rows_plain(rows: Any) -> bool:
    """:func:`_all_plain` of the elements of lists (or tuples), all taken together."""
    first = next((row[0] for row in rows if row), None)
    try:
        if type(first) is str:
            "".join(itertools.chain.from_iterable(rows))  # texts (a subclass: msgspec refuses)
            return True
        if type(first) is float:
            total = sum(map(sum, rows))  # numbers: a Decimal, numpy scalar... gives another type
            if type(total) is float:
                return bool(total - total == 0)
    except TypeError:
        pass
    return _all_plain(list(itertools.chain.from_iterable(rows)))
