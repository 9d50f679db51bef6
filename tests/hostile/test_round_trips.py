"""Issue 38, item 6 (and the evaluation's messages of item 7): round trips keep everything
and a run's table says what a reader must know.

One test a class, each built like the hostile reproduction: a data item equal to a
few-shot exemplar stays in the run; ``eval`` on an import that stopped at a bad record
says so, where and why, with the command that resumes it (and that command works); an
unlabelled traffic run's empty table says how to label it (and the advice works); a
table whose answers are all right or all wrong says why its figures are undefined;
``--ray local --workers 100`` on a two-item run never starts 100 workers silently.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import InvalidInputError, StoreError
from confide.evaluation.table import evaluate_records
from confide.pipeline.plan import RunConfig, prepare
from confide.runs.importing import import_file
from confide.runs.ray_executor import local_cores, worker_count
from confide.runs.stored import Run
from confide.serve.traffic import traffic_identity
from confide.store.run_store import RunStore
from confide.tasks.builtin import triviaqa_exemplars
from tests.conftest import make_record

runner = CliRunner()


def _said(result) -> str:
    """A command's output with Rich's line wrapping undone."""
    return " ".join(result.output.split())


def _store(path: Path, identity: dict, n: int, *, grade: bool = True) -> Path:
    """``n`` real records in a real store with ``identity``; graded by ``contains``
    (a third wrong) unless ``grade`` is False."""
    with RunStore.open(path, identity) as store:
        for i in range(n):
            rec = make_record([-0.1 * (i + 1)] * 3, item_id=f"q{i}",
                              references=("Paris",) if grade else ())
            rec.scores = {"msp": -0.1 * (i + 1)}
            if grade:
                rec.grades = {"contains": float(i % 3 != 0)}
            store.put(rec, i)
    return path


# -- few-shot exemplars ------------------------------------------------------------------

def test_item_equal_to_a_fewshot_exemplar_stays_and_the_run_says_so(tmp_path):
    # A user's QA file whose second question is one of TriviaQA's five default exemplars.
    exemplar = triviaqa_exemplars()[2]
    data = tmp_path / "mine.jsonl"
    rows = [{"id": "a", "question": "What is the capital of France?", "references": ["Paris"]},
            {"id": "b", "question": exemplar.prompt, "references": exemplar.references},
            {"id": "c", "question": "How many legs does a spider have?", "references": [8]}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    plan = prepare(RunConfig(task=str(data), limit=None))
    assert [it.id for it in plan.task.items] == ["a", "b", "c"]  # nothing leaves the run
    own = plan.task.render(plan.task.items[1], chat=False)
    assert isinstance(own, str) and own.count("Question:") == 5  # four shots and itself
    assert f"Answer: {exemplar.references[0]}" not in own  # its answer is not in its prompt
    other = plan.task.render(plan.task.items[0], chat=False)
    assert isinstance(other, str) and other.count("Question:") == 6
    # The run says so: in its stored settings and in every table of it.
    out = _store(tmp_path / "run", plan.identity(), 3)
    table = Run(out).compute_table(n_resamples=20)
    assert Run(out).config["task"]["options"]["excluded_as_exemplars"] == 1
    (note,) = [n for n in table.notes if "few-shot exemplar" in n]
    assert note.startswith("1 item(s) ask the question of a few-shot exemplar")
    shown = runner.invoke(app, ["eval", str(out), "--resamples", "20"])
    assert shown.exit_code == 0 and "1 item(s) ask the question of a few-shot" in _said(shown)


# -- an import that stopped at a bad record ------------------------------------------------

def _chat_line(i: int) -> str:
    return json.dumps({
        "id": f"q{i}", "object": "chat.completion", "model": "m-test",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Paris"},
                     "logprobs": {"content": [{"token": "Paris", "logprob": -0.1 * (i + 1),
                                               "top_logprobs": []}]}}],
        "references": ["Paris" if i % 2 else "Rome"],
        "request": {"messages": [{"role": "user", "content": f"Capital {i}?"}]}})


def test_eval_of_an_import_stopped_at_a_bad_record_says_where_and_how_to_resume(tmp_path):
    log = tmp_path / "log.jsonl"
    lines = [_chat_line(i) for i in range(3)] + ['{"id": "q3", "object": "chat.completion"}']
    log.write_text("\n".join(lines + [_chat_line(i) for i in range(4, 6)]) + "\n",
                   encoding="utf-8")
    out = tmp_path / "run"
    with pytest.raises(InvalidInputError, match="log.jsonl:4"):
        import_file(log, out, scorers="free")
    with RunStore.open(out) as store:  # what the importer stores when it stops
        assert len(store) == 3
        status = store.get_meta("import_status")
    assert status["complete"] is False and status["stopped_at"] == {"file": str(log), "line": 4}
    assert status["reason"].startswith("choices: ")
    (note,) = [n for n in Run(out).compute_table(n_resamples=20).notes if "import" in n]
    assert f"the import is incomplete: it stopped at {log}:4 ({status['reason']})" in note
    assert "covers only the 3 record(s)" in note and "--on-bad-record skip" in note
    shown = runner.invoke(app, ["eval", str(out), "--resamples", "20"])
    assert shown.exit_code == 0 and f"stopped at {log}:4" in _said(shown)
    # The advice works: the command it names resumes the import, skipping the bad line.
    command = re.findall(r"`([^`]*)`", note)[-1]
    resumed = runner.invoke(app, shlex.split(command)[1:] + ["--scorers", "free"])
    assert resumed.exit_code == 0, resumed.output
    with RunStore.open(out) as store:
        assert len(store) == 5
    # A finished import says what it skipped, and nothing when it skipped nothing.
    for status, says in (({"complete": True, "skipped": 1}, "skipped 1 bad record(s)"),
                         ({"complete": True, "skipped": 0}, None)):
        with RunStore.open(out) as store:
            store.set_meta("import_status", status)
        notes = [n for n in Run(out).compute_table(n_resamples=20).notes if "import" in n]
        assert (notes == []) if says is None else (says in notes[0])


def test_import_stopped_before_its_first_record_is_not_told_to_confide_run(tmp_path):
    identity = {"kind": "import", "task": "import:log.jsonl", "scorers": ["msp"],
                "grader": "contains", "seed": 0,
                "source": {"data_path": "/data/log.jsonl", "format": "openai"}}
    RunStore.open(tmp_path, identity).close()
    with pytest.raises(StoreError, match=r"no records yet: the import is incomplete: it did "
                                         r"not finish.*confide score /data/log.jsonl --out"):
        Run(tmp_path).compute_table()


# -- an unlabelled traffic run, and answers all right or all wrong -------------------------

def test_unlabelled_traffic_run_table_says_how_to_label_it(tmp_path):
    out = _store(tmp_path / "traffic", traffic_identity(model="m", backend="hf",
                                                        scorers=["msp"]), 4, grade=False)
    table = Run(out).compute_table(n_resamples=20)
    assert table.n_graded == 0
    hint = " ".join(table.notes)
    assert "no record of this run is graded" in hint
    assert f"confide label {out} LABELS.jsonl --name human" in hint
    assert f"confide eval {out} --grader human" in hint
    shown = runner.invoke(app, ["eval", str(out), "--resamples", "20"])
    assert shown.exit_code == 0 and f"confide label {out} LABELS.jsonl" in _said(shown)
    # The advice works: label, then read the labels.
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"q{i}", "label": i % 2}) + "\n"
                              for i in range(4)), encoding="utf-8")
    assert runner.invoke(app, ["label", str(out), str(labels), "--name", "human"]).exit_code == 0
    labelled = Run(out)
    plain = labelled.compute_table(n_resamples=20)  # the run's own grader: pointed to human
    assert any("--grader human" in n for n in plain.notes)
    assert labelled.compute_table(grader="human", n_resamples=20).n_graded == 4


@pytest.mark.parametrize("correct, which", [(1.0, "right"), (0.0, "wrong")])
def test_table_with_answers_all_right_or_all_wrong_says_why_it_is_undefined(correct, which):
    records = [make_record([-0.1 * (i + 1)], item_id=f"q{i}") for i in range(3)]
    for i, rec in enumerate(records):
        rec.scores, rec.grades = {"msp": -0.1 * (i + 1)}, {"contains": correct}
    table = evaluate_records(records, grader="contains", n_resamples=20)
    assert all(math.isnan(v) for v in table.row("msp").metrics["auroc"])
    (note,) = [n for n in table.notes if "graded answer(s)" in n]
    assert note.startswith(f"all 3 graded answer(s) are {which} (grader 'contains')")
    assert "auroc, prr are undefined" in note


# -- Ray workers -----------------------------------------------------------------------------

@pytest.mark.parametrize("requested, blocks, cores, expected, why", [
    (100, 1, 2, 1, "the run has 1 block(s) of 2 items to generate"),  # the hostile case
    (100, 50, 2, 2, "this machine has 2 CPU core(s)"),
    (8, 3, 3, 3, "block(s) of 2 items to generate and this machine has 3 CPU core(s)"),
    (100, 40, None, 40, "the run has 40 block(s)"),  # a cluster: its cores are not ours
    (4, 10, 8, None, None),
])
def test_ray_worker_count_never_exceeds_blocks_or_local_cores_silently(
        requested, blocks, cores, expected, why):
    count, note = worker_count(requested, blocks=blocks, batch_size=2, cores=cores)
    if why is None:
        assert (count, note) == (requested, None)
        return
    assert count == expected and note is not None
    assert note.startswith(f"Ray workers: {expected} started, not the {requested} asked")
    assert why in note
    assert 1 <= local_cores() <= 4096


# -- export --format openai keeps the labels added with confide label --------------------

def test_openai_export_keeps_labels_added_with_confide_label(tmp_path):
    from confide.runs.labels import label_run

    run = tmp_path / "run"
    with RunStore.open(run, {"task": "t", "model": "m", "scorers": ["msp"],
                             "grader": "contains", "seed": 0}) as store:
        for i in range(4):  # answers whose tokens spell them, as a model's do
            store.put(make_record([-0.1 * (i + 1)] * 3, item_id=f"q{i}", references=(),
                                  text="t0t1t2"), i)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"q{i}", "label": i % 2}) + "\n"
                              for i in range(4)), encoding="utf-8")
    assert label_run(run, labels, name="human") == 4
    shown = runner.invoke(app, ["export", str(run), "--format", "openai"])
    assert shown.exit_code == 0, shown.output
    exported = run / "records.openai.jsonl"
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert [line["grades"] for line in lines] == [{"human": float(i % 2)} for i in range(4)]
    # and they come back as the label of a re-import
    again = import_file(exported, tmp_path / "again", scorers="msp", label_field="grades.human")
    assert again.graded == 4
    with RunStore.open(tmp_path / "again") as store:
        assert {r.item.id: r.grades["label"] for r in store.records()} == {
            f"q{i}": float(i % 2) for i in range(4)}
