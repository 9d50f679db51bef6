"""confide beside LM-Polygraph 0.7.0: parity on identical generations, speed on identical work.

LM-Polygraph is not a dependency of confide. This script builds it its own
virtualenv once (CPU torch first, then ``lm-polygraph==0.7.0``; about 3 min),
in ``<confide cache>/peers/lm-polygraph-0.7.0`` or ``--venv``, and runs its side
as a subprocess (``polygraph_worker.py``) that reads and writes JSON.

Parity
    confide generates once (bundled SmolLM2, float32, greedy + k samples) and
    scores. The same greedy answers, samples, token statistics, similarity
    matrices and clusters go to Polygraph's estimators through their statistics
    dictionary (nothing is regenerated). Per method both implement, it prints
    the largest |confide - mapped Polygraph| over the items. Polygraph gives an
    uncertainty U (higher = less likely correct); confide a confidence c
    (higher = more likely correct); the mapping is c = -U except P(True),
    where Polygraph's U = -log p(True) and c = exp(-U).

Speed
    ``confide run`` against Polygraph's whole pipeline (``UEManager`` with its
    default stat calculators) on identical work: the bundled model, the first
    N bundled TriviaQA questions with the same prompts, greedy + 10 samples of
    at most 24 tokens (temperature 1, top-p 0.9, stop at a newline) and the ten
    estimators both implement without an NLI model (MSP, perplexity, mean
    token entropy, self-certainty, MC entropy and its normalised form, ROUGE-L
    lexical similarity, EigV, Degree, Eccentricity; confide's graph scorers
    use TriviaQA's ``exact`` judge, Polygraph's its Jaccard similarity, so
    neither loads a model for them). One process each, one
    after the other, each at its fastest settings: the same dtype, confide at
    batch 8, Polygraph at batch 1 (its default) and 8 with attentions and
    hidden states switched off. Prints wall time of the whole process, tokens
    generated, peak resident memory and the ratios.

    .venv/bin/python benchmarks/peers/polygraph.py --items 30
    .venv/bin/python benchmarks/peers/polygraph.py --items 10 --skip-speed
    # on a shared, oversubscribed CPU: one thread per process for both tools
    .venv/bin/python benchmarks/peers/polygraph.py --items 10 --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
POLYGRAPH = "lm-polygraph==0.7.0"
TORCH = "torch==2.13.0"  # the CPU build; installed first so Polygraph does not pull another

# Speed: the estimators both tools implement without an NLI model (Polygraph side in the worker).
SPEED_SCORERS = ("msp", "mean_logprob", "mean_entropy", "self_certainty", "mc_entropy",
                 "mc_entropy_normalized", "lexical_similarity", "eigv", "degree", "eccentricity")
# Parity: rows of the table. Judge-dependent rows are compared once per judge.
PLAIN = ("msp", "mean_logprob", "mean_entropy", "self_certainty", "renyi_negentropy",
         "fisher_rao", "mc_entropy", "mc_entropy_normalized", "lexical_similarity", "token_sar",
         "sar", "p_true")
# Scored with the generation prompt and the backend's extra forward passes.
FORWARD = ("pmi", "cpmi", "rauq", "attention_score")
JUDGED = ("eigv", "degree", "eccentricity", "kernel_language_entropy", "semantic_entropy",
          "semantic_entropy_weighted", "num_sets", "cocoa")
JUDGES = ("exact", "embedding")


# ----------------------------------------------------------------------------- the venv

def default_venv() -> Path:
    from confide.backends.models import cache_dir

    return cache_dir() / "peers" / "lm-polygraph-0.7.0"


def polygraph_python(venv: Path) -> Path:
    """The Python of Polygraph's own virtualenv, built on first use."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    partial = venv.with_name(venv.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    print(f"building LM-Polygraph's virtualenv in {venv} (about 3 minutes) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(partial)], check=True)
    pip = [str(partial / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, POLYGRAPH], check=True)
    partial.rename(venv)  # only a finished venv gets the final name
    return python


