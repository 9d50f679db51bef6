r"""One probe (or lens probe) fitted on the graded runs of several tasks at once.

A probe fitted on one task transfers poorly to another (``benchmarks/transfer.py``).
Fitting it on several tasks' records asks how much each task should count; three
weightings (``--weighting``):

``equal``
    Every task's *mean* loss weighs 1, whatever its number of records: the pooled
    logistic regression with record weight :math:`\bar n / n_t`.
``uncertainty``
    Each task's weight is learned with the probe: a homoscedastic log-variance
    :math:`s_t = \log\sigma_t^2` per task (Kendall, Gal and Cipolla 2018), minimising
    :math:`e^{-s_t} L_t + s_t`, so a task the probe fits badly (noisy labels, a
    task whose correctness the hidden state does not carry) gets a large
    :math:`\sigma_t` and a small weight :math:`e^{-s_t} = 1 / L_t`.
``per-task``
    One probe per task (the single-run fit, :func:`confide.learned.fit`); a new run
    gets the one whose final model ranks the *other* training tasks' answers best
    (mean AUROC), named in the file (``multitask.applied``).

The joint model (``equal``, ``uncertainty``) is an L2-penalised logistic regression
with one intercept, solved with scipy's L-BFGS-B on the joint objective
(:func:`joint_logistic`), not scikit-learn: the log-variances are parameters of the
objective, which ``LogisticRegression`` cannot learn, and numpy/scipy keeps torch out
of :mod:`confide.learned`. The single-run path keeps its scikit-learn pipeline.

**Cross-fitting.** Every figure reported (``report["oof_auroc"]`` and the per-task
out-of-fold scores a training run gets back) follows confide's one fold rule
(:func:`~confide.metrics.crossfit.crossfit_splits`) within each task, with
:math:`K` the smallest task's :math:`K`; fold :math:`k` of every task together make
fold :math:`k`. The hidden-state key and :math:`C` are chosen anew inside each
training split (:data:`~confide.learned.estimators.SELECTION_FOLDS` inner folds of the
same rule) by the mean over tasks of the within-task AUROC: a pooled AUROC would
reward the probe for telling the tasks' base rates apart.

**The file.** A multi-task fit is a :class:`~confide.learned.model.Learned` of kind
``probe`` or ``lens`` with a ``multitask`` field: the weighting, the probe applied to
new runs, and per task its run, grader, counts, out-of-fold scores and, for
``uncertainty``, the learned :math:`s_t`, :math:`\sigma_t` and weight. It loads and
applies like any fit file (``confide eval RUN --with FILE``): each training run gets
its own out-of-fold scores, any other run the final model's (items of a training set
NaN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.jsonsafe import json_safe
from confide.core.records import Record
from confide.learned.estimators import C_GRID, SELECTION_FOLDS, auroc, predict_logistic
from confide.learned.fitting import explain_fit, fit, imported_run_hint, run_digest
from confide.learned.model import (
    TOKEN_FEATURES,
    Kind,
    Learned,
    chosen_hidden_keys,
    feature_matrix,
    model_label,
)
from confide.learned.schema import LOG_VARIANCE_BOUNDS, WEIGHTINGS
from confide.metrics.crossfit import crossfit_folds
from confide.store.run_store import RunStore

__all__ = ["LOG_VARIANCE_BOUNDS", "WEIGHTINGS", "JointFit", "Task", "Weighting", "fit_multitask",
           "fit_runs", "joint_logistic", "task_folds"]

Weighting = Literal["equal", "uncertainty", "per-task"]
# LOG_VARIANCE_BOUNDS: task weights e^{-s_t} stay within [e^-4, e^4], so a task the probe fits
# almost perfectly on its training records cannot take all the weight.
_MULTI_KINDS = ("probe", "lens")


@dataclass(frozen=True)
class Task:
    """One task's graded records: what :func:`fit_multitask` weighs.

    ``grader`` labels correctness (grade >= 0.5); ``run_digest`` and ``run_path`` name the
    run the records come from, so the fitted file gives that run its out-of-fold scores.
    """

    name: str
    records: Sequence[Record]
    grader: str
    run_digest: str | None = None
    run_path: str | None = None


# ------------------------------------------------------------------ the joint estimator


@dataclass(frozen=True)
class JointFit:
    """A fitted joint probe: standardisation, weights, intercept and the tasks' log-variances
    (0 under equal weights)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    log_variance: np.ndarray
    C: float

    def params(self) -> dict[str, Any]:
        """The plain ``logistic`` form every fit file holds
        (:func:`~confide.learned.estimators.predict_params` applies it)."""
        return {"type": "logistic", "C": float(self.C), "indicators": False,
                "fill": [0.0] * self.mean.size, "mean": self.mean.tolist(),
                "scale": self.scale.tolist(), "coef": self.coef.tolist(),
                "intercept": float(self.intercept)}

    def predict(self, x: np.ndarray) -> np.ndarray:
        return predict_logistic(self.params(), x)


