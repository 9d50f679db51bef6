"""Reasoning replies: what confide costs on long traces, what DeepConf's stops save, and how
the trace confidences rank answers, on logs shaped like a reasoning model's and on the
bundled models' chain-of-thought answers to GSM8K.

Two parts, each reported with the load average (the machine is small and shared):

``--logs`` (default on): hand-written logs in the OpenAI chat format, shaped like the
replies of a reasoning model behind vLLM: a ``reasoning_content`` trace of
``--trace-tokens`` tokens on average (several thousand), its tokens' log-probabilities
listed before the answer's, the top ``--top`` alternatives at every step, a short final
answer ("The answer is N."), the greedy reply and ``--samples`` sampled replies per
question, and about 5 % of the sampled traces cut by the token budget (no final answer).
Each trace has a seeded hidden *quality*: its token probabilities rise with it, a few
stretches of low confidence fall where it is low, and its final answer is right with a
probability that rises with it. The logs are then imported with ``confide score``'s
function and everything below runs on the stored run:

- cost: import and scoring seconds per item (greedy + samples), and per 1,000 trace tokens;
- the AUROC of each trace scorer (and the answer-span ``msp``, and ``length``) with 95%
  bootstrap intervals: **these figures measure the generator's design, not any model**: a
  trace's confidence was made to carry its correctness. They show that the scorers read the
  trace end to end, not that DeepConf works; the published evidence is DeepConf's own
  (Fu et al. 2025: up to 84.7% fewer tokens at equal or better accuracy on AIME 2025);
- DeepConf offline (eta 10 and 90) and online (warm-up 4, consensus 0.95) against majority
  voting over every trace: accuracy and tokens, per the same caveat.

``--gsm8k MODEL`` (repeatable): the bundled model answers GSM8K with the chain-of-thought
prompt (``confide run --prompt cot --reasoning-tags "<think>,</think>"``) and samples; the
table says honestly how often it is right and how often it reaches a final answer.

``--live N``: DeepConf-online run live (``confide.deepconf``, ``prompt="cot"``) on the
first N GSM8K items with ``--live-model`` (the bundled SmolLM2): ``--live-warmup`` traces
generated whole set the threshold, later traces are stopped as they stream, up to
``--live-budget`` traces an item. Per item and overall: traces generated, stopped and
voting, the tokens generated against the full-budget estimate (the warm-up's mean length
times the budget), the confidence-weighted vote's answer and the plain majority's, and
their accuracy. ``--live-threshold`` fixes the threshold instead of the warm-up's
percentile (the stop's mechanics where no warm-up trace has a trace confidence).

    .venv/bin/python benchmarks/reasoning.py --items 40 --samples 8
    .venv/bin/python benchmarks/reasoning.py --no-logs --gsm8k smollm2 --gsm8k gemma3-270m \\
        --gsm8k-items 10 --gsm8k-samples 4
    .venv/bin/python benchmarks/reasoning.py --no-logs --live 3

Each run replaces the sections of the parts it ran in ``--out`` and keeps the others.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import confide
from confide.core.errors import CannotScore
from confide.metrics import bootstrap_interval
from confide.scorers.reasoning import DEEPCONF_WINDOW, TRACE_MEASURES, trace_confidence

TRACE_SCORERS = ("deepconf_mean", "deepconf_lowest_group", "deepconf_bottom10",
                 "deepconf_tail", "trace_length")
SCORERS = (*TRACE_SCORERS, "msp", "mean_logprob", "length")
WINDOW = 256  # group size of the DeepConf measures on these traces (the paper: 2048)


def _entry(token: str, top1: float, rng: np.random.Generator, top: int) -> dict[str, Any]:
    """One step: the chosen token with probability ``top1`` and ``top - 1`` alternatives
    sharing part of the rest of the mass (the listed mass stays below 1)."""
    rest = (1.0 - top1) * rng.uniform(0.5, 0.95)
    shares = rng.dirichlet(np.ones(top - 1)) * rest
    alts = [{"token": f" alt{j}", "logprob": float(np.log(max(s, 1e-9)))}
            for j, s in enumerate(sorted(shares, reverse=True))]
    chosen = {"token": token, "logprob": float(np.log(top1))}
    return {**chosen, "top_logprobs": [chosen, *alts]}


def _reply(rng: np.random.Generator, quality: float, truth: int, wrong: list[int], *,
           tokens: int, top: int, cut: bool) -> dict[str, Any]:
    """One reasoning reply of the given quality (a chat choice with reasoning_content)."""
    n = max(50, int(rng.normal(tokens, tokens / 4)))
    mean_top1 = 0.55 + 0.4 * quality
    top1 = np.clip(rng.beta(8 * mean_top1, 8 * (1 - mean_top1), size=n), 0.05, 0.995)
    for _ in range(rng.poisson(4 * (1 - quality))):  # stretches where the model hesitates
        start = int(rng.integers(0, n))
        top1[start:start + 64] = np.clip(rng.beta(2, 5, size=len(top1[start:start + 64])),
                                         0.05, 0.995)
    words = [f" w{int(w)}" for w in rng.integers(0, 5000, size=n)]
    steps = [_entry(w, float(p), rng, top) for w, p in zip(words, top1)]
    reasoning = "".join(words)
    if cut:
        return {"index": 0, "finish_reason": "length",
                "message": {"role": "assistant", "content": "", "reasoning_content": reasoning},
                "logprobs": {"content": steps}}
    right = rng.uniform() < 1 / (1 + math.exp(-8 * (quality - 0.5)))
    value = truth if right else int(rng.choice(wrong))
    answer = ["The", " answer", " is", f" {value}", "."]
    steps += [_entry(t, float(np.clip(rng.beta(9, 1), 0.05, 0.995)), rng, top)
              for t in answer]
    return {"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "".join(answer),
                        "reasoning_content": reasoning},
            "logprobs": {"content": steps}}


def write_logs(path: Path, *, items: int, samples: int, tokens: int, top: int,
               seed: int) -> dict[str, Any]:
    """The hand-written log: one OpenAI-format record per question, greedy + samples."""
    rng = np.random.default_rng(seed)
    written = {"items": items, "samples": samples, "trace_tokens": 0, "cut": 0}
    with path.open("w", encoding="utf-8") as f:
        for i in range(items):
            truth = int(rng.integers(10, 99))
            wrong = [truth + d for d in (-10, -1, 1, 7)]
            difficulty = rng.uniform(0.2, 0.8)
            choices = []
            for c in range(samples + 1):
                quality = float(np.clip(rng.normal(1 - difficulty, 0.2), 0.0, 1.0))
                cut = c > 0 and rng.uniform() < 0.05
                reply = _reply(rng, quality, truth, wrong, tokens=tokens, top=top, cut=cut)
                reply["index"] = c
                written["trace_tokens"] += len(reply["logprobs"]["content"])
                written["cut"] += int(cut)
                choices.append(reply)
            f.write(json.dumps({"custom_id": f"q{i}", "question": f"Question {i}?",
                                "references": [str(truth)],
                                "response": {"choices": choices}}) + "\n")
    return written


def _quiet(fn: Any, *args: Any, **kwargs: Any) -> float:
    try:
        return float(fn(*args, **kwargs))
    except CannotScore:
        return math.nan


def logs_part(args: argparse.Namespace, work: Path) -> list[str]:
    log = work / "reasoning_log.jsonl"
    load = os.getloadavg()[0]
    began = time.perf_counter()
    shape = write_logs(log, items=args.items, samples=args.samples, tokens=args.trace_tokens,
                       top=args.top, seed=args.seed)
    wrote = time.perf_counter() - began
    began, cpu = time.perf_counter(), time.process_time()
    confide.import_file(log, out=work / "run", scorers=list(SCORERS), workers=1)
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    run = confide.open_run(work / "run")
    table = run.compute_table(metrics=("auroc",), n_resamples=args.resamples)
    n_answers = args.items * (args.samples + 1)
    lines = [f"## Hand-written reasoning logs ({args.items} questions, greedy + {args.samples} "
             f"samples, {shape['trace_tokens'] / n_answers:,.0f} tokens a reply on average, "
             f"top {args.top}; {shape['cut']} sampled traces cut by the budget)", "",
             f"Load average {load:.1f} (2 CPUs). Log: {log.stat().st_size / 1e6:.0f} MB, "
             f"written in {wrote:.0f} s.", "",
             "| stage | wall s | CPU s | per question | per 1,000 tokens |",
             "|---|---:|---:|---:|---:|",
             f"| import + score + grade ({len(SCORERS)} scorers) | {wall:.1f} | {cpu:.1f} | "
             f"{wall / args.items:.2f} s | {1000 * wall / shape['trace_tokens']:.3f} s |", "",
             "AUROC of each scorer on the greedy replies (95% bootstrap intervals; the "
             "generator's design, not a model: see the module docstring):", "",
             "| scorer | span | AUROC | NaN |", "|---|---|---|---:|"]
    spans = {s.name: getattr(s, "span", "answer") for s in confide.list_scorers()}
    for row in sorted(table.rows, key=lambda r: -np.nan_to_num(r.metrics["auroc"][0])):
        p, lo, hi = row.metrics["auroc"]
        lines.append(f"| {row.scorer} | {spans.get(row.scorer, '?')} | "
                     f"{p:.3f} [{lo:.3f}, {hi:.3f}] | {row.n_nan} |")
    graded = [r for r in run.records if r.grades]
    correct = np.array([next(iter(r.grades.values())) >= 0.5 for r in graded], dtype=float)
    for measure in TRACE_MEASURES:  # the same measures with windows these traces can fill
        conf = np.array([_quiet(trace_confidence, r.greedy, measure, window=WINDOW)
                         for r in graded])
        keep = ~np.isnan(conf)
        iv = bootstrap_interval("auroc", conf[keep], correct[keep], n_resamples=args.resamples)
        lines.append(f"| deepconf_{measure}, window {WINDOW} | trace | {iv.point:.3f} "
                     f"[{iv.low:.3f}, {iv.high:.3f}] | {int((~keep).sum())} |")
    lines += ["", f"The registered scorers use the paper's window of {DEEPCONF_WINDOW} tokens, "
              "one window for most of these traces; the rows with a window of "
              f"{WINDOW} compute the same measures with groups these traces can fill."]
    lines += ["", f"Accuracy of the greedy replies: {table.accuracy[0]:.3f} "
              f"[{table.accuracy[1]:.3f}, {table.accuracy[2]:.3f}].", "",
              "| vote | accuracy | trace tokens | of all |", "|---|---:|---:|---:|"]
    for eta in (90.0, 10.0):
        off = confide.compare_filtered_votes(run, eta=eta, measure="bottom10", window=WINDOW)
        if eta == 90.0:
            lines.append(f"| majority over every trace | {off.majority:.3f} | "
                         f"{off.tokens_all:,} | 100% |")
        lines.append(f"| DeepConf offline, keep top {eta:.0f}% by bottom-10% group "
                     f"confidence | {off.filtered:.3f} | {off.tokens_kept:,} (generated: all) "
                     f"| {off.tokens_kept / off.tokens_all:.0%} |")
    for eta in (90.0, 10.0):
        on = confide.replay_deepconf_online(run, warmup=4, eta=eta, consensus=0.95,
                                            window=WINDOW)
        lines.append(f"| DeepConf online (warm-up 4, eta {eta:.0f}, consensus 0.95) | "
                     f"{on.online:.3f} | {on.tokens:,} | {on.tokens / on.tokens_all:.0%} "
                     f"(saved {on.saved_share:.0%}; {on.n_reached} items stopped at consensus) |")
    return lines


def gsm8k_part(args: argparse.Namespace, work: Path) -> list[str]:
    lines = ["## GSM8K with the chain-of-thought prompt, bundled models", "",
             "| model | items | samples | accuracy | with a final answer | trace tokens | "
             "answer tokens | s / item | load |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for model in args.gsm8k:
        load = os.getloadavg()[0]
        began = time.perf_counter()
        run = confide.generate_and_evaluate(
            model, task="gsm8k", limit=args.gsm8k_items, n_samples=args.gsm8k_samples,
            task_options={"prompt": "cot"}, reasoning_tags="<think>,</think>",
            max_new_tokens=args.max_new_tokens,
            scorers=list(SCORERS), out=work / f"gsm8k-{model}")
        seconds = time.perf_counter() - began
        records = run.records
        answered = [r for r in records if r.greedy.text.strip()]
        traces = [r.greedy.trace.n_tokens for r in records if r.greedy.trace is not None]
        acc = run.table.accuracy
        lines.append(f"| {model} | {len(records)} | {args.gsm8k_samples} | "
                     f"{acc[0]:.2f} [{acc[1]:.2f}, {acc[2]:.2f}] | "
                     f"{len(answered)}/{len(records)} | "
                     f"{np.mean(traces) if traces else 0:.0f} | "
                     f"{np.mean([r.greedy.n_tokens for r in answered]) if answered else 0:.0f} "
                     f"| {seconds / max(1, len(records)):.0f} | {load:.1f} |")
    lines += ["", "At this size the accuracy intervals are wide; where no answer is right no "
              "scorer can be ranked, and the run shows the mechanics only (two spans, missing "
              "final answers left ungraded, the trace scorers' values)."]
    return lines


def _short(answer: str | None, grade: float | None, item: Any) -> str:
    """An answer for a table cell: the number the grader reads, with its grade."""
    from confide.scorers.final_answer import extract_final_answer

    if answer is None:
        return "none"
    text = " ".join((extract_final_answer(answer, item) or answer).split()).replace("|", "/")
    text = text if len(text) <= 24 else text[:23] + "…"  # one line of a table cell
    return text + ("" if grade is None else f" ({grade:.0f})")


def _closed(trace: Any) -> bool:
    """A trace generated whole that closed its ``<think>`` tag and gave a final answer."""
    return trace.stopped_at is None and trace.trace_tokens > 0 and bool(trace.answer)


def live_command(args: argparse.Namespace) -> str:
    """The command line of the live part (options only: no machine path)."""
    parts = [".venv/bin/python benchmarks/reasoning.py --no-logs", f"--live {args.live}",
             f"--live-model {args.live_model}", f"--live-warmup {args.live_warmup}",
             f"--live-budget {args.live_budget}",
             f"--live-max-new-tokens {args.live_max_new_tokens}",
             f"--live-window {args.live_window}", f"--live-eta {args.live_eta:g}"]
    if args.live_threshold is not None:
        parts.append(f"--live-threshold {args.live_threshold:g}")
    return " ".join(parts)


def live_part(args: argparse.Namespace) -> list[str]:
    from confide.tasks.loading import load_task

    items = load_task("gsm8k", limit=args.live).items
    load = os.getloadavg()[0]
    model = confide.load_model(args.live_model)
    rows, outs = [], []
    began = time.perf_counter()
    for item in items:
        out = confide.deepconf(model, item, prompt="cot", warmup=args.live_warmup,
                               budget=args.live_budget, eta=args.live_eta,
                               window=args.live_window, threshold=args.live_threshold,
                               max_new_tokens=args.live_max_new_tokens, seed=args.seed)
        outs.append(out)
        opened = sum(1 for t in out.traces if t.trace_tokens > 0)
        closed = sum(1 for t in out.traces if _closed(t))
        rows.append(f"| {item.id} | {out.count('generated')} | {opened} | {closed} | "
                    f"{out.count('stopped')} | {out.count('voted')} | "
                    f"{'–' if not math.isfinite(out.threshold) else f'{out.threshold:.3f}'} | "
                    f"{out.tokens:,} | {out.tokens_full:,.0f} | "
                    f"{out.saved_share:.0%} | {_short(out.answer, out.correct, item)} | "
                    f"{_short(out.majority, out.majority_correct, item)} |")
        print(rows[-1], flush=True)
    wall = time.perf_counter() - began
    n = len(outs)
    tokens = sum(o.tokens for o in outs)
    full = sum(o.tokens_full for o in outs)
    vote_right = sum(1 for o in outs if o.correct is not None and o.correct >= 0.5)
    major_right = sum(1 for o in outs if o.majority_correct is not None
                      and o.majority_correct >= 0.5)
    no_vote = sum(1 for o in outs if o.answer is None)
    no_major = sum(1 for o in outs if o.majority is None)
    notes = sorted({note for o in outs for note in o.notes})
    generated = sum(o.count("generated") for o in outs)
    opened = sum(1 for o in outs for t in o.traces if t.trace_tokens > 0)
    closed = sum(1 for o in outs for t in o.traces if _closed(t))
    bare = sum(1 for o in outs for t in o.traces if t.trace_tokens == 0 and t.answer)
    threshold = ("fixed at " + f"{args.live_threshold:g}" if args.live_threshold is not None
                 else f"the {100 - args.live_eta:g}th percentile of the warm-up traces' lowest "
                 "group confidences")
    lines = [f"## Live DeepConf-online, GSM8K, {args.live_model} ({n} items)", "",
             f"    {live_command(args)}", "",
             f"{time.strftime('%Y-%m-%d', time.gmtime())}, shared 2-core CPU, load average "
             f"{load:.1f}, {wall / 60:.1f} min ({wall / max(1, n):.0f} s an item). "
             f"`confide.deepconf(prompt=\"cot\")`: {args.live_warmup} warm-up traces, at most "
             f"{args.live_budget} traces an item, {args.live_max_new_tokens} new tokens a "
             f"trace, group window {args.live_window} trace tokens, threshold {threshold}, "
             "consensus 0.95, numeric grader. *Opened*: replies that opened a `<think>` "
             "trace; *closed*: opened, generated whole, a final answer after the closing "
             "tag; *vote*: the confidence-weighted vote's answer, *majority*: the plain "
             "majority over the traces generated whole (each answer as "
             "`extract_final_answer` reads it, graded 1 or 0 by the numeric grader); "
             "*estimate*: the warm-up's mean length times the budget (not a measurement).", "",
             "| item | traces | opened | closed | stopped | voted | threshold | tokens | "
             "estimate | saved | vote (graded) | majority (graded) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|", *rows,
             f"| **all** | {generated} | {opened} | {closed} | "
             f"{sum(o.count('stopped') for o in outs)} | {sum(o.count('voted') for o in outs)} "
             f"| | {tokens:,} | {full:,.0f} | {(full - tokens) / full if full else math.nan:.0%} "
             f"| {vote_right}/{n} right ({no_vote} without an answer) | {major_right}/{n} right "
             f"({no_major} without an answer) |", ""]
    if notes:
        lines += ["Notes of the runs: " + "; ".join(notes) + ".", ""]
    lines += ["What this cannot show: the bundled model rarely closes a `<think>` trace "
              f"({closed} of the {opened} traces it opened here reached a final answer after "
              f"the closing tag; {bare} of {generated} replies answered without a trace, "
              "which has no trace confidence either), so few "
              "traces have a trace confidence, the warm-up often sets no threshold (then no "
              "trace is stopped) and the vote has little to weigh; and it is almost never "
              "right, so the accuracy of the vote against the majority cannot be compared. "
              + ("The section shows the mechanics on a real model (traces stopped as they "
                 "stream, tokens against the estimate, both votes graded)"
                 if any(o.count("stopped") for o in outs) else
                 "Here no trace was stopped, so the section shows the loop around the stop "
                 "on a real model (warm-up, threshold, both votes graded, tokens against the "
                 "estimate); the stop itself is shown on the bundled model with a fixed "
                 "threshold by tests/decisions/test_deepconf_live.py and "
                 "tests/test_thinking_stream.py (`--live-threshold` does it here)")
              + "; the claim that the stop saves tokens at equal accuracy rests on DeepConf's "
              "published figures (Fu et al. 2025)."]
    return lines


_SECTIONS = {"logs": "## Hand-written", "gsm8k": "## GSM8K", "live": "## Live DeepConf"}


def _merge(old: str, new: dict[str, list[str]]) -> str:
    """``old`` with each section in ``new`` (by its heading's start) replaced, or appended."""
    text = old.rstrip() + "\n"
    for part, lines in new.items():
        head = _SECTIONS[part]
        body = "\n".join(lines).rstrip() + "\n"
        start = text.find("\n" + head)
        if start < 0:
            text = text.rstrip() + "\n\n" + body
            continue
        end = text.find("\n## ", start + 1)
        text = text[:start + 1] + body + ("" if end < 0 else "\n" + text[end + 1:])
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--trace-tokens", type=int, default=2000)
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--gsm8k", action="append", default=[], help="bundled model (repeatable)")
    ap.add_argument("--gsm8k-items", type=int, default=10)
    ap.add_argument("--gsm8k-samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--live", type=int, default=0, help="GSM8K items of live DeepConf")
    ap.add_argument("--live-model", default="smollm2")
    ap.add_argument("--live-warmup", type=int, default=2)
    ap.add_argument("--live-budget", type=int, default=4)
    ap.add_argument("--live-max-new-tokens", type=int, default=96)
    ap.add_argument("--live-window", type=int, default=32)
    ap.add_argument("--live-eta", type=float, default=10.0)
    ap.add_argument("--live-threshold", type=float, default=None)
    ap.add_argument("--dir", type=Path, help="work folder (default: a temp)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "reasoning.md")
    args = ap.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="confide-reasoning-"))
    work.mkdir(parents=True, exist_ok=True)
    header = ["# Reasoning replies: cost, DeepConf's stops, trace confidences", "",
              "Written by `benchmarks/reasoning.py` (its docstring says what each part "
              f"measures), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
              "The AUROC and vote figures of the hand-written logs measure the generator (each "
              "trace was made so that its confidence carries its correctness), not a model: "
              "they show that every scorer and vote reads traces of this size end to end, and "
              "what each costs. The published evidence for DeepConf is its paper's (Fu et al. "
              "2025).", ""]
    parts: dict[str, list[str]] = {}
    if args.logs:
        parts["logs"] = logs_part(args, work)
    if args.gsm8k:
        parts["gsm8k"] = gsm8k_part(args, work)
    if args.live:
        parts["live"] = live_part(args)
    print("\n\n".join("\n".join(lines) for lines in parts.values()))
    # the parts that ran replace their sections; the header and the other parts stay
    old = args.out.read_text(encoding="utf-8") if args.out.exists() else "\n".join(header)
    args.out.write_text(_merge(old, parts), encoding="utf-8")


if __name__ == "__main__":
    main()
