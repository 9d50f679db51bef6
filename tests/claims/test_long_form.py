"""End to end: `confide run --long-form` on the bundled model, a few TruthfulQA items."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import ConfigMismatch
from confide.grading.claims import ANSWER_GRADE
from confide.runs.claims import ClaimConfig, add_claims
from confide.scorers import SCORERS
from confide.store.run_store import RunStore
from confide.tasks import load_task

runner = CliRunner()
ARGS = ["run", "--task", "truthfulqa", "--long-form", "--limit", "2", "--max-new-tokens", "32",
        "--batch-size", "4", "--samples", "2"]


def test_long_form_task_asks_for_paragraphs():
    task = load_task("truthfulqa", long_form=True, limit=2)
    assert task.format == "long_form" and task.stop == ["\n\n"] and task.options["long_form"]
    assert "paragraph" in task.render(task.items[0], chat=True)[-1]["content"]
    assert load_task("truthfulqa", long_form=True, max_new_tokens=50).max_new_tokens == 50


def test_long_form_truthfulqa_on_the_full_file(full_data):
    task = load_task("truthfulqa", data_path=str(full_data / "truthfulqa" / "TruthfulQA.csv"),
                     long_form=True)
    assert len(task.items) == 817 and task.format == "long_form"


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("long") / "run"
    result = runner.invoke(app, [*ARGS, "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.model
def test_long_form_run_stores_claims_mapped_to_the_answer(long_run):
    out, output = long_run
    with RunStore.open(out) as store:
        records = store.records()
    assert len(records) == 2
    with_claims = [r for r in records if r.claims]
    assert with_claims, "the bundled model gave no long answer"
    for record in with_claims:
        text = record.greedy.text
        for claim in record.claims:
            assert text[claim.start:claim.end] == claim.text
            covered = "".join(record.greedy.tokens[t] for t in claim.tokens)
            assert claim.text.split()[0].strip(".,") in covered
            assert set(claim.scores) == set(ClaimConfig().scorers)
            for name, value in claim.scores.items():
                assert not math.isnan(value) or claim.score_errors[name]
            assert 0.0 <= claim.grades["llm"] <= 1.0
        assert 0.0 <= record.grades[ANSWER_GRADE] <= 1.0
        assert {"claim_support.min", "claim_support.mean", "claim_support.share",
                "claim_mean_logprob.min"} <= set(record.scores)
    assert "claims of 2 answers" in output and "claim_support" in output
    assert f"accuracy ({ANSWER_GRADE})" in output
    assert "refine" in output


@pytest.mark.model
def test_long_form_run_writes_refined_answers_and_report(long_run):
    out, output = long_run
    lines = (out / "refined.jsonl").read_text(encoding="utf-8").splitlines() \
        if (out / "refined.jsonl").exists() else []
    if "not refined" in output:  # too few right or wrong claims among two answers
        assert not lines
    else:
        assert len(lines) == 2 and (out / "claims_calibrator.json").exists()
        for line in lines:
            refined = json.loads(line)
            for claim in refined["claims"]:
                assert (claim["text"] in refined["text"]) == (not claim["removed"])
    page = (out / "report.html").read_text(encoding="utf-8")
    assert '"claimScorer":"claim_support"' in page and '"claims":[{"s":0,' in page


@pytest.mark.model
def test_long_form_run_resumes_without_redoing_claims(long_run):
    out, _ = long_run
    again = runner.invoke(app, [*ARGS, "--out", str(out), "--no-report"],
                          env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert "nothing generated" in again.output
    outcome = add_claims(out, ClaimConfig())
    assert outcome.done == 0 and outcome.resumed == 2 and outcome.grader == "llm"
    with pytest.raises(ConfigMismatch, match="splitter"):
        add_claims(out, ClaimConfig(splitter="model"))


@pytest.mark.model
def test_long_form_on_the_users_file_grades_by_its_labels(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({
        "question": "Where is the Eiffel Tower?", "references": ["In Paris."],
        "claims": [{"claim": "The Eiffel Tower is in Paris.", "label": True}]}) + "\n",
        encoding="utf-8")
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--task", str(data), "--long-form", "--max-new-tokens",
                                 "30", "--samples", "0", "--no-report", "--out", str(out)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    with RunStore.open(out) as store:
        config = store.get_meta("claims_config")
        (record,) = store.records()
    assert config["grader"] == "labels"
    assert all(set(c.grades) <= {"labels"} for c in record.claims)
    assert all(c.score_errors["claim_support"] == "no sampled answers" for c in record.claims)


def test_claim_config_refuses_unknown_names():
    from confide.core.errors import InvalidInputError, UnknownNameError

    with pytest.raises(UnknownNameError, match="claim_suport"):
        ClaimConfig(scorers=("claim_suport",))
    with pytest.raises(InvalidInputError, match="claim_threshold"):
        ClaimConfig(threshold=1.5)
    with pytest.raises(InvalidInputError, match="refine_scorer"):
        ClaimConfig(scorers=("claim_support",), refine_scorer="claim_p_true")
    assert ClaimConfig(scorers=("claim_support",)).n_samples == \
        SCORERS["claim_support"].n_samples


@pytest.mark.model
def test_api_scores_claims_and_refines_them(hf_model):
    import confide

    config = ClaimConfig(grader=None, scorers=("claim_mean_logprob",))
    (answer,) = confide.score(hf_model, ["Describe Paris in two sentences."],
                              max_new_tokens=32, stop=(), claims=config)
    claims = answer.record.claims
    assert claims and all(not math.isnan(c.scores["claim_mean_logprob"]) for c in claims)
    assert "claim_mean_logprob.mean" in answer.confidences
    middle = sorted(c.scores["claim_mean_logprob"] for c in claims)[len(claims) // 2]
    refined = confide.refine(answer, middle)
    assert [d.kept for d in refined.claims] == [c.scores["claim_mean_logprob"] >= middle
                                                for c in claims]
