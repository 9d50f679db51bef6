r"""The ``vllm`` backend: vLLM's engine on GPUs, for throughput (extra ``vllm``).

Every prompt becomes one greedy request (temperature 0) and ``n_samples``
sampled requests, all handed to vLLM in one call so that its scheduler batches
them; prefix caching is on, so a question's prompt is encoded once for its
greedy answer and all its samples. Sample ``j`` of prompt ``i`` is its own
request seeded ``seeds[i] + j`` (``SamplingParams(seed=...)``), as in the ``hf``
backend, so a resumed run regenerates the same samples. Prompts are tokenized
here, chat messages through the model's chat template, exactly as ``hf`` does,
and handed to vLLM as token ids; answers are decoded and cut at the first stop
string here too. A reasoning run (``spec.reasoning_tags`` set) renders a chat template's
thinking mode on, as ``hf`` does (:func:`rendered_prompts`), and where the rendered prompt
ends with the opening tag marks every reply of it ``trace_opened``, so a reply cut by the
token budget before its closing tag is a trace with no final answer
(:func:`~confide.core.reasoning.split_reasoning`).

Which token statistics are exact and which are not
---------------------------------------------------
vLLM returns, per generated token, the log-probabilities of the ``K`` most
likely tokens (``logprobs=K``, from the raw logits: ``logprobs_mode=
"raw_logprobs"``, before temperature and top-p) and of the chosen token. So:

- ``token_logprobs`` (chosen-token :math:`\log p_t(y_t)`) and
  ``top_logprobs``/``top_tokens`` are **exact**;
- ``token_entropies`` needs the whole distribution; it is a **lower bound from
  the top-K** (:func:`topk_statistics`) with a stated gap, exact when the
  top-K hold all the mass. The run's stored backend configuration says so
  (``approximate``), and ``approximate=False`` leaves it out, so the runner
  skips the scorers that need it and says why;
- ``token_kl_uniform`` (self-certainty, :math:`\mathrm{KL}(U\|p)`) is **not
  given**: it is an average of :math:`\log p_v` over the whole vocabulary, so it
  depends on the unseen tokens' smallest probabilities, which the top-K say
  nothing about; no function of the top-K keeps the order of the true values
  (see :func:`topk_statistics`), and the earlier lower bound inverted rankings.
  The backend does not claim ``token_kl_uniform``, so ``self_certainty``,
  ``lens`` and ``claim_self_certainty`` are skipped with "backend cannot give
  token_kl_uniform";
- hidden states: vLLM gives none, so probes and density scorers are skipped.

Ensembles (``confide run --ensemble DIR``) are refused here, with the hf backend named:
the members (:mod:`confide.backends.hf.members`) run inside the local transformers model.
What would work with vLLM: it serves several LoRA adapters on one base
(``--enable-lora``, one ``LoRARequest`` per request), so each member's teacher-forced
log-probabilities of an answer are one ``prompt_logprobs`` request per adapter over
prompt + answer; written as ``member_logprobs`` into confide's JSON Lines
(:mod:`confide.ingest.jsonl`), ``confide score`` feeds the sequence-level ensemble
scorers (``ens_seq_total_pe`` ...) from them. Not available that way: the members' whole
distributions (``prompt_logprobs`` gives the top-K), so the entropy-based measures
(mutual information, expected entropy, EPKL) stay hf-only; SVE and MC-dropout members
are not LoRA adapters vLLM can serve.

Throughput: a run's block of ``--batch-size`` questions is one call to the
engine, so give it hundreds (``benchmarks/gpu/vllm_check.sh`` uses one block of
200 questions).

Reproducibility: vLLM's batched GPU kernels are not batch-invariant unless
vLLM's batch-invariant mode is on (``VLLM_BATCH_INVARIANT=1`` where the
installed vLLM has it), so a resumed run's numbers can differ in the last bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from confide.backends.base import (
    Backend,
    GenerationResult,
    GenerationSpec,
    HasContextWindow,
    Prompt,
    Tokenizes,
    encode_prompt,
    opens_trace,
)
from confide.backends.models import DEFAULT_MODEL, resolve_model
from confide.backends.topk import ranked_entropy_lower_bound
from confide.core.errors import InvalidInputError, ModelLoadError
from confide.core.needs import Need
from confide.core.records import Generation

__all__ = ["STATS_LOGPROBS", "TAIL_FLOOR", "TokenText", "VLLMBackend", "assemble",
           "rendered_prompts", "request_plan", "to_generation", "topk_statistics",
           "vllm_capabilities"]

# Log-probabilities asked of vLLM per token for the entropy bounds (vLLM's default cap).
STATS_LOGPROBS = 20
# The unseen mass is floored here: below the rounding of a float32 log-probability sum.
TAIL_FLOOR = 1e-6


class _Logprob(Protocol):
    logprob: float
    rank: int | None


class _Output(Protocol):
    """What is read of vLLM's ``CompletionOutput``."""

    token_ids: Sequence[int]
    logprobs: Sequence[dict[int, _Logprob]] | None
    finish_reason: str | None
    stop_reason: int | str | None


