r"""Sampling-based scorers that weigh agreement with the model's own probabilities.

Notation as in :mod:`confide.scorers.semantic`: the greedy answer
:math:`y^*` and :math:`k` samples :math:`s_1..s_k`; :math:`W` is the run
judge's affinity between answers (index 0 = greedy), :math:`e(\cdot)` the unit
all-MiniLM-L6-v2 sentence embedding (both shared features from
:mod:`confide.scorers.features`); :math:`\ell(s) = \sum_t \log p_t(s_t)` is a
sequence's log-likelihood and :math:`T_s` its length in tokens. Scores are
confidences: uncertainty measures are negated.
"""

from __future__ import annotations

import math

import numpy as np

from confide.core.errors import CannotScore
from confide.core.options import DEFAULT_SAMPLES
from confide.core.records import Generation, Record
from confide.scorers.base import Cost, Need, ScoringContext, as_is, exp_of, no_readable, scorer
from confide.scorers.features import (
    affinity,
    agreement_logprobs,
    answers,
    clusters,
    embeddings,
    require_samples,
)
from confide.scorers.relevance import SAR_TEMPERATURE
from confide.text.embeddings import embed_tokens

__all__ = ["EIGENSCORE_ALPHA", "bertscore_f1", "cocoa_confidence", "eigenscore_key"]

EIGENSCORE_ALPHA = 1e-3  # Chen et al. (2024): ridge added to the samples' covariance


def _require_answer(record: Record) -> None:
    if not record.greedy.text.strip():
        raise CannotScore("empty answer: nothing to put a confidence on")


def _greedy_stat(record: Record, name: str) -> np.ndarray:
    values = getattr(record.greedy, name)
    if values is None:
        raise CannotScore(f"the backend gave no {name.replace('_', ' ')}")
    if len(values) == 0:
        raise CannotScore("empty answer: no tokens to score")
    return np.asarray(values, dtype=np.float64)


# ---------------------------------------------------------------------------
# CoCoA: confidence part x consistency part


def cocoa_confidence(record: Record, ctx: ScoringContext, uncertainty: float) -> float:
    r"""CoCoA with a given uncertainty of the greedy answer, as a confidence.

    .. math:: c = -\,u(y^*) \cdot \frac{1}{k}\sum_{i=1}^{k}\big(1 - W_{y^*, s_i}\big)

    :math:`u` is the pluggable confidence part (an uncertainty, lower = more
    confident); the consistency part is the judge's mean dissimilarity between
    the greedy answer and each sample. One implementation for every CoCoA
    variant (``cocoa``, ``cocoa_ppl``, ``cocoa_mte``).

    >>> from confide.core.records import Item
    >>> from confide.equivalence.judges import ExactJudge
    >>> r = Record(Item("x", "q"), Generation("a"), samples=[Generation("a"), Generation("b")])
    >>> cocoa_confidence(r, ScoringContext(judge=ExactJudge()), 2.0)
    -1.0
    """
    require_samples(record)
    _require_answer(record)
    if not math.isfinite(uncertainty):
        raise CannotScore("the greedy answer's uncertainty is not finite")
    w = affinity(record, ctx)
    return -float(uncertainty) * float(np.mean(1.0 - w[0, 1:]))


_COCOA_NEEDS = {Need.SAMPLES, Need.TOKEN_LOGPROBS}
# The scorers that read the samples' texts only (their token statistics are the greedy
# answer's): the scorer plan feeds them samples that are plain text.
_TEXT_ONLY: frozenset[Need] = frozenset()


@scorer("cocoa", needs=_COCOA_NEEDS, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        sample_needs=_TEXT_ONLY,
        readable=exp_of("P(y | x) ** inconsistency (the sequence probability raised to the mean 1 "
                        "- affinity to the samples)"))
def cocoa(record: Record, ctx: ScoringContext) -> float:
    r"""Negated CoCoA-MSP: the greedy answer's uncertainty times its inconsistency.

    .. math:: c = -\Big(-\log P(y^* \mid x)\Big) \cdot
              \frac{1}{k}\sum_{i=1}^{k}\big(1 - W_{y^*, s_i}\big)

    :math:`W` is the judge's affinity (greedy answer against each sample);
    :math:`-\log P(y^*|x)` is the MSP uncertainty. Equals LM-Polygraph's
    ``CocoaMSP`` (negated) for the same similarity (see
    :func:`cocoa_confidence`).

    References: [1] Vashurin et al., 2025, "Uncertainty Quantification for
    LLMs through Minimum Bayes Risk: Bridging Confidence and Consistency",
    arXiv:2502.04964 (CoCoA).
    """
    u = -float(np.sum(_greedy_stat(record, "token_logprobs")))
    return cocoa_confidence(record, ctx, u)


