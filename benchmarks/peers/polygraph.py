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
         "sar", "sentence_sar", "p_true")
# Scored with the generation prompt and the backend's extra forward passes.
FORWARD = ("pmi", "cpmi", "rauq", "attention_score")
JUDGED = ("eigv", "degree", "eccentricity", "kernel_language_entropy", "semantic_entropy",
          "semantic_entropy_weighted", "num_sets", "cocoa", "cocoa_ppl", "cocoa_mte", "label_prob",
          "semantic_density")
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


# ----------------------------------------------------------------------------- end to end

# confide scorer -> the name Polygraph's UEManager gives the estimator's column.
E2E_GREEDY = {"msp": "MaximumSequenceProbability", "mean_logprob": "Perplexity",
              "mean_entropy": "MeanTokenEntropy", "self_certainty": "SelfCertainty",
              "renyi_negentropy": "RenyiNeg", "fisher_rao": "FisherRao",
              "boostedprob": "BoostedProbSequence", "pmi": "MeanPointwiseMutualInformation",
              "cpmi": "MeanConditionalPointwiseMutualInformation", "rauq": "RAUQ",
              "attention_score": "AttentionScore", "p_true": "PTrue"}
E2E_SAMPLED = {"mc_entropy": "MonteCarloSequenceEntropy",
               "mc_entropy_normalized": "MonteCarloNormalizedSequenceEntropy",
               "lexical_similarity": "LexicalSimilarity_rougeL", "eigenscore": "EigenScore"}


def _column(table: dict, name: str) -> list:
    """Polygraph's column for an estimator (AttentionScore's name carries its layer)."""
    return next(v for k, v in table.items() if k == name or k.startswith(name + " ("))


def _greedy_match(ours: list[int], theirs: list[int], stop_or_eos) -> str:
    """How Polygraph's greedy token ids relate to confide's for one item."""
    if ours == theirs:
        return "identical"
    if theirs and stop_or_eos(theirs[-1]) and ours == theirs[:-1]:
        return "identical + Polygraph's end token"
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
              min(len(ours), len(theirs)))
    return f"differ at token {at}"


def _max_delta(mine, theirs, mapping, rows) -> tuple[float, int]:
    mine = np.asarray([mine[i] for i in rows], dtype=float)
    mapped = mapping(np.asarray([math.nan if theirs[i] is None else theirs[i] for i in rows],
                                dtype=float))
    both = np.isfinite(mine) & np.isfinite(mapped)
    return (float(np.max(np.abs(mine[both] - mapped[both]))) if both.any() else math.nan,
            int(both.sum()))


def _export_polygraph_run(stats: dict, prompts: list[str], tokenizer, path: Path) -> None:
    """Polygraph's greedy answers and samples, with its token log-probabilities, in confide's
    own ``jsonl`` log form (what a user with a Polygraph run would import)."""
    def answer(tokens, logprobs):
        return {"answer": tokenizer.decode(tokens),
                "tokens": [tokenizer.decode([t]) for t in tokens],
                "token_logprobs": [min(float(v), 0.0) for v in logprobs]}

    with path.open("w") as fh:
        for n, prompt in enumerate(prompts):
            record = {"id": f"q{n}", "question": prompt,
                      **answer(stats["greedy_tokens"][n], stats["greedy_log_likelihoods"][n]),
                      "samples": [answer(t, lp) for t, lp in zip(
                          stats["sample_tokens"][n], stats["sample_log_likelihoods"][n])]}
            fh.write(json.dumps(record) + "\n")


def _check_unconditioned_rule(backend, stats: dict) -> None:
    """Whether Polygraph's unconditioned log-probabilities (PMI, CPMI) are the answer's own
    tokens read one position late: ``log p(y_j | y_<=j)`` (the chance that y_j comes again)
    rather than ``log p(y_j | y_<j)``."""
    import torch

    late, aligned = 0.0, 0.0
    for tokens, u in zip(stats["greedy_tokens"], stats["greedy_lm_log_likelihoods"]):
        with torch.inference_mode():
            logits = backend.model(input_ids=torch.tensor([tokens])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1).double().numpy()
        u = np.asarray(u, dtype=np.float64)
        late = max(late, float(np.max(np.abs(logp[np.arange(len(tokens)), tokens] - u))))
        if len(tokens) > 1:
            aligned = max(aligned, float(np.max(np.abs(
                logp[np.arange(len(tokens) - 1), tokens[1:]] - u[1:]))))
    print(f"\nPMI, CPMI: Polygraph's unconditioned log p equals log p(y_j | y_<=j) of a pass "
          f"over the answer alone to {late:.1e} (its rule, one position late); the aligned "
          f"log p(y_j | y_<j) differs from it by up to {aligned:.1e}.")


