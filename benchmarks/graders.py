"""How far each grader can be trusted: agreement with human correctness labels.

Data: EVOUNA TriviaQA (``labeled_generations/evouna_TQ.json``; Wang et al.
2023, "Evaluating Open-QA Evaluation", arXiv:2305.12421): 2,000 TriviaQA
questions, each answered by five systems (FiD, GPT-3.5, ChatGPT, GPT-4, Bing
Chat), each answer judged correct or not by people. Rows with
``improper == true`` are dropped, and so are labels that are not booleans
(the string ``"nan"``). References are the ``/``-separated golden aliases.

For each grader that applies to open QA it prints, over all (question,
system) pairs:

- ``acc``: fraction of answers where the grader agrees with the human label;
- ``kappa``: Cohen's κ (sklearn ``cohen_kappa_score``);
- ``FP``/``FN``: share of human-wrong answers the grader accepts / of
  human-right answers it rejects;
- ``rho(FP,len)`` / ``rho(FN,len)``: Spearman correlation between answer
  length in words and being a false positive (among human-wrong answers) /
  a false negative (among human-right answers). Positive ``rho(FN,len)``
  means the grader wrongly rejects longer answers more often (length bias;
  Santilli et al. 2025);
- for continuous graders, ``AUROC`` of the raw value against the label, and
  the threshold with the best κ.

Run: ``CONFIDE_DATA_DIR=<data folder> .venv/bin/python benchmarks/graders.py
[--no-embedding] [--max-words N]`` (or ``--data PATH`` to the JSON file;
``--max-words 3`` measures short answers only, the shape confide's
short-answer prompts ask for). The grader docstrings quote its figures.
``numeric``, ``choice`` and ``ast`` do not apply to free-text trivia answers
and are not measured here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from confide.core.records import Item
from confide.grading import GRADERS, embed_texts

SYSTEMS = ("fid", "gpt35", "chatgpt", "gpt4", "newbing")
DATA_FILE = "labeled_generations/evouna_TQ.json"  # inside $CONFIDE_DATA_DIR
BINARY = {"exact": {}, "contains": {}, "f1@0.5": {"threshold": 0.5},
          "rougeL@0.5": {"threshold": 0.5}, "embedding@0.75": {"threshold": 0.75}}
CONTINUOUS = ("f1", "rougeL")


def load(path: Path) -> list[tuple[Item, str, int, str]]:
    """(item, answer, human label, system) for each proper row and system with a boolean label."""
    rows = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, row in enumerate(rows):
        if row.get("improper") is not False:
            continue
        refs = [r.strip() for r in str(row["golden_answer"]).split("/") if r.strip()]
        if not refs:
            continue
        item = Item(id=f"evouna-tq-{i}", prompt=row["question"], references=refs)
        for system in SYSTEMS:
            label, answer = row.get(f"judge_{system}"), row.get(f"answer_{system}")
            if isinstance(label, bool) and isinstance(answer, str):
                out.append((item, answer.strip(), int(label), system))
    return out


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or np.all(y == y[0]) or np.all(x == x[0]):
        return math.nan
    return float(spearmanr(x, y).statistic)


def agreement(pred: np.ndarray, human: np.ndarray, length: np.ndarray) -> dict[str, float]:
    wrong, right = human == 0, human == 1
    fp, fn = (pred == 1) & wrong, (pred == 0) & right
    return {
        "acc": float(np.mean(pred == human)),
        "kappa": float(cohen_kappa_score(human, pred)),
        "FP": float(fp[wrong].mean()),
        "FN": float(fn[right].mean()),
        "rho(FP,len)": _spearman(length[wrong], fp[wrong].astype(float)),
        "rho(FN,len)": _spearman(length[right], fn[right].astype(float)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None,
                    help=f"the EVOUNA JSON file (default: $CONFIDE_DATA_DIR/{DATA_FILE})")
    ap.add_argument("--no-embedding", action="store_true")
    ap.add_argument("--max-words", type=int, default=None,
                    help="keep only answers of at most this many words")
    args = ap.parse_args(argv)
    if args.data is None:
        if not os.environ.get("CONFIDE_DATA_DIR"):
            ap.error(f"give --data, or set CONFIDE_DATA_DIR to the folder holding {DATA_FILE}")
        args.data = Path(os.environ["CONFIDE_DATA_DIR"]) / DATA_FILE
    data = load(args.data)
    if args.max_words is not None:
        data = [d for d in data if len(d[1].split()) <= args.max_words]
    human = np.array([lab for _, _, lab, _ in data])
    length = np.array([len(ans.split()) for _, ans, _, _ in data], dtype=float)
    print(f"{len(data)} labelled answers ({len({it.id for it, _, _, _ in data})} questions, "
          f"{len(SYSTEMS)} systems); human accuracy {human.mean():.3f}; "
          f"median answer length {np.median(length):.0f} words\n")

    values: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    for name in CONTINUOUS + ("exact", "contains"):
        t0 = time.perf_counter()
        values[name] = np.array([GRADERS[name].fn(a, it) for it, a, _, _ in data])
        seconds[name] = time.perf_counter() - t0
    if not args.no_embedding:
        t0 = time.perf_counter()
        texts = [a for _, a, _, _ in data] + [r for it, _, _, _ in data for r in it.references]
        embed_texts([t for t in dict.fromkeys(texts) if t])
        sims = []
        for it, a, _, _ in data:
            if not a:
                sims.append(-1.0)
                continue
            v = embed_texts([a, *it.references])
            sims.append(float((v[1:] @ v[0]).max()))
        values["embedding"] = np.array(sims)
        seconds["embedding"] = time.perf_counter() - t0

    rows = []
    for label, opts in BINARY.items():
        base = label.split("@")[0]
        if base not in values:
            continue
        v = values[base]
        pred = (v >= opts["threshold"]).astype(int) if "threshold" in opts else v.astype(int)
        rows.append((label, agreement(pred, human, length)))
    cols = ["acc", "kappa", "FP", "FN", "rho(FP,len)", "rho(FN,len)"]
    print("| grader | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for label, m in rows:
        print(f"| {label} | " + " | ".join(f"{m[c]:.3f}" for c in cols) + " |")

    print("\ncontinuous graders: AUROC against the human label, best-κ threshold")
    print("| grader | AUROC | best threshold | acc | kappa | seconds |")
    print("|---|---|---|---|---|---|")
    for name in (*CONTINUOUS, "embedding"):
        if name not in values:
            continue
        v = values[name]
        grid = np.round(np.arange(0.05, 1.0, 0.05), 2)
        kappas = [cohen_kappa_score(human, (v >= t).astype(int)) for t in grid]
        best = int(np.argmax(kappas))
        pred = (v >= grid[best]).astype(int)
        print(f"| {name} | {roc_auc_score(human, v):.3f} | {grid[best]:.2f} | "
              f"{np.mean(pred == human):.3f} | {kappas[best]:.3f} | {seconds[name]:.1f} |")
    print("\nper system: human accuracy; contains acc / kappa")
    systems = np.array([s for _, _, _, s in data])
    for name in SYSTEMS:
        mask = systems == name
        if mask.sum() < 10 or human[mask].min() == human[mask].max():
            print(f"  {name:8s} n={int(mask.sum()):5d} too few answers (or one class) to measure")
            continue
        m = agreement(values["contains"][mask].astype(int), human[mask], length[mask])
        print(f"  {name:8s} n={int(mask.sum()):5d} human acc={human[mask].mean():.3f} "
              f"contains acc={m['acc']:.3f} kappa={m['kappa']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
