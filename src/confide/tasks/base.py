"""The task interface: :class:`Task` (items + prompt format + default grader) and its registry.

A built-in task is a loader function registered with :func:`task`; it returns a
:class:`Task`. ``load_task`` (in ``confide.tasks``) looks the name up in
:data:`TASKS` or, failing that, reads a user data file.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Item, Message
from confide.core.registry import Registry
from confide.tasks.prompts import FORMATS, render_template

__all__ = ["DATA_DIR", "TASKS", "BadRecords", "Task", "TaskSpec", "check_fewshot",
           "equal_to_exemplars", "file_sha256", "pop_options", "task"]

DATA_DIR = Path(__file__).parent / "data"
LETTERS = string.ascii_uppercase


@dataclass
class Task:
    """A loaded task: its items, prompt format, default grader and generation budget.

    ``fewshot`` is the exemplar pool for k-shot prompts; its ids never overlap
    ``items``. With ``fewshot_key`` set (e.g. ``"subject"``), an item's
    exemplars are the first ones whose ``metadata[fewshot_key]`` equals its own.
    An item whose question equals an exemplar's stays in the run; that exemplar is
    left out of its own prompt (:meth:`exemplars`), counted by
    :func:`equal_to_exemplars`.
    ``skipped`` lists ``(where, reason)`` for records dropped with
    ``on_bad_record="skip"``.
    """

    name: str
    items: list[Item]
    grader: str
    max_new_tokens: int = 32
    stop: list[str] = field(default_factory=lambda: ["\n"])
    format: str = "open_qa"
    templates: dict[str, str | None] = field(default_factory=dict)
    fewshot: list[Item] = field(default_factory=list)
    num_fewshot: int = 0
    chat_fewshot: int = 0
    fewshot_key: str | None = None
    data_file: str | None = None
    data_sha256: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    source: str = ""

    def __post_init__(self) -> None:
        if not self.templates:
            self.templates = dict(FORMATS[self.format])
        fewshot_ids = {it.id for it in self.fewshot}
        clash = [it.id for it in self.items if it.id in fewshot_ids]
        if clash:
            raise InvalidInputError(f"few-shot exemplars overlap evaluated items: {clash[:5]}",
                                    field="fewshot")

    def __len__(self) -> int:
        return len(self.items)

    # -- prompts -----------------------------------------------------------------

    def _variables(self, item: Item, *, answer: str = "") -> dict[str, Any]:
        question = item.question
        choices = list(item.metadata.get("choices", []))
        tools = item.metadata.get("tools")
        return {
            "question": question,
            "choices": choices,
            "letters": list(LETTERS[: len(choices)]),
            "answer": answer,
            "tools": json.dumps(tools, ensure_ascii=False, indent=1) if tools else "",
            "metadata": item.metadata,
            "id": item.id,
        }

    def _exemplar_answer(self, item: Item) -> str:
        return str(item.metadata.get("exemplar_answer", item.references[0] if item.references
                                     else ""))

    def render(self, item: Item, *, chat: bool) -> str | list[Message]:
        """The prompt for ``item``: chat messages if ``chat`` else a completion string.

        Parameters
        ----------
        item : Item
            One of this task's items (or any item of the same shape).
        chat : bool
            True for an instruct model with a chat template: returns a list of
            ``{"role", "content"}`` messages (optional system message, then
            ``chat_fewshot`` exemplar turns, then the question). False for a
            base model: returns one string with ``num_fewshot`` exemplars from
            :attr:`fewshot` followed by the question. A task whose ``chat``
            template is None (TriviaQA: measured shorter answers) gives every
            model that string.

        Returns
        -------
        str or list of dict
            The prompt, ready for the backend.
        """
        t = self.templates
        variables = self._variables(item)
        header_template, chat_template = t.get("header"), t.get("chat")
        header = render_template(header_template, variables) if header_template else ""
        if chat and chat_template is None and isinstance(item.prompt, str):
            chat = False  # a format without a chat template prompts every model k-shot
        if chat:
            if not isinstance(item.prompt, str):  # the user's own chat messages
                return [dict(m) for m in item.prompt]
            assert chat_template is not None  # a text prompt without one went k-shot above
            messages: list[Message] = []
            system = t.get("system")
            if system:
                messages.append({"role": "system",
                                 "content": render_template(system, variables)})
            for ex in self.exemplars(item, self.chat_fewshot):
                messages.append({"role": "user", "content": render_template(
                    chat_template, self._variables(ex))})
                ans = self._exemplar_answer(ex)
                messages.append({"role": "assistant", "content": render_template(
                    t["target"] or "{{ answer }}", self._variables(ex, answer=ans)).strip()})
            messages.append({"role": "user", "content": render_template(chat_template,
                                                                        variables)})
            first_user = next(m for m in messages if m["role"] == "user")
            first_user["content"] = header + first_user["content"]
            return messages
        completion = t["completion"]
        if completion is None:
            raise InvalidInputError("a completion prompt needs a 'completion' template",
                                    field="prompt_template")
        parts = []
        for ex in self.exemplars(item, self.num_fewshot):
            v = self._variables(ex, answer=self._exemplar_answer(ex))
            parts.append(render_template(completion, v)
                         + render_template(t["target"] or "", v))
        parts.append(render_template(completion, variables))
        return header + (t["separator"] or "\n\n").join(parts)

    def exemplars(self, item: Item, k: int) -> list[Item]:
        """The first ``k`` exemplars for ``item`` (same ``fewshot_key`` value when set),
        never one with the item's own question: a prompt that held the answer would
        make the item trivial, so the next exemplar of the pool takes its place, or the
        item gets one shot fewer when the pool has no other."""
        if k <= 0:
            return []
        pool = self.fewshot
        if self.fewshot_key is not None:
            key = item.metadata.get(self.fewshot_key)
            pool = [ex for ex in pool if ex.metadata.get(self.fewshot_key) == key]
        return [ex for ex in pool if not _same_question(ex, item)][:k]

    # -- descriptions ---------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Short description for listings: name, size, format, grader."""
        return {"name": self.name, "size": len(self.items), "format": self.format,
                "grader": self.grader}

    def config(self) -> dict[str, Any]:
        """JSON-safe description stored with a run.

        Includes the data file's path and the sha256 of its contents (so a run
        resumed on a changed file is detected), the templates, the few-shot
        exemplar ids, the options and a hash of the selected item ids.
        """
        ids = "\n".join(it.id for it in self.items)
        return {
            "name": self.name,
            "format": self.format,
            "grader": self.grader,
            "size": len(self.items),
            "item_ids_sha256": hashlib.sha256(ids.encode()).hexdigest(),
            "max_new_tokens": self.max_new_tokens,
            "stop": list(self.stop),
            "templates": dict(self.templates),
            "num_fewshot": self.num_fewshot,
            "chat_fewshot": self.chat_fewshot,
            "fewshot_key": self.fewshot_key,
            "fewshot_ids": sorted({ex.id for it in self.items
                                   for ex in self.exemplars(it, max(self.num_fewshot,
                                                                    self.chat_fewshot))}),
            "data_file": self.data_file,
            "data_sha256": self.data_sha256,
            "options": _json_safe(self.options),
            "skipped": len(self.skipped),
        }