def topk_statistics(top: Sequence[float], known: Sequence[float], vocab_size: int
                    ) -> tuple[float, float, float | None]:
    r"""Entropy bounds of one next-token distribution from its top-K, and its self-certainty
    only when every token is known.

    Let :math:`\ell_{(1)} \ge \dots \ge \ell_{(K)}` be the ``top`` log-probabilities,
    :math:`S` the set of tokens whose log-probability is known (the top-K plus
    ``known``, e.g. a sampled token ranked below K), :math:`m = |S|`,
    :math:`p_i = e^{\ell_i}`, and :math:`R = \max(0, 1 - \sum_{i \in S} p_i)` the
    mass of the :math:`V - m` unseen tokens, each of probability at most
    :math:`p_{(K)}`. Then

    .. math::

        H_{lo} = -\sum_{i \in S} p_i \log p_i + R \log\frac{1}{p_{(K)}}
        \;\le\; H \;\le\;
        H_{hi} = -\sum_{i \in S} p_i \log p_i + R \log\frac{V - m}{R}

    (each unseen :math:`q \le p_{(K)}` gives :math:`-q\log q \ge -q \log p_{(K)}`;
    the uniform tail has the most entropy). :math:`R` is floored at
    :data:`TAIL_FLOOR` in the upper bound's logarithm, so a step with all its
    mass in the top-K gives a finite value.

    Self-certainty, :math:`\mathrm{KL}(U \,\|\, p) = -\log V - \frac{1}{V}\sum_v
    \log p_v`, is returned only when every token is known (:math:`m = V`), and then
    exactly; otherwise ``None``. The top-K cannot rank it: with :math:`R > 0`
    spread over :math:`V - m \ge 2` unseen tokens, the same top-K fit every KL from

    .. math::

        \mathrm{KL}_{lo} = -\log V - \frac{1}{V}\Big[\sum_{i \in S} \ell_i
        + (V - m) \log\frac{R}{V - m}\Big]

    (Jensen's inequality on the unseen :math:`\log q`: the tail spread evenly) up
    to :math:`\infty` (an unseen token's probability can be as small as it likes),
    so a function of the top-K that kept the order of the true values would have
    to give every such step the same value. :math:`\mathrm{KL}_{lo}` inverts rankings:
    with :math:`V = 4` and top-2, :math:`p = (.5, .25, .25 - 10^{-9}, 10^{-9})` has
    KL 4.66 and bound 0.17, while :math:`p = (.6, .3, .05, .05)` has KL 0.54 and
    bound 0.54 (``tests/backends/test_vllm.py``). Entropy is that of
    Shannon; self-certainty is the mean of :math:`\mathrm{KL}(U\|p)` over tokens
    (Kang et al., 2025, "Scalable Best-of-N Selection for Large Language Models
    via Self-Certainty", arXiv:2502.18581).

    Returns ``(H_lo, H_hi, KL)`` in nats, ``KL`` None unless :math:`m = V`.

    >>> import math
    >>> lo, hi, kl = topk_statistics([math.log(.5), math.log(.25)], [], 4)
    >>> round(lo / math.log(2), 6), round(hi / math.log(2), 6), kl
    (1.5, 1.75, None)
    >>> lo, hi, kl = topk_statistics([math.log(.5), math.log(.25)], [math.log(.125)] * 2, 4)
    >>> round(lo / math.log(2), 6), round(hi / math.log(2), 6), round(kl / math.log(2), 6)
    (1.75, 1.75, 0.25)
    """
    logs = np.asarray(list(top) + list(known), dtype=np.float64)
    if not len(top):
        raise InvalidInputError("no top log-probabilities to bound the statistics with",
                                field="logprobs")
    probs = np.exp(logs)
    m = len(logs)
    unseen = vocab_size - m
    tail = max(0.0, 1.0 - float(probs.sum())) if unseen > 0 else 0.0
    seen_entropy = float(-(probs * logs).sum())
    smallest = float(np.exp(min(top)))
    lo = seen_entropy + (tail * -math.log(smallest) if tail > 0 else 0.0)
    floored = max(tail, TAIL_FLOOR)
    hi = seen_entropy + (tail * math.log(unseen / floored) if tail > 0 else 0.0)
    kl = -math.log(vocab_size) - float(logs.sum()) / vocab_size if unseen <= 0 else None
    return lo, max(hi, lo), kl


