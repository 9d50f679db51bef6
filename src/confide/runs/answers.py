"""Answers with their confidences, from Python: questions answered by a model
(:func:`answer_questions`, behind :func:`confide.score`) and answers made elsewhere
(:func:`score_answers`, behind :func:`confide.score_answers`).

:func:`score_answers` is ``confide score`` without a file or a store: each answer is
written as the OpenAI Chat Completions response it would have been, read through the
import boundary (:func:`confide.ingest.parse_value`: the same checks, the same
statistics as a log) and scored by the import's scorer plan, so an answer gets the
same confidences whichever door it came through.

Each answer also carries its scorers' readable [0, 1] forms
(:class:`~confide.scorers.base.Readable`) and, given a calibrator (an
:class:`AnswerCalibrator`, such as :class:`confide.decisions.calibration.Calibrator`), a
calibrated probability of being right with the calibration's provenance and warnings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confide.backends import Backend, item_seed
from confide.core.errors import InvalidInputError
from confide.core.frames import data_frame
from confide.core.records import Item, Record
from confide.equivalence.judges import default_judge, make_judge
from confide.equivalence.summary import UncertaintySummary, summarize
from confide.grading import GRADERS
from confide.ingest import parse_value
from confide.pipeline.answering import Pipeline
from confide.pipeline.plan import QUESTIONS_GRADER, question_plan, scorer_names
from confide.pipeline.scorer_plan import IMPORTABLE, ScorerPlan, plan_scorers
from confide.runs.claims import ClaimConfig, claim_record
from confide.runs.import_workers import scored
from confide.runs.importing import import_scorers
from confide.scorers import SCORERS
from confide.scorers.base import scorer_at

__all__ = ["AnswerCalibrator", "Question", "ScoredAnswer", "ScoredAnswers", "answer_questions",
           "as_items", "ascore_answers", "backend_model", "score_answers"]

#: A question as the Python API takes it: text, an :class:`Item`, or a mapping with
#: ``question`` (text or chat messages) and optionally ``references`` and ``id``.
Question = str | Item | Mapping[str, Any]

# How an answer's prompt was written (confide.decisions.calibration.PROMPT_STYLES, which
# this layer cannot import): chat messages, or one completion text with k examples.
_PROMPT_STYLES = ("chat", "k-shot")


class AnswerCalibrator(Protocol):
    """What turns an answer's raw confidence of ``scorer`` into a probability of being
    right, with the calibration's provenance and warnings
    (:meth:`confide.decisions.calibration.Calibrator.calibrate`)."""

    scorer: str

    def calibrate(self, confidence: float, *, model: str | None = None,
                  prompt_style: str | None = None, num_fewshot: int | None = None,
                  reason: str | None = None) -> tuple[float, dict[str, Any]]: ...


@dataclass
class ScoredAnswer:
    """An answer with its confidences (higher = more likely correct) and NaN reasons.

    ``grades`` holds the grader's value (1.0 right, 0.0 wrong) where the question came
    with references. ``summary`` describes the sampled answers
    (:func:`confide.equivalence.summary.summarize`) when at least two were drawn.

    ``readable``: per scorer whose value has one, its natural [0, 1] form
    (``ScorerSpec.readable`` holds each formula; NaN where the confidence is NaN): the
    geometric-mean token probability for ``mean_logprob``, the agreeing share for
    ``agreement``. Not a probability of being right: that is ``probability``, present
    (else None) when a calibrator fitted on graded answers stands behind it;
    ``calibration`` then says which (its scorer, model, task, prompt style, items,
    cross-fitted ECE, ...) and lists in ``warnings`` where this answer lies outside
    what it was fitted on.
    """

    question: str
    answer: str
    confidences: dict[str, float]
    reasons: dict[str, str] = field(default_factory=dict)
    record: Record | None = field(default=None, repr=False)
    summary: UncertaintySummary | None = None
    grades: dict[str, float] = field(default_factory=dict)
    readable: dict[str, float] = field(default_factory=dict)
    probability: float | None = None
    calibration: dict[str, Any] | None = None

    def calibrate(self, calibrator: AnswerCalibrator, *, model: str | None,
                  prompt_style: str | None, num_fewshot: int | None = None) -> None:
        """Set :attr:`probability` and :attr:`calibration` from ``calibrator``."""
        name = calibrator.scorer
        self.probability, self.calibration = calibrator.calibrate(
            self.confidences.get(name, float("nan")), model=model, prompt_style=prompt_style,
            num_fewshot=num_fewshot,
            reason=self.reasons.get(name) or (None if name in self.confidences
                                              else f"scorer {name} was not run"))


class ScoredAnswers(list[ScoredAnswer]):
    """The answers of one call, in the order of the questions: a list, plus
    :meth:`to_pandas`."""

    def to_pandas(self) -> Any:
        """One row per answer: ``question``, ``answer``, one column per scorer (its
        confidence, NaN where it has none), ``reason.<scorer>`` (why it is NaN) and
        ``grade.<grader>``, ``readable.<scorer>`` (the [0, 1] form), and with a calibrator
        ``probability``, ``calibration.scorer`` and ``calibration.warnings`` (joined by
        ``; ``). Needs pandas."""
        rows = []
        for a in self:
            row: dict[str, Any] = {"question": a.question, "answer": a.answer,
                                   **a.confidences}
            row.update({f"reason.{k}": v for k, v in a.reasons.items()})
            row.update({f"grade.{k}": v for k, v in a.grades.items()})
            row.update({f"readable.{k}": v for k, v in a.readable.items()})
            if a.calibration is not None:
                row["probability"] = a.probability
                row["calibration.scorer"] = a.calibration.get("scorer")
                row["calibration.warnings"] = "; ".join(a.calibration.get("warnings", []))
            rows.append(row)
        return data_frame(rows)


def _item(question: Question, index: int) -> Item:
    if isinstance(question, Item):
        return question
    if isinstance(question, str):
        return Item(id=f"q{index}", prompt=question)
    if isinstance(question, Mapping):
        unknown = sorted(set(question) - {"id", "question", "references", "metadata"})
        if unknown or "question" not in question:
            raise InvalidInputError(
                "a question mapping has 'question' (text or chat messages) and optionally "
                "'references', 'id', 'metadata'" + (f"; unknown: {', '.join(unknown)}"
                                                    if unknown else "; 'question' missing"),
                field=f"questions[{index}]")
        refs = question.get("references") or []
        refs = [refs] if isinstance(refs, (str, int, float)) else refs
        return Item(id=str(question.get("id", f"q{index}")), prompt=question["question"],
                    references=[str(r) for r in refs],
                    metadata=dict(question.get("metadata") or {}))
    raise InvalidInputError(f"a question is text, an Item or a mapping, not "
                            f"{type(question).__name__}", field=f"questions[{index}]")


def as_items(questions: Question | Sequence[Question]) -> tuple[list[Item], bool]:
    """The items of one question or of a list; and whether one question was given (its
    answer comes back alone). A string is one question, never its characters."""
    if isinstance(questions, (str, Item, Mapping)):
        return [_item(questions, 0)], True
    return [_item(q, i) for i, q in enumerate(questions)], False


def _answer(record: Record, reasons: dict[str, str], skipped: dict[str, str],
            summary: UncertaintySummary | None = None) -> ScoredAnswer:
    confidences = {**record.scores, **{name: float("nan") for name in skipped}}
    return ScoredAnswer(record.item.question, record.greedy.text, confidences,
                        {**reasons, **skipped}, record, summary, dict(record.grades),
                        _readable(confidences))


def _readable(confidences: Mapping[str, float]) -> dict[str, float]:
    out = {}
    for name, value in confidences.items():
        spec = SCORERS[name] if name in SCORERS else None
        if spec is not None and spec.readable is not None and spec.readable.exists:
            out[name] = spec.readable(value)
    return out


def backend_model(model: Backend) -> str | None:
    """The model's name as a run stores it (``config()["model"]``: ``smollm2`` for the
    bundled one), else the backend's ``name``; None when neither is known."""
    config = getattr(model, "config", None)
    try:
        name = config().get("model") if callable(config) else None
    except Exception:  # a backend's config is informational: never fail scoring on it
        name = None
    return str(name) if name else getattr(model, "name", None)


