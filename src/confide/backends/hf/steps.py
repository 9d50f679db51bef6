"""What each decoding step computes from its float32 logits.

:func:`step_statistics` reduces the next-token distribution of every row to
the statistics scorers read (chosen-token log-probability, entropy, KL,
Rényi and Fisher–Rao divergences from uniform, the chosen token's BoostedProb
(:func:`boosted_probabilities`), top-k alternatives), so the logits can be
dropped at once; :func:`choose_tokens` picks each row's token:
the argmax for greedy rows, a draw from the nucleus (:func:`nucleus_draw`)
for sampled ones.
"""

from __future__ import annotations

import math

import torch

from confide.backends.base import GenerationSpec
from confide.core.records import (
    BOOSTEDPROB_EPSILON,
    BOOSTEDPROB_JUMP,
    DIVERGENCE_TEMPERATURE,
    RENYI_ALPHA,
)

__all__ = ["BOOSTED_FIRST", "N_STEP_STATISTICS", "boosted_probabilities", "choose_tokens",
           "divergences_from_uniform", "nucleus_draw", "step_statistics"]

# Candidates a nucleus draw looks at before sorting the whole vocabulary (nucleus_draw).
_NUCLEUS_FIRST = 256
#: Per-row columns of step_statistics' first tensor (the Generation columns it fills).
N_STEP_STATISTICS = 6
#: Sorted probabilities that hold every jump of BoostedProb's rule: a jump at position i
#: needs q_i > epsilon, and fewer than 1 / epsilon tokens can exceed epsilon.
BOOSTED_FIRST = math.floor(1 / BOOSTEDPROB_EPSILON) + 1


