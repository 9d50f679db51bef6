"""The one protocol every model backend implements.

``generate(prompts, spec, seeds)`` takes a list of prompts (plain text or chat
messages) and returns, in the same order, one :class:`GenerationResult` per
prompt: the greedy answer and ``spec.n_samples`` sampled answers, each with
whatever token statistics the backend can give. ``capabilities`` names those
statistics (values of :class:`confide.scorers.Need`), so the runner can skip
scorers whose needs are unmet and say why.

A backend with ``streaming = True`` also takes ``on_token``: a
:data:`TokenCallback` called once per generated token of every row (greedy and
samples) as it is produced; returning a reason (a non-empty string) ends that
row there, with that reason as its ``finish_reason`` (``confide.pipeline.streaming``
uses it for token-level confidence, early abstention and clients that went
away).

What a backend offers beyond that is declared by small ``runtime_checkable``
protocols, which a backend subclasses (or simply implements) and callers test
with ``isinstance(backend, Protocol)``, never by probing attribute names:

============================  ====================================================  ==========
protocol                      offers                                                backends
============================  ====================================================  ==========
:class:`HasChatTemplate`      ``has_chat_template``: prompts as chat messages       all
:class:`HasConfig`            ``config()``: the model setup stored with a run       all
:class:`Streams`              ``streaming``, ``generate(..., on_token=)``           hf, openai
:class:`GeneratesAsync`       ``aopen``, ``aclose``, ``aprobe``, ``agenerate_one``  openai
:class:`Tokenizes`            ``encode(prompt, thinking=)``: a prompt's token ids   hf, vllm
:class:`HasLayers`            ``n_layers``: hidden-state layers 0 .. n_layers       hf
:class:`HasContextWindow`     ``context_window``: tokens, None if not stated        hf, vllm
:class:`NextTokenScorer`      ``next_token_logprobs``: exact one-token replies      hf
:class:`ScoresUnconditioned`  ``unconditioned_logprobs``: answer, no question       hf
:class:`HasAttentions`        ``attention_diagonals``: self-attention weights       hf
:class:`ScoresContinuation`   ``continuation_logprobs``: tokens after a context     hf
============================  ====================================================  ==========

A pass over a generation's own prompt again reads it as the generation did: a reasoning
run (``GenerationSpec.reasoning_tags`` set) renders a chat template's thinking mode on
(:func:`encode_prompt`), so such passes take ``thinking``.

Before Python 3.12 ``isinstance`` reads every member of the protocol, properties
included (``OpenAIBackend.capabilities`` would probe the server): test for the
small protocols, not for :class:`Backend` itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from confide.core.errors import InvalidInputError
from confide.core.needs import Need
from confide.core.options import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, check_option, check_stop
from confide.core.reasoning import prompt_opens_trace, reasoning_tags
from confide.core.records import Generation, Message

__all__ = ["Backend", "GenerationResult", "GenerationSpec", "GeneratesAsync",
           "HasAttentions", "HasChatTemplate", "HasConfig", "HasContextWindow", "HasLayers",
           "NextTokenScorer", "Prompt", "ScoresContinuation", "ScoresUnconditioned", "Streams",
           "TokenCallback", "TokenEvent", "Tokenizes", "encode_prompt", "item_seed",
           "opens_trace", "takes_thinking"]

Prompt = str | list[Message]


@dataclass(frozen=True)
class GenerationSpec:
    """How to generate. Sampling defaults (``docs/architecture.md``, pitfalls):
    SmolLM2 sampled at temperature 1 without nucleus truncation gives mostly
    distinct answers, so samples use top-p 0.9 by default."""

    max_new_tokens: int = 32
    stop: tuple[str, ...] = ()
    n_samples: int = 0
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    top_k_alternatives: int = 10
    hidden_layers: tuple[int, ...] = ()
    greedy: bool = True
    #: A reasoning model's trace tags (``("<think>", "</think>")``), None: reasoning off.
    #: On, a chat template with a thinking mode is rendered with it on
    #: (:func:`encode_prompt`) and a server's reasoning field is read by these tags; the
    #: pipeline splits every answer by them (:class:`confide.pipeline.answering.Pipeline`).
    reasoning_tags: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        # The one set of rules (confide.core.options) also guards direct API use.
        for name in ("max_new_tokens", "n_samples", "temperature", "top_p"):
            check_option(name, getattr(self, name))
        check_stop(self.stop, most=None)
        if self.reasoning_tags is not None:  # the tags' rules: confide.core.reasoning
            object.__setattr__(self, "reasoning_tags", reasoning_tags(self.reasoning_tags))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        d["hidden_layers"] = list(self.hidden_layers)
        d["reasoning_tags"] = None if self.reasoning_tags is None else list(self.reasoning_tags)
        return d


@dataclass
class GenerationResult:
    """What one prompt produced: its greedy answer and its samples.

    A backend that could not produce a prompt's answers (an HTTP backend after
    all retries) returns ``greedy=None`` with ``error`` saying why; the runner
    records the failure and a resumed run retries the item.
    ``prompt`` is the rendered prompt, which scorers that run the model
    again over prompt + answer (``rauq``, ``attention_score``) read.
    """

    greedy: Generation | None
    samples: list[Generation] = field(default_factory=list)
    error: str | None = None
    prompt: Prompt | None = None  # what the answers were generated from (set by the pipeline)


@dataclass(frozen=True)
class TokenEvent:
    """One token just generated, as a streaming backend reports it.

    ``prompt``: index of the prompt in the ``generate`` call; ``sample``: None for
    the greedy row, else the sample's index. ``text`` is the row's answer so far
    (decoded, end-of-sequence left out), ``token`` this token's text. ``logprob``
    and ``entropy`` are this step's statistics (None where the backend cannot give
    them); ``top`` its top alternatives as (token, log-probability) pairs.

    A reasoning reply whose trace the backend gets apart from the answer (a server's
    ``reasoning_content`` deltas) sets ``trace``, the reasoning so far, and then
    ``text`` is the answer alone; ``in_trace`` says this token is the reasoning's.
    Otherwise ``trace`` is None and a trace, if any, is in ``text`` between its tags.
    ``trace_opened``: the row's prompt ended with the opening tag (a chat template's
    thinking mode, :func:`opens_trace`), so ``text`` is a trace from its first token and
    holds no opening tag (as :attr:`Generation.trace_opened
    <confide.core.records.Generation.trace_opened>` marks the finished reply).
    """

    prompt: int
    sample: int | None
    text: str
    token: str
    logprob: float | None
    entropy: float | None = None
    top: tuple[tuple[str, float], ...] = ()
    trace: str | None = None
    in_trace: bool = False
    trace_opened: bool = False


TokenCallback = Callable[[TokenEvent], "str | None"]


@runtime_checkable
class Backend(Protocol):
    name: str
    capabilities: frozenset[Need]
    has_chat_template: bool

    def generate(self, prompts: list[Prompt], spec: GenerationSpec,
                 seeds: list[int]) -> list[GenerationResult]:
        """One result per prompt, in input order. ``seeds[i]`` seeds prompt i's samples,
        so what an item gets never depends on which items share its batch."""
        ...

    def config(self) -> dict[str, Any]:
        """JSON-safe identity of the model (stored with a run; no secrets)."""
        ...


@runtime_checkable
class Tokenizes(Protocol):
    """A backend that can count a prompt's tokens (a local model)."""

    def encode(self, prompt: Prompt, *, thinking: bool = False) -> list[int]:
        """The token ids of ``prompt`` as the model would read it; ``thinking``: as a
        reasoning run renders it (:func:`encode_prompt`)."""
        ...


