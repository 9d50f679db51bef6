"""Shared fixtures: the bundled model loaded once per session, small hand-made records."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from confide.core.records import Generation, Item, Record


@pytest.fixture(scope="session")
def hf_model():
    """The bundled SmolLM2-135M-Instruct behind the hf backend (loaded once)."""
    from confide.backends.hf import HFBackend

    return HFBackend("smollm2", batch_size=4)


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The folder of the full public datasets, named by ``$CONFIDE_DATA_DIR``.

    ``.ci/run`` sets it to ``shared/data`` beside the clone. Unset, the test is
    skipped and says why; set to a folder that is not there, the test fails.
    """
    value = os.environ.get("CONFIDE_DATA_DIR")
    if not value:
        pytest.skip("CONFIDE_DATA_DIR is not set (the folder of the full public datasets)")
    path = Path(value)
    if not path.is_dir():
        pytest.fail(f"CONFIDE_DATA_DIR={value} is not a folder")
    return path


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


@contextmanager
def chat_template(backend, text: str) -> Iterator[None]:
    """The bundled model's tokenizer with the chat template ``text`` (a thinking mode,
    say), restored after."""
    old = backend.tokenizer.chat_template
    backend.tokenizer.chat_template = text
    try:
        yield
    finally:
        backend.tokenizer.chat_template = old


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch thread for a module (``pytestmark = pytest.mark.usefixtures(...)``): on 2
    shared cores, two threads' spinning made each training step 3-5x slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model32(one_thread):
    """The bundled model in float32, the module's own copy: ensemble members are attached
    to it in place, and detached after."""
    from confide.backends.hf import HFBackend

    backend = HFBackend("smollm2", dtype="float32", batch_size=4)
    yield backend
    backend.use_ensemble(None)
