"""Within-task versus cross-task AUROC of hidden-state probes and scorer combiners.

The seed paper ("The Geometries of Truth Are Orthogonal Across Tasks")
predicts that a probe predicting correctness from hidden states works within
the task it was trained on and degrades on another task. This measures that
gap on the default model, in one process:

1. generate, score and grade ``--items`` items of each of two bundled tasks
   (default: arc_easy and boolq; SmolLM2-135M gets ~5% of TriviaQA right,
   too few right answers for a probe, but ``--tasks triviaqa,arc_easy``
   works) with pooled hidden states of
   ``--layers`` (runs are stored under ``runs/bench-transfer/`` and resume);
2. split each task's records in two halves (seeded, stratified by correctness);
3. fit a ``probe`` (best layer by CV), a ``lens`` probe and a ``combiner`` over
   the white-box scorers (and P(True) with ``--p-true``: one extra forward
   pass per item) on the first half of one task;
4. print the AUROC on the held-out half of the same task (within) and on all
   records of the other task (cross), next to the best single scorer on the
   same records, plus the cross-fitted AUROC on the training half.

    .venv/bin/python benchmarks/transfer.py --items 150
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

from confide.core.records import Record
from confide.learned import fit
from confide.metrics import UndefinedMetricWarning, auroc_score
from confide.pipeline.plan import DEFAULT_SCORERS, RunConfig
from confide.runs.execution import execute
from confide.store.run_store import RunStore

KINDS = ("probe", "lens", "combiner")


def _correct(records: list[Record], grader: str) -> np.ndarray:
    return np.array([r.grades[grader] >= 0.5 for r in records], dtype=float)


def _auroc(scores: list[float] | np.ndarray, correct: np.ndarray) -> float:
    scores = np.asarray(scores, dtype=float)
    keep = ~np.isnan(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return float(auroc_score(scores[keep], correct[keep]))


def _halves(records: list[Record], grader: str, seed: int) -> tuple[list[Record], list[Record]]:
    rng = np.random.default_rng(seed)
    first, second = [], []
    for label in (True, False):  # stratified: each half gets half of the right answers
        group = [r for r in records if (r.grades[grader] >= 0.5) == label]
        order = rng.permutation(len(group))
        cut = len(group) // 2
        first += [group[i] for i in order[:cut]]
        second += [group[i] for i in order[cut:]]
    return first, second


def _best_single(records: list[Record], grader: str, scorers: list[str]) -> tuple[str, float]:
    y = _correct(records, grader)
    table = {s: _auroc([r.scores.get(s, math.nan) for r in records], y) for s in scorers}
    name = max(table, key=lambda s: -1.0 if math.isnan(table[s]) else table[s])
    return name, table[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="arc_easy,boolq")
    parser.add_argument("--items", type=int, default=150)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--layers", default="8,16,-1")
    parser.add_argument("--p-true", action="store_true", help="add P(True) to the scorers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench-transfer")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    tasks = [t.strip() for t in args.tasks.split(",")]
    layers = tuple(int(v) for v in args.layers.split(","))
    scorers = DEFAULT_SCORERS + (("p_true",) if args.p_true else ())
    data: dict[str, tuple[list[Record], str, dict]] = {}
    backend = None
    for task in tasks:
        config = RunConfig(task=task, limit=args.items, max_new_tokens=args.max_new_tokens,
                           hidden_layers=layers, scorers=scorers, seed=args.seed)
        path = Path(args.out) / task
        began = time.perf_counter()
        if backend is None:
            from confide.backends.hf import HFBackend

            backend = HFBackend(config.model, batch_size=config.batch_size)
        outcome = execute(config, path, backend=backend)
        print(f"{task}: {outcome.generated} generated, {outcome.total - outcome.generated} "
              f"resumed, {time.perf_counter() - began:.0f} s")
        with RunStore.open(path) as store:
            grader = store.config["grader"]
            model = store.get_meta("backend")
            records = [r for r in store.records(hidden=True) if grader in r.grades]
        data[task] = (records, grader, model)

    results = []
    for train_task in tasks:
        records, grader, model = data[train_task]
        train, held = _halves(records, grader, args.seed)
        y_train = _correct(train, grader)
        print(f"\ntrain on {train_task}: {len(train)} items ({int(y_train.sum())} correct); "
              f"held out {len(held)} ({int(_correct(held, grader).sum())} correct)")
        fitted = {}
        for kind in KINDS:
            began = time.perf_counter()
            fitted[kind] = fit(train, kind=kind, grader=grader, model=model,  # type: ignore[arg-type]
                               scorers=list(scorers) if kind == "combiner" else None,
                               seed=args.seed)
            rep = fitted[kind].report
            print(f"  {kind:8s} chosen {rep['chosen']:28s} cross-fitted AUROC on train "
                  f"{rep['oof_auroc'] or math.nan:.3f}  ({time.perf_counter() - began:.0f} s)")
        for eval_task in tasks:
            eval_records, eval_grader, _ = data[eval_task]
            target = held if eval_task == train_task else eval_records
            y = _correct(target, eval_grader)
            single, single_auc = _best_single(target, eval_grader, list(scorers))
            row = {"train": train_task, "eval": eval_task,
                   "setting": "within (held-out half)" if eval_task == train_task else "cross-task",
                   "n": len(target), "n_correct": int(y.sum()),
                   "best_single": single, "best_single_auroc": single_auc}
            for kind in KINDS:
                row[kind] = _auroc([s for s, _ in fitted[kind].predict(target)], y)
            results.append(row)

    print("\nAUROC (higher = confidence separates right from wrong better; 0.5 = chance)")
    header = f"{'train → eval':26s} {'setting':24s} {'n':>4s} {'ok':>4s} " + " ".join(
        f"{k:>8s}" for k in KINDS) + "  best single scorer (same items)"
    print(header)
    for row in results:
        print(f"{row['train'] + ' → ' + row['eval']:26s} {row['setting']:24s} {row['n']:4d} "
              f"{row['n_correct']:4d} " + " ".join(f"{row[k]:8.3f}" for k in KINDS)
              + f"  {row['best_single']} {row['best_single_auroc']:.3f}")
    for kind in ("probe", "lens"):
        for train_task in tasks:
            within = next(r[kind] for r in results
                          if r["train"] == train_task and r["eval"] == train_task)
            cross = [r[kind] for r in results if r["train"] == train_task
                     and r["eval"] != train_task]
            print(f"{kind} trained on {train_task}: within {within:.3f}, cross "
                  + ", ".join(f"{c:.3f}" for c in cross)
                  + f" (gap {within - float(np.mean(cross)):+.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
