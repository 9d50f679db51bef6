"""From stored records to the evaluation: every number that `confide eval`, `confide
compare`, the report and the API show about a run, computed once, here.

Reads only records, so it runs on a stored run without the model. Correctness
is the grade, counted as correct at >= 0.5 (continuous grades too). Items whose
confidence is NaN are left out of that scorer's row and counted in it, with
their reasons.

Per scorer: each metric with a seeded bootstrap interval on the items it
scored, and its coverage (scored / graded). Comparisons *across* scorers (the
best scorer, each one's paired difference from it) are made only on the items
where every compared scorer has a value, so a scorer cannot lead by abstaining
on hard items; a scorer with values on fewer than :data:`MIN_COVERAGE` of the
graded items is left out of the comparison (it would shrink the shared items
to its few) and the table says so. The best scorer is chosen on the same items it is
then compared on, so the p-values against it are post-selection (:data:`POST_SELECTION`
says exactly what they mean; the table carries it as a note). Also per scorer:
calibration twice:
``calibrated`` (raw scores turned into probabilities by cross-fitted isotonic
regression, :func:`confide.metrics.crossfit_probabilities`, so no item is
calibrated on its own label) and, for a scorer whose values are probabilities of
being correct (:attr:`~confide.scorers.base.ScorerSpec.probability`: P(True),
verbalized confidence, a fitted P(correct); :func:`gives_probabilities`),
``raw_calibration`` of those values as they are (Kadavath et al., 2022; Tian et
al., 2023): ECE, Brier score and the reliability diagram of each. A score that
merely lies in [0, 1] (``lexical_similarity``, ``probability_margin``,
``semantic_density``...) gets none: its ECE would measure a scale, not a belief. The length
baseline (:func:`confide.scorers.whitebox.length`) is in every table. A table with an
ensemble's total, aleatoric and epistemic scorers (:data:`confide.scorers.ensemble.SPLITS`)
carries a note with the mean of each part, showing total = aleatoric + epistemic.

The audit follows Santilli et al. (2025): Spearman correlation of each
confidence with answer length, AUROC within length-quantile strata next to the
plain AUROC, and a flag when a scorer's lead over the ``length`` baseline
vanishes within strata; with several graders, their agreement on answers
(Cohen's kappa) and Kendall's tau between the scorer rankings they induce.

:func:`compare_records` pairs two runs on their shared items (``confide
compare`` and the comparison report).
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from confide.core.errors import InvalidInputError
from confide.core.frames import data_frame, scorer_rows
from confide.core.jsonsafe import json_safe
from confide.core.records import Record
from confide.evaluation.notebook import html_table
from confide.metrics import (
    METRICS,
    ReliabilityDiagram,
    UndefinedMetricWarning,
    auroc_score,
    bootstrap_interval,
    crossfit_probabilities,
    paired_bootstrap,
    reliability_diagram,
)
from confide.metrics.core import equal_mass_bins
from confide.metrics.length_audit import (
    lead_disappears,
    length_correlations,
    ranking_agreement,
    stratified_auroc,
)
from confide.scorers import SCORERS, run_scorer
from confide.scorers.ensemble import SPLITS

__all__ = ["DEFAULT_METRICS", "LENGTH_BASELINE", "MIN_COVERAGE", "POST_SELECTION",
           "Calibration", "Comparison",
           "EvalTable", "GraderAgreement",
           "RunComparison", "ScorerRow", "compare_records", "evaluate_records",
           "gives_probabilities", "scorer_column", "scorer_order"]

#: Metrics of `confide eval`, the report and the API unless asked otherwise.
DEFAULT_METRICS = ("auroc", "prr", "aurc")
LENGTH_BASELINE = "length"
#: Equal-length strata of answer length for the length audit.
N_STRATA = 4
#: Scorers with values on fewer than this share of the graded items are left out of the
#: comparison across scorers.
MIN_COVERAGE = 0.5

#: What the p-values against the best scorer mean, said in every table that has them.
#: Chosen over a split (select on half the items, test on the other half): a split halves
#: the items of both steps, at the 100 to 500 items of a run most intervals would then
#: span zero, and every published figure would change; the point estimates and intervals
#: of Δ AUROC stay what they are, only the reading of the p-value is qualified.
POST_SELECTION = (
    "Δ AUROC vs best: the best scorer is the one with the highest AUROC on these same "
    "{n} items, chosen after seeing them; each p-value is the paired bootstrap's two-sided "
    "p for 'this scorer's AUROC equals the best's' on those items, computed as if the "
    "best had been named in advance. Choosing the best first makes the gaps larger and "
    "the p-values smaller than a test of a pre-named pair would give (the winner's "
    "curse): read them as a description of the gap, not as proof that the best scorer "
    "is better; confirm a lead on other items or another run.")

Interval = tuple[float, float, float]
_NAN_INTERVAL: Interval = (math.nan, math.nan, math.nan)


@dataclass
class Calibration:
    """Calibration of one scorer's probabilities: ECE and Brier score with bootstrap
    intervals, and the reliability diagram (equal-width bins); ``note`` says why it is
    missing (then ``reliability`` is None and the figures NaN)."""

    ece: Interval = _NAN_INTERVAL
    brier: Interval = _NAN_INTERVAL
    reliability: ReliabilityDiagram | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"ece": list(self.ece), "brier": list(self.brier), "note": self.note,
                "reliability": None if self.reliability is None else self.reliability.to_dict()}


@dataclass
class ScorerRow:
    """One scorer's figures; ``metrics[name] = (point, low, high)``.

    ``audit`` holds ``length_spearman`` (confidence vs answer length),
    ``stratified_auroc``, ``lead`` (whether it beats the length baseline by
    plain AUROC; None for the baseline itself) and ``lead_vanishes`` (True when
    that lead is gone within length strata). ``common_auroc`` is its AUROC on the
    items every compared scorer has a value for, and ``vs_best`` the paired
    bootstrap of AUROC against the best scorer there (:class:`Comparison`); its
    p-value is post-selection (:data:`POST_SELECTION`).
    ``calibrated``: cross-fitted isotonic
    probabilities; ``raw_calibration``: the values themselves, only when they
    are probabilities.
    """

    scorer: str
    n: int
    n_nan: int
    metrics: dict[str, Interval]
    nan_reasons: dict[str, int] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    vs_best: dict[str, Any] | None = None
    calibrated: Calibration = field(default_factory=Calibration)
    raw_calibration: Calibration | None = None
    common_auroc: float = math.nan

    @property
    def baseline(self) -> bool:
        return self.scorer == LENGTH_BASELINE

    @property
    def coverage(self) -> float:
        """Share of the graded items this scorer has a value for."""
        total = self.n + self.n_nan
        return self.n / total if total else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"scorer": self.scorer, "n": self.n, "n_nan": self.n_nan,
                "coverage": self.coverage, "common_auroc": self.common_auroc,
                "nan_reasons": self.nan_reasons, "audit": self.audit, "vs_best": self.vs_best,
                "calibrated": self.calibrated.to_dict(),
                "raw_calibration": (None if self.raw_calibration is None
                                    else self.raw_calibration.to_dict()),
                **{m: list(vals) for m, vals in self.metrics.items()}}


@dataclass
class GraderAgreement:
    """How far several graders of one run agree, on answers and on scorer rankings."""

    graders: list[str]
    accuracy: dict[str, float]
    pairs: list[dict[str, Any]]           # g, h, n, agreement, kappa, tau
    auroc: dict[str, dict[str, float]]    # grader -> scorer -> AUROC

    def to_dict(self) -> dict[str, Any]:
        return {"graders": self.graders, "accuracy": self.accuracy, "pairs": self.pairs,
                "auroc": self.auroc}


@dataclass
class Comparison:
    """How the scorers of a table were compared: on ``n_common`` items where all of
    ``scorers`` have a value; ``best`` by AUROC there (chosen on the items it is then
    compared on: :data:`POST_SELECTION`); ``left_out`` maps each scorer kept out of the
    comparison to why."""

    n_common: int = 0
    scorers: list[str] = field(default_factory=list)
    best: str | None = None
    left_out: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"n_common": self.n_common, "scorers": self.scorers, "best": self.best,
                "left_out": self.left_out}


@dataclass
class EvalTable:
    """The evaluation of one run under one grader."""

    grader: str
    n_items: int
    n_graded: int
    accuracy: Interval
    rows: list[ScorerRow]
    level: float = 0.95
    correct_length_spearman: float = math.nan
    length_strata: list[dict[str, Any]] = field(default_factory=list)
    length_note: str = ""
    graders: GraderAgreement | None = None
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    comparison: Comparison = field(default_factory=Comparison)

    def row(self, scorer: str) -> ScorerRow:
        return next(r for r in self.rows if r.scorer == scorer)

    def to_pandas(self) -> Any:
        """One row per scorer: ``n``, ``coverage``, each metric with its interval
        (``auroc``, ``auroc_low``, ``auroc_high``, ...), the paired difference to the best
        scorer and the NaN reasons (:func:`confide.core.frames.scorer_rows`). Needs pandas."""
        return data_frame(scorer_rows(self.rows))

    def _repr_html_(self) -> str:
        """The table in a notebook: the run's line, one row per scorer (point [low, high]
        per metric) and the notes."""
        return html_table(self)

    @property
    def grader_agreement(self) -> dict[str, float]:
        """Kendall's tau between the scorer rankings of each pair of graders."""
        if self.graders is None:
            return {}
        return {f"{p['g']} vs {p['h']}": p["tau"] for p in self.graders.pairs}

    def to_dict(self) -> dict[str, Any]:
        return json_safe({
            "grader": self.grader, "n_items": self.n_items, "n_graded": self.n_graded,
            "level": self.level, "accuracy": list(self.accuracy),
            "correct_length_spearman": self.correct_length_spearman,
            "length_strata": self.length_strata, "length_note": self.length_note,
            "grader_agreement": self.grader_agreement,
            "graders": None if self.graders is None else self.graders.to_dict(),
            "notes": self.notes, "options": self.options,
            "comparison": self.comparison.to_dict(),
            "scorers": [r.to_dict() for r in self.rows],
        })


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Undefined figures (one class, constant input) are NaN in the table, shown as "–"."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)  # constant input to Spearman
        return fn(*args, **kwargs)


