"""The public Python API: load_model, score, evaluate, open_run.

    >>> import confide
    >>> model = confide.load_model()                       # doctest: +SKIP
    >>> confide.score(model, ["Who wrote Hamlet?"])        # doctest: +SKIP
    >>> run = confide.evaluate(model, task="triviaqa", limit=20)  # doctest: +SKIP
    >>> run.table.rows[0].metrics["auroc"]                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confide.backends import Backend, item_seed, load_backend
from confide.backends.models import DEFAULT_MODEL
from confide.core.errors import InvalidInputError
from confide.core.options import check_distribution
from confide.core.records import Item, Record
from confide.decisions.refining import refine
from confide.equivalence.summary import UncertaintySummary, summarize
from confide.evaluation.selfreflect import SelfReflectResult, selfreflect_distance
from confide.pipeline.answering import DEFAULT_SCORERS, Pipeline
from confide.pipeline.plan import RunConfig, RunPlan, prepare, question_plan
from confide.pipeline.streaming import EarlyAbstention, StreamEnd, TokenUpdate, stream_answer
from confide.runs.claims import ClaimConfig, claim_record
from confide.runs.execution import Progress, RunOutcome
from confide.runs.execution import execute as execute_plan
from confide.runs.stored import Run, default_run_dir, evaluate, open_run

__all__ = ["EarlyAbstention", "Run", "RunConfig", "RunPlan", "ScoredAnswer", "SelfReflectResult",
           "StreamEnd", "TokenUpdate", "UncertaintySummary", "apply_learned", "default_run_dir",
           "evaluate", "execute", "fit_learned", "load_model", "make_report", "open_run", "prepare",
           "refine",
           "score", "selfreflect_distance", "stream", "summarize"]


def load_model(model: str = DEFAULT_MODEL, *, backend: str = "hf", **options: Any) -> Backend:
    """Load a model behind a backend: ``load_model()`` gives the bundled SmolLM2-135M-Instruct.

    ``model`` is a bundled alias (``smollm2``, ``gemma3-270m``), a ``.gguf``
    file, a transformers directory or a hub id; ``options`` go to the backend
    (``device``, ``batch_size``, ``dtype`` for ``hf``).
    """
    return load_backend(backend, model, **options)


@dataclass
class ScoredAnswer:
    """An answer with its confidences (higher = more likely correct) and NaN reasons.

    ``summary`` describes the sampled answers (:func:`confide.equivalence.summary.summarize`)
    when at least two were drawn (``n_samples``, or a sampling scorer)."""

    question: str
    answer: str
    confidences: dict[str, float]
    reasons: dict[str, str] = field(default_factory=dict)
    record: Record | None = field(default=None, repr=False)
    summary: UncertaintySummary | None = None


def execute(config: RunConfig | RunPlan, out: str | Path, *, backend: Backend | None = None,
            progress: Progress | None = None, ray: str | None = None,
            workers: int | None = None, threads_per_worker: int | None = None) -> RunOutcome:
    """Generate, score, grade and store every item of the run not stored yet
    (:func:`confide.runs.execution.execute`), here or, with ``ray`` (``"local"`` or a
    cluster address), on ``workers`` Ray actors; the stored records are the same."""
    check_distribution(ray, workers, threads_per_worker)
    if ray is None:
        return execute_plan(config, out, backend=backend, progress=progress)
    if backend is not None:
        raise InvalidInputError("Ray workers load their own model by name (hf, vllm); "
                                "a loaded backend stays in this process", field="ray")
    from confide.runs.ray_executor import RayExecutor

    executor = RayExecutor(ray, workers=workers, threads_per_worker=threads_per_worker)
    return execute_plan(config, out, executor=executor, progress=progress)


def score(model: Backend, questions: list[str] | list[Item], *,
          scorers: tuple[str, ...] | list[str] = DEFAULT_SCORERS, max_new_tokens: int = 32,
          stop: tuple[str, ...] = ("\n",), seed: int = 0, n_samples: int = 0,
          judge: str = "exact", claims: ClaimConfig | bool = False) -> list[ScoredAnswer]:
    """Answer each question greedily and return the answers with their confidences.

    ``n_samples`` draws at least that many samples (for :attr:`ScoredAnswer.summary`);
    ``judge`` clusters them (:mod:`confide.equivalence.judges`).

    ``claims`` (True or a :class:`~confide.runs.claims.ClaimConfig`): also split each
    answer into claims and score them (``answer.record.claims``; ungraded), for
    long answers: give a larger ``max_new_tokens`` and ``stop=()``; then
    :func:`confide.refine` drops or marks the doubtful claims.
    """
    from confide.equivalence.judges import make_judge

    claim_config = (ClaimConfig(grader=None) if claims is True
                    else claims if isinstance(claims, ClaimConfig) else None)

    plan = question_plan(questions, scorers=scorers, max_new_tokens=max_new_tokens, stop=stop,
                         seed=seed, judge=judge,
                         at_least=max(n_samples, claim_config.n_samples if claim_config else 0))
    pipe = Pipeline.build(model, plan.scorers, seed=seed,
                          judge=make_judge(plan.judge, backend=model))
    items = plan.task.items
    results = pipe.generate(plan.task, items, plan.spec, [item_seed(seed, it.id) for it in items])
    answers = []
    for item, result in zip(items, results, strict=True):
        record = pipe.complete(item, result)  # GenerationFailed: the backend gave up on it
        if claim_config is not None:
            claim_record(record, claim_config, backend=model, seed=seed)
        reasons = {**record.score_errors, **pipe.skipped}
        confidences = {**record.scores, **{name: float("nan") for name in pipe.skipped}}
        samples = [g.text for g in record.samples]
        summary = summarize(samples, pipe.judge, item=item) if len(samples) >= 2 else None
        answers.append(ScoredAnswer(item.question, record.greedy.text, confidences, reasons,
                                    record, summary))
    return answers


def stream(model: Backend, question: str | Item, *,
           scorers: tuple[str, ...] | list[str] = DEFAULT_SCORERS, max_new_tokens: int = 64,
           stop: tuple[str, ...] = (), seed: int = 0,
           early_abstain_below: float | None = None, early_abstain_after: int = 4
           ) -> Iterator[TokenUpdate | StreamEnd]:
    """Answer one question token by token, with confidence while the answer streams.

    Yields a :class:`~confide.pipeline.streaming.TokenUpdate` per token (text to show,
    log-probability, entropy, running confidence), then one
    :class:`~confide.pipeline.streaming.StreamEnd` whose ``record`` is scored like
    :func:`score`'s. With ``early_abstain_below`` the answer stops once its
    running confidence falls below it (after ``early_abstain_after`` tokens) and
    ``StreamEnd.abstained`` says why. Leaving the loop early stops generation.

    >>> for event in confide.stream(model, "Capital of France?"):  # doctest: +SKIP
    ...     print(event.delta if isinstance(event, TokenUpdate) else event.record.scores)
    """
    early = None if early_abstain_below is None else EarlyAbstention(early_abstain_below,
                                                                     early_abstain_after)
    plan = question_plan([question], scorers=scorers, max_new_tokens=max_new_tokens,
                         stop=stop, seed=seed)
    item = plan.task.items[0]
    pipe = Pipeline.build(model, plan.scorers, seed=seed)
    prompt = plan.task.render(item, chat=model.has_chat_template)
    return stream_answer(pipe, item, prompt, plan.spec, item_seed(seed, item.id), early=early)


def fit_learned(run: str | Path, *, kind: str = "probe", out: str | Path | None = None,
                **options: Any) -> Any:
    """Fit a probe, lens probe or combiner (:func:`confide.learned.fit`) or a density model
    (``mahalanobis``, ``relative_mahalanobis``, ``huq``: :func:`confide.learned.density.fit`) on a
    stored run; save it to ``out`` (JSON) when given. Returns the
    :class:`~confide.learned.Learned`."""
    from confide.learned import Kind, Learned, density, fit_run

    folds = options.get("n_folds", 2)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise InvalidInputError(f"cross-fitting needs at least 2 folds, got {folds!r}",
                                field="n_folds")
    model: Learned  # a Density is a Learned
    if kind in density.KINDS:
        model = density.fit_run(run, kind=kind, **options)
    elif options.get("background") is not None:
        raise InvalidInputError("only relative_mahalanobis takes a background run",
                                field="background")
    else:
        model = fit_run(run, kind=cast(Kind, kind), **options)  # fit() checks the kind
    if out is not None:
        model.save(out)
    return model


def apply_learned(run: Run, files: Sequence[str | Path]) -> Run:
    """Add the scores of fitted models (``confide fit`` files) to ``run``'s records, in memory.

    On the run a model was fitted on, its training items get their cross-fitted
    scores; on another run, items it was trained on get NaN with the reason.
    """
    from confide.learned import apply_to_run
    from confide.learned.density import load_fitted

    run.records = apply_to_run(run.path, [load_fitted(f) for f in files])
    return run


def make_report(runs: str | Path | list[str | Path] | tuple[str | Path, ...],
                out: str | Path | None = None, *, n_resamples: int = 1000) -> Path:
    """Write the self-contained HTML report of a stored run (default ``RUN/report.html``),
    or, given several runs, their side-by-side comparison (default ``compare.html``).
    Reads the stored records only; the model is not loaded."""
    from confide.report import write_comparison, write_report

    if isinstance(runs, (str, Path)):
        return write_report(runs, out, n_resamples=n_resamples)
    if len(runs) == 1:
        return write_report(runs[0], out, n_resamples=n_resamples)
    return write_comparison(list(runs), out or "compare.html", n_resamples=n_resamples)


