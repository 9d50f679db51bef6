"""confide.wrap (the official OpenAI client) and ConfidenceChatModel (LangChain's ChatOpenAI)
against real servers on 127.0.0.1: llama.cpp with the bundled model, the fault server
without log-probabilities, and ``confide serve``.

Each request the clients send, and each reply body, is read off the wire by the HTTP
client's event hooks, so the tests check what was asked for, and recompute the
confidences with :func:`confide.score_answers` from the bodies the server sent.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))
import test_openai  # noqa: E402
from faultserver import FaultServer, running  # noqa: E402

import confide  # noqa: E402
from confide.core.errors import InvalidInputError, UnknownNameError  # noqa: E402

llama_server = test_openai.llama_server  # the llama.cpp peer, one per module
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


class Wire:
    """The chat-completion requests a client sent and the JSON bodies it got back."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.got: list[dict[str, Any] | None] = []
        self.clients: list[httpx2.Client] = []
        self.aclients: list[httpx2.AsyncClient] = []

    def _request(self, request: Any) -> None:
        if request.url.path.endswith("/chat/completions"):
            self.sent.append(json.loads(request.content))

    def _response(self, response: Any) -> None:
        if not response.request.url.path.endswith("/chat/completions"):
            return
        if json.loads(response.request.content).get("stream"):
            self.got.append(None)  # a stream: the client reads it, not the hook
            return
        response.read()
        self.got.append(response.json())

    async def _arequest(self, request: Any) -> None:
        self._request(request)

    async def _aresponse(self, response: Any) -> None:
        if not response.request.url.path.endswith("/chat/completions"):
            return
        if json.loads(response.request.content).get("stream"):
            self.got.append(None)
            return
        await response.aread()
        self.got.append(response.json())

    def client(self) -> httpx2.Client:
        self.clients.append(httpx2.Client(
            event_hooks={"request": [self._request], "response": [self._response]},
            timeout=120))
        return self.clients[-1]

    def aclient(self) -> httpx2.AsyncClient:
        self.aclients.append(httpx2.AsyncClient(
            event_hooks={"request": [self._arequest], "response": [self._aresponse]},
            timeout=120))
        return self.aclients[-1]

    async def aclose(self) -> None:
        """Close the async clients, inside the loop that used them."""
        for c in self.aclients:
            await c.aclose()
        self.aclients.clear()

    def close(self) -> None:
        for c in self.clients:
            c.close()
        # an async client never used holds no connection
        self.clients.clear()


@pytest.fixture
def wire():
    found = Wire()
    yield found
    found.close()


def _plain(values: dict[str, float]) -> dict[str, float | None]:
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


def _expected(body: dict[str, Any], samples: list[dict[str, Any]] = (), *, scorers: Any
              ) -> confide.ScoredAnswer:
    """score_answers on the reply body as the server sent it (choice 0), with the
    sampling replies' first choices as samples."""
    choice = body["choices"][0]
    drawn = [c for s in samples for c in s["choices"]]
    lps = [c["logprobs"]["content"] for c in drawn] if drawn and all(
        c.get("logprobs") for c in drawn) else None
    return confide.score_answers(
        {"question": QUESTION}, choice["message"]["content"],
        samples=[c["message"]["content"] for c in drawn] or None,
        logprobs=(choice.get("logprobs") or {}).get("content"), sample_logprobs=lps,
        scorers=scorers)


def _openai(base_url: str, wire: Wire) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0,
                         http_client=wire.client())


# -- the OpenAI client -------------------------------------------------------------------------


@pytest.mark.model
def test_wrap_keeps_the_reply_and_adds_the_confidences_of_score_answers(llama_server, wire):
    client = _openai(llama_server, wire)
    wrapped = confide.wrap(client)
    assert isinstance(wrapped, openai.OpenAI) and wrapped is not client
    ask = {"model": "smollm2", "messages": QUESTION, "max_tokens": 8, "temperature": 0}
    plain = client.chat.completions.create(**ask)
    reply = wrapped.chat.completions.create(**ask)

    assert type(reply) is type(plain) and len(reply.choices) == 1
    assert reply.choices[0].message.content == plain.choices[0].message.content
    assert not hasattr(plain, "confide")  # the caller's own client is left as it was
    assert "logprobs" not in wire.sent[0]
    assert wire.sent[1]["logprobs"] is True and wire.sent[1]["top_logprobs"] == 10
    assert len(wire.sent) == 2  # no sampling scorer chosen: no sampling request

    expected = _expected(wire.got[1], scorers="free")
    assert reply.confide["confidences"] == _plain(expected.confidences)
    assert reply.confide["reasons"] == expected.reasons
    assert reply.confide["confidences"]["msp"] < 0 and reply.confide["logprobs"] is None
    assert reply.confide["requested"] == {"logprobs": True, "top_logprobs": 10}
    # an extra field: the reply's own serialisation carries it, as standard JSON
    assert reply.model_extra["confide"] is reply.confide
    dumped = json.loads(reply.model_dump_json())
    assert dumped["confide"]["confidences"] == reply.confide["confidences"]


