"""Does the abstention guarantee hold? Check P(error rate among answered > alpha) <= delta.

Three simulations of :func:`confide.decisions.fit_abstention` (Learn then Test):

1. **Synthetic, known error curve.** Confidence ``c ~ U(0, 1)`` and
   ``P(wrong | c) = (1 - c) / 2``, so the selective risk is known exactly:
   ``R(lambda) = E[(1 - c)/2 | c >= lambda] = (1 - lambda) / 4``. Over many
   calibration samples, the share whose chosen threshold has ``R > alpha``
   must be at most ``delta``. For contrast, the naive rule (the lowest
   threshold whose calibration error rate is <= alpha) is checked the same
   way. The best possible coverage is ``1 - lambda*`` with
   ``lambda* = 1 - 4 alpha``.
2. **A stored run, random calibration/test splits** (with ``--run``): split
   the run's graded items in half at random, fit on one half, measure the
   error rate among answered items of the other half; report the share of
   splits above alpha. The test half is finite, so this share mixes the
   guarantee with the test half's own sampling noise.
3. **The same run as a population** (with ``--run``): draw calibration
   samples with replacement from the run and measure the chosen threshold's
   exact risk on the whole run — the guarantee's own terms, with the run's
   empirical distribution as the population.

Usage::

    .venv/bin/python benchmarks/guarantee.py                       # synthetic only
    .venv/bin/python benchmarks/guarantee.py --run runs/x --scorer msp --alpha 0.3
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from confide.decisions import fit_abstention
from confide.decisions._runs import run_column


def naive_threshold(conf: np.ndarray, correct: np.ndarray, alpha: float) -> float:
    """Lowest threshold whose in-sample error rate among answered is <= alpha (no guarantee)."""
    order = np.argsort(-conf, kind="stable")
    errors = np.cumsum(1 - correct[order])
    risk = errors / np.arange(1, conf.size + 1)
    ok = np.flatnonzero(risk <= alpha)
    return float(conf[order][ok[-1]]) if ok.size else math.inf


def synthetic(alpha: float, delta: float, n: int, trials: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    ltt_risk, naive_risk, coverage, feasible = [], [], [], 0
    for t in range(trials):
        c = rng.random(n)
        correct = (rng.random(n) >= (1 - c) / 2).astype(float)
        policy = fit_abstention(c, correct, alpha=alpha, delta=delta, seed=t).policy
        if policy.feasible:
            feasible += 1
            ltt_risk.append((1 - policy.threshold) / 4)
            coverage.append(1 - policy.threshold)
        else:
            ltt_risk.append(0.0)  # abstaining on all makes no error
            coverage.append(0.0)
        lam = naive_threshold(c, correct, alpha)
        naive_risk.append((1 - lam) / 4 if lam < 1 else 0.0)
    return {"violations": float(np.mean(np.array(ltt_risk) > alpha)),
            "naive_violations": float(np.mean(np.array(naive_risk) > alpha)),
            "coverage": float(np.mean(coverage)), "best_coverage": min(1.0, 4 * alpha),
            "feasible": feasible / trials}


def run_splits(conf: np.ndarray, correct: np.ndarray, alpha: float, delta: float, trials: int,
               seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    n = conf.size
    above, coverage, test_risk, feasible = 0, [], [], 0
    for t in range(trials):
        perm = rng.permutation(n)
        cal, test = perm[: n // 2], perm[n // 2:]
        policy = fit_abstention(conf[cal], correct[cal], alpha=alpha, delta=delta,
                                seed=t).policy
        answered = conf[test] >= policy.threshold
        if policy.feasible:
            feasible += 1
        if answered.any():
            risk = float(np.mean(1 - correct[test][answered]))
            above += risk > alpha
            test_risk.append(risk)
        coverage.append(float(answered.mean()))
    return {"share_above_alpha": above / trials, "coverage": float(np.mean(coverage)),
            "mean_test_risk": float(np.mean(test_risk)) if test_risk else math.nan,
            "feasible": feasible / trials}


def run_population(conf: np.ndarray, correct: np.ndarray, alpha: float, delta: float,
                   n_cal: int, trials: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    violations, coverage, feasible = 0, [], 0
    for t in range(trials):
        idx = rng.integers(0, conf.size, n_cal)
        policy = fit_abstention(conf[idx], correct[idx], alpha=alpha, delta=delta,
                                seed=t).policy
        answered = conf >= policy.threshold
        if policy.feasible:
            feasible += 1
        if answered.any():
            violations += float(np.mean(1 - correct[answered])) > alpha
        coverage.append(float(answered.mean()))
    return {"violations": violations / trials, "coverage": float(np.mean(coverage)),
            "feasible": feasible / trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", help="a stored graded run directory")
    parser.add_argument("--scorer", default="msp")
    parser.add_argument("--alpha", type=float, default=0.3)
    parser.add_argument("--delta", type=float, default=0.1)
    args = parser.parse_args()

    print(f"1. synthetic: c ~ U(0,1), P(wrong|c) = (1-c)/2, R(lambda) = (1-lambda)/4; "
          f"{args.trials} calibration samples each")
    print(f"{'alpha':>6} {'delta':>6} {'n':>6} | {'P(R>alpha) LTT':>15} {'naive':>7} | "
          f"{'coverage':>8} {'best':>6} {'feasible':>8} | {'s':>5}")
    for alpha, delta, n in [(0.1, 0.1, 500), (0.1, 0.1, 2000), (0.2, 0.1, 500),
                            (0.2, 0.05, 500), (0.15, 0.2, 1000)]:
        began = time.perf_counter()
        r = synthetic(alpha, delta, n, args.trials, args.seed)
        print(f"{alpha:>6} {delta:>6} {n:>6} | {r['violations']:>15.3f} "
              f"{r['naive_violations']:>7.3f} | {r['coverage']:>8.3f} {r['best_coverage']:>6.2f} "
              f"{r['feasible']:>8.3f} | {time.perf_counter() - began:>5.1f}")

    if not args.run:
        return
    col = run_column(args.run, args.scorer)
    conf, correct = col.confidence, col.correct
    print(f"\n{args.run}: {conf.size} graded items, scorer {args.scorer}, grader {col.grader}, "
          f"accuracy {correct.mean():.3f}; alpha {args.alpha}, delta {args.delta}")
    s = run_splits(conf, correct, args.alpha, args.delta, args.trials, args.seed)
    print(f"2. random 50/50 calibration/test splits ({args.trials}): share with test error "
          f"rate > alpha = {s['share_above_alpha']:.3f} (delta {args.delta}); mean test "
          f"coverage {s['coverage']:.3f}, mean test error among answered "
          f"{s['mean_test_risk']:.3f}, feasible {s['feasible']:.3f}")
    p = run_population(conf, correct, args.alpha, args.delta, conf.size // 2, args.trials,
                       args.seed)
    print(f"3. run as population, calibration samples of {conf.size // 2} drawn with "
          f"replacement ({args.trials}): share with risk > alpha = {p['violations']:.3f} "
          f"(delta {args.delta}); mean coverage {p['coverage']:.3f}, feasible "
          f"{p['feasible']:.3f}")


if __name__ == "__main__":
    main()
