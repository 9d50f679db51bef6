"""Model backends. Heavy imports (torch, transformers, httpx) happen only when one is chosen."""

from confide.backends.base import (
    Backend,
    GeneratesAsync,
    GenerationResult,
    GenerationSpec,
    HasAttentions,
    HasChatTemplate,
    HasConfig,
    HasContextWindow,
    HasLayers,
    NextTokenScorer,
    Prompt,
    ScoresUnconditioned,
    Streams,
    Tokenizes,
    item_seed,
)
from confide.backends.factory import BACKENDS, load_backend

__all__ = ["BACKENDS", "Backend", "GenerationResult", "GenerationSpec", "GeneratesAsync",
           "HasAttentions", "HasChatTemplate", "HasConfig", "HasContextWindow", "HasLayers",
           "NextTokenScorer", "Prompt", "ScoresUnconditioned", "Streams", "Tokenizes",
           "item_seed", "load_backend"]