@scorer("cocoa_ppl", needs=_COCOA_NEEDS, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        sample_needs=_TEXT_ONLY,
        readable=exp_of("(geometric-mean token probability) ** inconsistency"))
def cocoa_ppl(record: Record, ctx: ScoringContext) -> float:
    r"""Negated CoCoA-PPL: log-perplexity of the greedy answer times its inconsistency.

    .. math:: c = -\Big(-\frac{1}{T}\sum_{t=1}^{T}\log p_t(y^*_t)\Big) \cdot
              \frac{1}{k}\sum_{i=1}^{k}\big(1 - W_{y^*, s_i}\big)

    Equals LM-Polygraph's ``CocoaPPL`` (negated) when :math:`W` is the same
    similarity; Polygraph uses a cross-encoder's similarity, confide the run's
    judge (see :func:`cocoa_confidence`).

    References: [1] Vashurin et al., 2025, "Uncertainty Quantification for
    LLMs through Minimum Bayes Risk: Bridging Confidence and Consistency",
    arXiv:2502.04964 (CoCoA).
    """
    u = -float(np.mean(_greedy_stat(record, "token_logprobs")))
    return cocoa_confidence(record, ctx, u)


@scorer("cocoa_mte", needs={Need.SAMPLES, Need.TOKEN_ENTROPIES}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES, sample_needs=_TEXT_ONLY,
        readable=exp_of("exp(-mean H) ** inconsistency"))
def cocoa_mte(record: Record, ctx: ScoringContext) -> float:
    r"""Negated CoCoA-MTE: mean token entropy of the greedy answer times its inconsistency.

    .. math:: c = -\Big(\frac{1}{T}\sum_{t=1}^{T} H(p_t)\Big) \cdot
              \frac{1}{k}\sum_{i=1}^{k}\big(1 - W_{y^*, s_i}\big)

    Equals LM-Polygraph's ``CocoaMTE`` (negated) for the same similarity.

    References: [1] Vashurin et al., 2025, arXiv:2502.04964 (CoCoA).
    """
    u = float(np.mean(_greedy_stat(record, "token_entropies")))
    return cocoa_confidence(record, ctx, u)


# ---------------------------------------------------------------------------
# semantic density


@scorer("semantic_density", needs=_COCOA_NEEDS, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=as_is("the likelihood-weighted affinity of the answer to the samples"))
def semantic_density(record: Record, ctx: ScoringContext) -> float:
    r"""Semantic density of the greedy answer: likelihood-weighted kernel similarity to the samples.

    .. math::
        w(s) = \exp\Big(\frac{1}{T_s}\,\ell(s)\Big), \qquad
        c = \frac{w(y^*) + \sum_{s \in U} w(s)\, K(y^*, s)}{w(y^*) + \sum_{s \in U} w(s)}

    :math:`U` are the distinct sample texts and :math:`K(y^*, s) = W_{y^*,s}`
    the judge's affinity. In [0, 1]. An empty sample has affinity 0 to the greedy
    answer and the mean likelihood of the non-empty samples (the greedy answer's when
    every sample is empty; :func:`~confide.scorers.features.agreement_logprobs`), so
    it counts against it: greedy "Paris" with 2 × "Paris" + 8 empty samples, all
    tokens of one probability, gives :math:`c = 2/3` (the empty text is one distinct
    answer, as any repeated text is), not the :math:`1` of 10 × "Paris". A record
    whose samples all have likelihood 0 is refused: the greedy answer alone would
    read as certain.

    LM-Polygraph's ``SemanticDensity`` uses the kernel :math:`1 -
    p_{\text{contra}} - p_{\text{neutral}}/2` of an NLI model (greedy →
    sample); with a judge whose affinity is that kernel the two are equal.

    References: [1] Qiu & Miikkulainen, 2024, "Semantic Density: Uncertainty
    Quantification for Large Language Models through Confidence Measurement
    in Semantic Space", NeurIPS.
    """
    samples = require_samples(record)
    greedy_lp = float(np.mean(_greedy_stat(record, "token_logprobs")))
    logw = agreement_logprobs(samples, normalize=True, fallback=greedy_lp)
    w = affinity(record, ctx)[0, 1:]
    first: dict[str, int] = {}
    for i, s in enumerate(samples):
        first.setdefault(s.text, i)
    keep = np.array(sorted(first.values()))
    if not np.isfinite(logw).any():
        raise CannotScore("no sample has a positive likelihood (all empty or of probability 0)")
    log_weights = np.concatenate([[greedy_lp], logw[keep]])
    kernel = np.concatenate([[1.0], w[keep]])
    top = float(np.max(log_weights))
    weights = np.exp(log_weights - top)  # shifted against underflow; cancels in the ratio
    return float((weights * kernel).sum() / weights.sum())


