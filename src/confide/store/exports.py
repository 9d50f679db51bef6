"""Exports of a stored run: every format (:data:`EXPORT_FORMATS`), behind one entry point.

:func:`export_run` is what ``confide export RUN --format F``, :func:`confide.export` and
:meth:`confide.Run.export` call:

``jsonl``, ``csv``, ``parquet``
    one row per record, one column per scorer and grader
    (:func:`confide.store.run_store.record_row`);
``openai``
    one Chat Completions response object per line (:func:`openai_response`): the
    greedy answer as choice 0 and the samples as further choices, each with
    ``logprobs.content[t].{token, logprob, bytes, top_logprobs}``; the question
    under ``request`` (``messages`` for a chat prompt, ``prompt`` for text), the
    item id as ``id``, the references as ``references``, an imported run's
    label as ``label`` and every grade (those added with ``confide label`` too) under
    ``grades``: what the ``openai`` log reader (:mod:`confide.ingest.openai`) reads, so
    ``confide score`` re-imports it (``--label-field grades.human`` reads a label
    added as ``human``).

A reasoning reply's trace (:mod:`confide.core.reasoning`) is written as vLLM's reasoning
parsers write it: its text as ``message.reasoning_content``, its tokens first in
``logprobs.content`` and the answer's after them; the reader splits them again, so both
spans come back with their statistics.

The round trip keeps what the OpenAI format can carry: answer texts, tokens, the
chosen tokens' log-probabilities and the top-k alternatives, bit for bit (float32
values written as the shortest decimal that reads back to the same double), so
every scorer that reads only those gives the same value on the re-imported run.
It cannot carry the statistics of the whole next-token distribution
(``token_entropies`` come back as lower bounds from the top-k;
``token_kl_uniform``, ``token_renyi_uniform``, ``token_fisher_rao_uniform``,
``token_boosted_prob`` not at all, so ``boostedprob`` falls back to its rule on the
top-k), token ids, hidden states, or the scores themselves
(``tests/test_importing.py::test_openai_export_round_trip``).

Every format is written whole or not at all (:func:`~confide.core.paths.atomic_output`):
a record whose text cannot be written as UTF-8 (a lone surrogate stored by an older
version) stops the export with a :class:`~confide.core.errors.StoreError` naming the
record and the field, and leaves no file behind (or the previous export untouched).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from confide.core.errors import StoreError
from confide.core.paths import atomic_output, writable_file
from confide.core.records import Generation, Record
from confide.store.run_store import LABEL_GRADE, RunStore, record_row

__all__ = ["EXPORT_FORMATS", "export_run", "openai_response", "unwritable_error",
           "unwritable_text"]

#: Every export format, each with its default file name in the run directory.
EXPORT_FORMATS = ("jsonl", "csv", "parquet", "openai")
_FILE_NAMES = {"jsonl": "records.jsonl", "csv": "records.csv", "parquet": "records.parquet",
               "openai": "records.openai.jsonl"}


def export_run(store: RunStore, fmt: str, path: str | Path | None = None) -> Path:
    """Write ``store``'s records in format ``fmt`` (:data:`EXPORT_FORMATS`) to ``path``
    (default: in the run directory); a damaged store's readable records, their count
    of unreadable ones left in ``store.unreadable``."""
    fmt = fmt.lower()
    if fmt not in EXPORT_FORMATS:
        raise StoreError(f"unknown export format {fmt!r}; use {', '.join(EXPORT_FORMATS)}")
    target = writable_file(path or store.path / _FILE_NAMES[fmt], "--out")
    records, store.unreadable = store.readable_records()
    try:
        if fmt == "openai":
            with atomic_output(target, "--out") as fh:
                _write_openai(records, _model_name(store), fh, store.path, target)
        else:
            _write_rows([record_row(r) for r in records], fmt, target, store.path)
    except OSError as exc:
        raise StoreError(f"{target}: cannot write: {exc.strerror or exc}") from exc
    return target


def unwritable_text(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first text in ``value`` (nested dicts and lists, keys included) that cannot be
    encoded as UTF-8: ``(field path, why)``, or None when all of it can.

    >>> unwritable_text({"answer": "ok", "references": ["a", "b\\udcff"]})
    ('references[1]', "'\\\\udcff' at character 1 (a lone surrogate)")
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return path or "text", (f"{value[exc.start:exc.end]!r} at character {exc.start} "
                                    "(a lone surrogate)")
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            found = unwritable_text(key, f"{name} (the key)") or unwritable_text(item, name)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if found := unwritable_text(item, f"{path}[{i}]"):
                return found
    return None


def unwritable_error(store_path: str | Path, records: list[Record], target: str | Path
                     ) -> StoreError | None:
    """The error naming the first record (id and field) whose text cannot be written as
    UTF-8 (its row, then its OpenAI form: prompt, samples, tokens), or None.

    What a writer that met a :class:`UnicodeEncodeError` (the report) raises instead."""
    for record in records:
        row = record_row(record)
        if unwritable_text(row) or unwritable_text(response := openai_response(record)):
            return _unwritable(Path(store_path), record.item.id,
                               row if unwritable_text(row) else response, Path(target))
    return None


def _unwritable(store_path: Path, record_id: str, row: Any, target: Path) -> StoreError:
    """The error naming the record and the field whose text UTF-8 cannot encode."""
    field, why = unwritable_text(row) or ("text", "a lone surrogate")
    return StoreError(
        f"{store_path}: record {record_id!r}: {field}: text that is not valid Unicode, {why}, "
        f"stored by an older version of confide; nothing was written to {target}. Re-run or "
        "re-import that item to store it again, then try again.")


def _model_name(store: RunStore) -> str:
    backend = store.get_meta("backend", {}) or {}
    config = store.config or {}
    return str(backend.get("model") or config.get("model") or "")


def _write_openai(records: list[Record], model: str, fh: IO[str], store_path: Path,
                  target: Path) -> None:
    """One OpenAI Chat Completions response object per record (JSON Lines)."""
    for record in records:
        response = openai_response(record, model=model)
        try:
            fh.write(json.dumps(response, ensure_ascii=False, allow_nan=False) + "\n")
        except UnicodeEncodeError as exc:  # named as the stored record's field where it can be
            raise (unwritable_error(store_path, [record], target)
                   or _unwritable(store_path, record.item.id, response, target)) from exc


def _write_rows(rows: list[dict[str, Any]], fmt: str, target: Path, store_path: Path) -> None:
    """One row per record as JSON Lines, CSV (lists joined with `` | ``) or Parquet."""
    if fmt == "jsonl":
        with atomic_output(target, "--out") as fh:
            for row in rows:
                try:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                except UnicodeEncodeError as exc:
                    raise _unwritable(store_path, row["id"], row, target) from exc
        return
    import pyarrow as pa

    with atomic_output(target, "--out", binary=True) as out:
        try:
            columns = sorted({k for row in rows for k in row}, key=_column_order)
            table = pa.Table.from_pylist(
                [{k: row.get(k) for k in columns} for row in rows]) if rows else pa.table({})
        except UnicodeEncodeError as exc:  # pyarrow does not say which record
            bad = next(row for row in rows if unwritable_text(row))
            raise _unwritable(store_path, bad["id"], bad, target) from exc
        if fmt == "csv":
            import pyarrow.csv as pacsv

            flat = table
            for i, name in enumerate(flat.column_names):  # csv cannot hold lists
                if pa.types.is_list(flat.schema.field(name).type):
                    joined = [None if v is None else " | ".join(map(str, v))
                              for v in flat.column(name).to_pylist()]
                    flat = flat.set_column(i, name, pa.array(joined, pa.string()))
            pacsv.write_csv(flat, out)
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, out)


def _column_order(name: str) -> tuple[int, str]:
    head = ["id", "question", "answer", "references", "n_tokens", "finish_reason", "seconds"]
    if name in head:
        return (head.index(name), "")
    return (len(head) + (0 if name.startswith("grade.") else 1), name)


def openai_response(record: Record, *, model: str = "") -> dict[str, Any]:
    """A record as a Chat Completions response object with its request (module notes)."""
    prompt = record.item.prompt
    request: dict[str, Any] = {"model": model}
    if isinstance(prompt, str):
        request["prompt"] = prompt
    else:
        request["messages"] = [dict(m) for m in prompt]
    out: dict[str, Any] = {
        "id": record.item.id, "object": "chat.completion", "created": 0, "model": model,
        "choices": [_choice(i, gen) for i, gen in enumerate([record.greedy, *record.samples])],
        "request": request,
    }
    if record.item.references:
        out["references"] = list(record.item.references)
    if LABEL_GRADE in record.grades:
        out["label"] = record.grades[LABEL_GRADE]
    if record.grades:  # every grade, those added with confide label too
        out["grades"] = dict(record.grades)
    return out


def _entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": float(logprob), "bytes": list(token.encode("utf-8"))}


def _choice(index: int, gen: Generation) -> dict[str, Any]:
    joined = "".join(gen.tokens)
    # The tokens' own text where it is the answer, so a reader keeps every token
    # (it keeps the shortest prefix of tokens covering the text it is given).
    content = joined if gen.tokens and joined.strip() == gen.text else gen.text
    choice: dict[str, Any] = {"index": index,
                              "message": {"role": "assistant", "content": content},
                              "logprobs": None, "finish_reason": gen.finish_reason}
    entries = _entries(gen)
    if gen.trace is not None:  # vLLM's shape: the trace apart, its tokens listed first
        choice["message"]["reasoning_content"] = gen.trace.text
        before = _entries(gen.trace)
        if before is not None and gen.trace.tokens and entries is not None:
            entries = before + entries
        elif gen.trace.tokens:
            entries = None  # half the reply's tokens would read as the answer's
    if entries is not None:
        choice["logprobs"] = {"content": entries}
    return choice


def _entries(gen: Generation) -> list[dict[str, Any]] | None:
    """``logprobs.content`` of ``gen``'s tokens, or None without log-probabilities."""
    lps, names, values = gen.token_logprobs, gen.top_tokens, gen.top_logprobs
    if lps is None or len(lps) != len(gen.tokens):
        return None
    with_top = names is not None and values is not None and len(names) == len(gen.tokens)
    content_lp = []
    for t, token in enumerate(gen.tokens):
        entry = _entry(token, lps[t])
        alternatives = zip(names[t], values[t], strict=True) if with_top else ()  # type: ignore[index]
        entry["top_logprobs"] = [_entry(alt, v) for alt, v in alternatives]
        content_lp.append(entry)
    return content_lp
