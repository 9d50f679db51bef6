"""The forward passes the hf backend runs besides decoding, for scorers that ask again.

* :meth:`ExtraPasses.next_token_logprobs`: the probability of given one-token
  replies after a prompt (``p_true``, the yes/no judges and grader);
* :meth:`ExtraPasses.unconditioned_logprobs`: the answer's tokens after a
  neutral prompt instead of the question (``pmi``, ``cpmi``);
* :meth:`ExtraPasses.attention_diagonals`: each position's attention to itself
  over prompt + answer (``rauq``, ``attention_score``);
* :meth:`ExtraPasses.continuation_logprobs`: chosen tokens after prompt + given
  context, e.g. a reasoning trace and a "Final answer:" cue (``cued_answer_logprob``).

Each is a teacher-forced pass over given tokens, logits projected in float32;
nothing is generated. A pass that reads a generation's own prompt again takes
``thinking``, how that generation rendered it (a reasoning run renders a chat
template's thinking mode on: :meth:`~confide.backends.hf.HFBackend.encode`), so
it reads the very prompt the answer was generated from
(:meth:`~confide.backends.hf.HFBackend.generation_prompt`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from confide.backends.base import Prompt
from confide.core.errors import InvalidInputError

if TYPE_CHECKING:
    from confide.backends.models import ModelSource

__all__ = ["ExtraPasses"]


class ExtraPasses:
    """The extra forward passes of :class:`~confide.backends.hf.HFBackend` (a mixin of it)."""

    if TYPE_CHECKING:  # what this mixin uses of HFBackend, declared for the type checker
        model: Any
        tokenizer: Any
        source: ModelSource
        device: str
        batch_size: int
        has_chat_template: bool
        _decoder: Any
        _eos_ids: set[int]

        def encode(self, prompt: Prompt, *, thinking: bool = False) -> list[int]: ...
        def generation_prompt(self, prompt: Prompt, *, thinking: bool = False
                              ) -> list[int]: ...
        def float32_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...
        def _left_padded(self, prompts: list[list[int]]
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    # -- next-token scoring ------------------------------------------------------

    def candidate_token_id(self, text: str) -> int:
        """The id of ``text`` as one token (no special tokens added).

        Raises :class:`~confide.core.errors.InvalidInputError` when ``text`` is not
        exactly one token of this tokenizer.
        """
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(ids) != 1:
            raise InvalidInputError(f"{text!r} is {len(ids)} tokens for {self.source.name}, "
                                    "not one", field="candidates")
        return int(ids[0])

    @torch.inference_mode()
    def next_token_logprobs(self, prompts: list[Prompt], candidates: list[str]) -> np.ndarray:
        r"""Log-probabilities of single-token ``candidates`` as the next token after each prompt.

        .. math:: L_{ij} = \log p(v_j \mid x_i) = z_{i,v_j} - \log\sum_v e^{z_{i,v}}

        One forward pass over the (left-padded) prompts per batch of
        ``batch_size``; nothing is generated; logits are projected in float32.
        Chat prompts go through the chat template with the generation prompt,
        so the next token is the first token of the assistant's reply.

        Returns an array of shape ``(len(prompts), len(candidates))``.
        """
        ids = [self.candidate_token_id(c) for c in candidates]
        index = torch.tensor(ids, dtype=torch.long, device=self.device)
        encoded = [self.encode(p) for p in prompts]
        out = np.zeros((len(prompts), len(ids)), dtype=np.float64)
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start:start + self.batch_size]
            input_ids, mask, positions = self._left_padded(chunk)
            hidden = self._decoder(input_ids=input_ids, attention_mask=mask,
                                   position_ids=positions, use_cache=False).last_hidden_state
            logp = torch.log_softmax(self.float32_logits(hidden[:, -1, :]), dim=-1)[:, index]
            out[start:start + len(chunk)] = logp.cpu().numpy()
        return out

    # -- the answer scored again -----------------------------------------------

    def cue_and_answer_ids(self, cue: str, answer: str) -> tuple[list[int], list[int]]:
        """Token ids of ``cue + answer`` as the tokenizer reads the two together, split
        where the answer's tokens begin: the first token that holds a character of
        ``answer`` (a space between them is the cue's where it is a token of its own,
        as SmolLM2 writes ``" 6"``, and the answer's where a token joins it, ``" B"``).
        """
        ids = list(self.tokenizer(cue + answer, add_special_tokens=False)["input_ids"])
        k = 0
        while k < len(ids) and len(self.tokenizer.decode(ids[:k + 1])) <= len(cue):
            k += 1
        return ids[:k], ids[k:]

    @torch.inference_mode()
    def continuation_logprobs(self, prompts: list[Prompt], contexts: list[list[int]],
                              continuations: list[list[int]], *, thinking: bool = False
                              ) -> list[np.ndarray]:
        r"""Log-probability of each continuation token after the prompt and a context.

        .. math:: \ell_t = \log p(c_t \mid x, z, c_{<t})

        :math:`x` the prompt's tokens as the generation read them
        (:meth:`~confide.backends.hf.HFBackend.generation_prompt`; ``thinking``: as a
        reasoning run renders it), :math:`z` the context's tokens (a reasoning trace as
        it was generated, then a cue such as ``"\nFinal answer:"``), :math:`c` the
        continuation's. One teacher-forced pass per batch of ``batch_size``
        (left-padded), only the continuation's positions projected, in float32; no cache
        kept. Returns one float64 array of length ``len(continuation)`` per triple, in
        order.

        Raises :class:`~confide.core.errors.InvalidInputError` when the lists differ
        in length, or a continuation is empty, or has nothing before it.
        """
        if not len(prompts) == len(contexts) == len(continuations):
            raise InvalidInputError(f"{len(prompts)} prompts, {len(contexts)} contexts and "
                                    f"{len(continuations)} continuations: give one of each "
                                    "per answer", field="continuations")
        rows = []
        for prompt, context, continuation in zip(prompts, contexts, continuations,
                                                 strict=True):
            head = self.generation_prompt(prompt, thinking=thinking) + list(context)
            if not continuation or not head:
                raise InvalidInputError("a continuation needs at least one token, and a "
                                        "prompt or context before it", field="continuations")
            rows.append((head, list(continuation)))
        out: list[np.ndarray] = []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start:start + self.batch_size]
            input_ids, mask, positions = self._left_padded([h + c for h, c in chunk])
            hidden = self._decoder(input_ids=input_ids, attention_mask=mask,
                                   position_ids=positions, use_cache=False).last_hidden_state
            width = input_ids.shape[1]
            for b, (_, continuation) in enumerate(chunk):
                n = len(continuation)
                logp = torch.log_softmax(self.float32_logits(hidden[b, width - n - 1:width - 1]),
                                         dim=-1)
                index = torch.tensor(continuation, dtype=torch.long, device=self.device)[:, None]
                out.append(logp.gather(-1, index).squeeze(-1).double().cpu().numpy())
        return out

    def neutral_prompt(self, chat: bool | None = None) -> list[int]:
        """Token ids of a prompt without a question, for scoring an answer unconditioned.

        ``chat`` says how the answer's own prompt was given (default: as chat
        when the model has a chat template), so the neutral prompt matches it.
        Chat: the template around one empty user message (with the generation
        prompt and any default system message of the template), so the answer
        still sits in the assistant's turn. A completion prompt (TriviaQA's
        k-shot text): the empty text as the tokenizer encodes any text prompt,
        i.e. its start-of-sequence token where the tokenizer puts one before
        every text (Llama's ``<s>``: the answer's own prompt began with it too);
        where it puts none, a newline. Never the tokenizer's ``bos_token``
        alone: SmolLM2-Instruct names ``<|im_start|>``, the marker that opens a
        chat turn, which no completion prompt contains, and its end-of-sequence
        token ``<|im_end|>`` closes one; reading the answer's first token after
        either would measure a chat role, not "no question".

        LM-Polygraph (``GreedyLMProbsCalculator``) instead re-tokenizes the
        decoded answer alone (special tokens as its tokenizer adds them, none
        for SmolLM2) and reads each token's probability one position late, so
        its first token has no unconditioned term (see ``pmi``).
        """
        if self.has_chat_template if chat is None else chat:
            return self.encode([{"role": "user", "content": ""}])
        return self.encode("") or self.encode("\n")

    @torch.inference_mode()
    def unconditioned_logprobs(self, answers: list[list[int]], *, chat: bool | None = None
                               ) -> list[np.ndarray]:
        r"""Log-probability of each answer token without the question.

        .. math:: u_t = \log p(y_t \mid n, y_{<t})

        :math:`n` is :meth:`neutral_prompt` (``chat``: as the answer's prompt was
        given). One teacher-forced forward pass
        per batch of ``batch_size`` answers (left-padded), float32 logits, no
        cache kept. Returns one float64 array of length ``len(answer)`` per
        answer, in order.
        """
        neutral = self.neutral_prompt(chat)
        out: list[np.ndarray] = []
        for start in range(0, len(answers), self.batch_size):
            chunk = [list(a) for a in answers[start:start + self.batch_size]]
            input_ids, mask, positions = self._left_padded([neutral + a for a in chunk])
            hidden = self._decoder(input_ids=input_ids, attention_mask=mask,
                                   position_ids=positions, use_cache=False).last_hidden_state
            width = input_ids.shape[1]
            for b, answer in enumerate(chunk):
                n = len(answer)
                logp = torch.log_softmax(self.float32_logits(hidden[b, width - n - 1:width - 1]),
                                         dim=-1)
                index = torch.tensor(answer, dtype=torch.long, device=self.device)[:, None]
                out.append(logp.gather(-1, index).squeeze(-1).double().cpu().numpy())
        return out

    @torch.inference_mode()
    def attention_diagonals(self, prompts: list[Prompt], answers: list[list[int]], *,
                            thinking: bool = False) -> list[tuple[int, np.ndarray]]:
        r"""Each position's attention to itself, per layer and head, over prompt + answer.

        .. math:: d_{l,h,i} = A^{(l,h)}_{i,i}, \qquad
                  A^{(l,h)} = \mathrm{softmax}\big(Q K^\top/\sqrt{d} + M\big)

        from one teacher-forced forward pass over the prompt's tokens
        followed by the answer's. Returns, per (prompt, answer), the prompt's
        length :math:`p` and a float32 array of shape (layers, heads,
        :math:`p + T`). In the decoding loop the step that chose answer token
        :math:`y_j` ran its query at position :math:`p + j - 1` (the token
        :math:`y_{j-1}`), so :math:`d_{l,h,p+j-1}` is the weight that step gave
        the token just generated. The prompt is read as the generation read it
        (:meth:`~confide.backends.hf.HFBackend.generation_prompt`; ``thinking``: as a
        reasoning run renders it).

        Attention weights need the eager attention kernel: the model is
        switched to it for this pass alone and back afterwards, so the
        decoding loop keeps its faster kernel; a ``generate`` running at the
        same time in another thread would decode those steps with the eager
        kernel (the same numbers to rounding). One sequence per pass: all
        layers' :math:`(p+T)^2` weights are held at once.
        """
        previous = self.model.config._attn_implementation
        out: list[tuple[int, np.ndarray]] = []
        self.model.set_attn_implementation("eager")
        try:
            for prompt, answer in zip(prompts, answers, strict=True):
                prompt_ids = self.generation_prompt(prompt, thinking=thinking)
                ids = torch.tensor([prompt_ids + list(answer)], device=self.device)
                attentions = self._decoder(input_ids=ids, use_cache=False,
                                           output_attentions=True).attentions
                diagonal = torch.stack([a[0].diagonal(dim1=-2, dim2=-1) for a in attentions])
                out.append((len(prompt_ids), diagonal.float().cpu().numpy()))
        finally:
            self.model.set_attn_implementation(previous)
        return out
