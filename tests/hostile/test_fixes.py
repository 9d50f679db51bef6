"""Issue 19, case by case where the right outcome is a success: the data kept, the file
written, the records recovered, the reply unchanged by its neighbours."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import InvalidInputError, StoreDamaged
from confide.core.options import check_option
from confide.grading import grade
from confide.pipeline.plan import RunConfig
from confide.store.run_store import RunStore
from confide.tasks import load_task
from tests.hostile.test_corpus import damage, stored_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faultserver import FaultServer, running  # noqa: E402

runner = CliRunner()


# -- data files --------------------------------------------------------------------------

def test_csv_with_byte_order_mark_keeps_its_first_column(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffquestion,references\nCapital of France?,Paris\n".encode("utf-8"))
    task = load_task(str(path))
    assert task.items[0].prompt == "Capital of France?"
    assert task.items[0].references == ["Paris"]


def test_numeric_reference_six_point_zero_grades_the_answer_six(tmp_path):
    path = tmp_path / "math.jsonl"
    path.write_text('{"question": "2*3?", "references": 6.0}\n')
    item = load_task(str(path)).items[0]
    assert item.references == ["6"]
    assert grade("The answer is 6", item, "contains") == 1.0


def test_parquet_float_column_references_become_integers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "nums.parquet"
    pq.write_table(pa.table({"question": ["a?", "b?"], "references": [6.0, None]}), path)
    items = load_task(str(path)).items
    assert items[0].references == ["6"] and items[1].references == []


def test_non_utf8_line_is_skippable_and_named_once(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'{"question": "Q1", "references": ["a"]}\n'
                     b'{"question": "Caf\xe9", "references": ["b"]}\n')
    task = load_task(str(path), on_bad_record="skip")
    assert [it.prompt for it in task.items] == ["Q1"]
    (where, reason), = task.skipped
    assert where == f"{path}:2"
    assert str(path) not in reason and "UTF-8" in reason  # the location is not repeated


def test_reference_field_option_maps_an_answer_column(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": "2+2?", "answer": "4"}\n')
    with pytest.raises(InvalidInputError, match="reference_field='answer'"):
        load_task(str(path))
    assert load_task(str(path), reference_field="answer").items[0].references == ["4"]


def test_data_without_any_answer_field_still_loads_for_scoring(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"question": "Tell me a joke"}\n')
    assert load_task(str(path)).items[0].references == []


# -- options: one place ------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [("batch_size", 0), ("temperature", -1.0),
                                         ("top_p", 0.0), ("top_p", 1.5),
                                         ("max_new_tokens", -5), ("n_samples", -1)])
def test_cli_api_and_server_share_one_rule(name, value):
    from pydantic import ValidationError

    from confide.serve.models import ChatCompletionRequest

    with pytest.raises(InvalidInputError) as rule:
        check_option(name, value)
    with pytest.raises(InvalidInputError) as api:
        RunConfig(**{name: value})
    assert str(api.value) == str(rule.value)
    server_name = {"max_new_tokens": "max_tokens", "n_samples": None,
                   "batch_size": None}.get(name, name)
    if server_name:
        with pytest.raises(ValidationError, match=str(rule.value).split(": ", 1)[1]):
            ChatCompletionRequest.model_validate(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                 server_name: value})


def test_score_api_refuses_a_bad_budget(hf_model):
    import confide

    with pytest.raises(InvalidInputError, match="max_new_tokens"):
        confide.score(hf_model, ["Hi?"], max_new_tokens=0)


# -- outputs -----------------------------------------------------------------------------

def test_every_output_option_creates_missing_folders(tmp_path):
    run = stored_run(tmp_path / "run")
    deep = tmp_path / "a" / "b"
    for args, target in [
        (["eval", str(run), "--resamples", "10", "--json", str(deep / "t.json")], "t.json"),
        (["export", str(run), "--out", str(deep / "r.jsonl")], "r.jsonl"),
        (["fit", str(run), "--kind", "combiner", "-o", str(deep / "m.json")], "m.json"),
        (["report", str(run), "--resamples", "10", "-o", str(deep / "r.html")], "r.html"),
    ]:
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert (deep / target).is_file()


# Path options that name what a command reads; every other Path option is an output.
_INPUTS = {("run", "fewshot"), ("score", "greedy_file"), ("eval", "with_"),
           ("fit", "background"), ("serve", "calibrator"), ("serve", "policy"),
           ("abstain", "calibrator"), ("route", "small_run"), ("route", "large_run"),
           ("run", "ensemble"), ("train", "data"), ("recommend", "run")}
_FLAGS = {"out": ("--out", "-o"), "json_out": ("--json",), "log_run": ("--log-run",)}


def _path_options() -> list[tuple[str, str]]:
    import typing

    found = []
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.strip("_")
        for param, hint in typing.get_type_hints(command.callback, include_extras=True).items():
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            base, info, *_ = typing.get_args(hint)
            kinds = {base, *typing.get_args(base)}
            kinds |= {k for kind in list(kinds) for k in typing.get_args(kind)}
            if Path in kinds and type(info).__name__ == "OptionInfo":
                found.append((name, param))
    return found


def test_every_output_option_of_every_command_has_an_unwritable_path_case():
    from tests.hostile.test_corpus import CASES

    outputs = [(c, p) for c, p in _path_options() if (c, p) not in _INPUTS]
    assert len(outputs) >= 10
    for command, param in outputs:
        assert param in _FLAGS, f"{command} {param}: a new Path option; input or output?"
        cases = [c for c in CASES if c["kind"] == "cli" and c["args"][0] == command
                 and any(a in _FLAGS[param] and b.startswith("/proc/")
                         for a, b in zip(c["args"], c["args"][1:], strict=False))]
        assert cases, f"no case writes {command} {_FLAGS[param][0]} to /proc"
        assert all(c["exit"] == 1 for c in cases)
        assert any("cannot write" in c["words"] for c in cases), command


def test_writable_file_leaves_an_existing_file_and_no_new_one(tmp_path):
    from confide.core.paths import writable_dir, writable_file

    old = tmp_path / "old.json"
    old.write_text("kept")
    assert writable_file(old, "--out") == old and old.read_text() == "kept"
    new = tmp_path / "a" / "b" / "new.json"
    assert writable_file(new, "--out") == new and not new.exists() and new.parent.is_dir()
    assert writable_file("/dev/null", "--out") == Path("/dev/null")
    with pytest.raises(InvalidInputError, match="--out: cannot create its folder"):
        writable_file("/proc/a/b/x.json", "--out")
    assert writable_dir(tmp_path / "run" / "deeper", "--out") == tmp_path / "run" / "deeper"
    assert not (tmp_path / "run").exists()  # a folder is checked, not made
    assert not list(tmp_path.glob(".confide-probe-*"))
    with pytest.raises(InvalidInputError, match="is a file; give a folder"):
        writable_dir(old, "--out")


def _unprivileged(check) -> None:
    """Run ``check()`` as a user the folder's permissions bind: this process unless it is
    root (as CI is), else a forked child that drops to ``nobody``; its failure is raised
    here with the child's message."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        check()
        return
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, run the check, report through the pipe
        os.close(read)
        message = b""
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            check()
        except BaseException as exc:  # noqa: BLE001 (everything goes back to the parent)
            message = f"{type(exc).__name__}: {exc}".encode() or b"failed"
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    assert not message, message.decode()


