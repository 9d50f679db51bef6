"""Tasks: built-in tasks load well-formed items; prompts; user data; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from confide.errors import InvalidInputError, UnknownNameError
from confide.grading import GRADERS
from confide.records import Item
from confide.tasks import TASKS, Task, load_task


@pytest.mark.parametrize("name", sorted(TASKS))
def test_builtin_task_loads_well_formed_items(name):
    task = load_task(name)
    assert isinstance(task, Task) and len(task.items) > 0
    assert task.grader in GRADERS
    ids = [it.id for it in task.items]
    assert len(ids) == len(set(ids))
    assert not {it.id for it in task.fewshot} & set(ids)
    fewshot_prompts = {ex.prompt for ex in task.fewshot if isinstance(ex.prompt, str)}
    for it in task.items:
        assert isinstance(it, Item)
        assert isinstance(it.prompt, str) and it.prompt.strip()
        assert it.references and all(isinstance(r, str) and r for r in it.references)
        assert it.prompt not in fewshot_prompts
    json.dumps(task.config())
    assert task.describe() == {"name": name, "size": len(task.items), "format": task.format,
                               "grader": task.grader}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_builtin_task_renders_chat_and_completion(name):
    task = load_task(name, limit=3)
    for it in task.items:
        msgs = task.render(it, chat=True)
        assert isinstance(msgs, list) and msgs[-1]["role"] == "user"
        assert all(set(m) == {"role", "content"} for m in msgs)
        text = task.render(it, chat=False)
        assert isinstance(text, str)
        # exemplars come before the evaluated question, which comes last
        assert text.rstrip().endswith(task.render(it, chat=False).rstrip().splitlines()[-1])


def test_triviaqa_items_and_prompts():
    task = load_task("triviaqa", limit=2)
    first = task.items[0]
    assert first.id == "triviaqa-0"
    assert first.prompt == "Brunswick, Lancastrian and Pearl Pickler are types of which vegetable?"
    assert first.references[0] == "Onion" and "Allium cepa" in first.references
    assert task.grader == "contains" and task.stop == ["\n"] and task.max_new_tokens == 32
    msgs = task.render(first, chat=True)
    assert msgs == [{"role": "user", "content": "Answer the question with a few words only, "
                     "no explanation.\n\nQuestion: " + first.prompt}]
    text = task.render(first, chat=False)
    assert text.endswith("Question: " + first.prompt + "\nAnswer:")
    assert text.count("Question:") == 6  # 5 exemplars + the item
    assert "Brunswick" not in text.split("\n\n")[0]


def test_triviaqa_full_file_drops_exemplars_and_hashes_data(tmp_path):
    src = load_task("triviaqa").config()
    lines = Path(src["data_file"]).read_text(encoding="utf-8").splitlines()
    fewshot = load_task("triviaqa").fewshot
    ex_line = json.dumps({"context": f"Question: {fewshot[0].prompt}\nAnswer:",
                          "answer": "Bonn", "aliases": ["Bonn"]})
    path = tmp_path / "full.jsonl"
    path.write_text("\n".join([*lines[:3], ex_line]) + "\n", encoding="utf-8")
    task = load_task("triviaqa", data_path=str(path))
    assert [it.id for it in task.items] == ["triviaqa-0", "triviaqa-1", "triviaqa-2"]
    assert task.config()["options"]["excluded_as_exemplars"] == 1
    before = task.config()["data_sha256"]
    path.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    assert load_task("triviaqa", data_path=str(path)).config()["data_sha256"] != before


def test_load_task_limit_and_common_options():
    task = load_task("triviaqa", limit=4, num_fewshot=2, max_new_tokens=8,
                     prompt_template="Q: {{ question }}\nA:")
    assert len(task.items) == 4 and task.max_new_tokens == 8
    assert task.render(task.items[0], chat=False).count("Q: ") == 3
    assert task.render(task.items[0], chat=True)[-1]["content"] == f"Q: {task.items[0].prompt}\nA:"
    assert task.config()["options"]["prompt_template"] == "Q: {{ question }}\nA:"


def test_load_task_rejects_bad_options():
    with pytest.raises(InvalidInputError, match="num_fewshot"):
        load_task("triviaqa", num_fewshot=99)
    with pytest.raises(InvalidInputError, match="unknown option"):
        load_task("triviaqa", colour="blue")
    with pytest.raises(InvalidInputError, match="limit"):
        load_task("triviaqa", limit=0)
    with pytest.raises(InvalidInputError, match="prompt_template"):
        load_task("triviaqa", prompt_template="{{ question")
    with pytest.raises(InvalidInputError, match="prompt_template"):
        load_task("triviaqa", prompt_template={"chat": "{{ nope }}"}).render(
            Item("x", "q", ["a"]), chat=True)


def test_load_task_unknown_name_suggests():
    with pytest.raises(UnknownNameError, match="Did you mean 'triviaqa'"):
        load_task("trivia")


def test_task_rejects_exemplars_overlapping_items():
    it = Item("a", "q?", ["x"])
    with pytest.raises(InvalidInputError, match="overlap"):
        Task(name="t", items=[it], grader="exact", fewshot=[it])


# -- user data ----------------------------------------------------------------------


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_user_jsonl_default_mapping(tmp_path):
    p = write(tmp_path / "file.jsonl",
              '{"question": "2+2?", "references": ["4", "four"]}\n\n'
              '{"question": "Capital of France?", "references": "Paris", "topic": "geo"}\n')
    task = load_task(p)
    assert [it.id for it in task.items] == ["file-1", "file-3"]
    assert task.items[0].references == ["4", "four"]
    assert task.items[1].metadata == {"topic": "geo"}
    assert task.grader == "contains" and task.format == "open_qa"
    assert task.config()["data_sha256"]


def test_user_jsonl_malformed_line_names_file_line_field(tmp_path):
    p = write(tmp_path / "file.jsonl",
              '{"question": "a", "references": ["x"]}\n{"question": "b", "references": ["y"]}\n'
              '{"question": "c", "references": \n')
    with pytest.raises(InvalidInputError, match=r"file.jsonl:3: record: malformed JSON"):
        load_task(p)


def test_user_jsonl_missing_question_field(tmp_path):
    p = write(tmp_path / "file.jsonl", '{"question": "a"}\n{"q": "b"}\n{"question": "c"}\n')
    with pytest.raises(InvalidInputError, match=r"file.jsonl:2: question: missing question"):
        load_task(p)


def test_user_jsonl_empty_question_names_item(tmp_path):
    p = write(tmp_path / "file.jsonl", '{"id": "a1", "question": "ok"}\n{"id": "b2", "question": "  "}\n')
    with pytest.raises(InvalidInputError, match=r"file.jsonl:2: question: item 'b2': empty"):
        load_task(p)


def test_user_jsonl_skip_bad_records_counts_them(tmp_path):
    p = write(tmp_path / "file.jsonl",
              '{"question": "a", "references": ["x"]}\nnot json\n{"question": ""}\n'
              '{"question": "d", "references": ["z"]}\n')
    task = load_task(p, on_bad_record="skip")
    assert [it.prompt for it in task.items] == ["a", "d"]
    assert [where for where, _ in task.skipped] == [f"{p}:2", f"{p}:3"]
    assert task.config()["skipped"] == 2
    with pytest.raises(InvalidInputError, match="on_bad_record"):
        load_task(p, on_bad_record="ignore")