@pytest.mark.model
def test_wrap_draws_the_samples_a_sampling_scorer_needs(llama_server, wire):
    wrapped = confide.wrap(_openai(llama_server, wire), scorers=["msp", "agreement"],
                           samples=3)
    reply = wrapped.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=6,
                                            temperature=0, seed=7)
    first, *sampling = wire.sent
    assert "n" not in first and first["temperature"] == 0  # the reply is the caller's
    # llama.cpp ignores n: asked for 3, then the 2 still missing, then 1
    assert [s["n"] for s in sampling] == [3, 2, 1]
    assert all(s["temperature"] == 1.0 and s["logprobs"] is True for s in sampling)
    assert [s["seed"] for s in sampling] == [8, 9, 10]  # the caller's seed moves
    assert reply.confide["sample_requests"] == 3 and len(reply.confide["samples"]) == 3
    expected = _expected(wire.got[0], wire.got[1:], scorers=["msp", "agreement"])
    assert reply.confide["samples"] == [c["message"]["content"]
                                        for g in wire.got[1:] for c in g["choices"]]
    assert reply.confide["confidences"] == _plain(expected.confidences)
    assert 0 <= reply.confide["confidences"]["agreement"] <= 1


@pytest.mark.model
def test_wrap_passes_a_stream_through_and_scores_it_at_its_end(llama_server, wire):
    wrapped = confide.wrap(_openai(llama_server, wire), scorers=["msp", "mean_logprob"])
    ask = {"model": "smollm2", "messages": QUESTION, "max_tokens": 8, "temperature": 0}
    stream = wrapped.chat.completions.create(**ask, stream=True)
    assert isinstance(stream, openai.Stream)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    entries = [e.model_dump() for c in chunks if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content or []]
    assert wire.sent[0]["stream"] is True and wire.sent[0]["logprobs"] is True
    reply = wrapped.chat.completions.create(**ask)
    assert text == reply.choices[0].message.content
    expected = confide.score_answers({"question": QUESTION}, text, logprobs=entries,
                                     scorers=["msp", "mean_logprob"])
    assert stream.confide["confidences"] == _plain(expected.confidences)
    assert stream.confide["confidences"]["msp"] == pytest.approx(
        reply.confide["confidences"]["msp"], abs=1e-4)


@pytest.mark.model
def test_wrap_async_client_and_stream(llama_server, wire):

    async def main() -> tuple[Any, Any, str]:
        client = openai.AsyncOpenAI(base_url=llama_server, api_key="unused", max_retries=0,
                                    http_client=wire.aclient())
        wrapped = confide.wrap(client, scorers="msp,agreement", samples=2)
        assert isinstance(wrapped, openai.AsyncOpenAI)
        ask = {"model": "smollm2", "messages": QUESTION, "max_tokens": 6, "temperature": 0}
        reply = await wrapped.chat.completions.create(**ask)
        stream = await wrapped.chat.completions.create(**ask, stream=True)
        assert isinstance(stream, openai.AsyncStream)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
        await wire.aclose()
        return reply, stream, text

    reply, stream, text = asyncio.run(main())
    assert text == reply.choices[0].message.content
    expected = _expected(wire.got[0], wire.got[1:3], scorers=["msp", "agreement"])
    assert reply.confide["confidences"] == _plain(expected.confidences)
    assert reply.confide["sample_requests"] == 2 and len(stream.confide["samples"]) == 2
    assert stream.confide["confidences"]["msp"] == pytest.approx(
        reply.confide["confidences"]["msp"], abs=1e-4)


def test_wrap_without_logprobs_runs_the_black_box_scorers_and_names_the_rest(wire):
    with FaultServer(logprobs=False) as server:
        wrapped = confide.wrap(_openai(server.base_url, wire),
                               scorers=["msp", "mean_logprob", "agreement"], samples=3)
        reply = wrapped.chat.completions.create(model="fault-model", messages=QUESTION,
                                                max_tokens=8)
        refused = confide.wrap(_openai(server.base_url, wire), scorers=["msp"])
        off = refused.chat.completions.create(model="fault-model", messages=QUESTION,
                                              max_tokens=8, logprobs=False)
    assert server.requests[0].body["logprobs"] is True  # asked, but none came back
    assert set(reply.confide["skipped"]) == {"msp", "mean_logprob"}
    assert "no token_logprobs" in reply.confide["skipped"]["msp"]
    assert reply.confide["logprobs"].startswith("the server returned no log-probabilities")
    assert reply.confide["confidences"]["agreement"] is not None  # black-box: the samples
    expected = _expected(wire.got[0], wire.got[1:2],
                         scorers=["msp", "mean_logprob", "agreement"])
    assert reply.confide["confidences"] == _plain(expected.confidences)
    # the caller's logprobs=False is kept (and no top_logprobs added), and said
    assert wire.sent[-1]["logprobs"] is False and "top_logprobs" not in wire.sent[-1]
    assert off.confide["logprobs"] == "the request set logprobs=False"
    assert off.confide["confidences"] == {"msp": None} and "msp" in off.confide["skipped"]