def test_read_only_folder_is_refused_with_the_option_named():
    """Runs as root too (CI does): the check runs as ``nobody`` in a forked child."""
    import shutil
    import tempfile

    from confide.core.paths import writable_dir, writable_file

    base = Path(tempfile.mkdtemp(prefix="confide-ro-"))  # /tmp: every user may enter
    base.chmod(0o755)
    folder = base / "ro"
    folder.mkdir()
    folder.chmod(0o555)

    def check() -> None:
        with pytest.raises(InvalidInputError, match="--json: cannot write a file there"):
            writable_file(folder / "t.json", "--json")
        with pytest.raises(InvalidInputError, match="--out: cannot create its folder"):
            writable_file(folder / "sub" / "t.json", "--out")
        with pytest.raises(InvalidInputError, match="--out: cannot write a file there"):
            writable_dir(folder / "run", "--out")

    try:
        _unprivileged(check)
    finally:
        folder.chmod(0o755)
        shutil.rmtree(base)


def test_report_does_not_embed_the_data_files_folder(tmp_path, hf_model):
    import confide

    data = tmp_path / "private-folder" / "mine.jsonl"
    data.parent.mkdir()
    data.write_text('{"question": "What is the capital of France?", "references": ["Paris"]}\n')
    run = confide.generate_and_evaluate(hf_model, task=str(data), out=tmp_path / "run",
                                        max_new_tokens=4, scorers=("msp",))
    from confide.api import make_report as report

    html = Path(report(run.path)).read_text(encoding="utf-8")
    assert "private-folder" not in html and str(tmp_path) not in html
    assert "mine.jsonl" in html


# -- a damaged store -----------------------------------------------------------------------

def test_damaged_store_is_named_and_export_recovers_the_readable_records(tmp_path):
    run = stored_run(tmp_path / "run", n=40)
    damage(run, "damaged")
    with RunStore.open(run) as store, pytest.raises(StoreDamaged, match="still readable"):
        store.records()
    result = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "saved.jsonl")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "saved.jsonl").read_text().splitlines()]
    assert 0 < len(rows) < 40  # a page lost, the rest kept, in order
    ids = [r["id"] for r in rows]
    assert ids == sorted(ids)


