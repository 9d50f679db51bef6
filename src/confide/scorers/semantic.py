r"""Semantic scorers: how much the sampled answers agree in *meaning*.

Notation: the record holds the greedy answer :math:`y^*` and :math:`k` sampled
answers :math:`s_1..s_k`. The run's equivalence judge (:mod:`confide.equivalence.judges`)
clusters the samples alone into :math:`C_1..C_m` and places the greedy answer
among them (:math:`C(y^*)` is its cluster, possibly none of the samples'), and
gives a symmetric affinity :math:`W \in [0,1]^{k \times k}` between samples,
with :math:`W_{jj} = 1`. An empty sample is no answer: it is equivalent to
nothing (its own cluster), has affinity 0 to every other sample and, where
likelihoods weigh the clusters, the typical likelihood of the record's samples
(:func:`~confide.scorers.features.agreement_logprobs`), so it always counts as
disagreement. Scorers of the sample distribution
need at least two samples: one sample always forms one cluster, which would
read as certain.
Clusters and affinities come from :mod:`confide.scorers.features`, computed once per
record and shared by every scorer here. Scores are confidences: uncertainty
measures are negated so that higher = more likely correct.
"""

from __future__ import annotations

import numpy as np

from confide.core.errors import CannotScore
from confide.core.options import DEFAULT_SAMPLES
from confide.core.records import Record
from confide.scorers.base import (
    Cost,
    Need,
    ScoringContext,
    as_is,
    exp_of,
    inverse_count,
    no_readable,
    one_plus,
    scorer,
)
from confide.scorers.features import (
    affinity,
    agreement_logprobs,
    clusters,
    require_samples,
)

__all__ = ["ECC_EIGENVALUE_THRESHOLD", "KLE_TIME"]

ECC_EIGENVALUE_THRESHOLD = 0.9  # Lin et al. (2024): eigenvectors with eigenvalue below this
KLE_TIME = 0.3                  # heat-kernel time t of kernel_language_entropy

_SAMPLED = {Need.SAMPLES}


def _sample_labels(record: Record, ctx: ScoringContext) -> np.ndarray:
    require_samples(record, 2)
    labels: np.ndarray = clusters(record, ctx)
    return labels[1:]


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@scorer("agreement", needs=_SAMPLED, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        probability=True,
        readable=as_is("the share of samples that agree with the answer"))
def agreement(record: Record, ctx: ScoringContext) -> float:
    r"""Share of sampled answers equivalent to the greedy answer (its cluster frequency).

    .. math:: c = \frac{1}{k}\sum_{i=1}^{k} \mathbb{1}\big[s_i \in C(y^*)\big]

    In [0, 1] and meant as the probability that the greedy answer is right (Xiong
    et al. measure its calibration as such), so the table shows its raw calibration
    (``probability=True``; see also :func:`semantic_calibration_error`). The samples
    are clustered alone and the greedy answer placed among their clusters; needs two
    samples or more.

    References: [1] Wang et al., 2023, "Self-Consistency Improves Chain of
    Thought Reasoning in Language Models", ICLR; [2] Xiong et al., 2024, "Can
    LLMs Express Their Uncertainty?", ICLR (consistency-based confidence).
    """
    require_samples(record, 2)
    labels = clusters(record, ctx)
    return float(np.mean(labels[1:] == labels[0]))


@scorer("num_sets", needs=_SAMPLED, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=inverse_count("1 / (number of semantic clusters)"))
def num_sets(record: Record, ctx: ScoringContext) -> float:
    r"""Negated number of semantic clusters among the sampled answers.

    .. math:: c = -\,\big|\{C(s_1), \dots, C(s_k)\}\big|

    The samples are clustered alone (the greedy answer plays no part); needs
    two samples or more. Equals LM-Polygraph's ``NumSemSets``, negated, on the
    same clusters.

    References: [1] Lin, Trivedi & Sun, 2024, "Generating with Confidence:
    Uncertainty Quantification for Black-box Large Language Models", TMLR
    (NumSemSets); [2] Kuhn, Gal & Farquhar, 2023, ICLR.
    """
    return -float(len(np.unique(_sample_labels(record, ctx))))


@scorer("semantic_entropy", needs=_SAMPLED, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("exp(-H) = 1 / (effective number of semantic clusters) (normalised "
                        "negentropy 1 - H / log k would need the sample count k)"))
