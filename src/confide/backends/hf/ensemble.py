r"""Ensemble members as part of a run: every answer scored under every member.

With an ensemble attached (:meth:`HFBackend.use_ensemble
<confide.backends.hf.HFBackend.use_ensemble>`, ``confide run --ensemble DIR``), the
backend's :meth:`~EnsembleScoring.generate` gives each answer its
:class:`~confide.core.records.MemberStatistics` (``Generation.members``), which feed the
``ens_*`` and ``ens_seq_*`` scorers (:mod:`confide.scorers.ensemble`):

1. **The greedy answer.** ``greedy="base"`` (the default): the base model's greedy
   answer, from the ordinary decoding loop, so the answer is the one the deployed base
   model gives and a run with an ensemble grades the same answers as one without. It
   costs one pass less than ``"mean"``: the members only read it. ``greedy="mean"``:
   the greedy answer of the members' mean :math:`\bar p_t = \frac1M \sum_m p_{m,t}`
   (:meth:`EnsembleScoring.mean_greedy`): a separate, slower loop (no continuous
   batching: every question of a block steps until the last one ends) that runs all
   members at every step and keeps their distributions, so the greedy answer needs no
   teacher forcing; its token statistics (``token_logprobs`` ...) are those of
   :math:`\bar p_t`.
2. **The samples** come from the base model's decoding loop (seeded as in any run).
3. **Teacher forcing** (:meth:`EnsembleScoring.teacher_force`): each answer, prompt +
   answer, runs through all members in one expanded batch of ``M`` blocks
   (:meth:`~confide.backends.hf.members.EnsembleMembers.decoder_pass`: members that
   adapt only the top layers share one pass of the lower ones), batched across the
   block's answers. Prompts opening with at least
   :data:`~confide.backends.hf.decoding.MIN_SHARED_PREFIX` equal tokens (few-shot
   exemplars) encode that prefix once (below the members' layers: once for all of
   them; above: once per member), kept across blocks, and each row runs only its
   prompt's remainder and its answer; only the answer positions are projected onto the
   vocabulary, in float32, in chunks of at most :data:`LOGITS_BUDGET` bytes of logits and
   :data:`~confide.backends.hf.members.FORWARD_TOKENS` member row-tokens.
   Each answer's members' log-probabilities :math:`(M, T, V)` become its statistics
   (:func:`member_arrays`: the values of
   :func:`~confide.scorers.ensemble.member_statistics`, summed on the chunk's tensors;
   a backend does not import the scorers).

The base model's own passes (generation, the extra passes of other scorers) are
untouched: the members act only inside these passes.

Cost (``benchmarks/ensembles.py``, ``benchmarks/results/ensembles.md``): teacher forcing
the greedy answers under 4 LoRA members (of every layer, and of the top quarter) against
generating 10 samples with the base.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from confide.backends.base import GenerationResult, GenerationSpec, Prompt, TokenCallback
from confide.backends.hf.cache import cache_from, cache_of, key_values
from confide.backends.hf.decoding import MIN_SHARED_PREFIX, DecodingLoop, common_prefix
from confide.backends.hf.members import FORWARD_TOKENS
from confide.backends.hf.steps import step_statistics
from confide.core.errors import InvalidInputError
from confide.core.records import Generation, MemberStatistics

if TYPE_CHECKING:
    from confide.backends.hf.members import EnsembleMembers

__all__ = ["ENSEMBLE_GREEDY", "LOGITS_BUDGET", "EnsembleScoring", "member_arrays"]

#: Where the greedy answer comes from: the base model's decoding, or the members' mean.
ENSEMBLE_GREEDY = ("base", "mean")
#: Most bytes of float32 logits one teacher-forcing pass holds (rows are chunked to fit).
LOGITS_BUDGET = 256 << 20


class EnsembleScoring:
    """An :class:`~confide.backends.hf.members.EnsembleMembers` in a run: generation with
    every answer's member statistics.

    Parameters
    ----------
    backend : the :class:`~confide.backends.hf.HFBackend` the members are attached to.
    members : the attached members.
    greedy : ``"base"`` (default) or ``"mean"`` (:data:`ENSEMBLE_GREEDY`).
    """

    def __init__(self, backend: Any, members: EnsembleMembers, *, greedy: str = "base"
                 ) -> None:
        if greedy not in ENSEMBLE_GREEDY:
            raise InvalidInputError(f"{greedy!r}: use one of {', '.join(ENSEMBLE_GREEDY)}",
                                    field="ensemble_greedy")
        self.backend, self.members, self.greedy = backend, members, greedy
        self._prefix: tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None \
            = None  # the last shared prompt prefix and each member's keys and values of it

    @classmethod
    def load(cls, backend: Any, path: str | Path, *, greedy: str = "base") -> EnsembleScoring:
        """Attach the members of ensemble directory ``path`` to ``backend``."""
        from confide.backends.hf.members import EnsembleMembers

        if greedy not in ENSEMBLE_GREEDY:  # before the members are attached
            raise InvalidInputError(f"{greedy!r}: use one of {', '.join(ENSEMBLE_GREEDY)}",
                                    field="ensemble_greedy")
        return cls(backend, EnsembleMembers.load(path, backend), greedy=greedy)

    @property
    def path(self) -> Path:
        return self.members.info.path

    def config(self) -> dict[str, Any]:
        """What the run's stored backend configuration says of the ensemble."""
        info = self.members.info
        return {"path": str(info.path), "method": info.method, "members": info.count,
                "greedy": self.greedy, "files": dict(info.files)}

    def close(self) -> None:
        """Remove the members from the model."""
        self._prefix = None
        self.members.close()

    # -- generation ----------------------------------------------------------------------

    def generate(self, prompts: list[Prompt], spec: GenerationSpec, seeds: list[int], *,
                 on_token: TokenCallback | None = None) -> list[GenerationResult]:
        """The backend's generation, every answer with its member statistics."""
        b = self.backend
        if self.greedy == "base" or not spec.greedy:
            results = DecodingLoop.generate(b, prompts, spec, seeds, on_token=on_token)
        else:
            if on_token is not None or spec.hidden_layers:
                raise InvalidInputError(
                    "the ensemble's mean greedy answer is decoded by its own loop, which "
                    "neither streams nor keeps hidden states: use --ensemble-greedy base",
                    field="ensemble_greedy")
            results = DecodingLoop.generate(b, prompts, replace(spec, greedy=False), seeds)
            for result, greedy in zip(results, self.mean_greedy(prompts, spec), strict=True):
                result.greedy = greedy
        encoded = [b.generation_prompt(p, thinking=spec.reasoning_tags is not None)
                   for p in prompts]
        todo: list[tuple[int, Generation]] = []
        for q, result in enumerate(results):
            for gen in [result.greedy, *result.samples]:
                if gen is not None and gen.members is None:
                    todo.append((q, gen))
        stats = self.teacher_force(encoded, [(q, list(g.token_ids or [])) for q, g in todo])
        for (_, gen), s in zip(todo, stats, strict=True):
            gen.members = s
        return results

    # -- teacher forcing -----------------------------------------------------------------

    def teacher_force(self, prompts: Sequence[Sequence[int]],
                      answers: Sequence[tuple[int, Sequence[int]]]) -> list[MemberStatistics]:
        """Each answer's statistics under every member.

        Parameters
        ----------
        prompts : the prompts' token ids.
        answers : ``(prompt index, answer token ids)`` pairs.

        Returns
        -------
        One :class:`~confide.core.records.MemberStatistics` per answer, in order
        (``(M, T)`` log-probabilities and entropies, ``(T,)`` statistics of the mean; an
        empty answer gets ``T = 0``).
        """
        count, method = self.members.count, self.members.method
        out: list[MemberStatistics | None] = [None] * len(answers)
        vocab = int(self.backend._head_weight.shape[0])
        empty = np.zeros((count, 0))
        for i, (_, ids) in enumerate(answers):
            if not ids:
                out[i] = MemberStatistics(logprobs=empty, entropies=empty,
                                          mean_entropy=np.zeros(0),
                                          mean_cross_entropy=np.zeros(0), method=method)
        todo = sorted((i for i in range(len(answers)) if out[i] is None),
                      key=lambda i: len(answers[i][1]))
        used = sorted({answers[i][0] for i in todo})
        shared = 0
        if len(used) and self.backend._paddable(
                max(len(prompts[q]) for q in used) + max(len(answers[i][1]) for i in todo)):
            shared = common_prefix([list(prompts[q]) for q in used]) if len(used) > 1 \
                else len(prompts[used[0]]) - 1
            shared = shared if shared >= MIN_SHARED_PREFIX else 0
        prefix = self._prefix_cache(tuple(prompts[used[0]][:shared])) if shared else None
        start = 0
        def suffix(i: int) -> int:
            return len(prompts[answers[i][0]]) - shared

        while start < len(todo):
            rows, width = 1, suffix(todo[start])
            # rows sorted by length: grow the chunk while its logits and its member
            # row-tokens fit the budgets
            while start + rows < len(todo):
                longest = len(answers[todo[start + rows]][1])
                width = max(width, suffix(todo[start + rows]))
                if count * (rows + 1) * longest * vocab * 4 > LOGITS_BUDGET \
                        or count * (rows + 1) * (width + longest) > FORWARD_TOKENS:
                    break
                rows += 1
            chunk = todo[start:start + rows]
            chosen = [answers[i][1] for i in chunk]
            logp = self._member_logprobs([prompts[answers[i][0]][shared:] for i in chunk],
                                         chosen, prefix, shared)
            width = logp.shape[2]
            ids = torch.tensor([[*a, *[0] * (width - len(a))] for a in chosen])
            lp, ent, mean_ent, mean_ce = member_arrays(logp, ids)
            for r, (i, a) in enumerate(zip(chunk, chosen, strict=True)):
                n = len(a)
                out[i] = MemberStatistics(logprobs=lp[:, r, :n], entropies=ent[:, r, :n],
                                          mean_entropy=mean_ent[r, :n],
                                          mean_cross_entropy=mean_ce[r, :n], method=method)
            start += rows
        return [s for s in out if s is not None]

    def _prefix_cache(self, prefix: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer the (keys, values) of ``prefix``: ``(M, heads, P, dim)``, row ``m``
        member ``m``'s, or ``(1, heads, P, dim)`` below the members' first layer (shared by
        all of them). The last prefix is kept: a run's blocks share it."""
        if self._prefix is None or self._prefix[0] != prefix:
            b = self.backend
            ids = torch.tensor([prefix], device=b.device)
            with torch.inference_mode():
                out = self.members.decoder_pass(ids, torch.ones_like(ids),
                                                torch.arange(len(prefix), device=b.device)[None],
                                                use_cache=True)
            self._prefix = (prefix, key_values(cache_of(out)))
        return self._prefix[1]

    def _member_logprobs(self, suffixes: list[Sequence[int]], answers: list[Sequence[int]],
                         prefix: list[tuple[torch.Tensor, torch.Tensor]] | None, shared: int
                         ) -> torch.Tensor:
        """``(M, R, L, V)`` float32 log-probabilities of ``R`` rows' answer positions.

        Row ``r`` is ``[padding] suffix_r answer_r [padding]``: suffixes left-padded to one
        width ``S`` so that every answer starts at column ``S``; the logits of columns
        ``S - 1 .. S + L - 2`` predict the answer's tokens. With ``prefix``, the ``shared``
        prompt tokens before the suffixes come from each member's cache."""
        b, count = self.backend, self.members.count
        rows, width = len(suffixes), max(len(s) for s in suffixes)
        length = max(len(a) for a in answers)
        ids = torch.full((rows, width + length), b._pad_id, dtype=torch.long)
        mask = torch.zeros((rows, width + length), dtype=torch.long)
        for r, (s, a) in enumerate(zip(suffixes, answers, strict=True)):
            ids[r, width - len(s):width + len(a)] = torch.tensor([*s, *a])
            mask[r, width - len(s):width + len(a)] = 1
        ids, mask = ids.to(b.device), mask.to(b.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + shared
        extra: dict[str, Any] = {"use_cache": False}
        if prefix is not None:
            # the prefix cache for each row: a shared layer's one row to R rows, a member
            # layer's M rows to M·R (member m's for rows m·R .. m·R + R - 1)
            kv = [(k.repeat_interleave(rows, dim=0), v.repeat_interleave(rows, dim=0))
                  for k, v in prefix]
            mask = torch.cat([mask.new_ones((rows, shared)), mask], dim=-1)
            extra = {"use_cache": True, b._cache_kwarg: cache_from(kv, b.model.config)}
        with torch.inference_mode():
            out = self.members.decoder_pass(ids, mask, positions, **extra)
            hidden = out.last_hidden_state[:, width - 1:width - 1 + length, :]
            logp = torch.log_softmax(b.float32_logits(hidden), dim=-1)
        return logp.reshape(count, rows, length, -1).cpu()

    # -- the members' mean greedy answer --------------------------------------------------

    @torch.inference_mode()
    def mean_greedy(self, prompts: list[Prompt], spec: GenerationSpec) -> list[Generation]:
        r"""The greedy answer of the members' mean, :math:`y_t = \arg\max_v \bar p_t(v)`,
        with :math:`\bar p_t = \frac1M\sum_m p_m(\cdot \mid y_{<t}, x)`, one per prompt.

        Its token statistics are those of :math:`\bar p_t` (``log`` of it taken as the
        logits) and its member statistics come from the same steps. ``batch_size``
        questions step together (``M`` rows each, one member's cache per row) until the
        last has ended: simpler and slower than the base's continuous batching.
        """
        b = self.backend
        encoded = [b.generation_prompt(p, thinking=spec.reasoning_tags is not None)
                   for p in prompts]
        out: list[Generation] = []
        for start in range(0, len(encoded), b.batch_size):
            out += self._mean_block(encoded[start:start + b.batch_size], spec)
        return out

    def _mean_block(self, prompts: list[list[int]], spec: GenerationSpec) -> list[Generation]:
        b, count, method = self.backend, self.members.count, self.members.method
        n = len(prompts)
        ids, mask, positions = b._left_padded(prompts)  # the members repeat the rows
        rows_of = [_MeanRow() for _ in range(n)]
        steps: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, MemberStatistics]]] = \
            [[] for _ in range(n)]
        cache = None
        log_m = math.log(count)
        for _ in range(spec.max_new_tokens):
            out = self.members.decoder_pass(ids, mask, positions, use_cache=True,
                                            **{b._cache_kwarg: cache})
            cache = cache_of(out)
            logits = b.float32_logits(out.last_hidden_state[:, -1, :])
            logp = torch.log_softmax(logits, dim=-1).reshape(count, n, -1)
            mean = torch.logsumexp(logp, dim=0) - log_m  # log of the members' mean
            chosen = mean.argmax(-1)
            stats, top_lp, top_ids = step_statistics(mean, chosen, spec)
            k = spec.top_k_alternatives
            for q, row in enumerate(rows_of):
                if row.done:
                    continue
                token = int(chosen[q])
                steps[q].append((
                    stats[q].cpu().numpy(),
                    np.zeros(0) if top_lp is None else top_lp[q].cpu().numpy(),
                    np.zeros(0, dtype=np.int64) if top_ids is None else top_ids[q].cpu().numpy(),
                    _member_step(logp[:, q], token, method)))
                row.ids.append(token)
                if token in b._eos_ids or (spec.stop and b._hit_stop(row.ids, spec.stop)):
                    row.done, row.finish = True, "stop"
            if all(r.done for r in rows_of):
                break
            ids = chosen[:, None]
            mask = torch.cat([mask, mask.new_ones((n, 1))], dim=-1)
            positions = positions[:, -1:] + 1
        gens = []
        for q, row in enumerate(rows_of):
            taken = steps[q]
            stats = np.stack([s[0] for s in taken])
            top_lp = np.stack([s[1] for s in taken]) if k else np.zeros((len(taken), 0))
            top_ids = np.stack([s[2] for s in taken]) if k else np.zeros((len(taken), 0), int)
            gen = b._finish(row, spec, stats, top_lp, top_ids, None)
            kept = len(gen.token_ids or [])
            gen.members = _stacked([s[3] for s in taken[:kept]], count, method)
            gens.append(gen)
        return gens