def scorer_order(config: dict[str, Any], skipped: dict[str, str],
                 records: Sequence[Record]) -> list[str]:
    """The scorers of a run in table order: those configured (less the skipped ones),
    then any other score found in the records (learned models added later)."""
    names = [s for s in config.get("scorers", []) if s not in skipped]
    for r in records:
        names.extend(s for s in r.scores if s not in names)
    return list(dict.fromkeys(names))


def gives_probabilities(name: str) -> bool:
    """Whether the scores named ``name`` are probabilities of being correct: the registered
    scorer's :attr:`~confide.scorers.base.ScorerSpec.probability`, and for a fitted model's
    scores (stored as ``KIND:RUN``, :func:`confide.learned.fitting.fit_run`) its kind's. A name
    that is neither (labels, other tools' scores) is not taken for one.

    >>> gives_probabilities("p_true"), gives_probabilities("probe:run1")
    (True, True)
    >>> gives_probabilities("lexical_similarity"), gives_probabilities("my_score")
    (False, False)
    """
    kind = name if name in SCORERS else name.split(":", 1)[0]
    return kind in SCORERS and SCORERS[kind].probability


def _length_baseline(records: Sequence[Record]) -> tuple[np.ndarray, list[str | None]]:
    """The registered ``length`` scorer on each record (one definition: NaN with its
    reason for an empty answer)."""
    pairs = [run_scorer(SCORERS[LENGTH_BASELINE], r) for r in records]
    return np.array([v for v, _ in pairs], dtype=float), [why for _, why in pairs]


