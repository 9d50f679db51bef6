"""The decoding loop's key/value cache plumbing.

transformers' ``DynamicCache`` holds, per layer, the keys and the values of every
row as ``(rows, heads, width, dim)`` tensors. These helpers read it from a
forward pass's output, rebuild it from per-layer tensors, keep or repeat its
rows and reorder its columns; stacking caches of different widths
(:meth:`~confide.backends.hf.decoding.DecodingLoop._merged`) builds on them.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["cache_from", "cache_of", "gather_columns", "key_values", "select_rows"]


def gather_columns(t: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Each row's cache columns (dim -2) of ``t`` (rows, heads, width, dim) in ``order``
    (rows, width)."""
    return t.gather(-2, order[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3]))


def cache_from(kv: list[tuple[torch.Tensor, torch.Tensor]], config: Any) -> Any:
    from transformers.cache_utils import DynamicCache

    return DynamicCache(ddp_cache_data=kv, config=config)


def key_values(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) of a dynamic cache: the tensors themselves, not copies."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def select_rows(cache: Any, index: torch.Tensor) -> None:
    """Keep (or repeat) the cache's batch rows at ``index``, in place."""
    cache.batch_select_indices(index)


def cache_of(output: Any) -> Any:
    """The key/value cache of a model output (``cache`` in newer transformers)."""
    return output.cache if hasattr(output, "cache") else output.past_key_values
