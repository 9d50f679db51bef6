"""confide serve on 127.0.0.1: the official openai client, limits, errors, decisions."""

from __future__ import annotations

import logging
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faultserver import FaultServer, running  # noqa: E402

from confide.backends.openai import OpenAIBackend  # noqa: E402
from confide.core.errors import InvalidInputError  # noqa: E402
from confide.decisions import AbstentionPolicy, Calibrator  # noqa: E402
from confide.serve.app import create_app  # noqa: E402
from confide.serve.decisions import load_calibrator, load_policy  # noqa: E402
from confide.serve.models import Limits  # noqa: E402

SECRET = "sk-confide-serve-test-93f1a"
KEY_ENV = "CONFIDE_TEST_SERVE_KEY"


def platt(a: float = 2.0, b: float = 1.0, scorer: str = "mean_logprob") -> Calibrator:
    """A fitted-form calibrator: p = 1 / (1 + exp(-(a c + b)))."""
    return Calibrator(scorer, "platt", {"a": a, "b": b}, n_fit=100)


def threshold_policy(t: float, *, scorer: str | None = None,
                     calibrator_scorer: str | None = "mean_logprob") -> AbstentionPolicy:
    """Answer when the (calibrated) confidence reaches ``t``."""
    return AbstentionPolicy(scorer, t, 0.1, 0.1, True, 0.5, 0.05, 0.09, 0.01, 50, 2, 100, 20,
                            calibrator_scorer=calibrator_scorer)


@pytest.fixture(scope="module")
def hf_server(hf_model):
    app = create_app(hf_model, model_name="smollm2", scorers=("msp", "mean_logprob",
                                                               "mean_entropy", "length"),
                     limits=Limits(max_n=3, max_tokens=24, max_prompt_chars=400))
    with running(app) as url:
        yield url


@pytest.mark.model
def test_serve_answers_the_official_openai_client(hf_server):
    import openai

    client = openai.OpenAI(base_url=hf_server, api_key="unused", max_retries=0)
    models = client.models.list()
    assert [m.id for m in models.data] == ["smollm2"]
    reply = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12, n=2, logprobs=True, top_logprobs=2)
    assert reply.object == "chat.completion" and len(reply.choices) == 2
    first = reply.choices[0]
    assert first.message.role == "assistant" and first.message.content
    assert first.logprobs is not None and len(first.logprobs.content[0].top_logprobs) == 2
    assert reply.usage.completion_tokens > 0
    info = reply.confide  # the extra object rides along in the client's model
    conf = info["confidences"]
    assert set(conf) == {"msp", "mean_logprob", "mean_entropy", "length"}
    assert conf["msp"] == pytest.approx(sum(t.logprob for t in first.logprobs.content),
                                        abs=1e-4)
    assert info["calibrated"] is None and info["decision"] is None
    # the same request gets the same confidences (the seed comes from the messages); the
    # same n keeps the same rows per step, so even bfloat16 rounds alike
    again = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12, n=2, logprobs=True, top_logprobs=2)
    assert again.choices[0].message.content == first.message.content
    assert again.confide["confidences"]["msp"] == pytest.approx(conf["msp"])


@pytest.mark.model
def test_serve_health_lists_the_setup(hf_server):
    health = httpx.get(hf_server.removesuffix("/v1") + "/health").json()
    assert health["status"] == "ok" and health["upstream"]["backend"] == "hf"
    assert health["scorers"] == ["msp", "mean_logprob", "mean_entropy", "length"]


