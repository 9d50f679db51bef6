"""The ``llm`` grader (LLM-as-a-judge): a model asked whether the answer is right, read
from its Yes/No probability. (Registered also under its former name ``judge``; the
equivalence judges of :mod:`confide.equivalence` are another thing.)"""

from __future__ import annotations

from typing import Any

from confide.backends.base import HasChatTemplate
from confide.backends.binary import NO, YES, two_way_probability
from confide.core.errors import CannotScore, ConfideError
from confide.core.records import Item
from confide.grading.base import grader, references

__all__ = ["grading_prompt", "llm"]


def grading_prompt(answer: str, item: Item, *, chat: bool) -> str | list[dict[str, str]]:
    """The grading question: is the proposed answer correct, given the references?

    >>> print(grading_prompt("Paris", Item("q", "Capital of France?", ["Paris"]), chat=False))
    Question: Capital of France?
    Correct answers: Paris
    Proposed answer: Paris
    Is the proposed answer correct? Reply Yes or No.
    Reply:
    """
    text = (f"Question: {item.question}\nCorrect answers: {'; '.join(references(item))}\n"
            f"Proposed answer: {answer}\nIs the proposed answer correct? Reply Yes or No.")
    if chat:
        return [{"role": "user", "content": text}]
    return text + "\nReply:"


@grader("llm", continuous=True, needs_backend=True, aliases=("judge",))
def llm(answer: str, item: Item, *, backend: Any = None) -> float:
    r"""LLM-as-a-judge: the probability a model answers "Yes" to "is this answer correct?".

    .. math::
        g = \frac{P(\text{Yes} \mid q, R, y)}
                 {P(\text{Yes} \mid q, R, y) + P(\text{No} \mid q, R, y)}

    The judge sees the question :math:`q`, the reference answers :math:`R` and
    the proposed answer :math:`y` (:func:`grading_prompt`); the probability sums
    the one-token spellings of Yes and of No. Any confide backend can judge; in
    ``confide run`` it is the run's own model (a small model judging itself is
    a weak, self-favouring judge: name a stronger one through the API with
    ``grade(..., backend=load_model("..."))``). Not measured against the
    human labels here: the bundled 135M model is too weak a judge to be worth
    the time on the shared CPU. An empty answer is graded 0 without asking
    the model (the bundled model gave one 0.25).

    References: [1] Zheng et al., 2023, "Judging LLM-as-a-Judge with MT-Bench
    and Chatbot Arena", NeurIPS; [2] Santilli et al., 2025, "Revisiting
    Uncertainty Quantification Evaluation in Language Models" (LLM judges are
    the least length-biased graders).
    """
    references(item)  # items without references cannot be judged
    if not answer.strip():
        return 0.0  # an empty answer is never right, whatever the judge model says
    if backend is None:
        raise ConfideError("the llm grader needs a model: pass backend= (confide run passes "
                           "the run's model)")
    chat = isinstance(backend, HasChatTemplate) and bool(backend.has_chat_template)
    prompt = grading_prompt(answer, item, chat=chat)
    try:
        return two_way_probability(backend, prompt, YES, NO)
    except CannotScore as exc:
        raise ConfideError(f"item {item.id!r}: the grading model gave no Yes/No probability: "
                           f"{exc}") from exc
