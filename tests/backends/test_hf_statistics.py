"""The hf backend's extra statistics: divergences from uniform while decoding, the answer
scored without its question, and attention weights over prompt + answer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationSpec
from confide.backends.hf import _divergences_from_uniform
from confide.core.records import DIVERGENCE_TEMPERATURE, RENYI_ALPHA

QUESTION = [{"role": "user", "content": "Answer with a few words only.\nWhat is the capital "
             "of France?"}]
# float32: the decoding loop and a full pass agree to rounding; bfloat16: see test_hf.py.
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 0.5}


def test_divergences_from_uniform_hand_computed():
    # q = softmax(z / 2) = (3/4, 1/4); sum sqrt(q / V) = cos(pi / 12), so FR = 1/6.
    logits = torch.tensor([[2 * math.log(3.0), 0.0], [0.0, 0.0]])
    renyi, fisher_rao = _divergences_from_uniform(logits, math.log(2))
    expected = math.log(2) - 2 * math.log((math.sqrt(3) + 1) / 2)
    assert renyi[0].item() == pytest.approx(expected, abs=1e-6)
    assert fisher_rao[0].item() == pytest.approx(1 / 6, abs=1e-5)
    # a uniform distribution is at distance 0 from uniform
    assert renyi[1].item() == pytest.approx(0.0, abs=1e-6)
    assert fisher_rao[1].item() == pytest.approx(0.0, abs=2e-3)  # arccos near 1 is steep


def _reference_logp(backend, prompt_ids, answer_ids):
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.inference_mode():
        hidden = backend.model.get_decoder()(ids).last_hidden_state[0]
        logits = backend.float32_logits(hidden)
    start = len(prompt_ids) - 1
    return torch.log_softmax(logits[start:start + len(answer_ids)].double(), -1)


def test_hf_divergence_columns_equal_a_reference_forward_pass(hf_model):
    gen = hf_model.generate([QUESTION], GenerationSpec(max_new_tokens=8), [0])[0].greedy
    logp = _reference_logp(hf_model, hf_model.encode(QUESTION), gen.token_ids)
    q = torch.softmax(logp / DIVERGENCE_TEMPERATURE, -1)
    vocab = q.shape[-1]
    renyi = math.log(vocab) + torch.log((q ** RENYI_ALPHA).sum(-1)) / (RENYI_ALPHA - 1)
    fisher_rao = 2 / math.pi * torch.arccos(torch.sqrt(q / vocab).sum(-1).clamp(max=1))
    atol = TOLERANCE[hf_model.dtype]
    np.testing.assert_allclose(gen.token_renyi_uniform, renyi.numpy(), atol=atol)
    np.testing.assert_allclose(gen.token_fisher_rao_uniform, fisher_rao.numpy(), atol=atol)
    assert (gen.token_renyi_uniform > 0).all() and (gen.token_fisher_rao_uniform < 1).all()


def test_hf_unconditioned_logprobs_equal_a_pass_after_the_neutral_prompt(hf_model):
    answers = [hf_model.tokenizer("Paris, the capital.", add_special_tokens=False)["input_ids"],
               hf_model.tokenizer("Paris", add_special_tokens=False)["input_ids"], []]
    got = hf_model.unconditioned_logprobs(answers)
    # the neutral prompt of a chat model: its template around an empty user message
    text = hf_model.tokenizer.apply_chat_template([{"role": "user", "content": ""}],
                                                  add_generation_prompt=True, tokenize=False)
    neutral = hf_model.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert hf_model.neutral_prompt() == neutral
    assert [len(u) for u in got] == [len(a) for a in answers]
    for answer, values in zip(answers[:2], got):
        logp = _reference_logp(hf_model, neutral, answer)
        expected = logp.gather(-1, torch.tensor(answer)[:, None]).squeeze(-1).numpy()
        np.testing.assert_allclose(values, expected, atol=TOLERANCE[hf_model.dtype])


def _stepwise_attention(backend, prompt_ids, answer_ids):
    """What a cached decoding loop's attention gives, step by step (as LM-Polygraph reads it
    from ``generate``): in the step that chooses y_j, each head's weight on y_{j-1}."""
    model, before = backend.model, backend.model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True,
                        output_attentions=True)
            rows = []
            for token in answer_ids[:-1]:
                out = model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values,
                            use_cache=True, output_attentions=True)
                rows.append(torch.stack([a[0, :, 0, -1] for a in out.attentions]).float())
    finally:
        model.set_attn_implementation(before)
    return torch.stack(rows, dim=-1).numpy()  # (layers, heads, T - 1)


