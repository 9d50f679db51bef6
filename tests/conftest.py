"""Shared fixtures: the bundled model loaded once per session, small hand-made records."""

from __future__ import annotations

import numpy as np
import pytest

from confide.records import Generation, Item, Record


@pytest.fixture(scope="session")
def hf_model():
    """The bundled SmolLM2-135M-Instruct behind the hf backend (loaded once)."""
    from confide.backends.hf import HFBackend

    return HFBackend("smollm2", batch_size=4)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def make_record(logprobs, entropies=None, kl=None, *, item_id="x", references=("Paris",),
                text="Paris") -> Record:
    """A record whose greedy answer has the given per-token statistics."""
    logprobs = np.asarray(logprobs, dtype=np.float32)
    n = len(logprobs)
    gen = Generation(
        text=text, token_ids=list(range(n)), tokens=[f"t{i}" for i in range(n)],
        token_logprobs=logprobs,
        token_entropies=None if entropies is None else np.asarray(entropies, dtype=np.float32),
        token_kl_uniform=None if kl is None else np.asarray(kl, dtype=np.float32),
    )
    return Record(item=Item(id=item_id, prompt="Q?", references=list(references)), greedy=gen)
