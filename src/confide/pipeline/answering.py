"""One path from a question to a scored, graded record: generate → record → score → grade.

``confide.score`` (the API), the run loop (:mod:`confide.runs.execution`) and the
server (:mod:`confide.serve.app`) all go through a :class:`Pipeline`:

1. :func:`~confide.pipeline.scorer_plan.plan_scorers` splits the chosen scorers into
   those the backend can feed and those skipped (with why);
2. :meth:`Pipeline.generate` renders the items' prompts with the task's
   format and generates the greedy answer and the samples (the server
   generates through its own batching queue instead);
3. :meth:`Pipeline.complete` turns one :class:`~confide.backends.GenerationResult`
   into a :class:`~confide.core.records.Record`, scores it (NaN with a reason where
   a scorer cannot answer) and grades it when a grader is set and the item
   has references.

A reasoning pipeline (``reasoning_tags`` set) splits every answer, greedy and sampled,
into its trace and final answer there (:func:`split_result`), whichever backend made it:
the one place where generations become records. Its scorer plan counts the trace among
what the backend gives (``Need.TRACE``), so DeepConf's scorers of the trace run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from confide.backends.base import Backend, GenerationResult, GenerationSpec
from confide.core.errors import BackendError, InvalidInputError
from confide.core.needs import Need
from confide.core.reasoning import Tags, missing_answer_reason, split_reasoning
from confide.core.records import Generation, Item, Record
from confide.equivalence.clustering import Judge
from confide.grading import GRADERS, grade
from confide.pipeline.scorer_plan import ScorerPlan, plan_scorers, score_record
from confide.scorers import ScorerSpec, ScoringContext
from confide.tasks import Task

__all__ = ["DEFAULT_SCORERS", "GenerationFailed", "Pipeline", "check_question", "grade_record",
           "split_result"]

DEFAULT_SCORERS = ("msp", "mean_logprob", "min_logprob", "mean_entropy", "max_entropy",
                   "self_certainty", "length")


class GenerationFailed(BackendError):
    """The backend gave no answer for an item (an HTTP backend after all retries)."""

    def __init__(self, item_id: str, reason: str) -> None:
        super().__init__(f"item {item_id!r}: {reason}")
        self.item_id, self.reason = item_id, reason


def check_question(item: Item) -> None:
    """Refuse an item whose question (:attr:`Item.question`) is empty."""
    if not item.question.strip():
        raise InvalidInputError(f"item {item.id!r} has an empty question", field="question")


def grade_record(record: Record, grader: str, backend: Backend | None = None) -> None:
    """Fill ``record.grades[grader]``; items without references are scored, not graded.

    A reasoning reply with no final answer (its trace cut by the token budget) is not
    graded wrong: it is left ungraded, the reason in ``record.grade_errors[grader]``."""
    missing = missing_answer_reason(record.greedy)
    if record.item.references and missing is not None:
        record.grade_errors[grader] = missing
    elif record.item.references:
        options = {"backend": backend} if GRADERS[grader].needs_backend else {}
        record.grades[grader] = grade(record.greedy.text, record.item, grader, **options)


def split_result(result: GenerationResult, tags: Tags | None) -> GenerationResult:
    """``result`` with its greedy answer and every sample split into trace and final answer
    by ``tags`` (:func:`~confide.core.reasoning.split_reasoning`; a generation that has a
    trace already, from a server's reasoning field, is kept); ``result`` itself when
    ``tags`` is None."""
    if tags is None:
        return result

    def split(gen: Generation) -> Generation:
        return split_reasoning(gen, tags)

    return replace(result, greedy=None if result.greedy is None else split(result.greedy),
                   samples=[split(g) for g in result.samples])


@dataclass
class Pipeline:
    """A backend with the scorers it can feed, an optional judge and an optional grader.

    Build it with :meth:`build`; ``skipped`` maps each chosen scorer the
    backend cannot feed to the reason. ``reasoning_tags``: split every answer into
    trace and final answer by these tags (None: answers are read whole).
    """

    backend: Backend
    scorers: list[ScorerSpec]
    skipped: dict[str, str] = field(default_factory=dict)
    judge: Judge | None = None
    grader: str | None = None
    seed: int = 0
    reasoning_tags: Tags | None = None

    @classmethod
    def build(cls, backend: Backend, scorers: Sequence[str] = DEFAULT_SCORERS, *,
              judge: Judge | None = None, grader: str | None = None, seed: int = 0,
              reasoning_tags: Tags | None = None) -> Pipeline:
        """Plan ``scorers`` for ``backend``'s capabilities (with the trace, ``Need.TRACE``,
        when ``reasoning_tags`` are set) and check ``grader``'s name."""
        if grader is not None:
            GRADERS[grader]
        usable, skipped = plan_scorers(scorers, capabilities(backend, reasoning_tags))
        return cls(backend, usable, skipped, judge, grader, seed, reasoning_tags)

    def __post_init__(self) -> None:
        self._plan = ScorerPlan(self.scorers)

    @property
    def capabilities(self) -> frozenset[Need]:
        """What the scorers were planned for: the backend's, with the trace when reasoning."""
        return capabilities(self.backend, self.reasoning_tags)

    @property
    def n_samples(self) -> int:
        """The most samples any usable scorer needs."""
        return max([s.n_samples for s in self.scorers], default=0)

    def generate(self, task: Task, items: Sequence[Item], spec: GenerationSpec,
                 seeds: list[int]) -> list[GenerationResult]:
        """Render ``items`` with ``task``'s prompt format and generate, one result per item."""
        prompts = [task.render(it, chat=self.backend.has_chat_template) for it in items]
        results = self.backend.generate(prompts, spec, seeds)
        for result, prompt in zip(results, prompts, strict=True):
            result.prompt = prompt
        return results

    def complete(self, item: Item, result: GenerationResult, *, seconds: float = 0.0,
                 seed: int | None = None) -> Record:
        """The scored (and, with a grader, graded) record of one generation result.

        ``seed`` seeds scorers that ask the model again (default: the
        pipeline's). Raises :class:`GenerationFailed` when the backend gave no
        answer for the item.
        """
        result = split_result(result, self.reasoning_tags)
        if result.greedy is None:
            raise GenerationFailed(item.id, result.error or "the backend returned no answer")
        record = Record(item=item, greedy=result.greedy, samples=result.samples,
                        seconds=seconds)
        ctx = ScoringContext(backend=self.backend, judge=self.judge,
                             seed=self.seed if seed is None else seed, prompt=result.prompt,
                             reasoning_tags=self.reasoning_tags)
        score_record(record, self._plan, ctx)
        if self.grader is not None:
            grade_record(record, self.grader, self.backend)
        return record


def capabilities(backend: Backend, reasoning_tags: Tags | None = None) -> frozenset[Need]:
    """What ``backend`` gives, with the trace (``Need.TRACE``) in a reasoning pipeline:
    every answer is split there, whichever backend made it."""
    caps = frozenset(backend.capabilities)
    return caps | {Need.TRACE} if reasoning_tags is not None else caps
