"""What each scorer costs against answer length and number of samples, on real generations.

The bundled model answers ``--items`` GSM8K questions (k-shot prompt, no stop
sequence, so answers run to ``max(--lengths)`` tokens unless the model ends
them), greedy + ``max(--samples)`` samples. Each cell of the grid then takes
the first L tokens of every answer (token statistics, ids and text cut
together) and the first k samples, and times on those records:

- every generation-only scorer of ``benchmarks/quality.py`` alone, from a
  fresh feature context and empty embedding caches, so each pays for the
  features it needs;
- the whole set in one context, as a run scores (shared features).

Generation time is measured in the same process: bare generation of greedy +
``--ratio-samples`` samples of at most ``max(--lengths)`` tokens on the first
``--ratio-items`` questions (default 8, one block of a run, so the generation
is batched as in a run), and the whole set's seconds per item on those records
divided by the generation's seconds per item is the ratio the issue's goal is
about (at most 1.0). ``--skip-grid`` measures only that ratio and replaces its
paragraph in an existing ``--out`` file. Each scorer's growth is the
log-log slope of its cost against tokens × answers (the length at the ratio's
sample count, then the samples at the longest length); 1 is linear, and a
slope is shown only where the cost is at least 5 ms an item::

    .venv/bin/python benchmarks/scoring_cost.py --items 2
    .venv/bin/python benchmarks/scoring_cost.py --items 2 --out benchmarks/results/scoring_cost.md
    .venv/bin/python benchmarks/scoring_cost.py --skip-grid --out benchmarks/results/scoring_cost.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from quality import QUALITY_SCORERS  # noqa: E402

from confide.backends import item_seed, load_backend  # noqa: E402
from confide.backends.base import GenerationSpec  # noqa: E402
from confide.core.records import Generation, Record  # noqa: E402
from confide.equivalence.judges import default_judge, make_judge  # noqa: E402
from confide.pipeline.answering import Pipeline  # noqa: E402
from confide.pipeline.scorer_plan import ScorerPlan, score_record  # noqa: E402
from confide.scorers import SCORERS, ScoringContext, run_scorer  # noqa: E402
from confide.tasks import load_task  # noqa: E402
from confide.text import embed_texts  # noqa: E402
from confide.text import embeddings as embedding_caches  # noqa: E402

SCORER_NAMES = QUALITY_SCORERS

_CUT = ("token_logprobs", "token_entropies", "token_kl_uniform", "token_renyi_uniform",
        "token_fisher_rao_uniform", "top_logprobs", "token_boosted_prob")


def cut(gen: Generation, length: int, decode: Any) -> Generation:
    """The first ``length`` tokens of ``gen``, every per-token column and the text with them."""
    if gen.n_tokens <= length:
        return gen
    columns = {name: None if getattr(gen, name) is None else getattr(gen, name)[:length]
               for name in _CUT}
    return replace(gen, text=decode(gen.token_ids[:length]).strip(),
                   token_ids=gen.token_ids[:length], tokens=gen.tokens[:length],
                   top_tokens=None if gen.top_tokens is None else gen.top_tokens[:length],
                   finish_reason="length", **columns)


def _empty_caches() -> None:
    embedding_caches._EMBED_CACHE.clear()
    embedding_caches._TOKEN_CACHE.clear()


def _records(items: list[Any], results: list[Any], length: int, k: int, decode: Any
             ) -> list[tuple[Record, Any]]:
    return [(Record(item=item, greedy=cut(r.greedy, length, decode),
                    samples=[cut(s, length, decode) for s in r.samples[:k]]), r.prompt)
            for item, r in zip(items, results, strict=True)]


def time_cell(records: list[tuple[Record, Any]], backend: Any, judge: Any, *, alone: bool = True
              ) -> tuple[dict[str, float], float]:
    """Seconds per item of each scorer alone (unless not ``alone``), and of the whole set
    in one context."""
    costs: dict[str, float] = {}
    for name in SCORER_NAMES if alone else ():
        spent = 0.0
        for record, prompt in records:
            _empty_caches()
            ctx = ScoringContext(backend=backend, judge=judge, seed=0, prompt=prompt)
            began = time.perf_counter()
            run_scorer(SCORERS[name], record, ctx)
            spent += time.perf_counter() - began
        costs[name] = spent / len(records)
    plan = ScorerPlan([SCORERS[name] for name in SCORER_NAMES])
    spent = 0.0
    for record, prompt in records:
        _empty_caches()
        ctx = ScoringContext(backend=backend, judge=judge, seed=0, prompt=prompt)
        began = time.perf_counter()
        score_record(Record(item=record.item, greedy=record.greedy, samples=record.samples),
                     plan, ctx)
        spent += time.perf_counter() - began
    return costs, spent / len(records)


def slope(costs: list[float], sizes: list[float]) -> float | None:
    """Log-log slope of cost against size; None where any cost is under 5 ms."""
    if len(costs) < 2 or min(costs) < 0.005:
        return None
    return float(np.polyfit(np.log(sizes), np.log(costs), 1)[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2)
    parser.add_argument("--task", default="gsm8k")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--lengths", default="8,32,128,256")
    parser.add_argument("--samples", default="5,10,20")
    parser.add_argument("--ratio-samples", type=int, default=10)
    parser.add_argument("--ratio-items", type=int, default=8)
    parser.add_argument("--skip-grid", action="store_true",
                        help="only the ratio to generation (its paragraph replaced in --out)")
    parser.add_argument("--judge", default=None, help="default: the task's own judge")
    parser.add_argument("--scorers", default=None, help="comma-separated; default: all of them")
    parser.add_argument("--relevance", choices=("sentence", "whole"), default="sentence",
                        help="whole: TokenSAR/MARS remove each unit from the whole answer "
                             "(the quadratic form) instead of from its sentence")
    parser.add_argument("--out", type=Path, default=None, help="write the table here (markdown)")
    args = parser.parse_args(argv)
    global SCORER_NAMES
    if args.scorers:
        SCORER_NAMES = tuple(args.scorers.split(","))
    if args.relevance == "whole":
        from confide.scorers import relevance

        relevance.removal_relevances.__kwdefaults__["window"] = None
    lengths = [int(x) for x in args.lengths.split(",")]
    ks = [int(x) for x in args.samples.split(",")]

    task = load_task(args.task)
    n_items = max(args.items, args.ratio_items)
    items = task.items[:n_items]
    backend = load_backend("hf", args.model, batch_size=8)
    judge_name = args.judge or default_judge(task.grader)
    judge = make_judge(judge_name, backend=backend)
    pipe = Pipeline.build(backend, [])
    seeds = [item_seed(0, it.id) for it in items]
    embed_texts(["load the embedding model before timing"])
    load = os.getloadavg()[0]

    def generate(n_questions: int, n: int) -> tuple[list[Any], float]:
        spec = GenerationSpec(max_new_tokens=max(lengths), n_samples=n, stop=())
        began = time.perf_counter()
        results = []
        for start in range(0, n_questions, 8):  # the run's blocks of 8 questions
            block = slice(start, min(start + 8, n_questions))
            results += pipe.generate(task, items[block], spec, seeds[block])
        return results, (time.perf_counter() - began) / n_questions

    pipe.generate(task, items[:1], GenerationSpec(max_new_tokens=4), seeds[:1])  # warm up
    decode = backend.tokenizer.decode
    ratio_results, ratio_generation = generate(args.ratio_items, args.ratio_samples)
    ratio_records = _records(items[:args.ratio_items], ratio_results, max(lengths),
                             args.ratio_samples, decode)
    ratio_tokens = float(np.mean([g.n_tokens for r, _ in ratio_records
                                  for g in [r.greedy, *r.samples]]))
    _, ratio_scoring = time_cell(ratio_records, backend, judge, alone=False)
    ratio = (f"**Against generation** ({args.ratio_items} questions in blocks of 8): generating "
             f"greedy + {args.ratio_samples} samples of at most {max(lengths)} tokens (mean "
             f"{ratio_tokens:.0f}) took {ratio_generation:.1f} s an item; the whole set scored "
             f"those answers in {ratio_scoring:.1f} s an item: "
             f"**{ratio_scoring / ratio_generation:.2f}×** the generation time (goal ≤ 1.0; "
             f"`scoring_cost.py --skip-grid`, load average {load:.1f} at start, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).")
    print(ratio, flush=True)
    if args.skip_grid:
        if args.out and args.out.exists():
            old = args.out.read_text().split("\n\n")
            args.out.write_text("\n\n".join(ratio if p.startswith("**Against generation**")
                                              else p for p in old))
        return
    results, _ = generate(args.items, max(ks))

    grid: dict[tuple[int, int], tuple[dict[str, float], float]] = {}
    mean_tokens: dict[int, float] = {}
    for length in lengths:
        for k in ks:
            records = _records(items[:args.items], results, length, k, decode)
            mean_tokens[length] = float(np.mean([g.n_tokens for r, _ in records
                                                 for g in [r.greedy, *r.samples]]))
            grid[length, k] = time_cell(records, backend, judge)
            print(f"L={length} k={k}: whole set {grid[length, k][1]:.2f} s/item", flush=True)

    command = " ".join(["benchmarks/scoring_cost.py",
                        *(argv if argv is not None else sys.argv[1:])])
    lines = [f"# Scoring cost: {len(SCORER_NAMES)} generation-only scorers against answer "
             "length and samples", "",
             f"`.venv/bin/python {command}` "
             f"({args.task}, {args.model}, judge `{judge_name}`, "
             f"{backend.config().get('dtype')}, load average {load:.1f} at start, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
             "", ratio, "",
             "Seconds per item; each scorer alone (fresh features, empty embedding caches); "
             "mean answer tokens per length: "
             + ", ".join(f"L={n}: {mean_tokens[n]:.0f}" for n in lengths) + ".", ""]
    k_ratio = args.ratio_samples if args.ratio_samples in ks else ks[len(ks) // 2]
    head = ["scorer", *[f"L={n} k={k_ratio}" for n in lengths],
            *[f"L={max(lengths)} k={k}" for k in ks if k != k_ratio], "slope (length)",
            "slope (samples)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [(name, lambda cell, name=name: cell[0][name]) for name in SCORER_NAMES]
    rows.append(("**whole set, one context**", lambda cell: cell[1]))
    for name, cost in rows:
        by_length = [cost(grid[n, k_ratio]) for n in lengths]
        by_k = [cost(grid[max(lengths), k]) for k in ks]
        s_len = slope(by_length, [mean_tokens[n] * (k_ratio + 1) for n in lengths])
        s_k = slope(by_k, [k + 1 for k in ks])
        cells = [f"{c:.3f}" for c in by_length]
        cells += [f"{cost(grid[max(lengths), k]):.3f}" for k in ks if k != k_ratio]
        cells += ["" if s is None else f"{s:.2f}" for s in (s_len, s_k)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
