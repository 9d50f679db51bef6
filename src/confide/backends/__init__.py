"""Model backends. Heavy imports (torch, transformers, httpx) happen only when one is chosen."""

from confide.backends.base import (
    BACKENDS,
    Backend,
    GenerationResult,
    GenerationSpec,
    Prompt,
    item_seed,
    load_backend,
)

__all__ = ["BACKENDS", "Backend", "GenerationResult", "GenerationSpec", "Prompt", "item_seed",
           "load_backend"]
