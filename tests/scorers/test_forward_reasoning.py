"""RAUQ and the attention scores of a reasoning reply read its final answer as it was
generated: one pass over the prompt in the chat template's thinking mode, the trace and the
answer, the answer's positions read (and the prompt's, for the whole-sequence score), never
the trace's. Checked on the bundled model against references computed another way (a
step-by-step cached loop after prompt + trace; slogdet of the positions' submatrix)."""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationResult
from confide.core.reasoning import DEFAULT_TAGS
from confide.core.records import Generation, Item, Record
from confide.pipeline.answering import Pipeline
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.forward import RAUQ_ALPHA_CHAT, attention_score_value, rauq_layers
from tests.conftest import chat_template

_TURNS = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{%- endfor %}")
#: A thinking mode that opens the trace in the prompt when on (tests/test_thinking_prompt.py).
THINKING_MODE = (_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                 "{%- if enable_thinking is defined and enable_thinking %}{{- '<think>\\n' }}"
                 "{%- endif %}{%- endif %}")
QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]
REPLY = "2 plus 3 is 5.</think>\n\nThe answer is 5."
NAMES = ("rauq", "attention_score", "attention_score_response")


def _eager(model):
    @contextmanager
    def switched():
        before = model.config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            yield
        finally:
            model.set_attn_implementation(before)
    return switched()


# ----------------------------------------------------------------------- refusals


def _reply(trace: Generation | None, answer_ids=(7, 8)) -> Record:
    gen = Generation("5" if answer_ids else "", token_ids=list(answer_ids),
                     tokens=["x"] * len(answer_ids),
                     token_logprobs=np.log([0.5, 0.9][:len(answer_ids)]), trace=trace,
                     finish_reason="stop" if answer_ids else "length")
    return Record(Item("q", QUESTION), gen)


@pytest.mark.parametrize("name", NAMES)
def test_a_reply_whose_trace_cannot_be_fed_again_is_not_scored(name):
    ctx = ScoringContext(prompt=QUESTION)
    # an imported trace: text, no token ids
    value, reason = run_scorer(SCORERS[name], _reply(Generation("2 plus 3 is 5")), ctx)
    assert math.isnan(value) and "trace's token ids are unknown" in reason
    # a trace cut by the budget: no final answer to read
    cut = _reply(Generation("2 plus 3", token_ids=[1, 2]), answer_ids=())
    value, reason = run_scorer(SCORERS[name], cut, ctx)
    assert math.isnan(value) and "empty answer" in reason


# ----------------------------------------------------------------------- bundled model


@pytest.fixture(scope="module")
def reasoning(hf_model):
    """A reasoning reply to QUESTION under THINKING_MODE (its prompt opened the trace; its
    statistics teacher-forced after the thinking prompt, as the decoding loop gives them),
    scored through a reasoning pipeline; the prompt's ids rendered independently."""
    tok = hf_model.tokenizer
    reply_ids = list(tok(REPLY, add_special_tokens=False)["input_ids"])
    with chat_template(hf_model, THINKING_MODE):
        text = tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False,
                                       enable_thinking=True)
        prompt_ids = list(tok(text, add_special_tokens=False)["input_ids"])
        logprobs = hf_model.continuation_logprobs([QUESTION], [[]], [reply_ids],
                                                  thinking=True)[0]
        whole = Generation(REPLY, token_ids=reply_ids, tokens=[tok.decode([t]) for t in reply_ids],
                           token_logprobs=logprobs.astype(np.float32), finish_reason="stop",
                           trace_opened=True)
        pipe = Pipeline.build(hf_model, NAMES, reasoning_tags=DEFAULT_TAGS)
        record = pipe.complete(Item("q", "What is 2 plus 3?", ["5"]),
                               GenerationResult(greedy=whole, prompt=QUESTION))
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    return record, prompt_ids, reply_ids


def test_the_reply_is_a_trace_then_an_answer_over_exactly_the_generated_tokens(reasoning):
    record, _, reply_ids = reasoning
    greedy = record.greedy
    assert greedy.text == "The answer is 5." and greedy.trace.text == "2 plus 3 is 5."
    assert greedy.trace.token_ids + greedy.token_ids == reply_ids
    assert greedy.n_tokens >= 3 and greedy.trace.n_tokens >= 3
    assert all(math.isfinite(record.scores[n]) for n in NAMES), record.score_errors