def evaluate_records(records: list[Record], *, grader: str, scorers: list[str] | None = None,
                     metrics: tuple[str, ...] = DEFAULT_METRICS, n_resamples: int = 1000,
                     level: float = 0.95, seed: int = 0, n_strata: int = N_STRATA,
                     metric_options: dict[str, dict[str, Any]] | None = None,
                     compare: bool = True) -> EvalTable:
    """Accuracy and, per scorer, each metric with a seeded bootstrap percentile interval,
    calibration (cross-fitted, and raw for probabilities), the length audit, and
    (``compare``) a paired bootstrap of AUROC against the best scorer.

    ``metric_options`` maps a metric name to its options, e.g.
    ``{"prr": {"max_rejection": 0.3}}``; ``ece``'s ``n_bins`` also sets the bins
    of the calibration blocks.
    """
    options = _resolved_options(metrics, metric_options or {})
    n_bins = int(options.get("ece", {}).get("n_bins", 10))
    graded = [r for r in records if grader in r.grades]
    correct = np.array([r.grades[grader] for r in graded], dtype=float)
    binary = (correct >= 0.5).astype(float)
    lengths = np.array([r.greedy.n_tokens for r in graded], dtype=float)
    accuracy = _interval("accuracy", np.zeros_like(binary), binary, n_resamples, level, seed, {})
    names = list(dict.fromkeys(scorers or scorer_order({}, {}, records)))  # each row once
    if LENGTH_BASELINE not in names:
        names.append(LENGTH_BASELINE)  # in every table, so length-driven leads are visible
    confidences = {n: np.array([r.scores.get(n, math.nan) for r in graded], dtype=float)
                   for n in names}
    errors = {n: [r.score_errors.get(n) for r in graded] for n in names}
    notes = []
    if not any(LENGTH_BASELINE in r.scores for r in records):
        confidences[LENGTH_BASELINE], errors[LENGTH_BASELINE] = _length_baseline(graded)
        notes.append("The length baseline (−answer length in tokens) was computed for the "
                     "evaluation; the run did not store it.")
    rows = []
    for name in names:
        conf = confidences[name]
        keep = ~np.isnan(conf)
        reasons: dict[str, int] = {}
        for why in errors[name]:
            if why:
                reasons[why] = reasons.get(why, 0) + 1
        row = ScorerRow(name, int(keep.sum()), int((~keep).sum()), {}, reasons)
        values, y = conf[keep], binary[keep]
        row.calibrated, probability = _crossfit_calibration(values, y, n_resamples, level,
                                                            seed, n_bins)
        if values.size and gives_probabilities(name) and values.min() >= 0 \
                and values.max() <= 1:
            row.raw_calibration = _calibration(values, y, n_resamples, level, seed, n_bins)
        for m in metrics:
            if METRICS[m].needs_probabilities:
                row.metrics[m] = (_NAN_INTERVAL if probability is None else
                                  _interval(m, probability, y, n_resamples, level, seed,
                                            options.get(m, {})))
            else:
                row.metrics[m] = _interval(m, values, y, n_resamples, level, seed,
                                           options.get(m, {}))
        row.audit = _audit(values, y, lengths[keep], n_strata)
        rows.append(row)
    _flag_length_lead(rows, confidences, binary, lengths, n_strata)
    comparison = (_compare_to_best(rows, confidences, binary, n_resamples, level, seed)
                  if compare else Comparison())
    if any(row.vs_best for row in rows):
        notes.append(POST_SELECTION.format(n=comparison.n_common))
    if undefined := _undefined_note(grader, binary, rows, metrics):
        notes.append(undefined)
    notes.extend(_ensemble_splits(confidences))
    table = EvalTable(grader, len(records), len(graded), accuracy, rows, level,
                      graders=_grader_agreement(graded, names, confidences), notes=notes,
                      options={"metrics": list(metrics), "metric_options": options,
                               "n_resamples": n_resamples, "seed": seed, "n_strata": n_strata,
                               "n_bins": n_bins}, comparison=comparison)
    _length_panel(table, binary, lengths, n_strata)
    return table


