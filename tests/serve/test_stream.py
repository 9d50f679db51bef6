"""confide serve streaming: the openai client's stream=True against the bundled model and a
misbehaving upstream; disconnects; early abstention; /v1/completions; n > 1; summaries."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faultserver import FaultServer, running  # noqa: E402

from confide.backends.openai import OpenAIBackend  # noqa: E402
from confide.serve.app import create_app  # noqa: E402
from confide.serve.models import Limits  # noqa: E402

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SCORERS = ("msp", "mean_logprob", "mean_entropy", "length")


@pytest.fixture(scope="module")
def hf_server(hf_model):
    app = create_app(hf_model, model_name="smollm2", scorers=SCORERS,
                     limits=Limits(max_n=3, max_tokens=200, max_prompt_chars=400))
    with running(app) as url:
        yield url


def _client(url):
    import openai

    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def _collect(chunks):
    """Content per choice, the token chunks' confide objects, and the last chunk."""
    texts: dict[int, str] = {}
    tokens, last = [], None
    for chunk in chunks:
        for choice in chunk.choices:
            content = getattr(choice, "delta", None) and choice.delta.content
            text = content if content is not None else getattr(choice, "text", None)
            texts[choice.index] = texts.get(choice.index, "") + (text or "")
        info = getattr(chunk, "confide", None)
        if info is not None and "running_confidence" in info:
            tokens.append((info, chunk))
        elif info is not None:
            last = chunk
    return texts, tokens, last


@pytest.mark.model
def test_stream_matches_the_reply_that_is_not_streamed(hf_server):
    client = _client(hf_server)
    whole = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=16,
                                           logprobs=True, top_logprobs=2)
    chunks = list(client.chat.completions.create(
        model="smollm2", messages=QUESTION, max_tokens=16, logprobs=True, top_logprobs=2,
        stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    texts, tokens, last = _collect(chunks)
    assert texts[0] == whole.choices[0].message.content and texts[0]
    # each token chunk: its log-probability, entropy and the running confidence so far
    logprobs = [info["logprob"] for info, _ in tokens]
    assert logprobs == pytest.approx([t.logprob for t in whole.choices[0].logprobs.content],
                                     abs=1e-5)
    for n, (info, chunk) in enumerate(tokens, start=1):
        assert info["entropy"] >= 0
        assert info["running_confidence"] == pytest.approx(math.exp(sum(logprobs[:n]) / n),
                                                           rel=1e-5)
        assert len(chunk.choices[0].logprobs.content[0].top_logprobs) == 2
    # the last chunk: the same final object as the reply that is not streamed
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason
    for name, value in whole.confide["confidences"].items():
        assert last.confide["confidences"][name] == pytest.approx(value, abs=1e-5)
    assert last.confide["decision"] is None and last.confide["calibrated"] is None
    assert last.usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.model
def test_stream_stops_generating_when_the_client_goes_away(hf_server):
    request = {"model": "smollm2", "max_tokens": 200, "stream": True,
               "messages": [{"role": "user", "content": "Write a long story about a dragon."}]}
    health = hf_server.removesuffix("/v1") + "/health"
    before = httpx.get(health).json()["streams"]["counts"].get("cancelled", 0)
    with httpx.stream("POST", f"{hf_server}/chat/completions", json=request,
                      timeout=60) as response:
        assert response.status_code == 200
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data:")
            if seen == 4:  # the role chunk and three tokens
                break
    deadline = time.monotonic() + 60
    while True:
        streams = httpx.get(health).json()["streams"]
        if streams["counts"].get("cancelled", 0) > before:
            break
        assert time.monotonic() < deadline, streams
        time.sleep(0.2)
    entry = [e for e in streams["recent"] if e["outcome"] == "cancelled"][-1]
    assert 3 <= entry["tokens"] < 200 // 2, entry  # stopped, far short of the budget


@pytest.mark.model
def test_early_abstention_ends_the_stream_with_the_message(hf_model):
    app = create_app(hf_model, model_name="smollm2", scorers=SCORERS,
                     abstain_message="Ask a human.")
    with running(app) as url:
        client = _client(url)
        strict = {"confide": {"early_abstain_below": 0.999, "early_abstain_after": 2}}
        chunks = list(client.chat.completions.create(
            model="smollm2", messages=QUESTION, max_tokens=32, stream=True, extra_body=strict))
        whole = client.chat.completions.create(model="smollm2", messages=QUESTION,
                                               max_tokens=32, extra_body=strict)
        lenient = client.chat.completions.create(
            model="smollm2", messages=QUESTION, max_tokens=32,
            extra_body={"confide": {"early_abstain_below": 0.01}})
        bad = httpx.post(f"{url}/chat/completions", timeout=30, json={
            "model": "smollm2", "messages": QUESTION, "confide": {"early_abstain_below": 1.5}})
    texts, tokens, last = _collect(chunks)
    assert tokens == []  # the two tokens the policy waited for were never sent
    assert texts[0] == "Ask a human."
    info = last.confide
    assert info["sent_before_abstention"] == ""
    assert info["decision"] == "abstain" and info["decided_on"] == "early_abstention"
    assert "fell below 0.999 after 2 tokens" in info["decision_reason"]
    assert info["confidences"]["length"] == -2.0  # the scores describe what was generated
    # not streamed: the same policy, the message as the content, the partial answer kept
    assert whole.choices[0].message.content == "Ask a human."
    assert whole.confide["decided_on"] == "early_abstention" and whole.confide["answer"]
    assert lenient.confide["decision"] is None and lenient.choices[0].message.content
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "confide.early_abstain_below"


@pytest.mark.model
def test_completions_endpoint_streamed_and_not(hf_server):
    client = _client(hf_server)
    prompt = "The capital of France is"
    whole = client.completions.create(model="smollm2", prompt=prompt, max_tokens=8,
                                      logprobs=2)
    assert whole.object == "text_completion" and whole.choices[0].text
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs)
    assert whole.confide["confidences"]["msp"] == pytest.approx(sum(lp.token_logprobs),
                                                                abs=1e-4)
    chunks = list(client.completions.create(model="smollm2", prompt=prompt, max_tokens=8,
                                            stream=True))
    texts, tokens, last = _collect(chunks)
    assert texts[0] == whole.choices[0].text
    assert last.confide["confidences"]["msp"] == pytest.approx(
        whole.confide["confidences"]["msp"], abs=1e-5)
    two = httpx.post(f"{hf_server}/completions", timeout=30, json={
        "model": "smollm2", "prompt": ["a", "b"]})
    assert two.status_code == 400 and two.json()["error"]["param"] == "prompt"


@pytest.mark.model
def test_every_choice_gets_its_confidences_and_a_summary(hf_server):
    client = _client(hf_server)
    reply = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=12,
                                           n=3, logprobs=True, temperature=1.0)
    per_choice = reply.confide["choices"]
    assert [c["index"] for c in per_choice] == [0, 1, 2]
    for choice, info in zip(reply.choices, per_choice):
        assert info["confidences"]["msp"] == pytest.approx(
            sum(t.logprob for t in choice.logprobs.content), abs=1e-4)
    assert per_choice[0]["confidences"] == reply.confide["confidences"]
    summary = reply.confide["summary"]
    assert summary["n_samples"] == 2 and summary["text"].startswith(("Most likely",
                                                                     "Almost certainly"))
    assert sum(o["count"] for o in summary["options"]) == 2
    # streamed: every choice streams, and the last chunk scores each
    chunks = list(client.chat.completions.create(model="smollm2", messages=QUESTION,
                                                 max_tokens=12, n=3, stream=True))
    texts, tokens, last = _collect(chunks)
    assert {info["index"] for info, _ in tokens} == {0, 1, 2}
    assert [texts[i] for i in range(3)] == [c.message.content for c in reply.choices]
    assert [c["confidences"]["msp"] for c in last.confide["choices"]] == pytest.approx(
        [c["confidences"]["msp"] for c in per_choice], abs=1e-5)


