"""The vllm backend in a reasoning run, with the bundled model's tokenizer and no engine:
prompts rendered in a chat template's thinking mode as ``hf`` renders them, and the replies
of a prompt that opened the trace marked, so a reply cut inside its trace has no final
answer. vLLM's outputs are hand-built objects shaped like vLLM's (``tests/vllm_outputs.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vllm_outputs import CompletionOutput, RequestOutput  # noqa: E402

from confide.backends.base import GenerationSpec, encode_prompt, opens_trace  # noqa: E402
from confide.backends.vllm import (  # noqa: E402
    TokenText,
    assemble,
    rendered_prompts,
    request_plan,
    to_generation,
)
from confide.core.reasoning import DEFAULT_TAGS, final_answer_missing, split_reasoning  # noqa: E402

_TURNS = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{%- endfor %}")
#: A thinking mode (``enable_thinking``) that opens the trace in the prompt when on (as
#: tests/test_thinking_prompt.py's THINKING_MODE).
THINKING_MODE = (_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                 "{%- if enable_thinking is defined and enable_thinking %}{{- '<think>\\n' }}"
                 "{%- endif %}{%- endif %}")
#: Qwen3's shape: thinking on unless turned off, the reply writes its own opening tag.
THINKS_UNLESS_OFF = (_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                     "{%- if enable_thinking is defined and not enable_thinking %}"
                     "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")
QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]


@pytest.fixture(scope="module")
def tokenizer():
    """The bundled SmolLM2's tokenizer alone (no model), its template one to change."""
    from transformers import AutoTokenizer

    from confide.backends.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("smollm2").path)


def _with(tokenizer, template):
    tokenizer.chat_template = template
    return tokenizer


def test_a_reasoning_run_renders_the_thinking_mode_and_marks_a_prompt_that_opens_the_trace(
        tokenizer):
    tok = _with(tokenizer, THINKING_MODE)
    (on, opened), = rendered_prompts(tok, [QUESTION], DEFAULT_TAGS)
    (off, closed), = rendered_prompts(tok, [QUESTION], None)
    # the very ids hf generates from and its passes read again (encode_prompt, thinking=)
    assert on == encode_prompt(tok, QUESTION, thinking=True)
    assert off == encode_prompt(tok, QUESTION)
    assert tok.decode(on).endswith("<|im_start|>assistant\n<think>\n") and opened
    assert tok.decode(off).endswith("<|im_start|>assistant\n") and not closed
    assert len(on) > len(off)
    # a thinking template whose prompt leaves the opening tag to the reply opens nothing;
    # a k-shot text prompt whose exemplars hold tags, and tags of another model, neither
    tok = _with(tokenizer, THINKS_UNLESS_OFF)
    (ids, opened), = rendered_prompts(tok, [QUESTION], DEFAULT_TAGS)
    assert tok.decode(ids).endswith("assistant\n") and not opened
    shots = "Q: 1+1?\nA: <think>1+1=2</think> 2\n\nQ: 2+3?\nA:"
    (ids, opened), = rendered_prompts(tok, [shots], DEFAULT_TAGS)
    assert ids == list(tok(shots)["input_ids"]) and not opened
    tok = _with(tokenizer, THINKING_MODE)
    (ids, opened), = rendered_prompts(tok, [QUESTION], ("<reasoning>", "</reasoning>"))
    assert not opened and opens_trace(tok, ids, DEFAULT_TAGS)


def _text(tokenizer) -> TokenText:
    return TokenText(decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                     piece=lambda t: tokenizer.decode([t]),
                     end_ids=frozenset({tokenizer.eos_token_id}))


def test_replies_of_a_prompt_that_opened_the_trace_split_as_traces(tokenizer):
    tok = _with(tokenizer, THINKING_MODE)
    spec = GenerationSpec(max_new_tokens=6, n_samples=1, reasoning_tags=DEFAULT_TAGS)
    rendered = rendered_prompts(tok, [QUESTION, "What is 2 plus 3?"], spec.reasoning_tags)
    assert [opened for _, opened in rendered] == [True, False]
    plan = request_plan(spec, [0, 7], 2, logprobs=0)
    cut = tok("Let me add 2 and 3", add_special_tokens=False)["input_ids"][:6]
    closed = tok("2+3=5</think>\n\n5", add_special_tokens=False)["input_ids"]
    outputs = [RequestOutput([CompletionOutput(cut, None, finish_reason="length")]),
               RequestOutput([CompletionOutput(closed, None)]),
               RequestOutput([CompletionOutput(cut, None, finish_reason="length")]),
               RequestOutput([CompletionOutput(cut, None, finish_reason="length")])]
    results = assemble(plan, outputs, lambda out: to_generation(
        out, _text(tok), spec, stats_k=0, vocab_size=len(tok)), 2,
        opened=[opened for _, opened in rendered])
    chat, text = results
    assert chat.greedy.trace_opened and chat.samples[0].trace_opened
    assert not text.greedy.trace_opened and not text.samples[0].trace_opened
    # cut by the budget inside the trace its prompt opened: a trace, no final answer
    greedy = split_reasoning(chat.greedy, DEFAULT_TAGS)
    assert final_answer_missing(greedy) and greedy.trace.text == tok.decode(cut).strip()
    assert greedy.finish_reason == "length"
    sample = split_reasoning(chat.samples[0], DEFAULT_TAGS)
    assert (sample.text, sample.trace.text) == ("5", "2+3=5")
    # the same cut reply from a prompt that opened nothing is an answer, as before
    assert split_reasoning(text.greedy, DEFAULT_TAGS).trace is None
    # without flags (no reasoning run) nothing is marked
    plain = assemble(plan, outputs, lambda out: to_generation(
        out, _text(tok), spec, stats_k=0, vocab_size=len(tok)), 2)
    assert not any(g.trace_opened for r in plain for g in (r.greedy, *r.samples))