# ---------------------------------------------------------------------------
# sentence-level SAR


@scorer("sentence_sar", needs=_COCOA_NEEDS, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=no_readable("a log of a likelihood plus 1/t = 1000 times similar samples' "
                             "likelihoods: it rises above 0 and has no fixed upper bound"))
def sentence_sar(record: Record, ctx: ScoringContext) -> float:
    r"""Negated SentenceSAR: sample likelihoods shifted by the likelihood of similar samples.

    .. math::
        \mathrm{SentSAR}(s_j) = -\log\Big(p(s_j) + \frac{1}{t}\sum_{l \ne j}
            R_S(s_j, s_l)\, p(s_l)\Big), \quad p(s) = e^{\ell(s)}, \quad
        c = -\frac{1}{k}\sum_{j=1}^{k} \mathrm{SentSAR}(s_j)

    with :math:`R_S(a, b) = \max(0, e(a)^\top e(b))` and :math:`t = 10^{-3}`.
    Unlike ``sar`` the likelihoods are the raw sequence probabilities, not
    TokenSAR-reweighted ones. Computed in log space (log-sum-exp), so long
    samples do not underflow. An empty sample is similar to no sample
    (:math:`R_S = 0`) and has the mean log-likelihood of the non-empty samples
    (:func:`~confide.scorers.features.agreement_logprobs`; its own, that of the
    end-of-sequence token, is not recorded): a sample no other supports, so it counts
    as disagreement, where leaving it out made 2 × "Paris" + 8 empty samples read as
    2 × "Paris". A record whose samples are all empty is refused.

    Equals LM-Polygraph's ``SentenceSAR`` (negated) for the same similarity
    matrix; Polygraph's default similarity is a cross-encoder's, here the
    MiniLM cosine (as in ``sar``).

    References: [1] Duan et al., 2024, "Shifting Attention to Relevance:
    Towards the Predictive Uncertainty Quantification of Free-Form Large
    Language Models", ACL (SentSAR).
    """
    samples = require_samples(record)
    _require_answer(record)
    empty = np.array([s.empty for s in samples], dtype=bool)
    if empty.all():
        raise CannotScore("every sample is empty")
    ll = agreement_logprobs(samples, normalize=False)
    e = embeddings(record, ctx, "answers", answers(record))[1:]
    sim = np.clip(e @ e.T, 0.0, 1.0)
    sim[empty, :] = 0.0  # an empty sample is no answer: similar to none
    sim[:, empty] = 0.0
    with np.errstate(divide="ignore"):
        log_sim = np.log(sim)
    np.fill_diagonal(log_sim, -np.inf)
    terms = log_sim + ll[None, :] - math.log(SAR_TEMPERATURE)
    np.fill_diagonal(terms, ll)
    shifted = np.logaddexp.reduce(terms, axis=1)
    if not np.isfinite(shifted).all():
        raise CannotScore("a sample has probability 0 and no similar sample")
    return float(np.mean(shifted))


# ---------------------------------------------------------------------------
# embedding consistency


@scorer("cosine_consistency", needs={Need.SAMPLES}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=as_is("the mean rescaled cosine similarity to the samples"))
def cosine_consistency(record: Record, ctx: ScoringContext) -> float:
    r"""Mean rescaled cosine similarity between the greedy answer and each sample.

    .. math:: c = \frac{1}{k}\sum_{i=1}^{k} \frac{1 + e(y^*)^\top e(s_i)}{2}

    In [0, 1]. Equals UQLM's ``cosine_sim`` with its default
    all-MiniLM-L6-v2 (UQLM also cuts answers at 2000 characters; MiniLM itself
    reads at most 256 word pieces), except that an empty sample is no answer
    and scores 0 here, where UQLM embeds the empty string.

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR (cosine similarity);
    [2] Reimers & Gurevych, 2019, "Sentence-BERT", EMNLP.
    """
    samples = require_samples(record)
    _require_answer(record)
    e = embeddings(record, ctx, "answers", answers(record))
    similarity = 0.5 + np.clip(e[1:] @ e[0], -1.0, 1.0) / 2.0
    empty = np.array([not s.text.strip() for s in samples])
    return float(np.mean(np.where(empty, 0.0, similarity)))