def _objective(theta: np.ndarray, z: np.ndarray, y: np.ndarray, task: np.ndarray,
               record_weight: np.ndarray, n_tasks: int, mean_size: float, C: float,
               learn_variance: bool) -> tuple[float, np.ndarray]:
    """The joint objective of :func:`joint_logistic` and its gradient."""
    from scipy.special import expit

    d = z.shape[1]
    w, b = theta[:d], theta[d]
    s = theta[d + 1:] if learn_variance else np.zeros(n_tasks)
    logit = z @ w + b
    loss = (np.logaddexp(0.0, logit) - y * logit) * record_weight  # n̄/n_t · ℓ_i
    task_loss = np.bincount(task, weights=loss, minlength=n_tasks)  # n̄ L_t
    scale = np.exp(-s)
    value = float(scale @ task_loss + mean_size * s.sum() + w @ w / (2 * C))
    residual = (expit(logit) - y) * record_weight * scale[task]
    grad = np.concatenate([z.T @ residual + w / C, [residual.sum()]])
    if learn_variance:
        grad = np.concatenate([grad, mean_size - scale * task_loss])
    return value, grad


def joint_logistic(x: np.ndarray, y: np.ndarray, task: np.ndarray, *, n_tasks: int,
                   C: float = 1.0, weighting: Weighting = "uncertainty",
                   max_iter: int = 5000) -> JointFit:
    r"""A logistic probe fitted jointly on several tasks, each task's loss weighted.

    With :math:`\tilde x = (x - \mu)/s` standardised over all records, per-record loss
    :math:`\ell_i = \log(1 + e^{z_i}) - y_i z_i`, :math:`z_i = w^\top \tilde x_i + b`,
    task :math:`t` holding :math:`n_t` records, :math:`\bar n = n / T` and the task's
    mean loss :math:`L_t = \frac{1}{n_t}\sum_{i \in t} \ell_i`:

    .. math:: J(w, b, s) = \bar n \sum_{t=1}^{T} \big[ e^{-s_t} L_t(w, b) + s_t \big]
              + \frac{1}{2C} \lVert w \rVert^2

    ``uncertainty``: :math:`s_t = \log \sigma_t^2` is learned with :math:`w, b`
    (bounded to :data:`LOG_VARIANCE_BOUNDS`): the classification form of Kendall et
    al. (2018), :math:`e^{-s_t} L_t + s_t`, whose minimum over :math:`s_t` is at
    :math:`s_t = \log L_t`, giving task :math:`t` the weight :math:`e^{-s_t} = 1/L_t`.
    (Their equation 10 writes :math:`\frac{1}{\sigma^2}L + \log\sigma`, i.e.
    :math:`e^{-s}L + s/2`; the two differ by a factor 2 on every weight, which
    :math:`C` absorbs.) ``equal``: :math:`s_t = 0`, so :math:`J = \sum_i
    \frac{\bar n}{n_{t(i)}} \ell_i + \frac{1}{2C}\lVert w\rVert^2`: scikit-learn's
    ``LogisticRegression(C)`` with sample weights :math:`\bar n / n_t` (the plain pooled
    fit when the tasks are of one size). The factor :math:`\bar n` keeps :math:`C` on
    scikit-learn's scale. Solved by L-BFGS-B from :math:`w = 0, b = 0, s = 0`; under
    ``uncertainty`` :math:`J` is not jointly convex, and the start is equal weights.

    Parameters
    ----------
    x : array (n, d), finite.
    y : array (n,), 1 = right, 0 = wrong.
    task : array (n,) of task indices in ``0..n_tasks-1``; every task holds a record.
    n_tasks : T >= 1.
    C : inverse L2 strength > 0, default 1.
    weighting : "uncertainty" (default) or "equal".

    Returns
    -------
    JointFit, whose ``log_variance`` holds :math:`s_t` (zeros under ``equal``).

    References
    ----------
    [1] A. Kendall, Y. Gal, R. Cipolla (2018). Multi-task learning using uncertainty to
        weigh losses for scene geometry and semantics. CVPR. arXiv:1705.07115.

    Examples
    --------
    >>> fit = joint_logistic(np.array([[0.], [1.], [0.], [1.]]), np.array([0, 1, 1, 0]),
    ...                      np.array([0, 0, 1, 1]), n_tasks=2, C=1.0)
    >>> fit.log_variance.round(3).tolist()  # both tasks at chance: s = log(log 2)
    [-0.367, -0.367]
    """
    from scipy.optimize import minimize

    if weighting not in ("equal", "uncertainty"):
        raise InvalidInputError(f"a joint probe weighs tasks 'equal' or 'uncertainty'; got "
                                f"{weighting!r}", field="weighting")
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    task = np.asarray(task, dtype=np.intp)
    if x.ndim != 2 or y.shape != (x.shape[0],) or task.shape != y.shape:
        raise InvalidInputError(f"x of shape (n, d) with y and task of shape (n,); got "
                                f"{x.shape}, {y.shape}, {task.shape}", field="x")
    if not np.isfinite(x).all():
        raise InvalidInputError("the inputs hold NaN or infinite values", field="x")
    sizes = np.bincount(task, minlength=n_tasks)
    if task.min(initial=0) < 0 or sizes.size != n_tasks or (sizes == 0).any():
        raise InvalidInputError(f"task indices must cover 0..{n_tasks - 1}, each with a "
                                f"record; counts {sizes.tolist()}", field="task")
    if not C > 0:
        raise InvalidInputError(f"C must be positive, got {C}", field="C")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0  # a constant input: as StandardScaler, left unscaled
    z = (x - mean) / scale
    mean_size = y.size / n_tasks
    record_weight = mean_size / sizes[task]
    learn = weighting == "uncertainty"
    d = x.shape[1]
    bounds = [(None, None)] * (d + 1) + ([LOG_VARIANCE_BOUNDS] * n_tasks if learn else [])
    result = minimize(_objective, np.zeros(d + 1 + (n_tasks if learn else 0)), jac=True,
                      method="L-BFGS-B", bounds=bounds, options={"maxiter": max_iter},
                      args=(z, y, task, record_weight, n_tasks, mean_size, C, learn))
    theta = result.x
    s = theta[d + 1:] if learn else np.zeros(n_tasks)
    return JointFit(mean=mean, scale=scale, coef=theta[:d].copy(), intercept=float(theta[d]),
                    log_variance=np.asarray(s, dtype=np.float64).copy(), C=float(C))


