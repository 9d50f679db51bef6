"""What equivalence judging costs: judge calls made versus the naive count, and time per item.

LM-Polygraph-style semantic scorers run an NLI model on every ordered pair of
a record's answers: :math:`n(n-1)` calls for :math:`n` answers (here the
greedy answer plus :math:`k` samples). confide's judges
(:mod:`confide.equivalence.judges`) judge only unique normalised answers, decide key
judges (``exact``, ``numeric``, ``ast``) without any pair call, judge each
unordered pair once (both directions for entailment judges) and cache it.

This script generates (or reuses) a stored run with ``k`` samples per item
with the bundled model, then, for each judge, clusters every record and builds
its affinity matrix from a cold judge, and prints per item: answers ``n``,
unique keys ``u``, clusters, the judge's calls (for entailment judges one
per direction), and the naive ``n(n-1)``; then per judge the total ratio and
the mean wall time per item (clusters + affinity, the model already loaded,
the embedding model warmed on one unrelated string first).

Run::

    python benchmarks/semantic.py [--task triviaqa] [--limit 6] [--samples 10]
        [--max-new-tokens 12] [--temperature 1.0] [--judges exact,numeric,embedding,llm]
        [--out DIR]
    python benchmarks/semantic.py --task bfcl --limit 3 --max-new-tokens 48 --judges ast,exact

``nli`` needs a local cross-encoder: ``--judges nli --nli-model PATH``.
The ``llm`` judge asks the run's own model (the bundled SmolLM2).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from confide import api
from confide.backends.hf import HFBackend
from confide.equivalence.judges import make_judge
from confide.scorers.features import answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="triviaqa")
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--judges", default="exact,numeric,embedding,llm")
    parser.add_argument("--nli-model", default=None)
    parser.add_argument("--out", default=None, help="run directory (reused when it exists)")
    args = parser.parse_args()

    model = HFBackend("smollm2", batch_size=8)
    out = Path(args.out or f"runs/bench-semantic-{args.task}-{args.limit}x{args.samples}"
                           f"-t{args.temperature:g}")
    began = time.perf_counter()
    run = api.generate_and_evaluate(model, task=args.task, out=out, scorers=["agreement"],
                                    n_samples=args.samples, limit=args.limit,
                                    max_new_tokens=args.max_new_tokens,
                                    temperature=args.temperature)
    records = run.records
    print(f"{len(records)} {args.task} items x {args.samples} samples in {out} "
          f"({time.perf_counter() - began:.1f} s to generate or load)\n")

    totals = []
    for name in [j.strip() for j in args.judges.split(",") if j.strip()]:
        options = {"model": args.nli_model} if name == "nli" else {}
        judge = make_judge(name, backend=model, **options)
        if name == "embedding":
            judge.affinity(["warm-up", "the embedding model"])  # load it outside the timing
            judge.calls = 0
        print(f"judge {name}")
        print(f"  {'item':<28} {'n':>3} {'u':>3} {'clusters':>8} {'calls':>6} {'naive':>6}"
              f" {'seconds':>8}")
        calls = naive = 0
        seconds = 0.0
        for r in records:
            texts = answers(r)
            before = judge.calls
            t0 = time.perf_counter()
            labels = judge.clusters(texts, r.item)
            judge.affinity(texts, r.item)
            dt = time.perf_counter() - t0
            n = len(texts)
            unique = len({judge.key(t, r.item) for t in texts})
            made = judge.calls - before
            calls, naive, seconds = calls + made, naive + n * (n - 1), seconds + dt
            print(f"  {r.item.id[:28]:<28} {n:>3} {unique:>3} {int(labels.max()) + 1:>8} "
                  f"{made:>6} {n * (n - 1):>6} {dt:>8.3f}")
        ratio = calls / naive if naive else float("nan")
        per_item = seconds / max(len(records), 1)
        totals.append((name, calls, naive, ratio, per_item))
        print(f"  total: {calls} calls vs {naive} naive ({ratio:.3f}); "
              f"{per_item:.3f} s per item\n")

    print(f"{'judge':<10} {'calls':>6} {'naive':>6} {'ratio':>7} {'s/item':>8}")
    for name, calls, naive, ratio, per_item in totals:
        print(f"{name:<10} {calls:>6} {naive:>6} {ratio:>7.3f} {per_item:>8.3f}")


if __name__ == "__main__":
    main()
