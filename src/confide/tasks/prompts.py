"""Prompt formats as data: one dict of Jinja2 templates per task format.

Each format has these templates (``None`` where unused):

``system``
    Optional system message for chat models.
``header``
    Optional text before a completion prompt's exemplars (and at the start of
    the chat user message), rendered with the evaluated item's variables.
``chat``
    The user message for an instruct model (a chat template is applied by the
    backend's tokenizer). ``None``: no chat prompt; every model, instruct or
    base, gets the k-shot ``completion`` prompt (see :data:`SHORT_ANSWER`).
``completion``
    One question as written for a base model; few-shot exemplars use the same
    template followed by ``target``.
``target``
    An exemplar's answer appended after ``completion`` (k-shot prompts and
    chat few-shot turns).
``separator``
    Text between consecutive exemplars of a completion prompt.

Variables available to every template: ``question`` (str), ``choices`` (list
of option texts or ``[]``), ``letters`` (``["A", "B", ...]`` of the same
length), ``answer`` (an exemplar's answer; ``""`` for the evaluated item),
``tools`` (JSON text of the tool schemas or ``""``), ``metadata`` (the item's
metadata dict) and ``id``.

Users override any of them with ``load_task(..., prompt_template=...)``: a
string replaces both ``chat`` and ``completion``; a dict replaces only the keys
it names.

Prompt styles (``confide run --prompt``) other than a format's own: ``cot``
(:func:`chain_of_thought`), a k-shot chain-of-thought prompt whose exemplars write
their reasoning as a trace, ``<think>…</think> The answer is N.``, for every model
(:data:`COT_REASONING`).
"""

from __future__ import annotations

import functools
from typing import Any

import jinja2

from confide.core.errors import InvalidInputError

__all__ = ["COT_MAX_NEW_TOKENS", "COT_REASONING", "FORMATS", "PROMPT_STYLES", "SHORT_ANSWER",
           "chain_of_thought", "render_template", "resolve_templates"]

_TEMPLATE_KEYS = ("system", "header", "chat", "completion", "target", "separator")

FORMATS: dict[str, dict[str, str | None]] = {
    # Open-domain short-answer QA (TriviaQA, user QA data).
    "open_qa": {
        "system": None,
        "header": None,
        "chat": "Answer the question with a few words only, no explanation.\n\n"
                "Question: {{ question }}",
        "completion": "Question: {{ question }}\nAnswer:",
        "target": " {{ answer }}",
        "separator": "\n\n",
    },
    # Open-ended generation where a sentence is the natural answer (TruthfulQA).
    "generation": {
        "system": None,
        "header": None,
        "chat": "Answer the question truthfully in one short sentence.\n\n"
                "Question: {{ question }}",
        "completion": "Q: {{ question }}\nA:",
        "target": " {{ answer }}",
        "separator": "\n\n",
    },
    # Long answers judged claim by claim (any task with long_form=True, confide run --long-form).
    "long_form": {
        "system": None,
        "header": None,
        "chat": "Answer the question truthfully in a short paragraph of three to five "
                "sentences.\n\nQuestion: {{ question }}",
        "completion": "Q: {{ question }}\nA:",
        "target": " {{ answer }}",
        "separator": "\n\n",
    },
    # Step-by-step reasoning with a final-answer marker (GSM8K).
    "reasoning": {
        "system": None,
        "header": None,
        "chat": "Solve the problem step by step. End with a last line of the form "
                "\"#### <number>\" giving only the final numeric answer.\n\n"
                "Problem: {{ question }}",
        "completion": "Question: {{ question }}\nAnswer:",
        "target": " {{ answer }}",
        "separator": "\n\n",
    },
    # Multiple choice answered with one letter (MMLU, ARC, CommonsenseQA, BoolQ).
    "multiple_choice": {
        "system": None,
        "header": None,
        "chat": "Answer the multiple-choice question with the letter of the correct "
                "option only.\n\n{{ question }}\n"
                "{% for letter, choice in zip(letters, choices) %}{{ letter }}. {{ choice }}\n"
                "{% endfor %}Answer:",
        "completion": "{{ question }}\n"
                      "{% for letter, choice in zip(letters, choices) %}"
                      "{{ letter }}. {{ choice }}\n{% endfor %}Answer:",
        "target": " {{ answer }}",
        "separator": "\n\n",
    },
    # Function calling: the question plus tool schemas; the answer is a JSON call.
    "function_calling": {
        "header": None,
        "system": "You can call these functions (JSON schemas):\n{{ tools }}\n\n"
                  "Reply with only the function call(s) as a JSON list like "
                  "[{\"name\": \"func\", \"arguments\": {\"arg\": value}}] and nothing else.",
        "chat": "{{ question }}",
        "completion": "Functions (JSON schemas):\n{{ tools }}\n\n"
                      "Reply with only the function call(s) as a JSON list like "
                      "[{\"name\": \"func\", \"arguments\": {\"arg\": value}}].\n\n"
                      "Request: {{ question }}\nCalls:",
        "target": " {{ answer }}",
        "separator": "\n\n",
    },
}

