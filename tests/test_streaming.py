"""Token by token: the hf backend's hook, the answer stream's deltas, early abstention."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.backends.base import GenerationSpec, TokenEvent
from confide.core.errors import InvalidInputError
from confide.pipeline.streaming import (
    AnswerStream,
    EarlyAbstention,
    StreamEnd,
    TokenUpdate,
    safe_text,
)


def _event(text, token, logprob, sample=None):
    return TokenEvent(0, sample, text, token, logprob, 0.5)


def test_answer_stream_deltas_add_up_and_hold_back_a_possible_stop():
    updates = []
    stream = AnswerStream(updates.append, stop=("\nQ:",))
    for text, token in [(" Par", " Par"), (" Paris", "is"), (" Paris\n", "\n"),
                        (" Paris\nQ", "Q")]:
        assert stream(_event(text, token, math.log(0.5))) is None
    assert [u.delta for u in updates] == ["Par", "is", "", ""]
    assert stream.closing_delta(0, "Paris") == ""
    assert updates[-1].running_confidence == pytest.approx(0.5)
    assert safe_text("Paris\nQ: next", ("\nQ:",)) == "Paris"


def test_running_confidence_is_the_geometric_mean_token_probability():
    updates = []
    stream = AnswerStream(updates.append)
    for p in (0.9, 0.5, 0.2):
        stream(_event("x", "x", math.log(p)))
    expected = [0.9, math.sqrt(0.45), (0.09) ** (1 / 3)]
    assert [u.running_confidence for u in updates] == pytest.approx(expected)


def test_early_abstention_stops_the_greedy_row_and_then_every_sample():
    stream = AnswerStream(lambda u: None, n_choices=2, early=EarlyAbstention(0.5, after=2))
    assert stream(_event("a", "a", math.log(0.9))) is None
    assert stream(_event("a", "a", math.log(0.9), sample=0)) is None
    assert stream(_event("ab", "b", math.log(0.1))) == "abstain"  # sqrt(.09) = 0.3 < 0.5
    assert "0.300 fell below 0.5 after 2 tokens" in stream.abstained
    assert stream(_event("ab", "b", math.log(0.9), sample=0)) == "abstain"
    stream.cancel()
    assert stream(_event("ab", "b", 0.0, sample=0)) == "cancelled"


def test_early_abstention_holds_tokens_until_the_running_confidence_is_checked():
    updates = []
    stream = AnswerStream(updates.append, early=EarlyAbstention(0.5, after=3))
    assert stream(_event(" La", " La", math.log(0.9))) is None
    assert stream(_event(" La Paz", " Paz", math.log(0.9))) is None
    assert updates == []  # tokens 1 and 2: not judged yet, so not handed on
    assert stream(_event(" La Paz is", " is", math.log(0.9))) is None  # 0.9 >= 0.5
    assert [(u.delta, u.n_tokens) for u in updates] == [("La", 1), (" Paz", 2), (" is", 3)]
    assert stream(_event(" La Paz is", " x", math.log(0.9))) is None
    assert len(updates) == 4  # from token 3 on: each token right after its own check
    # (0.9^4 * 0.001)^(1/5) = 0.22 < 0.5: this token is never handed on
    assert stream(_event(" La Paz is x", " x", math.log(0.001))) == "abstain"
    assert len(updates) == 4 and stream.choices[0].sent == "La Paz is"
    assert stream.finish() == []


def test_early_abstention_at_its_first_check_hands_on_nothing():
    updates = []
    stream = AnswerStream(updates.append, early=EarlyAbstention(0.5, after=2))
    assert stream(_event("La", "La", math.log(0.9))) is None
    assert stream(_event("La x", " x", math.log(0.01))) == "abstain"  # sqrt(.009) = 0.09
    assert updates == [] and stream.choices[0].sent == "" and stream.finish() == []
    first = AnswerStream(updates.append, early=EarlyAbstention(0.95, after=1))
    assert first(_event("La", "La", math.log(0.9))) == "abstain"  # checked before it is sent
    assert updates == []


def test_a_short_answer_the_policy_never_judged_is_handed_on_at_its_end():
    updates = []
    stream = AnswerStream(updates.append, n_choices=2, early=EarlyAbstention(0.5, after=4))
    stream(_event("Par", "Par", math.log(0.2)))
    stream(_event("a", "a", math.log(0.2), sample=0))  # samples are never held
    stream(_event("Paris", "is", math.log(0.2)))
    assert [u.choice for u in updates] == [1]
    held = stream.finish()
    assert [(u.delta, u.n_tokens) for u in held] == [("Par", 1), ("is", 2)]
    assert stream.choices[0].sent == "Paris" and stream.finish() == []


def test_without_a_policy_every_token_is_handed_on_at_once():
    updates = []
    stream = AnswerStream(updates.append)
    stream(_event("La", "La", math.log(0.01)))
    assert len(updates) == 1 and stream.finish() == []


@pytest.mark.parametrize("below, after, field", [(0.0, 4, "early_abstain_below"),
                                                 (1.5, 4, "early_abstain_below"),
                                                 (0.3, 0, "early_abstain_after"),
                                                 (0.3, 2.5, "early_abstain_after")])
def test_early_abstention_options_are_checked(below, after, field):
    with pytest.raises(InvalidInputError, match=field):
        EarlyAbstention(below, after)


def test_cli_checks_the_early_abstention_option():
    from typer.testing import CliRunner

    from confide.cli import app

    result = CliRunner().invoke(app, ["serve", "--backend", "openai", "--model", "m",
                                      "--base-url", "http://127.0.0.1:9/v1",
                                      "--early-abstain-below", "1.5"])
    assert result.exit_code == 1 and "early_abstain_below" in result.output


@pytest.mark.model
def test_hf_hook_reports_every_token_of_every_row(hf_model):
    spec = GenerationSpec(max_new_tokens=8, n_samples=2, top_k_alternatives=3)
    events = []

    def hook(event):
        events.append(event)

    prompts = ["The capital of France is", "One, two, three,"]
    streamed = hf_model.generate(prompts, spec, [1, 2], on_token=hook)
    plain = hf_model.generate(prompts, spec, [1, 2])
    for q in range(2):
        for sample, (a, b) in enumerate(zip([streamed[q].greedy, *streamed[q].samples],
                                            [plain[q].greedy, *plain[q].samples])):
            assert a.token_ids == b.token_ids  # the hook changes nothing
            row = sample - 1 if sample else None
            mine = [e for e in events if e.prompt == q and e.sample == row]
            assert [e.logprob for e in mine][:a.n_tokens] == pytest.approx(
                a.token_logprobs.tolist(), abs=1e-6)
            assert np.allclose([e.entropy for e in mine][:a.n_tokens], a.token_entropies)
            assert mine[-1].text.strip().startswith(a.text) and len(mine[0].top) == 3


@pytest.mark.model
def test_hf_hook_ends_a_row_with_its_reason(hf_model):
    spec = GenerationSpec(max_new_tokens=20)
    story = [{"role": "user", "content": "Write a long story about a dragon."}]
    result = hf_model.generate([story], spec, [0],
                               on_token=lambda e: "abstain" if len(e.text) > 5 else None)[0]
    assert result.greedy.finish_reason == "abstain" and result.greedy.n_tokens < 20


@pytest.mark.model
def test_api_stream_yields_tokens_then_the_scored_record(hf_model):
    import confide

    events = list(confide.stream(hf_model, "What is the capital of France?",
                                 scorers=("msp", "length"), max_new_tokens=12))
    tokens, end = events[:-1], events[-1]
    assert all(isinstance(t, TokenUpdate) for t in tokens) and isinstance(end, StreamEnd)
    text = "".join(t.delta for t in tokens) + end.closing[0]
    assert text == end.record.greedy.text
    assert end.record.scores["msp"] == pytest.approx(sum(t.logprob for t in tokens), abs=1e-5)
    whole = confide.score(hf_model, ["What is the capital of France?"],
                          scorers=("msp", "length"), max_new_tokens=12, stop=())
    assert whole[0].answer == text
    early = list(confide.stream(hf_model, "What is the capital of France?", max_new_tokens=12,
                                early_abstain_below=0.999, early_abstain_after=3))
    assert early[-1].abstained and early[-1].record.greedy.n_tokens == 3
    assert len(early) == 1  # fired at its first check (token 3): no token was handed on
