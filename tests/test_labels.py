"""confide label: correctness from a file, attached as a grader of its own name."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import InvalidInputError
from confide.decisions.abstention import abstain_run
from confide.decisions.calibration import calibrate_run
from confide.runs.importing import import_file
from confide.runs.labels import label_run
from confide.runs.stored import open_run

N = 60


def _log(path: Path, n: int = N, seed: int = 0) -> Path:
    """``n`` answers in confide's jsonl form with per-token log-probabilities, no labels."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            k = rng.randint(1, 4)
            fh.write(json.dumps({"id": f"q{i}", "question": f"Question {i}?",
                                 "answer": " ".join(["word"] * k), "references": ["word"],
                                 "tokens": ["word"] * k,
                                 "token_logprobs": [math.log(rng.uniform(0.05, 1.0))
                                                    for _ in range(k)]}) + "\n")
    return path


@pytest.fixture
def run(tmp_path) -> Path:
    out = tmp_path / "run"
    import_file(_log(tmp_path / "log.jsonl"), out, scorers=["msp", "mean_logprob", "length"])
    return out


def _labels(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _human(run: Path) -> list[dict]:
    """Labels that follow msp (so a calibrator has something to fit), with noise."""
    rng = random.Random(1)
    records = open_run(run).records
    return [{"id": r.item.id, "label": int(math.exp(r.scores["msp"]) > rng.random())}
            for r in records]


def _rows(run: Path) -> dict[str, tuple[str, bytes | None]]:
    with sqlite3.connect(run / "run.sqlite") as conn:
        return {i: (d, h) for i, d, h in conn.execute("SELECT item_id, data, hidden FROM records")}


def test_label_adds_only_the_grade(run, tmp_path):
    before = _rows(run)
    rows = _human(run)[:40]  # a subset: the others stay unlabelled
    assert label_run(run, _labels(tmp_path / "l.jsonl", rows), name="human") == 40
    after = _rows(run)
    assert after.keys() == before.keys()
    for item_id, (data, hidden) in after.items():
        new = json.loads(data)
        value = new["grades"].pop("human", None)
        # everything else stored is what it was: an unlabelled record byte for byte, a
        # labelled one value for value (the store re-encodes the record it rewrites)
        if value is None:
            assert data == before[item_id][0]
        assert new == json.loads(before[item_id][0])
        assert hidden == before[item_id][1]
        wanted = next((r["label"] for r in rows if r["id"] == item_id), None)
        assert value == (None if wanted is None else float(wanted))
    loaded = open_run(run).records
    assert sum("human" in r.grades for r in loaded) == 40
    assert all("contains" in r.grades for r in loaded)


@pytest.mark.parametrize(("lines", "where"), [
    ([{"id": "q0", "label": 1}, {"id": "nope", "label": 0}], "l.jsonl:2: id: no record"),
    ([{"id": "q0", "label": 1}, {"id": "q0", "label": 0}], "l.jsonl:2: id: duplicate id"),
    ([{"id": "q0", "label": 1.5}], "l.jsonl:1: label: must be a number in"),
    ([{"id": "q0", "label": -0.1}], "l.jsonl:1: label: must be a number in"),
    ([{"id": "q0", "label": "yes"}], "l.jsonl:1: label: must be a number"),
    ([{"id": "q0", "label": True}], r"l.jsonl:1: label: .*true \(write 1 or 0\)"),
    ([{"id": "q0", "label": None}], "l.jsonl:1: label: must be a number"),
    ([{"id": "q0"}], "l.jsonl:1: label: missing"),
    ([{"label": 1}], "l.jsonl:1: id: missing"),
    ([{"id": True, "label": 1}], "l.jsonl:1: id: an id must be"),
    ([{"id": "q0", "label": 1}, ["q1", 1]], "l.jsonl:2: record: expected a JSON object"),
])
def test_bad_labels_are_refused_and_nothing_is_written(run, tmp_path, lines, where):
    before = _rows(run)
    with pytest.raises(InvalidInputError, match=where):
        label_run(run, _labels(tmp_path / "l.jsonl", lines))
    assert _rows(run) == before


def test_not_json_and_non_finite_labels_are_refused(run, tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"id": "q0", "label": 1}\n{"id": "q1", "label": NaN}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="l.jsonl:2: label:"):
        label_run(run, path)
    path.write_text('{"id": "q0", "label": 1}\n{"id": "q1", \n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="l.jsonl:2: record: malformed JSON"):
        label_run(run, path)
    with pytest.raises(InvalidInputError, match="no labels"):
        label_run(run, _labels(path, []))


def test_label_names_never_overwrite_grades(run, tmp_path):
    path = _labels(tmp_path / "l.jsonl", [{"id": "q0", "label": 1}])
    label_run(run, path, name="human")
    with pytest.raises(InvalidInputError, match="already has 'human' grades"):
        label_run(run, path, name="human")
    with pytest.raises(InvalidInputError, match="registered grader"):
        label_run(run, path, name="contains")
    with pytest.raises(InvalidInputError, match="name"):
        label_run(run, path, name=" ")


def test_other_fields_can_hold_id_and_label(run, tmp_path):
    path = _labels(tmp_path / "l.jsonl", [{"item": "q3", "ok": 0.5}])
    assert label_run(run, path, name="panel", id_field="item", label_field="ok") == 1
    assert next(r for r in open_run(run).records if r.item.id == "q3").grades["panel"] == 0.5


def test_eval_calibrate_and_abstain_read_the_labels(run, tmp_path):
    labels = _labels(tmp_path / "l.jsonl", _human(run))
    result = CliRunner().invoke(app, ["label", str(run), str(labels), "--name", "human"])
    assert result.exit_code == 0, result.output
    assert f"labelled {N} record(s)" in result.output
    table = open_run(run).compute_table(grader="human", n_resamples=50)
    assert table.grader == "human" and table.n_graded == N
    shown = CliRunner().invoke(app, ["eval", str(run), "--grader", "human",
                                     "--resamples", "50"])
    assert shown.exit_code == 0, shown.output
    assert "msp" in shown.output
    fit = calibrate_run(run, "msp", grader="human", method="platt")
    assert fit.n == N and fit.calibrator.grader == "human"
    cal = CliRunner().invoke(app, ["calibrate", str(run), "--scorer", "msp", "--grader",
                                   "human", "--method", "platt", "--out",
                                   str(tmp_path / "cal.json")])
    assert cal.exit_code == 0, cal.output
    policy = abstain_run(run, "msp", alpha=0.5, delta=0.2, grader="human")
    assert policy.policy is not None
    bad = CliRunner().invoke(app, ["eval", str(run), "--grader", "robot"])
    assert bad.exit_code == 1 and "human" in bad.output