def _check_min_new_tokens(backend, prompts: list[str], stats: dict, rows: list[int]) -> None:
    """The size of Polygraph's ``min_new_tokens=2``: its log-probabilities are read after
    the EOS logit is set to -inf at the first two steps, so there they are renormalised
    over V - 1 tokens, shifted by -log(1 - p(EOS))."""
    import torch

    eos = sorted(backend._eos_ids)
    shift = 0.0
    for i in rows:
        ids = backend.encode(prompts[i]) + list(stats["greedy_tokens"][i])
        start = len(ids) - len(stats["greedy_tokens"][i]) - 1
        with torch.inference_mode():
            logits = backend.model(input_ids=torch.tensor([ids])).logits[0].float()
        p = torch.softmax(logits[start:start + 2].double(), dim=-1)[:, eos].sum(-1)
        shift = max(shift, float(-torch.log1p(-p).max()))
    print(f"min_new_tokens=2: Polygraph's first two steps exclude EOS, which shifts their log p "
          f"by up to {shift:.1e} (p(EOS) there up to {-math.expm1(-shift):.1e}) and counts "
          f"V - 1 tokens in SelfCertainty, Renyi and Fisher-Rao.")


def end_to_end(args: argparse.Namespace, python: Path, folder: Path) -> None:
    """Each tool's own pipeline on the same prompts: greedy tokens compared, then every
    estimator both implement; sampled methods scored by confide on Polygraph's samples."""
    from confide.api import open_run
    from confide.backends.base import GenerationSpec, item_seed
    from confide.backends.hf import HFBackend
    from confide.records import Generation, Record
    from confide.scorers import SCORERS, ScoringContext, run_scorer
    from confide.tasks import load_task

    backend = HFBackend(args.model, dtype="float32", batch_size=8)
    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=backend.has_chat_template) for it in task.items]
    # top 200: every token past it has p <= 1/200 < BoostedProb's epsilon, so its dominant
    # set is always known
    if not all(isinstance(p, str) for p in prompts):
        raise SystemExit("end to end: TriviaQA's k-shot text prompt expected")
    payload = folder / "pipeline_in.json"
    payload.write_text(json.dumps({
        "model_dir": str(backend.source.path), "dtype": "float32", "prompts": prompts,
        "targets": [it.references[0] for it in task.items], "batch_size": 1,
        "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "top_p": 0.9,
        "stop": list(task.stop), "seed": 0, "samples": args.samples, "instruct": False}))
    out = folder / "pipeline_out.json"
    seconds, _ = run_worker(python, "pipeline", payload, out)
    theirs = json.loads(out.read_text())
    stats, vocab = theirs["stats"], theirs["vocab"]

    # confide's own pipeline: greedy only (samples differ by random generator, so sampled
    # methods are compared on Polygraph's samples below).
    spec = GenerationSpec(max_new_tokens=args.max_new_tokens, stop=tuple(task.stop),
                          n_samples=0, top_k_alternatives=200)
    results = backend.generate(prompts, spec, [item_seed(0, it.id) for it in task.items])
    records = [Record(item=it, greedy=r.greedy, samples=[]) for it, r in zip(task.items, results)]
    contexts = [ScoringContext(backend=backend, options={"seed": 0, "prompt": p}) for p in prompts]
    ours = {name: [run_scorer(SCORERS[name], r, c)[0] for r, c in zip(records, contexts)]
            for name in E2E_GREEDY}

    tokenizer = backend.tokenizer
    def stop_or_eos(t: int) -> bool:
        return t == tokenizer.eos_token_id or any(s in tokenizer.decode([t]) for s in task.stop)
    match = [_greedy_match(list(r.greedy.token_ids), list(t), stop_or_eos)
             for r, t in zip(records, stats["greedy_tokens"])]
    same = [i for i, m in enumerate(match) if m.startswith("identical")]
    print(f"\nEnd to end: {len(prompts)} TriviaQA items (k-shot text prompt), float32, greedy "
          f"decoding, <= {args.max_new_tokens} tokens, stop at {task.stop!r}; Polygraph's "
          f"UEManager at batch 1 ({theirs['pipeline_seconds']:.0f} s pipeline, {seconds:.0f} s "
          f"wall), confide's HF backend at batch 8.")
    kinds = {k: match.count(k) for k in dict.fromkeys(match)}
    print("Greedy token ids, item by item: " + ", ".join(f"{v} {k}" for k, v in kinds.items()))
    for i, m in enumerate(match):
        if not m.startswith("identical"):
            print(f"  item {i}: {m}: confide {records[i].greedy.text!r}, "
                  f"Polygraph {stats['greedy_texts'][i]!r}")
    header = f"{'confide':24s} {'Polygraph':40s} {'mapping':12s} {'max |delta|':>11s} " \
             f"{'without end token':>17s} {'n':>3s}"
    print("\n" + header + "\n" + "-" * len(header))
    for name, column in E2E_GREEDY.items():
        label, mapping = _mapping(name, vocab)
        delta, n = _max_delta(ours[name], _column(theirs["estimations"], column), mapping, same)
        trimmed = theirs["without_end_token"].get(column)
        cut = _max_delta(ours[name], trimmed, mapping, same)[0] if trimmed else math.nan
        print(f"{name:24s} {column:40s} {label:12s} {delta:11.2e} {cut:17.2e} {n:3d}")

    _check_unconditioned_rule(backend, stats)
    _check_min_new_tokens(backend, prompts, stats, same)

    # The reverse direction: Polygraph's own samples, scored by confide.
    log = folder / "polygraph_samples.jsonl"
    _export_polygraph_run(stats, prompts, tokenizer, log)
    run_dir = folder / "imported"
    names = [n for n in E2E_SAMPLED if n != "eigenscore"]
    subprocess.run([str(Path(sys.executable).with_name("confide")), "score", str(log),
                    "--format", "jsonl", "--scorers", ",".join(names), "--out", str(run_dir)],
                   check=True, stdout=subprocess.DEVNULL)
    imported = {r.item.id: r for r in open_run(run_dir).records}
    mine = {name: [imported[f"q{n}"].scores.get(name, math.nan) for n in range(len(prompts))]
            for name in names}
    # EigenScore reads hidden states, which no log form carries: the same record builder.
    middle = backend.model.config.num_hidden_layers // 2
    mine["eigenscore"] = []
    for n, embeddings in enumerate(stats["sample_embeddings"]):
        samples = [Generation(text, hidden={f"{middle}:last": np.asarray(e, dtype=np.float64)})
                   for text, e in zip(stats["sample_texts"][n], embeddings)]
        record = Record(item=task.items[n], greedy=Generation(stats["greedy_texts"][n]),
                        samples=samples)
        mine["eigenscore"].append(run_scorer(SCORERS["eigenscore"], record)[0])
    everyone = list(range(len(prompts)))
    density_rows = _density_parity(python, folder, stats["sample_embeddings"])
    print(f"\nReverse: Polygraph's own {args.samples} samples per item (texts, token ids, token "
          f"log-probabilities; embeddings for EigenScore) scored by confide "
          f"(`confide score` on the exported jsonl).")
    header = f"{'confide':24s} {'Polygraph':40s} {'mapping':12s} {'max |delta|':>11s} {'n':>3s}"
    print(header + "\n" + "-" * len(header))
    for name, column in E2E_SAMPLED.items():
        label, mapping = _mapping(name, vocab)
        delta, n = _max_delta(mine[name], _column(theirs["estimations"], column), mapping,
                              everyone)
        print(f"{name:24s} {column:40s} {label:12s} {delta:11.2e} {n:3d}")
    for name, (column, delta, n) in density_rows.items():
        print(f"{name:24s} {column:40s} {'-U':12s} {delta:11.2e} {n:3d}")


