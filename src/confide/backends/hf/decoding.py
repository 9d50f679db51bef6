"""The hf backend's decoding loop: continuous batching over a shared key/value cache.

:meth:`DecodingLoop.generate` turns each question into rows (its greedy row and
its k sampled rows, each sampled row with its own seeded generator) and
:meth:`DecodingLoop._decode` runs them: a question's prompt is encoded once
(``batch_size`` questions per prefill, a prompt prefix they share encoded once
for all) and its cache copied to each of its rows; a row that finished leaves
the batch at once and a waiting row takes its place, caches of different widths
left-padded and stacked. Each step's logits are reduced to the statistics of
:mod:`~confide.backends.hf.steps` and dropped.

A reasoning run (``spec.reasoning_tags`` set) renders a chat template's thinking mode on
(:meth:`~confide.backends.hf.HFBackend.generation_prompt`); where the rendered prompt ends
with the opening tag (:func:`~confide.core.reasoning.prompt_opens_trace`) every reply of
it is marked ``trace_opened``, so a reply cut before its closing tag is a trace with no
final answer (:func:`~confide.core.reasoning.split_reasoning`). Pooled hidden states are
those of the final answer's tokens alone, never the trace's (:meth:`DecodingLoop._finish`).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from confide.backends.base import (
    GenerationResult,
    GenerationSpec,
    Prompt,
    TokenCallback,
    TokenEvent,
    opens_trace,
)
from confide.backends.hf.cache import cache_from, gather_columns, key_values, select_rows
from confide.backends.hf.steps import N_STEP_STATISTICS, choose_tokens, step_statistics
from confide.core.reasoning import split_reasoning
from confide.core.records import Generation

__all__ = ["MIN_SHARED_PREFIX", "DecodingLoop", "common_prefix"]

#: Prompts of one prefill that open with at least this many equal tokens encode them once.
MIN_SHARED_PREFIX = 16


@dataclass
class _Row:
    """One sequence being decoded: a question, greedy or sampled, and what it produced."""

    question: int                      # index into the prompts of this generate call
    generator: torch.Generator | None  # None = greedy
    ids: list[int] = field(default_factory=list)
    done: bool = False
    finish: str = "length"
    slot: int = -1                     # its place in the statistics buffers while decoding
    closing: bool = False              # done; one more pass for its last token's state
    trace_opened: bool = False         # its prompt ended with the reasoning opening tag


@dataclass
class _Batch:
    """The rows decoding together: their shared key/value cache and where each stands."""

    rows: list[int] = field(default_factory=list)  # indices into the call's rows
    cache: Any = None
    mask: torch.Tensor | None = None       # (rows, cache width): 1 on real tokens
    positions: torch.Tensor | None = None  # (rows, 1): position of each row's last token
    tokens: torch.Tensor | None = None     # (rows,): each row's last chosen token

    def select(self, keep: list[int], device: str) -> None:
        """Keep only the rows at ``keep`` (positions in the batch)."""
        self.rows = [self.rows[b] for b in keep]
        if not keep:
            self.cache = self.mask = self.positions = self.tokens = None
            return
        # rows remain, so mask, positions and tokens are set
        assert self.mask is not None and self.positions is not None and self.tokens is not None
        index = torch.tensor(keep, device=device)
        select_rows(self.cache, index)
        self.mask, self.positions = self.mask[index], self.positions[index]
        self.tokens = self.tokens[index]


@dataclass
class _Prefill:
    """Prompts encoded in one pass, whose cache the rows of their questions copy."""

    cache: Any
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (questions, heads, width, dim)
    mask: torch.Tensor                           # (questions, width)
    positions: torch.Tensor                      # (questions, 1): each prompt's last position
    logits: torch.Tensor                         # (questions, vocab): float32, next token
    hidden: torch.Tensor | None                  # (questions, chosen layers, hidden size)
    index: dict[int, int]                        # question → its row here


class _Buffers:
    """Statistics of the decoding rows, one slot per row; a finished row frees its slot."""

    def __init__(self, slots: int, steps: int, k: int, hidden: tuple[int, int] | None,
                 device: str) -> None:
        self.stats = torch.zeros((slots, steps, N_STEP_STATISTICS), device=device)
        self.top_lp = torch.zeros((slots, steps, k), device=device)
        self.top_ids = torch.zeros((slots, steps, k), dtype=torch.long, device=device)
        # one step more: a row's last answer token gets its state in a closing pass
        self.hidden = (torch.zeros((slots, steps + 1, *hidden), device=device)
                       if hidden else None)
        self._free = list(range(slots - 1, -1, -1))

    def claim(self) -> int:
        return self._free.pop()

    def record(self, slots: torch.Tensor, steps: torch.Tensor, stats: torch.Tensor,
               top_lp: torch.Tensor | None, top_ids: torch.Tensor | None,
               hidden: torch.Tensor | None) -> None:
        """Write one step of each row at (its slot, its step)."""
        if self.hidden is not None and hidden is not None:
            self.hidden[slots, steps] = hidden
        writing = steps < self.stats.shape[1]  # a closing pass has no token statistics
        slots, steps, stats = slots[writing], steps[writing], stats[writing]
        self.stats[slots, steps] = stats
        if top_lp is not None and top_ids is not None:
            self.top_lp[slots, steps] = top_lp[writing]
            self.top_ids[slots, steps] = top_ids[writing]

    def release(self, slot: int, n: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The first ``n`` steps of ``slot`` (copied out), and the slot freed."""
        got = (self.stats[slot, :n].cpu().numpy().copy(),
               self.top_lp[slot, :n].cpu().numpy().copy(),
               self.top_ids[slot, :n].cpu().numpy().copy(),
               # states up to the one of token n - 1 (at buffer step n)
               None if self.hidden is None else self.hidden[slot, :n + 1].cpu().numpy().copy())
        self._free.append(slot)
        return got


