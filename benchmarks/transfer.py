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

``--multitask`` measures instead one probe fitted on several tasks at once
(:mod:`confide.learned.multitask`): for each task in turn held out, a probe (or
``--kinds probe,lens``) is fitted on the first halves of the other tasks with
``equal``, ``uncertainty`` (Kendall et al. 2018) and ``per-task`` weighting, and its
final model is scored on the held-out task (every record) and on the second halves of
the training tasks, each AUROC with a 95% bootstrap interval and the paired bootstrap
difference of each weighting against ``equal`` on the same items. ``--items`` takes
one count or one per task:

    .venv/bin/python benchmarks/transfer.py --multitask --tasks arc_easy,boolq,triviaqa \
        --items arc_easy=200,boolq=100,triviaqa=200 --layer 16:mean
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

from confide.core.errors import InvalidInputError
from confide.core.records import Record
from confide.learned import fit
from confide.learned.multitask import WEIGHTINGS, Task, fit_multitask
from confide.metrics import UndefinedMetricWarning, auroc_score
from confide.metrics.bootstrap import bootstrap_interval, paired_bootstrap
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


def _items(spec: str, tasks: list[str]) -> dict[str, int]:
    """``150`` for every task, or ``arc_easy=200,boolq=100``: a count per task."""
    if "=" not in spec:
        return {t: int(spec) for t in tasks}
    counts = {k.strip(): int(v) for k, v in (p.split("=") for p in spec.split(","))}
    missing = [t for t in tasks if t not in counts]
    if missing:
        raise SystemExit(f"--items names no count for {', '.join(missing)}")
    return counts