def run_worker(python: Path, mode: str, payload: Path, out: Path) -> tuple[float, int]:
    """Run the Polygraph worker; return (wall seconds, peak resident memory in bytes)."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)  # confide's source must not leak into Polygraph's venv
    return timed([str(python), str(HERE / "polygraph_worker.py"), mode, str(payload), str(out)],
                 env)


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall time and peak RSS of one child process (its own rusage, not the family's)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(output.decode(errors="replace")[-6000:])
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed with exit code {proc.returncode}")
    return seconds, usage.ru_maxrss * 1024  # Linux reports kilobytes


# ----------------------------------------------------------------------------- parity

def _reference_log_probs(backend, prompt, token_ids: list[int]) -> np.ndarray:
    """Full next-token log-distributions along the answer, from one teacher-forced pass."""
    import torch

    ids = backend.encode(prompt) + list(token_ids)
    with torch.inference_mode():
        logits = backend.model(input_ids=torch.tensor([ids])).logits[0].float()
    start = len(ids) - len(token_ids) - 1
    logp = torch.log_softmax(logits[start:start + len(token_ids)], dim=-1)
    return logp.double().numpy()


def _token_similarity(question: str, tokens: list[str]) -> list[float]:
    """cos(e(q + y), e(q + y without token i)) per token, the similarity confide's TokenSAR uses."""
    from confide.grading import embed_texts

    if not tokens:
        return []
    texts = [f"{question} {''.join(tokens).strip()}"] + [
        f"{question} {''.join(tokens[:i] + tokens[i + 1:]).strip()}" for i in range(len(tokens))]
    e = np.asarray(embed_texts(texts), dtype=np.float64)
    return (e[1:] @ e[0]).tolist()


def _mapping(name: str, vocab: int):
    """Polygraph's uncertainty U mapped to confide's confidence, per row (default c = -U)."""
    return {
        "p_true": ("exp(-U)", lambda u: np.exp(-u)),
        # RenyiNeg 0.7 returns -H_alpha - log V: the divergence shifted by -2 log V, unnegated
        "renyi_negentropy": ("U + 2 log V", lambda u: u + 2 * math.log(vocab)),
        "fisher_rao": ("U", lambda u: u),  # a distance from uniform, returned unnegated
        "rauq": ("1 - U", lambda u: 1 - u),
    }.get(name, ("-U", lambda u: -u))


