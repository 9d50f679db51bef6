"""Reading a log: format detection, the record stream, the greedy-answer file.

The formats themselves live in their modules (see :mod:`confide.ingest`).
"""


from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.reasoning import DEFAULT_TAGS, Tags
from confide.core.reasoning import reasoning_tags as reasoning_tags_of
from confide.ingest import jsonl, llamacpp, lmeval, openai, vllm  # noqa: F401 (register)
from confide.ingest.common import (
    FORMATS,
    BadField,
    Context,
    Fit,
    Imported,
    capabilities_of,
    decode_line,
    file_layout,
    is_blank,
    iter_json_records,
)
from confide.ingest.lmeval import option_probability
from confide.ingest.sources import log_source, log_stem
from confide.tasks.base import BadRecords

__all__ = ["ANSWER_MODES", "DETECTION_ORDER", "FORMATS", "Imported", "ImportedStream",
           "collector_paused", "decode_line", "detect", "detect_format", "duplicate_id",
           "file_layout", "is_blank", "option_probability", "parse_value", "parse_values",
           "read_generations"]

#: Formats tried by ``format="auto"``: a record must have the required fields of exactly
#: one of them (a format whose fields are nested in ``response`` yields to one whose
#: fields are the record's own); this order is only the order messages list them in.
DETECTION_ORDER = ("lmeval", "openai", "vllm", "llamacpp", "jsonl")
#: ``answer="first"``: a record's first choice is the answer, the rest samples.
#: ``answer="greedy-file"``: every choice is a sample; the answer is the first choice
#: of the record with the same id in ``greedy_file``.
ANSWER_MODES = ("first", "greedy-file")


def _check_path(path: str | Path) -> Path:
    return log_source(path).path


def _detect(obj: dict[str, Any], source: str, line: int) -> tuple[str, Fit]:
    fitting = {name: fit for name in DETECTION_ORDER
               if (fit := FORMATS[name].fits(obj)) is not None}
    # a format whose fields are the record's own wins over one that reads a nested reply
    chosen = {name: fit for name, fit in fitting.items() if not fit.nested} or fitting
    if len(chosen) == 1:
        return next(iter(chosen.items()))
    if chosen:
        why = "; ".join(f"{name}: {fit.why}" for name, fit in chosen.items())
        raise InvalidInputError(
            f"the record fits more than one log format ({why}); say which it is with "
            f"format= (--format), one of {', '.join(chosen)}",
            file=source, line=line, field="format")
    keys = ", ".join(sorted(map(str, obj))[:12]) or "none"
    raise InvalidInputError(
        f"not a known log format (its keys: {keys}); give format= one of "
        f"{', '.join(DETECTION_ORDER)}", file=source, line=line, field="format")


def detect(path: str | Path) -> tuple[str, str]:
    """The format of a log file and why, from its first record: ``(name, reason)``,
    the reason naming the fields that decided (see :func:`detect_format`)."""
    p = _check_path(path)
    first_bad: InvalidInputError | None = None
    for line, obj in iter_json_records(p, str(path)):
        if isinstance(obj, dict):
            name, fit = _detect(obj, str(path), line)
            return name, fit.why
        if isinstance(obj, BadField) and first_bad is None:
            first_bad = InvalidInputError(obj.message, file=str(path), line=line,
                                          field=obj.field)
    if first_bad is not None:  # what the reader would say of the file's first record
        raise first_bad
    raise InvalidInputError("no JSON object records (the file is empty, or no line is a "
                            "JSON object)", file=str(path))


def detect_format(path: str | Path) -> str:
    """The format of a log file, from its first record.

    Parameters
    ----------
    path : the log file (JSON Lines, one JSON array, or pretty-printed objects; plain or
        compressed with gzip, bzip2 or xz); the first record that is a JSON object
        decides (lines that are not are the reader's to report).

    Returns
    -------
    str
        The one format of :data:`DETECTION_ORDER` whose required fields the record has.

    Raises
    ------
    InvalidInputError
        The file is missing, empty, its first record matches no format, or it matches
        several (then ``format=`` must say which).
    """
    return detect(path)[0]


class ImportedStream(Iterator[Imported]):
    """The records of one log file, read as they are iterated.

    ``format`` is the format read (the one ``"auto"`` chose); ``skipped`` lists
    ``(file:line, reason)`` of the bad records skipped so far
    (``on_bad_record="skip"``); ``count`` the records yielded so far.
    """

    def __init__(self, path: Path, fmt: str, records: Iterator[Imported], bad: BadRecords
                 ) -> None:
        self.path, self.format = path, fmt
        self._records, self._bad = records, bad
        self.count = 0

    @property
    def skipped(self) -> list[tuple[str, str]]:
        return self._bad.skipped

    def __iter__(self) -> ImportedStream:
        return self

    def __next__(self) -> Imported:
        record = next(self._records)
        self.count += 1
        return record

    def __repr__(self) -> str:
        return (f"ImportedStream({str(self.path)!r}, format={self.format!r}, "
                f"read={self.count}, skipped={len(self.skipped)})")


