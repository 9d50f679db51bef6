"""The hf backend on the bundled model: statistics from the live logits are exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from confide.backends.base import GenerationSpec
from confide.backends.models import resolve_model
from confide.core.errors import ModelLoadError

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


# Largest |Δ| allowed between the decoding loop and one full forward pass of the same
# model in the same dtype. float32: both paths agree to rounding (measured 4e-5 nats).
# bfloat16: the cached and the full pass round hidden states differently; measured up
# to 0.21 nats in log p and entropy (12 greedy and sampled rows of the three questions
# below) and 0.31 nats in a top-10 log p, as large as the gap to the model's own
# bfloat16 logits. The statistics
# themselves are float32 in both dtypes (float32 output projection).
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 0.5}


def reference_logp(backend, prompt_ids, answer_ids):
    """Per-answer-token log-softmax from one full forward pass of the same model and dtype."""
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.inference_mode():
        hidden = backend.model.get_decoder()(ids).last_hidden_state[0]
        logits = backend.float32_logits(hidden)
    steps = logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(answer_ids)]
    return torch.log_softmax(steps, -1)


def test_hf_statistics_equal_a_reference_forward_pass(hf_model):
    """Log-probs, entropies, KL(U||p) and top-k recomputed by one full forward pass."""
    prompt = chat(QUESTIONS[0])
    gen = hf_model.generate([prompt], GenerationSpec(max_new_tokens=10), [0])[0].greedy
    logp = reference_logp(hf_model, hf_model.encode(prompt), gen.token_ids)
    chosen = logp.gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1).numpy()
    entropy = (-(logp.exp() * logp).sum(-1)).numpy()
    kl = (-np.log(logp.shape[-1]) - logp.mean(-1)).numpy()
    atol = TOLERANCE[hf_model.dtype]
    np.testing.assert_allclose(gen.token_logprobs, chosen, atol=atol)
    np.testing.assert_allclose(gen.token_entropies, entropy, atol=atol)
    np.testing.assert_allclose(gen.token_kl_uniform, kl, atol=atol)
    np.testing.assert_allclose(gen.top_logprobs, logp.topk(10, -1).values.numpy(), atol=atol)
    assert gen.top_logprobs.shape == (len(gen.token_ids), 10)
    # greedy: the chosen token is the most likely alternative
    np.testing.assert_allclose(gen.top_logprobs[:, 0], gen.token_logprobs, atol=1e-5)
    assert gen.tokens[0] == gen.top_tokens[0][0]


@pytest.mark.parametrize("max_rows", [None, 3])
def test_hf_sample_statistics_equal_a_reference_forward_pass(hf_model, max_rows):
    """Sampled rows decode from the shared prompt cache; their statistics are still exact.

    With 3 rows per step the 8 rows of two prompts of different lengths enter
    as others finish: their caches are left-padded and stacked with rows
    already part-way through their answers."""
    prompts = [chat(QUESTIONS[2]), chat("Name a colour.")]
    spec = GenerationSpec(max_new_tokens=8, n_samples=3, temperature=1.0, top_p=0.9)
    before, hf_model.max_rows = hf_model.max_rows, max_rows
    try:
        results = hf_model.generate(prompts, spec, [7, 8])
    finally:
        hf_model.max_rows = before
    for prompt, result in zip(prompts, results):
        for gen in [result.greedy, *result.samples]:
            logp = reference_logp(hf_model, hf_model.encode(prompt), gen.token_ids)
            chosen = logp.gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1).numpy()
            entropy = (-(logp.exp() * logp).sum(-1)).numpy()
            atol = TOLERANCE[hf_model.dtype]
            np.testing.assert_allclose(gen.token_logprobs, chosen, atol=atol)
            np.testing.assert_allclose(gen.token_entropies, entropy, atol=atol)


def _decoder_calls(backend):
    """Record (rows, tokens) of every decoder forward pass while the context is open."""
    calls = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls.append(tuple(ids.shape))

    return calls, backend.model.get_decoder().register_forward_pre_hook(hook, with_kwargs=True)


def _prefill_shapes(backend, prompts):
    """(rows, tokens) of the prefill passes of ``prompts`` together: their common
    prefix once, then the rest of each, or the whole prompts if little is shared."""
    from confide.backends.hf import MIN_SHARED_PREFIX, _common_prefix

    encoded = [backend.encode(p) for p in prompts]
    shared = _common_prefix(encoded)
    if len(prompts) < 2 or shared < MIN_SHARED_PREFIX:
        return [(len(prompts), max(map(len, encoded)))]
    first = [] if backend._prefix and backend._prefix[0] == tuple(encoded[0][:shared]) \
        else [(1, shared)]
    return first + [(len(prompts), max(len(e) - shared for e in encoded))]


def test_hf_one_prefill_per_question_and_finished_rows_leave(hf_model, monkeypatch):
    monkeypatch.setattr(hf_model, "max_rows", 16)  # room for all 10 rows: they only leave
    monkeypatch.setattr(hf_model, "_prefix", None)
    prompts = [chat(QUESTIONS[0]), chat("Write a long story about a dragon.")]
    spec = GenerationSpec(max_new_tokens=16, n_samples=4, temperature=1.0, top_p=0.9)
    expected = _prefill_shapes(hf_model, prompts)
    calls, handle = _decoder_calls(hf_model)
    try:
        results = hf_model.generate(prompts, spec, [3, 4])
    finally:
        handle.remove()
    # one prefill of the two prompts, never one per row
    prefills = [c for c in calls if c[1] > 1]
    assert prefills == expected and len(expected) == 2  # the chat template's opening is shared
    # each decoding step holds exactly the rows still unfinished: a row that produced
    # L tokens (its end-of-sequence token included) takes part in L - 1 steps
    steps = [c[0] for c in calls if c[1] == 1]
    made = [g.n_tokens + (g.finish_reason == "stop")
            for r in results for g in [r.greedy, *r.samples]]
    assert sum(steps) == sum(n - 1 for n in made)
    assert steps == sorted(steps, reverse=True) and steps[-1] < steps[0] <= 10


def test_hf_waiting_rows_refill_the_batch(hf_model, monkeypatch):
    """With fewer places than rows, a finished row's place goes to a waiting row at
    once; each prompt is still prefilled once, in one pass."""
    prompts = [chat(QUESTIONS[0]), chat("Write a long story about a dragon.")]
    spec = GenerationSpec(max_new_tokens=16, n_samples=3, temperature=1.0, top_p=0.9)
    admitted = []  # (rows in the batch before, after, rows still waiting) per admission
    real_admit = hf_model._admit

    def spy(batch, logits, hidden, waiting, *args, **kwargs):
        before = len(batch.rows)
        got = real_admit(batch, logits, hidden, waiting, *args, **kwargs)
        admitted.append((before, len(batch.rows), len(waiting)))
        return got

    monkeypatch.setattr(hf_model, "_admit", spy)
    monkeypatch.setattr(hf_model, "max_rows", 3)
    expected = _prefill_shapes(hf_model, prompts)
    calls, handle = _decoder_calls(hf_model)
    try:
        results = hf_model.generate(prompts, spec, [3, 4])
    finally:
        handle.remove()
    assert [c for c in calls if c[1] > 1] == expected
    steps = [c[0] for c in calls if c[1] == 1]
    made = [g.n_tokens + (g.finish_reason == "stop")
            for r in results for g in [r.greedy, *r.samples]]
    assert sum(steps) == sum(n - 1 for n in made)  # no row stays after it finished
    assert max(steps) == 3
    # every admission fills the batch (or empties the queue), and rows join a running batch
    assert all(after == 3 or waiting == 0 for _, after, waiting in admitted)
    assert any(before > 0 for before, _, _ in admitted)
    assert admitted[-1][2] == 0


def test_hf_shared_prompt_prefix_is_encoded_once_and_changes_nothing(hf_model, monkeypatch):
    """Few-shot prompts share their exemplars: that prefix is run once (and kept for
    the next call), the rest of each prompt after it; answers and statistics are those
    of prefilling every prompt whole."""
    import confide.backends.hf.decoding as decoding  # where the prefill reads it
    from confide.tasks import load_task

    task = load_task("triviaqa")
    prompts = [task.render(item, chat=hf_model.has_chat_template) for item in task.items[:3]]
    spec = GenerationSpec(max_new_tokens=10, n_samples=2, temperature=1.0, top_p=0.9,
                          stop=("\n",))
    monkeypatch.setattr(hf_model, "_prefix", None)
    # a pinned row limit: on a fresh machine the first call would otherwise time
    # rows per step with forward passes of its own
    monkeypatch.setattr(hf_model, "max_rows", 16)
    expected = _prefill_shapes(hf_model, prompts)
    shared = expected[0][1]
    assert expected[0][0] == 1 and shared > 100  # five exemplars
    calls, handle = _decoder_calls(hf_model)
    try:
        together = hf_model.generate(prompts, spec, [1, 2, 3])
        again = hf_model.generate(prompts, spec, [1, 2, 3])
    finally:
        handle.remove()
    prefills = [c for c in calls if c[1] > 1]
    assert prefills == expected + expected[1:]  # the second call reuses the prefix
    for prompt, a, b in zip(prompts, together, again, strict=True):
        for x, y in zip([a.greedy, *a.samples], [b.greedy, *b.samples], strict=True):
            assert x.token_ids == y.token_ids
            np.testing.assert_array_equal(x.token_logprobs, y.token_logprobs)
            logp = reference_logp(hf_model, hf_model.encode(prompt), x.token_ids)
            chosen = logp.gather(-1, torch.tensor(x.token_ids)[:, None]).squeeze(-1).numpy()
            np.testing.assert_allclose(x.token_logprobs, chosen, atol=TOLERANCE[hf_model.dtype])
    if hf_model.dtype != torch.float32:
        return  # in bfloat16 a sampled token may flip with the rounding of the prefill
    monkeypatch.setattr(decoding, "MIN_SHARED_PREFIX", 10**9)
    whole = hf_model.generate(prompts, spec, [1, 2, 3])
    for a, c in zip(together, whole, strict=True):
        for x, z in zip([a.greedy, *a.samples], [c.greedy, *c.samples], strict=True):
            assert x.token_ids == z.token_ids
            np.testing.assert_allclose(x.token_logprobs, z.token_logprobs, atol=1e-4)
            np.testing.assert_allclose(x.token_entropies, z.token_entropies, atol=1e-4)


def test_common_prefix_leaves_each_prompt_a_token():
    from confide.backends.hf import _common_prefix

    assert _common_prefix([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert _common_prefix([[1, 2, 3], [1, 2, 3]]) == 2
    assert _common_prefix([[1, 2], [1, 2, 3, 4]]) == 1
    assert _common_prefix([[7, 2], [1, 2]]) == 0
    assert _common_prefix([[5]]) == 0


def test_hf_rows_per_step_do_not_change_answers(hf_model):
    prompts = [chat(QUESTIONS[0]), chat(QUESTIONS[1])]
    spec = GenerationSpec(max_new_tokens=8, n_samples=3, temperature=1.0, top_p=0.9)
    wide = hf_model.generate(prompts, spec, [11, 12])
    before = hf_model.max_rows
    hf_model.max_rows = 2  # each question's rows now split over two groups
    try:
        narrow = hf_model.generate(prompts, spec, [11, 12])
    finally:
        hf_model.max_rows = before
    for a, b in zip(wide, narrow):
        if hf_model.dtype == torch.float32:
            assert [g.token_ids for g in [a.greedy, *a.samples]] == \
                [g.token_ids for g in [b.greedy, *b.samples]]
            np.testing.assert_allclose(a.greedy.token_logprobs, b.greedy.token_logprobs,
                                       atol=TOLERANCE[hf_model.dtype])
        else:  # bfloat16 rounding depends on the batch's shape: a sample can take another
            # path, so only the first step (same prompt, same distribution) is compared
            for x, y in zip([a.greedy, *a.samples], [b.greedy, *b.samples]):
                np.testing.assert_allclose(x.top_logprobs[:1], y.top_logprobs[:1],
                                           atol=TOLERANCE[hf_model.dtype])


def test_hf_rows_per_step_is_measured_once_and_fits_memory(hf_model, tmp_path, monkeypatch):
    monkeypatch.setenv("CONFIDE_CACHE_DIR", str(tmp_path))
    before = hf_model.max_rows
    hf_model.max_rows = None
    try:
        rows = hf_model.rows_per_step(100, 16)
        assert 1 <= rows <= min(16, hf_model.rows_that_fit(128))
        stored = (tmp_path / "tuning.json").read_text()
        assert hf_model.rows_per_step(120, 11) == rows  # same buckets: read back
        assert (tmp_path / "tuning.json").read_text() == stored
    finally:
        hf_model.max_rows = before


def test_hf_samples_depend_only_on_their_seed(hf_model):
    if hf_model.dtype != torch.float32:  # the machine's timing may choose bfloat16
        pytest.skip("a neighbour changes the rows per step; only float32 rounds them alike "
                    "(in bfloat16 a sampled token can flip)")
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


@pytest.mark.parametrize("name", ["{tmp}/no/such/model", "./missing-dir", "{tmp}/none.gguf",
                                  "not a model"])
def test_resolve_model_unknown_path_is_a_clear_error(name, tmp_path):
    # absolute paths inside this test's own empty folder: absent on any machine
    with pytest.raises(ModelLoadError, match="no such|not a bundled alias"):
        resolve_model(name.format(tmp=tmp_path))


def test_nucleus_draw_equals_a_full_sort():
    """The top-256 shortcut draws the token a sort of the whole vocabulary draws,
    on peaked rows (shortcut) and flat rows (full sort) alike."""
    from confide.backends.hf import _nucleus_draw

    def full_sort_draw(probs, draws, top_p):
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_p.cumsum(-1)
        cumulative = (sorted_p * ((cumulative - sorted_p) < top_p)).cumsum(-1)
        pos = torch.searchsorted(cumulative, draws[:, None] * cumulative[:, -1:])
        return order.gather(-1, pos.clamp(max=probs.shape[-1] - 1)).squeeze(-1)

    gen = torch.Generator().manual_seed(0)
    scales = torch.tensor([0.5, 1.0, 3.0, 8.0]).repeat_interleave(6)[:, None]
    probs = torch.softmax(torch.randn(24, 49152, generator=gen) * scales, -1)
    draws = torch.rand(24, generator=gen)
    for top_p in (0.5, 0.9, 1.0):
        np.testing.assert_array_equal(_nucleus_draw(probs, draws, top_p).numpy(),
                                      full_sort_draw(probs, draws, top_p).numpy())


def _reference_states(backend, prompt_ids, answer_ids, layers):
    """Hidden states of the answer's own positions, from one full pass over prompt + answer."""
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.inference_mode():
        states = backend.model.get_decoder()(ids, output_hidden_states=True).hidden_states
    p = len(prompt_ids)
    return {layer: states[layer][0, p:p + len(answer_ids)].float().numpy() for layer in layers}


