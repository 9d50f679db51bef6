r"""What an answer's top-k log-probabilities give: the one rule for every path.

A source that lists, for each answer token, the chosen token's log-probability and
the top-k alternatives, but not the whole next-token distribution, is an
OpenAI-compatible server (the ``openai`` backend), vLLM (the ``vllm`` backend) or a
saved log of either (``confide score``: :mod:`confide.ingest`). Whatever the path
(generated, imported, served), such an answer holds exactly:

- ``token_logprobs`` and ``top_logprobs`` / ``top_tokens``, as listed;
- ``token_entropies`` as **lower bounds from the top-k** (:func:`entropy_lower_bound`),
  derived here, by :func:`topk_entropies` (from a
  :class:`~confide.core.records.Generation`'s own top-k: the ``openai`` backend and the
  ``openai`` log reader), :func:`entropy_lower_bounds` (from each step's ranked
  alternatives: the other log readers) or :func:`ranked_entropy_lower_bound` (a step
  listed with vLLM's ranks: the ``vllm`` backend, and the ``vllm`` reader's top-k by
  :func:`contiguous_ranks`);
- never ``token_kl_uniform``, ``token_renyi_uniform`` or ``token_fisher_rao_uniform``:
  they need every token's probability. The entropy has a lower bound from the top-k
  that needs no vocabulary size; self-certainty (KL from uniform) has none that keeps
  the order of the true values (:func:`confide.backends.vllm.topk_statistics`), so no
  path adds it.

So the ``openai`` backend, the ``vllm`` backend and every log reader give an answer
the same statistics (:data:`TOPK_STATISTICS`), and the same scorers run on it
(``tests/test_statistics_paths.py``). The bounds hold only when the listed
alternatives are the model's own top-k, which is what OpenAI-compatible servers, vLLM
and llama.cpp's ``top_logprobs`` give.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from confide.core.needs import Need
from confide.core.records import Generation

__all__ = ["TOPK_STATISTICS", "contiguous_ranks", "entropy_lower_bound", "entropy_lower_bounds",
           "entropy_note", "ranked_entropy_lower_bound", "set_apart", "topk_entropies"]

#: The token statistics an answer with top-k log-probabilities holds, whatever its path.
TOPK_STATISTICS = frozenset({Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS, Need.TOKEN_ENTROPIES})

# One step: (its top-k log-probabilities, other known log-probabilities, e.g. the chosen
# token's when it ranks below the top-k).
Ranked = tuple[Sequence[float], Sequence[float]]


def entropy_lower_bound(top: Sequence[float], known: Sequence[float] = ()) -> float:
    r"""The lower bound of one step's entropy from its top-k log-probabilities.

    With :math:`S` the top-k and the ``known`` log-probabilities, :math:`p_i =
    e^{\ell_i}`, :math:`R = \max(0, 1 - \sum_S p_i)` the unseen mass and
    :math:`p_{(k)}` the least of the top-k (each unseen token is at most as likely):

    .. math:: H \ge -\sum_{i \in S} p_i \log p_i + R\,\log\frac{1}{p_{(k)}}

    (each unseen :math:`q \le p_{(k)}` gives :math:`-q \log q \ge -q \log p_{(k)}`); no
    vocabulary size is needed. It is :func:`confide.backends.vllm.topk_statistics`'
    ``H_lo``, in plain Python: a step has a handful of values, for which numpy's per-call
    cost was most of a log's reading time (``benchmarks/import_speed.py``).
    Log-probabilities of :math:`-\infty` are no alternatives and are left out.

    >>> round(entropy_lower_bound([math.log(.5), math.log(.25)]) / math.log(2), 6)
    1.5

    Raises ``ValueError`` when no top-k log-probability is finite.
    """
    finite = [v for v in top if v > -math.inf]
    if not finite:
        raise ValueError("no top-k log-probability of non-zero probability")
    seen = 0.0
    mass = 0.0
    for value in itertools.chain(finite, (v for v in known if v > -math.inf)):
        p = math.exp(value)
        mass += p
        seen -= p * value
    tail = 1.0 - mass
    return seen + tail * -min(finite) if tail > 0.0 else seen


def entropy_note(widths: Iterable[int]) -> dict[str, str]:
    """The ``approximate`` note of entropies bounded from top-k lists of these widths."""
    found = set(widths)
    if not found:
        return {}
    lo, hi = min(found), max(found)
    shown = str(lo) if lo == hi else f"{lo} to {hi}"
    return {Need.TOKEN_ENTROPIES.value:
            f"lower bounds from the top {shown} log-probabilities of each token"}


def entropy_lower_bounds(steps: Iterable[Ranked]) -> tuple[np.ndarray | None, dict[str, str]]:
    """Per-token entropy lower bounds of an answer from each step's ``(top-k, known)``,
    and their note.

    None (and no note) when some step has no alternative of non-zero probability; an
    empty array for no steps.
    """
    values = []
    widths = []
    for top, known in steps:
        finite = [v for v in top if v > -math.inf]
        if not finite:
            return None, {}
        values.append(entropy_lower_bound(finite, known))
        widths.append(len(finite))
    if not widths:
        return np.zeros(0, dtype=np.float32), {}
    return np.asarray(values, dtype=np.float32), entropy_note(widths)


def set_apart(token: str, logprob: float | None, top: Sequence[tuple[str, float]], *,
              extra_possible: bool = False) -> tuple[list[tuple[str, float]], list[float]]:
    """``(top-k, other known log-probabilities)`` of one step: its listed alternatives
    ``(token, log p)``, best first, and the chosen ``token``'s ``logprob``.

    With ``extra_possible`` the list may hold the chosen token *beyond* the top-k (an API
    that always adds the sampled token and gives no ranks): when the chosen token is the
    least likely entry of two or more it is set apart, so that the rest is surely a
    top-k (setting apart a true k-th token only loosens the bound). A chosen token not
    listed is known beyond the top-k.

    >>> set_apart("b", -3.0, [("a", -0.1), ("b", -3.0)], extra_possible=True)
    ([('a', -0.1)], [-3.0])
    >>> set_apart("c", -4.0, [("a", -0.1), ("b", -3.0)])
    ([('a', -0.1), ('b', -3.0)], [-4.0])
    """
    listed = list(top)
    if (extra_possible and len(listed) >= 2 and listed[-1][0] == token
            and logprob is not None and listed[-1][1] <= min(v for _, v in listed)):
        return listed[:-1], [listed[-1][1]]
    if logprob is not None and all(t != token for t, _ in listed):
        return listed, [logprob]
    return listed, []


def contiguous_ranks(ranks: Sequence[int | None]) -> list[int] | None:
    """Positions (in ``ranks``) of the top-k of one step listed with ranks, best first.

    vLLM lists the top-K by rank and adds the sampled token with its own rank when it
    ranks below them: the top-k are the entries ranked 1, 2, ... without a gap, so a
    sampled token ranked K + 1 is the true (K + 1)-th and joins them, one ranked lower
    does not. None when some entry has no rank.

    >>> contiguous_ranks([2, 1, 9])
    [1, 0]
    >>> contiguous_ranks([2, 1, 3]), contiguous_ranks([1, None])
    ([1, 0, 2], None)
    """
    if any(r is None for r in ranks):
        return None
    order = sorted(range(len(ranks)), key=lambda i: ranks[i])  # type: ignore[arg-type, return-value]
    top = []
    for position, i in enumerate(order, start=1):
        if ranks[i] != position:
            break
        top.append(i)
    return top


def ranked_entropy_lower_bound(entries: Sequence[tuple[float, int | None]],
                               chosen: float | None = None, *, k: int | None = None) -> float:
    """The entropy lower bound of one step listed as ``(log p, rank)`` entries (vLLM's).

    The top-k are the entries ranked ``1..k`` when ``k`` (how many vLLM was asked for)
    is known, as in the ``vllm`` backend; else, as in a dump read by the ``vllm`` log
    reader, those :func:`contiguous_ranks` picks (the two differ only when the sampled
    token ranks exactly ``k + 1``: the dump's bound is then the tighter, both hold). The
    others are known below them. Without ranks every entry is an alternative, but a
    ``chosen`` log-probability that is the least of two or more is set apart
    (:func:`set_apart`).

    >>> round(entropy_lower_bound([math.log(.5)], [math.log(.25)]), 6) == round(
    ...     ranked_entropy_lower_bound([(math.log(.25), 5), (math.log(.5), 1)]), 6)
    True
    """
    at = contiguous_ranks([rank for _, rank in entries])
    if at is not None and k is not None:
        at = at[:k]
    if at is None:
        listed = sorted((v for v, _ in entries), reverse=True)
        if chosen is not None and len(listed) >= 2 and chosen <= listed[-1]:
            return entropy_lower_bound(listed[:-1], listed[-1:])
        return entropy_lower_bound(listed, [] if chosen is None or chosen in listed
                                   else [chosen])
    picked = set(at)
    return entropy_lower_bound([entries[i][0] for i in at],
                               [v for i, (v, _) in enumerate(entries) if i not in picked])


def topk_entropies(gen: Generation) -> tuple[np.ndarray | None, dict[str, str]]:
    """The entropy lower bounds of an answer from its own ``top_logprobs``, and their note.

    Each step's alternatives are its ``top_tokens`` / ``top_logprobs``, best first, and
    may hold the chosen token beyond the top-k (:func:`set_apart`, ``extra_possible``:
    compatible servers list it without saying so). None when the answer has no
    alternatives (or no token texts to tell the chosen one by).
    """
    if gen.top_logprobs is None or gen.top_tokens is None:
        return None, {}
    n = len(gen.top_tokens)
    if n != len(gen.top_logprobs) or len(gen.tokens) != n or (
            gen.token_logprobs is not None and len(gen.token_logprobs) != n):
        return None, {}
    chosen: list[float | None] = (gen.token_logprobs.tolist() if gen.token_logprobs is not None
                                  else [None] * n)
    # One .tolist() per array: iterating numpy scalars was most of a log's reading time.
    steps = (set_apart(token, lp, sorted(zip(names, values, strict=True), key=lambda tv: -tv[1]),
                       extra_possible=True)
             for token, lp, names, values in zip(gen.tokens, chosen, gen.top_tokens,
                                                 gen.top_logprobs.tolist(), strict=True))
    return entropy_lower_bounds(([v for _, v in top], known) for top, known in steps)