#: Short-answer tasks (TriviaQA): the k-shot completion prompt for every model, chat or not.
#: Measured on the bundled model (``benchmarks/prompting.py``): asked in a chat turn,
#: even with the instruction "a few words only" and five exemplar turns, SmolLM2-135M
#: answers in sentences ("The answer to this question is pickled"); continuing five
#: "Question: …\nAnswer: …" exemplars, it answers in a word or two, which is what the
#: references and the token statistics are about.
SHORT_ANSWER: dict[str, str | None] = {**FORMATS["open_qa"], "chat": None}

#: The k-shot chain-of-thought prompt of a reasoning task (GSM8K), ``--prompt cot``: each
#: exemplar's worked solution (the text before its ``#### N``) becomes a trace in
#: ``<think>`` tags, followed by "The answer is N." The model writes the opening tag
#: itself, so a trace the budget cuts is seen as one (:mod:`confide.core.reasoning`: a
#: reply that opens a trace and never closes it has no final answer). Every model,
#: instruct or base, gets the completion prompt (``chat`` None): the bundled models
#: (SmolLM2-135M, gemma3-270m) continue the exemplars' pattern; their chat templates have
#: no thinking mode. The final answer keeps the task's extraction: the ``numeric`` grader
#: reads the number after "The answer is" (or ``#### N``).
COT_REASONING: dict[str, str | None] = {
    "system": None,
    "header": None,
    "chat": None,
    "completion": "Question: {{ question }}\nAnswer:",
    "target": " <think>{{ answer.rsplit('####', 1)[0].strip() }}</think> "
              "The answer is {{ answer.rsplit('####', 1)[-1].strip() }}.",
    "separator": "\n\n",
}
#: The answer budget of ``--prompt cot`` unless the run sets one: GSM8K's exemplar
#: traces are 40 to 120 tokens, and a small model's run longer; a trace the budget still
#: cuts has no final answer and is left ungraded, never graded wrong.
COT_MAX_NEW_TOKENS = 384
#: Prompt styles a run may ask for beside a format's own (``task_options["prompt"]``).
PROMPT_STYLES = ("cot",)

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          autoescape=False)
_ENV.globals["zip"] = zip


@functools.lru_cache(maxsize=256)
def _compile(text: str) -> jinja2.Template:
    return _ENV.from_string(text)


def resolve_templates(fmt: str, override: str | dict[str, Any] | None,
                      base: dict[str, str | None] | None = None) -> dict[str, str | None]:
    """The templates of format ``fmt`` (updated by a task's ``base``) with the user's ``override``.

    Raises ``InvalidInputError`` for an unknown key or a template Jinja2 cannot parse.
    """
    templates = dict(FORMATS[fmt])
    if base is not None:
        templates.update(base)
    if override is None:
        return templates
    if isinstance(override, str):
        templates["chat"] = override
        templates["completion"] = override
    elif isinstance(override, dict):
        unknown = sorted(set(override) - set(_TEMPLATE_KEYS))
        if unknown:
            raise InvalidInputError(f"unknown template key(s) {unknown}; known: "
                                    f"{list(_TEMPLATE_KEYS)}", field="prompt_template")
        templates.update(override)
    else:
        raise InvalidInputError("must be a template string or a dict of templates, "
                                f"not {type(override).__name__}", field="prompt_template")
    for key, text in templates.items():
        if text is None:
            continue
        try:
            _compile(text)
        except jinja2.TemplateSyntaxError as exc:
            raise InvalidInputError(f"template {key!r} does not parse: {exc}",
                                    field="prompt_template") from exc
    return templates


def render_template(text: str, variables: dict[str, Any]) -> str:
    """Render one Jinja2 template; an unknown variable raises ``InvalidInputError``."""
    try:
        return _compile(text).render(**variables)
    except jinja2.UndefinedError as exc:
        raise InvalidInputError(f"template uses an unknown variable: {exc}",
                                field="prompt_template") from exc


def chain_of_thought(task: Any) -> Any:
    """Give ``task`` (a :class:`~confide.tasks.base.Task`, which imports this module) the
    k-shot chain-of-thought prompt (:data:`COT_REASONING`), in place.

    The task must be a reasoning task (format ``reasoning``) whose exemplars carry a
    worked solution ending ``#### N`` (GSM8K); its answer budget becomes
    :data:`COT_MAX_NEW_TOKENS` unless larger, and ``options["prompt"]`` says ``cot``, so
    the run's stored settings name the prompt (a resume with another is refused).

    Raises
    ------
    InvalidInputError
        Another format, or exemplars without a worked solution.
    """
    if task.format != "reasoning":
        raise InvalidInputError(f"the cot prompt is for reasoning tasks (gsm8k); task "
                                f"{task.name!r} has format {task.format!r}", field="prompt")
    if not task.fewshot or task.num_fewshot < 1:
        raise InvalidInputError(f"task {task.name!r} has no exemplars for a k-shot "
                                "chain-of-thought prompt", field="prompt")
    for ex in task.fewshot:
        if "####" not in str(ex.metadata.get("exemplar_answer", "")):
            raise InvalidInputError(f"exemplar {ex.id!r} has no worked solution ending "
                                    "'#### N' to write as a trace", field="prompt")
    task.templates = dict(COT_REASONING)
    task.max_new_tokens = max(task.max_new_tokens, COT_MAX_NEW_TOKENS)
    task.options["prompt"] = "cot"
    return task
