r"""Shared intermediates of the sampling-based scorers, computed once per record.

Several scorers need the same expensive things: the semantic clusters of a
record's answers, the judge's affinity matrix between them, sentence
embeddings. Each is computed through :meth:`ScoringContext.cached
<confide.scorers.context.ScoringContext.cached>`, keyed by (item id, feature
name), so within a run it is computed once per record however many scorers
read it; and every pair judgment goes through the judge's own pair cache.

Answers are indexed ``0`` (the greedy answer) then ``1..k`` (the samples), so
``clusters(record, ctx)[0]`` is the greedy answer's cluster. The samples are
clustered alone and the greedy answer is then placed among their clusters
(:meth:`Judge.place <confide.equivalence.judges.Judge.place>`), so the greedy answer never
changes the samples' clusters.

Empty answers: an answer with no text is no answer. The judge never finds it
equivalent to anything (:mod:`confide.equivalence.judges`), and its likelihood is 0
(log-likelihood :math:`-\infty`, :func:`sample_logprobs`), the rule voting
uses too (:func:`confide.decisions.voting.sample_confidences`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from confide.core.errors import CannotScore
from confide.core.records import Generation, Record
from confide.equivalence.judges import ExactJudge, Judge
from confide.scorers.context import ScoringContext
from confide.text import embed_texts

__all__ = ["affinity", "answers", "clusters", "embeddings", "judge_of", "require_samples",
           "sample_logprobs"]


def judge_of(ctx: ScoringContext) -> Judge:
    """The run's judge; a context without one gets the ``exact`` judge."""
    if ctx.judge is None:
        ctx.judge = ExactJudge()
    judge: Judge = ctx.judge
    return judge


def require_samples(record: Record, minimum: int = 1) -> list[Generation]:
    """The record's samples, or :class:`CannotScore` when there are fewer than ``minimum``."""
    if len(record.samples) < minimum:
        raise CannotScore(f"needs at least {minimum} sampled answer(s), the record has "
                          f"{len(record.samples)} (set n_samples)")
    return record.samples


def answers(record: Record) -> list[str]:
    """Texts of the greedy answer (index 0) and the samples (1..k)."""
    return [record.greedy.text] + [s.text for s in record.samples]


def clusters(record: Record, ctx: ScoringContext) -> np.ndarray:
    """Cluster label of each answer (index 0 = greedy), from the run's judge.

    Labels ``[1:]`` cluster the samples alone; label ``[0]`` places the greedy
    answer among them (a label of its own if it matches none).
    """
    judge = judge_of(ctx)

    def compute() -> np.ndarray:
        texts = [s.text for s in record.samples]
        labels = judge.clusters(texts, record.item)
        greedy = judge.place(record.greedy.text, texts, record.item, labels)
        return np.concatenate([[greedy], labels]).astype(np.intp)

    return ctx.cached(record, f"clusters:{judge.name}", compute)


def affinity(record: Record, ctx: ScoringContext) -> np.ndarray:
    """The judge's symmetric affinity matrix over all answers, shape ``(k+1, k+1)``."""
    judge = judge_of(ctx)
    return ctx.cached(record, f"affinity:{judge.name}",
                      lambda: judge.affinity(answers(record), record.item))


def embeddings(record: Record, ctx: ScoringContext, name: str, texts: Sequence[str]
               ) -> np.ndarray:
    """Unit-norm all-MiniLM-L6-v2 embeddings of ``texts`` (rows), cached as ``name``."""

    def compute() -> np.ndarray:
        return np.asarray(embed_texts(list(texts)), dtype=np.float64)

    return ctx.cached(record, f"embeddings:{name}", compute)


def sample_logprobs(samples: Sequence[Generation], *, normalize: bool) -> np.ndarray:
    r"""Log-likelihood of each sample, :math:`\sum_t \log p_t` or its mean (``normalize``).

    An empty sample (or one without tokens) has log-likelihood
    :math:`-\infty` (probability 0): it is no answer, and the only token it had
    (end of sequence) was not recorded, so it must never read as certain.
    Callers that cannot use :math:`-\infty` refuse the record
    (:class:`CannotScore`), as they do for a NaN token log-probability.
    """
    out = np.empty(len(samples), dtype=np.float64)
    for i, s in enumerate(samples):
        if s.token_logprobs is None:
            raise CannotScore("the backend gave no token logprobs for the samples")
        lp = np.asarray(s.token_logprobs, dtype=np.float64)
        if np.isnan(lp).any():
            raise CannotScore(f"sample {i + 1} has a NaN token log-probability")
        if s.empty or lp.size == 0:
            out[i] = -np.inf
        else:
            out[i] = lp.mean() if normalize else lp.sum()
    return out
