"""The ``hf`` backend: transformers models on CPU or GPU, with token statistics
computed from the logits while generating.

We run our own decoding loop over the model's KV cache instead of
``model.generate``, for four reasons:

- each step's logits are reduced at once to the statistics scorers need
  (chosen-token log-probability, entropy, KL, Rényi and Fisher–Rao divergences
  from uniform, top-k alternatives)
  and then dropped, so memory stays flat even for 262k-token vocabularies and
  no second forward pass over the answer is ever needed;
- those logits come from a float32 output projection whatever the model's
  dtype, so a bfloat16 model's statistics are not rounded to bfloat16's 8-bit
  mantissa (which moved log-probabilities by up to 0.06 nats);
- a question's prompt is encoded once and its key/value cache shared by the
  greedy row and the k sampled rows; a row that finished leaves the batch at
  once and a waiting row takes its place (continuous batching: caches of
  different widths are left-padded and stacked), so a batch never runs at
  the speed of its longest answer;
- each sampled row has its own random generator, seeded from (run seed, item
  id), so an item's samples never depend on its batch neighbours.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import platform
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from confide.backends.base import (GenerationResult, GenerationSpec, Prompt, TokenCallback,
                                   TokenEvent, encode_prompt)
from confide.backends.models import DEFAULT_MODEL, cache_dir, resolve_model
from confide.errors import InvalidInputError, ModelLoadError
from confide.records import DIVERGENCE_TEMPERATURE, RENYI_ALPHA, Generation

__all__ = ["HFBackend", "choose_dtype"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# A lower-precision dtype must be this much faster than float32 to be chosen on a CPU.
_SPEEDUP_NEEDED = 1.2
# Doubling the rows of a decoding step must raise tokens/s by this much to be worth it.
_ROWS_GAIN_NEEDED = 1.15
#: Prompts of one prefill that open with at least this many equal tokens encode them once.
MIN_SHARED_PREFIX = 16
_MAX_ROWS = 512
# Candidates a nucleus draw looks at before sorting the whole vocabulary (_nucleus_draw).
_NUCLEUS_FIRST = 256


def choose_dtype(device: str) -> torch.dtype | None:
    """The dtype forced by ``CONFIDE_DTYPE``, else the default for ``device``.

    On a GPU: bfloat16 (float16 where bfloat16 is unsupported). On a CPU: None,
    meaning "time float32 against bfloat16 on this machine and keep the faster"
    (:meth:`HFBackend._pick_cpu_dtype`). Token statistics are float32 in every
    dtype; the README's performance notes give the measured cost of bfloat16
    in statistics and AUROC.
    """
    forced = os.environ.get("CONFIDE_DTYPE")
    if forced:
        if forced not in DTYPES:
            raise InvalidInputError(f"CONFIDE_DTYPE={forced!r}: use one of {', '.join(DTYPES)}",
                                    field="CONFIDE_DTYPE")
        return DTYPES[forced]
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return None


def _tuning_file() -> Path:
    return cache_dir() / "tuning.json"


def _remembered(key: str, measure: Any) -> Any:
    """A measured setting, measured once per machine and key and then read back.

    Measuring again in every process would let timing noise change batch
    composition (and with it the last bits of the statistics) between a run
    and its resume; a stored measurement keeps them identical.
    """
    path = _tuning_file()
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    value = measure()
    known[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuning-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(known, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a new measurement next time
    return value


def _device_memory(device: str) -> int:
    """Total memory of the device in bytes (RAM for the CPU)."""
    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _hardware_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class _Row:
    """One sequence being decoded: a question, greedy or sampled, and what it produced."""

    question: int                      # index into the prompts of this generate call
    generator: torch.Generator | None  # None = greedy
    ids: list[int] = field(default_factory=list)
    done: bool = False
    finish: str = "length"
    slot: int = -1                     # its place in the statistics buffers while decoding


@dataclass
class _Batch:
    """The rows decoding together: their shared key/value cache and where each stands."""

    rows: list[int] = field(default_factory=list)  # indices into the call's rows
    cache: Any = None
    mask: torch.Tensor | None = None       # (rows, cache width): 1 on real tokens
    positions: torch.Tensor | None = None  # (rows, 1): position of each row's last token
    tokens: torch.Tensor | None = None     # (rows,): each row's last chosen token

    def select(self, keep: list[int], device: str) -> None:
        """Keep only the rows at ``keep`` (positions in the batch)."""
        self.rows = [self.rows[b] for b in keep]
        if not keep:
            self.cache = self.mask = self.positions = self.tokens = None
            return
        index = torch.tensor(keep, device=device)
        _select_rows(self.cache, index)
        self.mask, self.positions = self.mask[index], self.positions[index]
        self.tokens = self.tokens[index]


@dataclass
class _Prefill:
    """Prompts encoded in one pass, whose cache the rows of their questions copy."""

    cache: Any
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (questions, heads, width, dim)
    mask: torch.Tensor                           # (questions, width)
    positions: torch.Tensor                      # (questions, 1): each prompt's last position
    logits: torch.Tensor                         # (questions, vocab): float32, next token
    hidden: torch.Tensor | None                  # (questions, chosen layers, hidden size)
    index: dict[int, int]                        # question → its row here


class _Buffers:
    """Statistics of the decoding rows, one slot per row; a finished row frees its slot."""

    def __init__(self, slots: int, steps: int, k: int, hidden: tuple[int, int] | None,
                 device: str) -> None:
        self.stats = torch.zeros((slots, steps, 5), device=device)
        self.top_lp = torch.zeros((slots, steps, k), device=device)
        self.top_ids = torch.zeros((slots, steps, k), dtype=torch.long, device=device)
        self.hidden = (torch.zeros((slots, steps, *hidden), device=device)
                       if hidden else None)
        self._free = list(range(slots - 1, -1, -1))

    def claim(self) -> int:
        return self._free.pop()

    def record(self, slots: torch.Tensor, steps: torch.Tensor, stats: torch.Tensor,
               top_lp: torch.Tensor | None, top_ids: torch.Tensor | None,
               hidden: torch.Tensor | None) -> None:
        """Write one step of each row at (its slot, its step)."""
        self.stats[slots, steps] = stats
        if top_lp is not None:
            self.top_lp[slots, steps], self.top_ids[slots, steps] = top_lp, top_ids
        if self.hidden is not None and hidden is not None:
            self.hidden[slots, steps] = hidden

    def release(self, slot: int, n: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The first ``n`` steps of ``slot`` (copied out), and the slot freed."""
        got = (self.stats[slot, :n].cpu().numpy().copy(),
               self.top_lp[slot, :n].cpu().numpy().copy(),
               self.top_ids[slot, :n].cpu().numpy().copy(),
               None if self.hidden is None else self.hidden[slot, :n].cpu().numpy().copy())
        self._free.append(slot)
        return got


