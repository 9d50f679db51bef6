"""The public Python API: load_model, score, evaluate, open_run.

    >>> import confide
    >>> model = confide.load_model()                       # doctest: +SKIP
    >>> confide.score(model, ["Who wrote Hamlet?"])        # doctest: +SKIP
    >>> run = confide.evaluate(model, task="triviaqa", limit=20)  # doctest: +SKIP
    >>> run.table.rows[0].metrics["auroc"]                 # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confide.backends import Backend, GenerationSpec, item_seed, load_backend
from confide.backends.models import DEFAULT_MODEL
from confide.claims import ClaimConfig, claim_record, refine
from confide.errors import InvalidInputError
from confide.pipeline import DEFAULT_SCORERS, Pipeline, check_question
from confide.records import Item, Record
from confide.runner import RunConfig, execute
from confide.runs import Run, default_run_dir, evaluate, open_run
from confide.tasks import Task

__all__ = ["Run", "RunConfig", "ScoredAnswer", "apply_learned", "default_run_dir", "evaluate",
           "execute", "fit_learned", "load_model", "make_report", "open_run", "refine", "score"]


def load_model(model: str = DEFAULT_MODEL, *, backend: str = "hf", **options: Any) -> Backend:
    """Load a model behind a backend: ``load_model()`` gives the bundled SmolLM2-135M-Instruct.

    ``model`` is a bundled alias (``smollm2``, ``gemma3-270m``), a ``.gguf``
    file, a transformers directory or a hub id; ``options`` go to the backend
    (``device``, ``batch_size``, ``dtype`` for ``hf``).
    """
    return load_backend(backend, model, **options)


@dataclass
class ScoredAnswer:
    """An answer with its confidences (higher = more likely correct) and NaN reasons."""

    question: str
    answer: str
    confidences: dict[str, float]
    reasons: dict[str, str] = field(default_factory=dict)
    record: Record | None = field(default=None, repr=False)


def score(model: Backend, questions: list[str] | list[Item], *,
          scorers: tuple[str, ...] | list[str] = DEFAULT_SCORERS, max_new_tokens: int = 32,
          stop: tuple[str, ...] = ("\n",), seed: int = 0,
          claims: ClaimConfig | bool = False) -> list[ScoredAnswer]:
    """Answer each question greedily and return the answers with their confidences.

    ``claims`` (True or a :class:`~confide.claims.ClaimConfig`): also split each
    answer into claims and score them (``answer.record.claims``; ungraded), for
    long answers: give a larger ``max_new_tokens`` and ``stop=()``; then
    :func:`confide.refine` drops or marks the doubtful claims.
    """
    claim_config = (ClaimConfig(grader=None) if claims is True
                    else claims if isinstance(claims, ClaimConfig) else None)
    items = [q if isinstance(q, Item) else Item(id=f"q{i}", prompt=q)
             for i, q in enumerate(questions)]
    for item in items:
        check_question(item)
    pipe = Pipeline.build(model, scorers, seed=seed)
    task = Task(name="questions", items=items, grader="contains", format="open_qa")
    n_samples = max(pipe.n_samples, claim_config.n_samples if claim_config else 0)
    spec = GenerationSpec(max_new_tokens=max_new_tokens, stop=stop, n_samples=n_samples)
    results = pipe.generate(task, items, spec, [item_seed(seed, it.id) for it in items])
    answers = []
    for item, result in zip(items, results, strict=True):
        record = pipe.complete(item, result)  # GenerationFailed: the backend gave up on it
        if claim_config is not None:
            claim_record(record, claim_config, backend=model, seed=seed)
        reasons = {**record.score_errors, **pipe.skipped}
        confidences = {**record.scores, **{name: float("nan") for name in pipe.skipped}}
        answers.append(ScoredAnswer(item.question, record.greedy.text, confidences, reasons,
                                    record))
    return answers


def fit_learned(run: str | Path, *, kind: str = "probe", out: str | Path | None = None,
                **options: Any) -> Any:
    """Fit a probe, lens probe or combiner (:func:`confide.learned.fit`) or a density model
    (``mahalanobis``, ``relative_mahalanobis``, ``huq``: :func:`confide.density.fit`) on a
    stored run; save it to ``out`` (JSON) when given. Returns the
    :class:`~confide.learned.Learned`."""
    from confide import density
    from confide.learned import fit_run

    folds = options.get("n_folds", 2)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise InvalidInputError(f"cross-fitting needs at least 2 folds, got {folds!r}",
                                field="n_folds")
    if kind in density.KINDS:
        model = density.fit_run(run, kind=kind, **options)
    elif options.get("background") is not None:
        raise InvalidInputError("only relative_mahalanobis takes a background run",
                                field="background")
    else:
        model = fit_run(run, kind=kind, **options)  # type: ignore[arg-type]
    if out is not None:
        model.save(out)
    return model


def apply_learned(run: Run, files: list[str | Path] | tuple[str | Path, ...]) -> Run:
    """Add the scores of fitted models (``confide fit`` files) to ``run``'s records, in memory.

    On the run a model was fitted on, its training items get their cross-fitted
    scores; on another run, items it was trained on get NaN with the reason.
    """
    from confide.density import load_fitted
    from confide.learned import apply_to_run

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


