"""The public Python API: every ``confide.*`` name, listed once in :data:`__all__`.

    >>> import confide
    >>> model = confide.load_model()                       # doctest: +SKIP
    >>> confide.score(model, ["Who wrote Hamlet?"])        # doctest: +SKIP
    >>> run = confide.generate_and_evaluate(model, task="triviaqa", limit=20)  # doctest: +SKIP
    >>> run.table.rows[0].metrics["auroc"]                 # doctest: +SKIP

The ``confide`` command reaches the rest of the package only through here
(``tests/test_layers.py`` checks it): each command's work is a function of this
module, and the CLI parses options and renders. Most are the stage's own function
under a public name (``calibrate`` is :func:`confide.decisions.calibration.calibrate_run`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, overload

from confide.backends import Backend, item_seed, load_backend
from confide.core.errors import (
    BackendError,
    CannotScore,
    ConfideError,
    ConfigMismatch,
    InvalidInputError,
    ModelLoadError,
    StoreError,
    UnknownNameError,
)
from confide.core.options import DEFAULT_MODEL, check_distribution
from confide.core.records import Item
from confide.decisions.abstention import AbstentionFit
from confide.decisions.abstention import abstain_run as abstain
from confide.decisions.adaptive import AdaptiveReport, replay_adaptive
from confide.decisions.calibration import (
    CalibrationFit,
    Calibrator,
    as_calibrator,
    calibrate_answers,
    calibrate_run,
    load_calibrator,
    shipped_calibrator,
)
from confide.decisions.deepconf import (
    LiveDeepConf,
    OnlineVoteComparison,
    deepconf,
    replay_deepconf_online,
)
from confide.decisions.refining import RefineSummary, refine, refine_run
from confide.decisions.routing import CascadeCurve, CascadePoint, cascade
from confide.decisions.routing import route_models as route
from confide.decisions.voting import (
    FilteredVoteComparison,
    VoteComparison,
    compare_filtered_votes,
    compare_votes,
)
from confide.equivalence.summary import UncertaintySummary, summarize
from confide.evaluation.claims import ClaimTable, evaluate_claims
from confide.evaluation.recommend import Gives, Recommendation, TaskKind
from confide.evaluation.recommend import recommend as _recommend
from confide.evaluation.selfreflect import SelfReflectResult, selfreflect_distance
from confide.evaluation.table import EvalTable
from confide.grading.claims import ANSWER_GRADE
from confide.ingest import detect, detect_format  # noqa: F401 (detect: the CLI says why)
from confide.integrations.openai_client import wrap
from confide.metrics import METRICS, MetricSpec
from confide.pipeline.answering import DEFAULT_SCORERS, Pipeline
from confide.pipeline.plan import (
    RunConfig,
    RunPlan,
    prepare,
    question_plan,
    sample_count,
    scorer_names,
)
from confide.pipeline.streaming import EarlyAbstention, StreamEnd, TokenUpdate, stream_answer
from confide.runs.answers import (
    Question,
    ScoredAnswer,
    ScoredAnswers,
    answer_questions,
    as_items,
    backend_model,
)
from confide.runs.answers import score_answers as _score_answers
from confide.runs.claims import ClaimConfig, ClaimOutcome, add_claims
from confide.runs.execution import Progress, RunOutcome
from confide.runs.execution import execute as execute_plan
from confide.runs.importing import import_file
from confide.runs.labels import label_run as label
from confide.runs.stored import Run, default_run_dir, generate_and_evaluate, open_run
from confide.scorers import FAMILIES, SCORERS, Cost, ScorerSpec
from confide.store.exports import EXPORT_FORMATS, export_run
from confide.store.run_store import RunStore
from confide.tasks import describe_tasks as list_tasks

# The one list of public names: `confide/__init__.py` reads it (from this file's source,
# so `dir(confide)` imports nothing) and serves each name from here on first use.
__all__ = [
    "AbstentionFit", "AdaptiveReport", "BackendError", "CalibrationFit", "CannotScore",
    "CascadeCurve", "CascadePoint", "ClaimConfig", "ClaimStage", "ConfideError", "ConfigMismatch",
    "DEFAULT_SCORERS", "EXPORT_FORMATS", "EarlyAbstention", "EvalTable", "Exported",
    "FilteredVoteComparison", "InvalidInputError", "Item", "LiveDeepConf", "ModelLoadError",
    "OnlineVoteComparison", "Recommendation", "Run", "RunConfig", "RunPlan", "ScoredAnswer",
    "ScoredAnswers", "SelfReflectResult", "StoreError", "StreamEnd", "TokenUpdate",
    "UncertaintySummary", "UnknownNameError", "VoteComparison", "abstain", "apply_learned",
    "ascore", "ascore_answers", "build_server", "calibrate", "cascade", "claim_stage",
    "compare_filtered_votes", "compare_votes", "deepconf", "default_run_dir", "detect_format",
    "evaluate", "execute", "export", "fit_learned", "generate_and_evaluate", "import_file",
    "label", "list_metrics", "list_scorers", "list_tasks", "load_calibrator", "load_model",
    "make_report", "open_run", "prepare", "recommend", "refine", "replay_adaptive",
    "replay_deepconf_online", "route", "run_server", "samples_needed", "score", "score_answers",
    "selfreflect_distance", "stream", "summarize", "train", "wrap",
]

#: What ``calibrator=`` takes: a fitted calibrator or the path of its JSON file; None for
#: the one shipped for the model (:func:`score`), False for none.
CalibratorArg = Calibrator | str | Path | Literal[False] | None

#: The former name of :func:`generate_and_evaluate` (``Run.evaluate`` became
#: :meth:`Run.compute_table`), kept working.
evaluate = generate_and_evaluate


def load_model(model: str = DEFAULT_MODEL, *, backend: str = "hf", **options: Any) -> Backend:
    """Load a model behind a backend: ``load_model()`` gives the bundled SmolLM2-135M-Instruct.

    ``model`` is a bundled alias (``smollm2``, ``gemma3-270m``), a ``.gguf``
    file, a transformers directory or a hub id; ``options`` go to the backend
    (``device``, ``batch_size``, ``dtype`` for ``hf``).
    """
    return load_backend(backend, model, **options)


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


@overload  # a str is also a Sequence[str]: this overload, listed first, wins for it
def score(model: Backend, questions: str | Item | Mapping[str, Any], *,  # type: ignore[overload-overlap]
          scorers: str | Sequence[str] = ..., max_new_tokens: int = ...,
          stop: tuple[str, ...] = ..., seed: int = ..., n_samples: int = ..., judge: str = ...,
          claims: ClaimConfig | bool = ..., grader: str | None = ...,
          calibrator: CalibratorArg = ...,
          reasoning_tags: tuple[str, str] | str | None = ...) -> ScoredAnswer: ...
@overload
def score(model: Backend, questions: Sequence[Question], *,
          scorers: str | Sequence[str] = ..., max_new_tokens: int = ...,
          stop: tuple[str, ...] = ..., seed: int = ..., n_samples: int = ..., judge: str = ...,
          claims: ClaimConfig | bool = ..., grader: str | None = ...,
          calibrator: CalibratorArg = ...,
          reasoning_tags: tuple[str, str] | str | None = ...) -> ScoredAnswers: ...
def score(model: Backend, questions: Question | Sequence[Question], *,
          scorers: str | Sequence[str] = DEFAULT_SCORERS, max_new_tokens: int = 32,
          stop: tuple[str, ...] = ("\n",), seed: int = 0, n_samples: int = 0,
          judge: str = "exact", claims: ClaimConfig | bool = False, grader: str | None = None,
          calibrator: CalibratorArg = None,
          reasoning_tags: tuple[str, str] | str | None = None) -> ScoredAnswer | ScoredAnswers:
    """Answer each question greedily and return the answers with their confidences.

    A question is text, an :class:`~confide.core.records.Item`, or a mapping with
    ``question`` and optionally ``references`` and ``id``. One question gives one
    :class:`ScoredAnswer`; a list gives :class:`ScoredAnswers` (a list with
    ``to_pandas()``). ``scorers`` is a list of names or one comma-separated string
    (``"msp,mean_logprob"``).

    Questions with references are graded (``answer.grades``) by ``grader`` (default
    ``contains``).

    ``n_samples`` draws at least that many samples (for :attr:`ScoredAnswer.summary`);
    ``judge`` clusters them (:mod:`confide.equivalence.judges`).

    ``claims`` (True or a :class:`~confide.runs.claims.ClaimConfig`): also split each
    answer into claims and score them (``answer.record.claims``; ungraded), for
    long answers: give a larger ``max_new_tokens`` and ``stop=()``; then
    :func:`confide.refine` drops or marks the doubtful claims.

    Each answer carries ``readable`` (each scorer's natural [0, 1] form, where one
    exists) and, when a calibrator stands behind it, ``probability`` (of being right)
    with ``calibration`` (its provenance and ``warnings``). ``calibrator``: a
    :class:`~confide.decisions.calibration.Calibrator` or the path of its JSON file
    (its scorer is run if not named); None (default) uses the one shipped for this
    model, if any, for the first of ``scorers`` that has one; False: none. A calibrator
    fitted on another model or prompt style says so in ``calibration["warnings"]``.

    ``reasoning_tags`` (``"<think>,</think>"``; default None: off): a reasoning model's
    reply is split into its trace (``answer.record.greedy.trace``) and the final answer,
    which is graded and scored (as ``confide run --reasoning-tags``).
    """
    items, single = as_items(questions)
    if calibrator is None:
        chosen = shipped_calibrator(backend_model(model), scorer_names(scorers))
    else:
        chosen = None if calibrator is False else as_calibrator(calibrator)
    answers = answer_questions(model, items, scorers=scorers, max_new_tokens=max_new_tokens,
                               stop=stop, seed=seed, n_samples=n_samples, judge=judge,
                               claims=claims, grader=grader, calibrator=chosen,
                               reasoning_tags=reasoning_tags)
    return answers[0] if single else answers


@overload  # a str is also a Sequence[str]: this overload, listed first, wins for it
def score_answers(questions: str | Item | Mapping[str, Any],  # type: ignore[overload-overlap]
                  answers: str, *, samples: Sequence[str] | None = ...,
                  logprobs: Any = ..., sample_logprobs: Sequence[Any] | None = ...,
                  scorers: str | Sequence[str] = ..., judge: str | None = ...,
                  grader: str | None = ..., calibrator: Calibrator | str | Path | None = ...,
                  model: str | None = ..., prompt_style: str | None = ...) -> ScoredAnswer: ...
@overload
def score_answers(questions: Sequence[Question], answers: Sequence[str], *,
                  samples: Sequence[Sequence[str]] | None = ...,
                  logprobs: Sequence[Any] | None = ...,
                  sample_logprobs: Sequence[Sequence[Any] | None] | None = ...,
                  scorers: str | Sequence[str] = ..., judge: str | None = ...,
                  grader: str | None = ..., calibrator: Calibrator | str | Path | None = ...,
                  model: str | None = ..., prompt_style: str | None = ...) -> ScoredAnswers: ...
def score_answers(questions: Question | Sequence[Question], answers: str | Sequence[str], *,
                  samples: Any = None, logprobs: Any = None, sample_logprobs: Any = None,
                  scorers: str | Sequence[str] = "all", judge: str | None = None,
                  grader: str | None = None, calibrator: Calibrator | str | Path | None = None,
                  model: str | None = None, prompt_style: str | None = None
                  ) -> ScoredAnswer | ScoredAnswers:
    """Score answers made elsewhere, through the engine of ``confide score``
    (:func:`confide.runs.answers.score_answers` documents every parameter).

    ``calibrator``: a :class:`~confide.decisions.calibration.Calibrator` or the path of
    its JSON file; each answer then has a ``probability`` and its ``calibration``. None
    is chosen for answers made elsewhere: give one fitted on graded answers of the model
    that wrote them, and name that ``model`` (and ``prompt_style``, ``"chat"`` or
    ``"k-shot"``), or the answers' ``calibration["warnings"]`` say they are not stated.
    """
    chosen = None if calibrator is None else as_calibrator(calibrator)
    return _score_answers(questions, answers, samples=samples, logprobs=logprobs,
                          sample_logprobs=sample_logprobs, scorers=scorers, judge=judge,
                          grader=grader, calibrator=chosen, model=model,
                          prompt_style=prompt_style)


async def ascore_answers(questions: Question | Sequence[Question],
                         answers: str | Sequence[str], **options: Any
                         ) -> ScoredAnswer | ScoredAnswers:
    """:func:`score_answers` awaited off the event loop (in a worker thread), so it runs
    inside Jupyter's running loop and beside other requests."""
    run = cast(Any, score_answers)  # the overloads' union of inputs, passed on as given
    return cast("ScoredAnswer | ScoredAnswers",
                await asyncio.to_thread(lambda: run(questions, answers, **options)))


