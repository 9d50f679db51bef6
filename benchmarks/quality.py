"""The quality table: which scorer predicts correctness on which task, for both bundled models.

For every built-in task and both bundled models (SmolLM2-135M-Instruct and
Gemma-3-270m) this runs greedy + ``--samples`` sampled answers on ``--items``
items (the full data file under ``$CONFIDE_DATA_DIR`` where set, else the
bundled sample), with every registered scorer that needs only the generations
(token statistics and samples: no second prompt, no hidden states, no
training), through the ordinary run loop (:func:`confide.runs.execution.execute`), so
each piece is stored as it goes and resumes after a kill. Then it writes
``benchmarks/results/quality.md`` from whatever is stored:

- per task and model: accuracy, each scorer's AUROC and PRR with 95% bootstrap
  intervals and the length baseline (:func:`confide.evaluation.table.evaluate_records`,
  the table of ``confide eval``); the best scorer by AUROC is marked only where
  the paired bootstrap puts every other scorer's difference to it below zero (the
  best is chosen on the same items, so the mark is post-selection: descriptive,
  not a test at its nominal level; ``confide.evaluation.table.POST_SELECTION``);
- a task where the model is at chance (multiple choice: accuracy interval
  reaching 1/number of options; open answers: fewer than ``MIN_POSITIVES``
  right) is flagged and left out of every ranking;
- the learned combination (``benchmarks/combiner.py``) and two models on the
  same items (``benchmarks/combiner.py`` too: cascade and cross-model
  agreement) are appended when ``--sections`` asks for them.

The machine is small and shared, so the table is built in pieces::

    CONFIDE_DATA_DIR=<data folder> nice -n 10 .venv/bin/python benchmarks/quality.py \\
        --task triviaqa --model smollm2 --items 500 --max-minutes 30
    .venv/bin/python benchmarks/quality.py --report-only

``--max-minutes`` stops a piece after the block in progress (everything
finished is stored; the same command resumes it). Each piece's wall time,
items generated and load average are appended to
``benchmarks/results/quality_timings.json`` and shown in the table, with the
number of items actually stored next to the number planned.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from confide.core.errors import ConfideError
from confide.evaluation.table import LENGTH_BASELINE, EvalTable
from confide.pipeline.plan import RunConfig
from confide.runs.execution import execute
from confide.runs.stored import open_run
from confide.scorers import SCORERS, Need
from confide.tasks import TASKS

MODELS = ("smollm2", "gemma3-270m")
EVIDENCE = Path(__file__).resolve().parents[1] / "src/confide/evaluation/quality.json"
# Each built-in task's full upstream file, relative to $CONFIDE_DATA_DIR.
FULL_DATA = {"triviaqa": "triviaqa/triviaqa_sm_sub.jsonl", "gsm8k": "gsm8k/test.jsonl",
             "truthfulqa": "truthfulqa/TruthfulQA.csv", "mmlu": "mmlu",
             "commonsense_qa": "commonsense_qa/commonsense_qa.jsonl",
             "arc_easy": "arc/arc_easy.jsonl", "boolq": "boolq/boolq.jsonl", "bfcl": "bfcl"}
# Scorers that need more than the generations are left out (cost of a second prompt per
# item, hidden states, or fitting): see the module docstring.
_LEFT_OUT = {Need.EXTRA_PROMPT, Need.HIDDEN_STATES, Need.TRAINING}
QUALITY_SCORERS = tuple(sorted(spec.name for spec in SCORERS.values()
                               if spec.level == "answer" and not (spec.needs & _LEFT_OUT)))
#: An open-answer task with fewer right answers than this cannot rank scorers.
MIN_POSITIVES = 10
RESULTS = Path(__file__).parent / "results"


def piece_dir(out: Path, task: str, model: str, items: int, samples: int) -> Path:
    """One run directory per (task, model, size): a different size is a different run."""
    return out / f"{task}-{model}-n{items}-k{samples}"


def _data_path(task: str) -> str | None:
    root = os.environ.get("CONFIDE_DATA_DIR")
    if not root:
        return None
    path = Path(root) / FULL_DATA[task]
    return str(path) if path.exists() else None


class _TimeUp(Exception):
    """Raised from the progress callback to stop a piece after its block (all stored)."""


def run_piece(task: str, model: str, *, items: int, samples: int, out: Path,
              max_minutes: float | None, batch_size: int) -> dict[str, Any]:
    """Run (or resume) one piece; returns its timing entry."""
    config = RunConfig(model=model, task=task, data_path=_data_path(task), limit=items,
                       scorers=QUALITY_SCORERS, n_samples=samples, batch_size=batch_size,
                       seed=0)
    target = piece_dir(out, task, model, items, samples)
    began = time.perf_counter()
    done = [0, 0]

    def progress(stored: int, total: int) -> None:
        done[:] = [stored, total]
        print(f"  {task} × {model}: {stored}/{total} stored "
              f"({time.perf_counter() - began:.0f} s)", flush=True)
        if max_minutes is not None and time.perf_counter() - began > 60 * max_minutes:
            raise _TimeUp

    load = os.getloadavg()[0]
    generated, stopped = 0, False
    try:
        outcome = execute(config, target, progress=progress)
        generated = outcome.generated
    except _TimeUp:
        stopped = True
    seconds = time.perf_counter() - began
    entry = {"task": task, "model": model, "planned": items, "samples": samples,
             "stored_after": done[0], "stopped_by_time_limit": stopped,
             "seconds": round(seconds, 1), "load_average_at_start": round(load, 1),
             "data": "full file" if config.data_path else "bundled sample",
             "finished_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if not stopped:
        entry["generated"] = generated
    return entry


# ------------------------------------------------------------------ the table


@dataclass
class Piece:
    """A stored piece and its evaluation."""

    task: str
    model: str
    path: Path
    planned: int
    samples: int
    table: EvalTable
    chance: float | None  # multiple choice: 1 / options
    data: str

    @property
    def n(self) -> int:
        return self.table.n_graded

    @property
    def n_correct(self) -> int:
        return int(round(self.table.accuracy[0] * self.table.n_graded))

    @property
    def at_chance(self) -> str | None:
        """Why this piece cannot rank scorers, or None."""
        acc, low, _ = self.table.accuracy
        if self.chance is not None and low <= self.chance:
            return (f"at chance: accuracy {acc:.2f} [{low:.2f}, {self.table.accuracy[2]:.2f}] "
                    f"reaches 1/options = {self.chance:.2f}")
        if self.n_correct < MIN_POSITIVES:
            return f"only {self.n_correct} right answers (< {MIN_POSITIVES})"
        if self.n - self.n_correct < MIN_POSITIVES:
            return f"only {self.n - self.n_correct} wrong answers (< {MIN_POSITIVES})"
        return None

    def ranked_rows(self) -> list[Any]:
        """The compared scorers by AUROC on the items all of them scored (the table's
        comparison; scorers with few values are left out of every ranking)."""
        rows = [r for r in self.table.rows if r.scorer in self.table.comparison.scorers
                and not math.isnan(r.common_auroc)]
        return sorted(rows, key=lambda r: -r.common_auroc)

    def significant_best(self) -> str | None:
        """The best scorer by AUROC when every other one is significantly below it."""
        rows = self.ranked_rows()
        if self.at_chance or len(rows) < 2:
            return None
        best = rows[0]
        for r in rows[1:]:
            if r.vs_best is None or r.vs_best.get("best") != best.scorer \
                    or not r.vs_best["high"] < 0:
                return None
        return best.scorer


def _chance(records: list[Any]) -> float | None:
    sizes = [len(r.item.metadata.get("choices", [])) for r in records]
    if not sizes or min(sizes) < 2:
        return None
    return float(np.mean([1.0 / s for s in sizes]))


def load_pieces(outs: list[Path], n_resamples: int) -> list[Piece]:
    """Every stored run under the ``outs`` folders (for a task, model and number of samples,
    the one with most records)."""
    best: dict[tuple[str, str, int], tuple[int, Path]] = {}
    for path in sorted(p for out in outs for p in out.glob("*/run.sqlite")):
        run = open_run(path.parent)
        key = (str(run.config.get("task", {}).get("name")), str(run.config["model"]),
               int(run.config.get("n_samples") or 0))
        count = len(run.records)
        if count and count > best.get(key, (0, path))[0]:
            best[key] = (count, path.parent)
    pieces = []
    for (task, model, _), (_, path) in sorted(best.items()):
        run = open_run(path)
        table = run.compute_table(metrics=("auroc", "prr"), n_resamples=n_resamples)
        pieces.append(Piece(task, model, path, int(run.config.get("limit") or 0),
                            int(run.config.get("n_samples") or 0), table,
                            _chance(run.records),
                            "full file" if run.config.get("data_path") else "bundled sample"))
    return pieces


def _iv(v: tuple[float, float, float]) -> str:
    point, low, high = v
    if math.isnan(point):
        return "–"
    return f"{point:.3f} [{low:.3f}, {high:.3f}]" if not math.isnan(low) else f"{point:.3f}"


def _timings(results: Path) -> list[dict[str, Any]]:
    path = results / "quality_timings.json"
    return json.loads(path.read_text()) if path.exists() else []


def summary_rows(pieces: list[Piece]) -> list[list[str]]:
    """One line per task × model: the main table (also in the README)."""
    rows = []
    for p in pieces:
        ranked = p.ranked_rows()
        top = next((r for r in ranked if not r.baseline), None)
        length = next((r for r in ranked if r.baseline), None)
        sig = p.significant_best()
        rows.append([p.task, p.model, f"{p.n}", str(p.samples), _iv(p.table.accuracy),
                     "–" if top is None else top.scorer + (" (significant)" if sig else ""),
                     "–" if top is None else _iv(top.metrics["auroc"]),
                     "–" if length is None else _iv(length.metrics["auroc"]),
                     p.at_chance or "ranked"])
    return rows


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(r) + " |" for r in rows]]


def render(pieces: list[Piece], timings: list[dict[str, Any]], n_resamples: int) -> str:
    lines = ["# Quality of confide's scorers, per task and model", "",
             "Written by `benchmarks/quality.py` from the runs stored under its `--out` "
             "folder; every figure below is recomputed from those runs. Correct = the task's "
             "grader (grade >= 0.5). Intervals are 95% percentile bootstrap intervals "
             f"({n_resamples} resamples). A best scorer is named *significant* only where "
             "the paired "
             "bootstrap of AUROC puts every other scorer's difference to it below zero; "
             "the best is chosen on the same items, so the mark is post-selection "
             "(the winner's curse): a description of the lead, not a test at its nominal "
             "level. "
             f"Tasks where the model is at chance (or with fewer than {MIN_POSITIVES} right "
             "or wrong answers) are flagged and left out of every ranking.", "",
             f"Scorers: the {len(QUALITY_SCORERS)} registered scorers that need only the "
             "generations (greedy token statistics and the sampled answers). Left out: "
             "scorers that ask the model a second question (P(True), verbalized confidence, "
             "LLM judges), need hidden states (EigenScore) or training (probes; the "
             "combiner has its own section).", ""]
    lines += ["## Summary", ""]
    lines += _md_table(["task", "model", "items", "samples", "accuracy", "top scorer by AUROC",
                        "its AUROC", "length baseline AUROC", "status"], summary_rows(pieces))
    lines += ["", _ranking(pieces), ""]
    lines += ["## What was run", ""]
    trows = []
    for t in timings:
        trows.append([t["task"], t["model"], str(t["planned"]), str(t["samples"]),
                      t.get("data", ""), str(t["stored_after"]), f"{t['seconds'] / 60:.1f}",
                      str(t.get("load_average_at_start", "")),
                      "time limit" if t["stopped_by_time_limit"] else "complete",
                      t.get("finished_at", "")])
    lines += _md_table(["task", "model", "planned items", "samples", "data",
                        "stored after", "minutes", "load avg at start", "ended by",
                        "finished"], trows)
    lines += ["", "Minutes are wall time on a 2-core machine, shared with whatever else ran "
              "then (load average column): that share's time, not confide's speed.", ""]
    for p in pieces:
        lines += _piece_section(p)
    return "\n".join(lines) + "\n"


def _triple(v: tuple[float, float, float]) -> list[float | None]:
    return [None if math.isnan(x) else round(float(x), 4) for x in v]


def evidence(pieces: list[Piece], n_resamples: int) -> dict[str, Any]:
    """The quality table as data: per piece, each compared scorer's AUROC and PRR with
    their intervals, its rank (1 = best AUROC on the items all compared scorers scored),
    the paired AUROC difference to the best, and whether it beats the length baseline
    on the items both scored (and whether that lead vanishes within length strata);
    ``status`` is ``"ranked"`` or why the piece ranks nothing."""
    out = []
    for p in pieces:
        rows = p.ranked_rows()
        out.append({
            "task": p.task, "model": p.model, "items": p.n, "samples": p.samples,
            "data": p.data, "accuracy": _triple(p.table.accuracy),
            "status": p.at_chance or "ranked", "significant_best": p.significant_best(),
            "scorers": [{"scorer": r.scorer, "rank": i, "auroc": _triple(r.metrics["auroc"]),
                         "prr": _triple(r.metrics["prr"]), "n_nan": int(r.n_nan),
                         "beats_length": r.audit.get("lead"),
                         "lead_vanishes_within_lengths": r.audit.get("lead_vanishes"),
                         "vs_best": None if r.vs_best is None else {
                             k: r.vs_best[k] for k in ("diff", "low", "high")
                             if k in r.vs_best}}
                        for i, r in enumerate(rows, start=1)]})
    return {"written_by": "benchmarks/quality.py --report-only",
            "interval": f"95% percentile bootstrap, {n_resamples} resamples",
            "length_baseline": LENGTH_BASELINE, "pieces": out}


def _ranking(pieces: list[Piece]) -> str:
    ranked = [p for p in pieces if not p.at_chance and p.samples]
    if not ranked:
        return ("No piece with samples is above chance with enough right and wrong answers: "
                "no ranking across pieces.")
    ranks: dict[str, list[int]] = {}
    for p in ranked:
        if p.samples == 0:  # ranks over the same scorer set only
            continue
        for i, r in enumerate(p.ranked_rows(), start=1):
            ranks.setdefault(r.scorer, []).append(i)
    order = sorted(ranks, key=lambda s: (np.mean(ranks[s]), s))[:8]
    return ("Mean AUROC rank over the ranked pieces (" + ", ".join(
        f"{p.task}×{p.model}" for p in ranked) + "): " + "; ".join(
        f"{s} {np.mean(ranks[s]):.1f}" for s in order) + ".")


def _piece_section(p: Piece) -> list[str]:
    acc = p.table.accuracy
    head = [f"## {p.task} × {p.model}" + (" (greedy only)" if not p.samples else ""), "",
            f"{p.n} graded items stored of {p.planned} planned ({p.data}); greedy + "
            f"{p.samples} samples; accuracy {_iv(acc)} ({p.n_correct} right)"
            + (f"; chance 1/options = {p.chance:.2f}" if p.chance is not None else "") + ". "
            + (f"**{p.at_chance}: not ranked.**" if p.at_chance else
               (f"Best scorer: **{p.significant_best()}** (every other scorer significantly "
                "below it by paired bootstrap)." if p.significant_best() else
                "No scorer leads all others significantly (paired bootstrap of AUROC)."))
            + f" Run: `{p.path}`.", ""]
    rows = []
    for r in p.ranked_rows():
        vs = r.vs_best
        diff = "best" if vs is None else (
            f"{vs['diff']:+.3f} [{vs['low']:+.3f}, {vs['high']:+.3f}]")
        rows.append([r.scorer + (" (baseline)" if r.scorer == LENGTH_BASELINE else ""),
                     _iv(r.metrics["auroc"]), _iv(r.metrics["prr"]), diff, str(r.n_nan)])
    return head + _md_table(["scorer", "AUROC", "PRR", "AUROC − best (paired)", "NaN"],
                            rows) + [""]


# ------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", action="append", help="task(s) to run (repeatable; default all)")
    ap.add_argument("--model", action="append", help="model(s) (default: both bundled)")
    ap.add_argument("--items", type=int, default=500, help="items per piece (default 500)")
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-minutes", type=float, help="stop each piece after this long")
    ap.add_argument("--out", type=Path, default=Path("runs/quality"),
                    help="folder of the pieces (and where new ones are stored)")
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="--report-only: other folders of stored runs to include (e.g. "
                         "runs/prompting, greedy-only runs of the default scorers)")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the table")
    ap.add_argument("--no-table", action="store_true",
                    help="only run the pieces (queue several, then one --report-only)")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of quality.md")
    ap.add_argument("--evidence", type=Path, default=EVIDENCE,
                    help="the same figures as JSON, shipped in the package for "
                         "confide.recommend and the docs' scorer table")
    args = ap.parse_args(argv)

    tasks = args.task or list(TASKS)
    models = args.model or list(MODELS)
    args.results.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for task in tasks:
            for model in models:
                print(f"{task} × {model}: {args.items} items, {args.samples} samples",
                      flush=True)
                try:
                    entry = run_piece(task, model, items=args.items, samples=args.samples,
                                      out=args.out, max_minutes=args.max_minutes,
                                      batch_size=args.batch_size)
                except ConfideError as exc:
                    print(f"  {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                timings = _timings(args.results) + [entry]
                (args.results / "quality_timings.json").write_text(json.dumps(timings, indent=1))
                print(f"  {entry}", flush=True)
    if args.no_table:
        return
    pieces = load_pieces([args.out, *args.also], args.resamples)
    text = render(pieces, _timings(args.results), args.resamples)
    (args.results / "quality.md").write_text(text)
    print(f"wrote {args.results / 'quality.md'} ({len(pieces)} pieces)")
    if args.evidence is not None:
        args.evidence.write_text(json.dumps(evidence(pieces, args.resamples), indent=1) + "\n")
        print(f"wrote {args.evidence}")


if __name__ == "__main__":
    main()