class DecodingLoop:
    """Generation of :class:`~confide.backends.hf.HFBackend` (a mixin of it)."""

    if TYPE_CHECKING:  # what this mixin uses of HFBackend, declared for the type checker
        model: Any
        tokenizer: Any
        device: str
        batch_size: int
        _eos_ids: set[int]
        _prefix: tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None

        def generation_prompt(self, prompt: Prompt, *, thinking: bool = False
                              ) -> list[int]: ...
        def _piece(self, token_id: int) -> str: ...
        def rows_per_step(self, context: int, wanted: int) -> int: ...
        def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor,
                     positions: torch.Tensor, cache: Any, want_hidden: bool
                     ) -> tuple[torch.Tensor, Any, Any]: ...
        def _left_padded(self, prompts: list[list[int]]
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def generate(self, prompts: list[Prompt], spec: GenerationSpec, seeds: list[int], *,
                 on_token: TokenCallback | None = None) -> list[GenerationResult]:
        # a reasoning run renders a chat template's thinking mode on, where it has one
        encoded = [self.generation_prompt(p, thinking=spec.reasoning_tags is not None)
                   for p in prompts]
        results = [GenerationResult(greedy=None) for _ in prompts]
        rows = self._rows(len(encoded), spec, seeds)
        if spec.reasoning_tags is not None:
            opened = [self.opens_trace(ids, spec.reasoning_tags) for ids in encoded]
            for row in rows:
                row.trace_opened = opened[row.question]
        step_hook = None if on_token is None else self._step_hook(rows, on_token)
        for row, gen in zip(rows, self._decode(rows, encoded, spec, step_hook), strict=True):
            if row.generator is None:
                results[row.question].greedy = gen
            else:
                results[row.question].samples.append(gen)
        return results

    def opens_trace(self, prompt_ids: list[int], tags: tuple[str, str]) -> bool:
        """Whether the encoded prompt ends with the opening tag ``tags[0]`` (white space
        aside): the reply then starts inside a trace
        (:func:`~confide.core.reasoning.prompt_opens_trace`). Special tokens are kept: a
        tag may be one (Qwen3's ``<think>``)."""
        return opens_trace(self.tokenizer, prompt_ids, tags)

    @staticmethod
    def _rows(n_questions: int, spec: GenerationSpec, seeds: list[int]) -> list[_Row]:
        """Each question's greedy row, then its samples; sample j of question i draws
        from seed ``seeds[i] + j``."""
        rows = []
        for i in range(n_questions):
            if spec.greedy:
                rows.append(_Row(i, None))
            rows += [_Row(i, torch.Generator(device="cpu").manual_seed((seeds[i] + j) % 2**63))
                     for j in range(spec.n_samples)]
        return rows

    # -- streaming hook (confide.pipeline.streaming): one call a token; a reason ends the row

    def _step_hook(self, rows: list[_Row], on_token: TokenCallback) -> Any:
        """Adapt ``on_token`` to the decoding loop: number each question's samples in
        row order and report tokens as :class:`TokenEvent` (``trace_opened`` where the
        row's prompt opened the trace: the stream and the live stop read its reply as a
        trace from its first token)."""
        sample_of: dict[int, int | None] = {}
        count: Counter[int] = Counter()
        for row in rows:
            if row.generator is None:
                sample_of[id(row)] = None
                continue
            sample_of[id(row)] = count[row.question]
            count[row.question] += 1

        def hook(row: _Row, stats: list[float], top: tuple[list[float], list[int]] | None
                 ) -> str | None:
            token = row.ids[-1]
            alternatives = () if top is None else tuple(
                (self._piece(t), v) for v, t in zip(*top, strict=True))
            return on_token(TokenEvent(
                row.question, sample_of[id(row)],
                self.tokenizer.decode(row.ids, skip_special_tokens=True), self._piece(token),
                stats[0], stats[1], alternatives, trace_opened=row.trace_opened))

        return hook

    # -- scheduling: which rows decode together ------------------------------------

    @torch.inference_mode()
    def _decode(self, rows: list[_Row], encoded: list[list[int]], spec: GenerationSpec,
                on_step: Any = None) -> list[Generation]:
        """Decode ``rows``, at most :meth:`rows_per_step` in a step; one generation per row.

        Continuous batching: rows enter in their order as places free up. A
        question's prompt is prefilled once (``batch_size`` questions per pass,
        ahead of need) and its key/value cache copied to each of its rows as it
        enters; a finished row leaves at once and a waiting row takes its place,
        so a step is never held by the longest answer. The schedule depends only
        on the prompts, the spec and the row limit, never on timing.
        """
        if not rows:
            return []
        n_questions = len({r.question for r in rows})
        context = max(len(encoded[r.question]) for r in rows) + spec.max_new_tokens
        limit = self.rows_per_step(context, min(n_questions, self.batch_size)
                                   * math.ceil(len(rows) / n_questions))
        paddable = self._paddable(context + spec.max_new_tokens)
        want_hidden = bool(spec.hidden_layers)
        out = _Buffers(limit, spec.max_new_tokens, spec.top_k_alternatives,
                       (len(spec.hidden_layers), self.model.config.hidden_size)
                       if want_hidden else None, self.device)
        waiting = deque(range(len(rows)))
        batch = _Batch()
        prefills: dict[int, _Prefill] = {}  # question → the pass holding its prompt cache
        pending = Counter(r.question for r in rows)  # rows of each question not yet entered
        results: list[Generation | None] = [None] * len(rows)
        while waiting or batch.rows:
            logits = hidden = None
            if batch.rows:
                assert batch.tokens is not None  # a batch with rows has their last tokens
                logits, batch.cache, layers = self._forward(
                    batch.tokens[:, None], batch.mask, batch.positions, batch.cache, want_hidden)
                hidden = _chosen_layers(layers, spec.hidden_layers)
            if waiting and len(batch.rows) < limit and (paddable or not batch.rows):
                logits, hidden = self._admit(batch, logits, hidden, waiting, rows, encoded,
                                             prefills, pending, limit, paddable, spec, out)
            chosen = choose_tokens(logits, [rows[i].generator for i in batch.rows], spec)
            slots = torch.tensor([rows[i].slot for i in batch.rows], device=self.device)
            steps = torch.tensor([len(rows[i].ids) for i in batch.rows], device=self.device)
            step_stats, top_values, top_ids = step_statistics(logits, chosen, spec)
            out.record(slots, steps, step_stats, top_values, top_ids, hidden)
            if on_step is not None:  # streaming hook: this step's statistics, on the CPU
                hook_stats = step_stats.tolist()
                hook_top = (top_values.tolist(), top_ids.tolist()) \
                    if top_values is not None and top_ids is not None else None
            keep = []
            for b, (i, token) in enumerate(zip(batch.rows, chosen.tolist(), strict=True)):
                row = rows[i]
                if row.closing:  # this pass gave its last token's state; nothing drawn
                    results[i] = self._finish(row, spec, *out.release(row.slot, len(row.ids)))
                    continue
                row.ids.append(token)
                if token in self._eos_ids or (spec.stop and self._hit_stop(row.ids, spec.stop)):
                    row.done, row.finish = True, "stop"
                elif on_step is not None and (reason := on_step(
                        row, hook_stats[b],
                        None if hook_top is None else (hook_top[0][b], hook_top[1][b]))):
                    row.done, row.finish = True, reason  # the hook ended this row
                elif len(row.ids) < spec.max_new_tokens:
                    keep.append(b)
                    continue
                if want_hidden and self._trim(row.ids, spec)[1] == len(row.ids):
                    # The state *of* the last answer token comes from the pass that reads
                    # it: stay in the batch for one closing pass.
                    row.closing = True
                    keep.append(b)
                    continue
                results[i] = self._finish(row, spec, *out.release(row.slot, len(row.ids)))
            batch.tokens = chosen
            if len(keep) < len(batch.rows):  # finished rows leave the batch
                batch.select(keep, self.device)
            if batch.rows:
                # rows remain, so mask and positions are set
                assert batch.mask is not None and batch.positions is not None
                batch.mask = torch.cat([batch.mask, batch.mask.new_ones((len(batch.rows), 1))],
                                       dim=-1)
                batch.positions = batch.positions + 1
        return [g for g in results if g is not None]

    def _admit(self, batch: _Batch, logits: torch.Tensor | None, hidden: torch.Tensor | None,
               waiting: deque[int], rows: list[_Row], encoded: list[list[int]],
               prefills: dict[int, _Prefill], pending: Counter[int], limit: int,
               paddable: bool, spec: GenerationSpec, out: _Buffers
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Move waiting rows into the batch while places are free.

        Returns the logits (and chosen hidden layers) of every row in the batch:
        those of the rows already there, then the prompt's last position for
        each row that entered. Where caches of different widths cannot be
        padded together (:meth:`_paddable`), rows enter only an empty batch.
        """
        enter: list[int] = []
        while waiting and len(batch.rows) + len(enter) < limit:
            q = rows[waiting[0]].question
            if not paddable and q not in {rows[i].question for i in enter} \
                    and len({rows[i].question for i in enter}) == self.batch_size:
                break  # one prefill, no padding: at most batch_size questions
            enter.append(waiting.popleft())
        if not paddable:  # prefill the entering rows' questions now and take that cache
            prefills.clear()
        needed = [q for q in dict.fromkeys(rows[i].question for i in enter) if q not in prefills]
        if needed:
            ahead = list(needed)
            if paddable:  # prefill the next questions too, batch_size per pass
                for i in waiting:
                    if len(ahead) >= self.batch_size:
                        break
                    q = rows[i].question
                    if q not in prefills and q not in ahead:
                        ahead.append(q)
            for start in range(0, len(ahead), self.batch_size):
                chunk = ahead[start:start + self.batch_size]
                made = self._prefill(chunk, encoded, spec.hidden_layers, paddable)
                prefills.update(dict.fromkeys(chunk, made))
        groups: dict[int, list[int]] = {}  # prefill (by id) → rows entering from it
        for i in enter:
            rows[i].slot = out.claim()
            groups.setdefault(id(prefills[rows[i].question]), []).append(i)
        parts = []
        for members in groups.values():
            made = prefills[rows[members[0]].question]
            index = torch.tensor([made.index[rows[i].question] for i in members],
                                 device=self.device)
            parts.append((made, index))
        for i in enter:
            pending[rows[i].question] -= 1
            if not pending[rows[i].question]:
                del prefills[rows[i].question]  # no row needs this prompt's cache again
        new_logits = torch.cat([made.logits[index] for made, index in parts])
        new_hidden = None
        if spec.hidden_layers:
            taken = []
            for made, index in parts:
                assert made.hidden is not None  # a prefill keeps the layers the spec asks for
                taken.append(made.hidden[index])
            new_hidden = torch.cat(taken)
        if not paddable:
            (made, index), = parts
            batch.cache, batch.mask = made.cache, made.mask[index]
            batch.positions = made.positions[index]
            if not torch.equal(index, torch.arange(made.mask.shape[0], device=self.device)):
                select_rows(batch.cache, index)
        else:
            sources = [(key_values(batch.cache), batch.mask, None)] if batch.rows else []
            sources += [(made.kv, made.mask, index) for made, index in parts]
            batch.cache, batch.mask = self._merged(sources)
            batch.positions = torch.cat(([batch.positions] if batch.rows else [])
                                        + [made.positions[index] for made, index in parts])
        batch.rows += enter
        if logits is None:
            return new_logits, new_hidden
        return (torch.cat([logits, new_logits]),
                None if hidden is None else torch.cat([hidden, new_hidden]))

    def _prefill(self, questions: list[int], encoded: list[list[int]],
                 hidden_layers: tuple[int, ...], paddable: bool) -> _Prefill:
        """One forward pass over the (left-padded) prompts of ``questions``.

        Where the prompts open with the same :data:`MIN_SHARED_PREFIX` or more
        tokens (few-shot exemplars, a system prompt) and caches can be padded,
        that common prefix is encoded once for them all (:meth:`_prefix_cache`)
        and only each prompt's remainder is run. The prefix depends only on
        these prompts, so a block's numbers do not depend on what ran before.
        """
        prompts = [encoded[q] for q in questions]
        shared = common_prefix(prompts) if paddable and len(prompts) > 1 else 0
        if shared < MIN_SHARED_PREFIX:
            input_ids, mask, positions = self._left_padded(prompts)
            logits, cache, layers = self._forward(input_ids, mask, positions, None,
                                                  bool(hidden_layers))
            kv = key_values(cache)
        else:
            suffix_ids, suffix_mask, positions = self._left_padded([p[shared:] for p in prompts])
            prefix = self._prefix_cache(tuple(prompts[0][:shared]))
            mask = torch.cat([suffix_mask.new_ones((len(prompts), shared)), suffix_mask], -1)
            cache = cache_from(
                [(k.expand(len(prompts), -1, -1, -1), v.expand(len(prompts), -1, -1, -1))
                 for k, v in prefix], self.model.config)
            logits, cache, layers = self._forward(suffix_ids, mask, positions + shared, cache,
                                                  bool(hidden_layers))
            # the suffixes' padding sits between prefix and suffix: move it to the left
            # end so every row's tokens are contiguous at the right, as _merged expects
            order = torch.argsort(mask, dim=-1, stable=True)
            kv = [(gather_columns(k, order), gather_columns(v, order))
                  for k, v in key_values(cache)]
            mask = mask.gather(-1, order)
            cache = cache_from(kv, self.model.config)
            kv = key_values(cache)
        return _Prefill(cache, kv, mask, mask.sum(-1, keepdim=True) - 1, logits,
                        _chosen_layers(layers, hidden_layers),
                        {q: n for n, q in enumerate(questions)})

    def _prefix_cache(self, prefix: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values) of ``prefix`` alone; the last one is kept, since a
        run's blocks share their few-shot exemplars or system prompt."""

        if self._prefix is None or self._prefix[0] != prefix:
            ids = torch.tensor([prefix], device=self.device)
            _, cache, _ = self._forward(ids, torch.ones_like(ids),
                                        torch.arange(len(prefix), device=self.device)[None],
                                        None, False)
            self._prefix = (prefix, key_values(cache))
        return self._prefix[1]

    def _paddable(self, width: int) -> bool:
        """Whether caches of this model up to ``width`` tokens can be left-padded and
        stacked: every layer a plain dynamic one, or a sliding-window one whose
        window ``width`` never fills (it would have dropped tokens)."""
        from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

        try:
            layers = DynamicCache(config=self.model.config).layers
        except (TypeError, ValueError, KeyError):
            return False
        return bool(layers) and all(
            type(layer) is DynamicLayer
            or (type(layer) is DynamicSlidingWindowLayer and width < layer.sliding_window - 1)
            for layer in layers)

    def _merged(self, sources: list[tuple[list[tuple[torch.Tensor, torch.Tensor]],
                                          torch.Tensor, torch.Tensor | None]]
                ) -> tuple[Any, torch.Tensor]:
        """One cache (and attention mask) stacking the rows of ``sources``.

        Each source is (per-layer keys and values, mask, rows to take or None
        for all). A row's tokens sit at the right end of its cache, so each is
        left-padded (masked) to the longest row's length; columns that are
        padding in every row are cut, so the cache never grows past the
        longest row however long the batch runs.
        """
        width = int(max(int(m.sum(-1).max()) for _, m, _ in sources))

        def fit(t: torch.Tensor, index: torch.Tensor | None, dim: int) -> torch.Tensor:
            """Rows ``index`` of ``t``, cut or left-padded with zeros to ``width`` along ``dim``."""
            t = t if index is None else t[index]
            have = t.shape[dim]
            if have >= width:
                return t.narrow(dim, have - width, width)
            pad = [0, 0] * (t.dim() - 1 - dim % t.dim()) + [width - have, 0]
            return torch.nn.functional.pad(t, pad)

        kv = [(torch.cat([fit(layers[j][0], index, -2) for layers, _, index in sources]),
               torch.cat([fit(layers[j][1], index, -2) for layers, _, index in sources]))
              for j in range(len(sources[0][0]))]
        mask = torch.cat([fit(m, index, -1) for _, m, index in sources])
        return cache_from(kv, self.model.config), mask

    def _hit_stop(self, ids: list[int], stop: tuple[str, ...]) -> bool:
        tail = self.tokenizer.decode(ids[-8:], skip_special_tokens=True)
        return any(s in tail for s in stop)

    def _trim(self, ids: list[int], spec: GenerationSpec) -> tuple[str, int]:
        """The answer text of a finished row and its number of tokens: without the
        end-of-sequence token, cut at the first stop sequence."""
        n = len(ids)
        if n and ids[-1] in self._eos_ids:
            n -= 1  # the end-of-sequence token is not part of the answer
        text = self.tokenizer.decode(ids[:n], skip_special_tokens=True)
        if spec.stop:
            cut = min((text.find(s) for s in spec.stop if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
                # keep the tokens that carry answer text, drop those made only of the stop
                while n and len(self.tokenizer.decode(ids[:n - 1], skip_special_tokens=True)
                                ) >= len(text):
                    n -= 1
        return text, n

    def _finish(self, row: _Row, spec: GenerationSpec, stats: np.ndarray, top_lp: np.ndarray,
                top_ids: np.ndarray, hidden: np.ndarray | None) -> Generation:
        ids = row.ids
        text, n = self._trim(ids, spec)
        gen = Generation(
            text=text.strip(),
            token_ids=ids[:n],
            tokens=[self._piece(t) for t in ids[:n]],
            token_logprobs=stats[:n, 0].astype(np.float32),
            token_entropies=stats[:n, 1].astype(np.float32),
            token_kl_uniform=stats[:n, 2].astype(np.float32),
            token_renyi_uniform=stats[:n, 3].astype(np.float32),
            token_fisher_rao_uniform=stats[:n, 4].astype(np.float32),
            token_boosted_prob=stats[:n, 5].astype(np.float32),
            finish_reason=row.finish,
            trace_opened=row.trace_opened,
        )
        if spec.top_k_alternatives:
            gen.top_logprobs = top_lp[:n].astype(np.float32)
            gen.top_tokens = [[self._piece(t) for t in step] for step in top_ids[:n].tolist()]
        first = 0 if hidden is None else _answer_start(gen, spec)
        if hidden is not None and first < n:
            # hidden[t] is the state of the input at step t: the prompt's last token at
            # step 0, reply token t - 1 after; the reply's own states are 1 .. n, and
            # the final answer's (after a trace of `first` tokens) first + 1 .. n.
            gen.hidden = {}
            for j, layer in enumerate(spec.hidden_layers):
                gen.hidden[f"{layer}:last"] = hidden[n, j].astype(np.float16)
                gen.hidden[f"{layer}:mean"] = hidden[first + 1:n + 1, j].mean(0).astype(
                    np.float16)
        return gen


def _answer_start(gen: Generation, spec: GenerationSpec) -> int:
    """How many of ``gen``'s tokens are its reasoning trace's (0 outside a reasoning run, or
    for a reply without a trace): the pooled hidden states read the final answer after
    them, as every answer-level scorer does (:func:`~confide.core.reasoning.split_reasoning`
    places the cut; a reply that is all trace leaves no answer, and no pooled state)."""
    if spec.reasoning_tags is None:
        return 0
    trace = split_reasoning(gen, spec.reasoning_tags).trace
    return 0 if trace is None else trace.n_tokens


def _chosen_layers(layers: Any, hidden_layers: tuple[int, ...]) -> torch.Tensor | None:
    """(rows, chosen layers, hidden size) float32 states of each row's last position."""
    if not hidden_layers:
        return None
    return torch.stack([layers[j][:, -1, :] for j in hidden_layers], dim=1).float()


def common_prefix(prompts: list[list[int]]) -> int:
    """Tokens all ``prompts`` open with, leaving each at least its last token to run."""
    shared = min(len(p) for p in prompts) - 1
    for n, column in enumerate(zip(*prompts)):
        if n >= shared or len(set(column)) > 1:
            return min(n, shared)
    return max(shared, 0)