async def ascore(model: Backend, questions: Question | Sequence[Question], **options: Any
                 ) -> ScoredAnswer | ScoredAnswers:
    """:func:`score` awaited off the event loop (in a worker thread): for HTTP backends
    inside a running loop (Jupyter, a web app), beside other requests."""
    return await asyncio.to_thread(lambda: score(model, questions, **options))


def stream(model: Backend, question: str | Item, *,
           scorers: str | Sequence[str] = DEFAULT_SCORERS, max_new_tokens: int = 64,
           stop: tuple[str, ...] = (), seed: int = 0,
           early_abstain_below: float | None = None, early_abstain_after: int = 4,
           reasoning_tags: tuple[str, str] | str | None = None
           ) -> Iterator[TokenUpdate | StreamEnd]:
    """Answer one question token by token, with confidence while the answer streams.

    Yields a :class:`~confide.pipeline.streaming.TokenUpdate` per token (text to show,
    log-probability, entropy, running confidence), then one
    :class:`~confide.pipeline.streaming.StreamEnd` whose ``record`` is scored like
    :func:`score`'s. With ``early_abstain_below`` the answer stops once its
    running confidence falls below it (after ``early_abstain_after`` tokens) and
    ``StreamEnd.abstained`` says why. Leaving the loop early stops generation.

    ``reasoning_tags`` (``"<think>,</think>"``; default None: off), as :func:`score`'s: a
    reasoning model's trace tokens come as updates with ``span == "trace"`` and their text
    in ``trace_delta`` (``delta`` is the final answer's); the early-abstention policy and
    the running confidence read the answer's tokens alone, and the record's scores are
    the final answer's (``record.greedy.trace`` holds the trace).

    >>> for event in confide.stream(model, "Capital of France?"):  # doctest: +SKIP
    ...     print(event.delta if isinstance(event, TokenUpdate) else event.record.scores)
    """
    early = None if early_abstain_below is None else EarlyAbstention(early_abstain_below,
                                                                     early_abstain_after)
    plan = question_plan([question], scorers=scorers, max_new_tokens=max_new_tokens,
                         stop=stop, seed=seed, reasoning_tags=reasoning_tags)
    item = plan.task.items[0]
    pipe = Pipeline.build(model, plan.scorers, seed=seed, reasoning_tags=plan.spec.reasoning_tags)
    prompt = plan.task.render(item, chat=model.has_chat_template)
    return stream_answer(pipe, item, prompt, plan.spec, item_seed(seed, item.id), early=early)


