"""confide recommend: candidates by what the model gives, evidence from the quality table,
a choice made out of fold on the user's own records, and the length baseline's verdict."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

import confide
from confide.cli import app
from confide.core.errors import InvalidInputError
from confide.evaluation.recommend import EVIDENCE, recommend
from confide.scorers.base import SCORERS, scorers_at
from tests.conftest import make_record


def _piece(task, scorers, status="ranked"):
    return {"task": task, "model": "m", "items": 100, "samples": 10, "data": "full file",
            "accuracy": [0.3, 0.2, 0.4], "status": status, "significant_best": None,
            "scorers": [{"scorer": name, "rank": i, "auroc": [a, a - 0.05, a + 0.05],
                         "prr": [0.1, 0.0, 0.2], "n_nan": 0, "beats_length": beats,
                         "lead_vanishes_within_lengths": False, "vs_best": None}
                        for i, (name, a, beats) in enumerate(scorers, start=1)]}


@pytest.fixture
def evidence(tmp_path):
    path = tmp_path / "quality.json"
    path.write_text(json.dumps({"pieces": [
        _piece("triviaqa", [("msp", 0.8, True), ("agreement", 0.7, True),
                            ("length", 0.6, None)]),
        _piece("gsm8k", [("msp", 0.55, False), ("length", 0.6, None)]),
        _piece("arc_easy", [("msp", 0.9, True)], status="at chance")]}))
    return path


def test_what_the_model_gives_decides_the_candidates(evidence):
    text_only = recommend(gives="none", samples=0, task="short", top=100, evidence=evidence)
    assert all(_needs_only_asking(s) for s in text_only.scorers)
    assert "msp" in text_only.left_out and "log" in text_only.left_out["msp"]
    assert "agreement" in text_only.left_out  # no samples in the budget
    sampled = recommend(gives="none", samples=5, task="short", top=100, evidence=evidence)
    assert "agreement" in {s.name for s in sampled.scorers}
    local = recommend(gives="hidden", samples=10, task="short", top=1000, evidence=evidence)
    # every answer-level scorer is a candidate or left out with a reason, never both
    names = {s.name for s in local.scorers} | set(local.left_out) | {"length"}
    assert names == {s.name for s in scorers_at("answer")}
    assert all(local.left_out[n] for n in local.left_out)


def _needs_only_asking(suggestion) -> bool:
    return set(suggestion.needs) <= {"extra_prompt"}


def test_evidence_orders_the_list_and_only_ranked_pieces_of_the_kind_count(evidence):
    rec = recommend(gives="topk", samples=10, task="short", evidence=evidence)
    assert [s.name for s in rec.scorers[:2]] == ["msp", "agreement"]
    assert rec.scorers[0].evidence[0]["auroc"] == pytest.approx([0.8, 0.75, 0.85])
    assert rec.scorers[0].mean_rank == 1.0 and rec.scorers[0].beats_length
    assert rec.notes == []
    choice = recommend(gives="topk", samples=10, task="choice", evidence=evidence)
    assert all(not s.evidence for s in choice.scorers)  # arc_easy is at chance
    assert "at chance" in choice.notes[0]


def test_says_plainly_when_nothing_beats_length(evidence):
    rec = recommend(gives="topk", samples=0, task="math", evidence=evidence)
    assert rec.scorers[0].name == "msp" and not rec.scorers[0].beats_length
    assert any("length baseline" in n for n in rec.notes)


def test_bad_arguments_name_the_field(evidence):
    with pytest.raises(InvalidInputError, match="gives") as info:
        recommend(gives="logits", evidence=evidence)  # type: ignore[arg-type]
    assert info.value.field == "gives"
    with pytest.raises(InvalidInputError, match="task"):
        recommend(task="poetry", evidence=evidence)  # type: ignore[arg-type]


def _graded(n=40, seed=0):
    """A perfectly separating scorer (msp), a random one (agreement) and length."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        right = i % 2 == 0
        r = make_record([-0.1], item_id=f"q{i}")
        r.grades = {"contains": 1.0 if right else 0.0}
        r.scores = {"msp": (1.0 if right else 0.0) + rng.uniform(0, 0.5),
                    "agreement": float(rng.uniform()), "length": float(rng.uniform()),
                    "ccp": math.nan}
        records.append(r)
    return records


def test_the_choice_on_the_users_records_is_made_out_of_fold(evidence):
    rec = recommend(gives="topk", samples=10, task="short", records=_graded(),
                    evidence=evidence)
    held = rec.held_out
    assert held is not None and held.folds == 5 and held.n_items == 40 and held.n_right == 20
    # msp separates perfectly on every fold: chosen each time, held-out AUROC exactly 1
    assert held.chosen == {"msp": 5} and held.final_choice == "msp"
    assert held.held_out_auroc == 1.0 and held.held_out_auroc_per_fold == [1.0] * 5
    assert held.left_out["ccp"].startswith("valued on 0%") or "not in" in held.left_out["ccp"]


def test_ungraded_records_are_refused(evidence):
    records = _graded()
    for r in records:
        r.grades = {}
    with pytest.raises(InvalidInputError, match="no grades"):
        recommend(records=records, evidence=evidence)


def test_the_shipped_evidence_names_only_registered_scorers():
    data = json.loads(EVIDENCE.read_text())
    assert data["pieces"]
    for piece in data["pieces"]:
        for s in piece["scorers"]:
            assert s["scorer"] in SCORERS, s["scorer"]
            point, low, high = s["auroc"]
            assert low is None or low <= point <= high


def test_the_api_and_the_cli_agree():
    rec = confide.recommend(gives="topk", samples=0, task="short")
    result = CliRunner().invoke(app, ["recommend", "--gives", "topk", "--task", "short"])
    assert result.exit_code == 0, result.output
    assert rec.scorers[0].name in result.output
    bad = CliRunner().invoke(app, ["recommend", "--gives", "logits"])
    assert bad.exit_code == 1 and "gives" in bad.output
