r"""What the report shows about stored records: the run's evaluation plus curve points and
grouped samples, no HTML.

Every number in the report comes from one :class:`~confide.evaluation.table.EvalTable`
(:func:`confide.evaluation.table.evaluate_records`, the same call as ``confide eval``)
and, for several runs, :func:`confide.evaluation.table.compare_records`; this module
adds only what is drawn rather than measured:

- :func:`roc_points`: the ROC curve of a confidence as a detector of correct answers.
- :func:`risk_coverage_points`: selective risk when answering the most confident
  fraction of the items (the curve whose mean is AURC).
- :func:`sample_groups`: sampled answers grouped by meaning or normalised text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from confide.core.errors import ConfideError, InvalidInputError
from confide.core.jsonsafe import finite_or_none
from confide.core.records import Generation, Record
from confide.equivalence.judges import JUDGES, default_judge, make_judge
from confide.equivalence.summary import summarize
from confide.evaluation.table import (
    DEFAULT_METRICS,
    EvalTable,
    RunComparison,
    ScorerRow,
    compare_records,
    evaluate_records,
    scorer_column,
)
from confide.grading import normalize_answer
from confide.metrics import ReliabilityDiagram, risk_coverage_curve
from confide.scorers import SCORERS
from confide.scorers.claims import DEFAULT_CLAIM_SCORERS

__all__ = ["RunView", "ScorerView", "risk_coverage_points", "roc_points", "run_comparison",
           "run_view", "sample_groups"]

#: Metrics of the summary table, in column order: those of ``confide eval``.
SUMMARY_METRICS = DEFAULT_METRICS
#: Most points drawn per curve; longer curves are thinned evenly (end points kept).
MAX_CURVE_POINTS = 400


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
    return _thin(*risk_coverage_curve(conf, corr))


# --------------------------------------------------------------------------- samples


def sample_groups(samples: Sequence[Generation], greedy_text: str | None = None, *,
                  judge: Any = None, item: Any = None) -> list[dict[str, Any]]:
    """Sampled answers grouped into clusters of equal meaning.

    With ``judge`` (a :class:`confide.equivalence.judges.Judge`), its clusters of the
    samples, the greedy answer placed among them (Kuhn et al., 2023);
    without, equal text after
    :func:`confide.grading.normalize_answer`. Groups are ordered by size
    (largest first; ties by first appearance). Each gives its most frequent raw
    text, its size, up to five distinct raw variants and whether the greedy
    answer belongs to it.

    Examples
    --------
    >>> from confide.core.records import Generation
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


# --------------------------------------------------------------------------- one run


@dataclass
class ScorerView:
    """One scorer in one run: its evaluation row and the curves drawn from its values."""

    row: ScorerRow
    summary: str
    roc: list[tuple[float, float]] | None = None
    risk_coverage: list[tuple[float, float]] | None = None

    @property
    def name(self) -> str:
        return self.row.scorer

    @property
    def baseline(self) -> bool:
        return self.row.baseline

    @property
    def n(self) -> int:
        return self.row.n

    @property
    def n_nan(self) -> int:
        return self.row.n_nan

    @property
    def metrics(self) -> dict[str, tuple[float, float, float]]:
        return self.row.metrics

    @property
    def nan_reasons(self) -> dict[str, int]:
        return self.row.nan_reasons

    @property
    def vs_best(self) -> dict[str, Any] | None:
        return self.row.vs_best

    @property
    def coverage(self) -> float:
        return self.row.coverage

    @property
    def ece(self) -> float:
        return self.row.calibrated.ece[0]

    @property
    def reliability(self) -> ReliabilityDiagram | None:
        return self.row.calibrated.reliability

    @property
    def reliability_note(self) -> str:
        return self.row.calibrated.note

    @property
    def length(self) -> dict[str, Any] | None:
        """The length audit, or None when it is undefined (too few items, one class)."""
        audit = self.row.audit
        if math.isnan(audit.get("length_spearman", math.nan)) and \
                math.isnan(audit.get("stratified_auroc", math.nan)):
            return None
        return {"rho": audit["length_spearman"], "stratified_auroc": audit["stratified_auroc"],
                "lead": audit.get("lead"), "lead_vanishes": audit.get("lead_vanishes")}


@dataclass
class RunView:
    """One run as the report shows it: its evaluation, curves and item explorer."""

    name: str
    path: str
    model: str
    task: str
    grader: str
    table: EvalTable
    scorers: list[ScorerView]
    skipped: dict[str, str]
    config: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)
    entropy_scale: float = 1.0
    cluster_note: str = ""
    notes: list[str] = field(default_factory=list)
    claim_scorer: str = ""                         # long answers: the claims' colour
    claim_range: tuple[float, float] = (0.0, 1.0)  # its values mapped to red..green


def _scorer_summary(name: str) -> str:
    return SCORERS[name].summary if name in SCORERS else ""