def semantic_entropy(record: Record, ctx: ScoringContext) -> float:
    r"""Negated discrete semantic entropy, from cluster frequencies among the samples.

    .. math:: c = \sum_{C} \hat p(C) \log \hat p(C), \qquad
              \hat p(C) = \frac{|\{i : s_i \in C\}|}{k}

    Needs no token probabilities, so it works with any backend. The samples
    are clustered alone (the greedy answer plays no part); needs two samples
    or more. Equals LM-Polygraph's ``SemanticEntropy`` with
    ``class_probability_estimation="frequency"`` (default ``mean``
    estimation: :math:`-\frac1k\sum_i \log \hat p(C(s_i))`, the same
    number), negated.

    References: [1] Farquhar, Kossen, Kuhn & Gal, 2024, "Detecting
    hallucinations in large language models using semantic entropy", Nature
    630 (discrete semantic entropy).
    """
    labels = _sample_labels(record, ctx)
    p = np.bincount(labels) / labels.size
    return -_entropy(p)


@scorer("semantic_entropy_weighted", needs={Need.SAMPLES, Need.TOKEN_LOGPROBS},
        cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("exp(-H) = 1 / (effective number of semantic clusters, "
                        "likelihood-weighted)"))
def semantic_entropy_weighted(record: Record, ctx: ScoringContext) -> float:
    r"""Negated semantic entropy with cluster probabilities from sequence likelihoods.

    .. math::
        \tilde p(s_i) = \exp\Big(\frac{1}{T_i}\sum_{t=1}^{T_i} \log p_t(s_{i,t})\Big), \quad
        p(C) = \frac{\sum_{i:\, s_i \in C} \tilde p(s_i)}{\sum_{j=1}^{k} \tilde p(s_j)}, \quad
        c = \sum_C p(C) \log p(C)

    The sum runs over **all** samples, repeats included, so a cluster's
    probability grows with how often it was sampled (Farquhar et al.'s
    ``sum_normalized`` cluster log-likelihoods and Rao entropy, with
    length-normalised sample likelihoods). E.g. with
    :math:`\log\tilde p = -0.1` for "Paris" and :math:`-0.56` for "Lyon",
    9+1, 5+5 and 1+9 samples give :math:`c = -0.242, -0.667, -0.422`. An
    empty sample is a cluster of its own whose :math:`\log\tilde p` is the mean of
    the non-empty samples' (:func:`~confide.scorers.features.agreement_logprobs`: the
    papers give it its end-of-sequence token's likelihood, which is not recorded), so
    it counts as disagreement: 2 × "Paris" + 8 empty samples give
    :math:`c = -2.163` (each sample a tenth of the mass), not the :math:`0` of 10 ×
    "Paris". At least two samples must have positive likelihood. LM-Polygraph's
    ``SemanticEntropy`` (default ``mean`` estimation) instead averages the
    unnormalised cluster log-likelihoods over the samples,
    :math:`-\frac1k\sum_i \log \sum_{j: s_j \in C(s_i)} p(s_j)`, with
    unnormalised sequence likelihoods; we follow Farquhar et al.

    References: [1] Kuhn, Gal & Farquhar, 2023, "Semantic Uncertainty:
    Linguistic Invariances for Uncertainty Estimation in Natural Language
    Generation", ICLR; [2] Farquhar, Kossen, Kuhn & Gal, 2024, "Detecting
    hallucinations in large language models using semantic entropy", Nature
    630 (normalised cluster probabilities).
    """
    samples = require_samples(record, 2)
    labels = _sample_labels(record, ctx)
    # any constant when every sample is empty: only ratios between samples matter
    logp = agreement_logprobs(samples, normalize=True, fallback=0.0)
    if np.isfinite(logp).sum() < 2:
        raise CannotScore(f"needs at least 2 samples of positive likelihood, the record has "
                          f"{int(np.isfinite(logp).sum())}")
    weight = np.exp(logp - logp.max())  # shifted for stability; cancels in p(C)
    mass = np.bincount(labels, weights=weight)
    return -_entropy(mass / mass.sum())


# ---------------------------------------------------------------------------
# graph scorers on the judge's affinity matrix


def _sample_affinity(record: Record, ctx: ScoringContext) -> np.ndarray:
    require_samples(record, 2)
    w: np.ndarray = affinity(record, ctx)
    return w[1:, 1:]


def _normalized_laplacian(w: np.ndarray) -> np.ndarray:
    d = w.sum(axis=1)
    inv_sqrt = 1.0 / np.sqrt(d)  # d_j >= W_jj = 1 > 0
    return np.eye(len(w)) - inv_sqrt[:, None] * w * inv_sqrt[None, :]