def _undefined_note(grader: str, correct: np.ndarray, rows: list[ScorerRow],
                    metrics: Sequence[str]) -> str | None:
    """Why a table's figures are undefined (–) when the grades leave nothing to rank:
    no graded record, or answers all right or all wrong."""
    if correct.size == 0:
        return f"no record has a {grader!r} grade, so there is nothing to evaluate (every " \
               "figure is –)"
    if correct.min() != correct.max():
        return None
    which = "right" if correct[0] else "wrong"
    nan = [m for m in metrics if rows and all(math.isnan(r.metrics[m][0]) for r in rows)]
    what = (f"{', '.join(nan)} {'is' if len(nan) == 1 else 'are'} undefined (–)" if nan
            else "the table cannot tell the scorers apart")
    return (f"all {correct.size} graded answer(s) are {which} (grader {grader!r}): no "
            f"confidence can separate right from wrong answers here, so {what}; evaluate "
            "more items, with both right and wrong answers")


def _ensemble_splits(confidences: dict[str, np.ndarray]) -> list[str]:
    """A note per ensemble split (:data:`confide.scorers.ensemble.SPLITS`) whose three
    scorers the table has: the mean of total, aleatoric and epistemic uncertainty (minus
    each confidence) over the items all three scored, and the largest per-item gap of
    total − (aleatoric + epistemic), so the table shows the sum holds."""
    notes = []
    for names in SPLITS:
        if not all(n in confidences for n in names):
            continue
        parts = -np.vstack([confidences[n] for n in names])
        keep = np.isfinite(parts).all(axis=0)
        if not keep.any():
            continue
        total, aleatoric, epistemic = parts[:, keep]
        gap = float(np.max(np.abs(total - (aleatoric + epistemic))))
        notes.append(
            f"Ensemble split (Malinin & Gales 2021), mean uncertainty in nats over the "
            f"{int(keep.sum())} items all three scored: total {total.mean():.4g} ({names[0]}) "
            f"= aleatoric {aleatoric.mean():.4g} ({names[1]}) + epistemic "
            f"{epistemic.mean():.4g} ({names[2]}); largest per-item |total − (aleatoric + "
            f"epistemic)| {gap:.1e}.")
    return notes


