"""confide's ensemble scorers beside LM-Polygraph's ensemble estimators, on identical members.

LM-Polygraph is not a dependency of confide: its side runs in its own virtualenv (the
one ``polygraph.py`` builds, ``--venv``), as a subprocess that imports nothing from
confide and exchanges JSON. Nothing of Polygraph is reimplemented here: where its
functions cannot be imported, the script says so and stops.

What is fed. Seeded cases of M members (2, 3 or 5) over a 5-word vocabulary, S sampled
answers (1 or 3) of L tokens (1 to 6), each token drawn from the members' mean. confide
gets each sample's member log-probabilities (``Generation.members``) and scores
``ens_seq_total_ep``, ``ens_seq_rmi_ep`` and ``ens_seq_rmi_pe``. Polygraph's
sequence-level function ``get_seq_level_ue``
(``lm_polygraph/estimators/ensemble_sequence_measures.py``, behind ``EPStu``, ``EPSrmi``,
``PEStu``, ``PESrmi``) gets ``log_probas[obs, member, hypothesis]``, each member's
sequence log-probability divided by the length, which is what its collector
(``utils/token_restoration.py``) stores. Mapping: confide's c = -U for RMI; Polygraph's
``tu`` is minus the weighted mean of the ensemble's length-normalised sequence
probability (not an entropy), so c = log(-U) for one hypothesis.

Where the definitions meet and where they part, by group of cases:

* S = 1, L = 1: one hypothesis of one token: Malinin & Gales' estimators and
  Polygraph's coincide (and PE = EP); the difference should be rounding.
* S = 1, L > 1: Polygraph length-normalises each member's log-probability *before*
  the log-mean-exp over members, log mean_m exp(l_m / L); the paper (and confide) after,
  (1/L) log mean_m exp(l_m).
* S > 1: Polygraph also weighs the hypotheses by their ensemble probability
  (importance weights for beam search); confide averages the samples uniformly (the
  paper's Monte Carlo over samples drawn from the ensemble).

Token level (``EPT*``, ``PET*``): Polygraph computes each step's measures inside its
ensemble decoding loop (``utils/ensemble_utils/ensemble_greedy.py``) from the members'
logits, not in a function of given distributions, and its estimators only sum those
with hypothesis weights; there is nothing to feed it identical distributions through
without a model, so the token-level rows are not compared here.

    .venv/bin/python benchmarks/peers/polygraph_ensemble.py
    .venv/bin/python benchmarks/peers/polygraph_ensemble.py --venv DIR --cases 300
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from confide.core.records import Generation, Item, MemberStatistics, Record
from confide.scorers import SCORERS, run_scorer

WORKER = r"""
import json, sys
import numpy as np
from lm_polygraph.estimators.ensemble_sequence_measures import get_seq_level_ue
cases = json.load(sys.stdin)
out = []
for log_probas in cases:
    ue = get_seq_level_ue({"log_probas": np.asarray(log_probas, dtype=np.float64)[None]})
    out.append({"tu": float(np.asarray(ue["tu"])[0]), "rmi": float(np.asarray(ue["rmi"])[0])})
json.dump(out, sys.stdout)
"""
SCORED = ("ens_seq_total_ep", "ens_seq_rmi_ep", "ens_seq_rmi_pe")


def make_cases(n: int, seed: int) -> list[list[np.ndarray]]:
    """Each case: S arrays of shape (M, L), the members' log-probabilities of the tokens."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        m, s = int(rng.choice([2, 3, 5])), int(rng.choice([1, 3]))
        samples = []
        for _ in range(s):
            length = int(rng.integers(1, 7))
            p = rng.dirichlet(np.full(5, 0.7), size=(m, length))
            chosen = [int(rng.choice(5, p=p[:, t].mean(0))) for t in range(length)]
            samples.append(np.log(p[:, np.arange(length), chosen]))
        cases.append(samples)
    return cases


def confide_side(case: list[np.ndarray]) -> dict[str, float]:
    def gen(lp: np.ndarray, text: str) -> Generation:
        n = lp.shape[1]
        return Generation(text=text, token_ids=list(range(n)), members=MemberStatistics(lp))

    record = Record(Item("q", "?", []), gen(case[0], "greedy"),
                    [gen(lp, f"sample {i}") for i, lp in enumerate(case)])
    out = {}
    for name in SCORED:
        value, why = run_scorer(SCORERS[name], record)
        if why is not None:
            raise SystemExit(f"{name}: {why}")
        out[name] = value
    return out


def polygraph_side(python: Path, cases: list[list[np.ndarray]]) -> list[dict[str, float]]:
    # each member's sequence log-probability over the length, per hypothesis: (M, S)
    payload = [np.stack([lp.sum(1) / lp.shape[1] for lp in case], axis=1).tolist()
               for case in cases]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([str(python), "-c", WORKER], input=json.dumps(payload), env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit("LM-Polygraph's ensemble functions could not run (above); nothing "
                         "is compared")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=None,
                        help="LM-Polygraph's virtualenv (default: the one polygraph.py builds)")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.venv is None:
        from confide.backends.models import cache_dir

        args.venv = cache_dir() / "peers" / "lm-polygraph-0.7.0"
    python = args.venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no LM-Polygraph virtualenv at {args.venv}: build it with "
                         "benchmarks/peers/polygraph.py (needs the network) or pass --venv; "
                         "nothing is compared")
    cases = make_cases(args.cases, args.seed)
    ours = [confide_side(case) for case in cases]
    theirs = polygraph_side(python, cases)
    groups = {"S = 1, L = 1": lambda c: len(c) == 1 and c[0].shape[1] == 1,
              "S = 1, L > 1": lambda c: len(c) == 1 and c[0].shape[1] > 1,
              "S > 1": lambda c: len(c) > 1}
    rows = [("ens_seq_rmi_ep", "EPSrmi / PESrmi (rmi)", "c = -U",
             lambda o, t: o["ens_seq_rmi_ep"] + t["rmi"]),
            ("ens_seq_rmi_pe", "EPSrmi / PESrmi (rmi)", "c = -U",
             lambda o, t: o["ens_seq_rmi_pe"] + t["rmi"]),
            ("ens_seq_total_ep", "EPStu / PEStu (tu)", "c = log(-U)",
             lambda o, t: o["ens_seq_total_ep"] - math.log(-t["tu"]))]
    print(f"{args.cases} cases, seed {args.seed}; max |Δ| per group (n cases)\n")
    print("| confide | Polygraph | mapping | " + " | ".join(groups) + " |")
    print("|---|---|---|" + "---|" * len(groups))
    for name, peer, mapping, diff in rows:
        cells = []
        for test in groups.values():
            d = [abs(diff(o, t)) for c, o, t in zip(cases, ours, theirs, strict=True)
                 if test(c)]
            cells.append(f"{max(d):.1e} ({len(d)})" if d else "–")
        print(f"| {name} | {peer} | {mapping} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
