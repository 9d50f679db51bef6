"""The vllm backend: its conversion of vLLM's outputs and its top-K bounds, checked on CPU
with hand-built objects shaped like vLLM's (test data, not an engine); the engine itself
needs vLLM and a GPU and is skipped without them."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vllm_outputs import EOS, TEXT, VOCAB, CompletionOutput, Logprob, RequestOutput  # noqa: E402

from confide.backends import BACKENDS, GenerationSpec  # noqa: E402
from confide.backends.vllm import (
    STATS_LOGPROBS,
    assemble,
    request_plan,
    to_generation,
    topk_statistics,
    vllm_capabilities,
)
from confide.pipeline.scorer_plan import plan_scorers, skip_reason
from confide.scorers import SCORERS


def _step(dist: np.ndarray, chosen: int, k: int) -> dict[int, Logprob]:
    """vLLM's per-step dict from a full distribution: the top-k by rank plus the chosen token."""
    order = np.argsort(-dist, kind="stable")
    entries = {int(t): Logprob(math.log(dist[t]), rank=r + 1) for r, t in enumerate(order[:k])}
    rank = int(np.where(order == chosen)[0][0]) + 1
    entries.setdefault(chosen, Logprob(math.log(dist[chosen]), rank=rank))
    return entries


def _output(ids, dists, k, **kw) -> CompletionOutput:
    return CompletionOutput(ids, [_step(d, t, k) for t, d in zip(ids, dists)], **kw)


def _exact(dist: np.ndarray) -> tuple[float, float]:
    entropy = float(-(dist * np.log(dist)).sum())
    kl = float(-math.log(len(dist)) - np.log(dist).mean())
    return entropy, kl


# --- the top-K bounds ---------------------------------------------------------------


def test_topk_statistics_hand_computed_case():
    # p = (1/2, 1/4, 1/8, 1/8), top-2 known: H = 1.75 ln 2; KL(U||p) unknown from the top-2.
    lo, hi, kl = topk_statistics([math.log(0.5), math.log(0.25)], [], 4)
    ln2 = math.log(2)
    assert lo == pytest.approx(1.5 * ln2)
    assert hi == pytest.approx(1.75 * ln2)  # the tail is uniform: the upper bound is exact
    assert kl is None
    # every token known: KL(U||p) = -ln 4 + (1 + 2 + 3 + 3) ln 2 / 4 = 0.25 ln 2, exactly
    *_, kl = topk_statistics([math.log(0.5), math.log(0.25)], [math.log(0.125)] * 2, 4)
    assert kl == pytest.approx(0.25 * ln2)


def test_topk_statistics_refuse_the_kl_the_top_k_cannot_rank():
    # Same top-2 (1/2, 1/4), V = 4; the tail (1/4 - 1e-9, 1e-9) has true KL
    # -ln 4 - (ln 1/2 + ln 1/4 + ln(1/4 - 1e-9) + ln 1e-9) / 4 = 4.661, the even tail 0.173;
    # p = (.6, .3, .05, .05) has KL -ln 4 - (ln .6 + ln .3 + 2 ln .05) / 4 = 0.540.
    # The old Jensen bound gave 0.173, 0.173 and 0.540: 4.661 ranked below 0.540.
    thin = np.array([0.5, 0.25, 0.25 - 1e-9, 1e-9])
    even = np.array([0.5, 0.25, 0.125, 0.125])
    other = np.array([0.6, 0.3, 0.05, 0.05])
    assert _exact(thin)[1] == pytest.approx(4.6610, abs=1e-4)
    assert _exact(other)[1] == pytest.approx(0.5403, abs=1e-4)
    for dist in (thin, even, other):
        # from the top-2 alone the KL is refused, never a value that could invert the order
        assert topk_statistics(np.log(dist[:2]).tolist(), [], 4)[2] is None
    # with every token known it is exact, large values included, so the order holds
    kls = [topk_statistics(np.log(d).tolist(), [], 4)[2] for d in (even, other, thin)]
    assert kls == pytest.approx([_exact(d)[1] for d in (even, other, thin)])
    assert kls == sorted(kls)
    # a large true KL, -ln 4 + 3 * 12 ln 10 / 4 = 19.34, is given exactly, not capped
    huge = np.array([1 - 3e-12, 1e-12, 1e-12, 1e-12])
    *_, kl = topk_statistics(np.log(huge).tolist(), [], 4)
    assert kl == pytest.approx(-math.log(4) + 3 * 12 * math.log(10) / 4, rel=1e-9)
    assert kl > 19