def step_statistics(logits: torch.Tensor, chosen: torch.Tensor,
                    spec: GenerationSpec
                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Per row: (chosen log p, entropy, KL(U || p), Rényi divergence and Fisher–Rao
    distance of the tempered distribution to uniform, the chosen token's BoostedProb)
    and the top-k log-probabilities and token ids, all from the float32 logits of
    this step.

    One ``topk`` of :data:`BOOSTED_FIRST` (or ``top_k_alternatives``, if more) gives
    both the sorted head BoostedProb's rule reads and the listed alternatives."""
    logp = torch.log_softmax(logits, dim=-1)
    vocab = logp.shape[-1]
    log_vocab = math.log(vocab)
    chosen_logp = logp.gather(-1, chosen[:, None]).squeeze(-1)
    k = spec.top_k_alternatives
    values, indices = logp.topk(min(max(k, BOOSTED_FIRST), vocab), dim=-1)
    stats = torch.stack(
        [chosen_logp,
         torch.special.entr(logp.exp()).sum(-1),  # 0 log 0 = 0 for -inf logits
         -log_vocab - logp.mean(-1), *divergences_from_uniform(logits, log_vocab),
         boosted_probabilities(logp, chosen_logp, values)],
        dim=-1)
    if not k:
        return stats, None, None
    return stats, values[:, :k], indices[:, :k]


def boosted_probabilities(logp: torch.Tensor, chosen_logp: torch.Tensor,
                          head: torch.Tensor | None = None) -> torch.Tensor:
    r"""Per row, BoostedProb of the chosen token under the whole next-token distribution
    (the ``token_boosted_prob`` column of :class:`~confide.core.records.Generation`).

    With the row's probabilities sorted, :math:`q_1 \ge q_2 \ge \dots \ge q_V`,
    position :math:`i` is a jump when :math:`q_i - q_{i+1} > \max(0.3\,q_i,\
    0.005)` (:data:`~confide.core.records.BOOSTEDPROB_JUMP`,
    :data:`~confide.core.records.BOOSTEDPROB_EPSILON`); the dominant tokens are
    those up to the last jump :math:`c` (none without a jump), and

    .. math:: b = \begin{cases} \sum_{j \le c} q_j & p(y) \ge q_c
                  \text{ (the chosen token is dominant)} \\
                  p(y) & \text{otherwise.} \end{cases}

    This is the "difference_jump" rule of BoostedProb (Dinh & Niehues, 2025,
    EMNLP) on the whole distribution, never a truncated list. A jump needs
    :math:`q_i > 0.005`, so a sorted head of values whose last is at most 0.005
    holds every jump: ``head`` (``logp``'s ``topk``, sorted; by default
    :data:`BOOSTED_FIRST` = 201 values, which always suffice since fewer than 200
    probabilities can exceed 0.005) decides, and a row whose head still ends above
    0.005 sorts its whole vocabulary. ``chosen_logp``: each row's chosen token's
    log-probability, read from ``logp`` so that a chosen token at the cut compares
    equal to itself.

    >>> logp = torch.log(torch.tensor([[0.5, 0.4, 0.05, 0.05], [0.5, 0.4, 0.05, 0.05]]))
    >>> [round(b, 6) for b in boosted_probabilities(logp, logp[[0, 1], [2, 1]]).tolist()]
    [0.05, 0.9]
    """
    vocab = logp.shape[-1]
    if head is None or head.shape[-1] < min(BOOSTED_FIRST, vocab):
        head = logp.topk(min(BOOSTED_FIRST, vocab), dim=-1).values
    out = _boosted_sorted(head.exp(), chosen_logp.exp())
    short = head[:, -1].exp() > BOOSTEDPROB_EPSILON
    if head.shape[-1] < vocab and bool(short.any()):  # a jump may lie beyond the head
        whole = logp[short].sort(dim=-1, descending=True).values.exp()
        out[short] = _boosted_sorted(whole, chosen_logp[short].exp())
    return out


def _boosted_sorted(q: torch.Tensor, chosen_p: torch.Tensor) -> torch.Tensor:
    """:func:`boosted_probabilities` from probabilities ``q`` sorted in decreasing order
    that hold every jump."""
    if q.shape[-1] < 2:
        return chosen_p.clone()
    drop = q[:, :-1] - q[:, 1:]
    jumps = (drop > BOOSTEDPROB_JUMP * q[:, :-1]) & (drop > BOOSTEDPROB_EPSILON)
    position = torch.arange(jumps.shape[-1], device=q.device)
    cut = torch.where(jumps, position, -1).amax(-1)  # the last jump; -1: none
    at = cut.clamp(min=0)[:, None]
    mass = q.cumsum(-1).gather(-1, at).squeeze(-1)
    dominant = (cut >= 0) & (chosen_p >= q.gather(-1, at).squeeze(-1))
    return torch.where(dominant, mass, chosen_p)


def choose_tokens(logits: torch.Tensor, generators: list[torch.Generator | None],
                  spec: GenerationSpec) -> torch.Tensor:
    """Greedy rows take the argmax; sampled rows draw from the nucleus (top-p) with
    one uniform number from their own generator per step."""
    chosen = logits.argmax(-1)
    sampled = [b for b, g in enumerate(generators) if g is not None]
    if not sampled:
        return chosen
    probs = torch.softmax(logits[sampled] / max(spec.temperature, 1e-6), dim=-1).cpu()
    draws = torch.cat([torch.rand(1, generator=generators[b]) for b in sampled])
    chosen[sampled] = nucleus_draw(probs, draws, spec.top_p).to(chosen.device)
    return chosen


def nucleus_draw(probs: torch.Tensor, draws: torch.Tensor, top_p: float) -> torch.Tensor:
    """Token ids drawn from each row's nucleus with its uniform number in ``draws``.

    The nucleus is the smallest set of most probable tokens whose mass reaches
    ``top_p`` (always the first token); the draw inverts its cumulative mass
    at ``u * mass``. Sorting the whole vocabulary for every row cost as much
    as the forward pass on a CPU, so rows whose 256 most probable tokens hold
    ``top_p`` (with a margin far above rounding) draw from those alone: their
    sorted values and running sums are exactly the first 256 of a full sort's,
    so the token drawn is the same (only the order among tokens of exactly
    equal probability may differ). The other rows sort the whole vocabulary.
    """
    first = min(_NUCLEUS_FIRST, probs.shape[-1])
    values, order = probs.topk(first, dim=-1)
    enough = values.sum(-1) >= top_p + 1e-3
    if first == probs.shape[-1]:
        enough[:] = True
    picked = torch.empty(len(probs), dtype=torch.long)
    if enough.any():
        picked[enough] = _invert(values[enough], order[enough], draws[enough], top_p)
    if not enough.all():
        rest = ~enough
        sorted_p, full_order = probs[rest].sort(dim=-1, descending=True)
        picked[rest] = _invert(sorted_p, full_order, draws[rest], top_p)
    return picked


def _invert(sorted_p: torch.Tensor, order: torch.Tensor, draws: torch.Tensor,
            top_p: float) -> torch.Tensor:
    """The draw of :func:`nucleus_draw` from probabilities sorted in decreasing order."""
    cumulative = sorted_p.cumsum(-1)
    keep = (cumulative - sorted_p) < top_p
    cumulative = (sorted_p * keep).cumsum(-1)
    u = draws[:, None] * cumulative[:, -1:]
    pos = torch.searchsorted(cumulative, u).clamp(max=cumulative.shape[-1] - 1)
    return order.gather(-1, pos).squeeze(-1)


def divergences_from_uniform(logits: torch.Tensor, log_vocab: float
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Rényi divergence and scaled Fisher–Rao distance from uniform of each row's tempered
    next-token distribution (the ``token_renyi_uniform`` and ``token_fisher_rao_uniform``
    columns of :class:`~confide.core.records.Generation`).

    With :math:`q \propto e^{z/\tau}` and :math:`S = \log\sum_v q(v)^\alpha =
    \mathrm{lse}(\alpha z/\tau) - \alpha\,\mathrm{lse}(z/\tau)`:
    :math:`D_\alpha(q\|U) = \log V + S/(\alpha - 1)` and, with :math:`\alpha = 1/2`
    (then :math:`S` is the log of the Bhattacharyya sum),
    :math:`\sum_v\sqrt{q(v)/V} = e^{S - \frac12\log V}`. Log-sum-exps over
    the logits; nothing of vocabulary size is kept.
    """
    scaled = logits / DIVERGENCE_TEMPERATURE
    full = torch.logsumexp(scaled, -1)
    half = torch.logsumexp(0.5 * scaled, -1) - 0.5 * full  # log sum_v sqrt(q(v))
    s = half if RENYI_ALPHA == 0.5 else \
        torch.logsumexp(RENYI_ALPHA * scaled, -1) - RENYI_ALPHA * full
    renyi = log_vocab + s / (RENYI_ALPHA - 1.0)
    overlap = torch.exp(half - 0.5 * log_vocab).clamp(max=1.0)  # Bhattacharyya coefficient
    return renyi, torch.arccos(overlap) * (2.0 / math.pi)
