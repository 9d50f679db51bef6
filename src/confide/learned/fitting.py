r"""Fitting a probe, lens probe or combiner on a run's graded records, with cross-fitted scores.

See :mod:`confide.learned` for the kinds and the cross-fitting rule.
"""

from __future__ import annotations

import collections
import contextlib
import difflib
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from confide.core.errors import InvalidInputError
from confide.core.jsonsafe import json_safe
from confide.core.records import Record
from confide.learned.estimators import (
    auroc,
    build_pipeline,
    candidate_label,
    candidates,
    export,
    predict_params,
    selection_search,
)
from confide.learned.model import (
    KINDS,
    TOKEN_FEATURES,
    Kind,
    Learned,
    chosen_hidden_keys,
    feature_matrix,
    hidden_keys,
)
from confide.learned.schema import input_width
from confide.metrics.crossfit import crossfit_splits
from confide.store.run_store import RunStore

__all__ = ["Estimator", "apply_to_run", "fit", "fit_run", "run_digest"]

Estimator = Literal["logistic", "boosting", "auto"]


def fit(records: Sequence[Record], *, kind: Kind, grader: str, model: dict[str, Any],
        layer: str | None = "best", scorers: Sequence[str] | None = None,
        estimator: Estimator = "logistic", n_folds: int = 5, seed: int = 0,
        name: str | None = None, run: str | None = None) -> Learned:
    r"""Fit a probe, lens probe or combiner on graded records, with cross-fitted scores.

    .. math:: \hat p(\text{correct} \mid x) = \sigma(w^\top \tilde x + b), \quad
              \tilde x = (x - \mu) / s

    (logistic; for probes the L2 strength is chosen from
    :data:`~confide.learned.estimators.C_GRID` by inner cross-validated AUROC; the
    combiner's inputs are normal scores :math:`\Phi^{-1}(\hat F_j(x_j))` of their
    training quantiles, their weights :math:`w_j \ge 0`, at
    :data:`~confide.learned.estimators.COMBINER_C`) or gradient-boosted trees
    (``estimator="boosting"``, combiner only; ``"auto"`` picks whichever cross-validates
    better). Correct means grade >= 0.5 under ``grader``; records without that grade are
    not used.

    Parameters
    ----------
    records : graded records (probes need hidden states: run with ``hidden_layers``).
    kind : "probe", "lens" or "combiner".
    grader : the grade that labels correctness.
    model : the backend identity of the run (``RunStore.get_meta("backend")``).
    layer : a hidden key such as ``"8:mean"``, a layer alone (``"8"``, mean
        pooling), or ``"best"`` (every stored key, chosen by cross-validation).
    scorers : the combiner's inputs (default: every score in the records, less those no
        record has a value for, which ``report["left_out"]`` names with why; a named
        scorer without a value on any record is an error).
    n_folds : folds for cross-fitting and selection (at most the smaller class).
    seed : seeds folds and trees.
    run : the training run's :func:`run_digest` (lets :meth:`Learned.apply`
        return out-of-fold scores on that run).

    Returns
    -------
    Learned, whose ``report["oof_auroc"]`` is the cross-fitted AUROC.

    References
    ----------
    [1] Azaria & Mitchell, 2023, "The Internal State of an LLM Knows When It's
        Lying", Findings of EMNLP (probes on hidden states).
    [2] Kadavath et al., 2022, "Language Models (Mostly) Know What They Know",
        arXiv:2207.05221 (P(IK) from internal states).
    [3] Chernozhukov et al., 2018, Econometrics Journal (cross-fitting).
    """
    if kind not in KINDS:
        raise InvalidInputError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}", field="kind")
    if estimator not in ("logistic", "boosting", "auto"):
        raise InvalidInputError(f"unknown estimator {estimator!r}", field="estimator")
    if kind != "combiner" and estimator != "logistic":
        raise InvalidInputError("probes are logistic regressions; boosting is for the combiner",
                                field="estimator")
    graded = [r for r in records if grader in r.grades]
    if not graded:
        raise InvalidInputError(f"no record is graded with {grader!r}", field="grader")
    y = np.array([r.grades[grader] >= 0.5 for r in graded], dtype=int)
    n_right = int(y.sum())
    counts = f"{y.size} graded with {grader!r}: {n_right} correct, {y.size - n_right} wrong"
    if min(n_right, y.size - n_right) < 2:
        raise InvalidInputError(f"cross-fitting needs at least 2 correct and 2 wrong answers; "
                                f"the records hold {counts}", field="grader")

    views: dict[str, np.ndarray] = {}
    features: list[str]
    left_out: dict[str, str] = {}
    if kind == "combiner":
        names = list(scorers) if scorers else sorted({n for r in graded for n in r.scores})
        if not names:
            raise InvalidInputError("the records hold no scores to combine", field="scorers")
        x, _ = feature_matrix(kind, None, names, graded)
        all_nan = [n for j, n in enumerate(names) if np.isnan(x[:, j]).all()]
        if all_nan and not scorers:  # the default, every scorer: leave these out, say so
            left_out = {n: _no_value_reason(n, graded) for n in all_nan}
            names = [n for n in names if n not in left_out]
            if not names:
                raise InvalidInputError("no scorer has a value on any graded record "
                                        f"({', '.join(all_nan)})", field="scorers")
            x, _ = feature_matrix(kind, None, names, graded)
        elif all_nan:
            raise InvalidInputError(f"no record has a value for {', '.join(all_nan)}",
                                    field="scorers")
        rows, cols = np.nonzero(np.isinf(x))
        if rows.size:
            raise InvalidInputError(f"score {names[cols[0]]} of item {graded[rows[0]].item.id!r} "
                                    f"is {x[rows[0], cols[0]]}; a combiner needs finite scores "
                                    f"or NaN ({rows.size} infinite values in all)",
                                    field=f"scores.{names[cols[0]]}")
        views["scores"] = x
        features, keys = names, ["scores"]
    else:
        keys = chosen_hidden_keys(graded, layer)
        for key in keys:
            views[key], why = feature_matrix(kind, key, [], graded)
            if any(why):
                raise InvalidInputError(next(w for w in why if w), field="records")
        features = list(TOKEN_FEATURES) if kind == "lens" else []
    # one matrix holding every view side by side; the pipeline's first step picks one
    columns, start = {}, 0
    for key in keys:
        columns[key] = (start, start + views[key].shape[1])
        start += views[key].shape[1]
    x_all = np.hstack([views[k] for k in keys])
    pipe = build_pipeline(columns, combiner=kind == "combiner", n=int(y.size))
    boosting = kind == "combiner" and estimator in ("boosting", "auto")
    grid = candidates(keys, combiner=kind == "combiner", logistic=estimator != "boosting",
                 boosting=boosting, seed=seed)
    search = selection_search(pipe, grid, n_folds=n_folds, seed=seed)

    from sklearn.base import clone
    from sklearn.model_selection import cross_val_predict
    from threadpoolctl import threadpool_limits

    # Hundreds of small fits: one BLAS thread each is ~10x faster than oversubscribed threads.
    with threadpool_limits(limits=1):
        try:
            # each record scored by a model (selection included) fitted without its fold
            oof = cross_val_predict(clone(search), x_all, y, method="predict_proba",
                                    cv=crossfit_splits(y, n_folds=n_folds, seed=seed))[:, 1]
            search.fit(x_all, y)
        except InvalidInputError as exc:
            if exc.field != "correct":
                raise
            # an inner fold's counts would mislead: say what the records hold
            labels = grid_labels(grid)
            raise InvalidInputError(
                f"too few answers to choose among {len(labels)} candidates "
                f"({', '.join(labels)}) inside each cross-fitting fold, whose "
                f"training part must itself hold 2 correct and 2 wrong answers; the records "
                f"hold {counts}. Grade more items"
                + (", or fix the layer (--layer 8:mean)" if kind != "combiner" else
                   ", or use --estimator logistic"), field="grader") from exc
    if hasattr(search, "best_estimator_"):
        final, chosen = search.best_estimator_, search.best_params_
        table = {candidate_label(p): float(v) for p, v in zip(search.cv_results_["params"],
                                                      search.cv_results_["mean_test_score"],
                                                      strict=True)}
    else:
        final, table = search, {}
        chosen = {k: v[0] for k, v in grid[0].items()}
    params = export(final)
    best_view = chosen["view__view"]
    report: dict[str, Any] = {"oof_auroc": auroc(oof, y), "chosen": candidate_label(chosen),
                              "selection_auroc": table, "n": int(y.size),
                              "n_correct": int(y.sum())}
    if left_out:
        report["left_out"] = left_out
        report["notes"] = [f"left out {', '.join(left_out)}: no graded record has a value "
                           "for it (the default takes every scorer; name --scorers to choose)"]
    report.update(explain_fit(kind, params, features, views[best_view], y, seed))
    chosen_layer = None if kind == "combiner" else best_view
    return Learned(kind=kind, name=name or kind, model=dict(model), layer=chosen_layer,
                   features=features, params=params,
                   training={"run_digest": run, "grader": grader, "n": int(y.size),
                             "item_ids": [r.item.id for r in graded], "n_folds": n_folds,
                             "seed": seed},
                   oof={r.item.id: float(s) for r, s in zip(graded, oof, strict=True)},
                   report=json_safe(report))


