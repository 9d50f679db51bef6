"""Readable confidence: each scorer's [0, 1] form, calibrated probabilities and their
provenance, and the calibrator shipped for the bundled model (issue 39, item 3)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import confide
from confide.core.errors import InvalidInputError
from confide.decisions.calibration import (
    SHIPPED_DIR,
    Calibrator,
    calibrate_run,
    load_calibrator,
    shipped_calibrator,
)
from confide.scorers import SCORERS

LN = math.log


def _lp(text: str, *probs: float) -> list[dict]:
    """OpenAI ``logprobs.content`` of ``text`` cut into ``len(probs)`` tokens with these
    probabilities (top-2 listed)."""
    cut = np.linspace(0, len(text), len(probs) + 1).astype(int)
    tokens = [text[a:b] for a, b in zip(cut, cut[1:])]
    return [{"token": t, "logprob": LN(p),
             "top_logprobs": [{"token": t, "logprob": LN(p)},
                              {"token": "x", "logprob": LN((1 - p) / 2)}]}
            for t, p in zip(tokens, probs)]


# ------------------------------------------------------------------ transforms by hand


@pytest.mark.parametrize(("name", "raw", "readable"), [
    ("msp", LN(0.5) + LN(0.2), 0.1),               # sequence probability
    ("mean_logprob", (LN(0.5) + LN(0.2)) / 2, math.sqrt(0.1)),  # geometric mean
    ("min_logprob", LN(0.2), 0.2),
    ("mean_entropy", -LN(4), 0.25),                # four equally likely choices
    ("max_entropy", -LN(10), 0.1),
    ("semantic_entropy", 2 * 0.5 * LN(0.5), 0.5),  # two clusters of half: 1 / 2
    ("num_sets", -4.0, 0.25),
    ("num_sets", 0.0, 1.0),                        # no cluster counts as one
    ("eigv", -2.5, 0.4),
    ("degree", -0.3, 0.7),                         # mean affinity
    ("huq", -0.25, 0.75),
    ("agreement", 0.6, 0.6),
    ("fisher_rao", 0.3, 0.3),
    ("p_true", 0.8, 0.8),                          # a probability is its own form
    ("mean_logprob", 1e-9, 1.0),                   # rounding past 0 is clipped
    ("mean_logprob", math.nan, math.nan),
])
def test_readable_forms_computed_by_hand(name, raw, readable):
    value = SCORERS[name].readable(raw)
    if math.isnan(readable):
        assert math.isnan(value)
    else:
        assert value == pytest.approx(readable, rel=1e-12)


@pytest.mark.parametrize("name", ["length", "self_certainty", "pmi", "mahalanobis"])
def test_scorers_without_a_readable_form_say_why(name):
    spec = SCORERS[name].readable
    assert spec is not None and not spec.exists
    assert spec.formula.startswith("none: ") and len(spec.formula) > 20
    assert math.isnan(spec(-3.0))


def test_a_scorer_declaring_something_else_as_readable_is_refused():
    from confide.scorers.base import scorer

    with pytest.raises(ValueError, match="readable must be a Readable"):
        scorer("not_registered_readable", readable=lambda c: c)  # type: ignore[arg-type]


def test_scored_answers_carry_readable_forms():
    a = confide.score_answers("Capital of France?", "Paris", logprobs=_lp("Paris", 0.5, 0.2),
                              scorers="msp,mean_logprob,min_logprob,length")
    assert a.readable["msp"] == pytest.approx(0.1)
    assert a.readable["mean_logprob"] == pytest.approx(math.sqrt(0.1))
    assert a.readable["min_logprob"] == pytest.approx(0.2)
    assert "length" not in a.readable and a.confidences["length"] == -2
    assert a.probability is None and a.calibration is None
    # no log-probabilities: the confidence is NaN with a reason, and so is its form
    b = confide.score_answers("Capital of France?", "Paris", scorers="msp")
    assert math.isnan(b.readable["msp"]) and b.reasons["msp"]


# ------------------------------------------------------------------ calibrators given


def _platt(**extra) -> Calibrator:
    return Calibrator("mean_logprob", "platt", {"a": 1.0, "b": 0.0}, n_fit=40,
                      grader="contains", extra=extra)


FITTED = {"model": "tiny-llm", "task": "triviaqa", "prompt_style": "chat", "num_fewshot": 0,
          "accuracy": 0.4, "crossfit_ece": 0.05, "crossfit_brier": 0.2}


def test_calibrator_as_object_and_as_path_give_the_same_probability(tmp_path):
    cal = _platt(**FITTED)
    path = cal.save(tmp_path / "cal.json")
    kwargs = {"logprobs": _lp("A", 0.5), "scorers": "msp", "model": "tiny-llm",
              "prompt_style": "chat"}
    by_object = confide.score_answers("Q?", "A", calibrator=cal, **kwargs)
    by_path = confide.score_answers("Q?", "A", calibrator=str(path), **kwargs)
    # sigma(a c + b) with c = log 0.5: 1 / (1 + 2); mean_logprob run though not named
    assert by_object.probability == pytest.approx(1 / 3)
    assert by_path.probability == pytest.approx(1 / 3)
    assert by_object.confidences["mean_logprob"] == pytest.approx(LN(0.5))
    info = by_path.calibration
    assert info["warnings"] == []
    assert {k: info[k] for k in FITTED} == FITTED
    assert (info["n_items"], info["grader"], info["file"]) == (40, "contains", str(path))
    assert info["applied_to"] == {"model": "tiny-llm", "prompt_style": "chat",
                                  "num_fewshot": None}
    assert not info["shipped"]


def test_a_calibrator_of_another_type_is_refused_naming_the_argument():
    with pytest.raises(InvalidInputError, match="calibrator"):
        confide.score_answers("Q?", "A", calibrator=0.5)  # type: ignore[arg-type]


def test_outside_its_conditions_the_calibration_says_so():
    cal = _platt(**FITTED)
    other = confide.score_answers("Q?", "A", logprobs=_lp("A", 0.5), calibrator=cal,
                                  model="big-llm", prompt_style="k-shot")
    warnings = other.calibration["warnings"]
    assert len(warnings) == 2
    assert "'tiny-llm'" in warnings[0] and "'big-llm'" in warnings[0]
    assert "chat prompts" in warnings[1] and "k-shot completion" in warnings[1]
    assert other.probability == pytest.approx(1 / 3)  # given, never silently
    unstated = confide.score_answers("Q?", "A", logprobs=_lp("A", 0.5), calibrator=cal)
    assert [w.split(" (")[0] for w in unstated.calibration["warnings"]] == [
        "the answers' model is not stated", "the answers' prompt style is not stated"]
    chat = confide.score_answers({"question": [{"role": "user", "content": "Q?"}]}, "A",
                                 logprobs=_lp("A", 0.5), calibrator=cal, model="tiny-llm")
    assert chat.calibration["warnings"] == []  # chat messages: a chat prompt
    frame_row = confide.score_answers(["Q?"], ["A"], logprobs=[_lp("A", 0.5)], calibrator=cal,
                                      model="big-llm", prompt_style="chat")
    assert frame_row[0].calibration["warnings"][0].startswith("fitted on answers of model")


def test_no_confidence_gives_no_probability_and_says_why():
    a = confide.score_answers("Q?", "A", calibrator=_platt(**FITTED), model="tiny-llm",
                              prompt_style="chat")  # no log-probabilities
    assert math.isnan(a.probability)
    assert a.calibration["warnings"] == [
        f"no mean_logprob value for this answer ({a.reasons['mean_logprob']}): no probability"]


def test_a_bad_prompt_style_is_refused():
    with pytest.raises(InvalidInputError, match="prompt_style"):
        confide.score_answers("Q?", "A", prompt_style="few-shot")


def test_an_older_file_without_provenance_still_loads_and_warns(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"kind": "confide.calibrator", "version": 1,
                                "scorer": "mean_logprob", "method": "platt",
                                "params": {"a": 1.0, "b": 0.0}, "n_fit": 12}))
    cal = load_calibrator(path)
    p, info = cal.calibrate(LN(0.5), model="tiny-llm", prompt_style="chat")
    assert p == pytest.approx(1 / 3)
    assert info["model"] is None and info["crossfit_ece"] is None
    assert info["warnings"][0].startswith("the calibrator does not say which model")
    assert "prompt style" in info["warnings"][1]


@pytest.mark.parametrize(("field", "value"), [
    ("prompt_style", "few-shot"), ("num_fewshot", -1), ("crossfit_ece", 1.5),
    ("model", ""), ("accuracy", True)])
def test_a_bad_provenance_field_is_named(tmp_path, field, value):
    path = _platt(**{**FITTED, field: value}).save(tmp_path / "bad.json")
    with pytest.raises(InvalidInputError) as err:
        load_calibrator(path)
    assert f"extra.{field}" in str(err.value) and str(path) in str(err.value)


def test_calibrate_run_keeps_provenance_of_an_imported_run(tmp_path):
    """A real imported run (a log of 30 graded answers): the calibrator keeps the model,
    accuracy and cross-fitted figures; an imported log names no prompt style."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(30):
        right = i % 2 == 0
        p = float(rng.uniform(0.6, 0.95) if right else rng.uniform(0.1, 0.7))
        lines.append(json.dumps({
            "id": f"r{i}", "object": "chat.completion", "model": "tiny-llm",
            "request": {"messages": [{"role": "user", "content": f"Question {i}?"}]},
            "references": ["Paris"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant",
                                     "content": "Paris" if right else "Lyon"},
                         "logprobs": {"content": _lp("Paris" if right else "Lyon", p)}}]}))
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    confide.import_file(log, tmp_path / "run", scorers="mean_logprob")
    fit = calibrate_run(tmp_path / "run", "mean_logprob", method="platt", n_folds=3)
    extra = fit.calibrator.extra
    assert extra["model"] == "tiny-llm"
    assert extra["accuracy"] == pytest.approx(0.5)
    assert extra["crossfit_ece"] == pytest.approx(fit.crossfit_ece)
    assert extra["crossfit_brier"] == pytest.approx(fit.crossfit_brier)
    assert extra["prompt_style"] is None
    saved = load_calibrator(fit.calibrator.save(tmp_path / "cal.json"))
    assert saved.provenance["model"] == "tiny-llm" and saved.n_fit == 30