def fit_learned(run: str | Path | Sequence[str | Path], *, kind: str = "probe",
                out: str | Path | None = None, **options: Any) -> Any:
    """Fit a probe, lens probe or combiner (:func:`confide.learned.fit`) or a density model
    (``mahalanobis``, ``relative_mahalanobis``, ``huq``: :func:`confide.learned.density.fit`) on a
    stored run; save it to ``out`` (JSON) when given. Returns the
    :class:`~confide.learned.Learned`.

    Several runs of one model (a list) fit one probe or lens across their tasks, weighed by
    ``weighting`` (``"equal"``, ``"uncertainty"`` or ``"per-task"``:
    :func:`confide.learned.multitask.fit_runs`)."""
    from confide.learned import Kind, Learned, density, fit_run
    from confide.learned.multitask import fit_runs

    folds = options.get("n_folds", 2)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise InvalidInputError(f"cross-fitting needs at least 2 folds, got {folds!r}",
                                field="n_folds")
    model: Learned  # a Density is a Learned
    runs = [run] if isinstance(run, (str, Path)) else list(run)
    if len(runs) != 1 or "weighting" in options:
        model = fit_runs(runs, kind=cast(Kind, kind), **options)  # checks kind and runs
    elif kind in density.KINDS:
        model = density.fit_run(runs[0], kind=kind, **options)
    elif options.get("background") is not None:
        raise InvalidInputError("only relative_mahalanobis takes a background run",
                                field="background")
    else:
        model = fit_run(runs[0], kind=cast(Kind, kind), **options)  # fit() checks the kind
    if out is not None:
        model.save(out)
    return model


