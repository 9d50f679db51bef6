r"""The probability a model gives to one of two one-word replies (True/False, Yes/No).

One rule for every yes/no question confide asks a model: P(True), the
LLM-as-a-judge grader and the ``llm`` equivalence judge.

* On backends with ``next_token_logprobs`` (``hf``) the probabilities are
  exact: one forward pass, no generation.
* Otherwise they are read from the top-k alternatives of a one-token
  generation. A reply none of whose spellings is listed counts with the
  smallest listed probability (the most it can have: an upper bound); when
  neither reply is listed the question has no answer and
  :class:`~confide.core.errors.CannotScore` says so.

Either way each reply's spellings are summed and the two sums renormalised
(:func:`two_way_from_logprobs`), in log space, so no log-odds overflow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from confide.backends.base import Backend, GenerationSpec, NextTokenScorer, Prompt
from confide.core.errors import CannotScore, InvalidInputError
from confide.core.records import Generation

__all__ = ["NO", "YES", "reply_probability", "two_way_from_logprobs", "two_way_probabilities",
           "two_way_probability"]

YES = ("Yes", " Yes", "yes", " yes")  # one-token spellings of the two replies
NO = ("No", " No", "no", " no")


def two_way_from_logprobs(logp_yes: Sequence[float] | np.ndarray,
                          logp_no: Sequence[float] | np.ndarray) -> float:
    r"""P(yes) from the log-probabilities of the spellings of "yes" and of "no".

    .. math:: p = \frac{\sum_{v \in Y} p(v)}{\sum_{v \in Y} p(v) + \sum_{v \in N} p(v)}
              = \sigma\Big(\operatorname{LSE}_{v \in Y} \log p(v) -
                \operatorname{LSE}_{v \in N} \log p(v)\Big)

    computed as a numerically stable logistic of the log-odds, so log-odds of
    any size (even :math:`\pm\infty`) give a probability in [0, 1].

    Raises :class:`~confide.core.errors.CannotScore` when neither reply has any
    probability.

    >>> round(two_way_from_logprobs(np.log([0.3, 0.1]), np.log([0.2])), 6)
    0.666667
    >>> two_way_from_logprobs([0.0], [-1000.0]), two_way_from_logprobs([-1000.0], [0.0])
    (1.0, 0.0)
    """
    arrays = [np.asarray(lp, dtype=np.float64) for lp in (logp_yes, logp_no)]
    if any(np.isnan(a).any() or (a == np.inf).any() for a in arrays):
        raise CannotScore("a reply's log-probability is NaN or +inf")
    yes, no = (float(np.logaddexp.reduce(a, initial=-np.inf)) for a in arrays)
    if yes == no == -math.inf:
        raise CannotScore("neither reply has a probability")
    log_odds = yes - no
    if log_odds >= 0:
        return 1.0 / (1.0 + math.exp(-log_odds))
    odds = math.exp(log_odds)
    return odds / (1.0 + odds)


def reply_probability(gen: Generation | None, yes: Sequence[str], no: Sequence[str]) -> float:
    """P(yes) read from the first token's top-k alternatives of a one-token reply.

    Spellings match after stripping and case-folding. A reply none of whose
    spellings is listed counts with the smallest listed probability.
    Raises :class:`~confide.core.errors.CannotScore` without alternatives or when
    neither reply is listed.
    """
    if gen is None or not gen.top_tokens or gen.top_logprobs is None or not len(gen.top_logprobs):
        raise CannotScore("the backend gave no top log-probabilities for the reply")
    logps = np.asarray(gen.top_logprobs[0], dtype=np.float64)
    yes_words = {w.strip().casefold() for w in yes}
    no_words = {w.strip().casefold() for w in no}
    pairs = list(zip(gen.top_tokens[0], logps, strict=False))
    found_yes = [float(lp) for t, lp in pairs if t.strip().casefold() in yes_words]
    found_no = [float(lp) for t, lp in pairs if t.strip().casefold() in no_words]
    if not found_yes and not found_no:
        raise CannotScore(f"neither {yes[0].strip()} nor {no[0].strip()} among the top "
                          "next tokens")
    floor = float(logps.min())
    return two_way_from_logprobs(found_yes or [floor], found_no or [floor])


def two_way_probabilities(backend: Backend, prompts: list[Prompt], yes: Sequence[str],
                          no: Sequence[str], *, seeds: list[int] | None = None,
                          top_k: int = 20) -> list[float]:
    r"""P(yes) for each prompt, renormalised over the two replies' one-token spellings.

    .. math:: p_i = \frac{\sum_{v \in Y} p(v \mid x_i)}{\sum_{v \in Y} p(v \mid x_i)
              + \sum_{v \in N} p(v \mid x_i)}

    All prompts go to the backend in one call (``next_token_logprobs``, or one
    ``generate`` of one token with ``top_k`` alternatives; ``seeds`` default
    to 0). Raises :class:`~confide.core.errors.CannotScore` when a prompt's reply
    cannot be read (see the module notes).
    """
    if not prompts:
        return []
    if isinstance(backend, NextTokenScorer):
        try:
            logp = np.asarray(backend.next_token_logprobs(prompts, [*yes, *no]), dtype=np.float64)
        except InvalidInputError as exc:
            raise CannotScore(str(exc)) from exc
        return [two_way_from_logprobs(row[:len(yes)], row[len(yes):]) for row in logp]
    spec = GenerationSpec(max_new_tokens=1, top_k_alternatives=top_k)
    results = backend.generate(prompts, spec, seeds if seeds is not None else [0] * len(prompts))
    return [reply_probability(r.greedy, yes, no) for r in results]


def two_way_probability(backend: Backend, prompt: Prompt, yes: Sequence[str],
                        no: Sequence[str], *, seed: int = 0, top_k: int = 20) -> float:
    """P(yes) for one prompt: :func:`two_way_probabilities` of ``[prompt]``."""
    return two_way_probabilities(backend, [prompt], yes, no, seeds=[seed], top_k=top_k)[0]