def _with_scorer(scorers: str | Sequence[str], calibrator: AnswerCalibrator | None
                 ) -> str | Sequence[str]:
    # the calibrator reads its own scorer: run it too, where the caller did not name it
    if calibrator is None or scorers in ("all", "free"):
        return scorers
    names = scorer_names(scorers)
    return names if calibrator.scorer in names else (*names, calibrator.scorer)


def _grader(items: Sequence[Item], grader: str | None) -> str | None:
    if grader is not None:
        GRADERS[grader]  # UnknownNameError with suggestions
        return grader
    return QUESTIONS_GRADER if any(it.references for it in items) else None


def answer_questions(model: Backend, items: list[Item], *, scorers: str | Sequence[str],
                     max_new_tokens: int, stop: tuple[str, ...], seed: int, n_samples: int,
                     judge: str, claims: ClaimConfig | bool, grader: str | None,
                     calibrator: AnswerCalibrator | None = None,
                     reasoning_tags: tuple[str, str] | str | None = None) -> ScoredAnswers:
    """Answer each item greedily with ``model``; score, and grade those with references
    (``grader``, default ``contains``); with ``calibrator``, give each answer its
    probability, checked against ``model`` and the prompt the answer was given. What
    :func:`confide.score` does. ``reasoning_tags``: split each answer into its trace and
    final answer (:class:`~confide.pipeline.plan.RunConfig`)."""
    scorers = _with_scorer(scorers, calibrator)
    claim_config = (ClaimConfig(grader=None) if claims is True
                    else claims if isinstance(claims, ClaimConfig) else None)
    plan = question_plan(items, scorers=scorers, max_new_tokens=max_new_tokens, stop=stop,
                         seed=seed, judge=judge, reasoning_tags=reasoning_tags,
                         at_least=max(n_samples, claim_config.n_samples if claim_config else 0))
    grade_with = _grader(items, grader)
    pipe = Pipeline.build(model, plan.scorers, seed=seed, grader=grade_with,
                          judge=make_judge(plan.judge, backend=model),
                          reasoning_tags=plan.spec.reasoning_tags)
    items = plan.task.items
    results = pipe.generate(plan.task, items, plan.spec, [item_seed(seed, it.id) for it in items])
    answers = ScoredAnswers()
    for item, result in zip(items, results, strict=True):
        record = pipe.complete(item, result)  # GenerationFailed: the backend gave up on it
        if claim_config is not None:
            claim_record(record, claim_config, backend=model, seed=seed)
        samples = [g.text for g in record.samples]
        summary = summarize(samples, pipe.judge, item=item) if len(samples) >= 2 else None
        answer = _answer(record, record.score_errors, pipe.skipped, summary)
        if calibrator is not None:
            prompt = plan.task.render(item, chat=model.has_chat_template)
            chat = not isinstance(prompt, str)
            shots = (plan.task.chat_fewshot if isinstance(item.prompt, str) else 0) \
                if chat else plan.task.num_fewshot
            answer.calibrate(calibrator, model=backend_model(model),
                             prompt_style="chat" if chat else "k-shot", num_fewshot=shots)
        answers.append(answer)
    return answers