def read_generations(path: str | Path, format: str = "auto", *, answer: str = "first",
                     greedy_file: str | Path | None = None, on_bad_record: str = "raise",
                     label_field: str | None = None, entropy_bounds: bool = True,
                     reasoning_tags: str | Sequence[str] | None = DEFAULT_TAGS
                     ) -> ImportedStream:
    """Stream the records of a log file as :class:`Imported` (question, answer, samples).

    Parameters
    ----------
    path : the log file.
    format : ``"auto"`` (:func:`detect_format`) or one of :data:`FORMATS`.
    answer : ``"first"`` (default): each record's first choice is the answer, the
        others samples; ``"greedy-file"``: each record's choices are all samples, and
        the answer is the first choice of the record with the same id in
        ``greedy_file`` (which is read first; its answers are held in memory, one per
        id).
    greedy_file : the file of greedy answers, with ``answer="greedy-file"``.
    on_bad_record : ``"raise"`` (default) or ``"skip"`` (the stream's ``skipped``
        lists them with the reasons).
    label_field : the record field holding correctness (default: the format's own:
        ``label``; ``acc`` or ``exact_match`` for ``lmeval``).
    entropy_bounds : give ``token_entropies`` as lower bounds from the top-k
        log-probabilities (default); False leaves them out.
    reasoning_tags : the tags of a reasoning model's trace in an answer's text,
        ``("<think>", "</think>")`` (default) or ``"<open>,<close>"``: the text up to the
        closing tag becomes the answer's trace (:mod:`confide.core.reasoning`); None or
        ``"none"``: answers are read whole. A trace a log keeps in a field of its own
        (``reasoning_content``, ``reasoning``, ``thinking``) is read either way.

    Returns
    -------
    ImportedStream
        An iterator of :class:`Imported`, read as it is consumed.

    Raises
    ------
    InvalidInputError
        At once for a missing file, an unknown option or an undetectable format; while
        iterating, for a bad record (``file:line: field: why``) unless skipping, and
        for JSON that cannot be stepped over (inside an array).
    UnknownNameError
        An unknown ``format``.
    """
    p = _check_path(path)
    bad = BadRecords(on_bad_record)
    if answer not in ANSWER_MODES:
        raise InvalidInputError(f"must be one of {', '.join(ANSWER_MODES)}, not {answer!r}",
                                field="answer")
    if (answer == "greedy-file") != (greedy_file is not None):
        raise InvalidInputError("answer='greedy-file' and greedy_file go together",
                                field="greedy_file")
    if label_field is not None and (not isinstance(label_field, str) or not label_field):
        raise InvalidInputError("must be a field name", field="label_field")
    tags = reasoning_tags_of(reasoning_tags)
    fmt = detect_format(p) if format == "auto" else FORMATS[format].name
    records = _records(p, fmt, bad, label_field=label_field, entropy_bounds=entropy_bounds,
                       reasoning_tags=tags)
    if greedy_file is not None:
        records = _with_greedy_file(records, p, fmt, Path(greedy_file), bad,
                                    label_field=label_field, entropy_bounds=entropy_bounds,
                                    reasoning_tags=tags)
    return ImportedStream(p, fmt, records, bad)


def parse_value(obj: Any, line: int, path: Path, fmt: str, *, label_field: str | None = None,
                entropy_bounds: bool = True, reasoning_tags: Tags | None = DEFAULT_TAGS
                ) -> Imported:
    """One record (a decoded JSON value, or the :class:`BadField` of one that could not be
    decoded) at ``line`` of ``path`` in format ``fmt``, as :class:`Imported`.

    The one reading of a record: :func:`read_generations` and an import's worker
    processes (:mod:`confide.runs.importing`) both call it; duplicate ids are the caller's
    to find. Raises :class:`~confide.core.errors.InvalidInputError` (``file:line: field:``)
    for a bad record.
    """
    source = str(path)
    if isinstance(obj, BadField):
        raise InvalidInputError(obj.message, file=source, line=line, field=obj.field)
    if not isinstance(obj, dict):
        raise InvalidInputError(f"expected a JSON object, got {type(obj).__name__}",
                                file=source, line=line, field="record")
    ctx = Context(source=source, stem=log_stem(path), line=line, label_field=label_field,
                  entropy_bounds=entropy_bounds, reasoning_tags=reasoning_tags)
    try:
        return FORMATS[fmt].parse(obj, ctx)
    except BadField as exc:
        raise InvalidInputError(exc.message, file=source, line=line, field=exc.field) from None
    except RecursionError:
        raise InvalidInputError("nested too deeply", file=source, line=line,
                                field="record") from None


#: Records read together (:func:`parse_values`): enough for a format's block reading to
#: share its numpy calls, few enough that the decoded values held at once stay small.
READ_BLOCK = 32