def train(model: str | Backend, data: str | Path | None = None, *, task: str | None = None,
          out: str | Path, method: str = "lora", members: int = 4, steps: int = 100,
          dtype: str | None = None, device: str | None = None, **options: Any) -> Any:
    """Train ensemble members of a local model (``confide train``): LoRA adapters, singular
    values (``sve``) or MC dropout passes (:func:`confide.learned.training.train_members`;
    ``options``: ``layers`` (``"top-K"`` or ``"all"``; default the top quarter), ``rank``,
    ``lr``, ``seed``, ``batch_size``, ``offset``, ``limit``, ...).
    ``model`` is a loaded ``hf`` backend or a name loaded here. Resumes a killed training
    in ``out``. Returns the :class:`~confide.backends.hf.members.EnsembleInfo` of
    ``out/ensemble.json``."""
    from confide.learned.training import train_members

    if isinstance(model, str):
        model = load_backend("hf", model, dtype=dtype, device=device)
    elif getattr(model, "name", None) != "hf":
        raise InvalidInputError("ensemble members are trained on a local transformers model "
                                "(the hf backend)", field="model")
    return train_members(model, data, task=task, out=out, method=method, members=members,
                         steps=steps, **options)


def calibrate(run_or_answers: Run | str | Path | Sequence[ScoredAnswer], scorer: str,
              labels: Sequence[Any] | None = None, *, method: str = "isotonic",
              grader: str | None = None, n_bins: int = 10, n_folds: int = 5, seed: int = 0,
              **provenance: Any) -> CalibrationFit:
    """Fit a calibrator of ``scorer`` and measure it by cross-fitting (``confide calibrate``).

    ``run_or_answers``: a graded run (a :class:`Run` or its directory; its ``grader``
    grades, or labels added with ``confide label`` and ``grader="human"``), or scored
    answers (``confide.score`` / ``confide.score_answers``) with ``labels``, one
    correctness per answer (None: each answer's grade). For answers, ``provenance`` may
    name ``model``, ``task`` and ``prompt_style``, which the calibrator then carries.
    The fit's ``calibrator`` goes to ``score(..., calibrator=)``, ``score_answers`` and
    ``confide serve --calibrator`` (saved with ``.save(path)``).
    """
    if isinstance(run_or_answers, (Run, str, Path)):
        if labels is not None or provenance:
            raise InvalidInputError("a run's labels are its grades: add them with "
                                    "confide.label, then pass grader=", field="labels")
        return calibrate_run(run_or_answers, scorer, method=method,  # type: ignore[arg-type]
                             grader=grader, n_bins=n_bins, n_folds=n_folds, seed=seed)
    return calibrate_answers(list(run_or_answers), scorer, labels,
                             method=method,  # type: ignore[arg-type]
                             grader=grader, n_bins=n_bins, n_folds=n_folds, seed=seed,
                             **provenance)