def _density_parity(python: Path, folder: Path, embeddings: list) -> dict:
    """confide's Gaussian against Polygraph's Mahalanobis estimators on Polygraph's own
    sample embeddings: the first half of the items' samples fit, the next quarter is the
    background (relative Mahalanobis), the last quarter is scored."""
    from confide.density import _confidence

    per_item = [np.asarray(e, dtype=np.float64) for e in embeddings]
    n = len(per_item)
    parts = {"train": per_item[:n // 2], "background": per_item[n // 2:3 * n // 4],
             "test": per_item[3 * n // 4:]}
    files = {}
    for key, rows in parts.items():
        files[key] = f"{key}.npy"
        np.save(folder / files[key], np.concatenate(rows))
    payload = folder / "density_in.json"
    payload.write_text(json.dumps(files))
    out = folder / "density_out.json"
    run_worker(python, "density", payload, out)
    theirs = json.loads(out.read_text())
    arrays = {k: np.load(folder / f) for k, f in files.items()}
    params = {"train": arrays["train"].tolist(), "background": arrays["background"].tolist()}
    rows = {}
    for name, column in (("mahalanobis", "MahalanobisDistanceSeq"),
                         ("relative_mahalanobis", "RelativeMahalanobisDistanceSeq")):
        ours = _confidence(name, params, arrays["test"], np.zeros(len(arrays["test"])))
        u = np.asarray(theirs[name], dtype=np.float64)
        both = np.isfinite(ours) & np.isfinite(u)
        rows[name] = (column, float(np.max(np.abs(ours[both] + u[both]))), int(both.sum()))
    return rows


# ----------------------------------------------------------------------------- speed

CONFIDE_SIDE = """
import json, resource, sys, time
began = time.perf_counter()
from confide.api import execute
from confide.backends.hf import HFBackend
from confide.plan import RunConfig
cfg = json.load(open(sys.argv[1]))
imported = time.perf_counter()
backend = HFBackend(cfg["model"], dtype=cfg["dtype"], batch_size=8)
loaded = time.perf_counter()
outcome = execute(RunConfig(**cfg["config"]), cfg["out"], backend=backend)
done = time.perf_counter()
json.dump({"import_seconds": imported - began, "load_seconds": loaded - imported,
           "pipeline_seconds": done - loaded, "generation_seconds": outcome.generation_seconds},
          open(sys.argv[2], "w"))
"""


def _speed_prompts(task, tokenizer) -> list[str]:
    """The exact text confide's backend encodes for each item (chat messages through the
    model's chat template), which Polygraph is given as its input text."""
    prompts = []
    for item in task.items:
        rendered = task.render(item, chat=True)
        prompts.append(rendered if isinstance(rendered, str) else tokenizer.apply_chat_template(
            rendered, add_generation_prompt=True, tokenize=False))
    return prompts


def _chat_file(task, folder: Path) -> Path:
    """The same TriviaQA questions as a user's own QA file, asked with the chat prompt."""
    path = folder / "triviaqa_questions.jsonl"
    with path.open("w") as fh:
        for item in task.items:
            fh.write(json.dumps({"id": item.id, "question": item.question,
                                 "references": list(item.references)}) + "\n")
    return path


def speed(args: argparse.Namespace, python: Path, folder: Path) -> None:
    """Each tool's whole pipeline on identical work, per prompt style and dtype."""
    from transformers import AutoTokenizer

    from confide.api import open_run
    from confide.backends.models import resolve_model
    from confide.tasks import load_task

    model_dir = resolve_model(args.model).path
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    kshot = load_task("triviaqa", limit=args.items)
    styles = {"k-shot": ("triviaqa", {}, kshot),
              "chat": (str(_chat_file(kshot, folder)), {"prompt": "chat"}, None)}
    rows = []
    for style in args.prompts:
        task_name, options, task = styles[style]
        task = task or load_task(task_name, limit=args.items, **options)
        prompts = _speed_prompts(task, tokenizer)
        for dtype in args.dtypes:
            run_dir = folder / f"confide-{style}-{dtype}"
            cfg = folder / f"confide-{style}-{dtype}.json"
            cfg.write_text(json.dumps({"model": args.model, "dtype": dtype, "out": str(run_dir),
                                       "config": {
                "model": args.model, "task": task_name, "limit": args.items,
                "scorers": list(SPEED_SCORERS), "n_samples": args.samples,
                "max_new_tokens": args.max_new_tokens, "batch_size": 8,
                "task_options": options}}))
            out = folder / f"confide-{style}-{dtype}_out.json"
            seconds, peak = timed([sys.executable, "-c", CONFIDE_SIDE, str(cfg), str(out)],
                                  dict(os.environ))
            got = json.loads(out.read_text())
            records = open_run(run_dir).records
            greedy = sum(r.greedy.n_tokens for r in records)
            sampled = sum(s.n_tokens for r in records for s in r.samples)
            rows.append((style, dtype, "confide, batch 8", seconds, got["pipeline_seconds"],
                         greedy, sampled, peak))
            for batch in args.polygraph_batches:
                payload = folder / f"speed-{style}-{dtype}-{batch}.json"
                payload.write_text(json.dumps({
                    "model_dir": model_dir, "dtype": dtype, "prompts": prompts,
                    "targets": [it.references[0] for it in task.items], "batch_size": batch,
                    "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "top_p": 0.9,
                    "stop": list(task.stop), "seed": 0, "samples": args.samples}))
                out = folder / f"speed-{style}-{dtype}-{batch}_out.json"
                seconds, peak = run_worker(python, "speed", payload, out)
                got = json.loads(out.read_text())
                rows.append((style, dtype, f"LM-Polygraph UEManager, batch {batch}", seconds,
                             got["pipeline_seconds"], got["greedy_tokens"],
                             got["sample_tokens"], peak))

    print(f"\nSpeed on identical work: first {args.items} TriviaQA questions, greedy + "
          f"{args.samples} samples of <= {args.max_new_tokens} tokens, {len(SPEED_SCORERS)} "
          f"estimators, {os.environ.get('OMP_NUM_THREADS', 'default')} CPU thread(s) per "
          f"process, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    header = f"{'prompt':7s} {'dtype':9s} {'pipeline':36s} {'wall s':>7s} {'pipe s':>7s} " \
             f"{'greedy tok':>10s} {'sample tok':>10s} {'tok/s':>6s} {'RSS GB':>6s} " \
             f"{'pipe / confide':>14s}"
    print(header + "\n" + "-" * len(header))
    fastest: dict[tuple[str, str], float] = {}
    for style, dtype, label, wall, pipe, greedy, sampled, peak in rows:
        tool = label.split(",")[0]
        fastest[style, tool] = min(fastest.get((style, tool), math.inf), pipe)
        base = next(r[4] for r in rows if r[0] == style and r[1] == dtype
                    and r[2].startswith("confide"))
        print(f"{style:7s} {dtype:9s} {label:36s} {wall:7.1f} {pipe:7.1f} {greedy:10d} "
              f"{sampled:10d} {(greedy + sampled) / pipe:6.1f} {peak / 1e9:6.2f} "
              f"{pipe / base:14.2f}")
    for style in args.prompts:
        ours = fastest[style, "confide"]
        theirs = fastest[style, "LM-Polygraph UEManager"]
        print(f"{style}: each at its fastest dtype and batch, Polygraph's pipeline takes "
              f"{theirs / ours:.2f}x confide's ({theirs:.1f} s against {ours:.1f} s)")
    print("Wall: the whole process (imports, model load, generation, scoring; confide also "
          "grades and stores). Pipe: without imports and model load. tok/s: answer tokens per "
          "pipeline second, as each tool counts them (Polygraph's include the token that ends "
          "an answer).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=30, help="first N bundled TriviaQA items")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--dtypes", type=lambda t: t.split(","),
                        default=["float32", "bfloat16"], help="speed: dtypes, both tools each")
    parser.add_argument("--prompts", type=lambda t: t.split(","), default=["k-shot", "chat"],
                        help="speed: prompt styles, k-shot and/or chat")
    parser.add_argument("--parity-dtype", default="float32")
    parser.add_argument("--polygraph-batches", type=lambda t: [int(b) for b in t.split(",")],
                        default=[8], help="speed: Polygraph's batch sizes, e.g. 1,8")
    parser.add_argument("--venv", type=Path, default=None,
                        help="LM-Polygraph's virtualenv (built if missing)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for every process (OMP_NUM_THREADS; default: torch's "
                             "choice). On a loaded machine 1 avoids oversubscription")
    parser.add_argument("--skip-parity", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the exchanged files (payloads, exports, runs) in this folder")
    parser.add_argument("--end-to-end", action="store_true",
                        help="only the end-to-end parity: each tool's own pipeline")
    args = parser.parse_args()
    if args.threads:  # read by torch in this process and in every child
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)

    python = polygraph_python(args.venv or default_venv())
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="confide-polygraph-") as scratch:
        tmp = args.keep or scratch
        if args.end_to_end:
            end_to_end(args, python, Path(tmp))
            return
        if not args.skip_parity:
            parity(args, python, Path(tmp))
        if not args.skip_speed:
            speed(args, python, Path(tmp))


if __name__ == "__main__":
    main()