def bertscore_f1(candidate: np.ndarray, reference: np.ndarray) -> float:
    r"""BERTScore F1 of two texts from their unit-norm token embeddings (rows).

    .. math::
        P = \frac{1}{|a|}\sum_{i \in a}\max_{j \in b} a_i^\top b_j, \quad
        R = \frac{1}{|b|}\sum_{j \in b}\max_{i \in a} a_i^\top b_j, \quad
        F_1 = \frac{2PR}{P + R}

    Greedy matching without idf weights or baseline rescaling (BERTScore's
    defaults, as UQLM calls it). 0 when either text has no token or
    :math:`P + R \le 0`.

    >>> a = np.array([[1.0, 0.0], [0.0, 1.0]]); b = np.array([[1.0, 0.0]])
    >>> round(bertscore_f1(a, b), 6)  # P = (1 + 0) / 2, R = 1
    0.666667
    """
    if len(candidate) == 0 or len(reference) == 0:
        return 0.0
    sim = np.asarray(candidate, dtype=np.float64) @ np.asarray(reference, dtype=np.float64).T
    precision, recall = float(sim.max(axis=1).mean()), float(sim.max(axis=0).mean())
    if precision + recall <= 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


@scorer("bertscore_consistency", needs={Need.SAMPLES}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=as_is("the mean BERTScore F1 with the samples (below 0 only for token "
                       "embeddings pointing apart, clipped)"))
def bertscore_consistency(record: Record, ctx: ScoringContext) -> float:
    r"""Mean BERTScore F1 between the greedy answer and each sample, on MiniLM token embeddings.

    .. math:: c = \frac{1}{k}\sum_{i=1}^{k} F_1\big(y^*, s_i\big)

    with :math:`F_1` from :func:`bertscore_f1` on the contextual word-piece
    embeddings of all-MiniLM-L6-v2 (:func:`~confide.text.embeddings.embed_tokens`).
    An empty sample is no answer and scores 0. Where ``cosine_consistency``
    compares whole-answer embeddings, this matches each word piece to its
    closest counterpart, so a shared key word counts even in answers of
    different shape.

    UQLM's ``bert_score`` is the same mean of F1 but through the
    ``bert_score`` package's default English model (roberta-large, layer
    17), not available offline; MiniLM's last layer is used here, so values
    are on another scale (MiniLM's piece cosines run higher) and the two are
    not expected to be equal.

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR (BERTScore
    consistency); [2] Zhang et al., 2020, "BERTScore: Evaluating Text
    Generation with BERT", ICLR; [3] Manakul et al., 2023, "SelfCheckGPT",
    EMNLP (SelfCheckGPT-BERTScore).
    """
    samples = require_samples(record)
    _require_answer(record)
    greedy, *rest = embed_tokens(answers(record))
    return float(np.mean([0.0 if not s.text.strip() else bertscore_f1(greedy, e)
                          for s, e in zip(samples, rest)]))


@scorer("consistency_confidence", needs={Need.SAMPLES, Need.TOKEN_LOGPROBS},
        cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES, sample_needs=_TEXT_ONLY,
        readable=as_is("cosine consistency times the geometric-mean token probability"))
def consistency_confidence(record: Record, ctx: ScoringContext) -> float:
    r"""Cosine consistency with the samples times the greedy answer's length-normalised probability.

    .. math:: c = \Big(\frac{1}{k}\sum_{i=1}^{k} \frac{1 + e(y^*)^\top e(s_i)}{2}\Big)
              \cdot \exp\Big(\frac{1}{T}\sum_{t=1}^{T}\log p_t(y^*_t)\Big)

    In [0, 1]. UQLM's ``consistency_and_confidence`` with its default
    ``length_normalize=True`` (the product form of CoCoA); the consistency
    part is ``cosine_consistency``.

    References: [1] Bouchard & Chauhan, 2025, UQLM, TMLR
    (consistency_and_confidence); [2] Vashurin et al., 2025, arXiv:2502.04964
    (CoCoA).
    """
    lp = _greedy_stat(record, "token_logprobs")
    return cosine_consistency(record, ctx) * math.exp(float(np.mean(lp)))