def test_topk_statistics_exact_when_the_top_k_hold_all_the_mass():
    dist = np.array([0.6, 0.3, 0.1])
    lo, hi, kl = topk_statistics(np.log(dist).tolist(), [], 3)  # every token known
    entropy, kl_exact = _exact(dist)
    assert lo == pytest.approx(entropy) and hi == pytest.approx(entropy)
    assert kl == pytest.approx(kl_exact)


@pytest.mark.parametrize("k", [1, 5, 20])
def test_topk_statistics_bound_the_full_distribution(rng, k):
    for _ in range(50):
        dist = rng.dirichlet(np.full(200, 0.05))
        dist = np.clip(dist, 1e-12, None)
        dist /= dist.sum()
        order = np.argsort(-dist)
        top = np.log(dist[order[:k]]).tolist()
        known = [math.log(dist[order[k + 7]])]  # a sampled token ranked below the top-K
        lo, hi, kl = topk_statistics(top, known, len(dist))
        entropy, _ = _exact(dist)
        assert lo <= entropy + 1e-9 <= hi + 2e-9
        assert kl is None


def test_topk_statistics_tighten_as_k_grows(rng):
    dist = rng.dirichlet(np.full(100, 0.1))
    order = np.argsort(-dist)
    gaps = [np.subtract(*reversed(topk_statistics(np.log(dist[order[:k]]).tolist(), [], 100)[:2]))
            for k in (2, 10, 50, 100)]
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] == pytest.approx(0)


# --- vLLM outputs → Generation ---------------------------------------------------


def _dists(n, rng, vocab=len(VOCAB)):
    return [rng.dirichlet(np.ones(vocab)) for _ in range(n)]


def test_to_generation_drops_the_end_token_and_keeps_exact_chosen_logprobs(rng):
    dists = _dists(3, rng)
    out = _output([0, 1, EOS], dists, k=3)
    gen = to_generation(out, TEXT, GenerationSpec(top_k_alternatives=2), stats_k=3,
                        vocab_size=len(VOCAB))
    assert gen.text == "Paris is" and gen.token_ids == [0, 1]
    assert gen.tokens == ["Paris", " is"] and gen.finish_reason == "stop"
    np.testing.assert_allclose(gen.token_logprobs, np.log([dists[0][0], dists[1][1]]),
                               rtol=1e-6)
    # top alternatives: the two most likely tokens of each step, best first
    for t in range(2):
        best = np.argsort(-dists[t])[:2]
        assert gen.top_tokens[t] == [VOCAB[i] for i in best]
        np.testing.assert_allclose(gen.top_logprobs[t], np.log(dists[t][best]), rtol=1e-6)
        lo, _, _ = topk_statistics(np.log(np.sort(dists[t])[::-1][:3]).tolist(),
                                   [] if out.logprobs[t][gen.token_ids[t]].rank <= 3
                                   else [math.log(dists[t][gen.token_ids[t]])], len(VOCAB))
        assert gen.token_entropies[t] == pytest.approx(lo, rel=1e-6)
        assert gen.token_entropies[t] <= _exact(dists[t])[0] + 1e-6
    assert gen.token_kl_uniform is None  # the top-K cannot rank self-certainty


def test_to_generation_cuts_at_the_stop_string_like_hf(rng):
    out = _output([0, 1, 3], _dists(3, rng), k=2, stop_reason="\n")
    gen = to_generation(out, TEXT, GenerationSpec(stop=("\n",)), stats_k=2,
                        vocab_size=len(VOCAB))
    assert gen.text == "Paris is" and gen.token_ids == [0, 1]
    assert len(gen.token_logprobs) == len(gen.token_entropies) == len(gen.top_logprobs) == 2


def test_to_generation_length_and_no_logprobs():
    out = CompletionOutput([6, 7], None, finish_reason="length")
    gen = to_generation(out, TEXT, GenerationSpec(), stats_k=STATS_LOGPROBS,
                        vocab_size=len(VOCAB))
    assert gen.text == "Rome a" and gen.finish_reason == "length"
    assert gen.token_logprobs is None and gen.token_entropies is None