def apply_learned(run: Run, files: Sequence[str | Path], *,
                  allow_other_model: bool = False) -> Run:
    """Add the scores of fitted models (``confide fit`` files) to ``run``'s records, in memory.

    On the run a model was fitted on, its training items get their cross-fitted
    scores; on another run, items it was trained on get NaN with the reason. Each file
    is checked first (:func:`confide.learned.apply_to_run`): a damaged file, an input no
    record has, or a model fitted on another model's run (unless ``allow_other_model``)
    is refused. What was applied, fitted on what, joins ``run.notes`` (and so every
    table of it).
    """
    from confide.learned import apply_to_run
    from confide.learned.density import load_fitted

    run.records = apply_to_run(run.path, [load_fitted(f) for f in files],
                               allow_other_model=allow_other_model, notes=run.session_notes)
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




@dataclass(frozen=True)
class Exported:
    """Where :func:`export` wrote a run's records, and how many damaged records it could
    not read (0 for an intact store)."""

    path: Path
    unreadable: int = 0


def export(run: str | Path | Run, fmt: str = "jsonl", out: str | Path | None = None
           ) -> Exported:
    """Write a stored run's records in ``fmt`` (:data:`EXPORT_FORMATS`; what ``confide
    export`` does) to ``out`` (default: in the run directory).

    Opens only the store, so a damaged one still gives its readable records (the
    others counted in :attr:`Exported.unreadable`). :meth:`Run.export` writes the same.
    """
    with RunStore.open(run.path if isinstance(run, Run) else run) as store:
        return Exported(export_run(store, fmt, out), store.unreadable)


def list_scorers() -> list[ScorerSpec]:
    """The registered scorers, grouped by family (in listing order) and cheapest first
    within a family: what ``confide scorers`` lists."""
    families = list(dict.fromkeys([*FAMILIES, *(spec.family for spec in SCORERS.values())]))
    costs = list(Cost)
    return sorted(SCORERS.values(), key=lambda s: (families.index(s.family),
                                                   costs.index(s.cost), s.name))


