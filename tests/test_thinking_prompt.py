"""A chat template whose generation prompt opens the reasoning block (``<think>\\n``): the
reply holds no opening tag, a reply cut before its closing tag is a trace with no final
answer, and every pass of the hf backend over the reply reads the prompt the reply was
generated from, in thinking mode, and the answer span, not the trace."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationSpec
from confide.core.reasoning import DEFAULT_TAGS, final_answer_missing, split_reasoning
from confide.core.records import Generation, Item
from confide.pipeline.answering import Pipeline
from tests.conftest import chat_template

_TURNS = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{%- endfor %}")
#: QwQ's and the Qwen3 thinking models' shape: the generation prompt always opens the trace.
OPENS_TRACE = (_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' "
               "}}{%- endif %}")
#: A template with a thinking mode (``enable_thinking``) that opens the trace only when on.
THINKING_MODE = (_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                 "{%- if enable_thinking is defined and enable_thinking %}{{- '<think>\\n' }}"
                 "{%- endif %}{%- endif %}")
QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 0.5}  # as tests/backends/test_hf.py
# exemplars with one-line traces (tests/test_reasoning_generation.py): the bundled model
# closes its trace, then answers
SHORT_COT = ("Question: What is 2 plus 2?\nAnswer: <think>2 + 2 = 4</think> The answer is 4."
             "\n\nQuestion: What is 3 plus 3?\nAnswer: <think>3 + 3 = 6</think> The answer "
             "is 6.\n\nQuestion: What is 5 plus 1?\nAnswer: <think>5 + 1 = 6</think> The "
             "answer is 6.\n\nQuestion: What is 4 plus 4?\nAnswer:")


# --- the split -------------------------------------------------------------------------


def test_a_reply_whose_prompt_opened_the_trace_is_all_trace_until_its_closing_tag():
    tokens = ["Let", " me", " add"]
    cut = split_reasoning(Generation("Let me add", tokens=tokens, token_ids=[1, 2, 3],
                                     token_logprobs=np.array([-0.1, -0.2, -0.3]),
                                     finish_reason="length", trace_opened=True))
    assert cut.text == "" and cut.trace.text == "Let me add" and final_answer_missing(cut)
    assert cut.trace.tokens == tokens and cut.n_tokens == 0 and cut.finish_reason == "length"
    closed = split_reasoning(Generation("2+3 is 5</think>\n\n5", tokens=["2+3 is 5", "</think>",
                                                                         "\n\n", "5"],
                                        trace_opened=True))
    assert (closed.text, closed.trace.text, closed.tokens) == ("5", "2+3 is 5", ["\n\n", "5"])
    # the same reply from a prompt that opened nothing is an answer, as before
    assert split_reasoning(Generation("Let me add", tokens=tokens)).trace is None


# --- the bundled model under a template that ends with <think>\n ------------------------


@pytest.mark.model
def test_the_hf_backend_marks_replies_of_a_prompt_that_opened_the_trace(hf_model):
    with chat_template(hf_model, OPENS_TRACE):
        prompt_ids = hf_model.encode(QUESTION, thinking=True)
        assert hf_model.tokenizer.decode(prompt_ids).endswith("<|im_start|>assistant\n<think>\n")
        assert hf_model.opens_trace(prompt_ids, DEFAULT_TAGS)
        pipe = Pipeline.build(hf_model, ("mean_logprob", "cued_answer_logprob", "trace_length"),
                              grader="numeric", reasoning_tags=DEFAULT_TAGS)
        spec = GenerationSpec(max_new_tokens=3, n_samples=1, reasoning_tags=DEFAULT_TAGS)
        result = hf_model.generate([QUESTION], spec, [0])[0]
        result.prompt = QUESTION
        whole = result.greedy
        assert whole.trace_opened and all(s.trace_opened for s in result.samples)
        assert "<think>" not in whole.text and "</think>" not in whole.text
        record = pipe.complete(Item("q", "What is 2 plus 3?", ["5"]), result)
    greedy = record.greedy
    # cut by the budget inside the trace: a trace, no final answer, ungraded, never scored
    assert final_answer_missing(greedy) and greedy.finish_reason == "length"
    assert greedy.trace.n_tokens == whole.n_tokens == 3
    assert "numeric" not in record.grades
    assert "token budget ran out inside the reasoning trace" in record.grade_errors["numeric"]
    for name in ("mean_logprob", "cued_answer_logprob", "trace_length"):
        assert math.isnan(record.scores[name])
    # without reasoning tags nothing is marked and the reply is read whole
    plain = hf_model.generate([QUESTION], GenerationSpec(max_new_tokens=3), [0])[0].greedy
    assert not plain.trace_opened


# --- passes over the reply read its own prompt, in thinking mode, and its answer ---------


@pytest.mark.model
def test_passes_over_a_reply_read_the_prompt_it_was_generated_from_in_thinking_mode(hf_model):
    spec = GenerationSpec(max_new_tokens=6, reasoning_tags=DEFAULT_TAGS)
    with chat_template(hf_model, THINKING_MODE):
        on, off = (hf_model.encode(QUESTION, thinking=t) for t in (True, False))
        assert on != off and hf_model.tokenizer.decode(on).endswith("assistant\n<think>\n")
        assert hf_model.generation_prompt(QUESTION, thinking=True) == on
        gen = hf_model.generate([QUESTION], spec, [0])[0].greedy
        assert gen.trace_opened  # generated from `on`, which opens the trace
        again = hf_model.continuation_logprobs([QUESTION], [[]], [gen.token_ids],
                                               thinking=True)[0]
        unthinking = hf_model.continuation_logprobs([QUESTION], [[]], [gen.token_ids])[0]
        length, diagonal = hf_model.attention_diagonals([QUESTION], [gen.token_ids],
                                                        thinking=True)[0]
    # teacher-forcing the reply after the thinking prompt gives the generation's own
    # log-probabilities; after the prompt without thinking mode it does not
    atol = TOLERANCE[hf_model.dtype]
    np.testing.assert_allclose(again, gen.token_logprobs, atol=atol)
    assert np.abs(unthinking - gen.token_logprobs).max() > 2 * atol
    assert length == len(on) and diagonal.shape[-1] == len(on) + gen.n_tokens


def _states(backend, ids, layer):
    with torch.inference_mode():
        out = backend.model.get_decoder()(torch.tensor([ids]), output_hidden_states=True)
    return out.hidden_states[layer][0].float().numpy()


@pytest.mark.model
def test_pooled_hidden_states_of_a_reasoning_reply_are_its_answers_own(hf_model):
    spec = GenerationSpec(max_new_tokens=24, stop=("\n\n",), hidden_layers=(-1,),
                          reasoning_tags=DEFAULT_TAGS)
    gen = hf_model.generate([SHORT_COT], spec, [0])[0].greedy
    split = split_reasoning(gen)
    n_trace, n = split.trace.n_tokens, gen.n_tokens
    assert 0 < n_trace < n and split.text == "The answer is 8."
    prompt = hf_model.encode(SHORT_COT)
    states = _states(hf_model, prompt + gen.token_ids, -1)[len(prompt):]  # the reply's own
    answer, whole = states[n_trace:].mean(0), states.mean(0)
    pooled = gen.hidden["-1:mean"].astype(np.float64)
    assert np.linalg.norm(pooled - answer) < 0.2 * np.linalg.norm(pooled - whole)
    # the reply's last token's state, up to the cached pass's rounding (bfloat16: a few
    # elements a tenth apart), and far from the trace's last one
    last = gen.hidden["-1:last"].astype(np.float64)
    assert np.linalg.norm(last - states[-1]) < 0.05 * np.linalg.norm(states[-1])
    assert np.linalg.norm(last - states[-1]) < 0.2 * np.linalg.norm(last - states[n_trace - 1])
    assert split.hidden is gen.hidden  # the split keeps them with the answer