@runtime_checkable
class HasLayers(Protocol):
    """A backend whose hidden states can be stored: layers 0 (embeddings) .. ``n_layers``."""

    @property
    def n_layers(self) -> int: ...


@runtime_checkable
class HasContextWindow(Protocol):
    """A backend that knows its context window in tokens (``None``: not stated)."""

    @property
    def context_window(self) -> int | None: ...


@runtime_checkable
class HasChatTemplate(Protocol):
    """A backend that says whether it renders chat messages itself (``hf`` and ``vllm``:
    the tokenizer's chat template; ``openai``: the server). Where it does, prompts are
    given as messages; otherwise, and for an object without the attribute, as text."""

    has_chat_template: bool


@runtime_checkable
class HasConfig(Protocol):
    """A backend that can name its model setup (what :meth:`Backend.config` returns)."""

    def config(self) -> dict[str, Any]:
        """JSON-safe identity of the model (stored with a run; no secrets)."""
        ...


@runtime_checkable
class Streams(Protocol):
    """A backend whose ``generate`` takes ``on_token`` (see the module's notes) when its
    ``streaming`` is True; test ``isinstance(b, Streams) and b.streaming``."""

    streaming: bool

    def generate(self, prompts: list[Prompt], spec: GenerationSpec, seeds: list[int], *,
                 on_token: TokenCallback | None = None) -> list[GenerationResult]: ...


@runtime_checkable
class GeneratesAsync(Protocol):
    """A backend a server's event loop awaits directly (``openai``) instead of running it
    on a worker thread: one shared client opened and closed with the server."""

    async def aopen(self) -> None: ...

    async def aclose(self) -> None: ...

    async def aprobe(self) -> bool: ...

    async def agenerate_one(self, prompt: Prompt, spec: GenerationSpec, seed: int, *,
                            on_token: TokenCallback | None = None) -> GenerationResult:
        """One prompt's result; raises :class:`~confide.core.errors.BackendError` on failure."""
        ...


