"""Does the learned combination earn its keep, and what do two models on the same items give?

Reads the pieces ``benchmarks/quality.py`` stored (nothing is generated) and
appends two sections to ``benchmarks/results/quality.md``:

**Learned combination.** Per ranked piece (task × model above chance), the
``combiner`` of :func:`confide.learned.fit` (logistic regression over every
stored scorer, inputs standardised, missing-indicators, L2 strength chosen by
inner cross-validated AUROC) is cross-fitted over 5 folds; its out-of-fold PRR
is compared with the best single scorer's PRR by a paired bootstrap
(:func:`confide.metrics.paired_bootstrap`, same resampled items for both). The
single scorer is chosen as the best on the same items, which favours it (the
combiner's score is honestly out of fold). Then leave-one-task-out per model:
the combiner is fitted on the other tasks' records and applied to the held-out
task, against that task's best single scorer. Next to each line: the number of
right answers and the largest absolute Spearman correlation between the best
scorer and the others (a combination of near-copies cannot add much).

**Two models on the same items.** For each task both models answered: the
cascade SmolLM2 → Gemma-3-270m (:func:`confide.decisions.routing.cascade`) at
escalation shares 0, 25, 50, 75 and 100%, with the small model's best scorer
as the routing confidence; and cross-model agreement as an uncertainty signal
(Lakshminarayanan et al., 2017, ensembles; here an ensemble of two different
models): confidence 1 when the other model's greedy answer is equivalent under
the task's judge, else 0, with its AUROC for each model's correctness.

    .venv/bin/python benchmarks/combiner.py
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from quality import RESULTS, Piece, _iv, _md_table, load_pieces  # noqa: E402

from confide.decisions.routing import cascade  # noqa: E402
from confide.errors import InvalidInputError  # noqa: E402
from confide.judges import default_judge, make_judge  # noqa: E402
from confide.learned import fit  # noqa: E402
from confide.metrics import (  # noqa: E402
    UndefinedMetricWarning,
    bootstrap_interval,
    paired_bootstrap,
)
from confide.records import Record  # noqa: E402
from confide.runs import open_run  # noqa: E402

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


def _best_single(records: list[Record], y: np.ndarray, names: list[str]) -> tuple[str, float]:
    """The scorer with the highest PRR on these items (NaN items left out)."""
    scored = []
    for n in names:
        c = _column(records, n)
        keep = ~np.isnan(c)
        if keep.sum() >= 10:
            scored.append((_quiet(bootstrap_interval, "prr", c[keep], y[keep],
                                  n_resamples=1).point, n))
    value, name = max((v, n) for v, n in scored if not math.isnan(v))
    return name, value


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


def combiner_section(pieces: list[Piece], n_resamples: int) -> list[str]:
    ranked = [p for p in pieces if not p.at_chance]
    lines = ["## Learned combination (combiner) against the best single scorer", ""]
    if not ranked:
        return lines + ["No ranked piece: nothing to fit.", ""]
    rows = []
    data: dict[tuple[str, str], tuple[list[Record], np.ndarray, list[str]]] = {}
    for p in ranked:
        records, y = _graded(p)
        names = _names(records)
        data[(p.task, p.model)] = (records, y, names)
        model = fit(records, kind="combiner", grader=p.table.grader,
                    model=open_run(p.path).backend_config, scorers=names, n_folds=5, seed=0)
        oof = np.array([model.oof[r.item.id] for r in records])
        best, _ = _best_single(records, y, names)
        d = _vs(oof, _column(records, best), y, n_resamples)
        comb_prr = _quiet(bootstrap_interval, "prr", oof, y, n_resamples=n_resamples)
        rows.append([p.task, p.model, str(len(y)), str(int(y.sum())), _iv(comb_prr), best,
                     _fmt(d), f"{_max_corr(records, best, names):.2f}",
                     str(model.report.get("chosen", "")), f"`{p.path}`"])
    lines += ["Within task (5-fold cross-fitted combiner; PRR at rejection up to 50%):", ""]
    lines += _md_table(["task", "model", "items", "right", "combiner PRR", "best single",
                        "combiner − best single (paired)", "max |Spearman| best vs others",
                        "chosen", "run"], rows)
    lines += ["", "Leave one task out (fitted on the model's other ranked tasks, inputs = "
              "scorers stored in all of them):", ""]
    loto = []
    for model_name in sorted({p.model for p in ranked}):
        tasks = [p.task for p in ranked if p.model == model_name]
        if len(tasks) < 2:
            loto.append([model_name, "–", f"needs two ranked tasks; has {len(tasks)}",
                         "", "", ""])
            continue
        for held in tasks:
            test, y_test, test_names = data[(held, model_name)]
            common = set(test_names)
            for t in tasks:
                if t != held:
                    common &= set(data[(t, model_name)][2])
            names = sorted(common)
            # one label across tasks: each training record labelled by its own task's grader
            train_relabelled = []
            for t in tasks:
                if t == held:
                    continue
                g = next(p.table.grader for p in ranked if p.task == t and p.model == model_name)
                for r in data[(t, model_name)][0]:
                    train_relabelled.append(Record(item=r.item, greedy=r.greedy, samples=[],
                                                   scores=r.scores,
                                                   grades={"label": r.grades[g]}))
            fitted = fit(train_relabelled, kind="combiner", grader="label", model={},
                         scorers=names, n_folds=5, seed=0)
            conf = np.array([v for v, _ in fitted.predict(test)])
            best, _ = _best_single(test, y_test, test_names)
            d = _vs(conf, _column(test, best), y_test, n_resamples)
            loto.append([model_name, held, " + ".join(t for t in tasks if t != held),
                         _iv(_quiet(bootstrap_interval, "prr", conf, y_test,
                                    n_resamples=n_resamples, nan_policy="omit")), best,
                         _fmt(d)])
    lines += _md_table(["model", "held-out task", "trained on", "combiner PRR",
                        "best single on held-out", "combiner − best single (paired)"], loto)
    return lines + [""]


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
        judge = make_judge(default_judge(gs))
        agree = np.array([float(judge.decide(a.greedy.text, b.greedy.text, a.item).equivalent)
                          for a, b in pairs])
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
              "is equivalent under the task's judge):", ""]
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