@dataclass(frozen=True)
class TokenText:
    """How token ids read as text: the tokenizer's decoding (special tokens skipped),
    one token's piece, and the ids that end an answer."""

    decode: Callable[[list[int]], str]
    piece: Callable[[int], str]
    end_ids: frozenset[int]


def _ranked(entries: dict[int, _Logprob], k: int) -> list[tuple[int, float]]:
    """The ``k`` highest-ranked ``(token id, log p)`` of one step (rank 1 first)."""
    order = sorted(entries.items(), key=lambda kv: (kv[1].rank if kv[1].rank is not None
                                                    else math.inf, -kv[1].logprob))
    return [(tid, float(lp.logprob)) for tid, lp in order[:k]]


def to_generation(output: _Output, text: TokenText, spec: GenerationSpec, *,
                  stats_k: int, vocab_size: int, approximate: bool = True) -> Generation:
    """A confide :class:`~confide.core.records.Generation` from one vLLM ``CompletionOutput``.

    The answer is the generated tokens less a final end-of-sequence or stop
    token, decoded and cut at the first stop string, less the trailing tokens
    that carry only the stop string (as the ``hf`` backend does).
    ``top_logprobs`` keeps the ``spec.top_k_alternatives`` best of the
    ``stats_k`` that vLLM returned; with ``approximate``, entropies are
    :func:`topk_statistics`' lower bound. KL(U || p) is never given: the top-K
    cannot rank it (:func:`topk_statistics`).
    """
    ids = list(output.token_ids)
    n = len(ids)
    stopped = output.finish_reason == "stop"
    if stopped and n and (ids[-1] in text.end_ids or ids[-1] == output.stop_reason):
        n -= 1  # the end-of-sequence (or stop) token is not part of the answer
    answer = text.decode(ids[:n])
    if spec.stop:
        cut = min((answer.find(s) for s in spec.stop if s in answer), default=-1)
        if cut >= 0:
            answer = answer[:cut]
            # keep the tokens that carry answer text, drop those made only of the stop
            while n and len(text.decode(ids[:n - 1])) >= len(answer):
                n -= 1
    gen = Generation(text=answer.strip(), token_ids=ids[:n],
                     tokens=[text.piece(t) for t in ids[:n]],
                     finish_reason="stop" if stopped else "length")
    steps = list(output.logprobs or [])[:n]
    if len(steps) < n:
        return gen  # vLLM gave no log-probabilities: text only
    k = spec.top_k_alternatives
    chosen = np.zeros(n, dtype=np.float32)
    entropy = np.zeros(n, dtype=np.float32)
    top_lp = np.full((n, k), -np.inf, dtype=np.float32)
    top_tokens: list[list[str]] = []
    for t, entries in enumerate(steps):
        chosen[t] = entries[ids[t]].logprob
        ranked = _ranked(entries, stats_k)
        best = ranked[:k]
        top_lp[t, :len(best)] = [lp for _, lp in best]
        top_tokens.append([text.piece(tid) for tid, _ in best])
        if approximate:  # the rule of every path, an imported vLLM dump's too
            entropy[t] = ranked_entropy_lower_bound(
                [(float(lp.logprob), lp.rank) for lp in entries.values()],
                float(entries[ids[t]].logprob), k=stats_k)
    gen.token_logprobs = chosen
    if approximate:
        gen.token_entropies = entropy
    if k:
        gen.top_logprobs, gen.top_tokens = top_lp, top_tokens
    return gen