def test_to_generation_without_approximation_gives_only_exact_statistics(rng):
    gen = to_generation(_output([0, EOS], _dists(2, rng), k=3), TEXT, GenerationSpec(),
                        stats_k=3, vocab_size=len(VOCAB), approximate=False)
    assert gen.token_logprobs is not None and gen.top_logprobs is not None
    assert gen.token_entropies is None and gen.token_kl_uniform is None


# --- requests and results -----------------------------------------------------------


def test_request_plan_seeds_each_sample_from_its_item():
    spec = GenerationSpec(max_new_tokens=7, n_samples=3, stop=("\n",), temperature=0.7)
    plan = request_plan(spec, [10, 2**63 - 1], 2, logprobs=20)
    assert [i for i, _ in plan] == [0, 0, 0, 0, 1, 1, 1, 1]
    greedy = plan[0][1]
    assert greedy["temperature"] == 0.0 and "seed" not in greedy
    assert [kw["seed"] for _, kw in plan[1:4]] == [10, 11, 12]
    assert [kw["seed"] for _, kw in plan[5:]] == [2**63 - 1, 0, 1]  # wraps within 63 bits
    assert all(kw["max_tokens"] == 7 and kw["stop"] == ["\n"] and kw["logprobs"] == 20
               and kw["n"] == 1 for _, kw in plan)
    assert all(kw["top_p"] == 0.9 and kw["temperature"] == 0.7 for _, kw in plan[1:4])
    # an item's requests do not depend on the items beside it
    alone = request_plan(spec, [2**63 - 1], 1, logprobs=20)
    assert [kw for _, kw in alone] == [kw for _, kw in plan[4:]]


def test_assemble_puts_greedy_and_samples_back_in_order(rng):
    spec = GenerationSpec(n_samples=2)
    plan = request_plan(spec, [0, 5], 2, logprobs=3)
    outputs = [RequestOutput([_output([j % 5, EOS], _dists(2, rng), k=3)])
               for j in range(len(plan))]
    results = assemble(plan, outputs, lambda o: to_generation(
        o, TEXT, spec, stats_k=3, vocab_size=len(VOCAB)), 2)
    assert [r.greedy.token_ids for r in results] == [[0], [3]]
    assert [[s.token_ids for s in r.samples] for r in results] == [[[1], [2]], [[4], [0]]]


def test_vllm_backend_registered_and_its_skips_are_named():
    assert "vllm" in BACKENDS  # its loader imports vLLM only when chosen
    caps = vllm_capabilities()  # VLLMBackend.capabilities
    assert "token_kl_uniform" not in caps and "token_kl_uniform" not in vllm_capabilities(False)
    answer_level = [s.name for s in SCORERS.values() if s.level == "answer"]
    usable, skipped = plan_scorers(answer_level, caps)
    hidden = {name for name in answer_level
              if any(n.value == "hidden_states" for n in SCORERS[name].needs)}
    assert hidden and hidden <= set(skipped)
    assert all("hidden_states" in skipped[name] for name in hidden)
    assert "mean_entropy" in {s.name for s in usable}
    # self-certainty and what feeds on it are skipped, with the reason
    assert skipped["self_certainty"] == "backend cannot give token_kl_uniform"
    assert "token_kl_uniform" in skipped["lens"]
    assert (skip_reason(SCORERS["claim_self_certainty"], caps)
            == "backend cannot give token_kl_uniform")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM is not installed (CUDA only): benchmarks/gpu/vllm_check.sh "
                           "runs the engine on a GPU machine")
def test_vllm_engine_on_a_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU; none here")
    from confide.backends.vllm import VLLMBackend

    backend = VLLMBackend("smollm2", gpu_memory_utilization=0.3, max_model_len=1024)
    spec = GenerationSpec(max_new_tokens=12, n_samples=2, stop=("\n",))
    first = backend.generate([[{"role": "user", "content": "Capital of France?"}]], spec, [7])
    again = backend.generate([[{"role": "user", "content": "Capital of France?"}]], spec, [7])
    assert first[0].greedy.text and len(first[0].samples) == 2
    assert [s.token_ids for s in first[0].samples] == [s.token_ids for s in again[0].samples]
    assert backend.capabilities >= {"token_logprobs", "token_entropies"}
