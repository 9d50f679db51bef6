"""The backends declare what they offer as protocols, and callers test for them."""

from __future__ import annotations

import pytest

from confide.backends import (
    BACKENDS,
    GeneratesAsync,
    HasAttentions,
    HasChatTemplate,
    HasConfig,
    HasContextWindow,
    HasLayers,
    NextTokenScorer,
    ScoresUnconditioned,
    Streams,
    Tokenizes,
)

OPTIONAL = (Streams, GeneratesAsync, Tokenizes, HasLayers, HasContextWindow, NextTokenScorer,
            ScoresUnconditioned, HasAttentions)


class _TextOnly:
    """Test fake: a backend that offers nothing beyond generate."""

    name, capabilities, has_chat_template = "text-only", frozenset(), False

    def generate(self, prompts, spec, seeds):
        return []

    def config(self):
        return {"backend": self.name}


def test_backends_registry_imports_the_hf_package_when_chosen():
    assert BACKENDS["hf"]().__module__ == "confide.backends.hf.backend"
    assert sorted(BACKENDS) == ["hf", "openai", "vllm"]


@pytest.mark.parametrize(("name", "offers"), [
    ("hf", {Streams, Tokenizes, HasLayers, HasContextWindow, NextTokenScorer,
            ScoresUnconditioned, HasAttentions}),
    ("openai", {Streams, GeneratesAsync}),
    ("vllm", {Tokenizes, HasContextWindow}),
])
def test_backend_classes_declare_their_protocols(name, offers):
    cls = BACKENDS[name]()
    assert {p for p in OPTIONAL if p in cls.__mro__} == offers


def test_hf_backend_is_each_protocol_it_declares(hf_model):
    assert all(isinstance(hf_model, p) for p in OPTIONAL if p is not GeneratesAsync)
    assert not isinstance(hf_model, GeneratesAsync)
    assert isinstance(hf_model, HasChatTemplate) and isinstance(hf_model, HasConfig)
    assert hf_model.n_layers == hf_model.model.config.num_hidden_layers
    assert hf_model.context_window == hf_model.model.config.max_position_embeddings


def test_openai_protocol_checks_send_no_request():
    from confide.backends.openai import OpenAIBackend

    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")  # nothing listens there
    found = {p for p in OPTIONAL if isinstance(backend, p)}
    assert found == {Streams, GeneratesAsync}
    assert isinstance(backend, HasChatTemplate) and backend.has_chat_template
    assert backend._logprobs is None  # not probed: logprobs stay unknown


def test_a_fake_offers_only_what_it_has():
    fake = _TextOnly()
    assert not [p for p in OPTIONAL if isinstance(fake, p)]
    assert isinstance(fake, HasChatTemplate) and isinstance(fake, HasConfig)
    assert not isinstance(object(), HasChatTemplate) and not isinstance(object(), HasConfig)
