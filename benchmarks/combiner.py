"""Does the learned combination earn its keep, and what do two models on the same items give?

Reads the pieces ``benchmarks/quality.py`` stored (nothing is generated) and
appends two sections to ``benchmarks/results/quality.md``:

**Learned combination.** Per piece (task × model), the ``combiner`` of
:func:`confide.learned.fit` (logistic regression over every stored scorer:
normal scores of each input's training quantiles, missing-indicators, strong L2,
non-negative weights on the scorers)
is cross-fitted over 5 folds, and its out-of-fold PRR is compared by a paired
bootstrap (:func:`confide.metrics.paired_bootstrap`, same resampled items) with
two single-scorer baselines: the scorer *chosen in fold* (best PRR on the
other four folds, applied to the held-out one: the fair comparison, since both
sides learn from the same labels) and the scorer *best in hindsight* (best PRR
on all items: an upper bound biased by choosing among 40 scorers after seeing
the labels). Pieces at chance are shown apart. Then leave-one-task-out per
model: the combiner is fitted on the other tasks' records and applied to the
held-out task, against the scorer best on the training tasks and the one best
in hindsight on the held-out task. Next to each line: the number of right
answers and the largest absolute Spearman correlation between the hindsight
best scorer and the others (a combination of near-copies cannot add much).

**Two models on the same items.** For each task both models answered: the
cascade SmolLM2 → Gemma-3-270m (:func:`confide.decisions.routing.cascade`) at
escalation shares 0, 25, 50, 75 and 100%, with the small model's best scorer
as the routing confidence; and cross-model agreement as an uncertainty signal
(Lakshminarayanan et al., 2017, ensembles; here an ensemble of two different
models): confidence 1 when the other model's greedy answer is the same (the
same option on multiple-choice tasks, else equivalent under the task's judge),
else 0, with its AUROC for each model's correctness.

    .venv/bin/python benchmarks/combiner.py
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from quality import (  # noqa: E402
    MIN_POSITIVES,
    RESULTS,
    Piece,
    _iv,
    _md_table,
    load_pieces,
)

from confide.core.errors import InvalidInputError  # noqa: E402
from confide.core.records import Record  # noqa: E402
from confide.decisions.routing import cascade  # noqa: E402
from confide.equivalence.judges import default_judge, make_judge  # noqa: E402
from confide.evaluation.table import MIN_COVERAGE  # noqa: E402
from confide.grading.choice import choice  # noqa: E402
from confide.learned import fit  # noqa: E402
from confide.metrics import (  # noqa: E402
    UndefinedMetricWarning,
    bootstrap_interval,
    paired_bootstrap,
)
from confide.metrics.crossfit import crossfit_splits  # noqa: E402
from confide.runs.stored import open_run  # noqa: E402

SECTION = "<!-- combiner.py -->"


def _graded(p: Piece) -> tuple[list[Record], np.ndarray]:
    run = open_run(p.path)
    records = [r for r in run.records if p.table.grader in r.grades]
    return records, np.array([r.grades[p.table.grader] >= 0.5 for r in records], dtype=float)


def _column(records: list[Record], name: str) -> np.ndarray:
    return np.array([r.scores.get(name, math.nan) for r in records], dtype=float)


def _names(records: list[Record]) -> list[str]:
    return sorted(n for n in {n for r in records for n in r.scores}
                  if not np.isnan(_column(records, n)).all())


def _quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


def _prr(conf: np.ndarray, y: np.ndarray) -> float:
    keep = ~np.isnan(conf)
    if keep.sum() < 10:
        return math.nan
    return _quiet(bootstrap_interval, "prr", conf[keep], y[keep], n_resamples=1).point


def _best_single(records: list[Record], y: np.ndarray, names: list[str]) -> tuple[str, float]:
    """The scorer with the highest PRR on the items where all of ``names`` have a value
    (a scorer cannot win by leaving hard items out)."""
    columns = {n: c for n in names
               if (~np.isnan(c := _column(records, n))).mean() >= MIN_COVERAGE}
    common = np.logical_and.reduce([~np.isnan(c) for c in columns.values()])
    names = list(columns)
    value, name = max((v, n) for n in names
                      if not math.isnan(v := _prr(columns[n][common], y[common])))
    return name, value


def _on_common_scale(train: list[Record], grader: str, name: str, test: list[Record]
                     ) -> np.ndarray:
    """One scorer's values on ``test`` as the one-input combiner fitted on ``train`` maps
    them (monotone in the scorer): scores of different scorers chosen in different folds
    become comparable before they are pooled."""
    fitted = fit(train, kind="combiner", grader=grader, model={}, scorers=[name], n_folds=3,
                 seed=0)
    return np.array([v for v, _ in fitted.predict(test)])


def _chosen_in_fold(records: list[Record], y: np.ndarray, names: list[str], grader: str
                    ) -> tuple[np.ndarray, list[str]]:
    """The honest single-scorer baseline: on each of the combiner's five folds, the
    scorer with the best PRR on the other four, applied to the held-out fold."""
    out, chosen = np.full(len(records), np.nan), []
    for train_idx, test_idx in crossfit_splits(y.astype(int), n_folds=5, seed=0):
        train = [records[i] for i in train_idx]
        usable = [n for n in names if np.isfinite(_column(train, n)).any()]
        best, _ = _best_single(train, y[train_idx], usable)
        chosen.append(best)
        out[test_idx] = _on_common_scale(train, grader, best, [records[i] for i in test_idx])
    return out, chosen


def _max_corr(records: list[Record], best: str, names: list[str]) -> float:
    from scipy.stats import spearmanr

    b = _column(records, best)
    out = 0.0
    for n in names:
        if n == best:
            continue
        c = _column(records, n)
        keep = ~(np.isnan(b) | np.isnan(c))
        if keep.sum() > 3 and np.ptp(c[keep]) > 0:
            out = max(out, abs(float(_quiet(spearmanr, b[keep], c[keep]).statistic)))
    return out


def _vs(conf: np.ndarray, single: np.ndarray, y: np.ndarray, n_resamples: int) -> dict[str, Any]:
    return _quiet(paired_bootstrap, "prr", conf, single, y, n_resamples=n_resamples,
                  nan_policy="omit")


def _fmt(d: dict[str, Any]) -> str:
    return f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def _relabelled(records: list[Record], grader: str) -> list[Record]:
    """Records whose correctness is under one name, so tasks with different graders pool."""
    return [Record(item=r.item, greedy=r.greedy, samples=[], scores=r.scores,
                   grades={"label": r.grades[grader]}) for r in records]


def combiner_section(pieces: list[Piece], n_resamples: int) -> list[str]:
    lines = ["## Learned combination (combiner) against the best single scorer", "",
             "Two baselines. *Chosen in fold* is the fair one: on each of the combiner's "
             "five folds, the single scorer with the best PRR on the other four folds, "
             "applied to the held-out fold (what a user with the same labels would do "
             "instead of fitting a combiner). *Best in hindsight* is the scorer with the "
             "best PRR on all items, chosen after seeing them: among 40 scorers with a few "
             "dozen right answers its PRR is biased upwards (the winner's curse), so it is "
             "an upper bound for any selection, not a baseline. Pieces where the model is "
             "at chance follow the ranked ones (status column): they have the most right "
             "answers, and confidence still predicts which answers happened to be right, "
             "but they are not ranked anywhere else.", ""]
    # a piece with a handful of right (or wrong) answers has nothing to fit or test on
    few = [p for p in pieces if min(p.n_correct, p.n - p.n_correct) < MIN_POSITIVES]
    pieces = [p for p in pieces if p not in few]
    if few:
        lines += ["Left out (fewer than {} right or wrong answers): {}.".format(
            MIN_POSITIVES, ", ".join(f"{p.task} × {p.model} ({p.n_correct} of {p.n} right)"
                                     for p in few)), ""]
    if not pieces:
        return lines + ["No stored piece to fit.", ""]
    rows = []
    data: dict[tuple[str, str], tuple[list[Record], np.ndarray, list[str], str]] = {}
    ordered = sorted(pieces, key=lambda p: (bool(p.at_chance), p.task, p.model))
    for p in ordered:
        records, y = _graded(p)
        names = _names(records)
        grader = p.table.grader
        data[(p.task, p.model)] = (records, y, names, grader)
        model = fit(records, kind="combiner", grader=grader,
                    model=open_run(p.path).backend_config, scorers=names, n_folds=5, seed=0)
        oof = np.array([model.oof[r.item.id] for r in records])
        fair, chosen = _chosen_in_fold(records, y, names, grader)
        best, _ = _best_single(records, y, names)
        comb_prr = _quiet(bootstrap_interval, "prr", oof, y, n_resamples=n_resamples)
        fair_prr = _quiet(bootstrap_interval, "prr", fair, y, n_resamples=n_resamples,
                          nan_policy="omit")
        rows.append([p.task, p.model, "at chance" if p.at_chance else "ranked", str(len(y)),
                     str(int(y.sum())), _iv(comb_prr), _iv(fair_prr),
                     _fmt(_vs(oof, fair, y, n_resamples)),
                     ", ".join(sorted(set(chosen))), best,
                     _fmt(_vs(oof, _column(records, best), y, n_resamples)),
                     f"{_max_corr(records, best, names):.2f}"])
    lines += ["Within task (5-fold cross-fitted; PRR at rejection up to 50%; paired "
              "bootstrap over items):", ""]
    lines += _md_table(["task", "model", "status", "items", "right", "combiner PRR",
                        "chosen in fold PRR", "combiner − chosen in fold",
                        "scorers chosen in the folds", "best in hindsight",
                        "combiner − best in hindsight",
                        "max |Spearman| hindsight best vs others"], rows)
    lines += ["", "Leave one task out (fitted on the model's other tasks, each labelled by "
              "its own grader; inputs = scorers stored in all of them). The fair baseline "
              "is the scorer with the best PRR on the pooled training tasks:", ""]
    loto = []
    for model_name in sorted({p.model for p in pieces}):
        tasks = sorted(t for t, m in data if m == model_name)
        if len(tasks) < 2:
            loto.append([model_name, "–", f"needs two tasks; has {len(tasks)}",
                         "", "", "", "", ""])
            continue
        for held in tasks:
            test, y_test, test_names, _ = data[(held, model_name)]
            others = [t for t in tasks if t != held]
            names = sorted(set(test_names).intersection(
                *(set(data[(t, model_name)][2]) for t in others)))
            train = [r for t in others for r in _relabelled(data[(t, model_name)][0],
                                                            data[(t, model_name)][3])]
            y_train = np.array([r.grades["label"] >= 0.5 for r in train], dtype=float)
            fitted = fit(train, kind="combiner", grader="label", model={}, scorers=names,
                         n_folds=5, seed=0)
            conf = np.array([v for v, _ in fitted.predict(test)])
            transfer, _ = _best_single(train, y_train, names)
            best, _ = _best_single(test, y_test, test_names)
            loto.append([model_name, held, " + ".join(others),
                         _iv(_quiet(bootstrap_interval, "prr", conf, y_test,
                                    n_resamples=n_resamples, nan_policy="omit")),
                         transfer, _fmt(_vs(conf, _column(test, transfer), y_test,
                                            n_resamples)),
                         best, _fmt(_vs(conf, _column(test, best), y_test, n_resamples))])
    lines += _md_table(["model", "held-out task", "trained on", "combiner PRR",
                        "best on training tasks", "combiner − it",
                        "best in hindsight on held-out", "combiner − it"], loto)
    return lines + [""]


def _picked(answer: str, item: Any) -> int | None:
    """The option a multiple-choice answer picks, by the ``choice`` grader's reading."""
    choices = item.metadata.get("choices") or []
    hits = [k for k in range(len(choices))
            if choice(answer, replace(item, references=[chr(ord("A") + k)])) >= 0.5]
    return hits[0] if len(hits) == 1 else None


