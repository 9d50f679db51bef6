"""The one generate → record → score → grade path of the API, the run loop and the server."""

from __future__ import annotations

import math

import pytest

import confide
from confide.backends import GenerationResult
from confide.core.records import Generation, Item
from confide.pipeline.answering import DEFAULT_SCORERS, GenerationFailed, Pipeline
from confide.pipeline.plan import RunConfig
from confide.runs.execution import execute
from confide.store.run_store import RunStore


class TextOnlyBackend:
    """Test fake: an API that returns text and no token statistics."""

    name = "text-only"
    capabilities: frozenset[str] = frozenset()
    has_chat_template = False

    def generate(self, prompts, spec, seeds):
        return [GenerationResult(greedy=Generation(text="Paris", tokens=["Paris"]))
                for _ in prompts]

    def config(self):
        return {"backend": self.name}


def test_pipeline_skips_unfed_scorers_grades_and_reports_failures():
    pipe = Pipeline.build(TextOnlyBackend(), ["msp", "length"], grader="contains")
    assert [s.name for s in pipe.scorers] == ["length"]
    assert pipe.skipped == {"msp": "backend cannot give token_logprobs"}
    graded = pipe.complete(Item("a", "Capital of France?", ["Paris"]),
                           GenerationResult(greedy=Generation(text="Paris", tokens=["Paris"])))
    assert graded.grades == {"contains": 1.0} and not math.isnan(graded.scores["length"])
    ungraded = pipe.complete(Item("b", "Capital of France?"),
                             GenerationResult(greedy=Generation(text="Paris", tokens=["Paris"])))
    assert ungraded.grades == {}  # no references: scored, not graded
    with pytest.raises(GenerationFailed, match="'c': HTTP 500") as info:
        pipe.complete(Item("c", "?"), GenerationResult(greedy=None, error="HTTP 500"))
    assert info.value.reason == "HTTP 500"


@pytest.mark.model
def test_api_and_run_loop_give_the_same_record(hf_model, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"id": "q0", "question": "Who wrote Hamlet?", '
                    '"references": ["Shakespeare"]}\n')
    # a user's QA file gets the k-shot prompt by default; confide.score asks in a chat turn
    execute(RunConfig(task=str(data), limit=None, task_options={"prompt": "chat"}),
            tmp_path / "run", backend=hf_model)
    with RunStore.open(tmp_path / "run") as store:
        stored = store.records()[0]
    answer = confide.score(hf_model, [Item("q0", "Who wrote Hamlet?", ["Shakespeare"])])[0]
    assert answer.answer == stored.greedy.text
    assert answer.confidences == stored.scores and set(stored.scores) == set(DEFAULT_SCORERS)
    assert answer.question == stored.item.question == "Who wrote Hamlet?"
