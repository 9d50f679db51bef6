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
equivalent to anything (:mod:`confide.equivalence.judges`), so an empty sample is a
cluster of its own: **disagreement**, in every scorer. Its own likelihood is not
recorded (its only token, the end of sequence, is not part of any answer), so
:func:`sample_logprobs` gives it :math:`-\infty`, which the Monte-Carlo entropies refuse
and voting reads as "never the winner" (:func:`confide.decisions.voting.sample_confidences`);
the scorers that weigh agreement by likelihood use :func:`agreement_logprobs`, which
gives it the typical likelihood of the record's samples instead, so that it keeps the
mass a disagreeing sample has and never drops out of the sum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from confide.core.errors import CannotScore
from confide.core.records import Generation, Record
from confide.equivalence.judges import ExactJudge, Judge
from confide.scorers.context import ScoringContext
from confide.text import embed_texts

__all__ = ["affinity", "agreement_logprobs", "answers", "clusters", "embeddings", "judge_of",
           "require_samples", "sample_logprobs"]


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


def agreement_logprobs(samples: Sequence[Generation], *, normalize: bool,
                       fallback: float | None = None) -> np.ndarray:
    r"""Log-likelihood of each sample for the scorers that weigh agreement by likelihood,
    an empty sample given the mean of the others' rather than :math:`-\infty`.

    .. math:: \ell(s_e) = \frac{1}{|N|}\sum_{i \in N} \ell(s_i)

    for an empty :math:`s_e`, with :math:`N` the samples that are not empty and of
    positive likelihood, and :math:`\ell` the sum or (``normalize``) the mean of the
    token log-probabilities, as in :func:`sample_logprobs`. When no sample is in
    :math:`N` an empty one gets ``fallback`` (the greedy answer's :math:`\ell`, or any
    constant where only ratios between samples matter); None then raises
    :class:`CannotScore`.

    Why: an empty sample is an answer the model gave, equivalent to no other
    (:mod:`confide.equivalence.judges`), so it must count as disagreement; at
    :math:`-\infty` it had no mass and dropped out, and 2 × "Paris" + 8 empty samples
    scored like 10 × "Paris". The papers keep it with a finite likelihood: Farquhar et
    al.'s code (``semantic_uncertainty``, ``huggingface_models.py``) gives an answer of
    stop words alone the stop word's log-likelihood, and LM-Polygraph's samples keep
    their end-of-sequence token, so in both an empty answer has the likelihood of its
    end-of-sequence token and, judged equivalent to nothing, a cluster of its own. That
    token's probability is not recorded here (no answer carries it), so the empty
    sample gets the typical likelihood of what the model sampled for this prompt. The
    mean of log-likelihoods is at most the log of the mean likelihood (Jensen), so an
    empty sample never weighs more than an average sample: it counts as one
    disagreeing draw, no more.

    >>> a = Generation("Paris", tokens=["Paris"], token_logprobs=np.array([-0.5]))
    >>> b = Generation("Lyon", tokens=["Ly", "on"], token_logprobs=np.array([-1.0, -2.0]))
    >>> e = Generation("", token_logprobs=np.zeros(0))
    >>> agreement_logprobs([a, b, e], normalize=True).tolist()
    [-0.5, -1.5, -1.0]
    """
    logp = sample_logprobs(samples, normalize=normalize)
    empty = np.array([s.empty or s.token_logprobs is None or len(s.token_logprobs) == 0
                      for s in samples], dtype=np.bool_)
    measured = logp[np.logical_and(np.logical_not(empty), np.isfinite(logp))]
    if not empty.any():
        return logp
    if measured.size:
        typical = float(measured.mean())
    elif fallback is not None and np.isfinite(fallback):
        typical = float(fallback)
    else:
        raise CannotScore("no sample has a positive likelihood to weigh an empty one by")
    return np.where(empty, typical, logp)