def _same_question(a: Item, b: Item) -> bool:
    return isinstance(a.prompt, str) and a.prompt == b.prompt


def equal_to_exemplars(items: list[Item], fewshot: list[Item], key: str | None = None) -> int:
    """How many of ``items`` ask the question of an exemplar of their pool (the same
    ``metadata[key]`` when ``key`` is given, as :attr:`Task.fewshot_key`). Each keeps its
    place in the run and :meth:`Task.exemplars` leaves that exemplar out of its prompt;
    loaders store the count as the option ``excluded_as_exemplars`` (an exemplar excluded
    from the prompt of that many items).

    >>> equal_to_exemplars([Item("a", "Capital of Peru?"), Item("b", "2 + 2?")],
    ...                    [Item("fewshot-0", "2 + 2?", ["4"])])
    1
    """
    def pool(it: Item) -> Any:
        return None if key is None else it.metadata.get(key)

    questions = {(pool(ex), ex.prompt) for ex in fewshot if isinstance(ex.prompt, str)}
    return sum(isinstance(it.prompt, str) and (pool(it), it.prompt) in questions
               for it in items)


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, sort_keys=True))


# ---------------------------------------------------------------------------
# registry


@dataclass(frozen=True)
class TaskSpec:
    """A registered built-in task: name, loader, prompt format, default grader, summary."""

    name: str
    loader: Callable[..., Task]
    format: str
    grader: str
    summary: str = ""
    source: str = ""