# ------------------------------------------------------------------ folds and selection


def task_folds(y: np.ndarray, task: np.ndarray, names: Sequence[str], *, n_folds: int,
               seed: int) -> tuple[np.ndarray, int]:
    r"""Fold of each record: confide's fold rule within each task, with one :math:`K`.

    .. math:: K = \min\big(n_{\text{folds}},\ \min_t n_{\text{right},t},\
              \min_t n_{\text{wrong},t}\big)

    and :func:`~confide.metrics.crossfit.crossfit_folds` of each task's correctness
    with that :math:`K`; fold :math:`k` is fold :math:`k` of every task. Returns the
    fold indices and :math:`K`.

    Raises
    ------
    InvalidInputError : a task with fewer than 2 right or 2 wrong answers (named).
    """
    k = n_folds
    for t, name in enumerate(names):
        yt = y[task == t]
        right = int(yt.sum())
        if min(right, yt.size - right) < 2:
            raise InvalidInputError(f"task {name!r}: cross-fitting needs at least 2 correct and "
                                    f"2 wrong answers in every task; it holds {right} correct "
                                    f"of {yt.size}", field="correct")
        k = min(k, right, yt.size - right)
    fold = np.empty(y.size, dtype=np.intp)
    for t in range(len(names)):
        fold[task == t] = crossfit_folds(y[task == t], n_folds=k, seed=seed)
    return fold, k


