r"""Sampling-based scorers that need no equivalence judge.

Notation: the record holds :math:`k` sampled answers :math:`s_1..s_k` drawn
from the model for the same prompt :math:`x` (temperature and top-p as stored
with the run), each with its token log-probabilities; :math:`T_i` is the
number of tokens of :math:`s_i`. Scores are confidences: higher = more likely
correct.

An empty sample is no answer (:mod:`confide.scorers.features`): its likelihood is 0,
so the Monte-Carlo entropies refuse a record holding one (their estimate
would be :math:`-\infty`), and it shares no words with any answer.
"""

from __future__ import annotations

import itertools

import numpy as np

from confide.core.errors import CannotScore
from confide.core.options import DEFAULT_SAMPLES
from confide.core.records import Record
from confide.scorers.base import Cost, Need, as_is, exp_of, scorer
from confide.scorers.features import require_samples, sample_logprobs
from confide.text import rouge_l_f1, rouge_tokens


@scorer("mc_entropy", needs={Need.SAMPLES, Need.TOKEN_LOGPROBS}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=exp_of("the geometric mean of the samples' sequence probabilities"))
def mc_entropy(record: Record) -> float:
    r"""Negative Monte-Carlo estimate of the predictive (sequence) entropy.

    .. math:: c = -\hat H(Y \mid x) = \frac{1}{k}\sum_{i=1}^{k} \log p(s_i \mid x),
              \qquad \log p(s_i \mid x) = \sum_{t=1}^{T_i} \log p_t(s_{i,t})

    Length-biased: longer samples have lower log-likelihood. Equals
    LM-Polygraph's ``MonteCarloSequenceEntropy``, negated, on the same
    tokens. Scored on the samples LM-Polygraph's own pipeline drew (its
    tokens and log-probabilities imported with ``confide score``), the two
    differ by up to 0.26 (``benchmarks/results/parity.md``): Polygraph's
    ``sample_log_probs`` add the EOS token's log-probability, which its
    ``sample_tokens`` and ``sample_log_likelihoods`` (what it exports) leave
    out, as confide leaves it out of every answer.

    References: [1] Kadavath et al., 2022, "Language Models (Mostly) Know What
    They Know" (predictive entropy); [2] Kuhn, Gal & Farquhar, 2023, "Semantic
    Uncertainty", ICLR (baseline); [3] Malinin & Gales, 2021, ICLR.
    """
    return _mean_loglik(record, normalize=False)


def _mean_loglik(record: Record, *, normalize: bool) -> float:
    logp = sample_logprobs(require_samples(record), normalize=normalize)
    if np.isneginf(logp).any():
        n = int(np.isneginf(logp).sum())
        raise CannotScore(f"{n} of {logp.size} samples empty or of probability 0: "
                          "the entropy estimate is infinite")
    return float(np.mean(logp))


@scorer("mc_entropy_normalized", needs={Need.SAMPLES, Need.TOKEN_LOGPROBS},
        cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("the geometric mean of the samples' geometric-mean token probabilities"))
def mc_entropy_normalized(record: Record) -> float:
    r"""Negative length-normalised Monte-Carlo sequence entropy.

    .. math:: c = \frac{1}{k}\sum_{i=1}^{k} \frac{1}{T_i}\sum_{t=1}^{T_i} \log p_t(s_{i,t})

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in
    Autoregressive Structured Prediction", ICLR (length-normalised scores);
    [2] Kuhn, Gal & Farquhar, 2023, ICLR ("normalised entropy" baseline).
    Equals LM-Polygraph's ``MonteCarloNormalizedSequenceEntropy``, negated,
    on the same tokens; on LM-Polygraph's own samples they differ by up to
    0.037, its EOS term again (see ``mc_entropy``).
    """
    return _mean_loglik(record, normalize=True)


@scorer("lexical_similarity", needs={Need.SAMPLES}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=as_is("the mean pairwise ROUGE-L F-measure of the samples"))
def lexical_similarity(record: Record) -> float:
    r"""Mean pairwise ROUGE-L F-measure between the sampled answers.

    .. math:: c = \binom{k}{2}^{-1} \sum_{i<j} \mathrm{ROUGE\text{-}L}(s_i, s_j)

    over word tokens (case-folded, punctuation as separators; the tokenizer
    of the ``rougeL`` grader). Already a confidence: answers that agree
    lexically score high. An empty sample is no answer: its similarity to
    any sample, another empty one included, is 0.

    LM-Polygraph's ``LexicalSimilarity("rougeL")`` returns :math:`-c` with
    rouge-score's ROUGE-L, which Porter-stems words and keeps only ASCII
    letters and digits; we compare unstemmed case-folded words and keep every
    letter (the ``rougeL`` grader's tokenizer), so "Beatles" and "Beatle"
    differ here. On the bundled model the two differ by up to 0.022 on
    confide's samples (10 items, fed statistics) and by up to 0.015 on the
    samples of LM-Polygraph's own pipeline (30 items)
    (``benchmarks/peers/polygraph.py``, ``benchmarks/results/parity.md``).

    Cost: quadratic by definition, :math:`\binom{k}{2}` pairs, each a
    longest common subsequence of :math:`O(n m)` words. Measured on answers of
    165 tokens on average (``benchmarks/results/scoring_cost.md``): 0.05 s an
    item at k = 5, 0.19 s at k = 10 and 0.77 s at k = 20. That is under 1 %
    of the generation time, so no cheaper default is offered.

    References: [1] Fomicheva et al., 2020, "Unsupervised Quality Estimation
    for Neural Machine Translation", TACL (lexical similarity of samples);
    [2] Lin, Trivedi & Sun, 2024, "Generating with Confidence", TMLR (LexSim);
    [3] Lin, 2004, "ROUGE", ACL workshop.
    """
    samples = require_samples(record, 2)
    tokens = [None if s.empty else rouge_tokens(s.text) for s in samples]
    scores = [0.0 if a is None or b is None else 1.0 if not a and not b else rouge_l_f1(a, b)
              for a, b in itertools.combinations(tokens, 2)]
    return float(np.mean(scores))
