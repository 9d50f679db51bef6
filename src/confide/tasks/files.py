"""Reading data files into Items: JSONL, CSV, Parquet and Hugging Face ``datasets``.

Every reader yields ``(line, record)`` with a 1-based line (JSONL: physical
line; a ``.json`` file holding one array: the element number; CSV: the line
where the record starts, the header being line 1;
Parquet and ``datasets``: the row number, 1-based). A record that cannot be
used raises :class:`~confide.core.errors.InvalidInputError` whose message starts
with ``file:line: field:``, or — with ``on_bad_record="skip"`` — is skipped and
counted in :attr:`Task.skipped`.

Field mapping for the user's own data (all keyword options of ``load_task``):

``question_field`` (default ``"question"``)
    The question text (a string, or a list of chat messages).
``reference_field`` (default ``"references"``; a name or a list of names)
    Accepted answers; each value may be a string, a number or a list of them.
    A missing default field means the data has no references (it can be
    scored, not graded); a field the user named must be present.
``alias_separator`` (default ``None``)
    Splits string references into aliases, e.g. ``";"`` or ``"/"``.
``id_field`` (default ``"id"`` when present)
    Item ids; otherwise ``<file stem>-<line>``.
``choices_field`` (default ``None``)
    A list of options; makes the task multiple choice (references may then be
    a letter, an index or the option text).
``claims`` (optional field, long answers)
    Per-claim labels: a list of ``{"claim": text, "label": true/false/1/0}``
    objects; checked by :func:`claim_labels`, kept in ``metadata["claims"]``
    (the ``labels`` claim grader of :mod:`confide.grading.claims` reads them).
``grader`` / ``format`` / ``max_new_tokens``
    Defaults ``"contains"`` (``"choice"`` with choices) / ``"open_qa"`` / 32.

How a user's open-domain QA file is prompted (``prompt``, ``fewshot``):

``prompt="auto"`` (default)
    ``"kshot"`` for a short-answer QA file: format ``open_qa`` (no choices) and
    references whose median length (each item's shortest reference) is at most
    :data:`SHORT_ANSWER_WORDS` words; ``"chat"`` otherwise (long references, or no
    references to tell). Asked in a chat turn, the bundled instruct model answers in
    sentences; continuing ``Question:/Answer:`` exemplars it answers in a few words
    (``benchmarks/own_qa.py``), as the built-in TriviaQA prompts every model.
``prompt="kshot"``
    The k-shot completion prompt of TriviaQA
    (:data:`~confide.tasks.prompts.SHORT_ANSWER`) for every model, instruct or base,
    with TriviaQA's five exemplars (:func:`~confide.tasks.builtin.triviaqa_exemplars`,
    given by :func:`~confide.tasks.load_task`) unless ``fewshot`` names others.
    Open-domain QA only (refused with choices or another ``format``).
``prompt="chat"``
    The format's chat prompt for instruct models (the prompt of earlier versions);
    with ``fewshot``, its exemplars become chat turns. Long answers (``long_form``)
    always get it.
``fewshot`` (a file path)
    Exemplars in the same format and field mapping as the data; each needs a
    reference (its first is the exemplar's answer). All of its records are
    exemplars, in file order. An evaluated item with the same question as an
    exemplar stays in the run, and that exemplar is left out of its own prompt (the
    next one takes its place, or the item gets one shot fewer); the options count
    such items as ``excluded_as_exemplars``.

Both are stored in the task's options (with the exemplar file's sha256), so a run
resumed with another prompt is refused. Multiple-choice files keep their prompt.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Item
from confide.tasks.base import (
    LETTERS,
    BadRecords,
    Task,
    equal_to_exemplars,
    file_sha256,
    pop_options,
)
from confide.tasks.prompts import FORMATS, SHORT_ANSWER
from confide.tasks.readers import iter_csv, iter_json_array, iter_jsonl, iter_parquet

__all__ = ["PROMPTS", "SHORT_ANSWER_WORDS", "SUFFIXES", "claim_labels", "iter_csv",
           "iter_json_array", "iter_jsonl", "iter_parquet", "load_hf_dataset",
           "load_user_file", "records_to_items", "short_answers"]

SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
#: ``prompt=`` of a user's data file (see the module docstring).
PROMPTS = ("auto", "kshot", "chat")
#: ``prompt="auto"``: references of at most this many words (median) are short answers.
SHORT_ANSWER_WORDS = 5


def _as_texts(value: Any, separator: str | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for v in value:
            out.extend(_as_texts(v, separator))
        return out
    if isinstance(value, bool):
        return [str(value).lower()]
    if isinstance(value, float):
        if math.isnan(value):  # a missing cell of a numeric column
            return []
        # 6.0 (a numeric column, or JSON 6.0) is the answer "6": "The answer is 6" is right.
        return [str(int(value)) if value.is_integer() else repr(value)]
    if isinstance(value, int):
        return [str(value)]
    if not isinstance(value, str):
        raise TypeError(type(value).__name__)
    parts = value.split(separator) if separator else [value]
    return [p.strip() for p in parts if p.strip()]


def _dedupe(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def claim_labels(value: Any) -> list[dict[str, Any]]:
    """Check a record's ``claims`` field: labelled claims, as ``{"claim", "label"}`` objects.

    A label is a boolean or the number 0 or 1; it is stored as 0.0 or 1.0. A
    CSV cell holds the list as JSON text. Raises ``ValueError`` saying what is
    wrong (the caller names file, line and field).

    >>> claim_labels([{"claim": "Paris is in France.", "label": True}])
    [{'claim': 'Paris is in France.', 'label': 1.0}]
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON text: {exc.msg} at column {exc.colno}") from None
    if not isinstance(value, list):
        raise ValueError(f"must be a list of {{'claim', 'label'}} objects, not "
                         f"{type(value).__name__}")
    out = []
    for n, entry in enumerate(value):
        if not isinstance(entry, dict) or not isinstance(entry.get("claim"), str) \
                or not entry["claim"].strip():
            raise ValueError(f"entry {n}: needs a non-empty 'claim' text")
        label = entry.get("label")
        if isinstance(label, bool) or (isinstance(label, (int, float)) and label in (0, 1)):
            out.append({"claim": entry["claim"].strip(), "label": float(label)})
        else:
            raise ValueError(f"entry {n}: 'label' must be true/false or 1/0, not {label!r}")
    return out