def parse_values(values: Sequence[tuple[int, Any]], path: Path, fmt: str, *,
                 label_field: str | None = None, entropy_bounds: bool = True,
                 reasoning_tags: Tags | None = DEFAULT_TAGS) -> list[Imported | Exception]:
    """:func:`parse_value` of each ``(line, value)``: its :class:`Imported`, or the error
    it raises (:class:`~confide.core.errors.InvalidInputError` for a bad record; anything
    else as it came), for the caller to raise in its turn. A format with a block reading
    (``LogFormat.parse_many``) reads the records together, with the same results."""
    many = FORMATS[fmt].parse_many
    if many is None:
        return [_result(parse_value, obj, line, path, fmt, label_field=label_field,
                        entropy_bounds=entropy_bounds, reasoning_tags=reasoning_tags)
                for line, obj in values]
    source, stem = str(path), log_stem(path)
    out: list[Imported | Exception] = []
    todo: list[tuple[int, tuple[dict[str, Any], Context]]] = []
    for line, obj in values:
        if isinstance(obj, dict):
            todo.append((len(out), (obj, Context(
                source=source, stem=stem, line=line, label_field=label_field,
                entropy_bounds=entropy_bounds, reasoning_tags=reasoning_tags))))
        out.append(_result(parse_value, obj, line, path, fmt) if not isinstance(obj, dict)
                   else InvalidInputError("not read"))
    for (at, (_, ctx)), got in zip(todo, many([pair for _, pair in todo]), strict=True):
        if isinstance(got, BadField):
            got = InvalidInputError(got.message, file=source, line=ctx.line, field=got.field)
        elif isinstance(got, RecursionError):
            got = InvalidInputError("nested too deeply", file=source, line=ctx.line,
                                    field="record")
        out[at] = got
    return out


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a block of records is decoded and read.

    Decoded JSON holds no reference cycles, so the collector finds nothing in it, but a
    block of decoded records held at once (some 700 objects a record) makes it run every
    record and walk them again and again: more time than the reading itself took
    (``benchmarks/results/import_speed.md``). Counting goes on; collection resumes when
    the block is read and its values are freed. Nothing is paused where the collector is
    off already.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _result(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # raised by the caller in its turn
        return exc


def duplicate_id(item_id: str, line: int, path: Path) -> InvalidInputError:
    """The error for a record at ``line`` whose id an earlier record of ``path`` has."""
    return InvalidInputError(f"duplicate id {item_id!r}", file=str(path), line=line,
                             field="id")


def _records(path: Path, fmt: str, bad: BadRecords, *, label_field: str | None,
             entropy_bounds: bool, reasoning_tags: Tags | None) -> Iterator[Imported]:
    seen: set[str] = set()
    values = iter_json_records(path, str(path))
    while True:
        block: list[tuple[int, Any]] = []
        stopped: BaseException | None = None
        with collector_paused():
            try:
                block.extend(itertools.islice(values, READ_BLOCK))
            except BaseException as exc:  # the records read before it come first
                stopped = exc
            results = parse_values(block, path, fmt, label_field=label_field,
                                   entropy_bounds=entropy_bounds,
                                   reasoning_tags=reasoning_tags)
            block.clear()  # the decoded values go before the collector is back
        if not results and stopped is None:
            return
        for record in results:
            if isinstance(record, InvalidInputError):
                bad.bad(record)
                continue
            if isinstance(record, Exception):
                raise record
            if record.item.id in seen:
                bad.bad(duplicate_id(record.item.id, record.line, path))
                continue
            seen.add(record.item.id)
            yield record
        if stopped is not None:
            raise stopped


def _with_greedy_file(records: Iterator[Imported], path: Path, fmt: str, greedy_path: Path,
                      bad: BadRecords, *, label_field: str | None, entropy_bounds: bool,
                      reasoning_tags: Tags | None) -> Iterator[Imported]:
    """Each record's choices become samples; its answer comes from the greedy file."""
    gp = _check_path(greedy_path)
    greedy_fmt = detect_format(gp)
    answers = {r.item.id: r for r in _records(gp, greedy_fmt, bad, label_field=label_field,
                                              entropy_bounds=entropy_bounds,
                                              reasoning_tags=reasoning_tags)}
    for record in records:
        found = answers.get(record.item.id)
        if found is None:
            bad.bad(InvalidInputError(f"no answer with id {record.item.id!r} in {gp}",
                                      file=str(path), line=record.line, field="id"))
            continue
        samples = [record.greedy, *record.samples]
        caps = capabilities_of(found.greedy, samples)
        notes = {**record.approximate, **found.approximate}
        yield Imported(item=record.item, greedy=found.greedy, samples=samples,
                       label=found.label if found.label is not None else record.label,
                       line=record.line, capabilities=caps,
                       approximate={k: v for k, v in notes.items() if k in caps})