def _mean_task_auroc(score: np.ndarray, y: np.ndarray, task: np.ndarray, n_tasks: int) -> float:
    """Mean over tasks of the within-task AUROC (NaN when a task holds one class only)."""
    return float(np.mean([auroc(score[task == t], y[task == t]) for t in range(n_tasks)]))


def _select(views: dict[str, np.ndarray], y: np.ndarray, task: np.ndarray,
            names: Sequence[str], *, weighting: Weighting, seed: int
            ) -> tuple[str, float, dict[str, float]]:
    """The (key, C) whose inner cross-validated mean within-task AUROC is best (the first on
    ties), and the table of every candidate's."""
    candidates = [(key, c) for key in views for c in C_GRID]
    if len(candidates) == 1:
        return candidates[0][0], candidates[0][1], {}
    fold, k = task_folds(y, task, names, n_folds=SELECTION_FOLDS, seed=seed)
    table: dict[str, float] = {}
    best: tuple[str, float] | None = None
    best_score = -math.inf
    for key, c in candidates:
        pred = np.empty(y.size)
        for f in range(k):
            train = fold != f
            model = joint_logistic(views[key][train], y[train], task[train],
                                   n_tasks=len(names), C=c, weighting=weighting)
            pred[~train] = model.predict(views[key][~train])
        score = _mean_task_auroc(pred, y, task, len(names))
        table[_label(key, c)] = score
        if score > best_score:
            best, best_score = (key, c), score
    if best is None:  # every candidate NaN: a task with one class in some inner fold
        best = candidates[0]
    return best[0], best[1], table


def _label(key: str, c: float) -> str:
    return f"{key} logistic C={c:g}"


# ------------------------------------------------------------------ fitting


