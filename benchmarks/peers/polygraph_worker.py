"""The LM-Polygraph side of ``polygraph.py``; runs inside LM-Polygraph's own virtualenv.

It imports nothing from confide (confide is not installed there). Four modes:

``parity IN.json OUT.json``
    Feeds the statistics confide generated (greedy answers, samples, their
    token log-probabilities, similarity matrices, clusters) to Polygraph's
    estimators through their statistics dictionary, one item at a time, and
    writes each estimator's uncertainty per item (``null`` where it raised).

``speed IN.json OUT.json``
    Runs the whole Polygraph pipeline (``UEManager`` with its default stat
    calculators) on the given prompts and writes the time spent and the
    tokens generated.

``pipeline IN.json OUT.json``
    End-to-end parity: the whole Polygraph pipeline again (its own generation,
    stat calculators and estimators; greedy decoding for the answer), with
    every estimator that needs no model from the hub, and writes each
    estimator's values with the statistics its calculators produced (greedy
    and sampled tokens, their log-probabilities, the samples' embeddings).

``density IN.json OUT.json``
    Polygraph's Mahalanobis estimators and HUQ on given hidden states.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np


def _estimators(instruct: bool) -> dict:
    """confide row name -> (Polygraph estimator, which statistics it is fed); ``instruct``:
    whether the prompts went through a chat template (RAUQ's alpha follows it)."""
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
        "rauq": (E.RAUQ(instruct=instruct), "greedy"),      # alpha 0.5 chat, 0.2 completion
        "attention_score": (E.AttentionScore(), "greedy"),  # whole sequence, middle layer
        "mc_entropy": (E.MonteCarloSequenceEntropy(), "samples"),
        "mc_entropy_normalized": (E.MonteCarloNormalizedSequenceEntropy(), "samples"),
        "lexical_similarity": (E.LexicalSimilarity("rougeL"), "samples"),
        "token_sar": (E.TokenSAR(), "greedy"),
        "sar": (E.SAR(), "samples"),
        "sentence_sar": (E.SentenceSAR(), "samples"),
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
        "cocoa_ppl": (E.CocoaPPL(), "greedy_affinity"),
        "cocoa_mte": (E.CocoaMTE(), "greedy_affinity"),
        "label_prob": (E.LabelProb(), "class_dict"),
        # fed the judge's decisions on the same top-10 token alternatives (entail / contra)
        "ccp": (E.ClaimConditionedProbability(), "alternatives"),
        # its NLI kernel 1 - contra - neutral / 2 set to the judge's affinity (neutral 0)
        "semantic_density": (E.SemanticDensity(concat_input=False), "density"),
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
        elif kind == "class_dict":  # LabelProb reads the batch as a dict of items
            m = max(labels) + 1
            s["semantic_classes_entail"] = {
                "class_to_sample": {0: [[j for j, c in enumerate(labels) if c == k]
                                        for k in range(m)]},
                "sample_to_class": {0: {j: c for j, c in enumerate(labels)}}}
        elif kind == "alternatives":
            # per token: the chosen token first, then its alternatives; NLI only against it
            steps, matrices = [], []
            for chosen_lp, alternatives in judge["alternatives"]:
                steps.append([("", chosen_lp)] + [(t, lp) for t, lp, _ in alternatives])
                n = len(steps[-1])
                nli = [["" for _ in range(n)] for _ in range(n)]
                nli[0][0] = "entail"
                for i, (_, _, equivalent) in enumerate(alternatives, start=1):
                    nli[0][i] = nli[i][0] = "entail" if equivalent else "contra"
                matrices.append(nli)
            s["greedy_tokens_alternatives"] = [steps]
            s["greedy_tokens_alternatives_nli"] = [matrices]
        elif kind == "greedy_affinity":
            s["greedy_sentence_similarity"] = [w[0, 1:]]
        elif kind == "density":
            s["greedy_semantic_matrix_contra_forward"] = [1 - w[0, 1:]]
            s["greedy_semantic_matrix_neutral_forward"] = [np.zeros(len(w) - 1)]
    return s


def parity(inp: Path, out: Path) -> None:
    data = json.loads(inp.read_text())
    folder = inp.parent
    model = _model(data["model"])
    result: dict = {}
    for name, (estimator, kind) in _estimators(data["instruct"]).items():
        judged = kind in ("affinity", "kle", "cluster_matrix", "classes", "class_dict",
                          "greedy_affinity", "density", "alternatives")
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


def load_stat_calculator(cfg, env):
    """Polygraph's builder hook for its sampler with ``samples_n`` from the config (its
    default builder ignores the config and always draws 10)."""
    from lm_polygraph.stat_calculators import SamplingGenerationCalculator

    return SamplingGenerationCalculator(samples_n=int(cfg.samples_n))


def _pipeline_parts(cfg: dict, *, attentions: bool, hidden_states: bool):
    """Polygraph's model wrapper and default stat calculators, its sampler drawing
    ``cfg["samples"]`` samples."""
    import torch
    from lm_polygraph.defaults.register_default_stat_calculators import (
        register_default_stat_calculators,
    )
    from lm_polygraph.utils.generation_parameters import GenerationParameters
    from lm_polygraph.utils.model import WhiteboxModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(cfg["seed"])
    tokenizer = AutoTokenizer.from_pretrained(cfg["model_dir"], padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    kwargs = {"attn_implementation": "eager"} if attentions else {}
    net = AutoModelForCausalLM.from_pretrained(cfg["model_dir"], dtype=getattr(torch, cfg["dtype"]),
                                               **kwargs)
    net.eval()
    params = GenerationParameters(temperature=cfg["temperature"], top_p=cfg["top_p"], top_k=0,
                                  stop_strings=cfg["stop"])
    model = WhiteboxModel(net, tokenizer, cfg["model_dir"], "CausalLM", params)
    calculators = register_default_stat_calculators(
        "Whitebox", output_attentions=attentions, output_hidden_states=hidden_states)
    for container in calculators:
        if container.name == "SamplingGenerationCalculator":
            container.builder = "polygraph_worker"  # load_stat_calculator above
            container.cfg.samples_n = cfg["samples"]
    return model, calculators


def _manager(cfg: dict, model, calculators, estimators, save_stats: list[str],
             processors: list | None = None):
    from lm_polygraph.utils.builder_enviroment_stat_calculator import (
        BuilderEnvironmentStatCalculator,
    )
    from lm_polygraph.utils.dataset import Dataset
    from lm_polygraph.utils.manager import UEManager

    data = Dataset(cfg["prompts"], cfg["targets"], batch_size=cfg["batch_size"])
    return UEManager(data, model, estimators, BuilderEnvironmentStatCalculator(model),
                     calculators, [], [], processors or [], ignore_exceptions=False,
                     verbose=False,
                     max_new_tokens=cfg["max_new_tokens"], save_stats=save_stats)


def _plain(value):
    """Polygraph's saved statistics (arrays, numpy scalars, nested lists) as JSON."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def pipeline(inp: Path, out: Path) -> None:
    from lm_polygraph import estimators as E

    cfg = json.loads(inp.read_text())
    started = time.perf_counter()
    model, calculators = _pipeline_parts(cfg, attentions=True, hidden_states=True)
    estimators = [
        E.MaximumSequenceProbability(), E.Perplexity(), E.MeanTokenEntropy(), E.SelfCertainty(),
        E.RenyiNeg(), E.FisherRao(), E.BoostedProbSequence(),
        E.MeanPointwiseMutualInformation(), E.MeanConditionalPointwiseMutualInformation(),
        E.RAUQ(instruct=cfg["instruct"]), E.AttentionScore(), E.PTrue(),
        E.MonteCarloSequenceEntropy(), E.MonteCarloNormalizedSequenceEntropy(),
        E.LexicalSimilarity("rougeL"), E.EigenScore()]
    shown = ["greedy_tokens", "greedy_texts", "greedy_log_likelihoods",
             "greedy_lm_log_likelihoods", "sample_texts", "sample_tokens",
             "sample_log_likelihoods", "sample_embeddings"]
    trimmed = WithoutEndToken(model)
    manager = _manager(cfg, model, calculators, estimators, shown, [trimmed])
    loaded = time.perf_counter()
    manager()
    done = time.perf_counter()
    stats = {key: _plain(manager.stats[key]) for key in shown if key in manager.stats}
    out.write_text(json.dumps({
        "load_seconds": loaded - started, "pipeline_seconds": done - loaded,
        "vocab": model.model.config.vocab_size, "stats": stats,
        "estimations": {name: _plain(v) for (lvl, name), v in manager.estimations.items()},
        "without_end_token": trimmed.values,
    }))


class WithoutEndToken:
    """A UEManager processor: the token-level estimators again on each batch's own
    statistics with the token that ended an answer (the stop string's token or EOS, which
    Polygraph keeps and confide does not) left out, to tell whether that token alone makes
    a difference. Works on the batch in memory, so no attention or distribution is saved."""

    def __init__(self, model) -> None:
        from lm_polygraph import estimators as E

        self.model = model
        self.estimators = [
            E.MaximumSequenceProbability(), E.Perplexity(), E.MeanTokenEntropy(),
            E.SelfCertainty(), E.RenyiNeg(), E.FisherRao(), E.BoostedProbSequence(),
            E.MeanPointwiseMutualInformation(), E.MeanConditionalPointwiseMutualInformation(),
            E.RAUQ(instruct=False), E.AttentionScore()]
        self.values: dict = {type(e).__name__: [] for e in self.estimators}

    def _ends(self, tokens: list[int]) -> bool:
        tokenizer = self.model.tokenizer
        return bool(tokens) and (tokens[-1] == tokenizer.eos_token_id
                                 or "\n" in tokenizer.decode([tokens[-1]]))

    def on_batch(self, stats: dict, gen_metrics=None, estimations=None) -> None:
        for n, tokens in enumerate(stats["greedy_tokens"]):
            keep = len(tokens) - 1 if self._ends(tokens) else len(tokens)
            prompt = stats["forwardpass_attention_weights"][n].shape[-1] - len(tokens)
            one = {"model": self.model, "greedy_tokens": [tokens[:keep]],
                   "greedy_log_likelihoods": [
                       np.asarray(stats["greedy_log_likelihoods"][n])[:keep]],
                   "greedy_log_probs": [list(stats["greedy_log_probs"][n][:keep])],
                   "entropy": [np.asarray(stats["entropy"][n])[:keep]],
                   "greedy_lm_log_likelihoods": [
                       np.asarray(stats["greedy_lm_log_likelihoods"][n])[:keep]],
                   "attention_all": [np.asarray(stats["attention_all"][n])[:, :keep, :keep]],
                   "forwardpass_attention_weights": [np.asarray(
                       stats["forwardpass_attention_weights"][n])[..., :prompt + keep,
                                                                  :prompt + keep]]}
            for e in self.estimators:
                try:
                    value = float(np.asarray(e(one), dtype=float).ravel()[0]) if keep else None
                except Exception:  # noqa: BLE001 - an estimator that cannot take it gives none
                    value = None
                self.values[type(e).__name__].append(
                    value if value is None or math.isfinite(value) else None)

    def on_eval(self, metrics=None, bad_estimators=None) -> None:
        pass


def density(inp: Path, out: Path) -> None:
    """Polygraph's Mahalanobis, relative Mahalanobis and (when ``train_ppl`` is given) HUQ
    (``PPLMDSeq``) of ``test`` states under Gaussians fitted to ``train`` (and
    ``background``), all given as .npy files; HUQ also reads per-record token
    log-probabilities (``train_logprobs``, ``test_logprobs``: lists of lists)."""
    from lm_polygraph import estimators as E

    cfg = json.loads(inp.read_text())
    arrays = {k: np.load(inp.parent / cfg[k]).astype(np.float32)
              for k in ("train", "background", "test")}
    stats = {"embeddings_decoder": arrays["test"], "train_embeddings_decoder": arrays["train"],
             "background_train_embeddings_decoder": arrays["background"]}
    result = {"mahalanobis": E.MahalanobisDistanceSeq()(stats).tolist(),
              "relative_mahalanobis": E.RelativeMahalanobisDistanceSeq()(stats).tolist()}
    if "train_logprobs" in cfg:
        stats["train_greedy_log_likelihoods"] = [np.asarray(x) for x in cfg["train_logprobs"]]
        stats["greedy_log_likelihoods"] = [np.asarray(x) for x in cfg["test_logprobs"]]
        result["huq"] = E.PPLMDSeq()(stats).tolist()
    out.write_text(json.dumps(result))


def speed(inp: Path, out: Path) -> None:
    from lm_polygraph import estimators as E

    cfg = json.loads(inp.read_text())
    started = time.perf_counter()
    # Fastest settings: no attentions or hidden states kept (none of these estimators reads them).
    model, calculators = _pipeline_parts(cfg, attentions=False, hidden_states=False)
    estimators = [E.MaximumSequenceProbability(), E.Perplexity(), E.MeanTokenEntropy(),
                  E.SelfCertainty(), E.MonteCarloSequenceEntropy(),
                  E.MonteCarloNormalizedSequenceEntropy(), E.LexicalSimilarity("rougeL"),
                  E.EigValLaplacian("Jaccard_score"), E.DegMat("Jaccard_score"),
                  E.Eccentricity("Jaccard_score")]
    manager = _manager(cfg, model, calculators, estimators, ["sample_tokens"])
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
    {"parity": parity, "speed": speed, "pipeline": pipeline, "density": density}[mode](inp, out)
