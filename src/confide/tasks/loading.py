"""Loading a task by registered name, data file or ``hf:<name>``, with the options every
task takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError, UnknownNameError
from confide.tasks import builtin  # noqa: F401  (registers the built-in tasks)
from confide.tasks.base import TASKS, BadRecords, Task, check_fewshot, equal_to_exemplars
from confide.tasks.files import SUFFIXES, load_hf_dataset, load_user_file
from confide.tasks.prompts import FORMATS, resolve_templates

__all__ = ["LONG_FORM_TOKENS", "describe_tasks", "load_task"]

_COMMON = ("long_form", "prompt_template", "num_fewshot", "chat_fewshot", "max_new_tokens")
#: Answer budget of a long-form task (``long_form=True``) unless ``max_new_tokens`` is given.
LONG_FORM_TOKENS = 160


def load_task(name_or_path: str, *, limit: int | None = None, data_path: str | None = None,
              on_bad_record: str = "raise", **options: Any) -> Task:
    """Load a task by registered name, data file path, or ``hf:<dataset name>``.

    Parameters
    ----------
    name_or_path : str
        A name in :data:`TASKS`, a path to a ``.jsonl``/``.csv``/``.parquet``
        file, or ``hf:<name>`` for a Hugging Face dataset (needs the ``data``
        extra).
    limit : int, optional
        Keep only the first ``limit`` items (in file order). An item equal to a
        few-shot exemplar is kept too; that exemplar is left out of its prompt, and
        ``Task.options["excluded_as_exemplars"]`` counts such items.
    data_path : str, optional
        For a built-in task: the full data file to read instead of the bundled
        sample (same format).
    on_bad_record : {"raise", "skip"}, default "raise"
        ``"raise"`` stops at the first bad record with an
        :class:`~confide.core.errors.InvalidInputError` naming file, line and field;
        ``"skip"`` skips bad records and lists them in ``Task.skipped``.
    **options
        Common: ``long_form`` (True: ask for a paragraph, the ``long_form``
        prompt format, stop at a blank line, budget :data:`LONG_FORM_TOKENS`;
        the answers are then graded claim by claim, :mod:`confide.runs.claims`),
        ``prompt_template`` (str or dict of templates, see
        :mod:`confide.tasks.prompts`), ``num_fewshot`` (exemplars in completion
        prompts), ``chat_fewshot`` (exemplar turns in chat prompts),
        ``max_new_tokens``. Task-specific ones (``subject`` for ``mmlu``, the
        field mapping and ``prompt``/``fewshot`` for user files: k-shot with
        TriviaQA's exemplars for short-answer QA by default, see
        :mod:`confide.tasks.files`, ...) are documented by each loader.
        Unknown options raise.

    Returns
    -------
    Task

    Raises
    ------
    UnknownNameError
        Not a registered task, not an existing data file, not ``hf:``.
    InvalidInputError
        Bad record, bad option, or no usable items.
    """
    common = {k: options.pop(k) for k in _COMMON if k in options}
    bad = BadRecords(on_bad_record)
    if name_or_path in TASKS:
        spec = TASKS[name_or_path]
        result = spec.loader(data_path=data_path, bad=bad, **options)
    else:
        if data_path is not None:
            raise InvalidInputError("only applies to built-in tasks", field="data_path")
        if Path(name_or_path).is_dir():
            raise InvalidInputError("is a directory; --task takes a task name (confide tasks) "
                                    f"or a data file ({', '.join(SUFFIXES)})", file=name_or_path)
        if name_or_path.startswith("hf:"):
            result = load_hf_dataset(name_or_path[3:], on_bad_record=on_bad_record,
                                     default_fewshot=builtin.triviaqa_exemplars,
                                     long_form=bool(common.get("long_form")), **options)
        elif Path(name_or_path).suffix.lower() in SUFFIXES and Path(name_or_path).is_file():
            result = load_user_file(name_or_path, on_bad_record=on_bad_record,
                                    default_fewshot=builtin.triviaqa_exemplars,
                                    long_form=bool(common.get("long_form")), **options)
        elif Path(name_or_path).suffix.lower() in SUFFIXES:
            raise InvalidInputError("no such file", file=name_or_path)
        else:
            raise UnknownNameError(TASKS._unknown_message(name_or_path)
                                   + f"; nor a data file ({', '.join(SUFFIXES)}) or hf:<name>")
    if not result.items:  # an empty run would "succeed" with nothing to show
        skipped = f"; {len(result.skipped)} bad record(s) skipped" if result.skipped else ""
        raise InvalidInputError(f"no usable records{skipped}",
                                file=result.data_file or name_or_path)
    _apply_common(result, common)
    if limit is not None:
        if not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"must be a positive integer, not {limit!r}", field="limit")
        result.items = result.items[:limit]
        result.options["limit"] = limit
        if "excluded_as_exemplars" in result.options:  # of the items the run keeps
            result.options["excluded_as_exemplars"] = equal_to_exemplars(
                result.items, result.fewshot, result.fewshot_key)
    return result


def _apply_common(t: Task, common: dict[str, Any]) -> None:
    if common.get("long_form"):
        t.format, t.templates = "long_form", dict(FORMATS["long_form"])
        t.stop, t.max_new_tokens = ["\n\n"], LONG_FORM_TOKENS
        t.options["long_form"] = True
    if "prompt_template" in common:
        t.templates = resolve_templates(t.format, common["prompt_template"], base=t.templates)
        t.options["prompt_template"] = common["prompt_template"]
    for key in ("num_fewshot", "chat_fewshot"):
        if key in common:
            check_fewshot(common[key], t)
            setattr(t, key, common[key])
    if "max_new_tokens" in common:
        n = common["max_new_tokens"]
        if not isinstance(n, int) or n < 1:
            raise InvalidInputError(f"must be a positive integer, not {n!r}",
                                    field="max_new_tokens")
        t.max_new_tokens = n


def describe_tasks() -> list[dict[str, Any]]:
    """One row per built-in task (bundled sample): name, size, format, grader, source, summary.

    What ``confide tasks`` lists.
    """
    rows = []
    for spec in TASKS.values():
        row = load_task(spec.name).describe()
        row.update(source=spec.source, summary=spec.summary)
        rows.append(row)
    return rows
