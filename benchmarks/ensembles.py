"""Does the ensemble's split of uncertainty mean anything, and what does it cost?

On the bundled model (SmolLM2-135M-Instruct, bfloat16, in one process):

1. train ``--members`` LoRA adapters (``--lora-steps`` steps) and an SVE ensemble
   (``--sve-steps``) of the same size, batch ``--train-batch``, in the decoder layers
   ``--layers`` (default: the training default, the top quarter), on TriviaQA items never
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
5. speed: two more LoRA ensembles of ``--members`` members, one of every decoder layer and
   one of the top ``--speed-layers`` (default: the top quarter), trained
   ``--speed-train-steps`` steps each, alternating a step of one with a step of the
   other (training seconds per member-step); then on ``--speed-items`` items, greedy +
   teacher forcing under each against greedy + 10 samples with the base model, each
   timed ``--tries`` times, alternating, the ratio of the faster times, with the load
   average. ``--only-speed`` runs this part alone and replaces the ``## Speed`` section of
   the results file, leaving the rest as it was.

Runs go under ``--work`` (default ``runs/bench-ensembles``) and resume; the report is
written to ``benchmarks/results/ensembles.md``::

    CONFIDE_DATA_DIR=<data folder> .venv/bin/python benchmarks/ensembles.py

The results file comes from a reduced run on 2 busy cores (LoRA training took about 23 s
per member-step under a load average of 6-8), its command line at the top of the file::

    CONFIDE_DATA_DIR=<data folder> .venv/bin/python benchmarks/ensembles.py \
        --lora-steps 10 --sve-steps 3 --items 40 --samples 2 --ood-items 10 --speed-items 8

and its speed section from (the command line at the top of that section)::

    CONFIDE_DATA_DIR=<data folder> .venv/bin/python benchmarks/ensembles.py --only-speed \
        --speed-items 8 --tries 3
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


def _where(args) -> dict:
    data_dir = os.environ.get("CONFIDE_DATA_DIR")
    if data_dir:
        source = Path(data_dir) / "triviaqa" / "triviaqa_sm_sub.jsonl"
        return dict(task="triviaqa", data=source, offset=args.offset)
    # the bundled file's tail, after the evaluated items
    return dict(task="triviaqa", offset=max(args.items, args.ood_items * 2))


def train(model, args, work: Path, method: str, steps: int) -> tuple[Path, object]:
    from confide.learned.training import train_members

    out = work / f"ens-{method}"
    where = _where(args)
    began = time.perf_counter()
    info = train_members(model, out=out, method=method, members=args.members, steps=steps,
                         batch_size=args.train_batch, seed=0, limit=args.train_items,
                         layers=args.layers, **where)
    return out, (info, time.perf_counter() - began, where)


def speed(model, args) -> list[str]:
    """Section 5: training seconds per member-step and scoring time, LoRA members of every
    layer against members of the top layers, against greedy + 10 samples of the base."""
    from confide.backends.base import GenerationSpec, item_seed
    from confide.learned.training import train_members
    from confide.pipeline.plan import RunConfig, prepare

    out: list[str] = []
    # two LoRA ensembles, trained a step at a time in turn (resuming), so that a change of
    # the machine's load falls on both
    kinds = {"all": args.work / "speed-lora-all", "top": args.work / "speed-lora-top"}
    layer_of = {"all": "all", "top": args.speed_layers}
    infos = {}
    for step in range(1, args.speed_train_steps + 1):
        for kind, folder in kinds.items():
            infos[kind] = train_members(model, out=folder, method="lora", members=args.members,
                                        steps=step, batch_size=args.train_batch, seed=0,
                                        limit=args.train_items, layers=layer_of[kind],
                                        checkpoint_every=args.speed_train_steps,
                                        **_where(args))
    label = {k: f"{args.members} LoRA members, layers {infos[k].settings['layers']}"
             for k in kinds}
    plan = prepare(RunConfig(task="triviaqa", limit=args.speed_items, batch_size=8))
    items = plan.task.items
    prompts = [plan.task.render(it, chat=model.has_chat_template) for it in items]
    seeds = [item_seed(0, it.id) for it in items]
    spec = plan.spec

    def timed(kind: str | None, samples: int) -> float:
        model.use_ensemble(None if kind is None else kinds[kind])
        wanted = GenerationSpec(max_new_tokens=spec.max_new_tokens, stop=spec.stop,
                                n_samples=samples)
        began = time.perf_counter()
        for start in range(0, len(prompts), 8):
            model.generate(prompts[start:start + 8], wanted, seeds[start:start + 8])
        return time.perf_counter() - began

    paths = {"base": (None, 10), "greedy": (None, 0), "all": ("all", 0), "top": ("top", 0)}
    for kind in kinds:
        timed(kind, 0)  # warm: the members' prefix cache
    timed(None, 10)
    times: dict[str, list[float]] = {k: [] for k in paths}
    before = _load()
    for _ in range(args.tries):
        for key, (kind, samples) in paths.items():
            times[key].append(timed(kind, samples))
    model.use_ensemble(None)
    best = {k: min(v) for k, v in times.items()}
    command = " ".join(["benchmarks/ensembles.py", *sys.argv[1:]])
    out.append(f"## Speed ({len(items)} TriviaQA items, one process, bfloat16, "
               f"{args.threads} threads)\n")
    out.append(f"`{command}`, CONFIDE_DATA_DIR="
               f"{'set' if os.environ.get('CONFIDE_DATA_DIR') else 'unset'}.\n")
    out.append(f"Training ({args.speed_train_steps} steps of each, batch {args.train_batch}, "
               "a step of one and a step of the other in turn):\n")
    out.append("| members | parameters per member | s per member-step |")
    out.append("|---|---|---|")
    for kind in kinds:
        info = infos[kind]
        n = sum(v.numel() for v in _member_tensors(info.path / "member-0.safetensors"))
        per = info.seconds / max(1, info.count * info.steps_done)
        out.append(f"| {label[kind]} | {n:,} | {per:.2f} |")
    ratio = (infos["top"].seconds / infos["all"].seconds) if infos["all"].seconds else math.nan
    out.append(f"\nTraining time, top layers / all layers: **{ratio:.2f}x**.\n")
    out.append(f"Scoring (seconds, {args.tries} tries each, alternating):\n")
    out.append("| path | seconds | ratio to base greedy + 10 samples (faster of each) |")
    out.append("|---|---|---|")
    names = {"base": "base: greedy + 10 samples", "greedy": "base: greedy alone",
             "all": f"greedy + teacher forcing under {label['all']}",
             "top": f"greedy + teacher forcing under {label['top']}"}
    for key, name in names.items():
        bold = "**" if key in ("all", "top") else ""
        out.append(f"| {name} | {', '.join(f'{t:.2f}' for t in times[key])} | "
                   f"{bold}{best[key] / best['base']:.2f}x{bold} |")
    forcing = {k: best[k] - best["greedy"] for k in ("all", "top")}
    out.append(f"\nTeacher forcing alone (faster time minus the greedy answer's): "
               f"{forcing['all']:.2f} s under all-layer members, {forcing['top']:.2f} s under "
               f"top-layer members ({forcing['top'] / forcing['all']:.2f}x). Goal <= 0.5x "
               f"greedy + 10 samples. Load average before {before}, after {_load()}.")
    return out


def _member_tensors(path: Path) -> list:
    from safetensors.torch import load_file

    return list(load_file(path).values())


def _replace_section(text: str, heading: str, lines: list[str]) -> str:
    """``text`` with its section ``heading`` (to the next ``## ``) replaced by ``lines``;
    appended where there is none."""
    at = text.find(heading)
    if at < 0:
        return text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    end = text.find("\n## ", at + len(heading))
    rest = "" if end < 0 else text[end + 1:]
    return text[:at] + "\n".join(lines) + "\n\n" + rest


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
    parser.add_argument("--layers", default=None,
                        help="decoder layers the members adapt: all or top-K (default: top "
                             "quarter)")
    parser.add_argument("--speed-layers", default=None,
                        help="the top-layer members of the speed section (default: top "
                             "quarter)")
    parser.add_argument("--speed-train-steps", type=int, default=3)
    parser.add_argument("--tries", type=int, default=2)
    parser.add_argument("--only-speed", action="store_true",
                        help="the speed section alone, written into the existing results")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("runs/bench-ensembles"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # undefined metrics show as n/a or nan in the tables

    import torch

    from confide.backends.hf import HFBackend
    from confide.metrics import auroc_score, bootstrap_interval, brier_loss, calibration_error
    from confide.metrics.bootstrap import paired_bootstrap
    from confide.pipeline.plan import RunConfig
    from confide.runs.execution import execute

    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    lines = ["# Ensembles: LoRA and SVE members of SmolLM2-135M (reduced run)\n",
             f"`{' '.join(['benchmarks/ensembles.py', *sys.argv[1:]])}`, "
             f"CONFIDE_DATA_DIR={os.environ.get('CONFIDE_DATA_DIR') or 'unset'}; "
             f"load average at start {_load()} (2 shared cores).\n"]
    model = HFBackend("smollm2", dtype="bfloat16", batch_size=8)
    if args.only_speed:
        section = speed(model, args)
        print("\n".join(section), flush=True)
        text = args.out.read_text(encoding="utf-8") if args.out.exists() else lines[0]
        args.out.write_text(_replace_section(text, "## Speed", section), encoding="utf-8")
        print(f"written {args.out}")
        return

    def log(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    # 1. training
    log("## Training\n")
    log("| method | members | layers | steps | batch | data | seconds | s per member-step | "
        "first → last loss |")
    log("|---|---|---|---|---|---|---|---|---|")
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
        log(f"| {method} | {info.count} | {info.settings.get('layers', 'all')} | "
            f"{info.steps_done} | {args.train_batch} | {data} | "
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
    model.use_ensemble(None)  # the runs above leave their members attached; training adds its own
    for text in speed(model, args):
        log(text)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
