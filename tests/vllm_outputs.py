"""Objects with the attribute names of vLLM's Logprob, CompletionOutput and RequestOutput,
and a small vocabulary: test data for the vllm backend's conversion (no engine)."""

from __future__ import annotations

from dataclasses import dataclass, field

from confide.backends.vllm import TokenText


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    index: int = 0
    text: str = ""


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput] = field(default_factory=list)


VOCAB = ["Paris", " is", " nice", "\n", "Next", "<eos>", "Rome", " a"]
EOS = 5
TEXT = TokenText(decode=lambda ids: "".join(VOCAB[i] for i in ids if i != EOS),
                 piece=lambda i: VOCAB[i], end_ids=frozenset({EOS}))
