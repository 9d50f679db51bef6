"""Long answers claim by claim: how well each claim scorer ranks right and wrong claims,
what refining does, and what the claim stage costs next to generating.

Generates TruthfulQA paragraphs with the bundled model (``long_form=True``), runs
the claim stage (sentences, every default claim scorer, the ``judge`` grader on
the same model) and prints the claim-level table (AUROC, PRR with intervals
bootstrapped over answers), the refine figures, and the claim stage's time as
a ratio of the generation time measured in the same run.

    .venv/bin/python benchmarks/claims.py --items 20
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path

from confide import api
from confide.decisions.refining import refine_run
from confide.evaluation.claims import evaluate_claims
from confide.pipeline.plan import RunConfig
from confide.runs.claims import ClaimConfig, add_claims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="confide-claims-")) / "run"
    model = api.load_model("smollm2", batch_size=8)
    config = RunConfig(task="truthfulqa", limit=args.items, max_new_tokens=args.max_new_tokens,
                       n_samples=args.samples, task_options={"long_form": True},
                       scorers=("mean_logprob", "length"))
    began = time.perf_counter()
    api.execute(config, out, backend=model)
    generation = time.perf_counter() - began
    claims = ClaimConfig()
    began = time.perf_counter()
    outcome = add_claims(out, claims, backend=model)
    stage = time.perf_counter() - began
    records = api.open_run(out).records
    table = evaluate_claims(records, grader=outcome.grader or "llm", n_resamples=1000)
    print(f"{table.n_claims} graded claims in {table.n_answers} answers; share right "
          f"{table.accuracy[0]:.3f} [{table.accuracy[1]:.3f}, {table.accuracy[2]:.3f}]")
    print(f"{'claim scorer':24} {'AUROC [95% CI over answers]':32} {'PRR':>7} {'n':>4}")
    for row in sorted(table.rows, key=lambda r: -(r.metrics['auroc'][0]
                                                  if not math.isnan(r.metrics['auroc'][0])
                                                  else -1)):
        p, lo, hi = row.metrics["auroc"]
        print(f"{row.scorer:24} {p:.3f} [{lo:.3f}, {hi:.3f}]{'':13} "
              f"{row.metrics['prr'][0]:7.3f} {row.n:4d}")
    summary = refine_run(records, scorer=claims.scorer_for_refine,
                         grader=outcome.grader or "llm", threshold=claims.threshold)
    print(f"refine ({summary.scorer} >= {summary.threshold}, cross-fitted): kept "
          f"{summary.kept}/{summary.n}; share right {summary.accuracy_all:.3f} -> "
          f"{summary.accuracy_kept:.3f} {summary.note}")
    print(f"claim stage / generation time: {stage / generation:.2f} "
          f"({stage:.0f} s / {generation:.0f} s, same run)")
    shutil.rmtree(out.parent)


if __name__ == "__main__":
    main()
