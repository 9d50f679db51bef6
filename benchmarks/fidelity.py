"""How far bfloat16 moves token statistics and AUROCs away from float32.

In one process, on the default model and N bundled TriviaQA items, greedy
answers with the default scorers are generated twice through ``confide``'s
own pipeline: once with the model in float32, once in bfloat16 (statistics
are float32 in both: the output projection is float32). Prints

- the share of items whose greedy tokens are identical in both dtypes,
- on those items, the largest and mean |Δ| of per-token log p, entropy and
  KL(U||p), and of each scorer's value,
- each default scorer's AUROC in both dtypes and the difference,
- the wall time of both runs and their ratio.

    .venv/bin/python benchmarks/fidelity.py --items 500
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from confide.api import open_run
from confide.backends.hf import HFBackend
from confide.metrics import auroc_score
from confide.pipeline.plan import DEFAULT_SCORERS, RunConfig
from confide.runs.execution import execute


def run(dtype: str, args: argparse.Namespace, out: str) -> tuple[list, float]:
    backend = HFBackend(args.model, batch_size=args.batch_size, dtype=dtype)
    config = RunConfig(model=args.model, limit=args.items, batch_size=args.batch_size)
    began = time.perf_counter()
    execute(config, out, backend=backend)
    seconds = time.perf_counter() - began
    return open_run(out).records, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        fp32, t32 = run("float32", args, a)
        bf16, t16 = run("bfloat16", args, b)
    by_id = {r.item.id: r for r in bf16}
    pairs = [(r, by_id[r.item.id]) for r in fp32 if r.item.id in by_id]
    same = [(x, y) for x, y in pairs if x.greedy.token_ids == y.greedy.token_ids]
    print(f"model {args.model}, {len(pairs)} TriviaQA items, greedy, default scorers")
    print(f"identical greedy tokens in both dtypes: {len(same)}/{len(pairs)} "
          f"({len(same) / len(pairs):.1%})")
    for name in ("token_logprobs", "token_entropies", "token_kl_uniform"):
        diffs = np.concatenate([np.abs(getattr(x.greedy, name) - getattr(y.greedy, name))
                                for x, y in same if x.greedy.n_tokens] or [np.zeros(1)])
        print(f"  |Δ {name:17s}| max {diffs.max():.4f}  mean {diffs.mean():.5f}  "
              f"(over {diffs.size} tokens)")
    grader = next(iter(fp32[0].grades))
    print(f"AUROC against grader {grader!r} (float32 / bfloat16 / Δ), "
          f"max |Δ score| on identical answers:")
    for name in DEFAULT_SCORERS:
        if name not in fp32[0].scores:
            continue
        aucs = []
        for records in (fp32, bf16):
            conf = np.array([r.scores[name] for r in records], dtype=float)
            correct = np.array([r.grades[grader] >= 0.5 for r in records], dtype=float)
            aucs.append(auroc_score(conf, correct, nan_policy="omit"))
        delta = np.array([abs(x.scores[name] - y.scores[name]) for x, y in same])
        delta = delta[np.isfinite(delta)]
        print(f"  {name:15s} {aucs[0]:.4f} / {aucs[1]:.4f} / {aucs[1] - aucs[0]:+.4f}   "
              f"max |Δ| {delta.max() if delta.size else float('nan'):.4f}")
    print(f"wall time: float32 {t32:.1f} s, bfloat16 {t16:.1f} s, ratio bf16/fp32 {t16 / t32:.2f}")


if __name__ == "__main__":
    main()
