"""Settings the hf backend measures on the machine it runs on, and the file keeping them.

* The dtype: ``CONFIDE_DTYPE`` if set, bfloat16 on a GPU, and on a CPU float32
  or bfloat16, whichever decodes faster here (:func:`choose_dtype`,
  :meth:`MeasuredSettings._timed_cpu_dtype`).
* Rows per decoding step (:meth:`MeasuredSettings.rows_per_step`), capped by
  what fits in memory (:meth:`MeasuredSettings.rows_that_fit`).

Each measurement is made once per machine and key and kept in ``tuning.json``
in the user cache directory (:func:`_remembered`), so that a run and its resume
form the same batches.
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from confide.backends.hf.cache import cache_of, select_rows
from confide.backends.models import cache_dir
from confide.core.errors import InvalidInputError

if TYPE_CHECKING:
    from confide.backends.models import ModelSource

__all__ = ["DTYPES", "MeasuredSettings", "choose_dtype"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# A lower-precision dtype must be this much faster than float32 to be chosen on a CPU.
_SPEEDUP_NEEDED = 1.2
# Doubling the rows of a decoding step must raise tokens/s by this much to be worth it.
_ROWS_GAIN_NEEDED = 1.15
_MAX_ROWS = 512


def choose_dtype(device: str) -> torch.dtype | None:
    """The dtype forced by ``CONFIDE_DTYPE``, else the default for ``device``.

    On a GPU: bfloat16 (float16 where bfloat16 is unsupported). On a CPU: None,
    meaning "time float32 against bfloat16 on this machine and keep the faster"
    (:meth:`MeasuredSettings._timed_cpu_dtype`). Token statistics are float32 in every
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


class MeasuredSettings:
    """The measured settings of :class:`~confide.backends.hf.HFBackend` (a mixin of it)."""

    if TYPE_CHECKING:  # what this mixin uses of HFBackend, declared for the type checker
        model: Any
        source: ModelSource
        device: str
        dtype: torch.dtype
        max_rows: int | None
        _pad_id: int
        _cache_kwarg: str

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
        cache = cache_of(decoder(input_ids=ids, use_cache=True))
        select_rows(cache, torch.zeros(rows, dtype=torch.long, device=self.device))
        token = torch.full((rows, 1), self._pad_id, dtype=torch.long, device=self.device)
        timings = []
        for step in range(steps + 1):
            began = time.perf_counter()
            out = decoder(input_ids=token, use_cache=True, **{self._cache_kwarg: cache})
            cache = cache_of(out)
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