class HFBackend:
    """A transformers causal LM as a confide backend.

    Parameters
    ----------
    model : bundled alias, ``.gguf`` path, transformers directory or hub id.
    device : ``"cpu"``, ``"cuda"``, ... (default: cuda if available).
    batch_size : questions per prefill; each brings its greedy row and its k
        sampled rows, which share the question's key/value cache.
    max_rows : most rows (sequences) in one decoding step. Default: measured on
        this machine for the prompt length (the fewest rows past which doubling
        gains under 15% tokens/s), capped so the key/value cache and the
        per-step logits fit in a quarter of the device's memory.
    dtype : override the choice (``"float32"``, ``"bfloat16"``); default: the
        ``CONFIDE_DTYPE`` environment variable, else bfloat16 on a GPU and on a
        CPU whichever of float32 and bfloat16 was measured faster here.
    """

    name = "hf"
    capabilities = frozenset({"token_logprobs", "token_entropies", "token_kl_uniform",
                              "token_renyi_uniform", "token_fisher_rao_uniform",
                              "top_logprobs", "samples", "hidden_states", "extra_prompt",
                              "unconditioned_logprobs", "attentions"})
    streaming = True  # generate(..., on_token=) reports each token (confide.streaming)

    def __init__(self, model: str = DEFAULT_MODEL, *, device: str | None = None,
                 batch_size: int = 8, max_rows: int | None = None,
                 dtype: str | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        if batch_size < 1 or (max_rows is not None and max_rows < 1):
            raise InvalidInputError("batch_size and max_rows must be at least 1",
                                    field="batch_size")
        if dtype is not None and dtype not in DTYPES:
            raise InvalidInputError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}",
                                    field="dtype")
        hf_logging.disable_progress_bar()  # our own progress bar is the one users read
        self.source = resolve_model(model)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        wanted = DTYPES[dtype] if dtype else choose_dtype(self.device)
        self.batch_size = batch_size
        self.max_rows = max_rows
        started = time.perf_counter()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.source.path)
            # Loaded in float32 so the output projection keeps float32 weights
            # whatever dtype the rest of the model then runs in.
            self.model = AutoModelForCausalLM.from_pretrained(self.source.path,
                                                              dtype=torch.float32)
        except OSError as exc:
            raise ModelLoadError(f"{model}: cannot load model: {exc}") from exc
        self.model.eval()
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self._eos_ids = self._end_token_ids()
        self._pad_id = (self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                        else next(iter(self._eos_ids)))
        self._piece_cache: dict[int, str] = {}
        self._prefix: tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None \
            = None  # the last shared prompt prefix and its key/value cache (_prefix_cache)
        self._decoder = self.model.get_decoder()
        # transformers renamed `past_key_values` to `cache`; pass whichever this version takes.
        params = inspect.signature(self._decoder.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        head32 = self.model.get_output_embeddings().weight.detach().clone()
        self.model.to(self.device)
        self.dtype = wanted or self._timed_cpu_dtype()
        self.model.to(self.dtype)
        self._set_float32_head(head32)
        del head32
        self.load_seconds = time.perf_counter() - started

    def _end_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        return ids

    def config(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.source.name, "kind": self.source.kind,
                "dtype": str(self.dtype).removeprefix("torch."),
                "chat_template": self.has_chat_template}

    # -- measured settings ---------------------------------------------------------

    def _tuning_key(self, what: str) -> str:
        return "|".join([what, self.source.path, self.device, _hardware_name(self.device),
                         torch.__version__, str(torch.get_num_threads())])

    def _timed_cpu_dtype(self) -> torch.dtype:
        """float32 or bfloat16, whichever decodes faster on this machine.

        Timed on a decoding step of 8 rows over a 64-token context; bfloat16
        must win by 20% (it costs fidelity; see the README's performance notes).
        """
        def measure() -> str:
            fp32 = self._time_step(self.model, rows=8, context=64)
            low = copy.deepcopy(self.model).to(torch.bfloat16)
            bf16 = self._time_step(low, rows=8, context=64)
            del low
            return "bfloat16" if fp32 > _SPEEDUP_NEEDED * bf16 else "float32"

        return DTYPES[_remembered(self._tuning_key("dtype"), measure)]

    @torch.inference_mode()
    def _time_step(self, model: Any, rows: int, context: int, steps: int = 2) -> float:
        """Seconds per decoding step (forward pass + float32 statistics) at ``rows`` rows."""
        decoder = model.get_decoder()
        head = model.get_output_embeddings().weight.float()
        ids = torch.full((1, context), self._pad_id, dtype=torch.long, device=self.device)
        cache = _cache_of(decoder(input_ids=ids, use_cache=True))
        _select_rows(cache, torch.zeros(rows, dtype=torch.long, device=self.device))
        token = torch.full((rows, 1), self._pad_id, dtype=torch.long, device=self.device)
        timings = []
        for step in range(steps + 1):
            began = time.perf_counter()
            out = decoder(input_ids=token, use_cache=True, **{self._cache_kwarg: cache})
            cache = _cache_of(out)
            logits = torch.nn.functional.linear(out.last_hidden_state[:, -1].float(), head)
            torch.log_softmax(logits, dim=-1).exp().sum()
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()
            if step:  # the first step warms up
                timings.append(time.perf_counter() - began)
        return float(np.median(timings))

    def rows_per_step(self, context: int, wanted: int) -> int:
        """Rows per decoding step when ``wanted`` rows of up to ``context`` tokens wait.

        ``max_rows`` if given; otherwise measured once per machine, context
        bucket (next power of two) and wanted-rows bucket: starting at 8 rows,
        the row count doubles while that raises tokens/s by 15% or more, up to
        the wanted rows and what fits in memory (:meth:`rows_that_fit`).
        """
        if self.max_rows is not None:
            return self.max_rows
        bucket = 1 << max(6, math.ceil(math.log2(max(context, 1))))
        cap = self.rows_that_fit(bucket)
        bound = min(cap, 1 << max(3, math.ceil(math.log2(max(wanted, 1)))))

        def measure() -> int:
            rows, best = min(8, bound), 0.0
            candidate = rows
            while candidate <= bound:
                rate = candidate / self._time_step(self.model, candidate, bucket)
                if rate < _ROWS_GAIN_NEEDED * best:
                    break
                rows, best = candidate, rate
                candidate *= 2
            return rows

        dtype = str(self.dtype).removeprefix("torch.")
        return int(_remembered(self._tuning_key(f"rows:{bucket}:{bound}:{dtype}"), measure))

    def rows_that_fit(self, context: int) -> int:
        """Rows whose key/value cache and per-step float32 temporaries fit in a
        quarter of the device's memory (beside the weights)."""
        cfg = self.model.config
        cfg = getattr(cfg, "text_config", cfg)
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        element = torch.finfo(self.dtype).bits // 8
        kv_per_row = 2 * cfg.num_hidden_layers * heads * head_dim * element * context
        logits_per_row = 6 * 4 * cfg.vocab_size  # logits, log p, p, sorted p, cumsum, order
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        budget = _device_memory(self.device) // 4 - weights
        return int(min(_MAX_ROWS, max(1, budget // (kv_per_row + logits_per_row))))

    # -- float32 logits --------------------------------------------------------------

    def _set_float32_head(self, weight: torch.Tensor) -> None:
        """Keep the float32 output projection beside a model that may run in another dtype."""
        head = self.model.get_output_embeddings()
        self._head_weight = (head.weight.detach() if self.dtype == torch.float32
                             else weight.to(self.device))
        bias = getattr(head, "bias", None)
        self._head_bias = None if bias is None else bias.detach().float()
        cfg = self.model.config
        self._softcap = getattr(getattr(cfg, "text_config", cfg), "final_logit_softcapping", None)

    def float32_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits from final hidden states, projected in float32.

        The model's own head would round a bfloat16 model's logits to 8 bits of
        mantissa (a step of 0.125 at a logit of 20); projecting the hidden
        state in float32 keeps the statistics as exact as the hidden state.
        """
        logits = torch.nn.functional.linear(hidden.float(), self._head_weight, self._head_bias)
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        return logits

    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: Any, want_hidden: bool) -> tuple[torch.Tensor, Any, Any]:
        """One pass of the decoder: float32 logits of the last position, cache, hidden states."""
        out = self._decoder(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                            use_cache=True, output_hidden_states=want_hidden,
                            **{self._cache_kwarg: cache})
        return self.float32_logits(out.last_hidden_state[:, -1, :]), _cache_of(out), \
            out.hidden_states

    def _left_padded(self, prompts: list[list[int]]
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, ids in enumerate(prompts):  # left padding keeps every row's last token aligned
            input_ids[b, width - len(ids):] = torch.tensor(ids)
            mask[b, width - len(ids):] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        return input_ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)

    @property
    def n_layers(self) -> int:
        """Transformer blocks: hidden-state layers are 0 (embeddings) .. n_layers."""
        return int(self.model.config.num_hidden_layers)

    @property
    def context_window(self) -> int | None:
        """Most tokens (prompt + answer) the model was trained to attend over, if stated."""
        window = getattr(self.model.config, "max_position_embeddings", None)
        return int(window) if window else None

    # -- prompts ---------------------------------------------------------------

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt: chat messages through the chat template, text as is."""
        return encode_prompt(self.tokenizer, prompt)

    # -- next-token scoring ------------------------------------------------------

    def candidate_token_id(self, text: str) -> int:
        """The id of ``text`` as one token (no special tokens added).

        Raises :class:`~confide.errors.InvalidInputError` when ``text`` is not
        exactly one token of this tokenizer.
        """
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(ids) != 1:
            raise InvalidInputError(f"{text!r} is {len(ids)} tokens for {self.source.name}, "
                                    "not one", field="candidates")
        return int(ids[0])

    @torch.inference_mode()
    def next_token_logprobs(self, prompts: list[Prompt], candidates: list[str]) -> np.ndarray:
        r"""Log-probabilities of single-token ``candidates`` as the next token after each prompt.

        .. math:: L_{ij} = \log p(v_j \mid x_i) = z_{i,v_j} - \log\sum_v e^{z_{i,v}}

        One forward pass over the (left-padded) prompts per batch of
        ``batch_size``; nothing is generated; logits are projected in float32.
        Chat prompts go through the chat template with the generation prompt,
        so the next token is the first token of the assistant's reply.

        Returns an array of shape ``(len(prompts), len(candidates))``.
        """
        ids = [self.candidate_token_id(c) for c in candidates]
        index = torch.tensor(ids, dtype=torch.long, device=self.device)
        encoded = [self.encode(p) for p in prompts]
        out = np.zeros((len(prompts), len(ids)), dtype=np.float64)
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start:start + self.batch_size]
            input_ids, mask, positions = self._left_padded(chunk)
            hidden = self._decoder(input_ids=input_ids, attention_mask=mask,
                                   position_ids=positions, use_cache=False).last_hidden_state
            logp = torch.log_softmax(self.float32_logits(hidden[:, -1, :]), dim=-1)[:, index]
            out[start:start + len(chunk)] = logp.cpu().numpy()
        return out

    # -- the answer scored again -----------------------------------------------

    def neutral_prompt(self) -> list[int]:
        """Token ids of a prompt without a question, for scoring an answer unconditioned.

        A chat model: its chat template around one empty user message (with
        the generation prompt and any default system message of the
        template), so the answer still sits in the assistant's turn. A plain
        model: its beginning-of-sequence token, or the end-of-sequence token
        (the document separator) for a tokenizer without one.
        """
        if self.has_chat_template:
            return self.encode([{"role": "user", "content": ""}])
        ids = self.encode("")
        if ids:
            return ids
        start = self.tokenizer.bos_token_id
        return [int(start) if start is not None else next(iter(sorted(self._eos_ids)))]

    @torch.inference_mode()
    def unconditioned_logprobs(self, answers: list[list[int]]) -> list[np.ndarray]:
        r"""Log-probability of each answer token without the question.

        .. math:: u_t = \log p(y_t \mid n, y_{<t})

        :math:`n` is :meth:`neutral_prompt`. One teacher-forced forward pass
        per batch of ``batch_size`` answers (left-padded), float32 logits, no
        cache kept. Returns one float64 array of length ``len(answer)`` per
        answer, in order.
        """
        neutral = self.neutral_prompt()
        out: list[np.ndarray] = []
        for start in range(0, len(answers), self.batch_size):
            chunk = [list(a) for a in answers[start:start + self.batch_size]]
            input_ids, mask, positions = self._left_padded([neutral + a for a in chunk])
            hidden = self._decoder(input_ids=input_ids, attention_mask=mask,
                                   position_ids=positions, use_cache=False).last_hidden_state
            width = input_ids.shape[1]
            for b, answer in enumerate(chunk):
                n = len(answer)
                logp = torch.log_softmax(self.float32_logits(hidden[b, width - n - 1:width - 1]),
                                         dim=-1)
                index = torch.tensor(answer, dtype=torch.long, device=self.device)[:, None]
                out.append(logp.gather(-1, index).squeeze(-1).double().cpu().numpy())
        return out

    @torch.inference_mode()
    def attention_diagonals(self, prompts: list[Prompt], answers: list[list[int]]
                            ) -> list[tuple[int, np.ndarray]]:
        r"""Each position's attention to itself, per layer and head, over prompt + answer.

        .. math:: d_{l,h,i} = A^{(l,h)}_{i,i}, \qquad
                  A^{(l,h)} = \mathrm{softmax}\big(Q K^\top/\sqrt{d} + M\big)

        from one teacher-forced forward pass over the prompt's tokens
        followed by the answer's. Returns, per (prompt, answer), the prompt's
        length :math:`p` and a float32 array of shape (layers, heads,
        :math:`p + T`). In the decoding loop the step that chose answer token
        :math:`y_j` ran its query at position :math:`p + j - 1` (the token
        :math:`y_{j-1}`), so :math:`d_{l,h,p+j-1}` is the weight that step gave
        the token just generated.

        Attention weights need the eager attention kernel: the model is
        switched to it for this pass alone and back afterwards, so the
        decoding loop keeps its faster kernel; a ``generate`` running at the
        same time in another thread would decode those steps with the eager
        kernel (the same numbers to rounding). One sequence per pass: all
        layers' :math:`(p+T)^2` weights are held at once.
        """
        previous = self.model.config._attn_implementation
        out: list[tuple[int, np.ndarray]] = []
        self.model.set_attn_implementation("eager")
        try:
            for prompt, answer in zip(prompts, answers, strict=True):
                prompt_ids = self.encode(prompt)
                ids = torch.tensor([prompt_ids + list(answer)], device=self.device)
                attentions = self._decoder(input_ids=ids, use_cache=False,
                                           output_attentions=True).attentions
                diagonal = torch.stack([a[0].diagonal(dim1=-2, dim2=-1) for a in attentions])
                out.append((len(prompt_ids), diagonal.float().cpu().numpy()))
        finally:
            self.model.set_attn_implementation(previous)
        return out

    # -- generation ------------------------------------------------------------

    def generate(self, prompts: list[Prompt], spec: GenerationSpec, seeds: list[int], *,
                 on_token: TokenCallback | None = None) -> list[GenerationResult]:
        encoded = [self.encode(p) for p in prompts]
        results = [GenerationResult(greedy=None) for _ in prompts]
        rows = self._rows(len(encoded), spec, seeds)
        step_hook = None if on_token is None else self._step_hook(rows, on_token)
        for row, gen in zip(rows, self._decode(rows, encoded, spec, step_hook), strict=True):
            if row.generator is None:
                results[row.question].greedy = gen
            else:
                results[row.question].samples.append(gen)
        return results

    @staticmethod
    def _rows(n_questions: int, spec: GenerationSpec, seeds: list[int]) -> list[_Row]:
        """Each question's greedy row, then its samples; sample j of question i draws
        from seed ``seeds[i] + j``."""
        rows = []
        for i in range(n_questions):
            if spec.greedy:
                rows.append(_Row(i, None))
            rows += [_Row(i, torch.Generator(device="cpu").manual_seed((seeds[i] + j) % 2**63))
                     for j in range(spec.n_samples)]
        return rows

    # -- streaming hook (confide.streaming): one call per token; a reason ends the row ------

    def _step_hook(self, rows: list[_Row], on_token: TokenCallback) -> Any:
        """Adapt ``on_token`` to the decoding loop: number each question's samples in
        row order and report tokens as :class:`TokenEvent`."""
        sample_of: dict[int, int | None] = {}
        count: Counter[int] = Counter()
        for row in rows:
            if row.generator is None:
                sample_of[id(row)] = None
                continue
            sample_of[id(row)] = count[row.question]
            count[row.question] += 1

        def hook(row: _Row, stats: list[float], top: tuple[list[float], list[int]] | None
                 ) -> str | None:
            token = row.ids[-1]
            alternatives = () if top is None else tuple(
                (self._piece(t), v) for v, t in zip(*top, strict=True))
            return on_token(TokenEvent(
                row.question, sample_of[id(row)],
                self.tokenizer.decode(row.ids, skip_special_tokens=True), self._piece(token),
                stats[0], stats[1], alternatives))

        return hook

    # -- scheduling: which rows decode together ------------------------------------

    @torch.inference_mode()
    def _decode(self, rows: list[_Row], encoded: list[list[int]], spec: GenerationSpec,
                on_step: Any = None) -> list[Generation]:
        """Decode ``rows``, at most :meth:`rows_per_step` in a step; one generation per row.

        Continuous batching: rows enter in their order as places free up. A
        question's prompt is prefilled once (``batch_size`` questions per pass,
        ahead of need) and its key/value cache copied to each of its rows as it
        enters; a finished row leaves at once and a waiting row takes its place,
        so a step is never held by the longest answer. The schedule depends only
        on the prompts, the spec and the row limit, never on timing.
        """
        if not rows:
            return []
        n_questions = len({r.question for r in rows})
        context = max(len(encoded[r.question]) for r in rows) + spec.max_new_tokens
        limit = self.rows_per_step(context, min(n_questions, self.batch_size)
                                   * math.ceil(len(rows) / n_questions))
        paddable = self._paddable(context + spec.max_new_tokens)
        want_hidden = bool(spec.hidden_layers)
        out = _Buffers(limit, spec.max_new_tokens, spec.top_k_alternatives,
                       (len(spec.hidden_layers), self.model.config.hidden_size)
                       if want_hidden else None, self.device)
        waiting = deque(range(len(rows)))
        batch = _Batch()
        prefills: dict[int, _Prefill] = {}  # question → the pass holding its prompt cache
        pending = Counter(r.question for r in rows)  # rows of each question not yet entered
        results: list[Generation | None] = [None] * len(rows)
        while waiting or batch.rows:
            logits = hidden = None
            if batch.rows:
                logits, batch.cache, layers = self._forward(
                    batch.tokens[:, None], batch.mask, batch.positions, batch.cache, want_hidden)
                hidden = _chosen_layers(layers, spec.hidden_layers)
            if waiting and len(batch.rows) < limit and (paddable or not batch.rows):
                logits, hidden = self._admit(batch, logits, hidden, waiting, rows, encoded,
                                             prefills, pending, limit, paddable, spec, out)
            chosen = self._choose(logits, [rows[i].generator for i in batch.rows], spec)
            slots = torch.tensor([rows[i].slot for i in batch.rows], device=self.device)
            steps = torch.tensor([len(rows[i].ids) for i in batch.rows], device=self.device)
            step_stats, top_values, top_ids = self._step_statistics(logits, chosen, spec)
            out.record(slots, steps, step_stats, top_values, top_ids, hidden)
            if on_step is not None:  # streaming hook: this step's statistics, on the CPU
                hook_stats = step_stats.tolist()
                hook_top = (top_values.tolist(), top_ids.tolist()) if top_values is not None \
                    else None
            keep = []
            for b, (i, token) in enumerate(zip(batch.rows, chosen.tolist(), strict=True)):
                row = rows[i]
                row.ids.append(token)
                if token in self._eos_ids or (spec.stop and self._hit_stop(row.ids, spec.stop)):
                    row.done, row.finish = True, "stop"
                elif on_step is not None and (reason := on_step(
                        row, hook_stats[b],
                        None if hook_top is None else (hook_top[0][b], hook_top[1][b]))):
                    row.done, row.finish = True, reason  # the hook ended this row
                elif len(row.ids) < spec.max_new_tokens:
                    keep.append(b)
                    continue
                results[i] = self._finish(row, spec, *out.release(row.slot, len(row.ids)))
            batch.tokens = chosen
            if len(keep) < len(batch.rows):  # finished rows leave the batch
                batch.select(keep, self.device)
            if batch.rows:
                batch.mask = torch.cat([batch.mask, batch.mask.new_ones((len(batch.rows), 1))],
                                       dim=-1)
                batch.positions = batch.positions + 1
        return [g for g in results if g is not None]

    def _admit(self, batch: _Batch, logits: torch.Tensor | None, hidden: torch.Tensor | None,
               waiting: deque[int], rows: list[_Row], encoded: list[list[int]],
               prefills: dict[int, _Prefill], pending: Counter[int], limit: int,
               paddable: bool, spec: GenerationSpec, out: _Buffers
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Move waiting rows into the batch while places are free.

        Returns the logits (and chosen hidden layers) of every row in the batch:
        those of the rows already there, then the prompt's last position for
        each row that entered. Where caches of different widths cannot be
        padded together (:meth:`_paddable`), rows enter only an empty batch.
        """
        enter: list[int] = []
        while waiting and len(batch.rows) + len(enter) < limit:
            q = rows[waiting[0]].question
            if not paddable and q not in {rows[i].question for i in enter} \
                    and len({rows[i].question for i in enter}) == self.batch_size:
                break  # one prefill, no padding: at most batch_size questions
            enter.append(waiting.popleft())
        if not paddable:  # prefill the entering rows' questions now and take that cache
            prefills.clear()
        needed = [q for q in dict.fromkeys(rows[i].question for i in enter) if q not in prefills]
        if needed:
            ahead = list(needed)
            if paddable:  # prefill the next questions too, batch_size per pass
                for i in waiting:
                    if len(ahead) >= self.batch_size:
                        break
                    q = rows[i].question
                    if q not in prefills and q not in ahead:
                        ahead.append(q)
            for start in range(0, len(ahead), self.batch_size):
                chunk = ahead[start:start + self.batch_size]
                made = self._prefill(chunk, encoded, spec.hidden_layers, paddable)
                prefills.update(dict.fromkeys(chunk, made))
        groups: dict[int, list[int]] = {}  # prefill (by id) → rows entering from it
        for i in enter:
            rows[i].slot = out.claim()
            groups.setdefault(id(prefills[rows[i].question]), []).append(i)
        parts = []
        for members in groups.values():
            made = prefills[rows[members[0]].question]
            index = torch.tensor([made.index[rows[i].question] for i in members],
                                 device=self.device)
            parts.append((made, index))
        for i in enter:
            pending[rows[i].question] -= 1
            if not pending[rows[i].question]:
                del prefills[rows[i].question]  # no row needs this prompt's cache again
        new_logits = torch.cat([made.logits[index] for made, index in parts])
        new_hidden = (torch.cat([made.hidden[index] for made, index in parts])
                      if spec.hidden_layers else None)
        if not paddable:
            (made, index), = parts
            batch.cache, batch.mask = made.cache, made.mask[index]
            batch.positions = made.positions[index]
            if not torch.equal(index, torch.arange(made.mask.shape[0], device=self.device)):
                _select_rows(batch.cache, index)
        else:
            sources = [(_kv(batch.cache), batch.mask, None)] if batch.rows else []
            sources += [(made.kv, made.mask, index) for made, index in parts]
            batch.cache, batch.mask = self._merged(sources)
            batch.positions = torch.cat(([batch.positions] if batch.rows else [])
                                        + [made.positions[index] for made, index in parts])
        batch.rows += enter
        if logits is None:
            return new_logits, new_hidden
        return (torch.cat([logits, new_logits]),
                None if hidden is None else torch.cat([hidden, new_hidden]))

    def _prefill(self, questions: list[int], encoded: list[list[int]],
                 hidden_layers: tuple[int, ...], paddable: bool) -> _Prefill:
        """One forward pass over the (left-padded) prompts of ``questions``.

        Where the prompts open with the same :data:`MIN_SHARED_PREFIX` or more
        tokens (few-shot exemplars, a system prompt) and caches can be padded,
        that common prefix is encoded once for them all (:meth:`_prefix_cache`)
        and only each prompt's remainder is run. The prefix depends only on
        these prompts, so a block's numbers do not depend on what ran before.
        """
        prompts = [encoded[q] for q in questions]
        shared = _common_prefix(prompts) if paddable and len(prompts) > 1 else 0
        if shared < MIN_SHARED_PREFIX:
            input_ids, mask, positions = self._left_padded(prompts)
            logits, cache, layers = self._forward(input_ids, mask, positions, None,
                                                  bool(hidden_layers))
            kv = _kv(cache)
        else:
            suffix_ids, suffix_mask, positions = self._left_padded([p[shared:] for p in prompts])
            prefix = self._prefix_cache(tuple(prompts[0][:shared]))
            mask = torch.cat([suffix_mask.new_ones((len(prompts), shared)), suffix_mask], -1)
            cache = _cache_from(
                [(k.expand(len(prompts), -1, -1, -1), v.expand(len(prompts), -1, -1, -1))
                 for k, v in prefix], self.model.config)
            logits, cache, layers = self._forward(suffix_ids, mask, positions + shared, cache,
                                                  bool(hidden_layers))
            # the suffixes' padding sits between prefix and suffix: move it to the left
            # end so every row's tokens are contiguous at the right, as _merged expects
            order = torch.argsort(mask, dim=-1, stable=True)
            kv = [(_columns(k, order), _columns(v, order)) for k, v in _kv(cache)]
            mask = mask.gather(-1, order)
            cache = _cache_from(kv, self.model.config)
            kv = _kv(cache)
        return _Prefill(cache, kv, mask, mask.sum(-1, keepdim=True) - 1, logits,
                        _chosen_layers(layers, hidden_layers),
                        {q: n for n, q in enumerate(questions)})

    def _prefix_cache(self, prefix: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values) of ``prefix`` alone; the last one is kept, since a
        run's blocks share their few-shot exemplars or system prompt."""

        if self._prefix is None or self._prefix[0] != prefix:
            ids = torch.tensor([prefix], device=self.device)
            _, cache, _ = self._forward(ids, torch.ones_like(ids),
                                        torch.arange(len(prefix), device=self.device)[None],
                                        None, False)
            self._prefix = (prefix, _kv(cache))
        return self._prefix[1]

    def _paddable(self, width: int) -> bool:
        """Whether caches of this model up to ``width`` tokens can be left-padded and
        stacked: every layer a plain dynamic one, or a sliding-window one whose
        window ``width`` never fills (it would have dropped tokens)."""
        from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

        try:
            layers = DynamicCache(config=self.model.config).layers
        except (TypeError, ValueError, KeyError):
            return False
        return bool(layers) and all(
            type(layer) is DynamicLayer
            or (type(layer) is DynamicSlidingWindowLayer and width < layer.sliding_window - 1)
            for layer in layers)

    def _merged(self, sources: list[tuple[list[tuple[torch.Tensor, torch.Tensor]],
                                          torch.Tensor, torch.Tensor | None]]
                ) -> tuple[Any, torch.Tensor]:
        """One cache (and attention mask) stacking the rows of ``sources``.

        Each source is (per-layer keys and values, mask, rows to take or None
        for all). A row's tokens sit at the right end of its cache, so each is
        left-padded (masked) to the longest row's length; columns that are
        padding in every row are cut, so the cache never grows past the
        longest row however long the batch runs.
        """
        width = int(max(int(m.sum(-1).max()) for _, m, _ in sources))

        def fit(t: torch.Tensor, index: torch.Tensor | None, dim: int) -> torch.Tensor:
            """Rows ``index`` of ``t``, cut or left-padded with zeros to ``width`` along ``dim``."""
            t = t if index is None else t[index]
            have = t.shape[dim]
            if have >= width:
                return t.narrow(dim, have - width, width)
            pad = [0, 0] * (t.dim() - 1 - dim % t.dim()) + [width - have, 0]
            return torch.nn.functional.pad(t, pad)

        kv = [(torch.cat([fit(layers[j][0], index, -2) for layers, _, index in sources]),
               torch.cat([fit(layers[j][1], index, -2) for layers, _, index in sources]))
              for j in range(len(sources[0][0]))]
        mask = torch.cat([fit(m, index, -1) for _, m, index in sources])
        return _cache_from(kv, self.model.config), mask

    # -- statistics and choice of each step ------------------------------------------

    def _step_statistics(self, logits: torch.Tensor, chosen: torch.Tensor,
                         spec: GenerationSpec
                         ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Per row: (chosen log p, entropy, KL(U || p), Rényi divergence and Fisher–Rao
        distance of the tempered distribution to uniform) and the top-k
        log-probabilities and token ids, all from the float32 logits of this step."""
        logp = torch.log_softmax(logits, dim=-1)
        log_vocab = math.log(logp.shape[-1])
        stats = torch.stack(
            [logp.gather(-1, chosen[:, None]).squeeze(-1),
             torch.special.entr(logp.exp()).sum(-1),  # 0 log 0 = 0 for -inf logits
             -log_vocab - logp.mean(-1), *_divergences_from_uniform(logits, log_vocab)],
            dim=-1)
        if not spec.top_k_alternatives:
            return stats, None, None
        values, indices = logp.topk(spec.top_k_alternatives, dim=-1)
        return stats, values, indices

    def _choose(self, logits: torch.Tensor, generators: list[torch.Generator | None],
                spec: GenerationSpec) -> torch.Tensor:
        """Greedy rows take the argmax; sampled rows draw from the nucleus (top-p) with
        one uniform number from their own generator per step."""
        chosen = logits.argmax(-1)
        sampled = [b for b, g in enumerate(generators) if g is not None]
        if not sampled:
            return chosen
        probs = torch.softmax(logits[sampled] / max(spec.temperature, 1e-6), dim=-1).cpu()
        draws = torch.cat([torch.rand(1, generator=generators[b]) for b in sampled])
        chosen[sampled] = _nucleus_draw(probs, draws, spec.top_p).to(chosen.device)
        return chosen

    def _hit_stop(self, ids: list[int], stop: tuple[str, ...]) -> bool:
        tail = self.tokenizer.decode(ids[-8:], skip_special_tokens=True)
        return any(s in tail for s in stop)

    def _piece(self, token_id: int) -> str:
        piece = self._piece_cache.get(token_id)
        if piece is None:
            piece = self.tokenizer.decode([token_id])
            self._piece_cache[token_id] = piece
        return piece

    def _finish(self, row: _Row, spec: GenerationSpec, stats: np.ndarray, top_lp: np.ndarray,
                top_ids: np.ndarray, hidden: np.ndarray | None) -> Generation:
        ids = row.ids
        n = len(ids)
        if n and ids[-1] in self._eos_ids:
            n -= 1  # the end-of-sequence token is not part of the answer
        text = self.tokenizer.decode(ids[:n], skip_special_tokens=True)
        if spec.stop:
            cut = min((text.find(s) for s in spec.stop if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
                # keep the tokens that carry answer text, drop those made only of the stop
                while n and len(self.tokenizer.decode(ids[:n - 1], skip_special_tokens=True)
                                ) >= len(text):
                    n -= 1
        gen = Generation(
            text=text.strip(),
            token_ids=ids[:n],
            tokens=[self._piece(t) for t in ids[:n]],
            token_logprobs=stats[:n, 0].astype(np.float32),
            token_entropies=stats[:n, 1].astype(np.float32),
            token_kl_uniform=stats[:n, 2].astype(np.float32),
            token_renyi_uniform=stats[:n, 3].astype(np.float32),
            token_fisher_rao_uniform=stats[:n, 4].astype(np.float32),
            finish_reason=row.finish,
        )
        if spec.top_k_alternatives:
            gen.top_logprobs = top_lp[:n].astype(np.float32)
            gen.top_tokens = [[self._piece(t) for t in step] for step in top_ids[:n].tolist()]
        if hidden is not None and n:
            gen.hidden = {}
            for j, layer in enumerate(spec.hidden_layers):
                gen.hidden[f"{layer}:last"] = hidden[n - 1, j].astype(np.float16)
                gen.hidden[f"{layer}:mean"] = hidden[:n, j].mean(0).astype(np.float16)
        return gen


def _nucleus_draw(probs: torch.Tensor, draws: torch.Tensor, top_p: float) -> torch.Tensor:
    """Token ids drawn from each row's nucleus with its uniform number in ``draws``.

    The nucleus is the smallest set of most probable tokens whose mass reaches
    ``top_p`` (always the first token); the draw inverts its cumulative mass
    at ``u * mass``. Sorting the whole vocabulary for every row cost as much
    as the forward pass on a CPU, so rows whose 256 most probable tokens hold
    ``top_p`` (with a margin far above rounding) draw from those alone: their
    sorted values and running sums are exactly the first 256 of a full sort's,
    so the token drawn is the same (only the order among tokens of exactly
    equal probability may differ). The other rows sort the whole vocabulary.
    """
    first = min(_NUCLEUS_FIRST, probs.shape[-1])
    values, order = probs.topk(first, dim=-1)
    enough = values.sum(-1) >= top_p + 1e-3
    if first == probs.shape[-1]:
        enough[:] = True
    picked = torch.empty(len(probs), dtype=torch.long)
    if enough.any():
        picked[enough] = _invert(values[enough], order[enough], draws[enough], top_p)
    if not enough.all():
        rest = ~enough
        sorted_p, full_order = probs[rest].sort(dim=-1, descending=True)
        picked[rest] = _invert(sorted_p, full_order, draws[rest], top_p)
    return picked


def _invert(sorted_p: torch.Tensor, order: torch.Tensor, draws: torch.Tensor,
            top_p: float) -> torch.Tensor:
    """The draw of :func:`_nucleus_draw` from probabilities sorted in decreasing order."""
    cumulative = sorted_p.cumsum(-1)
    keep = (cumulative - sorted_p) < top_p
    cumulative = (sorted_p * keep).cumsum(-1)
    u = draws[:, None] * cumulative[:, -1:]
    pos = torch.searchsorted(cumulative, u).clamp(max=cumulative.shape[-1] - 1)
    return order.gather(-1, pos).squeeze(-1)


def _chosen_layers(layers: Any, hidden_layers: tuple[int, ...]) -> torch.Tensor | None:
    """(rows, chosen layers, hidden size) float32 states of each row's last position."""
    if not hidden_layers:
        return None
    return torch.stack([layers[j][:, -1, :] for j in hidden_layers], dim=1).float()


def _common_prefix(prompts: list[list[int]]) -> int:
    """Tokens all ``prompts`` open with, leaving each at least its last token to run."""
    shared = min(len(p) for p in prompts) - 1
    for n, column in enumerate(zip(*prompts)):
        if n >= shared or len(set(column)) > 1:
            return min(n, shared)
    return max(shared, 0)


def _columns(t: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Each row's cache columns (dim -2) of ``t`` (rows, heads, width, dim) in ``order``
    (rows, width)."""
    return t.gather(-2, order[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3]))


def _cache_from(kv: list[tuple[torch.Tensor, torch.Tensor]], config: Any) -> Any:
    from transformers.cache_utils import DynamicCache

    return DynamicCache(ddp_cache_data=kv, config=config)


def _kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) of a dynamic cache: the tensors themselves, not copies."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _divergences_from_uniform(logits: torch.Tensor, log_vocab: float
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Rényi divergence and scaled Fisher–Rao distance from uniform of each row's tempered
    next-token distribution (the ``token_renyi_uniform`` and ``token_fisher_rao_uniform``
    columns of :class:`~confide.records.Generation`).

    With :math:`q \propto e^{z/\tau}` and :math:`S = \log\sum_v q(v)^\alpha =
    \mathrm{lse}(\alpha z/\tau) - \alpha\,\mathrm{lse}(z/\tau)`:
    :math:`D_\alpha(q\|U) = \log V + S/(\alpha - 1)` and, with :math:`\alpha = 1/2`
    (then :math:`S` is the log of the Bhattacharyya sum),
    :math:`\sum_v\sqrt{q(v)/V} = e^{S - \frac12\log V}`. Log-sum-exps over
    the logits; nothing of vocabulary size is kept.
    """
    scaled = logits / DIVERGENCE_TEMPERATURE
    full = torch.logsumexp(scaled, -1)
    half = torch.logsumexp(0.5 * scaled, -1) - 0.5 * full  # log sum_v sqrt(q(v))
    s = half if RENYI_ALPHA == 0.5 else \
        torch.logsumexp(RENYI_ALPHA * scaled, -1) - RENYI_ALPHA * full
    renyi = log_vocab + s / (RENYI_ALPHA - 1.0)
    overlap = torch.exp(half - 0.5 * log_vocab).clamp(max=1.0)  # Bhattacharyya coefficient
    return renyi, torch.arccos(overlap) * (2.0 / math.pi)


def _select_rows(cache: Any, index: torch.Tensor) -> None:
    """Keep (or repeat) the cache's batch rows at ``index``, in place."""
    cache.batch_select_indices(index)


def _cache_of(output: Any) -> Any:
    """The key/value cache of a model output (``cache`` in newer transformers)."""
    return output.cache if hasattr(output, "cache") else output.past_key_values
