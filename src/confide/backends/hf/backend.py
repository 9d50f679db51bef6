"""The :class:`HFBackend` class: loading a transformers causal LM, its float32 output
projection and its tokenizer. Generation, the extra forward passes and the measured
settings are its mixins (:mod:`~confide.backends.hf.decoding`,
:mod:`~confide.backends.hf.passes`, :mod:`~confide.backends.hf.tuning`).
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from confide.backends.base import (
    Backend,
    GenerationResult,
    GenerationSpec,
    HasAttentions,
    HasContextWindow,
    HasLayers,
    NextTokenScorer,
    Prompt,
    ScoresUnconditioned,
    Streams,
    TokenCallback,
    Tokenizes,
    encode_prompt,
)
from confide.backends.hf.cache import cache_of
from confide.backends.hf.decoding import DecodingLoop
from confide.backends.hf.passes import ExtraPasses
from confide.backends.hf.tuning import DTYPES, MeasuredSettings, choose_dtype
from confide.backends.models import DEFAULT_MODEL, resolve_model
from confide.core.errors import InvalidInputError, ModelLoadError
from confide.core.needs import MEMBER_STATISTICS, TOKEN_STATISTICS, Need

if TYPE_CHECKING:
    from confide.backends.hf.ensemble import EnsembleScoring

__all__ = ["HFBackend"]


class HFBackend(MeasuredSettings, ExtraPasses, DecodingLoop, Backend, Streams, Tokenizes,
                HasLayers, HasContextWindow, NextTokenScorer, ScoresUnconditioned,
                HasAttentions):
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
    capabilities = frozenset({*TOKEN_STATISTICS, Need.SAMPLES, Need.HIDDEN_STATES,
                              Need.EXTRA_PROMPT, Need.UNCONDITIONED_LOGPROBS, Need.ATTENTIONS})
    streaming = True  # generate(..., on_token=) reports each token (confide.pipeline.streaming)
    #: attached ensemble members (:meth:`use_ensemble`): every answer scored under each
    ensemble: EnsembleScoring | None = None

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
        d = {"backend": self.name, "model": self.source.name, "kind": self.source.kind,
             "dtype": str(self.dtype).removeprefix("torch."),
             "chat_template": self.has_chat_template}
        if self.ensemble is not None:
            d["ensemble"] = self.ensemble.config()
        return d

    # -- ensemble members ------------------------------------------------------------

    def use_ensemble(self, path: str | Path | None, *, greedy: str = "base") -> None:
        """Score every answer :meth:`generate` gives under the members of ensemble
        directory ``path`` too (``Generation.members``; :mod:`~confide.backends.hf.ensemble`),
        the greedy answer the base's (``greedy="base"``) or the members' mean's
        (``"mean"``); ``None`` removes them. The same directory and greedy keep the loaded
        members; the capabilities gain ``member_logprobs`` and ``member_entropies``."""
        from confide.backends.hf.ensemble import EnsembleScoring

        current = self.ensemble
        if current is not None and path is not None and greedy == current.greedy \
                and Path(path).resolve() == current.path.resolve():
            return
        if current is not None:
            current.close()
            self.ensemble = None
            self.capabilities = type(self).capabilities
        if path is not None:
            self.ensemble = EnsembleScoring.load(self, path, greedy=greedy)
            self.capabilities = type(self).capabilities | MEMBER_STATISTICS

    def generate(self, prompts: list[Prompt], spec: GenerationSpec, seeds: list[int], *,
                 on_token: TokenCallback | None = None) -> list[GenerationResult]:
        if self.ensemble is not None:
            return self.ensemble.generate(prompts, spec, seeds, on_token=on_token)
        return DecodingLoop.generate(self, prompts, spec, seeds, on_token=on_token)

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
        return self.float32_logits(out.last_hidden_state[:, -1, :]), cache_of(out), \
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

    def encode(self, prompt: Prompt, *, thinking: bool = False) -> list[int]:
        """Token ids of a prompt: chat messages through the chat template (its thinking mode
        on with ``thinking``, where it has one: :func:`~confide.backends.base.encode_prompt`),
        text as is."""
        return encode_prompt(self.tokenizer, prompt, thinking=thinking)

    def generation_prompt(self, prompt: Prompt, *, thinking: bool = False) -> list[int]:
        """Token ids of ``prompt`` as :meth:`generate` reads it, and so every pass over a
        generation's prompt again (:mod:`~confide.backends.hf.passes`): ``thinking`` for a
        reasoning run (``spec.reasoning_tags`` set), which renders a chat template's
        thinking mode on; the one place the two are kept alike."""
        return self.encode(prompt, thinking=thinking)

    def _piece(self, token_id: int) -> str:
        piece = self._piece_cache.get(token_id)
        if piece is None:
            piece = self.tokenizer.decode([token_id])
            self._piece_cache[token_id] = piece
        return piece
