"""Does the ensemble's split of uncertainty mean anything, and what does it cost?

On the bundled model (SmolLM2-135M-Instruct, bfloat16, in one process):

1. train ``--members`` LoRA adapters (``--lora-steps`` steps) and an SVE ensemble
   (``--sve-steps``) of the same size, batch ``--train-batch``, on TriviaQA items never
   evaluated: lines beyond the first 1,000 of the shared subsample
   (``$CONFIDE_DATA_DIR/triviaqa/triviaqa_sm_sub.jsonl``, ``--offset``); without
   ``CONFIDE_DATA_DIR``, the bundled file's lines after the evaluated ones (``--items``);
2. error detection: ``--items`` bundled TriviaQA items, ``--samples`` samples, a run with
   each ensemble (the same base greedy answers and samples: same seeds and blocks):
   AUROC and PRR with 95% bootstrap intervals of every ensemble scorer and of the
   single-model scorers, and the paired bootstrap difference of each ensemble scorer
   against the best single-model scorer on the same items;
3. out of distribution: ``--ood-items`` GSM8K, MMLU and BFCL items each (greedy, at most
   32 new tokens) mixed with the TriviaQA items: AUROC of telling the foreign question
   by mutual information, expected entropy and total entropy (LoRA members);
4. accuracy and calibration: the members' mean greedy answer (``--ensemble-greedy
   mean``) against the base's, accuracy and the ECE and Brier score of the answer's
   probability (product of its token probabilities: the base's, or the members' mean);
5. speed: on ``--speed-items`` items, greedy + teacher forcing under the LoRA members
   against greedy + 10 samples with the base model, each timed twice, alternating,
   the ratio of the faster times, with the load average.

Runs go under ``--work`` (default ``runs/bench-ensembles``) and resume; the report is
written to ``benchmarks/results/ensembles.md``::

    CONFIDE_DATA_DIR=<data folder> .venv/bin/python benchmarks/ensembles.py

The results file comes from a reduced run on 2 busy cores (LoRA training took about 23 s
per member-step under a load average of 6-8), its command line at the top of the file::

    CONFIDE_DATA_DIR=<data folder> .venv/bin/python benchmarks/ensembles.py \
        --lora-steps 10 --sve-steps 3 --items 40 --samples 2 --ood-items 10 --speed-items 8
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "ensembles.md"
SINGLE = ("msp", "mean_logprob", "min_logprob", "mean_entropy", "max_entropy",
          "self_certainty", "mc_entropy_normalized", "lexical_similarity")
ENSEMBLE = ("ens_total_entropy", "ens_expected_entropy", "ens_mutual_information", "ens_epkl",
            "ens_rmi", "ens_seq_total_entropy", "ens_seq_expected_entropy",
            "ens_seq_mutual_information", "ens_seq_total_pe", "ens_seq_total_ep",
            "ens_seq_rmi_pe", "ens_seq_rmi_ep")
TOKEN = ("ens_total_entropy", "ens_expected_entropy", "ens_mutual_information")


def _load() -> str:
    return " / ".join(f"{v:.1f}" for v in os.getloadavg())


def _records(path: Path) -> list:
    from confide.store.run_store import RunStore

    with RunStore.open(path) as store:
        return list(store.records())


def _column(records: list, name: str) -> np.ndarray:
    return np.array([r.scores.get(name, math.nan) for r in records], dtype=float)


def _correct(records: list) -> np.ndarray:
    return np.array([next(iter(r.grades.values())) for r in records], dtype=float) >= 0.5


def train(model, args, work: Path, method: str, steps: int) -> tuple[Path, object]:
    from confide.learned.training import train_members

    data_dir = os.environ.get("CONFIDE_DATA_DIR")
    out = work / f"ens-{method}"
    if data_dir:
        source = Path(data_dir) / "triviaqa" / "triviaqa_sm_sub.jsonl"
        where = dict(task="triviaqa", data=source, offset=args.offset)
    else:  # the bundled file's tail, after the evaluated items
        where = dict(task="triviaqa", offset=max(args.items, args.ood_items * 2))
    began = time.perf_counter()
    info = train_members(model, out=out, method=method, members=args.members, steps=steps,
                         batch_size=args.train_batch, seed=0, limit=args.train_items,
                         **where)
    return out, (info, time.perf_counter() - began, where)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--lora-steps", type=int, default=20)
    parser.add_argument("--sve-steps", type=int, default=10)
    parser.add_argument("--train-batch", type=int, default=4)
    parser.add_argument("--train-items", type=int, default=400)
    parser.add_argument("--offset", type=int, default=1000)
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--ood-items", type=int, default=20)
    parser.add_argument("--speed-items", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("runs/bench-ensembles"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # undefined metrics show as n/a or nan in the tables

    import torch

    from confide.backends.base import GenerationSpec, item_seed
    from confide.backends.hf import HFBackend
    from confide.metrics import auroc_score, bootstrap_interval, brier_loss, calibration_error
    from confide.metrics.bootstrap import paired_bootstrap
    from confide.pipeline.plan import RunConfig, prepare
    from confide.runs.execution import execute

    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    lines = ["# Ensembles: LoRA and SVE members of SmolLM2-135M (reduced run)\n",
             f"`{' '.join(['benchmarks/ensembles.py', *sys.argv[1:]])}`, "
             f"CONFIDE_DATA_DIR={os.environ.get('CONFIDE_DATA_DIR') or 'unset'}; "
             f"load average at start {_load()} (2 shared cores).\n"]
    model = HFBackend("smollm2", dtype="bfloat16", batch_size=8)

    def log(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    # 1. training
    log("## Training\n")
    log("| method | members | steps | batch | data | seconds | s per member-step | "
        "first → last loss |")
    log("|---|---|---|---|---|---|---|---|")
    dirs = {}
    for method, steps in (("lora", args.lora_steps), ("sve", args.sve_steps)):
        folder, (info, seconds, where) = train(model, args, args.work, method, steps)
        dirs[method] = folder
        curve = info.loss_curve
        first = np.mean(curve[0]) if curve else math.nan
        last = np.mean(curve[-1]) if curve else math.nan
        took = info.seconds or seconds
        # the data file named from the data folder, so no machine's path lands in the results
        source = str(where.get("data", "bundled"))
        base = os.environ.get("CONFIDE_DATA_DIR")
        if base and source.startswith(base):
            source = "$CONFIDE_DATA_DIR" + source[len(base.rstrip("/")):]
        data = f"{source} from item {where['offset']}"
        log(f"| {method} | {info.count} | {info.steps_done} | {args.train_batch} | {data} | "
            f"{took:.0f} | {took / max(1, info.count * info.steps_done):.2f} | "
            f"{first:.3f} → {last:.3f} |")

    # 2. error detection on TriviaQA
    scorers = (*SINGLE, *ENSEMBLE)
    runs = {}
    for method, folder in dirs.items():
        config = RunConfig(task="triviaqa", limit=args.items, n_samples=args.samples,
                           scorers=scorers, ensemble=str(folder), batch_size=8)
        began = time.perf_counter()
        execute(config, args.work / f"triviaqa-{method}", backend=model)
        print(f"{method} run: {time.perf_counter() - began:.0f} s", flush=True)
        runs[method] = _records(args.work / f"triviaqa-{method}")
    base_records = runs["lora"]
    correct = _correct(base_records)
    log(f"\n## Error detection: {len(correct)} bundled TriviaQA items, {args.samples} "
        f"samples, grader contains: {int(correct.sum())} right\n")
    single = {n: _column(base_records, n) for n in SINGLE}
    best = max(single, key=lambda n: np.nan_to_num(auroc_score(
        np.nan_to_num(single[n], nan=-1e9), correct), nan=-1.0))
    log(f"Best single-model scorer by AUROC: `{best}`.\n")
    log("| scorer | members | AUROC [95% CI] | PRR [95% CI] | ΔAUROC vs best single [95% CI] |")
    log("|---|---|---|---|---|")

    def ci(metric: str, conf: np.ndarray, y: np.ndarray) -> str:
        ok = np.isfinite(conf)
        if ok.sum() < 2 or y[ok].min() == y[ok].max():
            return "n/a"
        r = bootstrap_interval(metric, conf[ok], y[ok])
        return f"{r.point:.3f} [{r.low:.3f}, {r.high:.3f}]"

    def row(name: str, conf: np.ndarray, who: str) -> None:
        d = ""
        both = np.isfinite(conf) & np.isfinite(single[best])
        if who != "single" and both.sum() > 2 and 0 < correct[both].sum() < both.sum():
            r = paired_bootstrap("auroc", conf[both], single[best][both], correct[both])
            d = f"{r['diff']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"
        log(f"| {name} | {who} | {ci('auroc', conf, correct)} | {ci('prr', conf, correct)} | "
            f"{d} |")

    for name in SINGLE:
        row(name, single[name], "single")
    for method, records in runs.items():
        for name in ENSEMBLE:
            row(name, _column(records, name), method)

    # 3. out of distribution
    log(f"\n## Out of distribution: TriviaQA ({args.items}) against foreign questions "
        f"({args.ood_items} each), LoRA members, greedy answers\n")
    log("AUROC of flagging the foreign question by each uncertainty (higher uncertainty = "
        "foreign; 0.5 = no signal).\n")
    log("| foreign task | " + " | ".join(TOKEN) + " |")
    log("|---|" + "---|" * len(TOKEN))
    foreign_all: dict[str, list[np.ndarray]] = {n: [] for n in TOKEN}
    home = {n: -_column(base_records, n) for n in TOKEN}
    for task in ("gsm8k", "mmlu", "bfcl"):
        config = RunConfig(task=task, limit=args.ood_items, n_samples=0, scorers=TOKEN,
                           ensemble=str(dirs["lora"]), batch_size=8, max_new_tokens=32)
        execute(config, args.work / f"ood-{task}", backend=model)
        recs = _records(args.work / f"ood-{task}")
        cells = []
        for n in TOKEN:
            away = -_column(recs, n)
            foreign_all[n].append(away)
            u = np.concatenate([home[n], away])
            y = np.r_[np.zeros(len(home[n])), np.ones(len(away))].astype(bool)
            ok = np.isfinite(u)
            cells.append(f"{auroc_score(u[ok], y[ok]):.3f}")
        log(f"| {task} | " + " | ".join(cells) + " |")
    cells = []
    for n in TOKEN:
        away = np.concatenate(foreign_all[n])
        u = np.concatenate([home[n], away])
        y = np.r_[np.zeros(len(home[n])), np.ones(len(away))].astype(bool)
        cells.append(ci("auroc", u, y))
    log("| all three | " + " | ".join(cells) + " |")

    # 4. accuracy and calibration: the members' mean greedy answer against the base's
    config = RunConfig(task="triviaqa", limit=args.items, n_samples=0, scorers=("msp",),
                       ensemble=str(dirs["lora"]), ensemble_greedy="mean", batch_size=8)
    execute(config, args.work / "triviaqa-lora-mean", backend=model)
    mean_records = _records(args.work / "triviaqa-lora-mean")
    mean_correct = _correct(mean_records)

    def answer_prob(records: list) -> np.ndarray:
        return np.array([math.exp(float(np.sum(r.greedy.token_logprobs)))
                         if r.greedy.n_tokens else 0.0 for r in records])

    log(f"\n## Accuracy and calibration ({args.items} TriviaQA items, LoRA members)\n")
    log("The answer's probability: the product of its token probabilities (the base "
        "model's; the members' mean for the mean's greedy answer).\n")
    log("| greedy answer | accuracy [95% CI] | ECE (10 bins) | Brier |")
    log("|---|---|---|---|")
    for label, recs, ok in (("base model", base_records, correct),
                            ("members' mean (--ensemble-greedy mean)", mean_records,
                             mean_correct)):
        prob = answer_prob(recs)
        acc = bootstrap_interval("accuracy", prob, ok)
        log(f"| {label} | {acc.point:.3f} [{acc.low:.3f}, {acc.high:.3f}] | "
            f"{calibration_error(prob, ok):.3f} | {brier_loss(prob, ok):.3f} |")
    d = paired_bootstrap("accuracy", answer_prob(mean_records), answer_prob(base_records),
                         mean_correct, correct_b=correct)
    log(f"\nAccuracy, mean minus base: {d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}].")

    # 5. speed: greedy + teacher forcing (4 LoRA members) vs greedy + 10 samples (base)
    plan = prepare(RunConfig(task="triviaqa", limit=args.speed_items, batch_size=8))
    items = plan.task.items
    prompts = [plan.task.render(it, chat=model.has_chat_template) for it in items]
    seeds = [item_seed(0, it.id) for it in items]
    spec = plan.spec

    def timed(ensemble: bool) -> float:
        model.use_ensemble(dirs["lora"] if ensemble else None)
        wanted = GenerationSpec(max_new_tokens=spec.max_new_tokens, stop=spec.stop,
                                n_samples=0 if ensemble else 10)
        began = time.perf_counter()
        for start in range(0, len(prompts), 8):
            model.generate(prompts[start:start + 8], wanted, seeds[start:start + 8])
        return time.perf_counter() - began

    timed(True)  # warm: the members' prefix cache and the measured rows per step
    times: dict[bool, list[float]] = {True: [], False: []}
    before = _load()
    for _ in range(2):
        for ensemble in (False, True):
            times[ensemble].append(timed(ensemble))
    model.use_ensemble(None)
    sampled, forced = min(times[False]), min(times[True])
    log(f"\n## Speed ({len(items)} TriviaQA items, one process, bfloat16, "
        f"{args.threads} threads)\n")
    log("| path | seconds (two tries) |")
    log("|---|---|")
    log(f"| base: greedy + 10 samples | {', '.join(f'{t:.1f}' for t in times[False])} |")
    log(f"| greedy + teacher forcing under {args.members} LoRA members | "
        f"{', '.join(f'{t:.1f}' for t in times[True])} |")
    log(f"\nRatio (faster of each): **{forced / sampled:.2f}x** (goal <= 0.5x); load average "
        f"before {before}, after {_load()}.")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
