"""One yes/no rule for P(True), the judge grader and the llm equivalence judge."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.backends import GenerationResult
from confide.backends.binary import (
    NO,
    YES,
    reply_probability,
    two_way_from_logprobs,
    two_way_probabilities,
    two_way_probability,
)
from confide.core.errors import CannotScore, ConfideError
from confide.core.records import Generation, Item
from confide.equivalence.judges import make_judge
from confide.grading import grade


def test_two_way_from_logprobs_hand_computed():
    # P(yes spellings) = 0.3 + 0.1, P(no spellings) = 0.2 + 0.05 -> 0.4 / 0.65
    value = two_way_from_logprobs(np.log([0.3, 0.1]), np.log([0.2, 0.05]))
    assert value == pytest.approx(0.4 / 0.65, rel=1e-12)


@pytest.mark.parametrize(("yes", "no", "expected"), [
    ([800.0], [0.0], 1.0), ([0.0], [800.0], 0.0),          # log-odds beyond exp's range
    ([-2000.0], [-2710.0], 1.0), ([-3000.0], [-2000.0], 0.0),
    ([-math.inf], [-3.0], 0.0), ([-3.0], [-math.inf], 1.0),
])
def test_two_way_from_logprobs_never_overflows(yes, no, expected):
    assert two_way_from_logprobs(yes, no) == expected


@pytest.mark.parametrize(("yes", "no"), [([], []), ([-math.inf], [-math.inf]),
                                         ([math.nan], [0.0])])
def test_two_way_from_logprobs_without_any_probability_cannot_score(yes, no):
    with pytest.raises(CannotScore):
        two_way_from_logprobs(yes, no)


def _reply(tops: list[tuple[str, float]]) -> Generation:
    return Generation(text=tops[0][0].strip(), token_ids=[1], tokens=[tops[0][0]],
                      top_tokens=[[t for t, _ in tops]],
                      top_logprobs=np.log([[p for _, p in tops]]))


def test_reply_probability_bounds_a_missing_reply_by_the_smallest_listed():
    # "No" is not listed: it counts with the smallest listed probability (0.1), not 0
    value = reply_probability(_reply([("Yes", 0.5), (" yes", 0.2), ("Maybe", 0.1)]), YES, NO)
    assert value == pytest.approx(0.7 / 0.8)
    with pytest.raises(CannotScore, match="neither Yes nor No"):
        reply_probability(_reply([("Maybe", 0.6), ("Perhaps", 0.4)]), YES, NO)
    with pytest.raises(CannotScore, match="no top log-probabilities"):
        reply_probability(Generation(text="Yes"), YES, NO)


class TopKBackend:
    """Test fake without next_token_logprobs: every reply has the same top-k alternatives."""

    has_chat_template = False
    capabilities = frozenset({"top_logprobs"})

    def __init__(self, tops: list[tuple[str, float]]) -> None:
        self.tops = tops
        self.calls = 0

    def generate(self, prompts, spec, seeds):
        self.calls += 1
        assert spec.max_new_tokens == 1 and len(seeds) == len(prompts)
        return [GenerationResult(greedy=_reply(self.tops)) for _ in prompts]

    def config(self):
        return {"backend": "topk"}


def test_judge_grader_and_llm_judge_follow_the_same_rule():
    tops = [("Yes", 0.5), ("Maybe", 0.1)]  # "No" missing: bounded by 0.1, so 0.5 / 0.6
    backend = TopKBackend(tops)
    expected = 0.5 / 0.6
    assert grade("Paris", Item("q", "Capital?", ["Paris"]), "llm",
                 backend=backend) == pytest.approx(expected)
    judge = make_judge("llm", backend=backend)
    decision = judge.decide("Paris", "paris city", Item("q", "Capital?"))
    assert decision.affinity == pytest.approx(expected) and decision.equivalent
    assert two_way_probability(backend, "?", YES, NO) == pytest.approx(expected)


def test_unreadable_replies_are_errors_not_guesses():
    backend = TopKBackend([("Maybe", 1.0)])
    with pytest.raises(ConfideError, match="no Yes/No probability"):
        grade("Paris", Item("q", "Capital?", ["Paris"]), "llm", backend=backend)
    with pytest.raises(CannotScore):
        make_judge("llm", backend=backend).decide("Paris", "Lyon", Item("q", "Capital?"))


def test_llm_judge_reads_the_bundled_model_exactly(hf_model):
    """On a backend with next-token log-probabilities the judge's affinity is the exact
    renormalised probability of the prompt it asks, both ways."""
    judge = make_judge("llm", backend=hf_model)
    item = Item("q", "What is the capital of France?")
    decision = judge.decide("Paris", "Berlin", item)
    prompts = [judge.prompt_for(item.question, "Paris", "Berlin"),
               judge.prompt_for(item.question, "Berlin", "Paris")]
    forward, backward = two_way_probabilities(hf_model, prompts, YES, NO)
    assert decision.affinity == pytest.approx((forward + backward) / 2, abs=1e-9)
    assert 0.0 < forward < 1.0 and 0.0 < backward < 1.0