# -- an OpenAI-compatible upstream that streams ---------------------------------------------


def _upstream_app(server, **options):
    backend = OpenAIBackend("m", base_url=server.base_url, logprobs=True, timeout=5,
                            max_retries=0)
    return create_app(backend, scorers=("msp", "mean_logprob"), **options)


def test_stream_passes_the_upstream_logprobs_through():
    with FaultServer(answer_words=3) as upstream, running(_upstream_app(upstream)) as url:
        chunks = list(_client(url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Q?"}], stream=True,
            logprobs=True, top_logprobs=2))
    texts, tokens, last = _collect(chunks)
    assert texts[0].startswith("answer ") and texts[0].endswith(" w1 w2 w3")
    # the fault server's token t has log p = -0.25 (t + 1); no entropy from an API
    assert [info["logprob"] for info, _ in tokens] == [-0.25, -0.5, -0.75, -1.0, -1.25]
    assert all(info["entropy"] is None for info, _ in tokens)
    assert tokens[-1][0]["running_confidence"] == pytest.approx(math.exp(-0.75))
    assert tokens[0][1].choices[0].logprobs.content[0].top_logprobs[1].token == "alt0"
    assert last.confide["confidences"]["msp"] == pytest.approx(-3.75)
    assert upstream.requests[-1].body["stream"] is True


@pytest.mark.parametrize("fault, words", [("cut", "the stream was cut"),
                                          ("badchunk", "malformed stream chunk")])
def test_stream_reports_a_broken_upstream_stream_as_an_error_event(fault, words):
    import openai

    with FaultServer(lambda q, attempt: fault, answer_words=6) as upstream, \
            running(_upstream_app(upstream)) as url:
        received = []
        with pytest.raises(openai.APIError, match=words):
            for chunk in _client(url).chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Q?"}], stream=True):
                received.append(chunk)
    assert any(c.choices and c.choices[0].delta.content for c in received)  # it had begun