# ------------------------------------------------------------------ the shipped one


def test_the_shipped_calibrator_states_its_provenance():
    files = sorted(SHIPPED_DIR.glob("smollm2-*.json"))
    assert len(files) == 1, files
    cal = load_calibrator(files[0])
    info = cal.provenance
    assert (info["model"], info["task"], info["prompt_style"], info["num_fewshot"]) == (
        "smollm2", "triviaqa", "k-shot", 5)
    assert info["shipped"] and info["n_items"] >= 100 and info["grader"] == "contains"
    assert 0 <= info["crossfit_ece"] <= 0.2 and 0 < info["crossfit_brier"] < 0.25
    assert cal.scorer in confide.DEFAULT_SCORERS
    assert shipped_calibrator("smollm2", confide.DEFAULT_SCORERS).scorer == cal.scorer
    assert shipped_calibrator("smollm2", ["length"]) is None
    assert shipped_calibrator("other-model", confide.DEFAULT_SCORERS) is None
    grid = np.linspace(-20, 0, 201)
    probs = cal.predict(grid)
    assert np.all((probs >= 0) & (probs <= 1)) and np.all(np.diff(probs) >= 0)


@pytest.mark.model
def test_the_bundled_model_answers_with_a_shipped_probability(hf_model):
    a = confide.score(hf_model, "Who wrote Hamlet?", max_new_tokens=8)
    cal = a.calibration
    assert cal is not None and cal["shipped"] and cal["model"] == "smollm2"
    assert 0.0 <= a.probability <= 1.0
    assert a.probability == pytest.approx(
        load_calibrator(cal["file"]).predict(a.confidences[cal["scorer"]]))
    assert cal["applied_to"]["model"] == "smollm2"
    # the bundled model answers a plain question from a chat prompt; the run was 5-shot
    assert cal["applied_to"]["prompt_style"] == "chat"
    assert any("5-shot completion" in w and "chat prompts" in w for w in cal["warnings"])
    assert set(a.readable) == {"msp", "mean_logprob", "min_logprob", "mean_entropy",
                               "max_entropy"}
    assert all(0.0 <= v <= 1.0 for v in a.readable.values())
    off = confide.score(hf_model, "Who wrote Hamlet?", max_new_tokens=8, calibrator=False,
                        scorers="msp")
    assert off.probability is None and off.calibration is None


