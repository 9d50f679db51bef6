"""Answers from Python: confide.score with questions as text, items and mappings (graded
where they have references), and confide.score_answers on answers made elsewhere, which
must give what `confide score` gives on the same responses saved as a log."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

import confide
from confide.core.errors import InvalidInputError, UnknownNameError
from confide.store.run_store import RunStore

PARIS = [{"token": "Par", "logprob": -0.2,
          "top_logprobs": [{"token": "Par", "logprob": -0.2}, {"token": "Lyon", "logprob": -2.0}]},
         {"token": "is", "logprob": -0.1,
          "top_logprobs": [{"token": "is", "logprob": -0.1}, {"token": "ise", "logprob": -3.0}]}]


def test_log_probabilities_give_the_hand_computed_confidences():
    answer = confide.score_answers("Capital of France?", "Paris", logprobs=PARIS,
                                   scorers="msp,mean_logprob,min_logprob")
    assert isinstance(answer, confide.ScoredAnswer)
    assert answer.answer == "Paris"
    assert answer.confidences["msp"] == pytest.approx(-0.3)
    assert answer.confidences["mean_logprob"] == pytest.approx(-0.15)
    assert answer.confidences["min_logprob"] == pytest.approx(-0.2)
    assert answer.reasons == {}


def test_answers_without_log_probabilities_are_nan_with_the_reason():
    answers = confide.score_answers(["Capital of France?"], ["Paris"], scorers=["msp"])
    assert math.isnan(answers[0].confidences["msp"])
    assert "token_logprobs" in answers[0].reasons["msp"]


def test_sampled_answers_feed_the_agreement_scorers():
    agree, split = confide.score_answers(
        ["Capital of France?", "Capital of Italy?"], ["Paris", "Rome"],
        samples=[["Paris"] * 4, ["Milan", "Turin", "Rome", "Naples"]],
        scorers="agreement")
    assert agree.confidences["agreement"] == pytest.approx(1.0)
    assert split.confidences["agreement"] == pytest.approx(0.25)


def test_mapping_questions_with_references_are_graded():
    right, wrong = confide.score_answers(
        [{"question": "Capital of France?", "references": ["Paris"]},
         {"question": "Capital of Italy?", "references": "Rome", "id": "it"}],
        ["It is Paris.", "Milan"], scorers="free")
    assert right.grades == {"contains": 1.0}
    assert wrong.grades == {"contains": 0.0}
    assert wrong.record is not None and wrong.record.item.id == "it"


def test_same_confidences_as_confide_score_on_the_saved_responses(tmp_path):
    questions = ["Capital of France?", "Capital of Italy?"]
    answers = ["Paris", "Rome"]
    samples = [["Paris", "Paris", "Lyon"], ["Rome", "Milan", "Rome"]]
    logprobs = [PARIS, [{"token": "Rome", "logprob": -0.7,
                         "top_logprobs": [{"token": "Rome", "logprob": -0.7},
                                          {"token": "Mil", "logprob": -1.1}]}]]
    direct = confide.score_answers(questions, answers, samples=samples, logprobs=logprobs)
    log = tmp_path / "log.jsonl"
    with log.open("w") as fh:
        for i, q in enumerate(questions):
            choices = [{"index": 0, "message": {"role": "assistant", "content": answers[i]},
                        "logprobs": {"content": logprobs[i]}, "finish_reason": "stop"}]
            choices += [{"index": j + 1, "message": {"role": "assistant", "content": s},
                         "finish_reason": "stop"} for j, s in enumerate(samples[i])]
            fh.write(json.dumps({"id": f"q{i}", "object": "chat.completion",
                                 "request": {"messages": [{"role": "user", "content": q}]},
                                 "choices": choices}) + "\n")
    confide.import_file(log, tmp_path / "run")
    with RunStore.open(tmp_path / "run") as store:
        stored = {r.item.id: r for r in store.records()}
    for i, answer in enumerate(direct):
        record = stored[f"q{i}"]
        assert set(answer.confidences) >= set(record.scores)
        for name, value in record.scores.items():
            if math.isnan(value):
                assert math.isnan(answer.confidences[name]), name
            else:
                assert answer.confidences[name] == pytest.approx(value, abs=1e-9), name


@pytest.mark.parametrize(("call", "field"), [
    (lambda: confide.score_answers(["a?", "b?"], ["x"]), "answers"),
    (lambda: confide.score_answers("a?", ["x", "y"]), "answers"),
    (lambda: confide.score_answers(["a?"], ["x"], samples=[["y"], ["z"]]), "samples"),
    (lambda: confide.score_answers(["a?"], [3]), "answers[0]"),
    (lambda: confide.score_answers(["a?"], ["x"], logprobs=["bad"]), "answers[0].logprobs"),
    (lambda: confide.score_answers([{"prompt": "a?"}], ["x"]), "questions[0]"),
])
def test_bad_arguments_name_the_field(call, field):
    with pytest.raises(InvalidInputError) as info:
        call()
    assert info.value.field == field


def test_unknown_scorer_is_named():
    with pytest.raises(UnknownNameError, match="mspp"):
        confide.score_answers("a?", "x", scorers="mspp")


def test_ascore_answers_runs_inside_a_running_loop():
    async def main() -> list[float]:
        got = await asyncio.gather(*(confide.ascore_answers("Capital?", "Paris", logprobs=PARIS,
                                                             scorers="msp") for _ in range(3)))
        return [a.confidences["msp"] for a in got]

    assert asyncio.run(main()) == pytest.approx([-0.3] * 3)


def test_score_grades_mapping_questions_with_the_model(hf_model):
    answers = confide.score(hf_model, [{"question": "What is the capital of France?",
                                        "references": ["Paris"]}, "Who wrote Hamlet?"],
                            max_new_tokens=8, scorers="msp")
    assert isinstance(answers, confide.ScoredAnswers)
    assert set(answers[0].grades) == {"contains"}
    assert answers[0].grades["contains"] == float("paris" in answers[0].answer.lower())
    assert answers[1].grades == {}
    item = confide.Item("it", "Capital of Italy?", references=["Rome"])
    one = confide.score(hf_model, item, max_new_tokens=8, scorers="msp", grader="exact")
    assert isinstance(one, confide.ScoredAnswer) and set(one.grades) == {"exact"}
