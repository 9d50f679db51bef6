"""The probability a model gives to one of two one-word replies (True/False, Yes/No).

Used by P(True) and the LLM-as-a-judge grader. On backends with
``next_token_logprobs`` (``hf``) it is one forward pass and exact; on others
it reads the top-k alternatives of a one-token generation, where a spelling
outside the top k counts with the smallest listed probability (an upper bound).
"""

from __future__ import annotations

import math

import numpy as np

from confide.backends.base import Backend, GenerationSpec, NextTokenScorer, Prompt
from confide.errors import CannotScore, InvalidInputError

__all__ = ["two_way_probability"]


def _renormalised(logp_yes: np.ndarray, logp_no: np.ndarray) -> float:
    """The logistic of the log-odds, computed so that no log-odds overflows."""
    yes = float(np.logaddexp.reduce(logp_yes))
    no = float(np.logaddexp.reduce(logp_no))
    if math.isnan(yes) or math.isnan(no) or yes == no == -math.inf:
        raise CannotScore("both replies have probability 0 (or NaN)")
    odds = yes - no  # +-inf when one reply has probability 0
    if odds >= 0:
        return 1.0 / (1.0 + math.exp(-odds))
    return math.exp(odds) / (1.0 + math.exp(odds))


def two_way_probability(backend: Backend, prompt: Prompt, yes: tuple[str, ...],
                        no: tuple[str, ...], *, seed: int = 0, top_k: int = 20) -> float:
    r"""P(yes) renormalised over the two replies' one-token spellings.

    .. math:: p = \frac{\sum_{v \in Y} p(v \mid x)}{\sum_{v \in Y} p(v \mid x) + \sum_{v \in N} p(v \mid x)}

    Raises :class:`~confide.errors.CannotScore` when neither reply is visible.
    """
    if isinstance(backend, NextTokenScorer):
        try:
            logp = np.asarray(backend.next_token_logprobs([prompt], [*yes, *no]))[0]
        except InvalidInputError as exc:
            raise CannotScore(str(exc)) from exc
        return _renormalised(logp[:len(yes)], logp[len(yes):])
    spec = GenerationSpec(max_new_tokens=1, top_k_alternatives=top_k)
    gen = backend.generate([prompt], spec, [seed])[0].greedy
    if gen is None or not gen.top_tokens or gen.top_logprobs is None:
        raise CannotScore("the backend gave no top log-probabilities for the reply")
    logps = np.asarray(gen.top_logprobs[0], dtype=np.float64)
    yes_words = {w.strip().lower() for w in yes}
    no_words = {w.strip().lower() for w in no}
    pairs = list(zip(gen.top_tokens[0], logps, strict=False))
    found_yes = [float(lp) for t, lp in pairs if t.strip().lower() in yes_words]
    found_no = [float(lp) for t, lp in pairs if t.strip().lower() in no_words]
    if not found_yes and not found_no:
        raise CannotScore(f"neither {yes[0].strip()} nor {no[0].strip()} among the top "
                          "next tokens")
    floor = float(logps.min())
    return _renormalised(np.asarray(found_yes or [floor]), np.asarray(found_no or [floor]))