def test_a_calibrator_fitted_on_scored_answers_and_the_users_labels():
    # 30 answers whose msp rises with correctness; the user's labels say which are right
    probs = [0.2 + 0.02 * i for i in range(30)]
    labels = [int(i % 3 != 0 and i > 5) for i in range(30)]
    answers = confide.score_answers([f"Q{i}?" for i in range(30)], ["A"] * 30,
                                    logprobs=[_lp("A", p) for p in probs], scorers="msp")
    fit = confide.calibrate(answers, "msp", labels, method="platt", model="tiny-llm",
                            prompt_style="chat")
    assert (fit.n, fit.n_missing) == (30, 0)
    assert fit.accuracy == pytest.approx(sum(labels) / 30)
    cal = fit.calibrator
    assert cal.extra["model"] == "tiny-llm" and cal.extra["prompt_style"] == "chat"
    assert cal.extra["crossfit_ece"] == fit.crossfit_ece and cal.n_fit == 30
    # applied as it was fitted: no warning, and the probability is the calibrator's own
    again = confide.score_answers("Q?", "A", logprobs=_lp("A", 0.5), calibrator=cal,
                                  model="tiny-llm", prompt_style="chat")
    assert again.calibration["warnings"] == []
    assert again.probability == pytest.approx(cal.predict(math.log(0.5)))
    with pytest.raises(InvalidInputError, match="labels: give one label per answer"):
        confide.calibrate(answers, "msp", labels[:3])
    with pytest.raises(InvalidInputError, match="labels: label 2 must be true/false"):
        confide.calibrate(answers, "msp", [1, 0, "yes"] + labels[3:])
    with pytest.raises(InvalidInputError, match="pass labels="):
        confide.calibrate(answers, "msp")  # no references: no grades to read