def fit_multitask(tasks: Sequence[Task], *, kind: Kind, model: dict[str, Any],
                  weighting: Weighting = "equal", layer: str | None = "best",
                  n_folds: int = 5, seed: int = 0, name: str | None = None) -> Learned:
    r"""Fit one probe or lens probe on several tasks' graded records (module notes).

    ``equal`` and ``uncertainty`` fit one joint probe (:func:`joint_logistic`), its
    hidden-state key and :math:`C \in` :data:`~confide.learned.estimators.C_GRID` chosen
    by inner cross-validation; ``per-task`` fits :func:`confide.learned.fit` on each task
    and applies to new runs the probe whose final model has the best mean AUROC on the
    other training tasks.

    Parameters
    ----------
    tasks : two or more :class:`Task`, of distinct names, each with at least 2 right and 2
        wrong answers under its grader.
    kind : "probe" or "lens".
    model : the backend identity the records come from (every task's).
    weighting : "equal" (default), "uncertainty" or "per-task". Equal is the default:
        on the bundled model's hidden states (576 numbers, a hundred records a task) every
        task's training loss is near 0, each learned :math:`s_t` sits at the lower bound, and
        uncertainty weighting is equal weighting with a larger :math:`C`
        (``benchmarks/results/transfer.md``).
    layer : a hidden key, a layer (mean pooling) or "best" (every key held by all records).
    n_folds : upper bound on the cross-fitting folds.
    seed : seeds the folds.

    Returns
    -------
    Learned with ``multitask`` filled in; ``report["oof_auroc"]`` is the mean over tasks of
    the cross-fitted within-task AUROC, ``report["tasks"]`` each task's.

    References
    ----------
    [1] A. Kendall, Y. Gal, R. Cipolla (2018). Multi-task learning using uncertainty to
        weigh losses for scene geometry and semantics. CVPR. arXiv:1705.07115.
    """
    if kind not in _MULTI_KINDS:
        raise InvalidInputError(f"several runs are fitted together for a probe or a lens, not "
                                f"a {kind}; fit a {kind} on one run", field="kind")
    if weighting not in WEIGHTINGS:
        raise InvalidInputError(f"unknown weighting {weighting!r}; one of "
                                f"{', '.join(WEIGHTINGS)}", field="weighting")
    if len(tasks) < 2:
        raise InvalidInputError(f"a multi-task fit needs two or more tasks; got {len(tasks)}",
                                field="runs")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise InvalidInputError(f"tasks named twice: {', '.join(names)}", field="runs")
    graded = []
    for t in tasks:
        rows = [r for r in t.records if t.grader in r.grades]
        if not rows:
            raise InvalidInputError(f"task {t.name!r}: no record is graded with {t.grader!r}",
                                    field="grader")
        graded.append(rows)
    y = np.concatenate([[r.grades[t.grader] >= 0.5 for r in rows]
                        for t, rows in zip(tasks, graded, strict=True)]).astype(np.intp)
    task = np.concatenate([np.full(len(rows), i) for i, rows in enumerate(graded)])
    records = [r for rows in graded for r in rows]
    task_folds(y, task, names, n_folds=n_folds, seed=seed)  # refuse too few answers early
    if weighting == "per-task":
        return _fit_per_task(tasks, graded, kind=kind, model=model, layer=layer,
                             n_folds=n_folds, seed=seed, name=name)

    keys = chosen_hidden_keys(records, layer)
    views: dict[str, np.ndarray] = {}
    for key in keys:
        views[key], why = feature_matrix(kind, key, [], records)
        if any(why):
            raise InvalidInputError(next(w for w in why if w), field="records")
    from threadpoolctl import threadpool_limits

    fold, k = task_folds(y, task, names, n_folds=n_folds, seed=seed)
    oof = np.empty(y.size)
    with threadpool_limits(limits=1):  # many small fits: one BLAS thread each is faster
        for f in range(k):
            train = fold != f
            try:
                key, c, _ = _select({kk: v[train] for kk, v in views.items()}, y[train],
                                    task[train], names, weighting=weighting, seed=seed)
            except InvalidInputError as exc:
                if exc.field != "correct":
                    raise
                raise InvalidInputError(
                    f"too few answers to choose the layer and C inside each cross-fitting fold "
                    f"({exc}); grade more items, or fix the layer (--layer 8:mean)",
                    field="grader") from exc
            part = joint_logistic(views[key][train], y[train], task[train], n_tasks=len(names),
                                  C=c, weighting=weighting)
            oof[~train] = part.predict(views[key][~train])
        key, c, table = _select(views, y, task, names, weighting=weighting, seed=seed)
        final = joint_logistic(views[key], y, task, n_tasks=len(names), C=c,
                               weighting=weighting)
    params = final.params()
    entries = []
    for i, spec in enumerate(tasks):
        rows = task == i
        entry = _task_entry(spec, graded[i], y[rows], oof[rows])
        s = float(final.log_variance[i])
        entry.update(log_variance=s, sigma=math.exp(s / 2), weight=math.exp(-s))
        entries.append(entry)
    report: dict[str, Any] = {
        "oof_auroc": _mean_task_auroc(oof, y, task, len(names)), "chosen": _label(key, c),
        "selection_auroc": table, "n": int(y.size), "n_correct": int(y.sum()),
        "weighting": weighting, "tasks": {e["name"]: _task_report(e) for e in entries},
        "oof_auroc_measure": "mean over tasks of the cross-fitted within-task AUROC"}
    features = list(TOKEN_FEATURES) if kind == "lens" else []
    report.update(explain_fit(kind, params, features, views[key], y, seed))
    multitask = {"weighting": weighting, "applied": "joint", "tasks": entries}
    return _learned(kind, name, model, key, features, params, tasks, graded, n_folds, seed,
                    multitask, report)