TASKS: Registry[TaskSpec] = Registry("task")


def task(name: str, *, format: str, grader: str, source: str = ""
         ) -> Callable[[Callable[..., Task]], Callable[..., Task]]:
    """Register ``loader(*, data_path=None, **options) -> Task`` as built-in task ``name``."""

    def decorate(fn: Callable[..., Task]) -> Callable[..., Task]:
        doc = (fn.__doc__ or "").strip()
        TASKS.add(name, TaskSpec(name=name, loader=fn, format=format, grader=grader,
                                 summary=doc.splitlines()[0] if doc else "", source=source))
        return fn

    return decorate


# ---------------------------------------------------------------------------
# helpers shared by loaders


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, or of the sorted (name, sha256) list of a directory's files."""
    p = Path(path)
    if p.is_dir():
        h = hashlib.sha256()
        for f in sorted(q for q in p.rglob("*") if q.is_file()):
            h.update(f"{f.relative_to(p).as_posix()}\0{file_sha256(f)}\n".encode())
        return h.hexdigest()
    h = hashlib.sha256()
    with p.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class BadRecords:
    """Collects bad records: raises at once (``"raise"``) or skips and counts (``"skip"``)."""

    def __init__(self, policy: str = "raise") -> None:
        if policy not in ("raise", "skip"):
            raise InvalidInputError(f"must be 'raise' or 'skip', not {policy!r}",
                                    field="on_bad_record")
        self.policy = policy
        self.skipped: list[tuple[str, str]] = []

    def bad(self, error: InvalidInputError) -> None:
        """Raise ``error``, or record it when skipping."""
        if self.policy == "raise":
            raise error
        where = ("?" if error.file is None else error.file if error.line is None
                 else f"{error.file}:{error.line}")
        # The location is kept apart, so a listing does not print it twice.
        self.skipped.append((where, str(error).removeprefix(f"{where}: ")))


def pop_options(options: dict[str, Any], allowed: dict[str, Any], task_name: str
                ) -> dict[str, Any]:
    """Take the ``allowed`` options (name → default) from ``options``; reject any left over."""
    taken = {k: options.pop(k, default) for k, default in allowed.items()}
    if options:
        raise InvalidInputError(
            f"unknown option(s) {sorted(options)} for task {task_name!r}; "
            f"known: {sorted(allowed)}", field="options")
    return taken


def check_fewshot(num_fewshot: int, task: Task) -> None:
    """Reject a negative count, or more exemplars than some item of ``task`` can get."""
    if not isinstance(num_fewshot, int) or isinstance(num_fewshot, bool) or num_fewshot < 0:
        raise InvalidInputError(f"must be a non-negative integer, not {num_fewshot!r}",
                                field="num_fewshot")
    if num_fewshot == 0:
        return
    if task.fewshot_key is None:
        available = len(task.fewshot)
    else:
        counts: dict[Any, int] = {}
        for ex in task.fewshot:
            key = ex.metadata.get(task.fewshot_key)
            counts[key] = counts.get(key, 0) + 1
        available = min((counts.get(it.metadata.get(task.fewshot_key), 0) for it in task.items),
                        default=0)
    if num_fewshot > available:
        raise InvalidInputError(f"task {task.name!r} has only {available} few-shot exemplars "
                                f"for some items, {num_fewshot} asked", field="num_fewshot")
