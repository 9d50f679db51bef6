"""The openai backend against a fault-injecting server and a real llama.cpp server (127.0.0.1)."""

from __future__ import annotations

import importlib.util
import logging
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from faultserver import FaultServer, running  # noqa: E402

from confide.backends import GenerationSpec  # noqa: E402
from confide.backends.openai import OpenAIBackend, _public_url  # noqa: E402
from confide.core.errors import InvalidInputError  # noqa: E402
from confide.pipeline.plan import RunConfig  # noqa: E402
from confide.runs.execution import execute  # noqa: E402
from confide.store.run_store import RunStore  # noqa: E402
from confide.tasks import load_task  # noqa: E402

SECRET = "sk-confide-test-5b1e7c0d9a"
KEY_ENV = "CONFIDE_TEST_OPENAI_KEY"


def backend_for(server: FaultServer, **options) -> OpenAIBackend:
    defaults = {"timeout": 0.5, "backoff": 0.01, "max_retries": 4}
    return OpenAIBackend("fault-model", base_url=server.base_url, **{**defaults, **options})


def test_openai_backend_is_registered_lazily():
    import subprocess
    import sys

    code = ("import sys; from confide.backends import BACKENDS; "
            "assert 'confide.backends.openai' not in sys.modules; "
            "print(BACKENDS['openai']().__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "OpenAIBackend"


def test_openai_generate_reads_tokens_logprobs_and_samples():
    with FaultServer() as server:
        backend = backend_for(server)
        spec = GenerationSpec(max_new_tokens=8, n_samples=2, top_k_alternatives=3)
        a, b = backend.generate(["What is up?", "Who?"], spec, [10, 20])
    assert a.error is None and a.greedy is not None
    # the server answers "answer N" as tokens "answer", " N" with log p = -0.25, -0.5,
    # then lists its end-of-turn token, which is not part of the answer
    assert a.greedy.tokens == ["answer", " " + a.greedy.text.split()[1]]
    np.testing.assert_allclose(a.greedy.token_logprobs, [-0.25, -0.5])
    np.testing.assert_allclose(a.greedy.top_logprobs, [[-0.25, -2.25, -4.25],
                                                       [-0.5, -2.5, -4.5]])
    assert a.greedy.top_tokens[1][1:] == ["alt0", "alt1"]
    assert len(a.samples) == 2 and len(b.samples) == 2
    # samples were asked with the item's seed, greedy with temperature 0
    sample_requests = [r for r in server.requests if r.temperature > 0]
    assert {r.body["seed"] for r in sample_requests} == {10, 20}
    assert all(r.n == 2 for r in sample_requests)
    assert {r.body["temperature"] for r in server.requests if r.temperature == 0} == {0.0}


def test_openai_capabilities_follow_the_server():
    with FaultServer() as server:
        caps = backend_for(server).capabilities
    # entropies: lower bounds from the top-k, as an imported reply gets (backends/topk.py)
    assert caps == {"token_logprobs", "top_logprobs", "token_entropies", "samples",
                    "extra_prompt"}
    with FaultServer(logprobs=False) as server:
        backend = backend_for(server)
        assert backend.capabilities == {"samples", "extra_prompt"}
        (result,) = backend.generate(["Q?"], GenerationSpec(max_new_tokens=4), [0])
        assert result.greedy.token_logprobs is None and result.greedy.text.startswith("answer")
        assert "logprobs" not in server.requests[-1].body
        assert backend.config()["logprobs"] is False


def test_openai_never_claims_full_distribution_statistics():
    with FaultServer() as server:
        backend = backend_for(server)
        caps = backend.capabilities
        (result,) = backend.generate(["Q?"], GenerationSpec(max_new_tokens=4,
                                                            top_k_alternatives=3), [0])
        config = backend.config()
    assert not caps & {"token_kl_uniform", "token_renyi_uniform", "token_fisher_rao_uniform",
                       "hidden_states"}
    # the entropies it gives are lower bounds from the top-k, and its config says so
    gen = result.greedy
    assert gen.token_kl_uniform is None and len(gen.token_entropies) == len(gen.tokens)
    assert config["approximate"].startswith("token_entropies: lower bounds")


def test_openai_asks_one_sample_at_a_time_when_the_server_ignores_n():
    with FaultServer(honour_n=False) as server:
        (result,) = backend_for(server).generate(
            ["Q?"], GenerationSpec(max_new_tokens=4, n_samples=3), [7])
    assert len(result.samples) == 3
    seeds = [r.body["seed"] for r in server.requests if r.temperature > 0]
    assert seeds == [7, 8, 9]


def test_openai_honours_retry_after_on_429():
    with FaultServer(lambda q, attempt: "429" if attempt == 0 else "ok",
                     retry_after=1.0) as server:
        backend = backend_for(server, logprobs=True, backoff=0.001)
        (result,) = backend.generate(["Q?"], GenerationSpec(max_new_tokens=4), [0])
    assert result.error is None
    first, second = server.requests
    assert (first.fault, second.fault) == ("429", "ok")
    assert second.at - first.at >= 0.95  # waited what Retry-After asked, not the 1 ms backoff


@pytest.mark.parametrize("fault", ["500", "timeout", "truncated", "malformed", "nologprobs"])
def test_openai_retries_a_transient_fault(fault):
    with FaultServer(lambda q, attempt: fault if attempt < 2 else "ok", delay=1.5) as server:
        backend = backend_for(server, logprobs=True)
        (result,) = backend.generate(["Q?"], GenerationSpec(max_new_tokens=4), [0])
    assert result.error is None and result.greedy.token_logprobs is not None
    assert [r.fault for r in server.requests] == [fault, fault, "ok"]


def test_openai_gives_up_with_the_error_after_the_retries():
    with FaultServer(lambda q, attempt: "500" if q == "bad" else "ok") as server:
        backend = backend_for(server, logprobs=True, max_retries=2)
        good, bad = backend.generate(["fine", "bad"], GenerationSpec(max_new_tokens=4), [0, 1])
    assert good.greedy is not None and good.error is None
    assert bad.greedy is None
    assert "HTTP 500" in bad.error and "gave up after 3 attempts" in bad.error
    assert sum(r.question == "bad" for r in server.requests) == 3


def test_openai_does_not_retry_a_client_error_and_masks_the_key(monkeypatch, caplog):
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    with FaultServer(lambda q, attempt: "401echo") as server:
        backend = backend_for(server, logprobs=True, api_key_env=KEY_ENV)
        (result,) = backend.generate(["Q?"], GenerationSpec(max_new_tokens=4), [0])
    assert len(server.requests) == 1  # a 401 is not retried
    assert server.requests[0].authorization == f"Bearer {SECRET}"  # the key was sent
    assert result.greedy is None and "HTTP 401" in result.error
    assert f"${KEY_ENV}" in result.error  # names the variable ...
    assert SECRET not in result.error and "***" in result.error  # ... never the value
    assert SECRET not in caplog.text
    assert SECRET not in repr(backend) and SECRET not in str(backend.config())


def test_openai_config_holds_no_credentials():
    backend = OpenAIBackend("m", base_url="https://user:pw@example.invalid:8443/v1/?k=1",
                            logprobs=False)
    assert backend.config() == {"backend": "openai", "model": "m",
                                "base_url": "https://example.invalid:8443/v1",
                                "logprobs": False}
    assert _public_url("http://a:b@h/v1#x") == "http://h/v1"


@pytest.mark.parametrize("options, field", [
    ({"base_url": "ftp://h/v1"}, "base_url"),
    ({"concurrency": 0}, "concurrency"),
    ({"timeout": 0}, "timeout"),
    ({"max_retries": -1}, "max_retries"),
    ({"logprobs": "sometimes"}, "logprobs"),
])
def test_openai_rejects_bad_options(options, field):
    with pytest.raises(InvalidInputError, match=f"{field}:"):
        OpenAIBackend("m", **{"base_url": "http://127.0.0.1:9/v1", **options})


def _questions(n: int) -> list[str]:
    """What the server reads as each question: the last message, or the whole prompt
    where the task prompts every model with one completion string (TriviaQA's k-shot)."""
    task = load_task("triviaqa", limit=n)
    prompts = [task.render(it, chat=True) for it in task.items]
    return [p if isinstance(p, str) else p[-1]["content"] for p in prompts]


def test_run_against_faulty_server_loses_no_item_and_resumes(tmp_path, monkeypatch, caplog):
    """A full run: transient faults are retried, a persistent one is recorded and retried on
    resume; the API key appears in no log, no error and not in the run's files."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    questions = _questions(6)
    faults = ["ok", "429", "500", "timeout", "truncated", "malformed"]
    broken = {"value": True}
    by_question = dict(zip(questions, faults))

    def plan(question: str, attempt: int) -> str:
        if question == questions[0] and broken["value"]:
            return "500"  # the first item fails every attempt of the first run
        return by_question.get(question, "ok") if attempt == 0 else "ok"

    config = RunConfig(model="fault-model", backend="openai", task="triviaqa", limit=6,
                       scorers=("msp", "mean_logprob", "mean_entropy", "self_certainty",
                                "length"), max_new_tokens=8, batch_size=6)
    out = tmp_path / "run"
    with FaultServer(plan, retry_after=0.2, delay=1.5) as server:
        backend = OpenAIBackend("fault-model", base_url=server.base_url, api_key_env=KEY_ENV,
                                timeout=0.5, backoff=0.01, max_retries=2)
        first = execute(config, out, backend=backend)
        assert first.generated == 5 and list(first.failures) == [load_task(
            "triviaqa", limit=6).items[0].id]
        with RunStore.open(out) as store:
            assert len(store) == 5
            assert set(store.failures()) == set(first.failures)
            assert "HTTP 500" in next(iter(store.failures().values()))
            skipped = store.get_meta("skipped_scorers")
        assert skipped == {"self_certainty": "backend cannot give token_kl_uniform"}
        assert {"429", "500", "timeout", "truncated", "malformed"} <= set(server.faults())

        broken["value"] = False  # the server recovers; the same command resumes
        second = execute(config, out, backend=backend)
    assert second.generated == 1 and second.failures == {}
    with RunStore.open(out) as store:
        assert len(store) == 6 and store.failures() == {}
        records = store.records()
    assert all(np.isfinite(r.scores["msp"]) for r in records)
    files = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert SECRET.encode() not in files
    assert SECRET not in caplog.text
    assert all(r.authorization == f"Bearer {SECRET}" for r in server.requests)


def test_run_against_text_only_server_says_which_scorers_it_skipped(tmp_path):
    with FaultServer(logprobs=False) as server:
        backend = backend_for(server)
        outcome = execute(RunConfig(model="fault-model", backend="openai", limit=3,
                                    max_new_tokens=8), tmp_path / "run", backend=backend)
    assert outcome.generated == 3
    assert outcome.skipped_scorers["msp"] == "backend cannot give token_logprobs"
    assert outcome.skipped_scorers["mean_entropy"] == "backend cannot give token_entropies"
    with RunStore.open(tmp_path / "run") as store:
        assert store.get_meta("skipped_scorers") == outcome.skipped_scorers


# -- a real peer: llama.cpp's OpenAI-compatible server with the bundled model ------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """llama-cpp-python's server on 127.0.0.1 with the bundled SmolLM2 GGUF."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("llama-cpp-python is not installed: pip install -e '.[serve]'")
    from confide.backends.models import _smollm2_gguf

    port = _free_port()
    log = open(tmp_path_factory.mktemp("llama") / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(_smollm2_gguf()),
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
         "--model_alias", "smollm2", "--n_threads", "1", "--chat_format", "chatml"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}; "
                                   f"see {log.name}")
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server did not start; see {log.name}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.model
def test_openai_against_llama_cpp_gives_logprobs(llama_server):
    backend = OpenAIBackend("smollm2", base_url=llama_server, timeout=120)
    assert backend.capabilities == {"token_logprobs", "top_logprobs", "token_entropies",
                                    "samples", "extra_prompt"}
    spec = GenerationSpec(max_new_tokens=8, n_samples=2, top_k_alternatives=3, stop=("\n",))
    (result,) = backend.generate([[{"role": "user", "content": "What is the capital of France?"}]],
                                 spec, [1])
    gen = result.greedy
    assert result.error is None and "Paris" in gen.text  # SmolLM2's chat format is ChatML
    assert 0 < len(gen.tokens) <= 8 and len(gen.tokens) == len(gen.token_logprobs)
    assert np.all(gen.token_logprobs <= 0)
    assert gen.top_logprobs.shape == (len(gen.tokens), 3)
    # the chosen greedy token is the most likely alternative
    np.testing.assert_allclose(gen.top_logprobs[:, 0], gen.token_logprobs, atol=1e-4)
    assert "".join(gen.tokens).strip() == gen.text
    assert len(result.samples) == 2