def _agree(a: str, b: str, item: Any, grader: str) -> float:
    """1 when two models' answers are the same: the same option on multiple-choice
    tasks ("B" and "B. breathing mask" agree), else equivalent under the task's judge."""
    if grader == "choice":
        k = _picked(a, item)
        return float(k is not None and k == _picked(b, item))
    return float(make_judge(default_judge(grader)).decide(a, b, item).equivalent)


def two_model_section(pieces: list[Piece], n_resamples: int,
                      small: str = "smollm2", large: str = "gemma3-270m") -> list[str]:
    lines = [f"## Two models on the same items: {small} → {large}", ""]
    by = {(p.task, p.model): p for p in sorted(pieces, key=lambda p: p.n)}  # largest wins
    tasks = sorted({p.task for p in pieces if (p.task, small) in by and (p.task, large) in by})
    if not tasks:
        return lines + ["No task has stored runs of both models yet.", ""]
    rows, agree_rows = [], []
    for task in tasks:
        ps, pl = by[(task, small)], by[(task, large)]
        ranked = [r for r in ps.ranked_rows() if not r.baseline]
        scorer = ranked[0].scorer if ranked else "msp"
        try:
            curve = cascade(ps.path, pl.path, scorer=scorer)
        except InvalidInputError as exc:
            rows.append([task, scorer, str(exc), "", "", "", "", "", ""])
            continue
        at = []
        for share in (0.0, 0.25, 0.5, 0.75, 1.0):
            j = int(np.argmin(np.abs(curve.escalated - share)))
            at.append(f"{curve.accuracy[j]:.3f} ({curve.escalated[j]:.0%})")
        rows.append([task, scorer, str(curve.n), *at, f"{curve.oracle_accuracy:.3f}"])
        # cross-model agreement on the shared graded items
        rs, rl = open_run(ps.path).records, open_run(pl.path).records
        gs, gl = ps.table.grader, pl.table.grader
        other = {r.item.id: r for r in rl if gl in r.grades}
        pairs = [(a, other[a.item.id]) for a in rs if gs in a.grades and a.item.id in other]
        agree = np.array([_agree(a.greedy.text, b.greedy.text, a.item, gs) for a, b in pairs])
        for name, side, g in ((small, 0, gs), (large, 1, gl)):
            y = np.array([p[side].grades[g] >= 0.5 for p in pairs], dtype=float)
            own = by[(task, name)]
            best = next((r.scorer for r in own.ranked_rows() if not r.baseline), "msp")
            best_conf = _column([p[side] for p in pairs], best)
            keep = ~np.isnan(best_conf)
            agree_rows.append([task, name, str(len(pairs)), f"{agree.mean():.2f}",
                               f"{y.mean():.3f}",
                               _iv(_quiet(bootstrap_interval, "auroc", agree, y,
                                          n_resamples=n_resamples)),
                               f"{best}: " + _iv(_quiet(bootstrap_interval, "auroc",
                                                        best_conf[keep], y[keep],
                                                        n_resamples=n_resamples))])
    lines += ["Cascade: the small model answers; items whose confidence is below the "
              "threshold go to the large one. Accuracy (share escalated) at each point:", ""]
    lines += _md_table(["task", "routing confidence", "items", "0%", "25%", "50%", "75%",
                        "100%", "oracle"], rows)
    lines += ["", "Cross-model agreement as a confidence (1 = the other model's greedy answer "
              "picks the same option, or is equivalent under the task's judge):", ""]
    lines += _md_table(["task", "model judged", "items", "agreement rate", "accuracy",
                        "AUROC of agreement", "own best scorer AUROC"], agree_rows)
    return lines + [""]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, action="append",
                    help="folder(s) of stored runs (default runs/quality); for a task and "
                         "model the run with most records is used")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of quality.md")
    args = ap.parse_args(argv)
    pieces = load_pieces(args.out or [Path("runs/quality")], args.resamples)
    text = "\n".join([SECTION, *combiner_section(pieces, args.resamples),
                      *two_model_section(pieces, args.resamples)]) + "\n"
    path = args.results / "quality.md"
    head = path.read_text().split(SECTION)[0] if path.exists() else ""
    path.write_text(head + text)
    print(text)


if __name__ == "__main__":
    main()