def records_to_items(rows: Iterator[tuple[int, dict[str, Any]]], *, source: str, stem: str,
                     bad: BadRecords, question_field: str = "question",
                     reference_field: str | list[str] | None = None,
                     alias_separator: str | None = None, id_field: str | None = None,
                     choices_field: str | None = None) -> list[Item]:
    """Map raw records to Items with the field mapping documented in this module."""
    explicit_refs = reference_field is not None
    ref_fields = ([reference_field] if isinstance(reference_field, str)
                  else list(reference_field or ["references"]))
    items: list[Item] = []
    seen: set[str] = set()
    fields_seen: set[str] = set()
    for line, rec in rows:
        fields_seen.update(rec)
        def err(msg: str, fld: str, line: int = line) -> InvalidInputError:
            return InvalidInputError(msg, file=source, line=line, field=fld)

        if id_field is not None and id_field not in rec:
            bad.bad(err("missing id field", id_field))
            continue
        key = id_field if id_field is not None else ("id" if "id" in rec else None)
        item_id = str(rec[key]) if key is not None else f"{stem}-{line}"
        if item_id in seen:
            bad.bad(err(f"duplicate id {item_id!r}", key or "id"))
            continue
        if question_field not in rec:
            bad.bad(err(f"missing question field (fields: {sorted(rec)})", question_field))
            continue
        question = rec[question_field]
        if isinstance(question, list):
            if not all(isinstance(m, dict) and "role" in m and "content" in m for m in question):
                bad.bad(err(f"item {item_id!r}: chat messages need 'role' and 'content'",
                            question_field))
                continue
        elif not isinstance(question, str):
            bad.bad(err(f"item {item_id!r}: question must be text, not "
                        f"{type(question).__name__}", question_field))
            continue
        elif not question.strip():
            bad.bad(err(f"item {item_id!r}: empty question", question_field))
            continue
        refs: list[str] = []
        ok = True
        for f in ref_fields:
            if f not in rec:
                if explicit_refs:
                    bad.bad(err(f"item {item_id!r}: missing reference field", f))
                    ok = False
                    break
                continue
            try:
                refs.extend(_as_texts(rec[f], alias_separator))
            except TypeError as exc:
                bad.bad(err(f"item {item_id!r}: references must be text, numbers or lists, "
                            f"not {exc}", f))
                ok = False
                break
        if not ok:
            continue
        metadata = {k: v for k, v in rec.items()
                    if k not in {question_field, key, *ref_fields}}
        if "claims" in metadata:
            try:
                metadata["claims"] = claim_labels(metadata["claims"])
            except ValueError as exc:
                bad.bad(err(f"item {item_id!r}: {exc}", "claims"))
                continue
        if choices_field is not None:
            choices = rec.get(choices_field)
            if not isinstance(choices, list) or not choices:
                bad.bad(err(f"item {item_id!r}: choices must be a non-empty list",
                            choices_field))
                continue
            choices = [str(c) for c in choices]
            metadata["choices"] = choices
            refs = _choice_references(refs, choices)
        seen.add(item_id)
        items.append(Item(id=item_id, prompt=question, references=_dedupe(refs),
                          metadata=metadata))
    _check_references_found(items, fields_seen, explicit_refs, source)
    return items