def test_hf_attention_diagonals_are_the_decoding_steps_attention(hf_model):
    gen = hf_model.generate([QUESTION], GenerationSpec(max_new_tokens=8), [0])[0].greedy
    assert gen.n_tokens >= 3
    before = hf_model.model.config._attn_implementation
    (length, diagonal), = hf_model.attention_diagonals([QUESTION], [gen.token_ids])
    prompt_ids = hf_model.encode(QUESTION)
    assert length == len(prompt_ids)
    cfg = hf_model.model.config
    assert diagonal.shape == (cfg.num_hidden_layers, cfg.num_attention_heads,
                              length + gen.n_tokens)
    assert hf_model.model.config._attn_implementation == before  # the fast kernel is back
    np.testing.assert_allclose(diagonal[:, :, 0], 1.0, atol=1e-6)  # the first token sees itself
    assert ((diagonal > 0) & (diagonal <= 1 + 1e-6)).all()
    steps = _stepwise_attention(hf_model, prompt_ids, gen.token_ids)
    atol = 1e-4 if hf_model.dtype == torch.float32 else 0.05
    np.testing.assert_allclose(diagonal[:, :, length:length + gen.n_tokens - 1], steps, atol=atol)
    # decoding afterwards is unchanged
    again = hf_model.generate([QUESTION], GenerationSpec(max_new_tokens=8), [0])[0].greedy
    assert again.token_ids == gen.token_ids


def test_neutral_prompt_and_rauq_alpha_follow_the_rendered_prompt(hf_model):
    """A chat model answering TriviaQA's k-shot *text* is compared with a neutral text
    prompt (its start token), not with an empty chat turn; RAUQ's alpha follows too."""
    from confide.core.records import Generation, Item, Record
    from confide.scorers import SCORERS, ScoringContext, run_scorer
    from confide.scorers.forward import RAUQ_ALPHA_BASE, RAUQ_ALPHA_CHAT, _chat_prompt

    assert hf_model.neutral_prompt(chat=True) == hf_model.neutral_prompt()
    plain = hf_model.neutral_prompt(chat=False)
    assert len(plain) == 1 and plain != hf_model.neutral_prompt(chat=True)
    answer = hf_model.tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    text_prompt = "Question: Capital of France?\nAnswer:"
    assert _chat_prompt(ScoringContext(hf_model, prompt=text_prompt)) is False
    assert _chat_prompt(ScoringContext(hf_model, prompt=QUESTION)) is True
    assert (RAUQ_ALPHA_BASE, RAUQ_ALPHA_CHAT) == (0.2, 0.5)
    values = {}
    for name, prompt in (("text", text_prompt), ("chat", QUESTION)):
        gen = Generation(" Paris", token_ids=answer, tokens=["Paris"] * len(answer),
                         token_logprobs=np.full(len(answer), -0.5))
        record = Record(Item("q", prompt), gen)
        ctx = ScoringContext(hf_model, prompt=prompt)
        values[name] = run_scorer(SCORERS["pmi"], record, ctx)[0]
        u = hf_model.unconditioned_logprobs([answer], chat=name == "chat")[0]
        assert values[name] == pytest.approx(float(np.mean(-0.5 - u)))
    assert values["text"] != values["chat"]
