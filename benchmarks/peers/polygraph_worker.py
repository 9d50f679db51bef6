"""The LM-Polygraph side of ``polygraph.py``; runs inside LM-Polygraph's own virtualenv.

It imports nothing from confide (confide is not installed there). Two modes:

``parity IN.json OUT.json``
    Feeds the statistics confide generated (greedy answers, samples, their
    token log-probabilities, similarity matrices, clusters) to Polygraph's
    estimators through their statistics dictionary, one item at a time, and
    writes each estimator's uncertainty per item (``null`` where it raised).

``speed IN.json OUT.json``
    Runs the whole Polygraph pipeline (``UEManager`` with its default stat
    calculators) on the given prompts and writes the time spent and the
    tokens generated.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np


def _estimators() -> dict:
    """confide row name -> (Polygraph estimator, which statistics it is fed)."""
    from lm_polygraph import estimators as E

    return {
        "msp": (E.MaximumSequenceProbability(), "greedy"),
        "mean_logprob": (E.Perplexity(), "greedy"),
        "mean_entropy": (E.MeanTokenEntropy(), "greedy"),
        "self_certainty": (E.SelfCertainty(), "greedy"),
        "renyi_negentropy": (E.RenyiNeg(), "greedy"),       # alpha 0.5, temperature 2
        "fisher_rao": (E.FisherRao(), "greedy"),            # temperature 2
        "pmi": (E.MeanPointwiseMutualInformation(), "greedy"),
        "cpmi": (E.MeanConditionalPointwiseMutualInformation(), "greedy"),
        "rauq": (E.RAUQ(instruct=True), "greedy"),          # alpha 0.5 (a chat model)
        "attention_score": (E.AttentionScore(), "greedy"),  # whole sequence, middle layer
        "mc_entropy": (E.MonteCarloSequenceEntropy(), "samples"),
        "mc_entropy_normalized": (E.MonteCarloNormalizedSequenceEntropy(), "samples"),
        "lexical_similarity": (E.LexicalSimilarity("rougeL"), "samples"),
        "token_sar": (E.TokenSAR(), "greedy"),
        "sar": (E.SAR(), "samples"),
        "p_true": (E.PTrue(), "greedy"),
        # judge-dependent: fed the judge's similarity matrix or clusters
        "eigv": (E.EigValLaplacian("NLI_score", "entail"), "affinity"),
        "degree": (E.DegMat("NLI_score", "entail"), "affinity"),
        "eccentricity": (E.Eccentricity("NLI_score", "entail"), "affinity"),
        # scale=False: the von Neumann entropy itself, not divided by log k
        "kernel_language_entropy": (E.KernelLanguageEntropy(scale=False), "kle"),
        "semantic_entropy": (E.SemanticEntropy(class_probability_estimation="frequency"),
                             "classes"),
        "semantic_entropy_weighted": (E.SemanticEntropy(), "classes"),
        "num_sets": (E.NumSemSets(), "cluster_matrix"),
        "cocoa": (E.CocoaMSP(), "greedy_affinity"),
    }


def _model(config: dict):
    """What Polygraph's attention estimators read of the model: ``stats["model"].model.config``."""
    from types import SimpleNamespace

    return SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(**config)))


def _attention_stats(item: dict, folder: Path) -> dict:
    """confide's self-attention weights in Polygraph's two attention layouts.

    ``attention_all`` (RAUQ): rows = layer x head, then (answer step j, answer token i) with
    the weight the step choosing y_j gives y_{j-1} at [j, j - 1], the only entries RAUQ reads.
    ``forwardpass_attention_weights`` (AttentionScore): (layers, heads, n, n) matrices over
    prompt + answer whose diagonals, the only entries it reads, are confide's.
    """
    diagonal = np.load(folder / item["attention"]["diagonal"]).astype(np.float64)
    p = item["attention"]["prompt_length"]
    layers, heads, n = diagonal.shape
    t = n - p
    steps = np.zeros((layers * heads, t, t))
    rows = diagonal.reshape(layers * heads, n)
    for j in range(1, t):
        steps[:, j, j - 1] = rows[:, p + j - 1]
    full = np.zeros((layers, heads, n, n))
    full[..., np.arange(n), np.arange(n)] = diagonal
    return {"attention_all": [steps], "forwardpass_attention_weights": [full]}