def _resolved_options(metrics: Sequence[str], given: dict[str, dict[str, Any]]
                      ) -> dict[str, dict[str, Any]]:
    """Each metric's options as used: its keyword defaults updated by ``given`` (so a
    table records the cut-offs and bins it was computed with, given or not)."""
    resolved = {}
    for name in metrics:
        spec = METRICS[name]  # unknown names fail early with suggestions
        defaults = {p.name: p.default for p in inspect.signature(spec.fn).parameters.values()
                    if p.kind is p.KEYWORD_ONLY and p.name != "nan_policy"}
        resolved[name] = {**defaults, **given.get(name, {})}
    return resolved


def _calibration(probability: np.ndarray, correct: np.ndarray, n_resamples: int, level: float,
                 seed: int, n_bins: int) -> Calibration:
    return Calibration(
        ece=_interval("ece", probability, correct, n_resamples, level, seed, {"n_bins": n_bins}),
        brier=_interval("brier", probability, correct, n_resamples, level, seed, {}),
        reliability=reliability_diagram(probability, correct, n_bins=n_bins))


def _crossfit_calibration(conf: np.ndarray, correct: np.ndarray, n_resamples: int,
                          level: float, seed: int, n_bins: int
                          ) -> tuple[Calibration, np.ndarray | None]:
    """Calibration of cross-fitted isotonic probabilities, and those probabilities."""
    try:
        probability = crossfit_probabilities(conf, correct, method="isotonic", seed=seed)
    except InvalidInputError as exc:  # too few right or wrong answers: say why
        note = str(exc).removeprefix(f"{exc.field}: ")
        return Calibration(note=note), None
    return _calibration(probability, correct, n_resamples, level, seed, n_bins), probability


def _audit(conf: np.ndarray, correct: np.ndarray, lengths: np.ndarray,
           n_strata: int) -> dict[str, Any]:
    if len(conf) < 3:
        return {"length_spearman": math.nan, "stratified_auroc": math.nan}
    return {
        "length_spearman": float(_quietly(length_correlations, conf, correct, lengths)
                                 ["conf_length_spearman"]),
        "stratified_auroc": float(_quietly(stratified_auroc, conf, correct, lengths,
                                           n_strata=n_strata)),
    }


def _flag_length_lead(rows: list[ScorerRow], confidences: dict[str, np.ndarray],
                      binary: np.ndarray, lengths: np.ndarray, n_strata: int) -> None:
    """Mark whether each scorer beats the length baseline by AUROC (on the items both
    scored), and whether that lead vanishes within length strata."""
    baseline = confidences[LENGTH_BASELINE]
    for row in rows:
        row.audit["lead"] = row.audit["lead_vanishes"] = None
        if row.baseline:
            continue
        conf = confidences[row.scorer]
        keep = ~np.isnan(conf) & ~np.isnan(baseline)
        if keep.sum() < 3:
            continue
        a, b, y = conf[keep], baseline[keep], binary[keep]
        row.audit["lead"] = bool(_quietly(auroc_score, a, y) > _quietly(auroc_score, b, y))
        row.audit["lead_vanishes"] = bool(_quietly(lead_disappears, a, b, y, lengths[keep],
                                                   n_strata))