def _interval(scores: np.ndarray, y: np.ndarray, resamples: int, seed: int) -> list[float]:
    keep = ~np.isnan(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        point, low, high = bootstrap_interval("auroc", scores[keep], y[keep],
                                              n_resamples=resamples, seed=seed)
    return [point, low, high]


def multitask(data: dict[str, tuple[list[Record], str, dict]], args: argparse.Namespace
              ) -> list[dict]:
    """Each task held out in turn: weightings fitted on the other tasks' first halves, scored
    on the held-out task and on the training tasks' second halves (module notes)."""
    tasks = list(data)
    halves = {t: _halves(data[t][0], data[t][1], args.seed) for t in tasks}
    kinds = [k.strip() for k in args.kinds.split(",")]
    rows: list[dict] = []
    for held in tasks:
        train_tasks = [t for t in tasks if t != held]
        spec = [Task(t, halves[t][0], data[t][1]) for t in train_tasks]
        model = data[held][2]
        targets = {f"{held} (held-out task)": (data[held][0], data[held][1])}
        targets.update({f"{t} (held-out half)": (halves[t][1], data[t][1]) for t in train_tasks})
        print(f"\nheld out {held}; trained on the first halves of " + ", ".join(
            f"{t} ({len(halves[t][0])} items, {int(_correct(halves[t][0], data[t][1]).sum())} "
            "correct)" for t in train_tasks))
        for kind in kinds:
            scores: dict[str, dict[str, np.ndarray]] = {}
            for weighting in WEIGHTINGS:
                began = time.perf_counter()
                try:
                    fitted = fit_multitask(spec, kind=kind,  # type: ignore[arg-type]
                                           model=model, weighting=weighting, layer=args.layer,
                                           seed=args.seed)
                except InvalidInputError as exc:  # too few answers in a task's half
                    print(f"  {kind} {weighting}: not fitted: {exc}")
                    rows.append({"held_out": held, "kind": kind, "weighting": weighting,
                                 "skipped": str(exc)})
                    break
                multi = fitted.multitask or {}
                sigmas = ", ".join(f"{t['name']} sigma {t['sigma']:.3f} weight {t['weight']:.2f}"
                                   for t in multi.get("tasks", []) if "sigma" in t)
                print(f"  {kind} {weighting:12s} chosen {fitted.report['chosen']}; cross-fitted "
                      f"AUROC (mean over tasks) {fitted.report['oof_auroc']:.3f}"
                      + (f"; {sigmas}" if weighting == "uncertainty" else "")
                      + f"  ({time.perf_counter() - began:.0f} s)")
                scores[weighting] = {name: np.array([v for v, _ in fitted.predict(recs)])
                                     for name, (recs, _) in targets.items()}
                rows.append({"held_out": held, "kind": kind, "weighting": weighting,
                             "chosen": fitted.report["chosen"],
                             "oof_auroc": fitted.report["oof_auroc"],
                             "tasks": fitted.report.get("tasks")})
            if len(scores) < len(WEIGHTINGS):
                continue
            for name, (recs, grader) in targets.items():
                y = _correct(recs, grader)
                single, single_auc = _best_single(recs, grader, list(DEFAULT_SCORERS))
                line = {"held_out": held, "kind": kind, "eval": name, "n": len(recs),
                        "n_correct": int(y.sum()), "best_single": single,
                        "best_single_auroc": single_auc}
                for weighting in WEIGHTINGS:
                    line[weighting] = _interval(scores[weighting][name], y, args.resamples,
                                                args.seed)
                    if weighting != "equal":
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", UndefinedMetricWarning)
                            diff = paired_bootstrap("auroc", scores[weighting][name],
                                                    scores["equal"][name], y,
                                                    n_resamples=args.resamples, seed=args.seed,
                                                    nan_policy="omit")
                        line[f"{weighting}-equal"] = [diff["diff"], diff["low"], diff["high"]]
                        line[f"{weighting}-equal p"] = diff["p_value"]
                rows.append(line)
    _print_multitask([r for r in rows if "eval" in r])
    return rows


def _print_multitask(lines: list[dict]) -> None:
    def fmt(v: list[float]) -> str:
        return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"

    def diff(v: list[float]) -> str:
        return f"{v[0]:+.3f} [{v[1]:+.3f}, {v[2]:+.3f}]"

    print("\nAUROC with 95% bootstrap intervals; differences paired on the same items")
    print("| kind | evaluated on | n | correct | equal | uncertainty | per-task | "
          "uncertainty − equal | per-task − equal | best single scorer |")
    print("|---|---|---:|---:|---|---|---|---|---|---|")
    for r in lines:
        print(f"| {r['kind']} | {r['eval']} | {r['n']} | {r['n_correct']} | {fmt(r['equal'])} | "
              f"{fmt(r['uncertainty'])} | {fmt(r['per-task'])} | "
              f"{diff(r['uncertainty-equal'])} | {diff(r['per-task-equal'])} | "
              f"{r['best_single']} {r['best_single_auroc']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="arc_easy,boolq")
    parser.add_argument("--items", default="150",
                        help="items of each task: a count, or TASK=COUNT,... (one per task)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--layers", default="8,16,-1")
    parser.add_argument("--p-true", action="store_true", help="add P(True) to the scorers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench-transfer")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--multitask", action="store_true",
                        help="held-out tasks: equal vs uncertainty vs per-task weighting")
    parser.add_argument("--kinds", default="probe", help="--multitask: probe and/or lens")
    parser.add_argument("--layer", default="best",
                        help="--multitask: the hidden key every weighting reads, or best")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--stored-only", action="store_true",
                        help="generate nothing: read what the stored runs hold, finished or not")
    args = parser.parse_args()

    tasks = [t.strip() for t in args.tasks.split(",")]
    items = _items(args.items, tasks)
    layers = tuple(int(v) for v in args.layers.split(","))
    scorers = DEFAULT_SCORERS + (("p_true",) if args.p_true else ())
    data: dict[str, tuple[list[Record], str, dict]] = {}
    backend = None
    for task in tasks:
        config = RunConfig(task=task, limit=items[task], max_new_tokens=args.max_new_tokens,
                           hidden_layers=layers, scorers=scorers, seed=args.seed)
        path = Path(args.out) / task
        began = time.perf_counter()
        if args.stored_only:  # what the stored run holds, finished or not
            if not (path / "run.sqlite").exists():
                raise SystemExit(f"--stored-only: no run at {path}")
        else:
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
        if args.stored_only:
            print(f"{task}: {len(records)} graded records stored (of {items[task]} asked)")
        data[task] = (records, grader, model)

    if args.multitask:
        rows = multitask(data, args)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2))
        return
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