@pytest.mark.model
def test_wrap_in_front_of_confide_serve_keeps_the_servers_object(llama_server, wire):
    from confide.backends.openai import OpenAIBackend
    from confide.serve.app import create_app

    backend = OpenAIBackend("smollm2", base_url=llama_server, timeout=120)
    app = create_app(backend, scorers=("msp", "mean_logprob"))
    with running(app) as url:
        wrapped = confide.wrap(_openai(url, wire), scorers=["msp", "mean_logprob"])
        reply = wrapped.chat.completions.create(model="smollm2", messages=QUESTION,
                                                max_tokens=8)
    server = reply.confide["server"]
    assert server["confidences"].keys() == {"msp", "mean_logprob"}
    expected = _expected(wire.got[0], scorers=["msp", "mean_logprob"])
    assert reply.confide["confidences"] == _plain(expected.confidences)
    # the server scored its own generation; the wrapper the reply it sent: the same answer
    assert reply.confide["confidences"]["msp"] == pytest.approx(
        server["confidences"]["msp"], abs=1e-3)


def test_wrap_refuses_what_it_cannot_wrap():
    with pytest.raises(InvalidInputError, match="client: wrap takes an openai.OpenAI"):
        confide.wrap(object())
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused")
    with pytest.raises(UnknownNameError, match="agreemnt"):
        confide.wrap(client, scorers=["agreemnt"])
    with pytest.raises(InvalidInputError, match="temperature"):
        confide.wrap(client, scorers=["agreement"], temperature=0)
    with pytest.raises(InvalidInputError, match="top_logprobs"):
        confide.wrap(client, top_logprobs=21)


# -- LangChain ---------------------------------------------------------------------------------


def _chat(base_url: str, wire: Wire, **options: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="smollm2", base_url=base_url, api_key="unused", max_retries=0,
                      max_tokens=8, temperature=0, http_client=wire.client(),
                      http_async_client=wire.aclient(), **options)


@pytest.mark.model
def test_langchain_invoke_and_stream_carry_the_confidences(llama_server, wire):
    from langchain_core.messages import AIMessage

    from confide.integrations.langchain import ConfidenceChatModel

    inner = _chat(llama_server, wire)
    chat = ConfidenceChatModel(model=inner, scorers=["msp", "mean_logprob", "agreement"],
                               samples=2)
    plain = inner.invoke(QUESTION)
    message = chat.invoke(QUESTION)
    assert type(message) is AIMessage and message.content == plain.content
    assert "logprobs" not in wire.sent[0]
    assert wire.sent[1]["logprobs"] is True and wire.sent[1]["top_logprobs"] == 10
    assert [s.get("n") for s in wire.sent[2:4]] == [2, 1]  # llama.cpp ignores n
    found = message.response_metadata["confide"]
    expected = _expected(wire.got[1], wire.got[2:4],
                         scorers=["msp", "mean_logprob", "agreement"])
    assert found["confidences"] == _plain(expected.confidences)
    assert found["scored_choice"] == 0 and found["sample_requests"] == 2

    whole = None
    for chunk in chat.stream(QUESTION):
        whole = chunk if whole is None else whole + chunk
    assert whole is not None and whole.content == plain.content
    streamed = whole.response_metadata["confide"]
    assert streamed["confidences"]["msp"] == pytest.approx(found["confidences"]["msp"],
                                                           abs=1e-4)


@pytest.mark.model
def test_langchain_ainvoke_and_astream(llama_server, wire):
    from confide.integrations.langchain import ConfidenceChatModel

    chat = ConfidenceChatModel(model=_chat(llama_server, wire), scorers=["msp"])

    async def main() -> tuple[Any, Any]:
        message = await chat.ainvoke(QUESTION)
        whole = None
        async for chunk in chat.astream(QUESTION):
            whole = chunk if whole is None else whole + chunk
        await wire.aclose()
        return message, whole

    message, whole = asyncio.run(main())
    expected = _expected(wire.got[0], scorers=["msp"])
    assert message.response_metadata["confide"]["confidences"] == _plain(expected.confidences)
    assert whole.content == message.content
    assert whole.response_metadata["confide"]["confidences"]["msp"] == pytest.approx(
        expected.confidences["msp"], abs=1e-4)


def test_langchain_without_logprobs_names_the_skipped_scorers(wire):
    from confide.integrations.langchain import ConfidenceChatModel

    with FaultServer(logprobs=False) as server:
        chat = ConfidenceChatModel(model=_chat(server.base_url, wire),
                                   scorers=["msp", "agreement"], samples=2)
        message = chat.invoke(QUESTION)
    found = message.response_metadata["confide"]
    assert wire.sent[0]["logprobs"] is True
    assert list(found["skipped"]) == ["msp"] and "ChatOpenAI returned no" in found["logprobs"]
    assert found["confidences"]["agreement"] is not None


def test_langchain_refuses_sampling_scorers_for_a_model_without_n():
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from confide.integrations.langchain import ConfidenceChatModel

    with pytest.raises(InvalidInputError, match="scorers: .*FakeListChatModel does not take"):
        ConfidenceChatModel(model=FakeListChatModel(responses=["Paris"]),
                            scorers=["agreement"])