def _task_entry(spec: Task, rows: Sequence[Record], y: np.ndarray, oof: np.ndarray
                ) -> dict[str, Any]:
    return {"name": spec.name, "run_path": spec.run_path, "run_digest": spec.run_digest,
            "grader": spec.grader, "n": int(y.size), "n_correct": int(y.sum()),
            "item_ids": [r.item.id for r in rows], "oof_auroc": auroc(oof, y),
            "oof": {r.item.id: float(s) for r, s in zip(rows, oof, strict=True)}}


def _task_report(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ("item_ids", "oof", "params")}


def _learned(kind: str, name: str | None, model: dict[str, Any], layer: str,
             features: list[str], params: dict[str, Any], tasks: Sequence[Task],
             graded: list[list[Record]], n_folds: int, seed: int, multitask: dict[str, Any],
             report: dict[str, Any]) -> Learned:
    paths = [t.run_path for t in tasks if t.run_path]
    training = {"run_digest": None, "grader": ", ".join(dict.fromkeys(t.grader for t in tasks)),
                "n": sum(len(rows) for rows in graded),
                "item_ids": list(dict.fromkeys(r.item.id for rows in graded for r in rows)),
                "n_folds": n_folds, "seed": seed, "tasks": [t.name for t in tasks]}
    if paths:
        training["run_path"] = ", ".join(paths)
    return Learned(kind=kind, name=name or f"{kind}:{'+'.join(t.name for t in tasks)}",
                   model=dict(model), layer=layer, features=features, params=params,
                   training=training, oof={}, report=json_safe(report),
                   multitask=json_safe(multitask))


def _fit_per_task(tasks: Sequence[Task], graded: list[list[Record]], *, kind: Kind,
                  model: dict[str, Any], layer: str | None, n_folds: int, seed: int,
                  name: str | None) -> Learned:
    """One single-run fit per task; the one that ranks the other tasks best is applied."""
    fits = [fit(rows, kind=kind, grader=t.grader, model=model, layer=layer, n_folds=n_folds,
                seed=seed, run=t.run_digest) for t, rows in zip(tasks, graded, strict=True)]
    labels = [np.array([r.grades[t.grader] >= 0.5 for r in rows], dtype=np.intp)
              for t, rows in zip(tasks, graded, strict=True)]
    entries, transfer = [], []
    for i, (spec, one) in enumerate(zip(tasks, fits, strict=True)):
        others = []
        for j, rows in enumerate(graded):
            if j != i:
                scores = np.array([s for s, _ in one.predict(rows)])
                keep = ~np.isnan(scores)
                others.append(auroc(scores[keep], labels[j][keep]))
        transfer.append(float(np.nanmean(others)) if not np.isnan(others).all() else math.nan)
        oof = np.array([one.oof[r.item.id] for r in graded[i]])
        entry = _task_entry(spec, graded[i], labels[i], oof)
        entry.update(layer=one.layer, params=one.params, chosen=one.report["chosen"],
                     transfer_auroc=transfer[-1])
        entries.append(entry)
    best = max(range(len(tasks)), key=lambda i: -math.inf if math.isnan(transfer[i])
               else transfer[i])
    applied = fits[best]
    report: dict[str, Any] = {
        "oof_auroc": float(np.mean([e["oof_auroc"] for e in entries])),
        "chosen": f"{tasks[best].name}'s probe ({applied.report['chosen']})",
        "selection_auroc": applied.report.get("selection_auroc", {}), "n": applied.report["n"],
        "n_correct": applied.report["n_correct"], "weighting": "per-task",
        "tasks": {e["name"]: _task_report(e) for e in entries},
        "oof_auroc_measure": "mean over tasks of each task's own probe's cross-fitted AUROC",
        "applied": f"new runs get {tasks[best].name}'s probe: its final model has the best "
                   f"mean AUROC on the other training tasks ({transfer[best]:.3f})"}
    for key in ("weight_norm", "token_weights"):
        if key in applied.report:
            report[key] = applied.report[key]
    multitask = {"weighting": "per-task", "applied": tasks[best].name, "tasks": entries}
    return _learned(kind, name, model, cast(str, applied.layer), list(applied.features),
                    applied.params, tasks, graded, n_folds, seed, multitask, report)