def _stats(item: dict, kind: str, judge: dict | None, folder: Path, model=None) -> dict:
    """One item's statistics dictionary (a batch of one) in Polygraph's layout."""
    s: dict = {
        "greedy_log_likelihoods": [np.asarray(item["greedy_log_likelihoods"], float)],
        "entropy": [np.asarray(item["entropy"], float)],
        "sample_texts": [item["sample_texts"]],
        "sample_tokens": [item["sample_tokens"]],
        "sample_log_likelihoods": [[np.asarray(x, float) for x in item["sample_log_likelihoods"]]],
        "sample_log_probs": [[float(np.sum(x)) for x in item["sample_log_likelihoods"]]],
        "token_similarity": [np.asarray(item["token_similarity"], float)],
        "sample_token_similarity": [[np.asarray(x, float)
                                     for x in item["sample_token_similarity"]]],
        "sample_sentence_similarity": np.asarray(item["sample_sentence_similarity"], float)[None],
    }
    if item.get("p_true_logp") is not None:
        s["p_true"] = [item["p_true_logp"]]
    s["greedy_tokens"] = [item["greedy_tokens"]]
    s["model"] = model
    if item.get("unconditioned") is not None:
        s["greedy_lm_log_likelihoods"] = [np.asarray(item["unconditioned"], float)]
    if kind == "greedy" and item.get("attention"):
        s.update(_attention_stats(item, folder))
    if kind == "greedy" and item.get("greedy_log_probs"):
        full = np.load(folder / item["greedy_log_probs"])
        s["greedy_log_probs"] = [list(full)]
    if judge is not None:
        w = np.asarray(judge["affinity"], float)          # (k+1, k+1), index 0 = greedy
        labels = list(judge["sample_clusters"])           # cluster id of each sample, 0..m-1
        same = (np.asarray(labels)[:, None] == np.asarray(labels)[None, :]).astype(float)
        if kind == "affinity":
            s["semantic_matrix_entail"] = w[1:, 1:][None]
        elif kind == "kle":
            # Polygraph builds W = E + E^T + (2 - E - E^T - C - C^T) / 2; these give W = w.
            s["semantic_matrix_entail"] = (w[1:, 1:] / 2)[None]
            s["semantic_matrix_contra"] = (1 - w[1:, 1:] / 2)[None]
        elif kind == "cluster_matrix":
            s["semantic_matrix_entail"] = same[None]
            s["semantic_matrix_contra"] = (1 - same)[None]
        elif kind == "classes":
            m = max(labels) + 1
            s["semantic_classes_entail"] = {
                "class_to_sample": [[[j for j, c in enumerate(labels) if c == k]
                                     for k in range(m)]],
                "sample_to_class": [{j: c for j, c in enumerate(labels)}]}
        elif kind == "greedy_affinity":
            s["greedy_sentence_similarity"] = [w[0, 1:]]
    return s


def parity(inp: Path, out: Path) -> None:
    data = json.loads(inp.read_text())
    folder = inp.parent
    model = _model(data["model"])
    result: dict = {}
    for name, (estimator, kind) in _estimators().items():
        judged = kind in ("affinity", "kle", "cluster_matrix", "classes", "greedy_affinity")
        for judge in (data["judges"] if judged else [None]):
            key = f"{name}@{judge}" if judge else name
            values, errors = [], []
            for item in data["items"]:
                try:
                    stats = _stats(item, kind, item["judges"][judge] if judge else None, folder,
                                   model)
                    value = float(np.asarray(estimator(stats), dtype=float).ravel()[0])
                    values.append(value if math.isfinite(value) else None)
                    errors.append(None if math.isfinite(value) else f"non-finite {value}")
                except Exception as exc:  # Polygraph raises many kinds; keep why
                    values.append(None)
                    errors.append(f"{type(exc).__name__}: {exc}")
            result[key] = {"values": values, "errors": errors, "estimator": str(estimator)}
    out.write_text(json.dumps(result))


def speed(inp: Path, out: Path) -> None:
    import torch
    from lm_polygraph import estimators as E
    from lm_polygraph.defaults.register_default_stat_calculators import (
        register_default_stat_calculators,
    )
    from lm_polygraph.utils.builder_enviroment_stat_calculator import (
        BuilderEnvironmentStatCalculator,
    )
    from lm_polygraph.utils.dataset import Dataset
    from lm_polygraph.utils.generation_parameters import GenerationParameters
    from lm_polygraph.utils.manager import UEManager
    from lm_polygraph.utils.model import WhiteboxModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = json.loads(inp.read_text())
    torch.manual_seed(cfg["seed"])
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(cfg["model_dir"], padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    net = AutoModelForCausalLM.from_pretrained(cfg["model_dir"], dtype=getattr(torch, cfg["dtype"]))
    net.eval()
    params = GenerationParameters(temperature=cfg["temperature"], top_p=cfg["top_p"], top_k=0,
                                  stop_strings=cfg["stop"])
    model = WhiteboxModel(net, tokenizer, cfg["model_dir"], "CausalLM", params)
    # Fastest settings: no attentions or hidden states kept (none of these estimators reads them).
    calculators = register_default_stat_calculators(
        "Whitebox", output_attentions=False, output_hidden_states=False)
    estimators = [E.MaximumSequenceProbability(), E.Perplexity(), E.MeanTokenEntropy(),
                  E.SelfCertainty(), E.MonteCarloSequenceEntropy(),
                  E.MonteCarloNormalizedSequenceEntropy(), E.LexicalSimilarity("rougeL"),
                  E.EigValLaplacian("Jaccard_score"), E.DegMat("Jaccard_score"),
                  E.Eccentricity("Jaccard_score")]
    data = Dataset(cfg["prompts"], cfg["targets"], batch_size=cfg["batch_size"])
    manager = UEManager(data, model, estimators, BuilderEnvironmentStatCalculator(model),
                        calculators, [], [], [], ignore_exceptions=False, verbose=False,
                        max_new_tokens=cfg["max_new_tokens"],
                        save_stats=["sample_tokens"])
    loaded = time.perf_counter()
    manager()
    done = time.perf_counter()
    greedy = sum(len(t) for t in manager.stats["greedy_tokens"])
    sampled = sum(len(t) for per_item in manager.stats["sample_tokens"] for t in per_item)
    out.write_text(json.dumps({
        "load_seconds": loaded - started, "pipeline_seconds": done - loaded,
        "greedy_tokens": greedy, "sample_tokens": sampled,
        "estimators": [str(e) for e in manager.estimators],
        "estimations": {f"{lvl}:{name}": v for (lvl, name), v in manager.estimations.items()},
    }))


if __name__ == "__main__":
    mode, inp, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    {"parity": parity, "speed": speed}[mode](inp, out)