@scorer("label_prob", needs={Need.SAMPLES}, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=as_is("the share of samples in the largest semantic cluster"))
def label_prob(record: Record, ctx: ScoringContext) -> float:
    r"""Frequency of the largest semantic cluster among the samples.

    .. math:: c = \max_{C} \frac{|\{i : s_i \in C\}|}{k}

    Clusters from the run's judge; an empty sample is no answer and belongs
    to no cluster (it still counts in :math:`k`). Needs two samples or more
    (one sample is always one cluster). Equals LM-Polygraph's ``LabelProb``
    (:math:`1 - c`) on the same clusters (|Δ| 5.6e-17 on 10 TriviaQA items,
    ``benchmarks/results/parity.md``).

    References: [1] Fadeeva et al., 2023, "LM-Polygraph: Uncertainty
    Estimation for Language Models", EMNLP demo (LabelProb); [2] Wang et al.,
    2023, "Self-Consistency Improves Chain of Thought Reasoning", ICLR
    (majority-vote frequency).
    """
    samples = require_samples(record, 2)
    _require_answer(record)
    labels = clusters(record, ctx)[1:]
    kept = np.array([lab for lab, s in zip(labels, samples) if s.text.strip()], dtype=np.intp)
    if kept.size == 0:
        return 0.0
    return float(np.bincount(kept).max() / len(samples))


# ---------------------------------------------------------------------------
# EigenScore


def eigenscore_key(samples: list[Generation], wanted: str | None = None) -> str:
    """The hidden-state key EigenScore reads: ``wanted``, else the median stored layer's ``last``.

    Layers are ordered by depth: a negative index counts from the top, so it is
    deeper than every non-negative one (``8, 16, -1`` → ``16`` is the middle).

    >>> g = [Generation("a", hidden={"4:last": np.ones(2), "8:last": np.ones(2),
    ...                               "12:last": np.ones(2), "8:mean": np.ones(2)})]
    >>> eigenscore_key(g)
    '8:last'
    >>> eigenscore_key([Generation("a", hidden={f"{k}:last": np.ones(2) for k in (8, 16, -1)})])
    '16:last'
    """
    keys: set[str] | None = None
    for s in samples:
        have = set((s.hidden or {}).keys())
        keys = have if keys is None else keys & have
    keys = keys or set()
    if wanted is not None:
        if wanted not in keys:
            raise CannotScore(f"no hidden state {wanted!r} in every sample")
        return wanted
    last = [k for k in keys if k.endswith(":last") and k.split(":")[0].lstrip("-").isdigit()]
    if not last:
        raise CannotScore("the samples carry no hidden states (run with --hidden-layers)")
    layers = sorted((int(k.split(":")[0]) for k in last), key=lambda v: (v < 0, v))
    return f"{layers[(len(layers) - 1) // 2]}:last"


@scorer("eigenscore", needs={Need.SAMPLES, Need.HIDDEN_STATES}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=no_readable("a mean log-eigenvalue of a hidden-state covariance, on the hidden "
                             "states' own unbounded scale"))
def eigenscore(record: Record, ctx: ScoringContext) -> float:
    r"""Negated EigenScore: mean log-eigenvalue of the samples' hidden-state covariance.

    .. math::
        \Sigma = Z J_d Z^\top, \quad J_d = I_d - \tfrac1d \mathbf 1 \mathbf 1^\top, \qquad
        c = -\frac{1}{k}\sum_{i=1}^{k}\log \lambda_i(\Sigma + \alpha I_k)

    :math:`Z \in \mathbb R^{k \times d}` holds the last-token hidden state of
    each sample at one layer (the median stored layer, or
    ``ctx.options["eigenscore_key"]``), :math:`\alpha = 10^{-3}`. Samples that
    agree have nearly collinear states and a small differential entropy.
    Empty samples have no hidden state and are left out; at least two samples
    with states are needed. Equals LM-Polygraph's ``EigenScore`` (negated) on
    the same embeddings (Polygraph reads the middle layer's last token): fed
    the embeddings of LM-Polygraph's own samples, to 1.5e-8
    (``benchmarks/results/parity.md``). Its embedding is the last state
    ``generate`` computed, the one of the token before the last; as its
    samples keep the token that ended them, that is the state of the last
    answer token, the one confide stores, except for samples cut by the
    length limit.

    References: [1] Chen et al., 2024, "INSIDE: LLMs' Internal States Retain
    the Power of Hallucination Detection", ICLR (EigenScore).
    """
    samples = [s for s in require_samples(record, 2) if s.hidden]
    _require_answer(record)
    if len(samples) < 2:
        raise CannotScore("needs at least 2 samples with hidden states")
    key = eigenscore_key(samples, ctx.options.get("eigenscore_key"))
    z = np.stack([np.asarray(s.hidden[key], dtype=np.float64) for s in samples])  # type: ignore[index]
    if not np.isfinite(z).all():
        raise CannotScore("a hidden state is not finite")
    zc = z - z.mean(axis=1, keepdims=True)  # Z J_d: centre each state over its features
    lam = np.linalg.eigvalsh(zc @ zc.T + EIGENSCORE_ALPHA * np.eye(len(z)))
    return -float(np.mean(np.log(np.clip(lam, 1e-10, None))))