def parity(args: argparse.Namespace, python: Path, folder: Path) -> None:
    import torch

    from confide.backends.base import GenerationSpec, item_seed
    from confide.backends.hf import HFBackend, _divergences_from_uniform
    from confide.features import affinity, clusters
    from confide.grading import embed_texts
    from confide.judges import make_judge
    from confide.records import Record
    from confide.scorers import SCORERS, ScoringContext, run_scorer  # first: registers scorers
    from confide.scorers.reflexive import p_true_prompt, question_text
    from confide.tasks import load_task

    backend = HFBackend(args.model, dtype=args.parity_dtype, batch_size=8)
    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=backend.has_chat_template) for it in task.items]
    spec = GenerationSpec(max_new_tokens=args.max_new_tokens, stop=tuple(task.stop),
                          n_samples=args.samples, temperature=1.0, top_p=0.9)
    t0 = time.perf_counter()
    results = backend.generate(prompts, spec, [item_seed(0, it.id) for it in task.items])
    print(f"parity: generated {len(results)} items x (greedy + {args.samples} samples) in "
          f"{time.perf_counter() - t0:.0f} s, {backend.config()['dtype']}", flush=True)
    records = [Record(item=it, greedy=r.greedy, samples=r.samples)
               for it, r in zip(task.items, results, strict=True)]

    # confide's values: judge-free scorers once, judged scorers once per judge.
    ours: dict[str, list[float]] = {}
    contexts = {j: ScoringContext(backend=backend, judge=make_judge(j), options={"seed": 0})
                for j in JUDGES}
    for name in PLAIN:
        ours[name] = [run_scorer(SCORERS[name], r, contexts["exact"])[0] for r in records]
    for judge, ctx in contexts.items():
        for name in JUDGED:
            ours[f"{name}@{judge}"] = [run_scorer(SCORERS[name], r, ctx)[0] for r in records]
    # The forward-pass scorers, each record with its prompt; their passes are kept to feed
    # Polygraph the same unconditioned log-probabilities and attention weights.
    forward_ctx = [ScoringContext(backend=backend, options={"seed": 0, "prompt": prompt})
                   for prompt in prompts]
    for name in FORWARD:
        ours[name] = [run_scorer(SCORERS[name], r, c)[0] for r, c in zip(records, forward_ctx)]

    # The same inputs, in Polygraph's statistics layout.
    items = []
    for n, (record, prompt) in enumerate(zip(records, prompts)):
        g, samples = record.greedy, record.samples
        question = question_text(record.item)
        full = _reference_log_probs(backend, prompt, g.token_ids)
        np.save(folder / f"greedy{n}.npy", full)
        # Like for like: confide's self_certainty on KL(U || p_t) of the same reference pass.
        kl = -math.log(full.shape[-1]) - full.mean(axis=-1) if len(full) else np.zeros(0)
        same = Record(item=record.item, greedy=replace(g, token_kl_uniform=kl), samples=samples)
        ours.setdefault("self_certainty:reference", []).append(
            run_scorer(SCORERS["self_certainty"], same)[0])
        # Like for like: confide's divergence columns from the same reference pass.
        renyi, fisher = (t.double().numpy() for t in _divergences_from_uniform(
            torch.from_numpy(full), math.log(full.shape[-1])))
        same = replace(same, greedy=replace(same.greedy, token_renyi_uniform=renyi,
                                            token_fisher_rao_uniform=fisher))
        for name in ("renyi_negentropy", "fisher_rao"):
            ours.setdefault(f"{name}:reference", []).append(run_scorer(SCORERS[name], same)[0])
        # Like for like: Polygraph has no unconditioned probability for the first token.
        unconditioned = forward_ctx[n].features.get((record.item.id, "unconditioned_logprobs"))
        attention = forward_ctx[n].features.get((record.item.id, "attention_diagonals"))
        if unconditioned is not None:
            first_dropped = ScoringContext(backend=backend)
            first_dropped.features[(record.item.id, "unconditioned_logprobs")] = \
                np.concatenate([[0.0], unconditioned[1:]])
            for name in ("pmi", "cpmi"):
                ours.setdefault(f"{name}:first", []).append(
                    run_scorer(SCORERS[name], record, first_dropped)[0])
        else:
            for name in ("pmi", "cpmi"):
                ours.setdefault(f"{name}:first", []).append(math.nan)
        if attention is not None:
            np.save(folder / f"attention{n}.npy", attention[1])
        e = np.asarray(embed_texts([s.text for s in samples]), dtype=np.float64)
        answer = g.text
        p_true_logp = None
        if answer.strip():
            p_prompt = p_true_prompt(record.item, answer, chat=backend.has_chat_template)
            p_true_logp = float(backend.next_token_logprobs([p_prompt], ["True"])[0, 0])
        judged = {}
        for judge, ctx in contexts.items():
            judged[judge] = {
                "affinity": np.asarray(affinity(record, ctx)).tolist(),
                # confide's own clusters of the samples, relabelled 0..m-1
                "sample_clusters": np.unique(clusters(record, ctx)[1:],
                                             return_inverse=True)[1].tolist()}
        items.append({
            "greedy_log_likelihoods": np.asarray(g.token_logprobs, float).tolist(),
            "entropy": np.asarray(g.token_entropies, float).tolist(),
            "greedy_log_probs": f"greedy{n}.npy",
            "reference_logp_of_greedy": full[np.arange(len(g.token_ids)), g.token_ids].tolist(),
            "sample_texts": [s.text for s in samples],
            "sample_tokens": [list(s.token_ids) for s in samples],
            "sample_log_likelihoods": [np.asarray(s.token_logprobs, float).tolist()
                                       for s in samples],
            "token_similarity": _token_similarity(question, list(g.tokens)),
            "sample_token_similarity": [_token_similarity(question, list(s.tokens))
                                        for s in samples],
            "sample_sentence_similarity": np.clip(e @ e.T, 0.0, 1.0).tolist(),
            "p_true_logp": p_true_logp,
            "greedy_tokens": list(g.token_ids),
            "unconditioned": None if unconditioned is None else unconditioned.tolist(),
            "attention": None if attention is None else
            {"prompt_length": attention[0], "diagonal": f"attention{n}.npy"},
            "judges": judged,
        })
    payload = folder / "parity_in.json"
    cfg = backend.model.config
    cfg = getattr(cfg, "text_config", cfg)
    payload.write_text(json.dumps({
        "judges": list(JUDGES), "items": items,
        "model": {"num_hidden_layers": cfg.num_hidden_layers,
                  "num_attention_heads": cfg.num_attention_heads}}))
    out = folder / "parity_out.json"
    seconds, _ = run_worker(python, "parity", payload, out)
    theirs = json.loads(out.read_text())

    drift = max((float(np.max(np.abs(np.asarray(it["reference_logp_of_greedy"])
                                     - np.asarray(it["greedy_log_likelihoods"]))))
                 for it in items if it["greedy_log_likelihoods"]), default=0.0)
    print(f"\nParity on identical generations: {len(items)} TriviaQA items, greedy + "
          f"{args.samples} samples, <= {args.max_new_tokens} tokens, "
          f"{backend.config()['dtype']} (Polygraph side: {seconds:.0f} s)")
    print("Mapping: confide c = -U_polygraph unless the row says otherwise. "
          "max |delta| over items where both are finite;")
    print("'NaN only in' counts items where one side has no value. Judge columns: the "
          "similarity matrix and clusters both were fed.")
    print(f"Self-certainty, Renyi, Fisher-Rao: Polygraph needs full distributions, taken from "
          f"a teacher-forced reference pass over the greedy answer, whose log p differs from the "
          f"decoding loop's by up to {drift:.1e}; the row below each gives confide the same "
          f"pass's statistics.")
    print("PMI, CPMI: Polygraph has no unconditioned probability for the first token; the row "
          "below each sets confide's to 0 (u_0 = 0). RAUQ, attention score: both fed the "
          "attention weights of confide's pass.\n")
    header = f"{'confide':28s} {'Polygraph':42s} {'mapping':12s} {'judge':9s} " \
             f"{'max |delta|':>11s} {'n':>3s} {'NaN only in':>14s}"
    print(header)
    print("-" * len(header))
    rows = [(name, name, "-") for name in PLAIN + FORWARD]
    for name, sub, label in [("self_certainty", "reference", "same reference pass"),
                             ("renyi_negentropy", "reference", "same reference pass"),
                             ("fisher_rao", "reference", "same reference pass"),
                             ("pmi", "first", "with u_0 = 0"), ("cpmi", "first", "with u_0 = 0")]:
        at = [r[0] for r in rows].index(name) + 1
        rows.insert(at, (f"  {label}", f"{name}:{sub}", "-"))
    rows += [(name, f"{name}@{judge}", judge) for name in JUDGED for judge in JUDGES]
    vocab = backend.model.config.vocab_size
    for name, key, judge in rows:
        base = key.split(":")[0]
        mine = np.asarray(ours[key], dtype=float)
        u = np.array([math.nan if v is None else v for v in theirs[base]["values"]])
        label, mapping = _mapping(base.split("@")[0], vocab)
        mapped = mapping(u)
        both = np.isfinite(mine) & np.isfinite(mapped)
        delta = float(np.max(np.abs(mine[both] - mapped[both]))) if both.any() else math.nan
        only = f"{int((np.isfinite(mapped) & ~np.isfinite(mine)).sum())} c / " \
               f"{int((np.isfinite(mine) & ~np.isfinite(mapped)).sum())} P"
        print(f"{name:28s} {theirs[base]['estimator']:42s} {label:12s} {judge:9s} "
              f"{delta:11.2e} {int(both.sum()):3d} {only:>14s}")


