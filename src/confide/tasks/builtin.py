"""Built-in tasks over the public data sets bundled (as samples) under ``tasks/data/``.

Each loader reads the bundled sample by default; ``data_path=`` points it at
the full upstream file in the same format. Few-shot exemplars come from a
separate pool (a bundled exemplar file or the data set's dev split). An item of
the full file equal to an exemplar stays in the run, and that exemplar is left out
of its own prompt (:meth:`~confide.tasks.base.Task.exemplars`); the option
``excluded_as_exemplars`` counts such items.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Item
from confide.tasks.base import (
    DATA_DIR,
    LETTERS,
    BadRecords,
    Task,
    equal_to_exemplars,
    file_sha256,
    pop_options,
    task,
)
from confide.tasks.prompts import FORMATS, SHORT_ANSWER
from confide.tasks.readers import iter_csv, iter_jsonl

__all__ = ["BFCL_CATEGORIES", "mmlu_subjects", "triviaqa_exemplars"]


def _data_file(default: Path, data_path: str | None) -> Path:
    p = Path(data_path) if data_path is not None else default
    if not p.exists():
        raise InvalidInputError("no such file", file=str(p), field="data_path")
    if p.is_dir() != default.is_dir():
        want = "a directory" if default.is_dir() else "a file"
        raise InvalidInputError(f"this task reads {want} here, not "
                                f"{'a directory' if p.is_dir() else 'a file'}", file=str(p),
                                field="data_path")
    return p


# ---------------------------------------------------------------------------
# TriviaQA

_TQA_DIR = DATA_DIR / "triviaqa"
_TQA_PREFIX, _TQA_SUFFIX = "Question:", "Answer:"


def _triviaqa_items(path: Path, bad: BadRecords, id_prefix: str) -> list[Item]:
    items = []
    for line, rec in iter_jsonl(path, bad):
        def err(msg: str, fld: str, line: int = line) -> InvalidInputError:
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


def triviaqa_exemplars() -> list[Item]:
    """TriviaQA's five bundled exemplars (the full file's last five questions): the k-shot
    prompt of TriviaQA and, by default, of a user's short-answer QA file
    (:mod:`confide.tasks.files`)."""
    return _triviaqa_items(_TQA_DIR / "fewshot.jsonl", BadRecords("raise"), "triviaqa-fewshot")


@task("triviaqa", format="open_qa", grader="contains",
      source="Joshi et al. 2017, TriviaQA (MosaicML Eval Gauntlet subsample, Apache-2.0)")
def triviaqa(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """TriviaQA open-domain trivia questions; references are the answer and its aliases.

    Bundled: the first 500 of the 3,000-question Eval Gauntlet subsample
    (``triviaqa_sm_sub.jsonl``); ``data_path`` reads the full file. Item id
    ``triviaqa-<0-based line index>``. Five exemplars (the full file's last five
    questions) form the few-shot pool; read from the full file, those five
    questions are items too, each prompted with the other four. Every model,
    instruct or base, gets the 5-shot completion prompt
    (:data:`~confide.tasks.prompts.SHORT_ANSWER`), so answers are a few words.
    """
    pop_options(options, {}, "triviaqa")
    path = _data_file(_TQA_DIR / "triviaqa_sm_sub.head500.jsonl", data_path)
    fewshot = triviaqa_exemplars()
    items = _triviaqa_items(path, bad, "triviaqa")
    return Task(name="triviaqa", items=items, grader="contains", max_new_tokens=32,
                stop=["\n"], format="open_qa", templates=dict(SHORT_ANSWER),
                fewshot=fewshot, num_fewshot=5,
                data_file=str(path.resolve()), data_sha256=file_sha256(path),
                options={"excluded_as_exemplars": equal_to_exemplars(items, fewshot)},
                skipped=list(bad.skipped), source="Joshi et al. 2017, TriviaQA")


def _head_and_fewshot(path: Path, fewshot_path: Path, parse: Any, bad: BadRecords,
                      prefix: str) -> tuple[list[Item], list[Item], int]:
    """The items, the exemplar pool and how many items equal an exemplar."""
    fewshot = parse(fewshot_path, BadRecords("raise"), f"{prefix}-fewshot")
    items = parse(path, bad, prefix)
    return items, fewshot, equal_to_exemplars(items, fewshot)


# ---------------------------------------------------------------------------
# GSM8K

_GSM_DIR = DATA_DIR / "gsm8k"
_CALC = re.compile(r"<<[^>]*>>")


def _gsm8k_items(path: Path, bad: BadRecords, id_prefix: str) -> list[Item]:
    items = []
    for line, rec in iter_jsonl(path, bad):
        def err(msg: str, fld: str, line: int = line) -> InvalidInputError:
            return InvalidInputError(msg, file=str(path), line=line, field=fld)

        item_id = f"{id_prefix}-{line - 1}"
        question, solution = rec.get("question"), rec.get("answer")
        if not isinstance(question, str) or not question.strip():
            bad.bad(err(f"item {item_id!r}: missing or empty question", "question"))
            continue
        if not isinstance(solution, str) or "####" not in solution:
            bad.bad(err(f"item {item_id!r}: expected a worked solution ending '#### N'", "answer"))
            continue
        final = solution.rsplit("####", 1)[1].strip().replace(",", "")
        if not final:
            bad.bad(err(f"item {item_id!r}: empty final answer after '####'", "answer"))
            continue
        worked = _CALC.sub("", solution.rsplit("####", 1)[0]).strip()
        items.append(Item(id=item_id, prompt=question.strip(), references=[final],
                          metadata={"solution": solution,
                                    "exemplar_answer": f"{worked}\n#### {final}"}))
    return items


@task("gsm8k", format="reasoning", grader="numeric",
      source="Cobbe et al. 2021, GSM8K (MIT)")
def gsm8k(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """GSM8K grade-school maths: step-by-step reasoning, final number after ``####``.

    Bundled: the first 300 of the 1,319 test problems; ``data_path`` reads the
    full ``test.jsonl``. References hold the final number (commas removed);
    ``metadata["solution"]`` the worked solution. The few-shot pool is the last
    8 test problems (calculator annotations ``<<...>>`` removed); read from the
    full file, each of them is an item whose prompt takes the next exemplar instead.
    """
    pop_options(options, {}, "gsm8k")
    path = _data_file(_GSM_DIR / "test.head300.jsonl", data_path)
    items, fewshot, equal = _head_and_fewshot(path, _GSM_DIR / "fewshot.jsonl", _gsm8k_items,
                                              bad, "gsm8k")
    return Task(name="gsm8k", items=items, grader="numeric", max_new_tokens=256,
                stop=["\n\nQuestion:", "\n\nProblem:"], format="reasoning", fewshot=fewshot,
                num_fewshot=4, data_file=str(path.resolve()), data_sha256=file_sha256(path),
                options={"excluded_as_exemplars": equal}, skipped=list(bad.skipped),
                source="Cobbe et al. 2021, GSM8K")


# ---------------------------------------------------------------------------
# TruthfulQA

_TFQA_DIR = DATA_DIR / "truthfulqa"
_TFQA_COLUMNS = ("Type", "Category", "Question", "Best Answer", "Correct Answers",
                 "Incorrect Answers")


def _split_answers(text: str) -> list[str]:
    return [a.strip() for a in text.split(";") if a.strip()]


def _truthfulqa_items(path: Path, bad: BadRecords, id_prefix: str) -> list[Item]:
    items = []
    for row, (line, rec) in enumerate(iter_csv(path, bad)):
        missing = [c for c in _TFQA_COLUMNS if c not in rec]
        if missing:
            raise InvalidInputError(f"missing column(s) {missing}", file=str(path), line=1,
                                    field="header")
        item_id = f"{id_prefix}-{row}"
        question = rec["Question"].strip()
        if not question:
            bad.bad(InvalidInputError(f"item {item_id!r}: empty question", file=str(path),
                                      line=line, field="Question"))
            continue
        correct = list(dict.fromkeys([rec["Best Answer"].strip(),
                                      *_split_answers(rec["Correct Answers"])]))
        correct = [c for c in correct if c]
        if not correct:
            bad.bad(InvalidInputError(f"item {item_id!r}: no correct answers", file=str(path),
                                      line=line, field="Correct Answers"))
            continue
        items.append(Item(id=item_id, prompt=question, references=correct, metadata={
            "incorrect": _split_answers(rec["Incorrect Answers"]),
            "type": rec["Type"], "category": rec["Category"],
            "source": rec.get("Source", "")}))
    return items


@task("truthfulqa", format="generation", grader="rougeL",
      source="Lin, Hilton & Evans 2022, TruthfulQA (Apache-2.0)")
def truthfulqa(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """TruthfulQA generation: references are the correct answers, incorrect ones in metadata.

    Bundled: the first 300 of 817 questions; ``data_path`` reads the full
    ``TruthfulQA.csv``. ``references`` = best answer then the other correct
    answers; ``metadata["incorrect"]`` = incorrect answers. The few-shot pool
    is 4 plain factual Q/A pairs written for confide (not from TruthfulQA).
    Lexical graders are weak on this task; prefer ``embedding`` or a judge.
    """
    pop_options(options, {}, "truthfulqa")
    path = _data_file(_TFQA_DIR / "TruthfulQA.head300.csv", data_path)
    fewshot = _jsonl_exemplars(_TFQA_DIR / "fewshot.jsonl", "truthfulqa-fewshot")
    items = _truthfulqa_items(path, bad, "truthfulqa")
    equal = equal_to_exemplars(items, fewshot)
    return Task(name="truthfulqa", items=items, grader="rougeL", max_new_tokens=64,
                stop=["\n"], format="generation", fewshot=fewshot, num_fewshot=4,
                data_file=str(path.resolve()), data_sha256=file_sha256(path),
                options={"excluded_as_exemplars": equal}, skipped=list(bad.skipped),
                source="Lin, Hilton & Evans 2022, TruthfulQA")


def _jsonl_exemplars(path: Path, id_prefix: str) -> list[Item]:
    return [Item(id=f"{id_prefix}-{n - 1}", prompt=rec["question"],
                 references=list(rec["references"]))
            for n, rec in iter_jsonl(path, BadRecords("raise"))]


# ---------------------------------------------------------------------------
# multiple choice: MMLU, CommonsenseQA, ARC-Easy, BoolQ

_MC_KEYS = ("query", "choices", "gold")


def _mc_item(item_id: str, question: str, choices: list[str], gold: int,
             metadata: dict[str, Any] | None = None) -> Item:
    letter = LETTERS[gold]
    return Item(id=item_id, prompt=question, references=[letter, choices[gold]],
                metadata={"choices": choices, "exemplar_answer": letter, **(metadata or {})})


def _check_gold(rec: dict[str, Any], n_choices: int) -> bool:
    gold = rec.get("gold")
    return isinstance(gold, int) and not isinstance(gold, bool) and 0 <= gold < n_choices


_CSQA = re.compile(r"Question: (?P<q>.*)\nChoices:\n(?P<opts>(?:[A-Z]\. .*\n)+)Answer:", re.S)


def _gauntlet_mc_items(kind: str) -> Any:
    """A parser for MosaicML-format multiple-choice JSONL (``query``, ``choices``, ``gold``)."""

    def parse(path: Path, bad: BadRecords, id_prefix: str) -> list[Item]:
        items = []
        for line, rec in iter_jsonl(path, bad):
            def err(msg: str, fld: str, line: int = line) -> InvalidInputError:
                return InvalidInputError(msg, file=str(path), line=line, field=fld)

            item_id = f"{id_prefix}-{line - 1}"
            missing = [k for k in _MC_KEYS if k not in rec]
            if missing:
                bad.bad(err(f"item {item_id!r}: missing field", missing[0]))
                continue
            query, choices = rec["query"], rec["choices"]
            if not isinstance(query, str) or not query.strip():
                bad.bad(err(f"item {item_id!r}: empty question", "query"))
                continue
            if kind == "commonsense_qa":  # options are written into the query
                m = _CSQA.fullmatch(query.strip())
                if m is None:
                    bad.bad(err(f"item {item_id!r}: expected 'Question: ...\\nChoices:\\nA. ..."
                                "\\nAnswer:'", "query"))
                    continue
                question = m["q"].strip()
                choices = [o[3:].strip() for o in m["opts"].strip().split("\n")]
            else:
                question = query.strip()
                if question.endswith("Answer:"):
                    question = question[: -len("Answer:")].rstrip()
                if kind == "arc" and question.startswith("Question:"):
                    question = question[len("Question:"):].strip()
            if not isinstance(choices, list) or len(choices) < 2 or not all(
                    isinstance(c, str) and c.strip() for c in choices):
                bad.bad(err(f"item {item_id!r}: need at least two non-empty choices", "choices"))
                continue
            if not _check_gold(rec, len(choices)):
                bad.bad(err(f"item {item_id!r}: must be a choice index < {len(choices)}", "gold"))
                continue
            items.append(_mc_item(item_id, question, [c.strip() for c in choices], rec["gold"]))
        return items

    return parse


def _mc_task(name: str, directory: str, filename: str, kind: str, data_path: str | None,
             bad: BadRecords, num_fewshot: int, source: str) -> Task:
    d = DATA_DIR / directory
    path = _data_file(d / filename, data_path)
    items, fewshot, equal = _head_and_fewshot(path, d / "fewshot.jsonl",
                                              _gauntlet_mc_items(kind), bad, name)
    return Task(name=name, items=items, grader="choice", max_new_tokens=16, stop=["\n"],
                format="multiple_choice", fewshot=fewshot, num_fewshot=num_fewshot,
                data_file=str(path.resolve()), data_sha256=file_sha256(path),
                options={"excluded_as_exemplars": equal}, skipped=list(bad.skipped),
                source=source)


@task("commonsense_qa", format="multiple_choice", grader="choice",
      source="Talmor et al. 2019, CommonsenseQA (MIT)")
def commonsense_qa(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """CommonsenseQA dev: five-way multiple choice answered with a letter.

    Bundled: the first 300 of 1,221 items (Eval Gauntlet format; the options
    are parsed out of the query). Few-shot pool: the file's last 5 items.
    """
    pop_options(options, {}, "commonsense_qa")
    return _mc_task("commonsense_qa", "commonsense_qa", "commonsense_qa.head300.jsonl",
                    "commonsense_qa", data_path, bad, 5, "Talmor et al. 2019, CommonsenseQA")


@task("arc_easy", format="multiple_choice", grader="choice",
      source="Clark et al. 2018, ARC (CC BY-SA 4.0)")
def arc_easy(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """ARC-Easy test: grade-school science multiple choice answered with a letter.

    Bundled: the first 300 of 2,376 items. Few-shot pool: the file's last 5 items.
    """
    pop_options(options, {}, "arc_easy")
    return _mc_task("arc_easy", "arc", "arc_easy.head300.jsonl", "arc", data_path, bad, 5,
                    "Clark et al. 2018, ARC-Easy")


@task("boolq", format="multiple_choice", grader="choice",
      source="Clark et al. 2019, BoolQ (CC BY-SA 3.0)")
def boolq(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """BoolQ dev: a passage and a yes/no question, as a two-way choice (A. no, B. yes).

    Bundled: the first 300 of 3,270 items. References are the letter and the
    word (``["B", "yes"]``), so ``choice`` accepts either. Few-shot pool: the
    file's last 5 items (2 used by default; passages are long).
    """
    pop_options(options, {}, "boolq")
    return _mc_task("boolq", "boolq", "boolq.head300.jsonl", "boolq", data_path, bad, 2,
                    "Clark et al. 2019, BoolQ")


_MMLU_DIR = DATA_DIR / "mmlu"
_MMLU_COLUMNS = ["question", "choice0", "choice1", "choice2", "choice3", "answer"]


def _mmlu_file_items(path: Path, subject: str, bad: BadRecords, id_prefix: str) -> list[Item]:
    items = []
    for row, (line, rec) in enumerate(iter_csv(path, bad)):
        if list(rec) != _MMLU_COLUMNS:
            raise InvalidInputError(f"expected columns {_MMLU_COLUMNS}, got {list(rec)}",
                                    file=str(path), line=1, field="header")
        item_id = f"{id_prefix}-{subject}-{row}"

        def err(msg: str, fld: str, line: int = line) -> InvalidInputError:
            return InvalidInputError(msg, file=str(path), line=line, field=fld)

        if not rec["question"].strip():
            bad.bad(err(f"item {item_id!r}: empty question", "question"))
            continue
        choices = [rec[f"choice{i}"].strip() for i in range(4)]
        answer = rec["answer"].strip()
        if answer not in ("0", "1", "2", "3"):
            bad.bad(err(f"item {item_id!r}: must be 0-3, not {answer!r}", "answer"))
            continue
        items.append(_mc_item(item_id, rec["question"].strip(), choices, int(answer),
                              {"subject": subject}))
    return items


def mmlu_subjects(data_dir: Path | None = None) -> list[str]:
    """The MMLU subjects available in ``data_dir/test`` (default: the bundled sample)."""
    d = (data_dir or _MMLU_DIR) / "test"
    return sorted(p.name[: -len("_test.csv")] for p in d.glob("*_test.csv"))


@task("mmlu", format="multiple_choice", grader="choice",
      source="Hendrycks et al. 2021, MMLU (MIT)")
def mmlu(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """MMLU: four-way multiple choice over 57 subjects, few-shot exemplars from dev.

    Bundled: the first 5 test questions of each subject (285) and the full dev
    split (5 per subject, the exemplar pool). ``data_path`` is a directory with
    ``test/<subject>_test.csv`` and ``dev/<subject>_dev.csv`` (header row,
    0-based answer index). Option ``subject``: one name or a list (default all).
    Exemplars for an item come from its own subject's dev questions.
    """
    opts = pop_options(options, {"subject": None}, "mmlu")
    root = _data_file(_MMLU_DIR, data_path)
    if not (root / "test").is_dir() or not (root / "dev").is_dir():
        raise InvalidInputError("expected a directory with test/ and dev/", file=str(root),
                                field="data_path")
    available = mmlu_subjects(root)
    subjects = opts["subject"]
    if subjects is None:
        subjects = available
    elif isinstance(subjects, str):
        subjects = [subjects]
    for s in subjects:
        if s not in available:
            close = difflib.get_close_matches(str(s), available, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise InvalidInputError(f"unknown MMLU subject {s!r}.{hint} Known: "
                                    f"{', '.join(available)}", field="subject")
    items: list[Item] = []
    fewshot: list[Item] = []
    for s in subjects:
        items += _mmlu_file_items(root / "test" / f"{s}_test.csv", s, bad, "mmlu")
        dev = root / "dev" / f"{s}_dev.csv"
        if dev.is_file():
            fewshot += _mmlu_file_items(dev, s, BadRecords("raise"), "mmlu-dev")
    # Counted only when some item equals an exemplar: the identity of earlier runs.
    equal = equal_to_exemplars(items, fewshot, "subject")
    return Task(name="mmlu", items=items, grader="choice", max_new_tokens=16, stop=["\n"],
                format="multiple_choice", fewshot=fewshot, num_fewshot=5, fewshot_key="subject",
                templates=_MMLU_TEMPLATES, data_file=str(root.resolve()),
                data_sha256=file_sha256(root),
                options={"subject": opts["subject"],
                         **({"excluded_as_exemplars": equal} if equal else {})},
                skipped=list(bad.skipped), source="Hendrycks et al. 2021, MMLU")


_MMLU_TEMPLATES = {
    **FORMATS["multiple_choice"],
    "header": "The following are multiple choice questions (with answers) about "
              "{{ metadata.subject | replace('_', ' ') }}.\n\n",
}


# ---------------------------------------------------------------------------
# BFCL

_BFCL_DIR = DATA_DIR / "bfcl"
BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
                   "live_multiple", "live_parallel", "live_parallel_multiple")


def _bfcl_items(path: Path, answers: Path, category: str, bad: BadRecords) -> list[Item]:
    truth: dict[str, Any] = {}
    for line, rec in iter_jsonl(answers, bad):
        if not isinstance(rec.get("id"), str) or not isinstance(rec.get("ground_truth"), list):
            bad.bad(InvalidInputError("expected 'id' and a 'ground_truth' list",
                                      file=str(answers), line=line, field="ground_truth"))
            continue
        truth[rec["id"]] = rec["ground_truth"]
    items = []
    for line, rec in iter_jsonl(path, bad):
        def err(msg: str, fld: str, line: int = line) -> InvalidInputError:
            return InvalidInputError(msg, file=str(path), line=line, field=fld)

        item_id = rec.get("id")
        if not isinstance(item_id, str):
            bad.bad(err("missing id", "id"))
            continue
        turns = rec.get("question")
        if not (isinstance(turns, list) and turns and isinstance(turns[0], list)
                and all(isinstance(m, dict) and "role" in m and "content" in m
                        for m in turns[0])):
            bad.bad(err(f"item {item_id!r}: expected [[{{role, content}}, ...]]", "question"))
            continue
        messages = [{"role": m["role"], "content": m["content"]} for m in turns[0]]
        users = [m["content"] for m in messages if m["role"] == "user"]
        if not users or not users[-1].strip():
            bad.bad(err(f"item {item_id!r}: empty question", "question"))
            continue
        tools = rec.get("function")
        if not isinstance(tools, list) or not tools:
            bad.bad(err(f"item {item_id!r}: missing function schemas", "function"))
            continue
        if item_id not in truth:
            bad.bad(err(f"item {item_id!r}: no ground truth in {answers.name}", "id"))
            continue
        system = "\n".join(m["content"] for m in messages if m["role"] == "system")
        items.append(Item(
            id=f"bfcl-{item_id}", prompt=users[-1],
            references=[json.dumps(truth[item_id], ensure_ascii=False)],
            metadata={"tools": tools, "ground_truth": truth[item_id], "category": category,
                      "messages": messages, **({"system": system} if system else {})}))
    return items


@task("bfcl", format="function_calling", grader="ast",
      source="Patil et al. 2025, Berkeley Function Calling Leaderboard v4 (Apache-2.0)")
def bfcl(*, data_path: str | None = None, bad: BadRecords, **options: Any) -> Task:
    """BFCL v4 single-turn function calling: the request plus tool schemas; AST-matched calls.

    Bundled: the first 100 ``simple_python`` and 50 each of ``multiple``,
    ``parallel``, ``parallel_multiple`` and ``live_simple`` (300), with their
    ``possible_answer/`` ground truth. ``data_path`` is a directory in the
    upstream layout (``BFCL_v4_<category>.json`` and
    ``possible_answer/BFCL_v4_<category>.json``, JSON Lines). Option
    ``category``: one name or a list (default: all present of
    ``BFCL_CATEGORIES``). ``metadata["tools"]`` holds the schemas,
    ``metadata["ground_truth"]`` the allowed calls (``[{func: {arg: [allowed
    values]}}]``; ``""`` among the values marks an optional argument). No
    few-shot exemplars.
    """
    opts = pop_options(options, {"category": None}, "bfcl")
    root = _data_file(_BFCL_DIR, data_path)
    present = [c for c in BFCL_CATEGORIES if (root / f"BFCL_v4_{c}.json").is_file()
               and (root / "possible_answer" / f"BFCL_v4_{c}.json").is_file()]
    cats = opts["category"]
    cats = present if cats is None else [cats] if isinstance(cats, str) else list(cats)
    for c in cats:
        if c not in present:
            raise InvalidInputError(f"category {c!r} not available in {root}; available: "
                                    f"{', '.join(present)}", field="category")
    items: list[Item] = []
    for c in cats:
        items += _bfcl_items(root / f"BFCL_v4_{c}.json",
                             root / "possible_answer" / f"BFCL_v4_{c}.json", c, bad)
    return Task(name="bfcl", items=items, grader="ast", max_new_tokens=256, stop=[],
                format="function_calling", data_file=str(root.resolve()),
                data_sha256=file_sha256(root), options={"category": opts["category"]},
                skipped=list(bad.skipped), source="Patil et al. 2025, BFCL v4")
