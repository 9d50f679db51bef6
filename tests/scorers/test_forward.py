"""PMI, CPMI, RAUQ and the attention score: hand-computed, then on the bundled model against
references computed another way (a full forward pass, a step-by-step cached loop, slogdet)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationSpec
from confide.core.records import Generation, Item, Record
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers.forward import (
    CPMI_LAMBDA,
    CPMI_TAU,
    attention_score_value,
    cpmi_value,
    pmi_value,
    rauq_layers,
    rauq_value,
)

QUESTION = [{"role": "user", "content": "Answer with a few words only.\nWho wrote the play "
             "Hamlet?"}]
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 0.5}


# ----------------------------------------------------------------------- by hand


def test_pmi_hand_computed():
    # (log .5 - log .25) + (log .8 - log .4) + (log .9 - log .9) = 2 log 2, over 3 tokens
    value = pmi_value(np.log([0.5, 0.8, 0.9]), np.log([0.25, 0.4, 0.9]))
    assert value == pytest.approx(2 * math.log(2) / 3)


def test_cpmi_subtracts_the_unconditioned_term_only_where_entropy_reaches_tau():
    ell, u = np.log([0.5, 0.8]), np.log([0.25, 0.4])
    entropies = [CPMI_TAU, CPMI_TAU / 2]  # the first step reaches tau, the second does not
    expected = (math.log(0.5) - CPMI_LAMBDA * math.log(0.25) + math.log(0.8)) / 2
    assert cpmi_value(ell, u, entropies) == pytest.approx(expected)
    # with lambda = 1 and every step uncertain it is PMI
    assert cpmi_value(ell, u, [1.0, 1.0], lam=1.0) == pytest.approx(pmi_value(ell, u))


def test_rauq_layers_are_the_middle_third():
    assert list(rauq_layers(30)) == list(range(10, 21))
    assert list(rauq_layers(18)) == list(range(6, 13))
    assert list(rauq_layers(3)) == [1, 2]


def test_rauq_hand_computed():
    p = np.array([0.9, 0.5, 0.8])
    attention = np.array([  # one layer, two heads, weights for j = 1, 2
        [[0.2, 0.4], [0.6, 0.1]],  # layer 0: head 1 (mean .35) beats head 0 (.30)
        [[0.9, 0.9], [0.1, 0.1]],  # layer 1: head 0
    ])
    alpha = 0.5
    c0 = [0.9, alpha * 0.5 + 0.5 * 0.6 * 0.9]
    c0.append(alpha * 0.8 + 0.5 * 0.1 * c0[1])
    c1 = [0.9, alpha * 0.5 + 0.5 * 0.9 * 0.9]
    c1.append(alpha * 0.8 + 0.5 * 0.9 * c1[1])
    expected = min(np.mean(np.log(c0)), np.mean(np.log(c1)))
    assert rauq_value(np.log(p), attention, alpha) == pytest.approx(expected)


def test_rauq_of_one_token_is_its_log_probability():
    assert rauq_value(np.log([0.7]), np.zeros((3, 2, 0)), 0.5) == pytest.approx(math.log(0.7))


def test_attention_score_is_the_mean_log_determinant():
    a = np.array([[1.0, 0.5, 0.25], [1.0, 1.0, 0.5]])
    expected = (math.log(0.5 * 0.25) + math.log(0.5)) / 2
    assert attention_score_value(a) == pytest.approx(expected)


def test_forward_scorers_without_a_backend_are_nan_with_a_reason():
    gen = Generation("Paris", token_ids=[1, 2], tokens=["Par", "is"],
                     token_logprobs=np.log([0.5, 0.9]), token_entropies=np.array([1.0, 0.1]))
    r = Record(Item("q", [{"role": "user", "content": "Capital of France?"}]), gen)
    for name in ("pmi", "cpmi", "rauq", "attention_score"):
        value, reason = run_scorer(SCORERS[name], r, ScoringContext())
        assert math.isnan(value) and "backend cannot give" in reason


def test_attention_scorers_need_the_generation_prompt():
    gen = Generation("Paris", token_ids=[1, 2], tokens=["Par", "is"],
                     token_logprobs=np.log([0.5, 0.9]))
    r = Record(Item("q", "Capital of France?"), gen)  # a text prompt: its template is unknown
    value, reason = run_scorer(SCORERS["rauq"], r, ScoringContext())
    assert math.isnan(value) and "prompt" in reason


# ----------------------------------------------------------------------- bundled model


@pytest.fixture(scope="module")
def scored(hf_model):
    """A real greedy answer and a context that knows its prompt."""
    gen = hf_model.generate([QUESTION], GenerationSpec(max_new_tokens=8, stop=("\n",)),
                            [0])[0].greedy
    assert gen.n_tokens >= 3
    record = Record(Item("hamlet", "Who wrote the play Hamlet?"), gen)
    ctx = ScoringContext(backend=hf_model, prompt=QUESTION)
    return record, ctx


def test_pmi_equals_a_reference_pass_after_an_empty_question(hf_model, scored):
    record, ctx = scored
    gen = record.greedy
    text = hf_model.tokenizer.apply_chat_template([{"role": "user", "content": ""}],
                                                  add_generation_prompt=True, tokenize=False)
    neutral = hf_model.tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([neutral + gen.token_ids])
    with torch.inference_mode():
        hidden = hf_model.model.get_decoder()(ids).last_hidden_state[0]
        logp = torch.log_softmax(hf_model.float32_logits(hidden).double(), -1)
    steps = logp[len(neutral) - 1:len(neutral) - 1 + gen.n_tokens]
    u = steps.gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1).numpy()
    ell = np.asarray(gen.token_logprobs, float)
    value, reason = run_scorer(SCORERS["pmi"], record, ctx)
    assert reason is None
    assert value == pytest.approx(np.mean(ell - u), abs=TOLERANCE[hf_model.dtype])
    gate = np.asarray(gen.token_entropies) >= CPMI_TAU
    cpmi, _ = run_scorer(SCORERS["cpmi"], record, ctx)
    assert cpmi == pytest.approx(np.mean(ell - CPMI_LAMBDA * np.where(gate, u, 0.0)),
                                 abs=CPMI_LAMBDA * TOLERANCE[hf_model.dtype])


def _polygraph_style_rauq(hf_model, prompt_ids, gen, alpha):
    """RAUQ as LM-Polygraph computes it, from the attention of each cached decoding step."""
    model, before = hf_model.model, hf_model.model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True,
                        output_attentions=True)
            steps = []
            for token in gen.token_ids[:-1]:
                out = model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values,
                            use_cache=True, output_attentions=True)
                steps.append([a[0, :, 0, -1].float().numpy() for a in out.attentions])
    finally:
        model.set_attn_implementation(before)
    n_layers = len(steps[0])
    layers = range(n_layers // 3, int(np.ceil(n_layers / 3 * 2) + 1))
    probs = np.exp(np.asarray(gen.token_logprobs, float))
    uncertainties = []
    for layer in layers:
        per_head = np.array([[step[layer][h] for step in steps]
                             for h in range(len(steps[0][layer]))])
        head = per_head.mean(-1).argmax()
        conf = [probs[0]]
        for j in range(1, len(probs)):
            conf.append(alpha * probs[j] + (1 - alpha) * per_head[head, j - 1] * conf[-1])
        uncertainties.append(1 - np.mean(np.log(conf)))
    return max(uncertainties)


def test_rauq_equals_polygraph_style_rauq_from_cached_decoding_steps(hf_model, scored):
    record, ctx = scored
    value, reason = run_scorer(SCORERS["rauq"], record, ctx)
    assert reason is None
    u = _polygraph_style_rauq(hf_model, hf_model.encode(QUESTION), record.greedy, alpha=0.5)
    atol = 1e-4 if hf_model.dtype == torch.float32 else 0.05
    assert value == pytest.approx(1 - u, abs=atol)


def test_attention_score_equals_slogdet_of_the_middle_layer(hf_model, scored):
    record, ctx = scored
    value, reason = run_scorer(SCORERS["attention_score"], record, ctx)
    assert reason is None
    ids = torch.tensor([hf_model.encode(QUESTION) + record.greedy.token_ids])
    model, before = hf_model.model, hf_model.model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            attentions = model(input_ids=ids, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(before)
    middle = attentions[len(attentions) // 2][0].double()  # (heads, n, n), lower triangular
    expected = float(torch.linalg.slogdet(middle).logabsdet.mean())
    assert value == pytest.approx(expected, rel=1e-4 if hf_model.dtype == torch.float32 else 0.02)


def test_forward_scorers_through_the_api(hf_model):
    from confide import api

    answers = api.score(hf_model, ["Who wrote the play Hamlet?"],
                        scorers=("pmi", "cpmi", "rauq", "attention_score"), max_new_tokens=8)
    values = answers[0].confidences
    assert all(math.isfinite(v) for v in values.values()), answers[0].reasons
    assert values["rauq"] <= 0.0  # a mean log of numbers in (0, 1]


def test_an_openai_backend_skips_the_forward_scorers_with_the_reason():
    from confide.backends.openai import OpenAIBackend
    from confide.pipeline.scorer_plan import plan_scorers

    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", logprobs=True)
    names = ["pmi", "cpmi", "rauq", "attention_score", "renyi_negentropy", "fisher_rao", "msp"]
    usable, skipped = plan_scorers(names, backend.capabilities)
    assert [s.name for s in usable] == ["msp"]
    assert skipped["pmi"] == "backend cannot give unconditioned_logprobs"
    assert skipped["rauq"] == "backend cannot give attentions"
    assert skipped["fisher_rao"] == "backend cannot give token_fisher_rao_uniform"