@scorer("eigv", needs=_SAMPLED, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=inverse_count("1 / (soft number of semantic clusters)"))
def eigv(record: Record, ctx: ScoringContext) -> float:
    r"""Negated sum of eigenvalues of the graph Laplacian (a soft number of clusters).

    .. math:: L = I - D^{-1/2} W D^{-1/2}, \quad D = \operatorname{diag}(W\mathbf 1), \quad
              c = -\sum_{j=1}^{k} \max(0, 1 - \lambda_j(L))

    With a 0/1 judge (``exact``, ``numeric``, ``ast``) this equals
    ``num_sets``.

    References: [1] Lin, Trivedi & Sun, 2024, "Generating with Confidence",
    TMLR (U_EigV).
    """
    lam = np.linalg.eigvalsh(_normalized_laplacian(_sample_affinity(record, ctx)))
    return -float(np.clip(1.0 - lam, 0.0, None).sum())


@scorer("degree", needs=_SAMPLED, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=one_plus("the mean pairwise affinity of the samples"))
def degree(record: Record, ctx: ScoringContext) -> float:
    r"""Negated degree-matrix uncertainty: one minus the mean normalised degree.

    .. math:: c = -\frac{\operatorname{tr}(kI - D)}{k^2}
              = \frac{1}{k^2}\sum_{j,l} W_{jl} - 1

    References: [1] Lin, Trivedi & Sun, 2024, "Generating with Confidence",
    TMLR (U_Deg).
    """
    w = _sample_affinity(record, ctx)
    k = len(w)
    return -float((k * k - w.sum()) / (k * k))


@scorer("eccentricity", needs=_SAMPLED, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=no_readable("a spread in the Laplacian's spectral embedding, whose "
                             "scale grows with the number of samples and clusters"))
def eccentricity(record: Record, ctx: ScoringContext) -> float:
    r"""Negated spread of the samples in the Laplacian's spectral embedding.

    .. math:: c = -\Big(\sum_{j=1}^{k} \lVert v_j - \bar v\rVert_2^2\Big)^{1/2}

    where :math:`v_j` is row :math:`j` of the eigenvectors of :math:`L = I -
    D^{-1/2} W D^{-1/2}` whose eigenvalues are below 0.9
    (:data:`ECC_EIGENVALUE_THRESHOLD`), and :math:`\bar v` their mean. For a
    0/1 judge with :math:`m` clusters this is :math:`-\sqrt{m - 1}`.

    References: [1] Lin, Trivedi & Sun, 2024, "Generating with Confidence",
    TMLR (U_Ecc).
    """
    lam, vec = np.linalg.eigh(_normalized_laplacian(_sample_affinity(record, ctx)))
    v = vec[:, lam < ECC_EIGENVALUE_THRESHOLD]
    return -float(np.linalg.norm(v - v.mean(axis=0, keepdims=True)))


@scorer("kernel_language_entropy", needs=_SAMPLED, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=exp_of("exp(-H_vN) = 1 / (effective number of distinct meanings in the samples' "
                        "kernel)"))
def kernel_language_entropy(record: Record, ctx: ScoringContext) -> float:
    r"""Negated von Neumann entropy of the normalised heat kernel of the samples' graph.

    .. math::
        L = D - W, \quad H = e^{-tL}, \quad
        K_{jl} = \frac{1}{k}\,\frac{H_{jl}}{\sqrt{H_{jj} H_{ll}}}, \quad
        c = \operatorname{tr}(K \log K) = \sum_j \mu_j \log \mu_j

    with :math:`\mu_j` the eigenvalues of :math:`K` (unit diagonal divided by
    :math:`k`, so :math:`\operatorname{tr} K = 1`) and :math:`t = 0.3`
    (:data:`KLE_TIME`). This is Nikitin et al.'s definition and code
    (``normalize_kernel`` then division by :math:`k`), as in LM-Polygraph's
    ``KernelLanguageEntropy`` whose default ``scale=True`` further divides
    the entropy by :math:`\log k`; we do not scale (the paper's value).
    :math:`k` unrelated samples give :math:`-\log k`, the least confident
    value.

    References: [1] Nikitin, Kossen, Gal & Marttinen, 2024, "Kernel Language
    Entropy: Fine-grained Uncertainty Quantification for LLMs from Semantic
    Similarities", NeurIPS.
    """
    w = _sample_affinity(record, ctx)
    lam, vec = np.linalg.eigh(np.diag(w.sum(axis=1)) - w)
    heat = (vec * np.exp(-KLE_TIME * lam)) @ vec.T  # e^{-tL}, L symmetric
    d = np.sqrt(np.diag(heat))
    kernel = heat / np.outer(d, d) / len(w)
    mu = np.clip(np.linalg.eigvalsh(kernel), 0.0, None)  # PSD; clip rounding below 0
    return -_entropy(mu)
