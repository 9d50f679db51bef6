"""Tasks: built-in tasks load well-formed items; prompts; user data; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from confide.core.errors import InvalidInputError, UnknownNameError
from confide.core.records import Item
from confide.grading import GRADERS
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
    bare = load_task(name, limit=3, num_fewshot=0)
    for it in task.items:
        msgs = task.render(it, chat=True)
        if task.templates["chat"] is None:  # short answers: k-shot completion for every model
            assert msgs == task.render(it, chat=False)
            continue
        assert isinstance(msgs, list) and msgs[-1]["role"] == "user"
        assert all(set(m) == {"role", "content"} for m in msgs)
        assert it.prompt in msgs[-1]["content"]
        assert sum(m["role"] == "user" for m in msgs) == task.chat_fewshot + 1
        text = task.render(it, chat=False)
        exemplars = task.exemplars(it, task.num_fewshot)
        assert len(exemplars) == task.num_fewshot
        # the exemplars come first, in order, then the evaluated question ...
        starts = [text.index(ex.prompt) for ex in exemplars] + [text.rindex(it.prompt)]
        assert starts == sorted(set(starts))
        # ... and what follows the question is what follows it without exemplars
        tail = text[starts[-1]:]
        assert bare.render(it, chat=False).endswith(tail) and tail.strip() != it.prompt.strip()


def test_triviaqa_items_and_prompts():
    task = load_task("triviaqa", limit=2)
    first = task.items[0]
    assert first.id == "triviaqa-0"
    assert first.prompt == "Brunswick, Lancastrian and Pearl Pickler are types of which vegetable?"
    assert first.references[0] == "Onion" and "Allium cepa" in first.references
    assert task.grader == "contains" and task.stop == ["\n"] and task.max_new_tokens == 32
    text = task.render(first, chat=False)
    assert text.endswith("Question: " + first.prompt + "\nAnswer:")
    assert text.count("Question:") == 6  # 5 exemplars + the item
    assert "Brunswick" not in text.split("\n\n")[0]
    # instruct models get the same 5-shot completion prompt (short answers, measured in
    # benchmarks/prompting.py), the exemplars answered with their first reference
    assert task.render(first, chat=True) == text
    assert text.startswith("Question: What was the capital of West Germany from 1949 to 1990?"
                           "\nAnswer: Bonn\n\n")
    assert {ex.id for ex in task.fewshot}.isdisjoint(it.id for it in load_task("triviaqa").items)
    # a chat template of the user's own gives the chat prompt back
    chat = load_task("triviaqa", limit=1, prompt_template={"chat": "Q: {{ question }}"})
    assert chat.render(first, chat=True) == [{"role": "user", "content": "Q: " + first.prompt}]


def test_triviaqa_full_file_keeps_items_equal_to_exemplars_and_hashes_data(tmp_path):
    src = load_task("triviaqa").config()
    lines = Path(src["data_file"]).read_text(encoding="utf-8").splitlines()
    fewshot = load_task("triviaqa").fewshot
    ex_line = json.dumps({"context": f"Question: {fewshot[0].prompt}\nAnswer:",
                          "answer": "Bonn", "aliases": ["Bonn"]})
    path = tmp_path / "full.jsonl"
    path.write_text("\n".join([*lines[:3], ex_line]) + "\n", encoding="utf-8")
    task = load_task("triviaqa", data_path=str(path))
    assert [it.id for it in task.items] == ["triviaqa-0", "triviaqa-1", "triviaqa-2",
                                            "triviaqa-3"]
    assert task.config()["options"]["excluded_as_exemplars"] == 1
    # its own exemplar is left out of its prompt: the other four remain, no answer given
    own = task.render(task.items[3], chat=False)
    assert own.count("Question:") == 5 and "Bonn" not in own
    assert own.endswith(f"Question: {fewshot[0].prompt}\nAnswer:")
    assert task.render(task.items[0], chat=False).count(fewshot[0].prompt) == 1
    # counted over the items a limit keeps
    assert load_task("triviaqa", data_path=str(path), limit=3).options[
        "excluded_as_exemplars"] == 0
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
    p = write(tmp_path / "file.jsonl",
              '{"id": "a1", "question": "ok"}\n{"id": "b2", "question": "  "}\n')
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


def test_user_csv_mapping_aliases_and_bad_row(tmp_path):
    p = write(tmp_path / "qa.csv",
              'id,q,answer,alt\n'
              'a,"Capital of\nFrance?",Paris,Paree/City of Light\n'
              'b,Largest planet?,Jupiter,\n')
    task = load_task(p, question_field="q", reference_field=["answer", "alt"],
                     alias_separator="/", grader="exact", max_new_tokens=8)
    assert [it.id for it in task.items] == ["a", "b"]
    assert task.items[0].prompt == "Capital of\nFrance?"
    assert task.items[0].references == ["Paris", "Paree", "City of Light"]
    assert task.items[1].references == ["Jupiter"]
    assert task.grader == "exact" and task.max_new_tokens == 8
    bad = write(tmp_path / "bad.csv", 'question,references\n"multi\nline",x\nq2,y,extra\n')
    with pytest.raises(InvalidInputError, match=r"bad.csv:4: record: 3 fields"):
        load_task(bad)
    with pytest.raises(InvalidInputError, match=r"qa.csv:2: nope: item 'a': missing reference"):
        load_task(p, question_field="q", reference_field="nope")


def test_user_parquet_and_multiple_choice_mapping(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"question": ["Sky colour?", "Two plus two?"],
                      "options": [["red", "blue"], ["3", "4", "5"]],
                      "gold": ["blue", "B"]})
    path = tmp_path / "mc.parquet"
    pq.write_table(table, path)
    task = load_task(str(path), reference_field="gold", choices_field="options")
    assert task.format == "multiple_choice" and task.grader == "choice"
    assert [it.references for it in task.items] == [["B", "blue"], ["B", "4"]]
    assert task.render(task.items[1], chat=False) == "Two plus two?\nA. 3\nB. 4\nC. 5\nAnswer:"
    with pytest.raises(InvalidInputError, match=r"mc.parquet:1: nope: missing question"):
        load_task(str(path), question_field="nope")


def test_user_chat_message_prompts(tmp_path):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    p = write(tmp_path / "chat.jsonl", json.dumps({"question": msgs}) + "\n")
    task = load_task(p)
    assert task.render(task.items[0], chat=True) == msgs
    assert task.render(task.items[0], chat=False) == "Question: Hi?\nAnswer:"
    assert task.items[0].references == []


def test_user_file_errors(tmp_path):
    with pytest.raises(InvalidInputError, match="missing.jsonl: no such file"):
        load_task(str(tmp_path / "missing.jsonl"))
    p = write(tmp_path / "empty.jsonl", "\n")
    with pytest.raises(InvalidInputError, match="no usable records"):
        load_task(p)
    p = write(tmp_path / "dup.jsonl", '{"id": 1, "question": "a"}\n{"id": 1, "question": "b"}\n')
    with pytest.raises(InvalidInputError, match=r"dup.jsonl:2: id: duplicate id '1'"):
        load_task(p)
    p = write(tmp_path / "arr.jsonl", '[1, 2]\n')
    with pytest.raises(InvalidInputError, match=r"arr.jsonl:1: record: expected a JSON object"):
        load_task(p)
    with pytest.raises(InvalidInputError, match="data_path"):
        load_task(p, data_path="x")


def test_hf_datasets_json_offline(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    data = write(tmp_path / "d.jsonl", '{"question": "2+2?", "answer": "4"}\n'
                                       '{"question": "Capital of Peru?", "answer": "Lima"}\n')
    task = load_task("hf:json", split="train", reference_field="answer",
                     load_kwargs={"data_files": data, "cache_dir": str(tmp_path / "cache")})
    assert [it.prompt for it in task.items] == ["2+2?", "Capital of Peru?"]
    assert task.items[1].references == ["Lima"] and task.data_sha256
    # a dataset saved to disk
    ds = datasets.Dataset.from_dict({"question": ["a?", ""], "references": [["x"], ["y"]]})
    ds.save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(InvalidInputError, match=r"saved\[test\]:2: question: item 'saved-2'"):
        load_task(f"hf:{tmp_path / 'saved'}")
    task = load_task(f"hf:{tmp_path / 'saved'}", on_bad_record="skip")
    assert len(task.items) == 1 and len(task.skipped) == 1


# -- built-in task specifics ----------------------------------------------------------


def test_gsm8k_references_and_exemplars_grade_correct():
    from confide.grading import grade

    task = load_task("gsm8k")
    assert task.items[0].references == ["18"] and task.max_new_tokens >= 256
    for it in task.items + task.fewshot:
        assert grade(it.metadata["exemplar_answer"], it, "numeric") == 1.0
        assert "<<" not in it.metadata["exemplar_answer"]
    text = task.render(task.items[0], chat=False)
    assert text.count("####") == 4 and text.endswith("Answer:")
    assert "####" in task.render(task.items[0], chat=True)[0]["content"]


def test_truthfulqa_correct_and_incorrect_references():
    task = load_task("truthfulqa", limit=1)
    it = task.items[0]
    assert it.references[0] == "The watermelon seeds pass through your digestive system"
    assert "You grow watermelons in your stomach" in it.metadata["incorrect"]
    assert not set(it.references) & set(it.metadata["incorrect"])


@pytest.mark.parametrize("name", ["mmlu", "commonsense_qa", "arc_easy", "boolq"])
def test_multiple_choice_items_grade_their_reference(name):
    from confide.grading import choice

    task = load_task(name)
    assert task.grader == "choice"
    for it in task.items:
        letter, text = it.references
        assert it.metadata["choices"][ord(letter) - 65] == text
        assert choice(letter, it) == 1.0
        text_rendered = task.render(it, chat=False)
        assert f"\n{letter}. " in text_rendered and text_rendered.endswith("Answer:")


def test_boolq_and_commonsense_formats():
    assert load_task("boolq", limit=1).items[0].metadata["choices"] == ["no", "yes"]
    it = load_task("commonsense_qa", limit=1).items[0]
    assert it.prompt.startswith("A revolving door") and it.metadata["choices"][0] == "bank"


def test_mmlu_subject_filter_and_same_subject_exemplars():
    task = load_task("mmlu", subject="anatomy")
    assert {it.metadata["subject"] for it in task.items} == {"anatomy"} and len(task.items) == 5
    text = task.render(task.items[0], chat=False)
    assert text.startswith("The following are multiple choice questions (with answers) "
                           "about anatomy.")
    assert all(ex.metadata["subject"] == "anatomy" for ex in task.exemplars(task.items[0], 5))
    assert text.count("Answer:") == 6
    both = load_task("mmlu", subject=["anatomy", "virology"])
    assert len(both.items) == 10
    with pytest.raises(InvalidInputError, match="Did you mean 'anatomy'"):
        load_task("mmlu", subject="anatomi")


def is_spec(value):
    return isinstance(value, dict) and value and all(isinstance(x, list) for x in value.values())


def first_allowed(spec):
    """A concrete call built from the first allowed value of each non-optional argument."""
    out = {}
    for key, allowed in spec.items():
        value = next((v for v in allowed if v != ""), "")
        if value == "":
            continue  # optional, omitted
        if is_spec(value):
            value = first_allowed(value)
        elif isinstance(value, list):
            value = [first_allowed(v) if is_spec(v) else v for v in value]
        out[key] = value
    return out


def test_bfcl_items_tools_and_ground_truth_self_match():
    from confide.grading import ast_match

    task = load_task("bfcl")
    assert {it.metadata["category"] for it in task.items} == {
        "simple_python", "multiple", "parallel", "parallel_multiple", "live_simple"}
    for it in task.items:
        assert it.metadata["tools"] and json.loads(it.references[0]) == it.metadata["ground_truth"]
        calls = [{"name": name, "arguments": first_allowed(args)}
                 for call in it.metadata["ground_truth"] for name, args in call.items()]
        assert ast_match(json.dumps(calls), it) == 1.0, it.id
    msgs = task.render(task.items[0], chat=True)
    assert msgs[0]["role"] == "system" and "calculate_triangle_area" in msgs[0]["content"]
    assert msgs[-1] == {"role": "user", "content": task.items[0].prompt}
    assert len(load_task("bfcl", category="parallel").items) == 50
    with pytest.raises(InvalidInputError, match="category"):
        load_task("bfcl", category="multi_turn")


# Every record of the file is an item: those the built-in exemplars are taken from stay
# too, each prompted without its own exemplar (options["excluded_as_exemplars"] counts them).
FULL = {
    "triviaqa": ("triviaqa/triviaqa_sm_sub.jsonl", 3000),
    "gsm8k": ("gsm8k/test.jsonl", 1319),
    "truthfulqa": ("truthfulqa/TruthfulQA.csv", 817),
    "mmlu": ("mmlu", 14042),
    "commonsense_qa": ("commonsense_qa/commonsense_qa.jsonl", 1221),
    "arc_easy": ("arc/arc_easy.jsonl", 2376),
    "boolq": ("boolq/boolq.jsonl", 3270),
    "bfcl": ("bfcl", 400 + 200 + 200 + 200 + 258 + 1053 + 16 + 24),
}


@pytest.mark.parametrize("name", sorted(FULL))
def test_builtin_task_reads_full_shared_file(name, full_data):
    rel, size = FULL[name]
    assert (full_data / rel).exists(), f"full data file missing: {full_data / rel}"
    task = load_task(name, data_path=str(full_data / rel))
    assert len(task.items) == size and not task.skipped


def test_every_builtin_task_is_tested_on_full_data():
    assert set(FULL) == set(TASKS)


def test_bfcl_full_ground_truth_self_match_json_and_python(full_data):
    from confide.grading import ast_match

    assert (full_data / "bfcl").exists(), f"full data folder missing: {full_data / 'bfcl'}"
    for it in load_task("bfcl", data_path=str(full_data / "bfcl")).items:
        calls = [(name, first_allowed(args))
                 for call in it.metadata["ground_truth"] for name, args in call.items()]
        as_json = json.dumps([{"name": n, "arguments": a} for n, a in calls])
        as_python = "[" + ", ".join(
            f"{n}(" + ", ".join(f"{k}={v!r}" for k, v in a.items()) + ")" for n, a in calls) + "]"
        assert ast_match(as_json, it) == 1.0, it.id
        assert ast_match(as_python, it) == 1.0, it.id


def test_user_json_array_file(tmp_path):
    p = write(tmp_path / "arr.json", json.dumps([{"question": "a?", "references": ["x"]},
                                                 {"question": "b?", "references": ["y"]}]))
    task = load_task(p)
    assert [it.id for it in task.items] == ["arr-1", "arr-2"]
    p = write(tmp_path / "lines.json", '{"question": "a?"}\n{"question": "b?"}\n')
    assert len(load_task(p).items) == 2
    p = write(tmp_path / "broken.json", '[{"question": "a?"},\n {"question": }]')
    with pytest.raises(InvalidInputError, match=r"broken.json:2: record: malformed JSON"):
        load_task(p)


def test_mmlu_num_fewshot_checked_per_subject():
    assert load_task("mmlu", subject="anatomy", num_fewshot=5).num_fewshot == 5
    with pytest.raises(InvalidInputError, match="num_fewshot"):
        load_task("mmlu", subject="anatomy", num_fewshot=6)
    with pytest.raises(InvalidInputError, match="num_fewshot"):
        load_task("triviaqa", num_fewshot=True)


def test_describe_tasks_lists_every_builtin():
    from confide.tasks import describe_tasks

    rows = describe_tasks()
    assert [r["name"] for r in rows] == sorted(TASKS)
    assert all(r["size"] > 0 and r["grader"] in GRADERS and r["summary"] and r["source"]
               for r in rows)