@pytest.mark.model
def test_run_against_llama_cpp_end_to_end(llama_server, tmp_path):
    config = RunConfig(model="smollm2", backend="openai", task="triviaqa", limit=3,
                       max_new_tokens=12, batch_size=3)
    backend = OpenAIBackend("smollm2", base_url=llama_server, timeout=120, concurrency=2)
    outcome = execute(config, tmp_path / "run", backend=backend)
    assert outcome.generated == 3 and outcome.failures == {}
    assert set(outcome.skipped_scorers) == {"self_certainty"}  # entropies: top-k bounds
    with RunStore.open(tmp_path / "run") as store:
        records = store.records()
        assert store.get_meta("backend")["base_url"] == llama_server
    for record in records:
        assert np.isfinite(record.scores["msp"]) and record.scores["msp"] <= 0
        assert record.scores["min_logprob"] <= record.scores["mean_logprob"]
        assert "contains" in record.grades


@pytest.mark.model
def test_llama_cpp_replies_hold_the_same_statistics_generated_or_imported(llama_server,
                                                                          tmp_path):
    """The same answers of llama.cpp through the ``openai`` backend, then exported and
    imported with ``confide score``: the same statistics and the same scorers with values
    (tests/test_statistics_paths.py runs it against the fault server)."""
    from test_statistics_paths import assert_same_statistics_and_scorers, generate_export_import

    backend = OpenAIBackend("smollm2", base_url=llama_server, timeout=120, concurrency=2)
    generated, imported, exported = generate_export_import(
        backend, tmp_path, model="smollm2", task="triviaqa", limit=2, max_new_tokens=8,
        n_samples=3, batch_size=2)
    assert_same_statistics_and_scorers(generated, imported, exported)
    assert all("mean_entropy" in r.scores and "self_certainty" not in
               {n for n, v in r.scores.items() if math.isfinite(v)} for r in generated.values())