@pytest.mark.model
@pytest.mark.parametrize("body, param", [
    ({"n": 4}, "n"),
    ({"max_tokens": 1000}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x" * 401}]}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ({"temperature": 3}, "temperature"),
    ({"confide": {"early_abstain_after": 0}}, "confide.early_abstain_after"),
    ({"model": None}, "model"),
])
def test_serve_rejects_bad_requests_with_400(hf_server, body, param):
    import openai

    request = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}],
               "max_tokens": 4, **body}
    response = httpx.post(f"{hf_server}/chat/completions", json=request, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["message"]
    client = openai.OpenAI(base_url=hf_server, api_key="unused", max_retries=0)
    if param in ("n", "max_tokens"):
        with pytest.raises(openai.BadRequestError, match=param):
            client.chat.completions.create(**request)


@pytest.mark.model
def test_serve_rejects_an_oversized_body_and_bad_json(hf_server):
    big = httpx.post(f"{hf_server}/chat/completions", content=b"x" * 1_000_001,
                     headers={"content-type": "application/json"}, timeout=30)
    assert big.status_code == 413
    bad = httpx.post(f"{hf_server}/chat/completions", content=b"{nope",
                     headers={"content-type": "application/json"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["message"]


@pytest.mark.model
def test_serve_calibrates_and_abstains_under_a_policy(hf_model, tmp_path):
    import openai

    question = [{"role": "user", "content": "What is the capital of France?"}]
    calibrator = load_calibrator(platt().save(tmp_path / "calibrator.json"))
    for threshold, decision in ((0.0, "answer"), (1.01, "abstain")):
        policy = load_policy(threshold_policy(threshold).save(tmp_path / f"p{threshold}.json"))
        app = create_app(hf_model, scorers=("mean_logprob",), calibrator=calibrator,
                         policy=policy, abstain_message="Ask a human.")
        with running(app) as url:
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
            reply = client.chat.completions.create(model="smollm2", messages=question,
                                                   max_tokens=12)
        info = reply.confide
        c = info["confidences"]["mean_logprob"]
        assert info["calibrated"] == pytest.approx(1 / (1 + math.exp(-(2.0 * c + 1.0))))
        assert info["decision"] == decision and info["decided_on"] == "calibrated"
        # the calibration's provenance and where this reply lies outside it: a chat prompt
        # to the served model, and a calibrator that does not say what it was fitted on
        calibration = info["calibration"]
        assert calibration["applied_to"]["prompt_style"] == "chat"
        assert calibration["applied_to"]["model"] == "smollm2"
        assert any("does not say which model" in w for w in calibration["warnings"])
        if decision == "abstain":
            assert reply.choices[0].message.content == "Ask a human."
            assert info["answer"]
        else:
            assert reply.choices[0].message.content != "Ask a human."


def test_serve_refuses_a_policy_without_what_it_reads():
    with FaultServer() as upstream:
        backend = OpenAIBackend("m", base_url=upstream.base_url, logprobs=True)
        with pytest.raises(InvalidInputError, match="policy"):
            create_app(backend, policy=threshold_policy(0.5))
        with pytest.raises(InvalidInputError, match="scorers"):
            create_app(backend, scorers=("msp",), calibrator=platt())
        with pytest.raises(InvalidInputError, match="fitted on calibrated 'mean_logprob'"):
            create_app(backend, scorers=("msp",), calibrator=platt(scorer="msp"),
                       policy=threshold_policy(0.5))


def test_serve_seam_names_the_bad_decision_file(tmp_path):
    path = tmp_path / "calibrator.json"
    path.write_text("{}")
    with pytest.raises(InvalidInputError, match="calibrator.json"):
        load_calibrator(path)
    with pytest.raises(InvalidInputError, match=r"missing\.json.*No such file"):
        load_policy(tmp_path / "missing.json")


def test_confide_serve_command_end_to_end(tmp_path):
    """`confide serve` as users start it: upstream URL, calibrator and policy files."""
    import openai

    calibrator = platt(a=1.0, b=0.0, scorer="msp").save(tmp_path / "cal.json")
    policy = threshold_policy(0.5, calibrator_scorer="msp").save(tmp_path / "policy.json")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with FaultServer() as upstream:
        proc = subprocess.Popen(
            [sys.executable, "-m", "confide.cli", "serve", "--backend", "openai", "--model", "m",
             "--base-url", upstream.base_url, "--scorers", "msp", "--calibrator", str(calibrator),
             "--policy", str(policy), "--abstain-message", "Ask a human.", "--port", str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    health = httpx.get(f"{url}/health", timeout=2).json()
                    break
                except httpx.TransportError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(proc.communicate()[0]) from None
                    time.sleep(0.2)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Q?"}], max_tokens=8)
        finally:
            proc.terminate()
            proc.communicate(timeout=20)  # also closes the pipe
    assert health["calibrator"] and health["policy"] and "0.5" in health["guarantee"]
    # the fault server's answer has log-likelihood -0.75: p = 1 / (1 + e^0.75) = 0.3208 < 0.5
    info = reply.confide
    assert info["confidences"]["msp"] == pytest.approx(-0.75)
    assert info["calibrated"] == pytest.approx(1 / (1 + math.exp(0.75)))
    assert info["decision"] == "abstain" and info["answer"].startswith("answer")
    assert reply.choices[0].message.content == "Ask a human."


def test_confide_serve_command_reports_a_bad_file(tmp_path):
    from typer.testing import CliRunner

    from confide.cli import app

    result = CliRunner().invoke(app, ["serve", "--backend", "openai", "--model", "m",
                                      "--base-url", "http://127.0.0.1:9/v1",
                                      "--calibrator", str(tmp_path / "nope.json")])
    assert result.exit_code == 1
    assert "InvalidInputError" in result.output and "nope.json" in result.output


def test_serve_in_front_of_an_openai_upstream(monkeypatch, caplog):
    """Upstream over HTTP: logprob scorers work, full-distribution ones are skipped; the
    upstream key is sent upstream and never shown to clients or logs."""
    import openai

    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    with FaultServer() as upstream:
        backend = OpenAIBackend("fault-model", base_url=upstream.base_url, api_key_env=KEY_ENV,
                                timeout=2, backoff=0.01)
        with running(create_app(backend, scorers=("msp", "self_certainty"))) as url:
            client = openai.OpenAI(base_url=url, api_key="client-key", max_retries=0)
            reply = client.chat.completions.create(
                model="fault-model", messages=[{"role": "user", "content": "Q?"}], max_tokens=8)
            health = httpx.get(url.removesuffix("/v1") + "/health").text
    assert reply.choices[0].message.content.startswith("answer")
    assert reply.confide["confidences"] == {"msp": pytest.approx(-0.75)}
    assert reply.confide["skipped"] == {"self_certainty": "backend cannot give token_kl_uniform"}
    assert upstream.requests[-1].authorization == f"Bearer {SECRET}"
    assert SECRET not in health and SECRET not in caplog.text


@pytest.mark.parametrize("fault, status", [("500", 502), ("timeout", 504), ("malformed", 502)])
def test_serve_turns_upstream_failures_into_502_and_504(fault, status):
    import openai

    with FaultServer(lambda q, attempt: fault, delay=1.0) as upstream:
        backend = OpenAIBackend("m", base_url=upstream.base_url, logprobs=True, timeout=0.3,
                                max_retries=1, backoff=0.01)
        with running(create_app(backend, scorers=("msp",), timeout=5)) as url:
            began = time.monotonic()
            response = httpx.post(f"{url}/chat/completions", timeout=30, json={
                "model": "m", "messages": [{"role": "user", "content": "Q?"}]})
            elapsed = time.monotonic() - began
            client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model="m",
                                               messages=[{"role": "user", "content": "Q?"}])
    assert response.status_code == status and caught.value.status_code == status
    assert "upstream" in response.json()["error"]["message"]
    assert elapsed < 5  # the retries' budget, never a hang


def test_serve_deadline_answers_504_when_the_upstream_stalls():
    with FaultServer(lambda q, attempt: "timeout", delay=3.0) as upstream:
        backend = OpenAIBackend("m", base_url=upstream.base_url, logprobs=True, timeout=30,
                                max_retries=0)
        with running(create_app(backend, scorers=("msp",), timeout=0.5)) as url:
            began = time.monotonic()
            response = httpx.post(f"{url}/chat/completions", timeout=30, json={
                "model": "m", "messages": [{"role": "user", "content": "Q?"}]})
    assert response.status_code == 504 and time.monotonic() - began < 2.5


def test_serve_limit_errors_quote_the_servers_limits_not_the_general_ones():
    from pydantic import ValidationError

    from confide.serve.guards import RequestError, check_limits
    from confide.serve.models import ChatCompletionRequest

    def request(**fields):
        return ChatCompletionRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields})

    limits = Limits()  # n <= 8, max_tokens <= 512
    for fields, words in [({"n": 200}, "n: at most 8 choices per request, got 200"),
                          ({"max_tokens": 2_000_000}, "max_tokens: at most 512, got 2000000"),
                          ({"max_completion_tokens": 2_000_000},
                           "max_completion_tokens: at most 512")]:
        with pytest.raises(RequestError) as caught:
            check_limits(request(**fields), limits)
        assert words in caught.value.message and "128" not in caught.value.message
    for fields in ({"n": 0}, {"max_tokens": 0}, {"n": 1.5}):  # refused below, as before
        with pytest.raises(ValidationError):
            request(**fields)
    with pytest.raises(InvalidInputError, match="max_n: must be an integer >= 1 and <= 128"):
        Limits(max_n=500)  # a server limit lies within the general range
    with pytest.raises(InvalidInputError, match="max_tokens"):
        Limits(max_tokens=0)