# Fields people name their answers when they mean confide's "references".
ANSWER_LIKE = ("answer", "answers", "reference", "ground_truth", "gold", "target",
               "expected_answer", "solution")


def _check_references_found(items: list[Item], fields: set[str], explicit: bool,
                            source: str) -> None:
    # Data without references is scored, not graded; but an "answer" column left unmapped
    # would silently leave every item ungraded, so say how to map it instead.
    if explicit or not items or any(it.references for it in items):
        return
    likely = [f for f in ANSWER_LIKE if f in fields]
    if likely:
        raise InvalidInputError(
            f"no 'references' field, so nothing could be graded, but the records have "
            f"{likely[0]!r}: map it with --reference-field {likely[0]} "
            f"(Python: reference_field={likely[0]!r})", file=source, field="references")


def _choice_references(refs: list[str], choices: list[str]) -> list[str]:
    # A multiple-choice reference may be a letter, a 0-based index or the option
    # text; store it as [letter, option text].
    for r in refs:
        r = r.strip()
        if len(r) == 1 and r.upper() in LETTERS[: len(choices)]:
            i = LETTERS.index(r.upper())
        elif r.isdigit() and int(r) < len(choices):
            i = int(r)
        elif r in choices:
            i = choices.index(r)
        else:
            continue
        return [LETTERS[i], choices[i]]
    return refs


def _starts_with_array(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    return head.startswith(b"[")


_MAPPING_DEFAULTS: dict[str, Any] = {
    "question_field": "question", "reference_field": None, "alias_separator": None,
    "id_field": None, "choices_field": None, "grader": None, "format": None,
    "max_new_tokens": None, "stop": None, "prompt": None, "fewshot": None,
}
_FIELD_KEYS = ("question_field", "reference_field", "alias_separator", "id_field",
               "choices_field")


def short_answers(items: list[Item]) -> bool:
    """Whether the items' references are short answers: the median over items of the
    shortest reference's word count is at most :data:`SHORT_ANSWER_WORDS` (False with
    no references).

    >>> short_answers([Item("a", "Capital of Peru?", ["Lima"])])
    True
    >>> short_answers([Item("a", "Why?", ["Because the sky scatters blue light more."])])
    False
    """
    lengths = [min(len(r.split()) for r in it.references) for it in items if it.references]
    return bool(lengths) and statistics.median(lengths) <= SHORT_ANSWER_WORDS


def _prompt_kind(asked: Any, fmt: str, items: list[Item], fewshot: Any,
                 long_form: bool) -> str:
    if asked is None:
        asked = "auto"
    if asked not in PROMPTS:
        raise InvalidInputError(f"must be one of {', '.join(PROMPTS)}, not {asked!r}",
                                field="prompt")
    if long_form and (asked == "kshot" or fewshot is not None):
        raise InvalidInputError("long answers (long_form) are asked for in a chat turn; "
                                "k-shot exemplars are for short answers",
                                field="prompt" if asked == "kshot" else "fewshot")
    if long_form:
        return "chat"
    if fmt != "open_qa" and (asked == "kshot" or fewshot is not None):
        raise InvalidInputError(
            f"k-shot exemplars are for open-domain QA files (no choices); this task's "
            f"format is {fmt!r}", field="prompt" if asked == "kshot" else "fewshot")
    if asked == "auto":
        return "kshot" if fmt == "open_qa" and short_answers(items) else "chat"
    return str(asked)


def _fewshot_file(path: Any, mapping: dict[str, Any]) -> tuple[list[Item], str]:
    """The exemplars of a ``fewshot`` file (the data's mapping) and the file's sha256."""
    p = Path(str(path))
    if not p.is_file():
        raise InvalidInputError("no such file", file=str(p), field="fewshot")
    bad = BadRecords("raise")
    try:
        items = records_to_items(_rows(p, bad), source=str(p), stem=p.stem, bad=bad,
                                 **{k: mapping[k] for k in _FIELD_KEYS})
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=str(p)) from exc
    if not items:
        raise InvalidInputError("no exemplars in the few-shot file", file=str(p),
                                field="fewshot")
    for it in items:
        if not it.references:
            field = mapping["reference_field"] or "references"
            raise InvalidInputError(f"exemplar {it.id!r} has no answer (a few-shot exemplar "
                                    "is answered with its first reference)", file=str(p),
                                    field=field if isinstance(field, str) else field[0])
    return [replace(it, id=f"fewshot:{it.id}") for it in items], file_sha256(p)