def _num(x: Any, digits: int = 4) -> float | None:
    value = finite_or_none(x)
    return None if value is None else round(value, digits)


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
        "i": position, "id": record.item.id, "q": record.item.question, "a": record.greedy.text,
        "refs": list(record.item.references), "g": {k: _num(v) for k, v in record.grades.items()},
        "s": {name: _num(record.scores.get(name), 6) for name in scorers},
        "e": {k: v for k, v in record.score_errors.items() if k in scorers},
        "len": record.greedy.n_tokens, "fin": record.greedy.finish_reason,
        "tok": _tokens(record.greedy), "ns": len(record.samples),
        "cl": (sample_groups(record.samples, record.greedy.text, judge=judge, item=record.item)
               if record.samples else []),
        "claims": None if record.claims is None else [
            {"s": c.start, "e": c.end, "t": c.text,
             "c": {k: _num(v, 6) for k, v in c.scores.items()}, "x": dict(c.score_errors),
             "g": {k: _num(v) for k, v in c.grades.items()}} for c in record.claims],
        "sm": (summarize([s.text for s in record.samples], judge, item=record.item).text
               if len(record.samples) >= 2 else None),
    }


def _claim_colour(records: list[Record]) -> tuple[str, tuple[float, float]]:
    """The claim scorer that colours the claims (the first registered default one the
    records hold) and the range of its values mapped onto the colour scale."""
    held = {s for r in records for c in (r.claims or []) for s in c.scores}
    name = next((s for s in DEFAULT_CLAIM_SCORERS if s in held), next(iter(sorted(held)), ""))
    if not name or (name in SCORERS and SCORERS[name].probability):
        return name, (0.0, 1.0)
    values = [c.scores[name] for r in records for c in (r.claims or [])
              if not math.isnan(c.scores.get(name, math.nan))]
    return name, ((min(values), max(values)) if values else (0.0, 1.0))


def run_view(records: list[Record], *, name: str, path: str = "",
             config: dict[str, Any] | None = None, grader: str | None = None,
             scorers: list[str] | None = None, skipped: dict[str, str] | None = None,
             n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> RunView:
    """Every panel of the report for one run's records.

    The numbers are :func:`confide.evaluation.table.evaluate_records` with the
    arguments of ``confide eval`` (its default metrics, the run's seed), so the
    report and ``confide eval --json`` agree. ``scorers`` defaults to every
    scorer found in the records; the ``length`` baseline is always added.
    """
    config = dict(config or {})
    if grader is None:
        grader = str(config.get("grader") or _first_grader(records))
    names = list(scorers) if scorers else list(dict.fromkeys(s for r in records for s in r.scores))
    table = evaluate_records(records, grader=grader, scorers=names, metrics=SUMMARY_METRICS,
                             n_resamples=n_resamples, level=level, seed=seed)
    graded = [r for r in records if grader in r.grades]
    correct = np.array([r.grades[grader] >= 0.5 for r in graded], dtype=float)
    views = []
    for row in table.rows:
        view = ScorerView(row, _scorer_summary(row.scorer))
        conf = scorer_column(graded, row.scorer)
        view.roc = roc_points(conf, correct)
        view.risk_coverage = risk_coverage_points(conf, correct)
        views.append(view)
    views.sort(key=lambda v: -v.metrics["auroc"][0] if not math.isnan(v.metrics["auroc"][0])
               else math.inf)  # stable: NaN rows last, in their order
    run = RunView(name=name, path=path, model=str(config.get("model", "")),
                  task=_task_name(config), grader=grader, table=table, scorers=views,
                  skipped=dict(skipped or {}), config=config, notes=list(table.notes))
    judge, run.cluster_note = _cluster_judge(config, grader)
    shown = [row.scorer for row in table.rows]
    run.items = [_explorer_item(i, r, shown, judge) for i, r in enumerate(records)]
    entropies = [t[2] for it in run.items for t in (it["tok"] or []) if t[2] is not None]
    run.entropy_scale = float(np.quantile(entropies, 0.95)) if entropies else 1.0
    run.entropy_scale = max(run.entropy_scale, 1e-6)
    run.claim_scorer, run.claim_range = _claim_colour(records)
    if any(r.samples for r in records):
        run.notes.append(run.cluster_note)
    return run


def _first_grader(records: list[Record]) -> str:
    for r in records:
        for g in r.grades:
            return g
    return "contains"


def _task_name(config: dict[str, Any]) -> str:
    task = config.get("task", "")
    return str(task.get("name", "")) if isinstance(task, dict) else str(task)


# --------------------------------------------------------------------------- two runs


def run_comparison(a: RunView, records_a: list[Record], b: RunView, records_b: list[Record],
                   *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
                   ) -> RunComparison:
    """Paired differences A − B of accuracy and each shared scorer's AUROC and PRR
    (:func:`confide.evaluation.table.compare_records`)."""
    shared = [s.name for s in a.scorers if s.name in {t.name for t in b.scorers}]
    return compare_records(records_a, records_b, grader_a=a.grader, grader_b=b.grader,
                           scorers=shared, names=(a.name, b.name), metrics=("auroc", "prr"),
                           n_resamples=n_resamples, level=level, seed=seed)