@dataclass
class _MeanRow:
    """A question's greedy row in the mean's loop (what ``_finish`` reads of a row)."""

    ids: list[int] = field(default_factory=list)
    done: bool = False
    finish: str = "length"
    trace_opened: bool = False  # the mean's loop does not split reasoning traces


def member_arrays(logp: torch.Tensor, ids: torch.Tensor
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""The four member statistics of answers from their members' log-probabilities.

    .. math:: \ell_{m,t} = \log p_{m,t}(y_t), \quad H(p_{m,t}), \quad H(\bar p_t), \quad
              \mathrm{CE}_t = -\textstyle\sum_v \bar p_t(v)\,\tfrac1M\sum_m
              \log p_{m,t}(v), \qquad \bar p_t = \tfrac1M\textstyle\sum_m p_{m,t}

    The same values as :func:`confide.scorers.ensemble.member_statistics` (the tests
    compare them), computed on the tensors of a whole chunk: sums over the vocabulary in
    float64, :math:`0 \log 0 = 0`.

    Parameters
    ----------
    logp : ``(M, R, L, V)`` normalised log-probabilities of ``R`` answers' ``L`` steps.
    ids : ``(R, L)`` the answers' tokens (any id past an answer's end).

    Returns
    -------
    ``logprobs`` and ``entropies`` ``(M, R, L)``, ``mean_entropy`` and
    ``mean_cross_entropy`` ``(R, L)``, float64 numpy arrays.
    """
    p = logp.exp()
    finite = torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))
    entropies = -(p * finite).sum(-1, dtype=torch.float64)
    mean_p = p.mean(0)
    mean_entropy = torch.special.entr(mean_p).sum(-1, dtype=torch.float64)
    mean_ce = -(mean_p * logp.mean(0)).sum(-1, dtype=torch.float64)
    index = ids.to(logp.device)[None, :, :, None].expand(logp.shape[0], -1, -1, 1)
    chosen = logp.gather(-1, index)[..., 0].double()
    return (chosen.cpu().numpy(), entropies.cpu().numpy(), mean_entropy.cpu().numpy(),
            mean_ce.cpu().numpy())


def _member_step(logp: torch.Tensor, token: int, method: str) -> MemberStatistics:
    """One step's member statistics from the members' ``(M, V)`` log-probabilities."""
    lp, ent, mean_ent, mean_ce = member_arrays(logp[:, None, None, :],
                                               torch.tensor([[token]]))
    return MemberStatistics(logprobs=lp[:, 0], entropies=ent[:, 0], mean_entropy=mean_ent[0],
                            mean_cross_entropy=mean_ce[0], method=method)


def _stacked(steps: list[MemberStatistics], count: int, method: str) -> MemberStatistics:
    """Steps' one-token statistics as one answer's."""
    if not steps:
        empty = np.zeros((count, 0))
        return MemberStatistics(logprobs=empty, entropies=empty, mean_entropy=np.zeros(0),
                                mean_cross_entropy=np.zeros(0), method=method)

    def cat(name: str, axis: int) -> np.ndarray:
        return np.concatenate([getattr(s, name) for s in steps], axis=axis)

    return MemberStatistics(logprobs=cat("logprobs", 1), entropies=cat("entropies", 1),
                            mean_entropy=cat("mean_entropy", 0),
                            mean_cross_entropy=cat("mean_cross_entropy", 0), method=method)