def _cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("max_new_tokens", [1, 5])
def test_hf_pooled_states_are_the_answer_tokens_own(hf_model, max_new_tokens):
    """The pooled state of an answer is its own last token's (D1): before the fix every
    one-token sample got the prompt's last state, so four different one-token answers
    shared one stored state. ``:mean`` averages the answer's own positions. Rows cut by
    the length limit get their last state from one closing pass."""
    layers = (-1, 3)
    prompt = chat(QUESTIONS[0])
    spec = GenerationSpec(max_new_tokens=max_new_tokens, n_samples=4, temperature=2.0,
                          top_p=1.0, hidden_layers=layers)
    result = hf_model.generate([prompt], spec, [11])[0]
    gens = [result.greedy, *result.samples]
    prompt_ids = hf_model.encode(prompt)
    prompt_last = _reference_states(hf_model, prompt_ids[:-1], prompt_ids[-1:], layers)
    worst = 1.0
    for gen in gens:
        ref = _reference_states(hf_model, prompt_ids, gen.token_ids, layers)
        for layer in layers:
            last, mean = gen.hidden[f"{layer}:last"], gen.hidden[f"{layer}:mean"]
            worst = min(worst, _cosine(last, ref[layer][-1]), _cosine(mean, ref[layer].mean(0)))
            # nearer its own last token's state than the prompt's last state
            assert np.linalg.norm(last - ref[layer][-1]) < np.linalg.norm(
                last - prompt_last[layer][0])
    assert worst > (0.999 if hf_model.dtype == torch.float32 else 0.98)
    if max_new_tokens == 1:  # different one-token answers, different states
        answers = {tuple(g.token_ids) for g in gens}
        states = {g.hidden["-1:last"].tobytes() for g in gens}
        assert len(answers) > 1 and len(states) == len(answers)