def _prompting(mapping: dict[str, Any], fmt: str, items: list[Item],
               default_fewshot: Callable[[], list[Item]] | None, long_form: bool
               ) -> dict[str, Any]:
    """The prompt settings of a user's task (module docstring): the :class:`Task` fields
    of the prompt. ``default_fewshot``: the exemplars of ``kshot`` without a ``fewshot``
    file (:func:`~confide.tasks.load_task` gives TriviaQA's)."""
    kind = _prompt_kind(mapping["prompt"], fmt, items, mapping["fewshot"], long_form)
    if kind == "kshot" or mapping["prompt"] is not None:  # a chat run's identity is as before
        mapping["prompt"] = kind
    fields: dict[str, Any] = {}
    if kind == "kshot" or mapping["fewshot"] is not None:
        if mapping["fewshot"] is not None:
            fewshot, mapping["fewshot_sha256"] = _fewshot_file(mapping["fewshot"], mapping)
        elif default_fewshot is not None:
            fewshot = default_fewshot()
        else:
            raise InvalidInputError("k-shot prompts need exemplars: name a fewshot file",
                                    field="fewshot")
        # Counted only when some item equals an exemplar: the identity of earlier runs.
        if equal := equal_to_exemplars(items, fewshot):
            mapping["excluded_as_exemplars"] = equal
        fields["fewshot"] = fewshot
        fields["num_fewshot" if kind == "kshot" else "chat_fewshot"] = len(fewshot)
    if kind == "kshot":
        fields["templates"] = dict(SHORT_ANSWER)
    return fields


def _finish_user_task(name: str, items: list[Item], mapping: dict[str, Any], *,
                      data_file: str, sha: str | None, bad: BadRecords,
                      default_fewshot: Callable[[], list[Item]] | None,
                      long_form: bool) -> Task:
    mc = mapping["choices_field"] is not None
    fmt = mapping["format"] or ("multiple_choice" if mc else "open_qa")
    if fmt not in FORMATS:
        raise InvalidInputError(f"unknown format {fmt!r}; known: {sorted(FORMATS)}",
                                field="format")
    default_tokens = {"reasoning": 256, "generation": 64, "function_calling": 128}.get(fmt, 32)
    prompting = _prompting(mapping, fmt, items, default_fewshot, long_form)
    return Task(
        name=name, items=items, grader=mapping["grader"] or ("choice" if mc else "contains"),
        max_new_tokens=mapping["max_new_tokens"] or default_tokens,
        stop=list(mapping["stop"]) if mapping["stop"] is not None
        else ([] if fmt == "reasoning" else ["\n"]),
        format=fmt, data_file=data_file, data_sha256=sha,
        options={k: v for k, v in mapping.items() if v is not None},
        skipped=list(bad.skipped), source="user data", **prompting)


