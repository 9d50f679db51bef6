"""Reasoning replies on the paths that generate: the run loop with ``--prompt cot`` on the
bundled model, the pipeline's split, the openai backend against a server that sends
``reasoning_content``, and ``confide serve`` (streamed and not) through the official
openai client."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faultserver import running  # noqa: E402

from confide.backends.base import GenerationSpec, TokenEvent  # noqa: E402
from confide.backends.openai import OpenAIBackend  # noqa: E402
from confide.core.errors import ConfigMismatch, InvalidInputError  # noqa: E402
from confide.core.needs import Need  # noqa: E402
from confide.core.reasoning import DEFAULT_TAGS  # noqa: E402
from confide.core.records import Item  # noqa: E402
from confide.pipeline.answering import Pipeline  # noqa: E402
from confide.pipeline.plan import RunConfig, prepare  # noqa: E402
from confide.pipeline.streaming import AnswerStream, TokenUpdate  # noqa: E402
from confide.runs.execution import execute  # noqa: E402
from confide.runs.stored import Run  # noqa: E402
from confide.serve.app import create_app  # noqa: E402
from confide.serve.models import Limits  # noqa: E402

TRACE_SCORERS = ("mean_logprob", "deepconf_mean", "trace_length")
#: Exemplars with one-line traces: the bundled model copies the pattern and closes the
#: trace within a few tokens, so its final answer comes inside a small budget.
SHORT_COT = ("Question: What is 2 plus 2?\nAnswer: <think>2 + 2 = 4</think> The answer is 4."
             "\n\nQuestion: What is 3 plus 3?\nAnswer: <think>3 + 3 = 6</think> The answer "
             "is 6.\n\nQuestion: What is 5 plus 1?\nAnswer: <think>5 + 1 = 6</think> The "
             "answer is 6.\n\nQuestion: What is 4 plus 4?\nAnswer:")


# --- the plan --------------------------------------------------------------------------


def test_run_config_reasoning_tags_one_stored_form_and_cot_needs_tags():
    on = RunConfig(task="gsm8k", reasoning_tags="<think>,</think>")  # type: ignore[arg-type]
    assert on.reasoning_tags == DEFAULT_TAGS
    assert on.to_dict()["reasoning_tags"] == ["<think>", "</think>"]
    off = RunConfig(task="gsm8k", reasoning_tags="none")  # type: ignore[arg-type]
    assert off.reasoning_tags is None and "reasoning_tags" not in off.to_dict()
    assert RunConfig(task="gsm8k", task_options={"prompt": "cot"}).reasoning_tags == DEFAULT_TAGS
    with pytest.raises(InvalidInputError, match="needs reasoning tags"):
        RunConfig(task="gsm8k", task_options={"prompt": "cot"},
                  reasoning_tags="none")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="reasoning tasks"):
        prepare(RunConfig(task="triviaqa", limit=1, task_options={"prompt": "cot"}))


def test_cot_prompt_writes_the_exemplars_traces_in_tags_and_leaves_room_for_them():
    plan = prepare(RunConfig(task="gsm8k", limit=2, task_options={"prompt": "cot"}))
    prompt = plan.task.render(plan.task.items[0], chat=True)
    assert isinstance(prompt, str)  # every model gets the k-shot completion prompt
    assert prompt.count("<think>") == 4 and prompt.count("</think> The answer is ") == 4
    assert "####" not in prompt and prompt.endswith("Answer:")
    assert plan.spec.max_new_tokens == 384 and plan.spec.reasoning_tags == DEFAULT_TAGS
    assert plan.identity()["task"]["options"]["prompt"] == "cot"


# --- the bundled model -----------------------------------------------------------------


@pytest.mark.model
def test_cot_run_on_the_bundled_model_never_grades_a_cut_trace(hf_model, tmp_path):
    config = RunConfig(task="gsm8k", limit=2, batch_size=2, max_new_tokens=12,
                       task_options={"prompt": "cot"}, scorers=TRACE_SCORERS)
    outcome = execute(config, tmp_path / "run", backend=hf_model)
    assert "deepconf_mean" not in outcome.skipped_scorers  # the trace is given
    records = Run(tmp_path / "run").records
    assert len(records) == 2
    for record in records:  # 12 tokens: every trace is cut, so no final answer
        assert record.greedy.trace is not None and record.greedy.trace.n_tokens == 12
        assert record.greedy.text == "" and record.greedy.finish_reason == "length"
        assert record.grades == {}  # never graded wrong
        assert "token budget ran out inside the reasoning trace" in \
            record.grade_errors["numeric"]
        assert math.isnan(record.scores["deepconf_mean"])
        assert math.isnan(record.scores["mean_logprob"])  # an empty answer: never confident
    with pytest.raises(ConfigMismatch, match="reasoning_tags"):  # resume with other tags
        execute(RunConfig(task="gsm8k", limit=2, batch_size=2, max_new_tokens=12,
                          task_options={"prompt": "cot"}, scorers=TRACE_SCORERS,
                          reasoning_tags=("<think>", "</thinking>")),
                tmp_path / "run", backend=hf_model)


@pytest.mark.model
def test_pipeline_splits_the_bundled_models_reply_and_scores_its_trace(hf_model):
    pipe = Pipeline.build(hf_model, TRACE_SCORERS, grader="numeric", reasoning_tags=DEFAULT_TAGS)
    assert not pipe.skipped
    spec = GenerationSpec(max_new_tokens=24, stop=("\n\n",), n_samples=1,
                          reasoning_tags=DEFAULT_TAGS)
    result = hf_model.generate([SHORT_COT], spec, [0])[0]
    whole = result.greedy
    record = pipe.complete(Item("q", SHORT_COT, ["8"]), result)
    greedy, trace = record.greedy, record.greedy.trace
    assert trace is not None and "4" in trace.text and "<think>" not in trace.text
    assert greedy.text.startswith("The answer is") and "</think>" not in greedy.text
    assert trace.n_tokens + greedy.n_tokens == whole.n_tokens  # every token in one span
    assert record.grades["numeric"] == 1.0
    assert math.isfinite(record.scores["deepconf_mean"])
    assert record.scores["trace_length"] == pytest.approx(-trace.n_tokens)
    assert record.scores["mean_logprob"] == pytest.approx(
        float(greedy.token_logprobs.mean()), rel=1e-5)  # the answer's tokens alone
    assert all(s.trace is not None for s in record.samples)  # samples are split too
    off = Pipeline.build(hf_model, TRACE_SCORERS)
    assert off.skipped["deepconf_mean"].startswith("backend cannot give trace")


# --- the stream's spans ----------------------------------------------------------------


def _events(pieces, **kw):
    text, out = "", []
    for piece in pieces:
        text += piece
        out.append(TokenEvent(0, None, text, piece, -0.1, **kw))
    return out


def test_answer_stream_sends_the_trace_apart_and_judges_the_answer_alone():
    from confide.pipeline.streaming import EarlyAbstention

    got: list[TokenUpdate] = []
    stream = AnswerStream(got.append, tags=DEFAULT_TAGS, early=EarlyAbstention(0.5, after=2))
    pieces = ["<th", "ink>", "Two", " and two", "</", "think>\n", "The", " answer", " is 4"]
    for event in _events(pieces):
        assert stream(event) is None  # 0.905 > 0.5: the answer passes
    spans = [u.span for u in got]
    assert spans == ["trace"] * 6 + ["answer"] * 3
    assert "".join(u.trace_delta for u in got) == "Two and two"
    assert "".join(u.delta for u in got) == "The answer is 4"
    assert [u.n_tokens for u in got if u.span == "answer"] == [1, 2, 3]
    # a policy that fires: after 2 answer tokens, however long the trace before them
    low = AnswerStream(got.append, tags=DEFAULT_TAGS, early=EarlyAbstention(0.99, after=2))
    reasons = [low(e) for e in _events(pieces)]
    assert reasons[:7] == [None] * 7 and reasons[7] == "abstain"


# --- the openai backend against a server with reasoning_content -------------------------

REASONING = "Two plus two is four."
ANSWER = "4"
#: The reply's tokens as vLLM lists them with a reasoning parser: the trace's (tags
#: included), then the answer's, then the end of the turn.
TOKENS = ["<think>", "Two", " plus", " two", " is", " four", ".", "</think>", "\n\n", "4",
          "<|im_end|>"]


def _entry(t: int, tok: str) -> dict[str, Any]:
    lp = -0.1 * (t + 1)
    return {"token": tok, "logprob": lp, "bytes": None,
            "top_logprobs": [{"token": tok, "logprob": lp, "bytes": None},
                             {"token": "x", "logprob": lp - 3.0, "bytes": None}]}


class ReasoningServer:
    """A chat-completions server on 127.0.0.1 that answers like vLLM with a reasoning
    parser: the trace in ``reasoning_content``, the answer in ``content`` (streamed: the
    trace's deltas, then the answer's), log-probabilities over every token."""

    def __init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for t, tok in enumerate(TOKENS[:-1]):
                        delta = {} if tok in ("<think>", "</think>") else (
                            {"reasoning_content": tok} if t < 7 else {"content": tok})
                        self._chunk(_event(delta, {"content": [_entry(t, tok)]}, None))
                    self._chunk(_event({}, None, "stop"))
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                    return
                n = int(body.get("n", 1))
                choice = {"finish_reason": "stop", "logprobs": {
                    "content": [_entry(t, tok) for t, tok in enumerate(TOKENS)]},
                    "message": {"role": "assistant", "content": "\n\n" + ANSWER,
                                "reasoning_content": REASONING}}
                data = json.dumps({"id": "r", "object": "chat.completion", "created": 0,
                                   "model": "r1", "choices": [
                                       {**choice, "index": i} for i in range(n)]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        def _event(delta: dict[str, Any], logprobs: Any, finish: str | None) -> bytes:
            chunk = {"id": "r", "object": "chat.completion.chunk", "created": 0, "model": "r1",
                     "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                  "finish_reason": finish}]}
            return f"data: {json.dumps(chunk)}\n\n".encode()

        self.bodies: list[dict[str, Any]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> ReasoningServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture(scope="module")
def reasoning_server():
    with ReasoningServer() as server:
        yield server


def _check_split(gen):
    assert gen.text == ANSWER and gen.tokens == ["\n\n", "4"]
    assert gen.trace is not None and gen.trace.text == REASONING
    assert gen.trace.tokens == TOKENS[:8]
    assert gen.trace.top_logprobs.shape == (8, 2) and gen.trace.token_entropies is not None
    assert gen.token_logprobs.tolist() == pytest.approx([-0.9, -1.0])


def test_openai_backend_reads_reasoning_content_as_the_trace(reasoning_server):
    backend = OpenAIBackend("r1", base_url=reasoning_server.base_url, logprobs=True)
    spec = GenerationSpec(max_new_tokens=64, n_samples=2, top_k_alternatives=2)
    result = backend.generate(["What is 2 + 2?"], spec, [0])[0]
    _check_split(result.greedy)  # the server's field is the trace, whatever the setting
    assert all(s.trace is not None and s.text == ANSWER for s in result.samples)
    pipe = Pipeline.build(backend, TRACE_SCORERS, grader="numeric",
                          reasoning_tags=DEFAULT_TAGS)
    assert Need.TRACE in pipe.capabilities and not pipe.skipped
    record = pipe.complete(Item("q", "What is 2 + 2?", ["4"]), result)
    assert record.grades["numeric"] == 1.0 and math.isfinite(record.scores["deepconf_mean"])
    assert record.scores["trace_length"] == -8


def test_openai_backend_streams_the_trace_deltas_apart(reasoning_server):
    backend = OpenAIBackend("r1", base_url=reasoning_server.base_url, logprobs=True)
    events: list[TokenEvent] = []

    def on_token(event: TokenEvent) -> None:
        events.append(event)

    spec = GenerationSpec(max_new_tokens=64, top_k_alternatives=2)
    gen = backend.generate(["What is 2 + 2?"], spec, [0], on_token=on_token)[0].greedy
    _check_split(gen)
    assert [e.in_trace for e in events] == [True] * 8 + [False] * 2
    assert events[6].trace == REASONING and events[-1].text == "\n\n4"


# --- confide serve ---------------------------------------------------------------------


def _client(url):
    import openai

    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def _streamed(chunks):
    content, trace, spans, last = "", "", [], None
    for chunk in chunks:
        for choice in chunk.choices:
            delta = getattr(choice, "delta", None)
            if delta is not None:
                content += delta.content or ""
                trace += getattr(delta, "reasoning_content", None) or ""
            else:
                content += choice.text or ""
                trace += getattr(choice, "reasoning_content", None) or ""
        info = getattr(chunk, "confide", None)
        if info is not None and "span" in info:
            spans.append(info["span"])
        elif info is not None:
            last = info
    return content, trace, spans, last


@pytest.mark.model
def test_serve_with_reasoning_sends_the_trace_as_reasoning_content(hf_model):
    app = create_app(hf_model, model_name="smollm2", scorers=TRACE_SCORERS,
                     reasoning_tags="<think>,</think>",  # type: ignore[arg-type]
                     limits=Limits(max_tokens=64, max_prompt_chars=2000))
    with running(app) as url:
        client = _client(url)
        whole = client.completions.create(model="smollm2", prompt=SHORT_COT, max_tokens=24,
                                          stop=["\n\n"])
        choice, info = whole.choices[0], whole.confide  # type: ignore[attr-defined]
        assert choice.text.startswith("The answer is")
        assert choice.reasoning_content and "<think>" not in choice.reasoning_content
        assert info["spans"] == {"mean_logprob": "answer", "deepconf_mean": "trace",
                                 "trace_length": "trace"}
        assert info["trace"]["final_answer_missing"] is False
        assert math.isfinite(info["confidences"]["deepconf_mean"])
        content, trace, spans, last = _streamed(client.completions.create(
            model="smollm2", prompt=SHORT_COT, max_tokens=24, stop=["\n\n"], stream=True))
        assert (content, trace) == (choice.text, choice.reasoning_content)
        assert spans[0] == "trace" and spans[-1] == "answer"
        assert spans == sorted(spans, reverse=True)  # the trace, then the answer
        assert last["confidences"] == info["confidences"]


def test_serve_passes_an_upstreams_reasoning_content_through(reasoning_server):
    backend = OpenAIBackend("r1", base_url=reasoning_server.base_url, logprobs=True)
    app = create_app(backend, model_name="r1", scorers=TRACE_SCORERS,
                     reasoning_tags=DEFAULT_TAGS)
    with running(app) as url:
        client = _client(url)
        messages = [{"role": "user", "content": "What is 2 + 2?"}]
        whole = client.chat.completions.create(model="r1", messages=messages, max_tokens=64)
        message = whole.choices[0].message
        assert message.content == ANSWER
        assert message.reasoning_content == REASONING  # type: ignore[attr-defined]
        started = time.monotonic()
        content, trace, spans, last = _streamed(client.chat.completions.create(
            model="r1", messages=messages, max_tokens=64, stream=True))
        assert time.monotonic() - started < 30
        assert (content, trace) == (ANSWER, REASONING)
        assert spans == ["trace"] * 8 + ["answer"] * 2
        assert last["spans"]["deepconf_mean"] == "trace"
        assert math.isfinite(last["confidences"]["deepconf_mean"])
