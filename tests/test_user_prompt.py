"""A user's open-domain QA file: k-shot by default (short answers), --fewshot, --prompt."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from confide.core.errors import InvalidInputError
from confide.tasks import load_task
from confide.tasks.builtin import triviaqa_exemplars

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faultserver import FaultServer  # noqa: E402


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


QA = [{"id": "q1", "question": "What is the capital of France?", "references": ["Paris"]},
      {"id": "q2", "question": "Who wrote Hamlet?", "references": ["William Shakespeare"]},
      {"id": "q3", "question": "How many legs does a spider have?", "references": [8]}]


@pytest.fixture
def qa_file(tmp_path) -> str:
    return _write(tmp_path / "my.jsonl", QA)


def test_user_prompt_kshot_by_default_with_triviaqa_exemplars(qa_file):
    task = load_task(qa_file)
    exemplars = triviaqa_exemplars()
    item = task.items[0]
    text = task.render(item, chat=True)  # an instruct model gets the completion prompt too
    assert text == task.render(item, chat=False)
    assert isinstance(text, str) and text.endswith(
        "Question: What is the capital of France?\nAnswer:")
    assert text.count("\nAnswer:") == 6 and task.num_fewshot == 5
    for ex in exemplars:
        assert f"Question: {ex.prompt}\nAnswer: {ex.references[0]}\n\n" in text
    assert [it.id for it in task.items] == ["q1", "q2", "q3"]
    config = task.config()
    assert config["options"]["prompt"] == "kshot" and config["templates"]["chat"] is None
    assert config["fewshot_ids"] == sorted(ex.id for ex in exemplars)
    assert task.stop == ["\n"] and task.grader == "contains"


def test_user_prompt_explicit_kshot_equals_auto(qa_file):
    auto, kshot = load_task(qa_file), load_task(qa_file, prompt="kshot")
    assert auto.render(auto.items[1], chat=True) == kshot.render(kshot.items[1], chat=True)


def test_user_prompt_fewshot_file_exemplars_never_in_their_own_prompt(tmp_path, qa_file):
    fewshot = _write(tmp_path / "shots.jsonl", [
        {"id": "e1", "question": "What is the capital of Italy?", "references": ["Rome"]},
        {"id": "e2", "question": "Who wrote Hamlet?", "references": ["Shakespeare"]}])
    task = load_task(qa_file, fewshot=fewshot)
    assert [it.id for it in task.items] == ["q1", "q2", "q3"]  # q2 asks e2's question
    text = task.render(task.items[0], chat=True)
    assert text == ("Question: What is the capital of Italy?\nAnswer: Rome\n\n"
                    "Question: Who wrote Hamlet?\nAnswer: Shakespeare\n\n"
                    "Question: What is the capital of France?\nAnswer:")
    assert "Bonn" not in text  # not TriviaQA's exemplars
    # q2 is asked without the exemplar that answers it: one shot fewer
    assert task.render(task.items[1], chat=True) == (
        "Question: What is the capital of Italy?\nAnswer: Rome\n\n"
        "Question: Who wrote Hamlet?\nAnswer:")
    options = task.config()["options"]
    assert options["fewshot"] == fewshot and options["excluded_as_exemplars"] == 1
    assert len(options["fewshot_sha256"]) == 64
    assert {ex.id for ex in task.fewshot} == {"fewshot:e1", "fewshot:e2"}
    # with chat, the exemplars become chat turns
    chat = load_task(qa_file, fewshot=fewshot, prompt="chat")
    messages = chat.render(chat.items[0], chat=True)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2 + ["user"]
    assert messages[1]["content"] == "Rome"


def test_user_prompt_fewshot_file_errors(tmp_path, qa_file):
    with pytest.raises(InvalidInputError, match="nope.jsonl: fewshot: no such file"):
        load_task(qa_file, fewshot=str(tmp_path / "nope.jsonl"))
    unanswered = _write(tmp_path / "shots.jsonl", [{"id": "e1", "question": "Why?"}])
    with pytest.raises(InvalidInputError, match="shots.jsonl: references: exemplar 'e1'"):
        load_task(qa_file, fewshot=unanswered)
    # the data as its own exemplars: every item is prompted with the others
    itself = load_task(qa_file, fewshot=qa_file)
    assert len(itself.items) == 3 and itself.options["excluded_as_exemplars"] == 3
    assert all(itself.render(it, chat=False).count("Question:") == 3 for it in itself.items)


def test_user_prompt_chat_gives_chat_messages(qa_file):
    task = load_task(qa_file, prompt="chat")
    assert task.render(task.items[0], chat=True) == [{"role": "user", "content": (
        "Answer the question with a few words only, no explanation.\n\n"
        "Question: What is the capital of France?")}]
    assert task.fewshot == [] and task.config()["options"]["prompt"] == "chat"


def test_user_prompt_auto_keeps_chat_without_short_references(tmp_path):
    long = _write(tmp_path / "long.jsonl", [
        {"question": "Why is the sky blue?",
         "references": ["Air scatters the short blue wavelengths of sunlight more"]}])
    none = _write(tmp_path / "none.jsonl", [{"question": "Why is the sky blue?"}])
    for path in (long, none):
        task = load_task(path)
        assert isinstance(task.render(task.items[0], chat=True), list)
        assert "prompt" not in task.config()["options"]  # the identity of earlier runs


def test_user_prompt_multiple_choice_file_is_unchanged(tmp_path):
    path = _write(tmp_path / "mc.jsonl", [
        {"question": "Two plus two?", "options": ["3", "4", "5"], "gold": "B"}])
    task = load_task(path, reference_field="gold", choices_field="options")
    assert task.render(task.items[0], chat=False) == "Two plus two?\nA. 3\nB. 4\nC. 5\nAnswer:"
    assert task.render(task.items[0], chat=True)[0]["content"].startswith(
        "Answer the multiple-choice question")
    assert task.fewshot == [] and "prompt" not in task.config()["options"]
    with pytest.raises(InvalidInputError, match="prompt: k-shot exemplars are for open"):
        load_task(path, reference_field="gold", choices_field="options", prompt="kshot")
    with pytest.raises(InvalidInputError, match="fewshot: k-shot exemplars are for open"):
        load_task(path, reference_field="gold", choices_field="options", fewshot=path)


def test_user_prompt_rejects_an_unknown_prompt(qa_file):
    with pytest.raises(InvalidInputError, match="prompt: must be one of auto, kshot, chat"):
        load_task(qa_file, prompt="zeroshot")
    with pytest.raises(InvalidInputError, match="unknown option"):
        load_task("triviaqa", prompt="chat")  # a built-in task has its own prompt


def test_user_prompt_resume_with_another_prompt_is_refused(tmp_path, qa_file):
    from typer.testing import CliRunner

    from confide.cli import app

    out = tmp_path / "run"
    with FaultServer() as upstream:
        def run(*extra: str):
            return CliRunner().invoke(app, [
                "run", "--task", qa_file, "--backend", "openai", "--model", "m",
                "--base-url", upstream.base_url, "--scorers", "msp", "--out", str(out),
                "--no-report", *extra])

        first = run("--prompt", "chat")
        assert first.exit_code == 0, first.output
        again = run("--prompt", "chat")
        assert again.exit_code == 0 and "already stored" in again.output
        other = run("--prompt", "kshot")
        other_default = run()
    for refused in (other, other_default):
        assert refused.exit_code == 1
        assert "ConfigMismatch" in refused.output and "prompt" in refused.output
    prompts = [r.body["messages"][-1]["content"] for r in upstream.requests
               if r.question.endswith("France?")]
    assert prompts and all(p.startswith("Answer the question") for p in prompts)


@pytest.mark.model
def test_user_prompt_kshot_answer_of_the_bundled_model_is_short(hf_model, qa_file):
    from confide.backends import GenerationSpec

    task = load_task(qa_file)
    prompts = [task.render(it, chat=hf_model.has_chat_template) for it in task.items[:1]]
    spec = GenerationSpec(max_new_tokens=task.max_new_tokens, stop=tuple(task.stop))
    answer = hf_model.generate(prompts, spec, [0])[0].greedy
    assert "Paris" in answer.text and answer.n_tokens <= 4, answer.text


def test_user_prompt_long_form_keeps_its_chat_prompt(qa_file):
    task = load_task(qa_file, long_form=True)
    assert task.fewshot == [] and task.num_fewshot == 0
    assert "paragraph" in task.render(task.items[0], chat=True)[0]["content"]
    assert "prompt" not in task.config()["options"]
    with pytest.raises(InvalidInputError, match="prompt: long answers"):
        load_task(qa_file, long_form=True, prompt="kshot")