def recommend(*, gives: Gives = "topk", samples: int = 0, task: TaskKind = "short",
              run: Run | str | Path | None = None, grader: str | None = None,
              live: bool = True, top: int = 5) -> Recommendation:
    """Which scorers to use for what the model gives, a sampling budget and a kind of task:
    what ``confide recommend`` prints.

    The evidence is the quality table of the bundled models (AUROC with intervals, rank,
    and whether each beats the length baseline); with ``run`` (a graded run of the user's
    own), a scorer is also chosen out of fold on its answers and judged on the held-out
    fold (:func:`confide.evaluation.recommend.recommend`).

    >>> rec = recommend(gives="none", samples=10, task="short")
    >>> all("samples" in s.needs or not s.needs for s in rec.scorers)
    True
    """
    records = None if run is None else (run if isinstance(run, Run) else open_run(run)).records
    return _recommend(gives=gives, samples=samples, task=task, records=records, grader=grader,
                      live=live, top=top)


def list_metrics() -> list[MetricSpec]:
    """The registered evaluation metrics: what ``confide metrics`` lists."""
    return list(METRICS.values())


def samples_needed(scorers: Sequence[str], *, at_least: int = 0) -> int:
    """Samples a run of ``scorers`` draws when it does not set ``n_samples``: the most any
    of them asks for, and at least ``at_least`` (a claim stage's). Names not registered
    are left for :func:`prepare` to refuse with the list of known ones."""
    return sample_count([s for s in scorers if s in SCORERS], at_least=at_least)


@dataclass
class ClaimStage:
    """What :func:`claim_stage` did: the claims added (``outcome``), their table
    (intervals over answers), the refined answers (``refined``), and the answer-level
    grade the claims gave (``answer_grader``; None when the claims are not graded)."""

    outcome: ClaimOutcome
    table: ClaimTable
    refined: RefineSummary
    answer_grader: str | None


def claim_stage(run: str | Path, config: ClaimConfig | None = None, *,
                backend: Backend | None = None, progress: Progress | None = None,
                refined_out: str | Path | None = None) -> ClaimStage:
    """The long-form stage of a stored run (``confide run --long-form``): split, score and
    grade each answer's claims (:func:`confide.runs.claims.add_claims`, resumable), their
    claim-level table, and each answer refined by a calibrator fitted on the graded claims
    (:func:`confide.decisions.refining.refine_run`), written to ``refined_out`` (default
    ``RUN/refined.jsonl``). ``backend`` defaults to the run's model, loaded if needed."""
    config = config or ClaimConfig()
    outcome = add_claims(run, config, backend=backend, progress=progress)
    stored = open_run(run)
    grader, seed = outcome.grader or "", stored.config.get("seed", 0)
    table = evaluate_claims(stored.records, grader=grader, answers=False, seed=seed)
    refined = refine_run(stored.records, scorer=config.scorer_for_refine, grader=grader,
                         threshold=config.threshold, action=config.action,
                         out=refined_out or Path(run) / "refined.jsonl", seed=seed)
    graded = any(ANSWER_GRADE in r.grades for r in stored.records)
    return ClaimStage(outcome, table, refined, ANSWER_GRADE if graded else None)


def build_server(model: str = DEFAULT_MODEL, *, max_n: int | None = None,
                 max_tokens: int | None = None, max_prompt_chars: int | None = None,
                 **options: Any) -> Any:
    """The OpenAI-compatible server of ``confide serve``: a FastAPI app with the model and
    the fitted decisions loaded. ``max_n``, ``max_tokens``, ``max_prompt_chars`` bound a
    request (default: :class:`confide.serve.models.Limits`); ``options`` go to
    :func:`confide.serve.launch.build_app` (``backend``, ``scorers``, ``calibrator``,
    ``policy``, ``log_run``, ...). Serve it with :func:`run_server`."""
    from confide.serve.launch import build_app  # here: FastAPI and pydantic load on use
    from confide.serve.models import Limits

    bounds = {k: v for k, v in (("max_n", max_n), ("max_tokens", max_tokens),
                                ("max_prompt_chars", max_prompt_chars)) if v is not None}
    return build_app(model=model, limits=Limits(**bounds), **options)


def run_server(app: Any, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve an app of :func:`build_server` with uvicorn until interrupted."""
    from confide.serve.launch import serve

    serve(app, host=host, port=port)