def test_stream_forwards_slow_tokens_as_they_come():
    with FaultServer(lambda q, attempt: "slow", answer_words=3, token_delay=0.3) as upstream, \
            running(_upstream_app(upstream)) as url:
        first = None
        for chunk in _client(url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Q?"}], stream=True):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.monotonic()
        sent = list(upstream.sent)
    assert len(sent) == 5 and first is not None
    assert first < sent[-1]  # the first token reached the client before the last was sent


def test_stream_before_the_first_token_fails_with_an_http_error():
    import openai

    with FaultServer(lambda q, attempt: "500") as upstream, \
            running(_upstream_app(upstream)) as url:
        with pytest.raises(openai.APIStatusError) as caught:
            list(_client(url).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Q?"}], stream=True))
    assert caught.value.status_code == 502


def test_stream_stops_the_upstream_when_the_client_goes_away():
    with FaultServer(lambda q, attempt: "slow", answer_words=20, token_delay=0.2) as upstream, \
            running(_upstream_app(upstream)) as url:
        with httpx.stream("POST", f"{url}/chat/completions", timeout=30, json={
                "model": "m", "messages": [{"role": "user", "content": "Q?"}],
                "stream": True}) as response:
            events = (line for line in response.iter_lines() if line.startswith("data:"))
            for n, _ in enumerate(events):
                if n == 2:
                    break
        deadline = time.monotonic() + 10
        while not upstream.abandoned and time.monotonic() < deadline:
            time.sleep(0.1)
        sent = len(upstream.sent)
    assert upstream.abandoned == 1 and sent < 22


def test_sse_events_are_well_formed():
    with FaultServer() as upstream, running(_upstream_app(upstream)) as url:
        body = httpx.post(f"{url}/chat/completions", timeout=30, json={
            "model": "m", "messages": [{"role": "user", "content": "Q?"}], "stream": True})
    assert body.headers["content-type"].startswith("text/event-stream")
    events = [e for e in body.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert len({c["id"] for c in chunks}) == 1


# -- early abstention withholds what it has not checked (no model: the fault server's
# token t has log p = -0.25 t, so the running confidence after t tokens is exp(-(t+1)/8):
# 0.779, 0.687, 0.607, 0.535, 0.472)

def _stream_chunks(url, confide, **body):
    with httpx.stream("POST", f"{url}/chat/completions", timeout=30, json={
            "model": "m", "messages": [{"role": "user", "content": "Q?"}], "stream": True,
            "confide": confide, **body}) as response:
        assert response.status_code == 200
        return [json.loads(line.removeprefix("data: ")) for line in response.iter_lines()
                if line.startswith("data: ") and line != "data: [DONE]"]


def _sent(chunks):
    """Choice 0's content in token chunks, and the last chunk."""
    return "".join(c["choices"][0].get("delta", {}).get("content") or ""
                   for c in chunks[:-1]), chunks[-1]


@pytest.mark.parametrize("below, after, n_sent", [
    (0.78, 1, 0),  # fires at token 1: the first token ("La") is never sent
    (0.65, 3, 0),  # fires at token 3 = after: tokens 1 and 2 were held, never sent
    (0.65, 1, 2),  # fires at token 3 > after: tokens 1 and 2 passed their checks
    (0.5, 2, 4),   # fires at token 5
])
def test_stream_sends_no_token_before_its_early_abstention_check(below, after, n_sent):
    with FaultServer(answer_words=3, token_delay=0.0) as upstream, \
            running(_upstream_app(upstream, abstain_message="Ask a human.")) as url:
        chunks = _stream_chunks(url, {"early_abstain_below": below,
                                      "early_abstain_after": after})
    sent, last = _sent(chunks)
    token_chunks = [c for c in chunks[:-1] if (c.get("confide") or {}).get("index") == 0]
    assert len(token_chunks) == n_sent
    assert [c["confide"]["n_tokens"] for c in token_chunks] == list(range(1, n_sent + 1))
    assert all(c["confide"]["running_confidence"] >= below for c in token_chunks)
    info = last["confide"]
    assert info["decided_on"] == "early_abstention"
    assert info["sent_before_abstention"] == sent
    rest = last["choices"][0]["delta"]["content"]
    assert rest == ("\n\n" if sent else "") + "Ask a human."


def test_stream_sends_a_short_answer_the_policy_never_judged_whole_at_its_end():
    with FaultServer(answer_words=3, token_delay=0.0) as upstream, \
            running(_upstream_app(upstream)) as url:
        held = _stream_chunks(url, {"early_abstain_below": 0.01, "early_abstain_after": 50})
        plain = _stream_chunks(url, {})
    assert _sent(held)[0] + (held[-1]["choices"][0]["delta"].get("content") or "") == \
        _sent(plain)[0] + (plain[-1]["choices"][0]["delta"].get("content") or "")
    tokens = [c["confide"] for c in held[:-1] if (c.get("confide") or {}).get("index") == 0]
    assert [t["n_tokens"] for t in tokens] == [1, 2, 3, 4, 5]  # all of them, in order
    assert held[-1]["confide"]["decision"] is None

