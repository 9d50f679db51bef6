"""Built-in tasks over the public data sets bundled (as samples) under ``tasks/data/``.

Each loader reads the bundled sample by default; ``data_path=`` points it at
the full upstream file in the same format. Few-shot exemplars come from a
separate pool (a bundled exemplar file or the data set's dev split) and are
removed from the evaluated items if the full file also contains them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confide.errors import InvalidInputError
from confide.records import Item
from confide.tasks.base import DATA_DIR, BadRecords, Task, file_sha256, pop_options, task
from confide.tasks.files import iter_jsonl

__all__: list[str] = []


def _data_file(default: Path, data_path: str | None) -> Path:
    p = Path(data_path) if data_path is not None else default
    if not p.exists():
        raise InvalidInputError("no such file", file=str(p), field="data_path")
    return p


def _drop_exemplars(items: list[Item], fewshot: list[Item]) -> tuple[list[Item], int]:
    questions = {ex.prompt for ex in fewshot if isinstance(ex.prompt, str)}
    kept = [it for it in items if it.prompt not in questions]
    return kept, len(items) - len(kept)


# ---------------------------------------------------------------------------
# TriviaQA

_TQA_DIR = DATA_DIR / "triviaqa"
_TQA_PREFIX, _TQA_SUFFIX = "Question:", "Answer:"


def _triviaqa_items(path: Path, bad: BadRecords, id_prefix: str) -> list[Item]:
    items = []
    for line, rec in iter_jsonl(path, bad):
        def err(msg: str, fld: str) -> InvalidInputError:
            return InvalidInputError(msg, file=str(path), line=line, field=fld)

        context = rec.get("context")
        if not isinstance(context, str):
            bad.bad(err("missing or not text", "context"))
            continue
        text = context.strip()
        if not (text.startswith(_TQA_PREFIX) and text.endswith(_TQA_SUFFIX)):
            bad.bad(err("expected 'Question: ...\\nAnswer:'", "context"))
            continue
        question = text[len(_TQA_PREFIX): -len(_TQA_SUFFIX)].strip()
        item_id = f"{id_prefix}-{line - 1}"
        if not question:
            bad.bad(err(f"item {item_id!r}: empty question", "context"))
            continue
        answer, aliases = rec.get("answer"), rec.get("aliases", [])
        if not isinstance(answer, str) or not answer.strip():
            bad.bad(err(f"item {item_id!r}: missing answer", "answer"))
            continue
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            bad.bad(err(f"item {item_id!r}: aliases must be a list of strings", "aliases"))
            continue
        refs = list(dict.fromkeys([answer, *aliases]))
        items.append(Item(id=item_id, prompt=question, references=refs))
    return items


@task("triviaqa", format="open_qa", grader="contains",
      source="Joshi et al. 2017, TriviaQA (MosaicML Eval Gauntlet subsample, Apache-2.0)")
def triviaqa(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """TriviaQA open-domain trivia questions; references are the answer and its aliases.

    Bundled: the first 500 of the 3,000-question Eval Gauntlet subsample
    (``triviaqa_sm_sub.jsonl``); ``data_path`` reads the full file. Item id
    ``triviaqa-<0-based line index>``. Five exemplars (the file's last five
    questions) form the few-shot pool.
    """
    pop_options(options, {}, "triviaqa")
    path = _data_file(_TQA_DIR / "triviaqa_sm_sub.head500.jsonl", data_path)
    fewshot = _triviaqa_items(_TQA_DIR / "fewshot.jsonl", BadRecords("raise"),
                              "triviaqa-fewshot")
    items, dropped = _drop_exemplars(_triviaqa_items(path, bad, "triviaqa"), fewshot)
    return Task(name="triviaqa", items=items, grader="contains", max_new_tokens=32,
                stop=["\n"], format="open_qa", fewshot=fewshot, num_fewshot=5,
                data_file=str(path.resolve()), data_sha256=file_sha256(path),
                options={"excluded_as_exemplars": dropped}, skipped=list(bad.skipped),
                source="Joshi et al. 2017, TriviaQA")
