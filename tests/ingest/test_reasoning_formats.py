"""Every log format with a reasoning model's reply: the trace and the final answer come back
as two spans, each with its own tokens and statistics (confide.core.reasoning)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from confide.core.errors import InvalidInputError
from confide.core.reasoning import final_answer_missing
from confide.ingest import read_generations


def _write(path, records, name="log.jsonl"):
    target = path / name
    target.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return target


def _chat_entry(token, lp):
    return {"token": token, "logprob": lp, "top_logprobs": [{"token": token, "logprob": lp}]}


def test_jsonl_tags_in_the_answer_and_a_reasoning_field(tmp_path):
    path = _write(tmp_path, [
        {"id": "a", "question": "2+2?", "answer": "<think>2+2=4</think>\n4",
         "tokens": ["<think>", "2+2=4", "</think>", "\n", "4"],
         "token_logprobs": [-0.1, -0.2, -0.3, -0.4, -0.5],
         "samples": ["<think>hm</think>5", {"answer": "4", "reasoning": "so 4",
                                            "tokens": ["so", " 4", "4"],
                                            "token_logprobs": [-1.0, -2.0, -3.0]}]},
        {"id": "b", "question": "2+2?", "answer": "<think>2+2 is", "tokens": ["<think>", "2+2",
                                                                              " is"]},
    ])
    first, cut = read_generations(path)
    g = first.greedy
    assert (g.text, g.tokens, g.trace.text, g.trace.tokens) == (
        "4", ["\n", "4"], "2+2=4", ["<think>", "2+2=4", "</think>"])
    np.testing.assert_allclose(g.token_logprobs, [-0.4, -0.5])
    np.testing.assert_allclose(g.trace.token_logprobs, [-0.1, -0.2, -0.3])
    tagged, field = first.samples
    assert (tagged.text, tagged.trace.text) == ("5", "hm")
    assert (field.text, field.tokens, field.trace.tokens) == ("4", ["4"], ["so", " 4"])
    np.testing.assert_allclose(field.token_logprobs, [-3.0])
    assert "reasoning" not in first.item.metadata
    assert final_answer_missing(cut.greedy) and cut.greedy.trace.tokens == ["<think>", "2+2",
                                                                             " is"]


def test_openai_content_tags_and_the_reasoning_field(tmp_path):
    trace = [_chat_entry("Hm", -0.5), _chat_entry("</think>", -0.25)]
    answer = [_chat_entry("\n\n", -0.125), _chat_entry("4", -0.75),
              _chat_entry("<|im_end|>", -0.01)]
    path = _write(tmp_path, [
        {"id": "tags", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"content": "<think>Hm</think>\n\n4"},
             "finish_reason": "stop"},
            {"index": 1, "message": {"content": "4"}, "finish_reason": "stop"}]},
        {"id": "field", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"content": "\n\n4", "reasoning": "Hm"},
             "logprobs": {"content": trace + answer}, "finish_reason": "stop"}]},
        {"id": "answer-tokens-only", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"content": "4", "reasoning_content": "Hm"},
             "logprobs": {"content": answer[1:]}, "finish_reason": "stop"}]},
    ])
    tags, field, only = read_generations(path)
    assert (tags.greedy.text, tags.greedy.trace.text) == ("4", "Hm")
    assert tags.samples[0].trace is None  # a sample without a trace stays as it is
    g = field.greedy
    assert (g.text, g.tokens, g.trace.text, g.trace.tokens) == ("4", ["\n\n", "4"], "Hm",
                                                                 ["Hm", "</think>"])
    np.testing.assert_allclose(g.token_logprobs, [-0.125, -0.75])
    np.testing.assert_allclose(g.trace.token_logprobs, [-0.5, -0.25])
    assert g.trace.token_entropies is not None  # each span has its own bounds
    assert (only.greedy.tokens, only.greedy.trace.text, only.greedy.trace.tokens) == (
        ["4"], "Hm", [])


def test_openai_reasoning_that_the_tokens_do_not_spell_is_refused(tmp_path):
    path = _write(tmp_path, [{"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"content": "4", "reasoning_content": "Hm"},
         "logprobs": {"content": [_chat_entry("Ok", -0.5), _chat_entry("5", -0.5)]},
         "finish_reason": "stop"}]}])
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:1: choices\[0\]\.logprobs\.content: "
                                                r"the tokens spell neither"):
        list(read_generations(path))


def test_tags_off_reads_the_answer_whole(tmp_path):
    path = _write(tmp_path, [{"question": "q", "answer": "<think>a</think>b"}])
    (record,) = read_generations(path, reasoning_tags=None)
    assert record.greedy.text == "<think>a</think>b" and record.greedy.trace is None


def _vllm_step(tid, token, lp):
    return {str(tid): {"logprob": lp, "rank": 1, "decoded_token": token}}


def test_vllm_text_with_only_the_closing_tag(tmp_path):
    # DeepSeek-R1: "<think>\n" is in the prompt, the output holds the closing tag only
    pieces = [(11, "So", -0.5), (12, " 4", -0.25), (13, "</think>", -0.125), (14, "\n\n", -0.1),
              (15, "4", -0.75), (2, "", -0.01)]
    out = {"index": 0, "text": "So 4</think>\n\n4", "token_ids": [p[0] for p in pieces],
           "finish_reason": "stop", "stop_reason": None,
           "logprobs": [_vllm_step(*p) for p in pieces]}
    apart = {**out, "index": 1, "text": "\n\n4", "reasoning_content": "So 4"}
    path = _write(tmp_path, [{"request_id": "r", "prompt": "2+2?", "outputs": [out, apart]}])
    (record,) = read_generations(path, format="vllm")
    for g in (record.greedy, record.samples[0]):
        assert (g.text, g.tokens, g.token_ids) == ("4", ["\n\n", "4"], [14, 15])
        assert (g.trace.text, g.trace.token_ids) == ("So 4", [11, 12, 13])
        np.testing.assert_allclose(g.trace.token_logprobs, [-0.5, -0.25, -0.125])


def test_llamacpp_and_ollama_replies(tmp_path):
    probs = [{"id": i, "token": t, "logprob": -0.5, "top_logprobs": [
        {"id": i, "token": t, "logprob": -0.5}]} for i, t in
        enumerate(["<think>", "Hm", "</think>", " Paris", ""])]
    path = _write(tmp_path, [
        {"content": "<think>Hm</think> Paris", "stop": True, "stop_type": "eos",
         "completion_probabilities": probs},
        {"model": "qwen3", "message": {"role": "assistant", "content": "Rome",
                                       "thinking": "Italy's capital"}, "done": True,
         "done_reason": "stop"},
        {"model": "qwen3", "response": "", "thinking": "Let me", "done": True,
         "done_reason": "length"},
    ])
    llama, chat, generate = read_generations(path, format="llamacpp")
    g = llama.greedy
    assert (g.text, g.tokens, g.trace.text, g.trace.tokens) == (
        "Paris", [" Paris"], "Hm", ["<think>", "Hm", "</think>"])
    assert (chat.greedy.text, chat.greedy.trace.text) == ("Rome", "Italy's capital")
    assert final_answer_missing(generate.greedy)
    assert (generate.greedy.finish_reason, generate.greedy.trace.text) == ("length", "Let me")


def test_lmeval_chains_of_thought(tmp_path):
    request = {"arg_0": "Q?\nA:", "arg_1": {"until": ["Q:"]}}
    base = {"doc": {}, "target": "7", "arguments": {"gen_args_0": request},
            "metrics": ["exact_match"], "exact_match": 1.0}
    path = _write(tmp_path, [
        {**base, "doc_id": 0, "resps": [["<think>3+4=7</think> 7"]],
         "filtered_resps": ["<think>3+4=7</think> 7"], "filter": "none"},
        {**base, "doc_id": 1, "resps": [["3 + 4 = 7. The answer is 7."]],
         "filtered_resps": ["7"], "filter": "strict-match"},
        {**base, "doc_id": 2, "resps": [["3 + 4 is"]], "filtered_resps": ["[invalid]"],
         "filter": "strict-match"},
    ], name="samples_gsm8k_cot_2025-01-01T00-00-00.jsonl")
    tags, extracted, invalid = read_generations(path)
    assert (tags.greedy.text, tags.greedy.trace.text) == ("7", "3+4=7")
    assert (extracted.greedy.text, extracted.greedy.trace.text) == (
        "7", "3 + 4 = 7. The answer is 7.")
    assert invalid.greedy.text == "" and final_answer_missing(invalid.greedy)
    assert invalid.greedy.trace.text == "3 + 4 is"
