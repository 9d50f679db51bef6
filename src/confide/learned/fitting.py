r"""Fitting a probe, lens probe or combiner on a run's graded records, with cross-fitted scores.

See :mod:`confide.learned` for the kinds and the cross-fitting rule.
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import Sequence
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
)
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
        # each record scored by a model (selection included) fitted without its fold
        oof = cross_val_predict(clone(search), x_all, y, method="predict_proba",
                                cv=crossfit_splits(y, n_folds=n_folds, seed=seed))[:, 1]
        search.fit(x_all, y)
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
    report.update(_explain(kind, params, features, views[best_view], y, seed))
    chosen_layer = None if kind == "combiner" else best_view
    return Learned(kind=kind, name=name or kind, model=dict(model), layer=chosen_layer,
                   features=features, params=params,
                   training={"run_digest": run, "grader": grader, "n": int(y.size),
                             "item_ids": [r.item.id for r in graded], "n_folds": n_folds,
                             "seed": seed},
                   oof={r.item.id: float(s) for r, s in zip(graded, oof, strict=True)},
                   report=json_safe(report))


def _no_value_reason(name: str, records: Sequence[Record]) -> str:
    """Why ``name`` has no value: the reason most records give, else that none has it."""
    reasons = collections.Counter(r.score_errors[name] for r in records
                                  if name in r.score_errors)
    if not reasons:
        return "no record has a value"
    reason, count = reasons.most_common(1)[0]
    return f"no record has a value ({count} of {len(records)}: {reason})"


def _explain(kind: str, params: dict[str, Any], features: list[str], x: np.ndarray,
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


def fit_run(path: str | Path, *, kind: Kind, grader: str | None = None, **options: Any
            ) -> Learned:
    """Fit on a stored run (hidden states loaded for probes); see :func:`fit`."""
    with RunStore.open(path) as store:
        config, backend = store.config or {}, store.get_meta("backend", {})
        records = store.records(hidden=kind != "combiner")
    grader = grader or str(config.get("grader", "contains"))
    options.setdefault("name", f"{kind}:{Path(path).name}")
    return fit(records, kind=kind, grader=grader, model=backend,
               run=run_digest(config, backend), **options)


def apply_to_run(path: str | Path, learned: Sequence[Learned]) -> list[Record]:
    """The run's records with each learned model's scores added (in memory; store untouched)."""
    with RunStore.open(path) as store:
        config, backend = store.config or {}, store.get_meta("backend", {})
        need_hidden = any(m.kind != "combiner" for m in learned)
        records = store.records(hidden=need_hidden)
    digest = run_digest(config, backend)
    for model in learned:
        for record, (value, why) in zip(records, model.apply(records, run=digest,
                                                             backend=backend), strict=True):
            record.scores[model.name] = value
            if why is not None:
                record.score_errors[model.name] = why
    return records
