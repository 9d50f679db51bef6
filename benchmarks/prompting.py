"""The default run's prompt, decided by measurement: chat question against k-shot completion.

Runs the bundled model on the bundled TriviaQA sample with the default scorers
(what ``confide run`` does) twice, through the ordinary run loop:

``chat``
    the question in a chat turn, "Answer the question with a few words only, no
    explanation." (the prompt before issue 18);
``kshot``
    the 5-shot completion prompt (``Question: …\\nAnswer: …`` exemplars from the
    file's last five questions, never evaluated), now TriviaQA's prompt for
    every model (:data:`confide.tasks.prompts.SHORT_ANSWER`).

For each, at the first 100 items and at all ``--items``: accuracy, answer length
(words and tokens), every default scorer's AUROC with its 95% interval, how
many pairs of scorers have AUROC intervals that do not overlap, and how many
scorers the paired bootstrap puts significantly below the best; plus the wall
time of the run (the model loaded once, beforehand). Writes
``benchmarks/results/prompting.md``.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/prompting.py --items 500
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import confide
from confide.evaluation.table import evaluate_records
from confide.tasks.prompts import FORMATS

VARIANTS: dict[str, dict[str, Any]] = {
    "chat": {"prompt_template": {"chat": FORMATS["open_qa"]["chat"]}},
    "kshot": {},
}
RESULTS = Path(__file__).parent / "results"


def _separation(table: Any) -> tuple[int, int]:
    """(pairs of scorers with disjoint AUROC intervals, scorers significantly below the best)."""
    ivs = [r.metrics["auroc"] for r in table.rows if not math.isnan(r.metrics["auroc"][1])]
    disjoint = sum(1 for i, a in enumerate(ivs) for b in ivs[i + 1:]
                   if a[2] < b[1] or b[2] < a[1])
    below = sum(1 for r in table.rows if r.vs_best is not None and r.vs_best["high"] < 0)
    return disjoint, below


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--variants", default="kshot,chat")
    ap.add_argument("--out", type=Path, default=Path("runs/prompting"))
    ap.add_argument("--report-only", action="store_true",
                    help="evaluate what the runs hold so far; generate nothing")
    args = ap.parse_args()

    began = time.perf_counter()
    model = None if args.report_only else confide.load_model(args.model)
    load_s = time.perf_counter() - began
    lines = ["# TriviaQA prompt: chat question against 5-shot completion", "",
             f"`benchmarks/prompting.py --items {args.items} --model {args.model}`"
             + (" (`--report-only`: the runs as stored; rows say how many items they hold)"
                if args.report_only else
                f"; model loaded in {load_s:.0f} s; load average at start "
                f"{os.getloadavg()[0]:.1f} on 2 shared cores (wall times are that share)")
             + ". The variants run one after the other in one process, so their generation "
             "seconds on the same items compare when nothing else shares the machine.", "",
             "| prompt | items | accuracy | words (mean / median) | tokens (mean) | "
             "best scorer AUROC | length AUROC | disjoint AUROC interval pairs | "
             "scorers significantly below best | generation s (stored per item, summed) | "
             "run wall time |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    runs, walls = {}, {}
    for name in args.variants.split(","):
        t0 = time.perf_counter()
        where = args.out / f"{args.model}-{name}-{args.items}"
        if args.report_only:
            if not (where / "run.sqlite").exists():
                continue
            runs[name] = confide.open_run(where)
        else:
            runs[name] = confide.generate_and_evaluate(model, task="triviaqa",
                                                       limit=args.items,
                                                       task_options=VARIANTS[name], out=where)
        walls[name] = time.perf_counter() - t0
    # the items are in file order in every run, so the first n are the same questions
    common = min((len(run.records) for run in runs.values()), default=0)
    for name, run in runs.items():
        wall = walls[name]
        stored = len(run.records)
        for n in sorted({min(100, stored), common, stored}):
            records = run.records[:n]
            table = evaluate_records(records, grader=run.grader, scorers=list(
                run.config["scorers"]), metrics=("auroc", "prr"),
                seed=0)
            words = [len(r.greedy.text.split()) for r in records]
            tokens = [r.greedy.n_tokens for r in records]
            best = max((r for r in table.rows if not r.baseline),
                       key=lambda r: r.metrics["auroc"][0])
            length = next(r for r in table.rows if r.baseline)
            disjoint, below = _separation(table)
            acc = table.accuracy
            lines.append(
                f"| {name} | {n} | {acc[0]:.3f} [{acc[1]:.3f}, {acc[2]:.3f}] | "
                f"{statistics.mean(words):.1f} / {statistics.median(words):g} | "
                f"{statistics.mean(tokens):.1f} | {best.scorer} "
                f"{best.metrics['auroc'][0]:.3f} [{best.metrics['auroc'][1]:.3f}, "
                f"{best.metrics['auroc'][2]:.3f}] | {length.metrics['auroc'][0]:.3f} | "
                f"{disjoint} | {below} | {sum(r.seconds for r in records):.0f} | "
                + (f"{wall:.0f} s" if n == stored and not args.report_only else "") + " |")
            if n == stored:
                details.append(f"### {name}, {n} items\n")
                details.append("Examples: " + "; ".join(
                    f"`{r.greedy.text[:60]}`" for r in records[:5]) + "\n")
                details += [f"- {r.scorer}: AUROC {r.metrics['auroc'][0]:.3f} "
                            f"[{r.metrics['auroc'][1]:.3f}, {r.metrics['auroc'][2]:.3f}], "
                            f"PRR {r.metrics['prr'][0]:.3f}" for r in table.rows]
                details.append("")
    print("\n".join(lines), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prompting.md").write_text("\n".join(lines + [""] + details) + "\n")
    print(f"wrote {RESULTS / 'prompting.md'}")


if __name__ == "__main__":
    main()
