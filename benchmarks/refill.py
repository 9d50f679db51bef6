"""Continuous batching against groups that only evict: decoding passes and rows per pass.

Counts, for the same answers, the forward passes of ``HFBackend`` (rows
enter as others finish) and of the schedule before it (rows cut into
groups of at most ``rows per step`` rows, a question's rows kept together
unless they alone exceed it, each group prefilled and decoded until its
longest row ends, finished rows evicted). Counts do not depend on the
machine's load: at the same rows per step, time follows passes x cost of a
pass, and a pass of fewer rows costs less only while the step is
memory-bound. Prints passes, prefills, mean rows per pass and wall time.

    .venv/bin/python benchmarks/refill.py --items 8 --samples 10 --max-new-tokens 24
"""

from __future__ import annotations

import argparse
import time

from confide.backends.base import GenerationSpec, item_seed
from confide.backends.hf import HFBackend
from confide.tasks import load_task


def grouped_passes(lengths: list[list[int]], limit: int, batch_size: int) -> tuple[int, int, int]:
    """(decoding passes, prefills, row-steps) of the previous schedule for these answer lengths.

    ``lengths[q]`` holds the tokens each row of question q made (its end token included).
    """
    groups: list[list[int]] = []
    current: list[int] = []
    questions = 0
    for rows in lengths:
        rows = list(rows)
        if current and (len(current) + len(rows) > limit or questions == batch_size):
            groups.append(current)
            current, questions = [], 0
        while len(rows) > limit:
            groups.append(rows[:limit])
            rows = rows[limit:]
        current += rows
        questions += 1
    groups.append(current)
    passes = sum(max(g) - 1 for g in groups)
    # a group's step holds the rows still unfinished: row of length n is in n - 1 passes
    row_steps = sum(n - 1 for g in groups for n in g)
    return passes, len(groups), row_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--max-rows", type=int, default=None,
                        help="rows per step (default: the backend's measured choice)")
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()

    backend = HFBackend(args.model, batch_size=args.batch_size, max_rows=args.max_rows)
    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=backend.has_chat_template) for it in task.items]
    spec = GenerationSpec(max_new_tokens=args.max_new_tokens, stop=tuple(task.stop),
                          n_samples=args.samples, temperature=1.0, top_p=0.9)
    calls: list[tuple[int, int]] = []
    handle = backend.model.get_decoder().register_forward_pre_hook(
        lambda module, a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    passes = prefills = row_steps = 0
    old_passes = old_prefills = old_row_steps = 0
    began = time.perf_counter()
    for start in range(0, len(prompts), args.batch_size):  # the runner's blocks
        block = prompts[start:start + args.batch_size]
        encoded = [backend.encode(p) for p in block]
        limit = backend.rows_per_step(max(map(len, encoded)) + args.max_new_tokens,
                                      len(block) * (1 + args.samples))
        calls.clear()
        results = backend.generate(block, spec, [item_seed(0, it.id) for it in
                                                 task.items[start:start + args.batch_size]])
        passes += sum(1 for c in calls if c[1] == 1)
        prefills += sum(1 for c in calls if c[1] > 1)
        row_steps += sum(c[0] for c in calls if c[1] == 1)
        lengths = [[g.n_tokens + (g.finish_reason == "stop") for g in [r.greedy, *r.samples]]
                   for r in results]
        p, f, s = grouped_passes(lengths, limit, args.batch_size)
        old_passes, old_prefills, old_row_steps = old_passes + p, old_prefills + f, \
            old_row_steps + s
    seconds = time.perf_counter() - began
    handle.remove()
    print(f"{args.items} TriviaQA items, greedy + {args.samples} samples, <= "
          f"{args.max_new_tokens} tokens, rows per step {limit}, {backend.config()['dtype']}")
    print(f"{'schedule':34s} {'passes':>7s} {'prefills':>8s} {'rows/pass':>9s}")
    print(f"{'continuous (rows enter as others end)':34s} {passes:7d} {prefills:8d} "
          f"{row_steps / passes:9.2f}")
    print(f"{'groups, eviction only (before)':34s} {old_passes:7d} {old_prefills:8d} "
          f"{old_row_steps / old_passes:9.2f}")
    print(f"passes before / now: {old_passes / passes:.2f}; generation wall time {seconds:.1f} s")


if __name__ == "__main__":
    main()