def request_plan(spec: GenerationSpec, seeds: Sequence[int], n_prompts: int, logprobs: int
                 ) -> list[tuple[int, dict[str, Any]]]:
    """``(prompt index, SamplingParams keywords)`` of every request, greedy first per prompt.

    Sample ``j`` of prompt ``i`` is a request of its own seeded ``seeds[i] + j``,
    so an item's samples never depend on the items it is batched with.
    """
    common: dict[str, Any] = {"max_tokens": spec.max_new_tokens, "stop": list(spec.stop),
                              "logprobs": logprobs, "n": 1}
    plan = []
    for i in range(n_prompts):
        if spec.greedy:
            plan.append((i, {**common, "temperature": 0.0}))
        plan += [(i, {**common, "temperature": spec.temperature, "top_p": spec.top_p,
                      "seed": (seeds[i] + j) % 2**63}) for j in range(spec.n_samples)]
    return plan


def _end_ids(tokenizer: Any, path: str) -> frozenset[int]:
    """End-of-sequence ids of the tokenizer and of the model's generation config."""
    from transformers import GenerationConfig

    ids: set[int] = set()
    try:
        found: Any = GenerationConfig.from_pretrained(path).eos_token_id
    except OSError:  # no generation_config.json
        found = None
    for source in (found, tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return frozenset(ids)


def vllm_capabilities(approximate: bool = True) -> frozenset[Need]:
    """What the ``vllm`` backend gives: the exact chosen-token and top-K statistics,
    samples, a second prompt, and with ``approximate`` the entropies' lower bounds;
    never ``token_kl_uniform`` (:func:`topk_statistics`) nor hidden states."""
    exact = {Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS, Need.SAMPLES, Need.EXTRA_PROMPT}
    return frozenset(exact | ({Need.TOKEN_ENTROPIES} if approximate else set()))


class VLLMBackend(Backend, Tokenizes, HasContextWindow):
    """A model served by vLLM's offline engine as a confide backend.

    Parameters
    ----------
    model : bundled alias, transformers directory or hub id (``.gguf`` files are
        unpacked to a directory first, as for ``hf``).
    tensor_parallel_size : GPUs of this host the model is split over.
    approximate : give entropies as lower bounds from the top
        :data:`STATS_LOGPROBS` log-probabilities (see the module's notes); False
        leaves them out and the scorers that need them are skipped. KL(U || p) is
        never given (self-certainty is skipped either way).
    batch_size : accepted for the run loop's sake; vLLM forms its own batches.
    engine : further ``vllm.LLM`` keywords (``gpu_memory_utilization``,
        ``max_model_len``, ``dtype``, ``enforce_eager``...).
    """

    name = "vllm"

    def __init__(self, model: str = DEFAULT_MODEL, *, tensor_parallel_size: int = 1,
                 approximate: bool = True, batch_size: int | None = None,
                 **engine: Any) -> None:
        del batch_size  # the engine's scheduler batches every request of a call
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ModelLoadError("the vllm backend needs vLLM and a GPU: "
                                 "pip install 'confide[vllm]'") from exc
        from transformers import AutoTokenizer

        if isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int) \
                or tensor_parallel_size < 1:
            raise InvalidInputError(f"must be a positive integer, got {tensor_parallel_size!r}",
                                    field="tensor_parallel_size")
        self.source = resolve_model(model)
        self.approximate = approximate
        self.tensor_parallel_size = tensor_parallel_size
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.source.path)
            self.llm = LLM(model=self.source.path, tokenizer=self.source.path,
                           tensor_parallel_size=tensor_parallel_size,
                           enable_prefix_caching=True, max_logprobs=STATS_LOGPROBS,
                           logprobs_mode="raw_logprobs", **engine)
        except OSError as exc:
            raise ModelLoadError(f"{model}: cannot load model: {exc}") from exc
        # `LLM.model_config` in newer vLLM; the engine's in older ones
        self._model_config = (getattr(self.llm, "model_config", None)
                              or self.llm.llm_engine.model_config)
        self.vocab_size = int(self._model_config.get_vocab_size())
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self._text = TokenText(
            decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
            piece=self._piece, end_ids=_end_ids(self.tokenizer, self.source.path))
        self._pieces: dict[int, str] = {}

    @property
    def capabilities(self) -> frozenset[Need]:  # type: ignore[override]
        # never TOKEN_KL_UNIFORM: the top-K cannot rank it (topk_statistics)
        return vllm_capabilities(self.approximate)

    def config(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.source.name, "kind": self.source.kind,
                "dtype": str(self._model_config.dtype).removeprefix("torch."),
                "tensor_parallel_size": self.tensor_parallel_size,
                "chat_template": self.has_chat_template,
                "approximate": (f"token_entropies: lower bounds from the top "
                                f"{STATS_LOGPROBS}") if self.approximate else ""}

    @property
    def context_window(self) -> int | None:
        return int(self._model_config.max_model_len)

    def _piece(self, token_id: int) -> str:
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self.tokenizer.decode([token_id])
        return piece

    def encode(self, prompt: Prompt, *, thinking: bool = False) -> list[int]:
        """Token ids of a prompt, as the ``hf`` backend makes them: chat messages through
        the chat template with the generation prompt (``thinking``: its thinking mode on,
        as a reasoning run renders it), text as is."""
        return encode_prompt(self.tokenizer, prompt, thinking=thinking)

    def generate(self, prompts: list[Prompt], spec: GenerationSpec,
                 seeds: list[int]) -> list[GenerationResult]:
        from vllm import SamplingParams

        if spec.hidden_layers:
            raise InvalidInputError("the vllm backend gives no hidden states; use the hf "
                                    "backend to store them", field="hidden_layers")
        logprobs = max(STATS_LOGPROBS, spec.top_k_alternatives)
        plan = request_plan(spec, seeds, len(prompts), logprobs)
        rendered = rendered_prompts(self.tokenizer, prompts, spec.reasoning_tags)
        encoded = [{"prompt_token_ids": ids} for ids, _ in rendered]
        outputs = self.llm.generate([encoded[i] for i, _ in plan],
                                    [SamplingParams(**kw) for _, kw in plan], use_tqdm=False)
        return assemble(plan, outputs, lambda out: to_generation(
            out, self._text, spec, stats_k=logprobs, vocab_size=self.vocab_size,
            approximate=self.approximate), len(prompts),
            opened=[opened for _, opened in rendered])