@runtime_checkable
class NextTokenScorer(Protocol):
    """Optional extra a backend may offer: the next-token distribution of a prompt.

    Scorers that ask the model a second question (``p_true``) use it when the
    backend has it (one forward pass, exact probabilities) and otherwise fall
    back to a one-token :meth:`Backend.generate` with top-k alternatives.
    """

    def next_token_logprobs(self, prompts: list[Prompt], candidates: list[str]) -> Any:
        """Array ``(len(prompts), len(candidates))`` of ``log p(candidate | prompt)``;
        each candidate must be one token."""
        ...


@runtime_checkable
class ScoresUnconditioned(Protocol):
    """A backend that scores given answer tokens without the question (``pmi``, ``cpmi``;
    capability ``unconditioned_logprobs``)."""

    def unconditioned_logprobs(self, answers: list[list[int]], *, chat: bool | None = None
                               ) -> list[Any]:
        """Per answer (token ids), a float64 array of each token's log-probability after a
        neutral prompt in place of the question, in order; ``chat``: whether the answers'
        prompts were chat messages (the neutral prompt follows; None: the model's kind)."""
        ...


@runtime_checkable
class HasAttentions(Protocol):
    """A backend that gives attention weights over prompt + answer (``rauq``,
    ``attention_score``; capability ``attentions``)."""

    def attention_diagonals(self, prompts: list[Prompt], answers: list[list[int]], *,
                            thinking: bool = False) -> list[tuple[int, Any]]:
        """Per (prompt, answer): the prompt's length :math:`p` and an array (layers, heads,
        :math:`p + T`) of each position's attention to itself; ``thinking``: the prompt
        rendered as a reasoning run renders it."""
        ...


@runtime_checkable
class ScoresContinuation(Protocol):
    """A backend that teacher-forces chosen tokens after a generation's own prompt and a
    context (``cued_answer_logprob``; ``hf``:
    :meth:`~confide.backends.hf.passes.ExtraPasses.continuation_logprobs`)."""

    def cue_and_answer_ids(self, cue: str, answer: str) -> tuple[list[int], list[int]]:
        """Token ids of ``cue + answer`` read together, split where the answer's begin."""
        ...

    def continuation_logprobs(self, prompts: list[Prompt], contexts: list[list[int]],
                              continuations: list[list[int]], *, thinking: bool = False
                              ) -> list[Any]:
        """Per (prompt, context, continuation): a float64 array of each continuation
        token's log-probability after the prompt (``thinking``: as a reasoning run renders
        it) and the context."""
        ...


def item_seed(run_seed: int, item_id: str) -> int:
    """A 63-bit seed derived from (run seed, item id) only."""
    digest = hashlib.sha256(f"{run_seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def takes_thinking(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template has a thinking mode it turns on and off by
    ``enable_thinking`` (Qwen3's, and templates written after it). The bundled models'
    templates (SmolLM2-135M, gemma3-270m) do not: with them a reasoning run asks for a
    trace in the prompt itself (``--prompt cot``)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: any of them
        template = " ".join(str(t) for t in template.values())
    return isinstance(template, str) and "enable_thinking" in template


def encode_prompt(tokenizer: Any, prompt: Prompt, *, thinking: bool = False) -> list[int]:
    """Token ids of a prompt for a local tokenizer (``hf`` and ``vllm`` alike): chat
    messages through the tokenizer's chat template with the generation prompt, text as is.

    ``thinking``: render the chat template with ``enable_thinking=True`` where it takes
    it (:func:`takes_thinking`); a template without a thinking mode is rendered as
    always (the bundled models': their replies hold a trace only when the prompt asks
    for one)."""
    if isinstance(prompt, list):
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidInputError(
                "chat messages given but the model's tokenizer has no chat template",
                field="prompt")
        extra = {"enable_thinking": True} if thinking and takes_thinking(tokenizer) else {}
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False,
                                             **extra)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def opens_trace(tokenizer: Any, prompt_ids: list[int], tags: tuple[str, str]) -> bool:
    """Whether encoded prompt ids end with the opening tag ``tags[0]`` (white space aside):
    the reply then starts inside a trace and is marked ``Generation.trace_opened``
    (:func:`~confide.core.reasoning.prompt_opens_trace`). The tail is decoded with its
    special tokens, since a tag may be one (Qwen3's ``<think>``)."""
    tail = tokenizer.decode(prompt_ids[-16:], skip_special_tokens=False)
    return prompt_opens_trace(tail, tags)