def _rows(p: Path, bad: BadRecords) -> Iterator[tuple[int, dict[str, Any]]]:
    """The reader of ``p`` by its suffix (a ``.json`` file may hold one array)."""
    suffix = p.suffix.lower()
    try:
        array = suffix == ".json" and _starts_with_array(p)
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=str(p)) from exc
    if array:
        return iter_json_array(p, bad)
    if suffix in (".jsonl", ".json"):
        return iter_jsonl(p, bad)
    if suffix == ".csv":
        return iter_csv(p, bad)
    if suffix == ".parquet":
        return iter_parquet(p, bad)
    raise InvalidInputError(f"unsupported file type {suffix!r}; use one of {SUFFIXES}",
                            file=str(p))


def load_user_file(path: str | Path, *, on_bad_record: str = "raise",
                   default_fewshot: Callable[[], list[Item]] | None = None,
                   long_form: bool = False, **options: Any) -> Task:
    """Load the user's JSONL / CSV / Parquet file as a task (mapping in the module docstring).

    ``default_fewshot`` gives the exemplars of a k-shot prompt without a ``fewshot`` file;
    ``long_form`` (long answers asked for) keeps the chat prompt.
    """
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError("no such file", file=str(p))
    mapping = pop_options(options, _MAPPING_DEFAULTS, p.name)
    bad = BadRecords(on_bad_record)
    rows = _rows(p, bad)
    try:
        items = records_to_items(rows, source=str(p), stem=p.stem, bad=bad,
                                 **{k: mapping[k] for k in ("question_field", "reference_field",
                                                            "alias_separator", "id_field",
                                                            "choices_field")})
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=str(p)) from exc
    if not items:
        skipped = f"; {len(bad.skipped)} bad record(s) skipped" if bad.skipped else ""
        raise InvalidInputError(f"no usable records{skipped}", file=str(p))
    return _finish_user_task(p.stem, items, mapping, data_file=str(p.resolve()),
                             sha=file_sha256(p), bad=bad, default_fewshot=default_fewshot,
                             long_form=long_form)


def load_hf_dataset(name: str, *, split: str = "test", hf_config: str | None = None,
                    on_bad_record: str = "raise", load_kwargs: dict[str, Any] | None = None,
                    default_fewshot: Callable[[], list[Item]] | None = None,
                    long_form: bool = False, **options: Any) -> Task:
    """Load a Hugging Face ``datasets`` dataset by name (``"hf:<name>"``) or from disk.

    ``name`` is passed to ``datasets.load_dataset(name, hf_config, split=split,
    **load_kwargs)``; a name that is an existing directory is read with
    ``datasets.load_from_disk``. Needs the ``data`` extra (``pip install
    confide[data]``); reaching the Hub needs network access.
    """
    try:
        import datasets
    except ImportError as exc:
        raise InvalidInputError("Hugging Face datasets needs the 'data' extra: "
                                "pip install 'confide[data]'", field="datasets") from exc
    mapping = pop_options(options, _MAPPING_DEFAULTS, name)
    bad = BadRecords(on_bad_record)
    if Path(name).is_dir():
        ds = datasets.load_from_disk(name)
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise InvalidInputError(f"no split {split!r}; splits: {sorted(ds)}",
                                        file=name, field="split")
            ds = ds[split]
    else:
        try:
            ds = datasets.load_dataset(name, hf_config, split=split, **(load_kwargs or {}))
        except (FileNotFoundError, ValueError, ConnectionError) as exc:
            raise InvalidInputError(f"cannot load dataset: {exc}", file=f"hf:{name}") from exc
    source = f"hf:{name}[{split}]"
    items = records_to_items(((n, row) for n, row in enumerate(ds, start=1)), source=source,
                             stem=Path(name).name or "hf", bad=bad,
                             **{k: mapping[k] for k in ("question_field", "reference_field",
                                                        "alias_separator", "id_field",
                                                        "choices_field")})
    if not items:
        raise InvalidInputError("no usable records", file=source)
    mapping.update(split=split, hf_config=hf_config, load_kwargs=load_kwargs)
    return _finish_user_task(Path(name).name or name, items, mapping, data_file=source,
                             sha=getattr(ds, "_fingerprint", None), bad=bad,
                             default_fewshot=default_fewshot, long_form=long_form)