def grid_labels(grid: list[dict[str, Any]]) -> list[str]:
    """The candidates of a selection grid, as the report labels them."""
    from sklearn.model_selection import ParameterGrid

    return [candidate_label(p) for p in ParameterGrid(grid)]


def _no_value_reason(name: str, records: Sequence[Record]) -> str:
    """Why ``name`` has no value: the reason most records give, else that none has it."""
    reasons = collections.Counter(r.score_errors[name] for r in records
                                  if name in r.score_errors)
    if not reasons:
        return "no record has a value"
    reason, count = reasons.most_common(1)[0]
    return f"no record has a value ({count} of {len(records)}: {reason})"


def explain_fit(kind: str, params: dict[str, Any], features: list[str], x: np.ndarray,
                y: np.ndarray, seed: int) -> dict[str, Any]:
    """Weights (logistic, per standardised input) or permutation importances (boosting)."""
    if params["type"] == "logistic":
        coef = np.asarray(params["coef"])
        if kind == "combiner":
            n = len(features)
            return {"weights": {f: float(w) for f, w in zip(features, coef[:n], strict=True)},
                    "missing_weights": {f: float(w) for f, w in
                                        zip(features, coef[n:], strict=True)}}
        out: dict[str, Any] = {"weight_norm": float(np.linalg.norm(coef))}
        if kind == "lens":
            k = len(features)
            out["token_weights"] = {f: float(w) for f, w in zip(features, coef[-k:], strict=True)}
        return out
    base = auroc(predict_params(params, x), y)
    rng = np.random.default_rng(seed)
    drops = {}
    for j, f in enumerate(features):
        losses = []
        for _ in range(5):
            shuffled = x.copy()
            shuffled[:, j] = shuffled[rng.permutation(len(y)), j]
            losses.append(base - auroc(predict_params(params, shuffled), y))
        drops[f] = float(np.mean(losses))
    return {"importances": drops, "importance_measure": "AUROC drop when the input is permuted "
                                                         "(training records, 5 repeats)"}


