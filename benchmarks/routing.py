"""Cascade routing demo: a small model answers, a larger one takes the items it is unsure of.

Either reads two stored runs of the same task (``--small-run``, ``--large-run``)
or runs both models first (``--small``, ``--large``; resumable, stored under
``--out``). Prints accuracy against cost (mean generated tokens and seconds
per item) at evenly spaced escalation rates, the two single-model points,
oracle routing, and the threshold each target accuracy would pick.

    .venv/bin/python benchmarks/routing.py --small smollm2 --large gemma3-270m \\
        --task triviaqa --limit 40 --max-new-tokens 16 --out runs/decisions/route

Each scorer of the small run is tried as the routing confidence; the table
shows the area under its accuracy-vs-escalation curve (higher: a better
router) next to random routing (the straight line between the two models).
"""

from __future__ import annotations

import argparse

import numpy as np

from confide.core.errors import InvalidInputError
from confide.decisions import cascade, route_models
from confide.decisions._runs import as_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-run")
    parser.add_argument("--large-run")
    parser.add_argument("--small", default="smollm2")
    parser.add_argument("--large", default="gemma3-270m")
    parser.add_argument("--task", default="triviaqa")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--out", default="runs/decisions/route")
    parser.add_argument("--scorer", default="msp")
    parser.add_argument("--rows", type=int, default=11)
    args = parser.parse_args()

    if args.small_run and args.large_run:
        small, large = args.small_run, args.large_run
    else:
        route_models(args.small, args.large, task=args.task, scorer=args.scorer, out=args.out,
                     limit=args.limit, max_new_tokens=args.max_new_tokens)
        small, large = f"{args.out}/small", f"{args.out}/large"

    curve = cascade(small, large, scorer=args.scorer)
    print(f"cascade {curve.small} -> {curve.large}, {curve.n} items, confidence {curve.scorer}, "
          f"grader {curve.grader}")
    print(f"{'escalate below':>14} {'escalated':>9} {'accuracy':>8} {'tokens/item':>11} "
          f"{'s/item':>7}")
    picks = sorted({int(np.argmin(np.abs(curve.escalated - f)))
                    for f in np.linspace(0, 1, args.rows)})
    for j in picks:
        p = curve.point(j)
        print(f"{p.threshold:>14.4g} {p.escalated:>9.0%} {p.accuracy:>8.3f} {p.tokens:>11.1f} "
              f"{p.seconds:>7.3f}")
    print(f"small only {curve.small_accuracy:.3f}, large only {curve.large_accuracy:.3f}, "
          f"oracle routing {curve.oracle_accuracy:.3f}")
    for target in sorted({curve.small_accuracy, (curve.small_accuracy + curve.large_accuracy) / 2,
                          curve.large_accuracy, max(curve.accuracy)}):
        p = curve.choose(target_accuracy=target)
        print(f"target accuracy {target:.3f}: escalate below {p.threshold:.4g} "
              f"({p.escalated:.0%} escalated), accuracy {p.accuracy:.3f}, {p.tokens:.1f} tokens "
              f"and {p.seconds:.3f} s per item (large only: {curve.tokens[-1]:.1f}, "
              f"{curve.seconds[-1]:.3f} s)")

    print("\nrouting quality per small-run scorer (area under accuracy vs escalated share; "
          "random routing = mean of the two accuracies)")
    random_area = (curve.small_accuracy + curve.large_accuracy) / 2
    names = sorted({n for r in as_run(small).records for n in r.scores})
    for name in names:
        try:
            c = cascade(small, large, scorer=name)
        except InvalidInputError as exc:  # a scorer with no values in this run
            print(f"  {name:<24} {exc}")
            continue
        x, y = np.r_[0.0, c.escalated], np.r_[c.accuracy[0], c.accuracy]
        area = float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))  # trapezoids from 0 to 1
        print(f"  {name:<24} {area:.3f}  (random {random_area:.3f})")


if __name__ == "__main__":
    main()
