"""A reasoning run's prompt is counted as its generation reads it, in the chat template's
thinking mode: the check that a prompt fits the context window before a run, and the
server's usage counts. On the bundled model under a template whose thinking mode adds the
opening tag to the prompt."""

from __future__ import annotations

import pytest

from confide.backends.base import GenerationSpec
from confide.core.errors import InvalidInputError
from confide.core.reasoning import DEFAULT_TAGS
from confide.core.records import Generation
from confide.pipeline.plan import question_plan
from confide.runs.execution import check_against_model
from confide.serve.replies import usage
from tests.conftest import chat_template

_TURNS = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{%- endfor %}")
#: A thinking mode that opens the trace in the prompt when on (tests/test_thinking_prompt.py).
THINKING_MODE = (_TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                 "{%- if enable_thinking is defined and enable_thinking %}{{- '<think>\\n' }}"
                 "{%- endif %}{%- endif %}")
QUESTION = "What is 2 plus 3?"
MESSAGES = [{"role": "user", "content": QUESTION}]


@pytest.mark.model
def test_a_reasoning_prompt_is_checked_against_the_context_window_in_thinking_mode(hf_model):
    with chat_template(hf_model, THINKING_MODE):
        plan = question_plan(QUESTION, scorers=("msp",), max_new_tokens=8)
        prompt = plan.task.render(plan.task.items[0], chat=True)
        off = len(hf_model.encode(prompt))
        on = len(hf_model.encode(prompt, thinking=True))
        assert on == off + 4  # "<", "think", ">", "\n"
        budget = hf_model.context_window - off  # the plain prompt and its budget fill it
        plain = question_plan(QUESTION, scorers=("msp",), max_new_tokens=budget)
        check_against_model(hf_model, plain, plain.task.items)
        thinking = question_plan(QUESTION, scorers=("msp",), max_new_tokens=budget,
                                 reasoning_tags=DEFAULT_TAGS)
        with pytest.raises(InvalidInputError, match=f"the prompt has {on} tokens"):
            check_against_model(hf_model, thinking, thinking.task.items)


@pytest.mark.model
def test_the_servers_usage_counts_a_reasoning_prompt_in_thinking_mode(hf_model):
    gens = [Generation("5", token_ids=[1], trace=Generation("2+3", token_ids=[2, 3]))]
    with chat_template(hf_model, THINKING_MODE):
        counted = usage(hf_model, MESSAGES, gens, GenerationSpec(reasoning_tags=DEFAULT_TAGS))
        plain = usage(hf_model, MESSAGES, gens, GenerationSpec())
        on = len(hf_model.encode(MESSAGES, thinking=True))
    assert counted == {"prompt_tokens": on, "completion_tokens": 3, "total_tokens": on + 3}
    assert plain is not None and plain["prompt_tokens"] == on - 4