def run_digest(config: dict[str, Any] | None, backend: dict[str, Any] | None) -> str:
    """Identity of a run: sha256 of its stored configuration and backend identity."""
    blob = json.dumps({"config": config, "backend": backend}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@contextlib.contextmanager
def imported_run_hint(config: dict[str, Any], path: str | Path) -> Iterator[None]:
    """An imported run holds no hidden states, and ``--hidden-layers`` is no option of an
    import: say that instead."""
    try:
        yield
    except InvalidInputError as exc:
        if exc.field != "hidden_layers" or config.get("kind") != "import":
            raise
        raise InvalidInputError(
            f"the run at {path} is an import of a log file, and logs hold no hidden states; "
            "probes, lenses and density models need a run generated by confide with hidden "
            "states (`confide run --hidden-layers 8,16,-1`); a combiner of this run's scores "
            "needs none (--kind combiner)", field="kind") from exc


def fit_run(path: str | Path, *, kind: Kind, grader: str | None = None, **options: Any
            ) -> Learned:
    """Fit on a stored run (hidden states loaded for probes); see :func:`fit`. The model's
    ``training["run_path"]`` names the run, so its messages say what it was fitted on."""
    with RunStore.open(path) as store:
        config, backend = store.config or {}, store.get_meta("backend", {})
        records = store.records(hidden=kind != "combiner")
    grader = grader or str(config.get("grader", "contains"))
    options.setdefault("name", f"{kind}:{Path(path).name}")
    with imported_run_hint(config, path):
        model = fit(records, kind=kind, grader=grader, model=backend,
                    run=run_digest(config, backend), **options)
    model.training["run_path"] = str(path)
    return model


def apply_to_run(path: str | Path, learned: Sequence[Learned], *,
                 allow_other_model: bool = False, notes: list[str] | None = None
                 ) -> list[Record]:
    """The run's records with each learned model's scores added (in memory; store untouched).

    Each model is checked against the run first: the model that generated the run
    (another one is refused unless ``allow_other_model``, and ``notes`` then gets a
    sentence saying so), and the inputs it reads, which some record must hold (a
    combiner's scorers, with a value; a probe's hidden state, of the length it reads).

    Parameters
    ----------
    path : the run directory.
    learned : fitted models (:meth:`Learned.load`, :func:`~confide.learned.density.load_fitted`).
    allow_other_model : apply a model fitted on another model's run anyway.
    notes : a list that gets one sentence per model: what it was fitted on, and where it
        was applied to another model's run (the table notes of ``eval --with``).

    Raises
    ------
    ConfigMismatch : a model fitted on another model's run, without ``allow_other_model``.
    InvalidInputError : ``file: features:`` (or ``layer:``) an input no record of the run
        holds, or a scorer that does not exist.
    """
    with RunStore.open(path) as store:
        config, backend = store.config or {}, store.get_meta("backend", {})
        skipped = store.get_meta("skipped_scorers", {}) or {}
        need_hidden = any(m.kind != "combiner" for m in learned)
        records = store.records(hidden=need_hidden)
    digest = run_digest(config, backend)
    for model in learned:
        other = model.check_compatible(backend, allow_other_model=allow_other_model)
        _check_inputs(model, records, path, config, skipped)
        if notes is not None:
            notes.append(_fitted_on(model, own=model.oof_of(digest) is not None))
            if other:
                notes.append(other)
        for record, (value, why) in zip(records, model.apply(
                records, run=digest, backend=backend, allow_other_model=allow_other_model),
                strict=True):
            record.scores[model.name] = value
            if why is not None:
                record.score_errors[model.name] = why
    return records


def _fitted_on(model: Learned, *, own: bool) -> str:
    """One sentence: what ``model`` was fitted on, and how its training items are scored."""
    training = model.training
    run = training.get("run_path") or "a run"
    inputs = f" from {', '.join(model.features)}" if model.kind == "combiner" else \
        f" at hidden state {model.layer}"
    if model.multitask is not None:  # several runs: say how the tasks were weighed
        multi = model.multitask
        run = f"runs {run}, tasks weighed {multi['weighting']}" + (
            f" ({multi['applied']}'s probe applied)" if multi["weighting"] == "per-task" else "")
    items = ("its training items get their cross-fitted scores" if own
             else "items it was trained on get NaN")
    return (f"{model.name}: a {model.kind} ({model.label}){inputs}, fitted on {run} "
            f"({model.model_name()}, {training.get('n', '?')} items graded with "
            f"{training.get('grader', '?')!r}); {items}")


def _check_inputs(model: Learned, records: Sequence[Record], path: str | Path,
                  config: dict[str, Any], skipped: dict[str, str]) -> None:
    """Refuse a model whose inputs no record of the run holds (module notes of
    :func:`apply_to_run`), naming the file, the field and the input."""
    from confide.scorers import SCORERS

    if model.kind == "combiner":
        held = {n for r in records for n in r.scores}
        for name in model.features:
            values = [r.scores[name] for r in records if name in r.scores]
            if values and not all(math.isnan(v) for v in values):
                continue
            if not values and name not in SCORERS:
                close = difflib.get_close_matches(name, sorted(held | set(SCORERS)), n=3)
                raise InvalidInputError(
                    f"input {name!r} is not a scorer"
                    + (f" (did you mean {', '.join(map(repr, close))}?)" if close else "")
                    + f"; the run at {path} holds {', '.join(sorted(held)) or 'no scores'}. "
                    "Fit the combiner again on a run's own scorers (confide fit --kind "
                    "combiner)", file=model.source, field="features")
            why = (f"skipped: {skipped[name]}" if name in skipped
                   else "no record has it" if not values
                   else f"every record's value is NaN ({_no_value_reason(name, records)})")
            raise InvalidInputError(
                f"input scorer {name!r}: the run at {path} has no value for it ({why}), so "
                f"the combiner would score every item without it; apply it to a run scored "
                f"with {', '.join(model.features)}, or fit a combiner on this run's scorers "
                f"({', '.join(sorted(held)) or 'none'})", file=model.source, field="features")
        return
    layer = model.layer or ""
    stored = hidden_keys([r for r in records if r.greedy.hidden]) if records else []
    states = [h for r in records if (h := (r.greedy.hidden or {}).get(layer)) is not None]
    if not states:
        if config.get("kind") == "import":
            fix = ("the run is an import of a log file, and logs hold no hidden states; "
                   "apply it to a run generated by confide with `--hidden-layers "
                   f"{layer.split(':')[0]}`")
        else:
            fix = (f"it holds {', '.join(stored)}" if stored else "it holds no hidden states")
            fix += f"; generate the run with `--hidden-layers {layer.split(':')[0]}`"
        raise InvalidInputError(f"the {model.kind} reads hidden state {layer}; no record of "
                                f"the run at {path} has it: {fix}", file=model.source,
                                field="layer")
    width = input_width(model.kind, model.params, len(model.features))
    if all(len(h) != width for h in states):
        raise InvalidInputError(
            f"the {model.kind} reads hidden states {layer} of {width} numbers; the run at "
            f"{path} holds states of {len(states[0])} (fitted on {model.model_name()}: "
            "hidden states of another model do not fit)", file=model.source, field="layer")