def test_cli_run_with_openai_backend_reports_failures_without_the_key(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from confide.cli import app

    monkeypatch.setenv(KEY_ENV, SECRET)
    questions = _questions(3)
    with FaultServer(lambda q, attempt: "401echo" if q == questions[1] else "ok") as server:
        result = CliRunner().invoke(app, [
            "run", "--backend", "openai", "--model", "fault-model", "--base-url",
            server.base_url, "--api-key-env", KEY_ENV, "--limit", "3", "--max-new-tokens", "8",
            "--scorers", "msp,self_certainty", "--out", str(tmp_path / "run"), "--no-report"])
    assert result.exit_code == 0, result.output
    assert "1 item(s) failed" in result.output and "HTTP 401" in result.output
    assert "skipped self_certainty: backend cannot give token_kl_uniform" in result.output
    assert SECRET not in result.output
    with RunStore.open(tmp_path / "run") as store:
        assert len(store) == 2 and len(store.failures()) == 1


@pytest.mark.model
def test_serve_in_front_of_llama_cpp_with_the_openai_client(llama_server):
    """confide serve → llama.cpp: the official client gets llama.cpp's answer plus confidences."""
    import openai

    from confide.serve.app import create_app

    backend = OpenAIBackend("smollm2", base_url=llama_server, timeout=120)
    app = create_app(backend, scorers=("msp", "mean_logprob", "mean_entropy"))
    with running(app) as url:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="smollm2", max_tokens=8,
            messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert reply.choices[0].message.content
    conf = reply.confide["confidences"]
    assert conf["msp"] <= 0 and conf["mean_logprob"] <= 0
    # entropies from the top-k: lower bounds, as an imported reply holds
    assert conf["mean_entropy"] <= 0 and not reply.confide.get("skipped")


def test_api_score_with_openai_backend(monkeypatch):
    from confide.api import score
    from confide.core.errors import BackendError

    monkeypatch.setenv(KEY_ENV, SECRET)
    with FaultServer(lambda q, attempt: "401echo" if q.endswith("bad?") else "ok") as server:
        backend = backend_for(server, api_key_env=KEY_ENV)
        (answer,) = score(backend, ["Who is fine?"], scorers=("msp", "self_certainty"))
        with pytest.raises(BackendError, match="HTTP 401") as caught:
            score(backend, ["Who is bad?"], scorers=("msp",))
    assert answer.confidences["msp"] == pytest.approx(-0.75)
    assert math.isnan(answer.confidences["self_certainty"])
    assert answer.reasons["self_certainty"] == "backend cannot give token_kl_uniform"
    assert SECRET not in str(caught.value)
