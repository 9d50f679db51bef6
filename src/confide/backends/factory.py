"""The backends by name, and loading one: each class is imported only when it is chosen.

torch and transformers (``hf``), httpx (``openai``) and vllm are heavy, and none is
needed to list the backends, so the registry holds a loader function per backend, not
the class. (Here, not in :mod:`confide.backends.base`, which every backend imports.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confide.backends.base import Backend
from confide.core.registry import Registry

__all__ = ["BACKENDS", "load_backend"]


def _hf() -> Callable[..., Backend]:
    from confide.backends.hf import HFBackend

    return HFBackend


def _openai() -> Callable[..., Backend]:
    from confide.backends.openai import OpenAIBackend

    return OpenAIBackend


def _vllm() -> Callable[..., Backend]:
    from confide.backends.vllm import VLLMBackend

    return VLLMBackend


BACKENDS: Registry[Callable[[], Callable[..., Backend]]] = Registry("backend")
BACKENDS.add("hf", _hf)
BACKENDS.add("openai", _openai)
BACKENDS.add("vllm", _vllm)


def load_backend(name: str, model: str, **options: Any) -> Backend:
    """Instantiate the backend registered as ``name`` for ``model`` (its module imported now).

    ``options`` go to the backend (``device``, ``batch_size``, ``dtype`` for
    ``hf``; ``base_url``, ``concurrency``, ``timeout`` for ``openai``;
    ``tensor_parallel_size`` and vLLM engine keywords for ``vllm``).
    """
    return BACKENDS[name]()(model, **options)
