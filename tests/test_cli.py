"""The confide command, driven in-process with Typer's CliRunner."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from rich.cells import cell_len
from typer.testing import CliRunner

from confide.cli import app
from confide.store.run_store import RunStore
from tests.conftest import make_record

runner = CliRunner()


def test_import_and_help_do_not_import_torch():
    code = ("import sys, confide, confide.cli, confide.scorers, confide.metrics;"
            "from typer.testing import CliRunner; CliRunner().invoke(confide.cli.app, ['--help']);"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False False"


def test_cli_scorers_lists_registry():
    result = runner.invoke(app, ["scorers"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in ["msp", "mean_logprob", "self_certainty", "length"]:
        assert name in result.output


def test_cli_scorers_groups_by_family_then_cost():
    from confide.scorers import FAMILIES, SCORERS

    result = runner.invoke(app, ["scorers"], env={"COLUMNS": "200"})
    lines = result.output.splitlines()
    # scorer, family and cost are the first cells: a name there marks its row
    heads = [ln.replace("│", " ").replace("|", " ").split()[:3] for ln in lines]
    row = {spec.name: next(i for i, h in enumerate(heads) if spec.name in h)
           for spec in SCORERS.values()}
    families = [f for f in FAMILIES if any(s.family == f for s in SCORERS.values())]
    assert {s.family for s in SCORERS.values()} <= set(FAMILIES)
    for before, after in zip(families, families[1:]):  # every family listed as one block
        assert max(row[s.name] for s in SCORERS.values() if s.family == before) < \
            min(row[s.name] for s in SCORERS.values() if s.family == after)
    assert row["ccp"] > row["boostedprob"]  # within a family, free before features


def test_the_readmes_links_lead_to_files_of_the_repository():
    # the README is short and points into docs/ and benchmarks/: every relative link lands
    import re
    from pathlib import Path

    root = Path(__file__).parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)#]+)\)", readme) if "://" not in t]
    assert len(links) > 10
    assert [t for t in links if not (root / t).exists()] == []


def test_cli_unknown_scorer_is_a_clean_error(tmp_path):
    result = runner.invoke(app, ["run", "--scorers", "msp,entropyy", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "UnknownNameError" in result.output and "entropyy" in result.output
    assert "Traceback" not in result.output


def test_cli_unknown_model_is_a_clean_error(tmp_path):
    result = runner.invoke(app, ["run", "--model", "/no/such/model", "--limit", "2",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "ModelLoadError" in result.output and "/no/such/model" in result.output
    assert "Traceback" not in result.output


def test_cli_malformed_data_file_names_file_and_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"question": "Q1", "references": ["a"]}\n{"question": "Q2", \n')
    result = runner.invoke(app, ["run", "--task", str(data), "--out", str(tmp_path / "r")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "bad.jsonl:2" in result.output
    assert "Traceback" not in result.output


def _stored_run(path):
    with RunStore.open(path, {"scorers": ["msp"], "grader": "contains", "seed": 0}) as store:
        for i in range(12):
            rec = make_record([-0.1 * (i + 1)], item_id=f"i{i}")
            rec.scores = {"msp": -0.1 * (i + 1)}
            rec.grades = {"contains": float(i < 6)}
            store.put(rec, i)


def test_cli_eval_recomputes_table_and_writes_json(tmp_path):
    _stored_run(tmp_path / "run")
    out = tmp_path / "table.json"
    result = runner.invoke(app, ["eval", str(tmp_path / "run"), "--metrics", "auroc,prr,aurc",
                                 "--json", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    table = json.loads(out.read_text())
    msp = table["scorers"][0]
    assert msp["scorer"] == "msp" and msp["auroc"][0] == 1.0 and msp["prr"][0] == 1.0
    assert "1.000" in result.output


def test_cli_eval_missing_run(tmp_path):
    result = runner.invoke(app, ["eval", str(tmp_path / "nothing")], env={"COLUMNS": "300"})
    assert result.exit_code == 1 and "no run here" in result.output


def test_cli_export(tmp_path):
    _stored_run(tmp_path / "run")
    result = runner.invoke(app, ["export", str(tmp_path / "run"), "--format", "csv"])
    assert result.exit_code == 0
    assert len((tmp_path / "run" / "records.csv").read_text().splitlines()) == 13


def test_cli_run_small_real_model(tmp_path):
    from confide.pipeline.plan import DEFAULT_SCORERS

    result = runner.invoke(app, ["run", "--limit", "4", "--max-new-tokens", "10",
                                 "--batch-size", "4", "--out", str(tmp_path / "r"),
                                 "--json", str(tmp_path / "run.json")], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "accuracy (contains)" in result.output
    _assert_fits_80_with_names(result.output, DEFAULT_SCORERS)
    # `confide run --json` writes what `confide eval --json` writes for the same run
    evaluated = runner.invoke(app, ["eval", str(tmp_path / "r"), "--json",
                                    str(tmp_path / "eval.json")])
    assert evaluated.exit_code == 0, evaluated.output
    from_run = json.loads((tmp_path / "run.json").read_text())
    assert from_run == json.loads((tmp_path / "eval.json").read_text())
    assert {row["scorer"] for row in from_run["scorers"]} == set(DEFAULT_SCORERS)
    again = runner.invoke(app, ["run", "--limit", "4", "--max-new-tokens", "10",
                                "--batch-size", "4", "--out", str(tmp_path / "r")])
    assert "nothing generated" in again.output


def test_cli_on_bad_record_skip_counts_and_reports(tmp_path):
    data = tmp_path / "mixed.jsonl"
    data.write_text('{"question": "What is the capital of France?", "references": ["Paris"]}\n'
                    '{"question": "broken", \n'
                    '{"references": ["no question"]}\n'
                    '{"question": "Who wrote Hamlet?", "references": ["Shakespeare"]}\n')
    result = runner.invoke(app, ["run", "--task", str(data), "--on-bad-record", "skip",
                                 "--max-new-tokens", "8", "--no-report",
                                 "--out", str(tmp_path / "r")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2 bad record(s) skipped" in result.output
    assert "mixed.jsonl:2" in result.output and "mixed.jsonl:3" in result.output
    assert "on 2 graded of 2 items" in result.output


# -- readable in a pipe: 80 columns, names whole -------------------------------------


def _piped(*args, **env):
    """`confide ARGS | cat`: stdout is a pipe, and COLUMNS says 80."""
    done = subprocess.run([sys.executable, "-m", "confide.cli", *args], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "80", **env}, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _assert_fits_80_with_names(out, names):
    assert "…" not in out  # Rich's mark of a cut cell
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    missing = [n for n in names if not re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", out)]
    assert not missing, f"names cut or missing: {missing}\n{out}"


def test_cli_listings_keep_names_whole_at_80_columns():
    from confide.grading import GRADERS
    from confide.metrics import METRICS
    from confide.scorers import SCORERS
    from confide.tasks import TASKS

    _assert_fits_80_with_names(_piped("scorers"), sorted(SCORERS))
    metrics_out = _piped("metrics")
    _assert_fits_80_with_names(metrics_out, sorted(METRICS))
    # a summary wraps into a few lines at most, not a dozen
    assert len(metrics_out.splitlines()) <= 4 * len(METRICS) + 12
    tasks_out = _piped("tasks")
    _assert_fits_80_with_names(tasks_out, sorted(TASKS))
    assert {t.grader for t in TASKS.values()} <= set(GRADERS)
    _assert_fits_80_with_names(tasks_out, sorted({t.grader for t in TASKS.values()}))


def test_cli_eval_table_keeps_every_scorer_name_whole_at_80_columns(tmp_path):
    from confide.scorers import SCORERS

    names = sorted(SCORERS)
    with RunStore.open(tmp_path / "run", {"scorers": names, "grader": "contains",
                                          "seed": 0}) as store:
        for i in range(12):
            rec = make_record([-0.1 * (i + 1)], item_id=f"i{i}")
            rec.scores = {name: -0.1 * (i + 1) + 0.01 * k for k, name in enumerate(names)}
            rec.grades = {"contains": float(i < 6)}
            store.put(rec, i)
    out = _piped("eval", str(tmp_path / "run"), "--metrics", "auroc,prr,aurc",
                 "--resamples", "50")
    _assert_fits_80_with_names(out, names)
    for header in ("AUROC [95% CI]", "PRR [95% CI]", "AURC [95% CI]", "ρ(conf, length)"):
        assert header in out


def test_cli_run_default_answers_200_bundled_triviaqa_questions():
    """`make run` answers 200 bundled TriviaQA questions (enough right answers to separate
    scorers: benchmarks/prompting.py), with the 5-shot prompt that keeps answers short."""
    import inspect

    from confide.cli.making import run
    from confide.tasks import load_task

    params = inspect.signature(run).parameters
    task = load_task(params["task"].default, limit=params["limit"].default)
    assert params["limit"].default == len(task.items) == 200
    prompt = task.render(task.items[0], chat=True)  # the bundled model has a chat template
    assert isinstance(prompt, str) and prompt.count("\nAnswer:") == 6