# ----------------------------------------------------------------------------- speed

def speed(args: argparse.Namespace, python: Path, folder: Path) -> None:
    from transformers import AutoTokenizer

    from confide.api import open_run
    from confide.backends.hf import choose_dtype
    from confide.backends.models import resolve_model
    from confide.tasks import load_task

    dtype = args.dtype or str(choose_dtype("cpu")).removeprefix("torch.")
    model_dir = resolve_model(args.model).path
    task = load_task("triviaqa", limit=args.items)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = []
    for item in task.items:  # the exact text confide's backend encodes
        rendered = task.render(item, chat=True)  # TriviaQA: a k-shot text for every model
        prompts.append(rendered if isinstance(rendered, str) else tokenizer.apply_chat_template(
            rendered, add_generation_prompt=True, tokenize=False))
    rows = []

    run_dir = folder / "confide-run"
    cmd = [str(Path(sys.executable).with_name("confide")), "run", "--model", args.model,
           "--task", "triviaqa", "--limit", str(args.items), "--samples", str(args.samples),
           "--max-new-tokens", str(args.max_new_tokens), "--scorers", ",".join(SPEED_SCORERS),
           "--batch-size", "8", "--no-report", "--out", str(run_dir)]
    seconds, peak = timed(cmd, {**os.environ, "CONFIDE_DTYPE": dtype})
    records = open_run(run_dir).records
    greedy = sum(r.greedy.n_tokens for r in records)
    sampled = sum(s.n_tokens for r in records for s in r.samples)
    rows.append(("confide run, batch 8", seconds, greedy, sampled, peak))

    for batch in args.polygraph_batches:
        payload = folder / f"speed{batch}.json"
        payload.write_text(json.dumps({
            "model_dir": model_dir, "dtype": dtype, "prompts": prompts,
            "targets": [it.references[0] for it in task.items], "batch_size": batch,
            "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "top_p": 0.9,
            "stop": list(task.stop), "seed": 0}))
        out = folder / f"speed{batch}_out.json"
        seconds, peak = run_worker(python, "speed", payload, out)
        got = json.loads(out.read_text())
        rows.append((f"LM-Polygraph UEManager, batch {batch}", seconds, got["greedy_tokens"],
                     got["sample_tokens"], peak))

    base = rows[0][1]
    print(f"\nSpeed on identical work: first {args.items} TriviaQA items, greedy + {args.samples}"
          f" samples of <= {args.max_new_tokens} tokens, {len(SPEED_SCORERS)} estimators, "
          f"{dtype}, {os.environ.get('OMP_NUM_THREADS', 'default')} CPU thread(s) per process, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    header = f"{'pipeline':34s} {'wall s':>8s} {'greedy tok':>10s} {'sample tok':>10s} " \
             f"{'tok/s':>7s} {'peak RSS GB':>11s} {'time / confide':>14s}"
    print(header)
    print("-" * len(header))
    for label, seconds, greedy, sampled, peak in rows:
        print(f"{label:34s} {seconds:8.1f} {greedy:10d} {sampled:10d} "
              f"{(greedy + sampled) / seconds:7.1f} {peak / 1e9:11.2f} {seconds / base:14.2f}")
    print("Wall time is the whole process (imports, model load, generation, scoring; confide "
          "also grades and stores). Tokens are answer tokens as each tool counts them "
          "(Polygraph's include the end-of-sequence token).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=30, help="first N bundled TriviaQA items")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--dtype", default=None,
                        help="speed: both tools' dtype (default: confide's choice for the CPU)")
    parser.add_argument("--parity-dtype", default="float32")
    parser.add_argument("--polygraph-batches", type=lambda t: [int(b) for b in t.split(",")],
                        default=[1, 8], help="speed: Polygraph's batch sizes, e.g. 1,8")
    parser.add_argument("--venv", type=Path, default=None,
                        help="LM-Polygraph's virtualenv (built if missing)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for every process (OMP_NUM_THREADS; default: torch's "
                             "choice). On a loaded machine 1 avoids oversubscription")
    parser.add_argument("--skip-parity", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    if args.threads:  # read by torch in this process and in every child
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)

    python = polygraph_python(args.venv or default_venv())
    with tempfile.TemporaryDirectory(prefix="confide-polygraph-") as tmp:
        if not args.skip_parity:
            parity(args, python, Path(tmp))
        if not args.skip_speed:
            speed(args, python, Path(tmp))


if __name__ == "__main__":
    main()