def _compare_to_best(rows: list[ScorerRow], confidences: dict[str, np.ndarray],
                     binary: np.ndarray, n_resamples: int, level: float, seed: int
                     ) -> Comparison:
    """The best scorer by AUROC on the items every compared scorer has a value for, and
    the paired bootstrap of AUROC difference (scorer − best) on those same items.

    Selection and comparison use the same items, so the p-values are post-selection:
    each tests "equal AUROC" as if the best had been named in advance, and is smaller
    than an honest test of the chosen pair would be (:data:`POST_SELECTION`)."""
    out = Comparison()
    n_graded = len(binary)
    compared = []
    for row in rows:
        if row.n < 3 or row.n < MIN_COVERAGE * n_graded:
            out.left_out[row.scorer] = (f"values on {row.n} of {n_graded} graded items "
                                        f"(below {MIN_COVERAGE:.0%})")
        else:
            compared.append(row)
    if len(compared) < 2:
        return out
    common = np.logical_and.reduce([~np.isnan(confidences[r.scorer]) for r in compared])
    out.n_common, out.scorers = int(common.sum()), [r.scorer for r in compared]
    y = binary[common]
    for row in compared:
        row.common_auroc = float(_quietly(auroc_score, confidences[row.scorer][common], y))
    ranked = [r for r in compared if not math.isnan(r.common_auroc)]
    if len(ranked) < 2 or out.n_common < 3:
        return out
    best = max(ranked, key=lambda r: r.common_auroc)
    out.best = best.scorer
    for row in ranked:
        if row is best:
            continue
        result = _quietly(paired_bootstrap, "auroc", confidences[row.scorer][common],
                          confidences[best.scorer][common], y,
                          n_resamples=n_resamples, level=level, seed=seed)
        row.vs_best = {"best": best.scorer, "n": out.n_common,
                       **{k: float(v) for k, v in result.items()}}
    return out


def _grader_agreement(graded: list[Record], names: list[str],
                      confidences: dict[str, np.ndarray]) -> GraderAgreement | None:
    """Per grader its accuracy and each scorer's AUROC; per pair of graders their
    agreement on answers (share and Cohen's kappa) and Kendall's tau between the
    rankings of scorers by AUROC."""
    from sklearn.metrics import cohen_kappa_score

    graders = list(dict.fromkeys(g for r in graded for g in r.grades))
    if len(graders) < 2:
        return None
    accuracy: dict[str, float] = {}
    auroc: dict[str, dict[str, float]] = {}
    for g in graders:
        has = np.array([g in r.grades for r in graded])
        y = np.array([r.grades[g] >= 0.5 for r in graded if g in r.grades], dtype=float)
        accuracy[g] = float(y.mean()) if y.size else math.nan
        auroc[g] = {}
        for name in names:
            conf = confidences[name][has]
            keep = ~np.isnan(conf)
            auroc[g][name] = (float(_quietly(auroc_score, conf[keep], y[keep])) if keep.any()
                              else math.nan)
    taus = _quietly(ranking_agreement, auroc)
    pairs = []
    for i, g in enumerate(graders):
        for h in graders[i + 1:]:
            both = [r for r in graded if g in r.grades and h in r.grades]
            ya = np.array([r.grades[g] >= 0.5 for r in both], dtype=int)
            yb = np.array([r.grades[h] >= 0.5 for r in both], dtype=int)
            kappa = math.nan
            if both and len(set(ya) | set(yb)) > 1:
                kappa = float(_quietly(cohen_kappa_score, ya, yb))
            pairs.append({"g": g, "h": h, "n": len(both),
                          "agreement": float((ya == yb).mean()) if both else math.nan,
                          "kappa": kappa, "tau": float(taus.get((g, h), math.nan))})
    return GraderAgreement(graders, accuracy, pairs, auroc)


