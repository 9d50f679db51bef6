"""Attach correctness labels from a file to a stored run, as a grade of their own name.

``confide label RUN LABELS.jsonl --name human`` (:func:`label_run`) reads one JSON
object per line, ``{"id": "q1", "label": 1}``, and stores each label as the grade
``human`` of the record with that item id. Nothing else stored changes: the grades
are added in one transaction, each record's stored text keeps its scores and other
grades byte for byte, and hidden states are not touched. Then ``confide eval RUN
--grader human``, ``confide calibrate RUN --grader human`` and ``confide abstain RUN
--grader human`` read them as any grader's.

The file is checked whole before anything is written; the first problem is refused
with ``file:line: field:``: a line that is not a JSON object, a missing or
non-text/integer id, an id the run does not hold, an id given twice, a label that
is not a number (``true``/``false`` included: write 1 or 0), not finite or outside
:math:`[0, 1]`. A name the run already has grades of, or the name of a registered
grader, is refused too (labels never overwrite grades). Records the file does not
name stay without the grade (``eval`` reads the labelled ones).

A run logged by ``confide serve --log-run`` is labelled by the record id each reply
names (``confide.record_id``, header ``X-Confide-Record-Id``); the reply's own ``id``
(``chatcmpl-...``, kept in the record's ``metadata["request"]["reply_id"]``) is taken
as another name of the same record.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Record
from confide.core.unicode import lone_surrogate, lone_surrogate_message, may_escape_surrogate
from confide.grading import GRADERS
from confide.runs.stored import Run
from confide.store.run_store import RunStore

__all__ = ["label_run", "read_labels"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_labels(path: str | Path, known: set[str], *, id_field: str = "id",
                label_field: str = "label", aliases: dict[str, str] | None = None
                ) -> dict[str, float]:
    """The labels of a JSON Lines file, item id → correctness in [0, 1], checked.

    ``known``: the item ids that may be labelled; ``aliases``: other names of them
    (a served reply's id → its record's id). Raises
    :class:`~confide.core.errors.InvalidInputError` naming ``file:line: field:`` for the
    first bad line (see the module's notes); blank lines are ignored.
    """
    p = Path(path)
    source = str(p)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=source) from exc
    labels: dict[str, float] = {}
    first_line: dict[str, int] = {}
    with fh:
        for n, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InvalidInputError("not UTF-8 text", file=source, line=n,
                                        field="encoding") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                raise InvalidInputError(f"malformed JSON ({detail})", file=source, line=n,
                                        field="record") from None
            if not isinstance(obj, dict):
                raise InvalidInputError(f"expected a JSON object, got {type(obj).__name__}",
                                        file=source, line=n, field="record")
            if may_escape_surrogate(text) and (found := lone_surrogate(obj)) is not None:
                raise InvalidInputError(lone_surrogate_message(found[1]), file=source, line=n,
                                        field=found[0])
            item_id = _item_id(obj, id_field, source, n)
            if item_id not in known and aliases and item_id in aliases:
                item_id = aliases[item_id]
            if item_id not in known:
                raise InvalidInputError(f"no record with id {item_id!r} in the run",
                                        file=source, line=n, field=id_field)
            if item_id in labels:
                raise InvalidInputError(f"duplicate id {item_id!r} (first on line "
                                        f"{first_line[item_id]})", file=source, line=n,
                                        field=id_field)
            labels[item_id] = _label(obj, label_field, source, n)
            first_line[item_id] = n
    if not labels:
        raise InvalidInputError("no labels (the file has no JSON object lines)", file=source)
    return labels


def _item_id(obj: dict[str, Any], field: str, source: str, line: int) -> str:
    if field not in obj or obj[field] is None:
        raise InvalidInputError("missing", file=source, line=line, field=field)
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidInputError(f"an id must be text or an integer, not {value!r}",
                                file=source, line=line, field=field)
    return str(value)


def _label(obj: dict[str, Any], field: str, source: str, line: int) -> float:
    if field not in obj:
        raise InvalidInputError("missing", file=source, line=line, field=field)
    value = obj[field]
    if isinstance(value, bool):
        raise InvalidInputError(f"must be a number in [0, 1], not {json.dumps(value)} "
                                "(write 1 or 0)", file=source, line=line, field=field)
    if not _is_number(value):
        raise InvalidInputError(f"must be a number in [0, 1], not {json.dumps(value)}",
                                file=source, line=line, field=field)
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidInputError(f"must be a number in [0, 1], not {value!r}", file=source,
                                line=line, field=field)
    return number


def _reply_ids(records: list[Record]) -> dict[str, str]:
    """The reply ids of a served run's records (``confide serve --log-run``) → record ids."""
    found: dict[str, str] = {}
    for record in records:
        request = record.item.metadata.get("request")
        reply = request.get("reply_id") if isinstance(request, dict) else None
        if isinstance(reply, str) and reply:
            found[reply] = record.item.id
    return found


def label_run(run: Run | str | Path, path: str | Path, *, name: str = "human",
              id_field: str = "id", label_field: str = "label") -> int:
    """Store the labels of ``path`` as grade ``name`` of ``run``'s records; how many.

    Parameters
    ----------
    run : a stored run or its directory.
    path : JSON Lines, one ``{id_field: item id, label_field: correctness}`` per line;
        correctness a number in :math:`[0, 1]` (1 right, 0 wrong).
    name : the grade's name (``confide eval --grader NAME``); not one the run already
        has, nor a registered grader's.
    id_field, label_field : the fields read.

    Returns
    -------
    int
        The number of records labelled.

    Raises
    ------
    InvalidInputError
        A bad name, or a bad line of the file (``file:line: field:``); nothing is
        written.
    StoreError
        ``run`` is not a run.
    """
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise InvalidInputError(f"must be a name without surrounding spaces, not {name!r}",
                                field="name")
    if name in GRADERS:
        raise InvalidInputError(f"{name!r} is a registered grader; give the labels a name "
                                "of their own (e.g. human)", field="name")
    directory = run.path if isinstance(run, Run) else Path(run)
    with RunStore.open(directory) as store:
        records = store.records()
        graded = {g for r in records for g in r.grades}
        if name in graded:
            raise InvalidInputError(f"the run at {directory} already has {name!r} grades; "
                                    "choose another name", field="name")
        labels = read_labels(path, {r.item.id for r in records}, id_field=id_field,
                             label_field=label_field, aliases=_reply_ids(records))
        return store.add_grades(name, labels)