def _entries(logprobs: Any, where: str) -> list[Any]:
    # One answer's log-probabilities: OpenAI's ``logprobs.content`` list, or the whole
    # ``logprobs`` object holding it.
    if isinstance(logprobs, Mapping) and "content" in logprobs:
        logprobs = logprobs["content"]
    if not isinstance(logprobs, Sequence) or isinstance(logprobs, (str, bytes)):
        raise InvalidInputError("log-probabilities are OpenAI's logprobs.content: a list of "
                                "{token, logprob, top_logprobs}", field=where)
    return list(logprobs)


def _choice(index: int, text: Any, logprobs: Any, where: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise InvalidInputError(f"an answer is text, not {type(text).__name__}", field=where)
    choice: dict[str, Any] = {"index": index, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}
    if logprobs is not None:
        choice["logprobs"] = {"content": _entries(logprobs, f"{where}.logprobs")}
    return choice


def _response(item: Item, answer: Any, samples: Sequence[Any], logprobs: Any,
              sample_logprobs: Sequence[Any] | None, i: int) -> dict[str, Any]:
    if sample_logprobs is not None and len(sample_logprobs) != len(samples):
        raise InvalidInputError(f"{len(sample_logprobs)} log-probability lists for "
                                f"{len(samples)} samples", field=f"sample_logprobs[{i}]")
    choices = [_choice(0, answer, logprobs, f"answers[{i}]")]
    choices += [_choice(j + 1, text, None if sample_logprobs is None else sample_logprobs[j],
                        f"samples[{i}][{j}]") for j, text in enumerate(samples)]
    prompt = item.prompt
    request = ({"prompt": prompt} if isinstance(prompt, str)
               else {"messages": [dict(m) for m in prompt]})
    out: dict[str, Any] = {"id": item.id, "object": "chat.completion", "choices": choices,
                           "request": request}
    if item.references:
        out["references"] = list(item.references)
    return out


def _per_answer(values: Sequence[Any] | None, n: int, name: str) -> list[Any]:
    if values is None:
        return [None] * n
    if isinstance(values, (str, bytes)) or len(values) != n:
        raise InvalidInputError(f"one entry per answer: {n} answers, "
                                f"{'text' if isinstance(values, (str, bytes)) else len(values)}"
                                f" {name}", field=name)
    return list(values)


def score_answers(questions: Question | Sequence[Question], answers: str | Sequence[str], *,
                  samples: Sequence[Sequence[str]] | None = None,
                  logprobs: Sequence[Any] | None = None,
                  sample_logprobs: Sequence[Sequence[Any] | None] | None = None,
                  scorers: str | Sequence[str] = "all", judge: str | None = None,
                  grader: str | None = None, calibrator: AnswerCalibrator | None = None,
                  model: str | None = None, prompt_style: str | None = None
                  ) -> ScoredAnswer | ScoredAnswers:
    """Score answers made elsewhere, through the engine of ``confide score``.

    Parameters
    ----------
    questions : one question or a list (text, :class:`~confide.core.records.Item`, or a
        mapping with ``question`` and optionally ``references`` / ``id``).
    answers : the answer to each question (one text for one question).
    samples : per question, the sampled answers (texts) the agreement scorers read.
    logprobs : per answer, its token log-probabilities as OpenAI's ``logprobs.content``
        list (``[{"token", "logprob", "top_logprobs": [{"token", "logprob"}, ...]}]``),
        or the ``logprobs`` object holding it; None where there are none.
    sample_logprobs : per question, one such list per sample (or None).
    scorers : names (a list or one comma-separated text), ``"all"`` or ``"free"``
        (:func:`confide.runs.importing.import_scorers`). A scorer the answers cannot
        feed (no log-probabilities, no samples) gives NaN with the reason.
    judge : equivalence judge of the sampling scorers (default: the grader's).
    grader : grades answers whose question has references (default ``contains``).
    calibrator : gives each answer a ``probability`` and its ``calibration`` (a
        :class:`~confide.decisions.calibration.Calibrator`; :func:`confide.score_answers`
        also takes the path of its JSON file). Its scorer is run if not named.
    model, prompt_style : the model that wrote the answers and how it was prompted
        (``"chat"`` or ``"k-shot"``; default ``"chat"`` for questions given as chat
        messages), checked against what the calibrator was fitted on: a difference, or
        a side that does not say, is listed in ``calibration["warnings"]``.

    Returns
    -------
    ScoredAnswer for one question, else :class:`ScoredAnswers` in question order.

    Raises
    ------
    InvalidInputError
        Mismatched lengths, or a bad answer or log-probability, naming the field
        (``answers[3].logprobs: ...``).
    """
    items, single = as_items(questions)
    texts = [answers] if isinstance(answers, str) else list(answers)
    if single and not isinstance(answers, str):
        raise InvalidInputError("one question takes one answer text", field="answers")
    if len(texts) != len(items):
        raise InvalidInputError(f"{len(items)} questions, {len(texts)} answers",
                                field="answers")
    if prompt_style is not None and prompt_style not in _PROMPT_STYLES:
        raise InvalidInputError(f"must be one of {', '.join(_PROMPT_STYLES)}, got "
                                f"{prompt_style!r}", field="prompt_style")
    scorers = _with_scorer(scorers, calibrator)
    n = len(items)
    if single:  # the per-answer arguments of one question, wrapped as lists of one
        samples = None if samples is None else [samples]  # type: ignore[list-item]
        logprobs = None if logprobs is None else [logprobs]
        sample_logprobs = None if sample_logprobs is None else [sample_logprobs]
    per_samples = [s or [] for s in _per_answer(samples, n, "samples")]
    per_logprobs = _per_answer(logprobs, n, "logprobs")
    per_sample_lp = _per_answer(sample_logprobs, n, "sample_logprobs")

    names = (import_scorers(scorers) if scorers in ("all", "free")
             else tuple(dict.fromkeys(_names(scorers))))
    for name in names:
        scorer_at(name, "answer")
    grade_with = _grader(items, grader) or QUESTIONS_GRADER
    judge_obj = make_judge(judge or default_judge(grade_with))
    static = plan_scorers(names, IMPORTABLE, imported=True)[1]
    plan = ScorerPlan([SCORERS[s] for s in names if s not in static], imported=True)
    source = Path("<answers>")
    out = ScoredAnswers()
    for i, item in enumerate(items):
        response = _response(item, texts[i], per_samples[i], per_logprobs[i],
                             per_sample_lp[i], i)
        imported = parse_value(response, i + 1, source, "openai")
        imported.item = item  # the caller's item as given (its id, metadata)
        record, _caps = scored(imported, plan, judge_obj, grade_with)
        answer = _answer(record, record.score_errors, static)
        if calibrator is not None:
            style = prompt_style or (None if isinstance(item.prompt, str) else "chat")
            answer.calibrate(calibrator, model=model, prompt_style=style)
        out.append(answer)
    return out[0] if single else out


def _names(scorers: str | Sequence[str]) -> list[str]:
    if isinstance(scorers, str):
        return [s.strip() for s in scorers.split(",") if s.strip()]
    return list(scorers)


async def ascore_answers(questions: Question | Sequence[Question],
                         answers: str | Sequence[str], **options: Any
                         ) -> ScoredAnswer | ScoredAnswers:
    """:func:`score_answers` awaited off the event loop (in a worker thread), so it runs
    inside Jupyter's running loop and beside other requests."""
    return await asyncio.to_thread(score_answers, questions, answers, **options)