def _length_panel(table: EvalTable, correct: np.ndarray, lengths: np.ndarray,
                  n_strata: int) -> None:
    """Spearman of correctness with length, and accuracy per length stratum."""
    if correct.size < 3:
        table.length_note = "needs at least 3 graded items"
        return
    if correct.min() == correct.max():
        table.length_note = "needs both right and wrong answers"
    else:
        table.correct_length_spearman = float(_quietly(
            length_correlations, correct, correct, lengths)["correct_length_spearman"])
    strata = equal_mass_bins(lengths, n_strata)
    for s in np.unique(strata):
        inside = strata == s
        table.length_strata.append({"low": int(lengths[inside].min()),
                                    "high": int(lengths[inside].max()),
                                    "n": int(inside.sum()),
                                    "accuracy": float(correct[inside].mean())})


def _interval(metric: str, conf: np.ndarray, correct: np.ndarray, n_resamples: int,
              level: float, seed: int, options: dict[str, Any]) -> Interval:
    if len(correct) == 0:
        return _NAN_INTERVAL
    point, low, high = _quietly(bootstrap_interval, metric, conf, correct,
                                n_resamples=n_resamples, level=level, seed=seed, **options)
    return (float(point), float(low), float(high))


# --------------------------------------------------------------------------- two runs


@dataclass
class RunComparison:
    """Paired differences (run A − run B) on the items both runs hold and graded."""

    a: str
    b: str
    n_shared: int
    rows: list[dict[str, Any]]   # scorer, metric, higher_is_better, diff, low, high, p_value, n
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json_safe({"a": self.a, "b": self.b, "n_shared": self.n_shared,
                       "rows": self.rows, "note": self.note})


def compare_records(records_a: Sequence[Record], records_b: Sequence[Record], *,
                    grader_a: str, grader_b: str, scorers: Sequence[str],
                    names: tuple[str, str] = ("A", "B"), metrics: Sequence[str] = ("auroc", "prr"),
                    n_resamples: int = 1000, level: float = 0.95, seed: int = 0
                    ) -> RunComparison:
    """Accuracy and each scorer's metrics, A − B, paired on the shared item ids
    (:func:`confide.metrics.paired_bootstrap` with each run's own correctness).

    Each run is graded by its own grader; a scorer's rows leave out the items
    where either run has NaN confidence. The length baseline is the registered
    ``length`` scorer where a run did not store it.
    """
    by_id_b = {r.item.id: r for r in records_b}
    pairs = [(r, by_id_b[r.item.id]) for r in records_a
             if r.item.id in by_id_b and grader_a in r.grades
             and grader_b in by_id_b[r.item.id].grades]
    out = RunComparison(names[0], names[1], len(pairs), [])
    if len(pairs) < 2:
        out.note = ("The runs share no graded items, so no paired differences."
                    if not pairs else "The runs share one graded item: too few to pair.")
        return out
    if grader_a != grader_b:
        out.note = f"Graded differently: {names[0]} by {grader_a}, {names[1]} by {grader_b}."
    ra, rb = [p[0] for p in pairs], [p[1] for p in pairs]
    ya = np.array([r.grades[grader_a] >= 0.5 for r in ra], dtype=float)
    yb = np.array([r.grades[grader_b] >= 0.5 for r in rb], dtype=float)
    zeros = np.zeros(len(pairs))
    acc = _quietly(paired_bootstrap, "accuracy", zeros, zeros, ya, correct_b=yb,
                   n_resamples=n_resamples, level=level, seed=seed)
    out.rows.append({"scorer": "—", "metric": "accuracy", "higher_is_better": True, **acc})
    for name in scorers:
        ca, cb = scorer_column(ra, name), scorer_column(rb, name)
        keep = ~(np.isnan(ca) | np.isnan(cb))
        for m in metrics:
            d = ({"diff": math.nan, "low": math.nan, "high": math.nan, "p_value": math.nan,
                  "n": 0.0} if not keep.any() else
                 _quietly(paired_bootstrap, m, ca[keep], cb[keep], ya[keep], correct_b=yb[keep],
                          n_resamples=n_resamples, level=level, seed=seed))
            out.rows.append({"scorer": name, "metric": m,
                             "higher_is_better": METRICS[m].higher_is_better, **d})
    return out


def scorer_column(records: Sequence[Record], name: str) -> np.ndarray:
    """One scorer's stored values over ``records`` (NaN where missing); the ``length``
    baseline comes from its registered scorer when the run did not store it."""
    if name == LENGTH_BASELINE and not any(name in r.scores for r in records):
        return _length_baseline(records)[0]
    return np.array([r.scores.get(name, math.nan) for r in records], dtype=float)