def test_export_of_a_store_with_a_garbage_max_rowid_ends_and_recovers(tmp_path):
    import subprocess

    run = stored_run(tmp_path / "run", n=40)
    damage(run, "rowid")  # once: an endless walk to max(rowid) ≈ 2**61
    out = tmp_path / "saved.jsonl"
    try:
        done = subprocess.run([sys.executable, "-m", "confide.cli", "export", str(run),
                               "--out", str(out)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("export of a damaged store ran past 60 s")
    assert done.returncode == 0, done.stdout + done.stderr
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert 30 <= len(ids) < 40 and ids == sorted(ids)


def test_eval_refuses_a_run_without_records_as_the_report_does(tmp_path):
    run = stored_run(tmp_path / "run")
    damage(run, "norecords")
    messages = []
    for args in (["eval", str(run)], ["report", str(run)]):
        result = runner.invoke(app, args, env={"COLUMNS": "300"})
        assert result.exit_code == 1, result.output
        messages.append(" ".join(result.output.split()))
    assert messages[0] == messages[1] and "holds no records yet" in messages[0]


def test_resume_refuses_a_damaged_store_without_writing(tmp_path):
    run = stored_run(tmp_path / "run")
    damage(run, "damaged")
    before = (run / "run.sqlite").read_bytes()
    with pytest.raises(StoreDamaged, match="confide export"):
        RunStore.open(run, {"scorers": ["msp"], "grader": "contains", "seed": 0})
    assert (run / "run.sqlite").read_bytes() == before


def test_intact_store_exports_everything(tmp_path):
    run = stored_run(tmp_path / "run", n=12)
    with RunStore.open(run) as store:
        records, unreadable = store.readable_records()
    assert len(records) == 12 and unreadable == 0


# -- run: misleading outcomes ----------------------------------------------------------------

def test_skipped_records_list_each_location_once(tmp_path):
    data = tmp_path / "mixed.jsonl"
    data.write_text('{"question": "What is the capital of France?", "references": ["Paris"]}\n'
                    '{"question": "broken", \n')
    result = runner.invoke(app, ["run", "--task", str(data), "--on-bad-record", "skip",
                                 "--max-new-tokens", "4", "--no-report", "--scorers", "msp",
                                 "--out", str(tmp_path / "r")], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert result.output.count("mixed.jsonl:2") == 1


def test_hidden_layer_error_leaves_no_run_and_the_corrected_command_works(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "What is the capital of France?", "references": ["Paris"]}\n')
    out = tmp_path / "r"
    bad = runner.invoke(app, ["run", "--task", str(data), "--hidden-layers", "999",
                              "--no-report", "--out", str(out), "--max-new-tokens", "4"])
    assert bad.exit_code == 1 and "layer 999" in bad.output and not out.exists()
    good = runner.invoke(app, ["run", "--task", str(data), "--hidden-layers", "-1",
                               "--no-report", "--out", str(out), "--max-new-tokens", "4",
                               "--scorers", "msp"])
    assert good.exit_code == 0, good.output


# -- server ------------------------------------------------------------------------------------

def test_openai_backend_keeps_the_base_urls_query_string():
    from confide.backends.base import GenerationSpec
    from confide.backends.openai import OpenAIBackend

    with FaultServer() as upstream:
        backend = OpenAIBackend("m", base_url=upstream.base_url + "/?api-version=2024-06-01",
                                logprobs=True)
        result, = backend.generate(["Hi?"], GenerationSpec(max_new_tokens=4), [0])
        assert result.greedy is not None, result.error
        assert upstream.requests[0].path == "/v1/chat/completions?api-version=2024-06-01"


@pytest.mark.model
def test_server_reply_does_not_depend_on_concurrent_requests(hf_model):
    from confide.serve.app import create_app

    questions = ["What is the capital of France?", "Who wrote Hamlet?",
                 "What is the largest planet in the solar system?", "Name a primary colour."]

    def body(q):
        return {"model": "smollm2", "max_tokens": 8,
                "messages": [{"role": "user", "content": q}]}

    app_ = create_app(hf_model, model_name="smollm2", scorers=("mean_logprob",))
    with running(app_) as url:
        alone = httpx.post(f"{url}/chat/completions", json=body(questions[0]), timeout=120)

        async def together():
            async with httpx.AsyncClient(timeout=120) as client:
                return await asyncio.gather(*(client.post(f"{url}/chat/completions",
                                                          json=body(q)) for q in questions))

        crowd = asyncio.run(together())
    first = alone.json()["confide"]["confidences"]["mean_logprob"]
    assert crowd[0].json()["confide"]["confidences"]["mean_logprob"] == first
