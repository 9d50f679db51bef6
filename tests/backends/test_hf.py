"""The hf backend on the bundled model: statistics from the live logits are exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationSpec
from confide.backends.models import resolve_model
from confide.errors import ModelLoadError

QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?",
             "What is the largest planet of the solar system?"]


def chat(q):
    return [{"role": "user", "content": f"Answer with a few words only.\n{q}"}]


def test_hf_greedy_matches_transformers_generate(hf_model):
    prompts = [chat(q) for q in QUESTIONS]
    ours = hf_model.generate(prompts, GenerationSpec(max_new_tokens=12), [0, 0, 0])
    tok = hf_model.tokenizer
    for prompt, result in zip(prompts, ours):
        ids = torch.tensor([hf_model.encode(prompt)])
        ref = hf_model.model.generate(ids, attention_mask=torch.ones_like(ids),
                                      max_new_tokens=12, do_sample=False,
                                      pad_token_id=tok.pad_token_id)
        new = ref[0, ids.shape[1]:].tolist()
        new = [t for t in new if t not in hf_model._eos_ids]
        assert result.greedy.token_ids == new[:len(result.greedy.token_ids)]
        assert len(result.greedy.token_ids) == len(new)


def test_hf_statistics_equal_a_reference_forward_pass(hf_model):
    """Log-probs, entropies, KL(U||p) and top-k recomputed by one full forward pass."""
    prompt = chat(QUESTIONS[0])
    gen = hf_model.generate([prompt], GenerationSpec(max_new_tokens=10), [0])[0].greedy
    prompt_ids = hf_model.encode(prompt)
    ids = torch.tensor([prompt_ids + gen.token_ids])
    with torch.inference_mode():
        logits = hf_model.model(ids).logits[0].float()
    steps = logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(gen.token_ids)]
    logp = torch.log_softmax(steps, -1)
    chosen = logp.gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1).numpy()
    entropy = (-(logp.exp() * logp).sum(-1)).numpy()
    kl = (-np.log(logp.shape[-1]) - logp.mean(-1)).numpy()
    np.testing.assert_allclose(gen.token_logprobs, chosen, atol=2e-3)
    np.testing.assert_allclose(gen.token_entropies, entropy, atol=2e-3)
    np.testing.assert_allclose(gen.token_kl_uniform, kl, atol=2e-3)
    np.testing.assert_allclose(gen.top_logprobs, logp.topk(10, -1).values.numpy(), atol=2e-3)
    assert gen.top_logprobs.shape == (len(gen.token_ids), 10)
    # greedy: the chosen token is the most likely alternative
    np.testing.assert_allclose(gen.top_logprobs[:, 0], gen.token_logprobs, atol=1e-5)
    assert gen.tokens[0] == gen.top_tokens[0][0]


def test_hf_samples_depend_only_on_their_seed(hf_model):
    prompt = chat(QUESTIONS[1])
    spec = GenerationSpec(max_new_tokens=8, n_samples=3, greedy=False, temperature=1.0,
                          top_p=0.9)
    alone = hf_model.generate([prompt], spec, [1234])[0].samples
    with_neighbour = hf_model.generate([prompt, prompt], spec, [99, 1234])[1].samples
    assert [s.token_ids for s in alone] == [s.token_ids for s in with_neighbour]
    assert len(alone) == 3
    other_seed = hf_model.generate([prompt], spec, [5])[0].samples
    assert [s.token_ids for s in other_seed] != [s.token_ids for s in alone]


def test_hf_stop_string_cuts_answer_and_tokens(hf_model):
    prompt = "Count: one, two, three, four, five,"
    full = hf_model.generate([prompt], GenerationSpec(max_new_tokens=12), [0])[0].greedy
    assert "," in full.text
    cut = hf_model.generate([prompt], GenerationSpec(max_new_tokens=12, stop=(",",)),
                            [0])[0].greedy
    assert "," not in cut.text
    assert full.text.startswith(cut.text)
    assert len(cut.token_ids) < len(full.token_ids)
    assert len(cut.token_logprobs) == len(cut.token_ids) == len(cut.tokens)
    assert cut.finish_reason == "stop"


def test_hf_hidden_states_pooled_as_float16(hf_model):
    spec = GenerationSpec(max_new_tokens=6, hidden_layers=(-1, 10))
    gen = hf_model.generate([chat(QUESTIONS[2])], spec, [0])[0].greedy
    hidden_size = hf_model.model.config.hidden_size
    assert set(gen.hidden) == {"-1:last", "-1:mean", "10:last", "10:mean"}
    for vec in gen.hidden.values():
        assert vec.dtype == np.float16 and vec.shape == (hidden_size,)
    assert not np.allclose(gen.hidden["-1:last"], gen.hidden["-1:mean"])


def test_hf_length_limit_sets_finish_reason(hf_model):
    gen = hf_model.generate([chat("Write a long story about a dragon.")],
                            GenerationSpec(max_new_tokens=3), [0])[0].greedy
    assert gen.finish_reason == "length"
    assert len(gen.token_ids) == 3


@pytest.mark.parametrize("name", ["/no/such/model", "./missing-dir", "/tmp/none.gguf",
                                  "not a model"])
def test_resolve_model_unknown_path_is_a_clear_error(name):
    with pytest.raises(ModelLoadError, match="no such|not a bundled alias"):
        resolve_model(name)
