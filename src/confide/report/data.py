r"""What the report shows, computed from stored records: numbers and curve points, no HTML.

Everything here reads :class:`~confide.records.Record` lists only, so a report
is built from a stored run without the model. Correctness is the run's grade
binarised at 0.5, as in :mod:`confide.evaluation`, so the curves and the
summary table describe the same thing.

- :func:`roc_points`: the ROC curve of a confidence as a detector of correct answers.
- :func:`risk_coverage_points`: selective risk when answering the most confident
  fraction of the items (the curve whose mean is AURC).
- :func:`reliability_bins`: accuracy against cross-fitted calibrated confidence.
- :func:`sample_groups`: sampled answers grouped by normalised text.
- :func:`paired_run_difference`: paired bootstrap of a metric between two runs
  on the items they share.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from confide.audit import lead_disappears, length_correlations, ranking_agreement, stratified_auroc
from confide.errors import ConfideError, InvalidInputError
from confide.evaluation import EvalTable, evaluate_records
from confide.grading import normalize_answer
from confide.metrics import (
    METRICS,
    UndefinedMetricWarning,
    _equal_mass_bins,
    _resample_indices,
    _selective_risks,
    calibration_error,
    crossfit_probabilities,
)
from confide.records import Generation, Record

__all__ = ["GraderAgreement", "PairedComparison", "ReliabilityBin", "RunView", "ScorerView",
           "paired_comparison", "paired_run_difference", "reliability_bins",
           "risk_coverage_points", "roc_points", "run_view", "sample_groups"]

#: Metrics of the summary table, in column order.
SUMMARY_METRICS = ("auroc", "prr", "aurc")
#: Most points drawn per curve; longer curves are thinned evenly (end points kept).
MAX_CURVE_POINTS = 400
#: Fewest graded items for which a reliability diagram is drawn.
MIN_CALIBRATION_ITEMS = 10
LENGTH_BASELINE = "length"


# --------------------------------------------------------------------------- curves


def _thin(xs: np.ndarray, ys: np.ndarray, max_points: int = MAX_CURVE_POINTS
          ) -> list[tuple[float, float]]:
    """At most ``max_points`` evenly spaced points of a curve, first and last kept."""
    if xs.size > max_points:
        keep = np.unique(np.linspace(0, xs.size - 1, max_points).round().astype(int))
        xs, ys = xs[keep], ys[keep]
    return [(round(float(x), 5), round(float(y), 5)) for x, y in zip(xs, ys, strict=True)]


def _finite_pairs(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    conf = np.asarray(confidence, dtype=float).ravel()
    corr = np.asarray(correct, dtype=float).ravel()
    if conf.shape != corr.shape:
        raise InvalidInputError(f"confidence has {conf.size} values but correct has {corr.size}",
                                field="correct")
    keep = ~(np.isnan(conf) | np.isnan(corr))
    return conf[keep], corr[keep]


def roc_points(confidence: ArrayLike, correct: ArrayLike) -> list[tuple[float, float]] | None:
    r"""ROC curve of the confidence as a detector of correct answers: (FPR, TPR) points.

    For each threshold :math:`\tau` among the distinct confidences,

    .. math:: \mathrm{TPR}(\tau) = \frac{\#\{c_i \ge \tau, y_i = 1\}}{\#\{y_i = 1\}}, \qquad
              \mathrm{FPR}(\tau) = \frac{\#\{c_i \ge \tau, y_i = 0\}}{\#\{y_i = 0\}}

    computed by :func:`sklearn.metrics.roc_curve` (collinear points dropped);
    the area under it is :func:`confide.metrics.auroc_score`.

    Parameters
    ----------
    confidence : array of shape (n,)
        Higher = more likely correct. NaN rows are left out.
    correct : array of shape (n,)
        Correctness; binarised at 0.5.

    Returns
    -------
    list of (fpr, tpr) from (0, 0) to (1, 1), at most 400 points; ``None``
    when the items are all right or all wrong (the curve is undefined).

    References
    ----------
    [1] T. Fawcett (2006). An introduction to ROC analysis. Pattern Recognition Letters 27(8).

    Examples
    --------
    >>> roc_points([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0])
    [(0.0, 0.0), (0.0, 0.5), (0.5, 0.5), (0.5, 1.0), (1.0, 1.0)]
    """
    from sklearn.metrics import roc_curve

    conf, corr = _finite_pairs(confidence, correct)
    positive = corr >= 0.5
    if positive.all() or not positive.any():
        return None
    fpr, tpr, _ = roc_curve(positive, conf, drop_intermediate=True)
    return _thin(fpr, tpr)


def risk_coverage_points(confidence: ArrayLike, correct: ArrayLike
                         ) -> list[tuple[float, float]] | None:
    r"""Risk–coverage curve: the error rate among the ``k`` most confident answers.

    Sort the items by confidence, highest first; answering the first ``k`` of
    ``n`` covers :math:`k/n` of the items with selective risk

    .. math:: \mathrm{risk}(k) = \frac1k \sum_{j \le k} \big(1 - y_{(j)}\big), \qquad k = 1..n

    whose mean over ``k`` is :func:`confide.metrics.aurc_loss` (same tie
    handling: tied items share their group's mean correctness).

    Parameters
    ----------
    confidence : array of shape (n,)
        NaN rows are left out.
    correct : array of shape (n,), values in [0, 1]

    Returns
    -------
    list of (coverage, risk), coverage increasing to 1, at most 400 points;
    ``None`` when no item is left.

    References
    ----------
    [1] R. El-Yaniv, Y. Wiener (2010). On the foundations of noise-free selective
        classification. JMLR 11.

    Examples
    --------
    >>> risk_coverage_points([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0])
    [(0.25, 0.0), (0.5, 0.5), (0.75, 0.33333), (1.0, 0.5)]
    """
    conf, corr = _finite_pairs(confidence, correct)
    if conf.size == 0:
        return None
    risks = _selective_risks(conf, corr)
    coverage = np.arange(1, conf.size + 1) / conf.size
    return _thin(coverage, risks)


@dataclass
class ReliabilityBin:
    """One bin of a reliability diagram: ``[low, high)`` of calibrated confidence."""

    low: float
    high: float
    count: int
    mean_confidence: float
    accuracy: float


def reliability_bins(probability: ArrayLike, correct: ArrayLike, *, n_bins: int = 10
                     ) -> list[ReliabilityBin]:
    r"""Reliability diagram: per equal-width bin of probability, mean probability and accuracy.

    Bin :math:`B_b = [b/M, (b+1)/M)` (the last bin closed) holds the items whose
    probability falls in it;

    .. math:: \mathrm{conf}(B_b) = \frac{1}{|B_b|}\sum_{i \in B_b} p_i, \qquad
              \mathrm{acc}(B_b) = \frac{1}{|B_b|}\sum_{i \in B_b} y_i

    A calibrated confidence lies on the diagonal. The same binning gives
    :func:`confide.metrics.calibration_error`.

    Parameters
    ----------
    probability : array of shape (n,), values in [0, 1]
    correct : array of shape (n,), values in [0, 1]
    n_bins : int >= 1, default 10

    Returns
    -------
    list of the non-empty bins, in increasing probability.

    References
    ----------
    [1] M. H. DeGroot, S. E. Fienberg (1983). The comparison and evaluation of
        forecasters. The Statistician 32.
    [2] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger (2017). On calibration of
        modern neural networks. ICML.

    Examples
    --------
    >>> [(b.count, b.mean_confidence, b.accuracy)
    ...  for b in reliability_bins([0.1, 0.15, 0.9, 1.0], [0, 1, 1, 1], n_bins=2)]
    [(2, 0.125, 0.5), (2, 0.95, 1.0)]
    """
    p, y = _finite_pairs(probability, correct)
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise InvalidInputError(f"must be an integer >= 1, got {n_bins!r}", field="n_bins")
    if ((p < 0) | (p > 1)).any():
        raise InvalidInputError("probabilities must lie in [0, 1]", field="probability")
    bins = np.minimum((p * n_bins).astype(int), n_bins - 1)
    out = []
    for b in range(n_bins):
        inside = bins == b
        if inside.any():
            out.append(ReliabilityBin(b / n_bins, (b + 1) / n_bins, int(inside.sum()),
                                      float(p[inside].mean()), float(y[inside].mean())))
    return out


# --------------------------------------------------------------------------- samples


def sample_groups(samples: Sequence[Generation], greedy_text: str | None = None, *,
                  judge: Any = None, item: Any = None) -> list[dict[str, Any]]:
    """Sampled answers grouped into clusters of equal meaning.

    With ``judge`` (a :class:`confide.judges.Judge`), its clusters of the
    samples, the greedy answer placed among them (Kuhn et al., 2023);
    without, equal text after
    :func:`confide.grading.normalize_answer`. Groups are ordered by size
    (largest first; ties by first appearance). Each gives its most frequent raw
    text, its size, up to five distinct raw variants and whether the greedy
    answer belongs to it.

    Examples
    --------
    >>> from confide.records import Generation
    >>> groups = sample_groups([Generation("Paris."), Generation("paris"), Generation("Lyon")],
    ...                        "Paris")
    >>> [(g["text"], g["n"], g["greedy"]) for g in groups]
    [('Paris.', 2, True), ('Lyon', 1, False)]
    """
    texts = [s.text for s in samples]
    if judge is not None:
        clustered = judge.clusters(texts, item)
        keys: list[Any] = [int(x) for x in clustered]
        greedy_key: Any = (judge.place(greedy_text, texts, item, clustered)
                           if greedy_text is not None else None)
    else:
        keys = [normalize_answer(t) for t in texts]
        greedy_key = normalize_answer(greedy_text) if greedy_text is not None else None
    groups: dict[Any, dict[str, int]] = {}
    for key, text in zip(keys, texts, strict=True):
        variants = groups.setdefault(key, {})
        variants[text] = variants.get(text, 0) + 1
    ordered = sorted(groups.items(), key=lambda kv: -sum(kv[1].values()))  # stable
    return [{"text": max(variants, key=lambda t: variants[t]), "n": sum(variants.values()),
             "variants": list(variants)[:5], "greedy": key == greedy_key}
            for key, variants in ordered]


def _cluster_judge(config: dict[str, Any], grader: str) -> tuple[Any, str]:
    """The run's equivalence judge when it decides without a model, and a sentence saying
    how the samples are grouped."""
    fallback = "normalised exact text (lower case, no punctuation or articles)"
    try:
        from confide.judges import JUDGES, default_judge, make_judge
    except ImportError:  # a build of confide without judges
        return None, f"Samples are grouped by {fallback}."
    name = str(config.get("judge") or default_judge(grader))
    if name not in JUDGES:
        return None, f"Samples are grouped by {fallback}: the run's judge {name!r} is unknown."
    if not JUDGES[name].by_key:
        return None, (f"Samples are grouped by {fallback}: the run's {name} judge needs a "
                      "model, which the report does not load.")
    try:
        judge = make_judge(name, **dict(config.get("judge_options") or {}))
    except ConfideError as exc:
        return None, f"Samples are grouped by {fallback}: {exc}"
    return judge, f"Samples are grouped into clusters of equal meaning by the run's {name} judge."


# --------------------------------------------------------------------------- paired runs


def paired_run_difference(metric: str, conf_a: ArrayLike, correct_a: ArrayLike,
                          conf_b: ArrayLike, correct_b: ArrayLike, *, n_resamples: int = 1000,
                          level: float = 0.95, seed: int = 0) -> dict[str, float]:
    r"""Paired bootstrap of a metric's difference between two runs on the same items.

    Row ``i`` of both runs is the same item (answered by different models or
    settings). Each resample draws item indices :math:`I_r` once and evaluates
    both runs on them, so item difficulty cancels:

    .. math:: \Delta = m(c^A, y^A) - m(c^B, y^B), \qquad
              \Delta^*_r = m(c^A[I_r], y^A[I_r]) - m(c^B[I_r], y^B[I_r])

    The interval is the percentile interval of :math:`\Delta^*` over the
    resamples where both are defined; the two-sided p-value is
    :math:`\min\{1, 2\,\#\{r: \Delta^*_r \le 0\}/B'\}` when :math:`\Delta > 0`
    (``>= 0`` when :math:`\Delta < 0`; 1 when :math:`\Delta = 0`).

    Parameters
    ----------
    metric : str
        A name in :data:`confide.metrics.METRICS` (``"accuracy"``, ``"auroc"``, …).
    conf_a, correct_a, conf_b, correct_b : arrays of shape (n,)
        Aligned by item; finite.
    n_resamples : int >= 1, default 1000
    level : float in (0, 1), default 0.95
    seed : int, default 0

    Returns
    -------
    dict with ``diff`` (A − B, in the metric's own direction), ``low``, ``high``,
    ``p_value`` and ``n``; NaN entries where undefined.

    References
    ----------
    [1] B. Efron, R. Tibshirani (1993). An Introduction to the Bootstrap,
        ch. 15–16. Chapman & Hall.

    Examples
    --------
    >>> d = paired_run_difference("accuracy", [1, 1, 1, 1], [1, 1, 0, 0],
    ...                           [1, 1, 1, 1], [1, 0, 0, 0], n_resamples=50)
    >>> d["diff"], d["n"]
    (0.25, 4.0)
    """
    helper = METRICS[metric].helper
    arrays = [np.asarray(a, dtype=float).ravel() for a in (conf_a, correct_a, conf_b, correct_b)]
    names = ("conf_a", "correct_a", "conf_b", "correct_b")
    for name, arr in zip(names, arrays, strict=True):
        if arr.shape != arrays[0].shape:
            raise InvalidInputError(f"has {arr.size} values, conf_a has {arrays[0].size}",
                                    field=name)
        if not np.isfinite(arr).all():
            raise InvalidInputError("must be finite (drop NaN rows first)", field=name)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise InvalidInputError(f"must be an integer >= 1, got {n_resamples!r}",
                                field="n_resamples")
    if not 0 < level < 1:
        raise InvalidInputError(f"must lie in (0, 1), got {level!r}", field="level")
    ca, ya, cb, yb = arrays
    n = ca.size
    nan = math.nan
    if n == 0:
        return {"diff": nan, "low": nan, "high": nan, "p_value": nan, "n": 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        diff = helper(ca, ya) - helper(cb, yb)
        draws = np.array([helper(ca[idx], ya[idx]) - helper(cb[idx], yb[idx])
                          for idx in _resample_indices(n, n_resamples, seed)])
    draws = draws[~np.isnan(draws)]
    if math.isnan(diff) or draws.size == 0:
        return {"diff": float(diff), "low": nan, "high": nan, "p_value": nan, "n": float(n)}
    alpha = 1 - level
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    if diff > 0:
        p = min(1.0, 2 * float(np.mean(draws <= 0)))
    elif diff < 0:
        p = min(1.0, 2 * float(np.mean(draws >= 0)))
    else:
        p = 1.0
    return {"diff": float(diff), "low": float(low), "high": float(high), "p_value": p,
            "n": float(n)}


# --------------------------------------------------------------------------- one run


@dataclass
class ScorerView:
    """Everything the report shows about one scorer in one run."""

    name: str
    summary: str
    baseline: bool
    n: int
    n_nan: int
    metrics: dict[str, tuple[float, float, float]]
    nan_reasons: dict[str, int]
    ece: float = math.nan
    roc: list[tuple[float, float]] | None = None
    risk_coverage: list[tuple[float, float]] | None = None
    reliability: list[ReliabilityBin] | None = None
    reliability_note: str = ""
    length: dict[str, Any] | None = None
    vs_best: dict[str, Any] | None = None  # paired AUROC difference to the best scorer


@dataclass
class GraderAgreement:
    """How far several graders of one run agree, on answers and on scorer rankings."""

    graders: list[str]
    accuracy: dict[str, float]
    pairs: list[dict[str, Any]]           # g, h, n, agreement, kappa, tau
    auroc: dict[str, dict[str, float]]    # grader -> scorer -> AUROC


@dataclass
class RunView:
    """One run as the report shows it."""

    name: str
    path: str
    model: str
    task: str
    grader: str
    table: EvalTable
    scorers: list[ScorerView]
    skipped: dict[str, str]
    config: dict[str, Any]
    length_note: str = ""
    correct_length_rho: float = math.nan
    length_strata: list[dict[str, Any]] = field(default_factory=list)
    graders: GraderAgreement | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    entropy_scale: float = 1.0
    cluster_note: str = ""
    notes: list[str] = field(default_factory=list)


def _scorer_summary(name: str) -> str:
    from confide.scorers import SCORERS

    return SCORERS[name].summary if name in SCORERS else ""


def _question(record: Record) -> str:
    prompt = record.item.prompt
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
    return (users or [m.get("content", "") for m in prompt] or [""])[-1]


def _num(x: Any, digits: int = 4) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else round(x, digits)


def _tokens(gen: Generation) -> list[list[Any]] | None:
    if not gen.tokens:
        return None
    out = []
    for t, piece in enumerate(gen.tokens):
        lp = None if gen.token_logprobs is None else _num(gen.token_logprobs[t])
        ent = None if gen.token_entropies is None else _num(gen.token_entropies[t])
        alts: list[list[Any]] = []
        if gen.top_tokens is not None and gen.top_logprobs is not None and t < len(gen.top_tokens):
            alts = [[alt, _num(gen.top_logprobs[t][j])]
                    for j, alt in enumerate(gen.top_tokens[t][:5])]
        out.append([piece, lp, ent, alts])
    return out


def _explorer_item(position: int, record: Record, scorers: list[str],
                   judge: Any = None) -> dict[str, Any]:
    return {
        "i": position, "id": record.item.id, "q": _question(record), "a": record.greedy.text,
        "refs": list(record.item.references), "g": {k: _num(v) for k, v in record.grades.items()},
        "s": {name: _num(record.scores.get(name), 6) for name in scorers},
        "e": {k: v for k, v in record.score_errors.items() if k in scorers},
        "len": record.greedy.n_tokens, "fin": record.greedy.finish_reason,
        "tok": _tokens(record.greedy), "ns": len(record.samples),
        "cl": (sample_groups(record.samples, record.greedy.text, judge=judge, item=record.item)
               if record.samples else []),
    }


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


def _calibration(view: ScorerView, conf: np.ndarray, correct: np.ndarray, seed: int) -> None:
    if conf.size < MIN_CALIBRATION_ITEMS:
        view.reliability_note = f"needs at least {MIN_CALIBRATION_ITEMS} graded items"
        return
    if correct.min() == correct.max():
        view.reliability_note = "needs both right and wrong answers"
        return
    try:
        prob = crossfit_probabilities(conf, correct, method="isotonic",
                                      n_folds=min(5, conf.size), seed=seed)
    except ConfideError as exc:
        view.reliability_note = str(exc)
        return
    view.reliability = reliability_bins(prob, correct)
    view.ece = _quietly(calibration_error, prob, correct)


def _length_audit(view: ScorerView, conf: np.ndarray, correct: np.ndarray,
                  lengths: np.ndarray) -> None:
    if conf.size < 4 or correct.min() == correct.max():
        return
    rho = _quietly(length_correlations, conf, correct, lengths)["conf_length_spearman"]
    strat = _quietly(stratified_auroc, conf, correct, lengths)
    from confide.metrics import _auroc

    lead = vanishes = None
    if not view.baseline:
        lead = bool(_quietly(_auroc, conf, correct) > _quietly(_auroc, -lengths, correct))
        vanishes = _quietly(lead_disappears, conf, -lengths, correct, lengths)
    view.length = {"rho": rho, "stratified_auroc": strat, "lead": lead,
                   "lead_vanishes": vanishes}


def _grader_agreement(records: list[Record], scorers: list[str]) -> GraderAgreement | None:
    from sklearn.metrics import cohen_kappa_score

    from confide.metrics import _auroc

    graders = list(dict.fromkeys(g for r in records for g in r.grades))
    if len(graders) < 2:
        return None
    accuracy, auroc = {}, {}
    for g in graders:
        rows = [r for r in records if g in r.grades]
        y = np.array([r.grades[g] >= 0.5 for r in rows], dtype=float)
        accuracy[g] = float(y.mean()) if y.size else math.nan
        auroc[g] = {}
        for s in scorers:
            conf, corr = _finite_pairs([r.scores.get(s, math.nan) for r in rows], y)
            auroc[g][s] = _quietly(_auroc, conf, corr) if conf.size else math.nan
    taus = _quietly(ranking_agreement, auroc)
    pairs = []
    for a_i, g in enumerate(graders):
        for h in graders[a_i + 1:]:
            both = [r for r in records if g in r.grades and h in r.grades]
            ya = np.array([r.grades[g] >= 0.5 for r in both], dtype=int)
            yb = np.array([r.grades[h] >= 0.5 for r in both], dtype=int)
            agree = float((ya == yb).mean()) if both else math.nan
            kappa = math.nan
            if both and len(set(ya) | set(yb)) > 1:
                kappa = float(_quietly(cohen_kappa_score, ya, yb))
            pairs.append({"g": g, "h": h, "n": len(both), "agreement": agree, "kappa": kappa,
                          "tau": taus.get((g, h), math.nan)})
    return GraderAgreement(graders, accuracy, pairs, auroc)


def run_view(records: list[Record], *, name: str, path: str = "", config: dict[str, Any] | None = None,
             grader: str | None = None, scorers: list[str] | None = None,
             skipped: dict[str, str] | None = None, n_resamples: int = 1000, seed: int = 0,
             level: float = 0.95) -> RunView:
    """Compute every panel of the report for one run's records.

    ``scorers`` defaults to every scorer found in the records. The ``length``
    baseline (negated answer length in tokens) is added when the run did not
    store it, so the table always shows how far length alone gets.
    """
    config = dict(config or {})
    if grader is None:
        grader = str(config.get("grader") or _first_grader(records))
    names = list(scorers) if scorers else list(dict.fromkeys(s for r in records for s in r.scores))
    notes = []
    if LENGTH_BASELINE not in names:
        records = [replace(r, scores={**r.scores, LENGTH_BASELINE: -float(r.greedy.n_tokens)})
                   for r in records]
        names.append(LENGTH_BASELINE)
        notes.append("The length baseline (−answer length in tokens) was computed for the "
                     "report; the run did not store it.")
    table = evaluate_records(records, grader=grader, scorers=names, metrics=SUMMARY_METRICS,
                             n_resamples=n_resamples, level=level, seed=seed)
    graded = [r for r in records if grader in r.grades]
    correct = np.array([r.grades[grader] >= 0.5 for r in graded], dtype=float)
    lengths = np.array([r.greedy.n_tokens for r in graded], dtype=float)
    views = []
    for row in table.rows:
        view = ScorerView(row.scorer, _scorer_summary(row.scorer), row.scorer == LENGTH_BASELINE,
                          row.n, row.n_nan, row.metrics, row.nan_reasons,
                          vs_best=getattr(row, "vs_best", None))
        conf = np.array([r.scores.get(row.scorer, math.nan) for r in graded], dtype=float)
        keep = ~np.isnan(conf)
        view.roc = roc_points(conf[keep], correct[keep])
        view.risk_coverage = risk_coverage_points(conf[keep], correct[keep])
        _calibration(view, conf[keep], correct[keep], seed)
        _length_audit(view, conf[keep], correct[keep], lengths[keep])
        views.append(view)
    views.sort(key=lambda v: -v.metrics["auroc"][0] if not math.isnan(v.metrics["auroc"][0])
               else math.inf)  # stable: NaN rows last, in their order
    run = RunView(name=name, path=path, model=str(config.get("model", "")),
                  task=_task_name(config), grader=grader, table=table, scorers=views,
                  skipped=dict(skipped or {}), config=config, notes=notes)
    _length_panel(run, correct, lengths)
    run.graders = _grader_agreement(records, names)
    judge, run.cluster_note = _cluster_judge(config, grader)
    run.items = [_explorer_item(i, r, names, judge) for i, r in enumerate(records)]
    entropies = [t[2] for it in run.items for t in (it["tok"] or []) if t[2] is not None]
    run.entropy_scale = float(np.quantile(entropies, 0.95)) if entropies else 1.0
    run.entropy_scale = max(run.entropy_scale, 1e-6)
    if any(r.samples for r in records):
        run.notes.append(run.cluster_note)
    return run


def _length_panel(run: RunView, correct: np.ndarray, lengths: np.ndarray) -> None:
    if correct.size < 4:
        run.length_note = "needs at least 4 graded items"
        return
    if correct.min() == correct.max():
        run.length_note = "needs both right and wrong answers"
    else:
        rho = _quietly(length_correlations, correct, correct, lengths)
        run.correct_length_rho = rho["correct_length_spearman"]
    strata = _equal_mass_bins(lengths, 4)
    for s in np.unique(strata):
        inside = strata == s
        run.length_strata.append({"low": int(lengths[inside].min()),
                                  "high": int(lengths[inside].max()), "n": int(inside.sum()),
                                  "accuracy": float(correct[inside].mean())})


def _first_grader(records: list[Record]) -> str:
    for r in records:
        for g in r.grades:
            return g
    return "contains"


def _task_name(config: dict[str, Any]) -> str:
    task = config.get("task", "")
    return str(task.get("name", "")) if isinstance(task, dict) else str(task)


# --------------------------------------------------------------------------- two runs


@dataclass
class PairedComparison:
    """Paired differences (run A − run B) on the items both runs hold."""

    a: str
    b: str
    n_shared: int
    rows: list[dict[str, Any]]   # scorer, metric, higher_is_better, diff, low, high, p_value, n
    note: str = ""


def _confidences(records: list[Record], name: str) -> np.ndarray:
    if name == LENGTH_BASELINE:
        return np.array([r.scores.get(name, -float(r.greedy.n_tokens)) for r in records],
                        dtype=float)
    return np.array([r.scores.get(name, math.nan) for r in records], dtype=float)


def paired_comparison(a: RunView, records_a: list[Record], b: RunView, records_b: list[Record],
                      *, metrics: Sequence[str] = ("auroc", "prr"), n_resamples: int = 1000,
                      level: float = 0.95, seed: int = 0) -> PairedComparison:
    """Accuracy and each shared scorer's metrics, A − B, paired on the shared item ids.

    Each run is graded by its own grader; a scorer's rows leave out the items
    where either run has NaN confidence.
    """
    by_id_b = {r.item.id: r for r in records_b}
    pairs = [(r, by_id_b[r.item.id]) for r in records_a
             if r.item.id in by_id_b and a.grader in r.grades and b.grader in by_id_b[r.item.id].grades]
    out = PairedComparison(a.name, b.name, len(pairs), [])
    if len(pairs) < 2:
        out.note = ("The runs share no graded items, so no paired differences."
                    if not pairs else "The runs share one graded item: too few to pair.")
        return out
    if a.grader != b.grader:
        out.note = f"Graded differently: {a.name} by {a.grader}, {b.name} by {b.grader}."
    ra, rb = [p[0] for p in pairs], [p[1] for p in pairs]
    ya = np.array([r.grades[a.grader] >= 0.5 for r in ra], dtype=float)
    yb = np.array([r.grades[b.grader] >= 0.5 for r in rb], dtype=float)
    zeros = np.zeros(len(pairs))
    acc = paired_run_difference("accuracy", zeros, ya, zeros, yb, n_resamples=n_resamples,
                                level=level, seed=seed)
    out.rows.append({"scorer": "—", "metric": "accuracy", "higher_is_better": True, **acc})
    shared = [s.name for s in a.scorers if s.name in {t.name for t in b.scorers}]
    for name in shared:
        ca, cb = _confidences(ra, name), _confidences(rb, name)
        keep = ~(np.isnan(ca) | np.isnan(cb))
        for m in metrics:
            d = paired_run_difference(m, ca[keep], ya[keep], cb[keep], yb[keep],
                                      n_resamples=n_resamples, level=level, seed=seed)
            out.rows.append({"scorer": name, "metric": m,
                             "higher_is_better": METRICS[m].higher_is_better, **d})
    return out
