"""The hf backend's extra statistics: divergences from uniform and BoostedProb while
decoding, the answer scored without its question, and attention weights over prompt +
answer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationSpec
from confide.backends.hf import _divergences_from_uniform
from confide.core.errors import CannotScore
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


def test_hf_neutral_prompt_of_a_completion_prompt_is_no_chat_marker(hf_model):
    # SmolLM2-Instruct's bos_token is <|im_start|>, the marker that opens a chat turn (and
    # its eos <|im_end|> closes one): a text prompt's answer must not be read after either
    tok = hf_model.tokenizer
    markers = {tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")}
    assert tok.bos_token == "<|im_start|>" and None not in markers
    neutral = hf_model.neutral_prompt(chat=False)
    assert neutral and not markers & set(neutral)
    # the tokenizer puts nothing before a text prompt, so the neutral context is a newline
    assert tok("", add_special_tokens=True)["input_ids"] == []
    assert neutral == tok("\n", add_special_tokens=False)["input_ids"]
    # and the chat form keeps the chat template around an empty user message
    assert markers & set(hf_model.neutral_prompt(chat=True))
    answer = tok(" Paris", add_special_tokens=False)["input_ids"]
    (got,) = hf_model.unconditioned_logprobs([answer], chat=False)
    logp = _reference_logp(hf_model, neutral, answer)
    expected = logp.gather(-1, torch.tensor(answer)[:, None]).squeeze(-1).numpy()
    np.testing.assert_allclose(got, expected, atol=TOLERANCE[hf_model.dtype])


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


# -- BoostedProb from the whole distribution (token_boosted_prob) ---------------------------


def _logp(*rows):
    return torch.log(torch.tensor(rows, dtype=torch.float32))


def test_boosted_probabilities_hand_computed():
    from confide.backends.hf.steps import boosted_probabilities

    # the boostedprob package's own example: drops 0.1 (< 0.3 * 0.5), 0.35 (a jump), 0:
    # dominant = {0, 1} of mass 0.9; token 2 is not dominant and keeps its 0.05
    logp = _logp([0.5, 0.4, 0.05, 0.05], [0.5, 0.4, 0.05, 0.05])
    got = boosted_probabilities(logp, logp[[0, 1], [2, 1]])
    assert got.tolist() == pytest.approx([0.05, 0.9], abs=1e-6)
    # the *last* jump counts: 0.5 -> 0.3 -> 0.1 -> 0.05 are all jumps, 0.05 -> 0.05 is not
    logp = _logp([0.5, 0.3, 0.1, 0.05, 0.05])
    assert boosted_probabilities(logp, logp[:, 2]).item() == pytest.approx(0.9, abs=1e-6)
    assert boosted_probabilities(logp, logp[:, 4]).item() == pytest.approx(0.05, abs=1e-6)
    # no jump at all (uniform over 100): nothing is dominant, a token keeps its 0.01
    logp = _logp([0.01] * 100)
    assert boosted_probabilities(logp, logp[:, 7]).item() == pytest.approx(0.01, abs=1e-7)


def test_boosted_probabilities_see_past_the_top_ten():
    """12 tokens of 0.08 and 88 of 0.04 / 88: the jump is after the 12th token, past any
    top-10 list (where the stored-top-k rule cannot tell), and the dominant mass is 0.96."""
    from confide.backends.hf.steps import boosted_probabilities
    from confide.scorers.information import boosted_token_probability

    row = [0.08] * 12 + [0.04 / 88] * 88
    peaked = [0.99] + [0.01 / 99] * 99  # every jump within any head
    logp = _logp(row, peaked)
    chosen = logp[[0, 1], [3, 0]]
    assert boosted_probabilities(logp, chosen).tolist() == pytest.approx([0.96, 0.99], abs=1e-5)
    tail = logp[0, 50:51]
    assert boosted_probabilities(logp[:1], tail).item() == pytest.approx(0.04 / 88, rel=1e-5)
    # a head too short to hold the jump (its last value 0.08 > 0.005): that row sorts its
    # whole vocabulary, the other row decides from the head
    head = logp.topk(3, -1).values
    assert boosted_probabilities(logp, chosen, head).tolist() == pytest.approx([0.96, 0.99],
                                                                              abs=1e-5)
    with pytest.raises(CannotScore, match="listed alternatives"):
        boosted_token_probability(float(chosen[0]), logp[0].topk(10).values.numpy())


def _boosted_rule(logp_row: torch.Tensor, token: int) -> float:
    """The stored-top-k rule (confide.scorers.information) on a whole sorted distribution."""
    from confide.scorers.information import boosted_token_probability

    return boosted_token_probability(float(logp_row[token]),
                                     logp_row.sort(descending=True).values.numpy())


def test_hf_boosted_prob_equals_the_rule_on_a_reference_forward_pass(hf_model):
    """While decoding (greedy and sampled rows, 3 rows per step so rows enter as others
    leave) ``token_boosted_prob`` is the rule on the step's own sorted top-200 (both dtypes)
    and on one full forward pass over the same tokens (float32).

    bfloat16: the full pass moves log-probabilities by up to 0.3 nats (test_hf.py) and the
    rule jumps at its cut, so only most steps agree closely: measured 95% of 213 steps
    within 0.05 (the worst 0.73, where the cut moved); float32 agrees to 1.7e-5."""
    prompts = [QUESTION, [{"role": "user", "content": "Answer with a few words only.\n"
                                                       "Name an animal that lives in the sea."}]]
    spec = GenerationSpec(max_new_tokens=10, n_samples=3, temperature=1.0, top_p=0.9,
                          top_k_alternatives=200)
    before, hf_model.max_rows = hf_model.max_rows, 3
    try:
        results = hf_model.generate(prompts, spec, [3, 4])
    finally:
        hf_model.max_rows = before
    from confide.scorers.information import boosted_token_probability

    rows = []
    for prompt, result in zip(prompts, results):
        for gen in [result.greedy, *result.samples]:
            assert gen.token_boosted_prob.shape == (gen.n_tokens,)
            logp = _reference_logp(hf_model, hf_model.encode(prompt), gen.token_ids)
            for t, token in enumerate(gen.token_ids):
                # the step's own distribution, as the loop listed it (top-200 holds the cut)
                own = boosted_token_probability(gen.token_logprobs[t], gen.top_logprobs[t])
                rows.append((gen.token_boosted_prob[t], own, _boosted_rule(logp[t], token)))
    decoded, own, reference = np.array(rows).T
    assert len(decoded) > 40
    np.testing.assert_allclose(decoded, own, atol=1e-6)
    if hf_model.dtype == torch.float32:
        np.testing.assert_allclose(decoded, reference, atol=2e-4)
    else:
        assert np.mean(np.abs(decoded - reference) < 0.05) >= 0.85