def fit_runs(paths: Sequence[str | Path], *, kind: Kind, weighting: Weighting = "equal",
             grader: str | None = None, scorers: Sequence[str] | None = None,
             estimator: str = "logistic", background: Any = None, **options: Any) -> Learned:
    """Fit a probe or lens on several stored runs of one model (:func:`fit_multitask`).

    Each run is one task, named by its task (by its folder where two runs share a
    task) and labelled by ``grader`` or else by the run's own grader.

    Raises
    ------
    ConfigMismatch : runs generated by different models (hidden states of different
        models share no probe).
    InvalidInputError : fewer than two runs, one given twice, a run without hidden
        states, a combiner or density kind, or options only a combiner takes.
    """
    if len(paths) < 2:
        raise InvalidInputError("--weighting weighs the tasks of several runs; give two or "
                                "more runs (confide fit RUN1 RUN2 ... --weighting ...), or "
                                "leave --weighting out for one run", field="weighting")
    if kind not in _MULTI_KINDS:
        raise InvalidInputError(f"several runs are fitted together for a probe or a lens, not "
                                f"a {kind}; fit a {kind} on one run", field="kind")
    if scorers:
        raise InvalidInputError("--scorers chooses a combiner's inputs; a probe reads hidden "
                                "states", field="scorers")
    if estimator != "logistic":
        raise InvalidInputError("probes are logistic regressions; boosting is for the "
                                "combiner", field="estimator")
    if background is not None:
        raise InvalidInputError("only relative_mahalanobis takes a background run",
                                field="background")
    resolved = [Path(p).resolve() for p in paths]
    if len(set(resolved)) != len(resolved):
        raise InvalidInputError(f"a run is given twice: {', '.join(map(str, paths))}",
                                field="runs")
    loaded = []
    for path in paths:
        with RunStore.open(path) as store:
            config, backend = store.config or {}, store.get_meta("backend", {}) or {}
            records = store.records(hidden=True)
        with imported_run_hint(config, path):
            try:
                chosen_hidden_keys(records, None)
            except InvalidInputError as exc:
                raise InvalidInputError(f"the run at {path}: {exc.args[0]}",
                                        field=exc.field) from exc
        loaded.append((path, config, backend, records))
    first_path, _, first_backend, _ = loaded[0]
    for path, _, backend, _ in loaded[1:]:
        if any(backend.get(k) != first_backend.get(k) for k in ("backend", "model")):
            raise ConfigMismatch(
                f"{path}: model: the run was generated by {model_label(backend)}, the run at "
                f"{first_path} by {model_label(first_backend)}; hidden states of different "
                "models share no probe: fit on runs of one model")
    task_names = [str((config.get("task") or {}).get("name") or Path(path).name)
                  for path, config, _, _ in loaded]
    if len(set(task_names)) != len(task_names):  # two runs of one task: name them by folder
        task_names = [Path(path).name for path, *_ in loaded]
    if len(set(task_names)) != len(task_names):
        task_names = [str(path) for path, *_ in loaded]
    tasks = [Task(name=task_name, records=records,
                  grader=grader or str(config.get("grader", "contains")),
                  run_digest=run_digest(config, backend), run_path=str(path))
             for task_name, (path, config, backend, records) in zip(task_names, loaded,
                                                                    strict=True)]
    return fit_multitask(tasks, kind=kind, model=first_backend, weighting=weighting, **options)