def rendered_prompts(tokenizer: Any, prompts: Sequence[Prompt],
                     tags: tuple[str, str] | None) -> list[tuple[list[int], bool]]:
    """Each prompt's token ids as the run renders it, and whether they open a trace.

    ``tags``: the run's reasoning tags (``spec.reasoning_tags``); set, chat messages go
    through the chat template's thinking mode (:func:`~confide.backends.base.encode_prompt`
    with ``thinking``, as ``hf`` renders them and as its passes over the reply read them
    again), and a prompt whose ids end with the opening tag
    (:func:`~confide.backends.base.opens_trace`) opens the trace; None: rendered as
    always, and nothing is opened.
    """
    out = []
    for prompt in prompts:
        ids = encode_prompt(tokenizer, prompt, thinking=tags is not None)
        out.append((ids, tags is not None and opens_trace(tokenizer, ids, tags)))
    return out


def assemble(plan: Sequence[tuple[int, dict[str, Any]]], outputs: Iterable[Any],
             convert: Callable[[Any], Generation], n_prompts: int, *,
             opened: Sequence[bool] = ()) -> list[GenerationResult]:
    """One result per prompt from vLLM's request outputs (in request order): the greedy
    request's answer and the sampled ones, in seed order. ``opened[i]``: prompt ``i``
    ended with the reasoning opening tag, so each of its replies is marked
    ``trace_opened`` (:func:`rendered_prompts`); empty: none did."""
    results = [GenerationResult(greedy=None) for _ in range(n_prompts)]
    for (i, kw), request in zip(plan, outputs, strict=True):
        gen = convert(request.outputs[0])
        if opened and opened[i]:
            gen.trace_opened = True
        if "seed" in kw:
            results[i].samples.append(gen)
        else:
            results[i].greedy = gen
    return results