def _full_pass(hf_model, ids):
    with _eager(hf_model.model), torch.inference_mode():
        return hf_model.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions


def test_attention_scores_read_the_prompt_and_the_answer_after_the_trace(hf_model, reasoning):
    record, prompt_ids, reply_ids = reasoning
    p, z = len(prompt_ids), record.greedy.trace.n_tokens
    attentions = _full_pass(hf_model, prompt_ids + reply_ids)  # exactly what generation read
    middle = attentions[len(attentions) // 2][0].double()      # (heads, n, n)
    keep = torch.tensor(list(range(p)) + list(range(p + z, p + len(reply_ids))))
    sub = middle[:, keep][:, :, keep]  # lower triangular: its log det is its diagonal's sum
    expected = float(torch.linalg.slogdet(sub).logabsdet.mean())
    rel = 1e-6  # the same full pass of the same tokens in the same dtype
    assert record.scores["attention_score"] == pytest.approx(expected, rel=rel)
    answer = middle.diagonal(dim1=-2, dim2=-1)[:, p + z:].log().mean()
    assert record.scores["attention_score_response"] == pytest.approx(float(answer), rel=rel)
    # the former pass (prompt without thinking mode, answer without its trace) differs
    with chat_template(hf_model, THINKING_MODE):
        length, diagonal = hf_model.attention_diagonals([QUESTION], [record.greedy.token_ids])[0]
    assert length < p  # without the thinking prompt's "<think>\n"
    former = attention_score_value(diagonal[len(diagonal) // 2])
    assert abs(former - expected) > 0.05 * abs(expected)  # -96.2 against -112.2 (bf16)
    former = attention_score_value(diagonal[len(diagonal) // 2], start=length, mean=True)
    assert abs(former - float(answer)) > 0.02 * abs(float(answer))  # -3.79 against -4.00


def _cached_rauq(hf_model, prefix, answer, logprobs, alpha):
    """RAUQ as LM-Polygraph computes it, from the attention of each cached decoding step
    (tests/scorers/test_forward.py), the steps after ``prefix``: prompt + trace."""
    model = hf_model.model
    with _eager(model), torch.inference_mode():
        out = model(input_ids=torch.tensor([prefix]), use_cache=True, output_attentions=True)
        steps = []
        for token in answer[:-1]:
            out = model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values,
                        use_cache=True, output_attentions=True)
            steps.append([a[0, :, 0, -1].float().numpy() for a in out.attentions])
    probs = np.exp(np.asarray(logprobs, float))
    values = []
    for layer in rauq_layers(len(steps[0])):
        per_head = np.array([[step[layer][h] for step in steps]
                             for h in range(len(steps[0][layer]))])
        head = per_head.mean(-1).argmax()
        conf = [probs[0]]
        for j in range(1, len(probs)):
            conf.append(alpha * probs[j] + (1 - alpha) * per_head[head, j - 1] * conf[-1])
        values.append(float(np.mean(np.log(conf))))
    return min(values)


def test_rauq_reads_the_answers_decoding_steps_after_the_thinking_prompt_and_trace(
        hf_model, reasoning):
    record, prompt_ids, _ = reasoning
    greedy = record.greedy
    after_trace = prompt_ids + greedy.trace.token_ids
    expected = _cached_rauq(hf_model, after_trace, greedy.token_ids, greedy.token_logprobs,
                            RAUQ_ALPHA_CHAT)
    # cached steps against one full pass: rounding apart (equal to 1e-9 here in bf16)
    atol = 1e-4 if hf_model.dtype == torch.float32 else 5e-3
    assert record.scores["rauq"] == pytest.approx(expected, abs=atol)
    # a small alpha weighs the attention more: the steps read without the trace differ
    # (-3.375 against -3.340 in bf16), the scorer's value does not
    alpha = 0.05
    with chat_template(hf_model, THINKING_MODE):
        ctx = ScoringContext(backend=hf_model, prompt=QUESTION, options={"rauq_alpha": alpha})
        value, reason = run_scorer(SCORERS["rauq"], record, ctx)
    assert reason is None
    expected = _cached_rauq(hf_model, after_trace, greedy.token_ids, greedy.token_logprobs,
                            alpha)
    assert value == pytest.approx(expected, abs=atol)
    without = _cached_rauq(hf_model, prompt_ids, greedy.token_ids, greedy.token_logprobs, alpha)
    assert abs(without - value) > 5 * atol
