r"""Semantic scorers: how much the sampled answers agree in *meaning*.

Notation: the record holds the greedy answer :math:`y^*` and :math:`k` sampled
answers :math:`s_1..s_k`. The run's equivalence judge (:mod:`confide.judges`)
clusters the samples alone into :math:`C_1..C_m` and places the greedy answer
among them (:math:`C(y^*)` is its cluster, possibly none of the samples'), and
gives a symmetric affinity :math:`W \in [0,1]^{k \times k}` between samples,
with :math:`W_{jj} = 1`. An empty sample is no answer: it is equivalent to
nothing (its own cluster), has affinity 0 to every other sample and
likelihood 0 (:mod:`confide.features`). Scorers of the sample distribution
need at least two samples: one sample always forms one cluster, which would
read as certain.
Clusters and affinities come from :mod:`confide.features`, computed once per
record and shared by every scorer here. Scores are confidences: uncertainty
measures are negated so that higher = more likely correct.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from confide.errors import CannotScore, InvalidInputError
from confide.features import (
    affinity,
    answers,
    clusters,
    embeddings,
    require_samples,
    sample_logprobs,
)
from confide.judges import Judge, make_judge
from confide.metrics.calibration import calibration_error
from confide.records import Generation, Record
from confide.scorers.base import Cost, Need, ScoringContext, scorer
from confide.scorers.spans import meaningful_spans

__all__ = ["ECC_EIGENVALUE_THRESHOLD", "KLE_TIME", "MARS_TEMPERATURE", "SAR_TEMPERATURE",
           "RELEVANCE_WINDOW", "mars_value", "meaningful_spans", "relevance_spans",
           "removal_relevance", "removal_relevances", "semantic_calibration_error", "word_units"]

DEFAULT_SAMPLES = 10
ECC_EIGENVALUE_THRESHOLD = 0.9  # Lin et al. (2024): eigenvectors with eigenvalue below this
KLE_TIME = 0.3                  # heat-kernel time t of kernel_language_entropy
SAR_TEMPERATURE = 1e-3          # Duan et al. (2024): t in SentSAR
MARS_TEMPERATURE = 0.1          # Bakman et al. (2024): temperature of the importance softmax
RELEVANCE_WINDOW = 32           # longer answers: relevance within a sentence (removal_relevance)

_SAMPLED = {Need.SAMPLES}


def _sample_labels(record: Record, ctx: ScoringContext) -> np.ndarray:
    require_samples(record, 2)
    labels: np.ndarray = clusters(record, ctx)
    return labels[1:]


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@scorer("agreement", needs=_SAMPLED, cost=Cost.MODEL_CALLS, n_samples=DEFAULT_SAMPLES)
def agreement(record: Record, ctx: ScoringContext) -> float:
    r"""Share of sampled answers equivalent to the greedy answer (its cluster frequency).

    .. math:: c = \frac{1}{k}\sum_{i=1}^{k} \mathbb{1}\big[s_i \in C(y^*)\big]

    In [0, 1]; a probability-like confidence (see
    :func:`semantic_calibration_error`). The samples are clustered
    alone and the greedy answer placed among their clusters; needs two samples or more.

    References: [1] Wang et al., 2023, "Self-Consistency Improves Chain of
    Thought Reasoning in Language Models", ICLR; [2] Xiong et al., 2024, "Can
    LLMs Express Their Uncertainty?", ICLR (consistency-based confidence).
    """
    require_samples(record, 2)
    labels = clusters(record, ctx)
    return float(np.mean(labels[1:] == labels[0]))


@scorer("num_sets", needs=_SAMPLED, cost=Cost.MODEL_CALLS, n_samples=DEFAULT_SAMPLES)
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


@scorer("semantic_entropy", needs=_SAMPLED, cost=Cost.MODEL_CALLS, n_samples=DEFAULT_SAMPLES)
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
        cost=Cost.MODEL_CALLS, n_samples=DEFAULT_SAMPLES)
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
    empty sample has :math:`\tilde p = 0` (no mass), and at least two samples
    must have mass, so a record of one answer and empty samples is refused
    rather than read as certain. LM-Polygraph's
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
    logp = sample_logprobs(samples, normalize=True)
    if np.isfinite(logp).sum() < 2:
        raise CannotScore(f"needs at least 2 samples of positive likelihood, the record has "
                          f"{int(np.isfinite(logp).sum())} (the others are empty)")
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


@scorer("eigv", needs=_SAMPLED, cost=Cost.MODEL_CALLS, n_samples=DEFAULT_SAMPLES)
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


@scorer("degree", needs=_SAMPLED, cost=Cost.MODEL_CALLS, n_samples=DEFAULT_SAMPLES)
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


@scorer("eccentricity", needs=_SAMPLED, cost=Cost.MODEL_CALLS, n_samples=DEFAULT_SAMPLES)
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


@scorer("kernel_language_entropy", needs=_SAMPLED, cost=Cost.MODEL_CALLS,
        n_samples=DEFAULT_SAMPLES)
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


# ---------------------------------------------------------------------------
# relevance-weighted and hybrid scorers


def _token_sar(record: Record, ctx: ScoringContext, gen: Generation, name: str) -> float:
    r"""TokenSAR(g) = -sum_i w_i log p(z_i), w from embedding relevance of each token."""
    value: float = ctx.cached(record, name, lambda: _token_sar_values(record, [gen])[0])
    return value


def removal_relevance(question: str, tokens: list[str], units: list[list[int]], *,
                      window: int | None = RELEVANCE_WINDOW) -> np.ndarray:
    r"""How much removing each unit of answer tokens moves the embedding of question + answer.

    .. math:: R(g) = \max\Big(0,\ 1 - \cos\big(e(x \oplus y_S),\
              e(x \oplus y_{S \setminus g})\big)\Big)

    :math:`e` is the all-MiniLM-L6-v2 sentence embedding, :math:`x` the
    question, :math:`y_S` the token texts of the span :math:`S` that holds
    unit :math:`g`, joined, and :math:`y_{S \setminus g}` the same without
    the tokens of :math:`g`. TokenSAR's relevance (units of one token) and
    MARS's importance (units of one word).

    The span is the whole answer when it has at most ``window`` tokens (every
    short answer: the papers' definition exactly), else the sentence that
    holds the unit, cut into pieces of at most ``window`` tokens
    (:func:`relevance_spans`); ``window=None`` always takes the whole
    answer. Why: with the whole answer each of the :math:`T` units costs an
    embedding of all :math:`T` tokens, quadratic in the length, and the
    encoder reads only 256 word pieces, so every token past them gets
    relevance 0. Within a sentence the cost is linear in the length. Measured
    on GSM8K, greedy + 10 samples of 153-165 tokens on average
    (``benchmarks/scoring_cost.py``, ``--relevance whole`` for the
    whole-answer form): SAR took 61 s an item with the whole answer and
    31 s within sentences.
    """
    return removal_relevances(question, [(tokens, units)], window=window)[0]


def removal_relevances(question: str, answers: Sequence[tuple[list[str], list[list[int]]]], *,
                       window: int | None = RELEVANCE_WINDOW) -> list[np.ndarray]:
    """:func:`removal_relevance` of several answers to one question, in one embedding call
    (texts sorted by length together, each unique text embedded once)."""
    from confide.text import embed_texts

    texts: list[str] = []
    plans = []  # per answer: per unit, (index of the span's text, index of the text without it)
    for tokens, units in answers:
        plan = []
        for span in relevance_spans(tokens, units, window):
            full = len(texts)
            texts.append(f"{question} {''.join(tokens[i] for u in span for i in units[u]).strip()}")
            for u in span:
                plan.append((u, full, len(texts)))
                kept = "".join(tokens[i] for v in span if v != u for i in units[v]).strip()
                texts.append(f"{question} {kept}")
        plans.append(plan)
    e = np.asarray(embed_texts(texts), dtype=np.float64) if texts else np.zeros((0, 1))
    out = []
    for (_, units), plan in zip(answers, plans, strict=True):
        r = np.zeros(len(units))
        for u, full, without in plan:
            r[u] = max(0.0, 1.0 - float(e[without] @ e[full]))
        out.append(r)
    return out


def relevance_spans(tokens: list[str], units: list[list[int]], window: int | None
                    ) -> list[list[int]]:
    """The spans (lists of unit indices) within which :func:`removal_relevance` removes units.

    One span of all units when the answer has at most ``window`` tokens (or
    ``window`` is None); else sentences (a unit whose text ends with ``.``,
    ``!``, ``?`` or a line break closes one), each cut after ``window`` tokens.

    >>> relevance_spans(["Paris", ".", " It", " is", "."], [[0], [1], [2], [3], [4]], 3)
    [[0, 1], [2, 3, 4]]
    >>> relevance_spans(["Paris", "."], [[0], [1]], 3)
    [[0, 1]]
    """
    if window is None or len(tokens) <= window:
        return [list(range(len(units)))]
    spans: list[list[int]] = [[]]
    size = 0
    for u, unit in enumerate(units):
        n = len(unit)
        if spans[-1] and size + n > window:
            spans.append([])
            size = 0
        spans[-1].append(u)
        size += n
        text = "".join(tokens[i] for i in unit)
        if text.rstrip(" \t").endswith((".", "!", "?", "\n")) or text.endswith("\n"):
            spans.append([])
            size = 0
    return [span for span in spans if span]


def _answer_tokens(gen: Generation) -> tuple[np.ndarray, list[str]]:
    if gen.token_logprobs is None:
        raise CannotScore("the backend gave no token logprobs")
    logp = np.asarray(gen.token_logprobs, dtype=np.float64)
    tokens = list(gen.tokens)
    if logp.size == 0:
        raise CannotScore("empty answer: no tokens to weigh")
    if len(tokens) != logp.size:
        raise CannotScore("the backend gave no token texts to measure relevance with")
    return logp, tokens


def _token_sar_values(record: Record, gens: Sequence[Generation]) -> list[float]:
    """TokenSAR of each of ``gens``, their relevance texts embedded in one call."""
    read = [_answer_tokens(gen) for gen in gens]
    relevances = removal_relevances(
        record.item.question, [(tokens, [[i] for i in range(len(tokens))]) for _, tokens in read])
    values = []
    for (logp, _), relevance in zip(read, relevances, strict=True):
        total = relevance.sum()
        weights = relevance / total if total > 0 else np.full(logp.size, 1.0 / logp.size)
        values.append(float(-(weights * logp).sum()))
    return values


@scorer("token_sar", needs={Need.TOKEN_LOGPROBS}, cost=Cost.FEATURES)
def token_sar(record: Record, ctx: ScoringContext) -> float:
    r"""Negated TokenSAR: relevance-weighted negative log-likelihood of the greedy answer.

    .. math::
        R(z_i) = 1 - \cos\big(e(x \oplus y),\ e(x \oplus y_{\setminus i})\big), \quad
        \tilde R_i = \frac{R(z_i)}{\sum_j R(z_j)}, \quad
        c = \sum_{i=1}^{T} \tilde R_i \log p_i(z_i)

    :math:`e` is the all-MiniLM-L6-v2 sentence embedding, :math:`x` the
    question and :math:`y_{\setminus i}` the answer without token :math:`i`
    (relevance clipped at 0; uniform weights if no token changes the
    embedding). An answer longer than :data:`RELEVANCE_WINDOW` tokens has
    each token removed from its own sentence instead of the whole answer
    (:func:`removal_relevance`: the whole-answer form is quadratic in the
    length and blind past the encoder's 256 word pieces).

    References: [1] Duan et al., 2024, "Shifting Attention to Relevance:
    Towards the Predictive Uncertainty Quantification of Free-Form Large
    Language Models", ACL (token-level SAR).
    """
    return -_token_sar(record, ctx, record.greedy, "token_sar:greedy")


@scorer("sar", needs={Need.SAMPLES, Need.TOKEN_LOGPROBS}, cost=Cost.MODEL_CALLS,
        n_samples=DEFAULT_SAMPLES)
def sar(record: Record, ctx: ScoringContext) -> float:
    r"""Negated SAR: sentence- and token-relevance-shifted uncertainty over the samples.

    .. math::
        p'(s_j) = e^{-\mathrm{TokenSAR}(s_j)}, \quad
        \mathrm{SentSAR}(s_j) = -\log\Big(p'(s_j) + \frac{1}{t}\sum_{l \ne j}
            R_S(s_j, s_l)\, p'(s_l)\Big), \quad
        c = -\frac{1}{k}\sum_{j=1}^{k} \mathrm{SentSAR}(s_j)

    :math:`R_S` is the embedding cosine similarity clipped to [0, 1] and
    :math:`t = 10^{-3}` (:data:`SAR_TEMPERATURE`, the paper's value). Each
    sample's TokenSAR is ``token_sar``'s, the removal texts of all samples
    embedded in one call; past :data:`RELEVANCE_WINDOW` tokens a token is
    removed from its sentence (:func:`removal_relevance`, which gives the
    measured cost).

    References: [1] Duan et al., 2024, "Shifting Attention to Relevance", ACL (SAR).
    """
    samples = require_samples(record, 2)
    p = np.exp(-np.array(ctx.cached(record, "token_sar:samples",
                                    lambda: _token_sar_values(record, samples))))
    e = embeddings(record, ctx, "answers", answers(record))[1:]
    sim = np.clip(e @ e.T, 0.0, 1.0)
    np.fill_diagonal(sim, 0.0)
    shifted = p + (sim @ p) / SAR_TEMPERATURE
    return float(np.mean(np.log(shifted)))


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def word_units(tokens: list[str]) -> list[list[int]]:
    """Group answer tokens into words and punctuation marks (indices into ``tokens``).

    A token starts a new unit after whitespace (its own leading space, or a
    whitespace-only token before it) and where the text switches between
    word characters and punctuation; a whitespace-only token joins the unit
    before it. Like the ``\\w+|[^\\w\\s]`` split MARS uses, within token bounds.

    >>> word_units(["The", " Eiff", "el", " Tower", ".", "\\n"])
    [[0], [1, 2], [3], [4, 5]]
    """
    units: list[list[int]] = []
    last = ""          # the last non-space character so far
    boundary = True    # whitespace since the last unit
    for i, piece in enumerate(tokens):
        body = piece.strip()
        if not body:
            if units:
                units[-1].append(i)
            else:
                units.append([i])
            boundary = True
            continue
        if boundary or piece[0].isspace() or _is_word(body[0]) != _is_word(last):
            units.append([i])
        else:
            units[-1].append(i)
        last, boundary = body[-1], piece[-1].isspace()
    return units


def mars_value(logprobs: np.ndarray, units: list[list[int]], importance: np.ndarray, *,
               temperature: float = MARS_TEMPERATURE) -> float:
    r"""MARS from token log-probabilities, word units and each unit's importance.

    .. math::
        \tilde r_g = \frac{r_g}{\max_{g'} r_{g'}}, \quad
        w_g = \frac{e^{\tilde r_g/\theta}}{\sum_{g'} e^{\tilde r_{g'}/\theta}}, \quad
        c = \frac12\sum_g w_g\,\bar\ell_g + \frac12\cdot\frac1T\sum_{t=1}^{T}\ell_t

    :math:`\bar\ell_g` is the mean log-probability of unit :math:`g`'s
    tokens, :math:`\theta` = 0.1; all importances 0 give uniform
    :math:`w`.

    >>> w = np.exp(10) / (np.exp(10) + 1)   # unit 0 is the important one
    >>> value = mars_value(np.log([0.5, 0.8, 0.8]), [[0], [1, 2]], np.array([0.2, 0.0]))
    >>> bool(np.isclose(value, 0.5 * (w * np.log(0.5) + (1 - w) * np.log(0.8))
    ...                        + 0.5 * np.mean(np.log([0.5, 0.8, 0.8]))))
    True
    """
    ell = np.asarray(logprobs, dtype=np.float64)
    r = np.asarray(importance, dtype=np.float64)
    top = float(r.max()) if r.size else 0.0
    scaled = r / top if top > 0 else np.zeros_like(r)
    logits = scaled / temperature
    w = np.exp(logits - logits.max())
    w /= w.sum()
    unit_lp = np.array([ell[unit].mean() for unit in units])
    return 0.5 * float(w @ unit_lp) + 0.5 * float(ell.mean())


@scorer("mars", needs={Need.TOKEN_LOGPROBS}, cost=Cost.FEATURES)
def mars(record: Record, ctx: ScoringContext) -> float:
    r"""MARS: the greedy answer's likelihood with meaning-aware weights on its words.

    .. math::
        c = \frac12\sum_g w_g\,\bar\ell_g + \frac12\cdot\frac1T\sum_{t=1}^{T}\log p_t(y_t),
        \qquad w = \mathrm{softmax}(\tilde r / 0.1)

    (:func:`mars_value`). Half length-normalised log-likelihood, half a
    weighted mean of each word's mean token log-probability, the weights
    favouring the words that carry the answer's meaning, so that a doubtful
    filler word costs less than a doubtful key word. Units are words and
    punctuation marks (:func:`word_units`); a word's importance
    :math:`r_g` is how much removing it moves the MiniLM embedding of
    question + answer (:func:`removal_relevance`; past
    :data:`RELEVANCE_WINDOW` tokens, of question + the word's sentence),
    divided by the largest so the most important word has importance 1.

    Differs from the paper and TruthTorchLM's ``MARS`` in the importance
    model: theirs is a BERT token classifier fine-tuned to mark phrases and
    rate each phrase's importance to the question (``duygunuryldz/MARS`` on
    the Hugging Face hub, not available offline), which also groups words
    into phrases. Here units are words and importance comes from the
    bundled sentence encoder; the combination (softmax at temperature 0.1,
    half and half with the length-normalised likelihood) is theirs.

    References: [1] Bakman et al., 2024, "MARS: Meaning-Aware Response
    Scoring for Uncertainty Estimation in Generative LLMs", ACL.
    """
    logp, tokens = _answer_tokens(record.greedy)

    def compute() -> float:
        units = word_units(tokens)
        importance = removal_relevance(record.item.question, tokens, units)
        return mars_value(logp, units, importance)

    if not np.isfinite(logp).all():
        raise CannotScore("a token of the answer has probability 0")
    value: float = ctx.cached(record, "mars", compute)
    return value


# ---------------------------------------------------------------------------
# function calling


@scorer("meaningful_logprob", needs={Need.TOKEN_LOGPROBS})
def meaningful_logprob(record: Record) -> float:
    r"""Mean log-probability over the tokens that carry a function call's meaning.

    .. math:: c = \frac{1}{|M|}\sum_{t \in M} \log p_t(y_t)

    where :math:`M` holds the answer tokens that overlap the function name or
    an argument value (:func:`meaningful_spans`), leaving out JSON
    punctuation, quotes, keys and argument names, whose probabilities say
    little about whether the call is right. For function-calling tasks
    (``bfcl``); an answer with no parseable call cannot be scored.

    References: [1] Seed 000 / "Uncertainty Quantification for LLM
    Function-Calling" (log-probabilities over semantically meaningful tokens).
    """
    gen = record.greedy
    if gen.token_logprobs is None:
        raise CannotScore("the backend gave no token logprobs")
    logp = np.asarray(gen.token_logprobs, dtype=np.float64)
    if not gen.tokens or len(gen.tokens) != logp.size:
        raise CannotScore("the backend gave no token texts to locate the call's values")
    raw = "".join(gen.tokens)
    spans = meaningful_spans(raw)
    if spans is None:
        raise CannotScore("the answer holds no parseable function call")
    token_ends = np.cumsum([len(t) for t in gen.tokens])
    token_starts = token_ends - np.array([len(t) for t in gen.tokens])
    keep = np.array([any(s < b and e > a and s < e for s, e in spans)  # overlaps a span
                     for a, b in zip(token_starts, token_ends)], dtype=bool)
    if not keep.any():
        raise CannotScore("the function call has no name or value tokens")
    return float(logp[keep].mean())


# ---------------------------------------------------------------------------
# calibration of the agreement


def semantic_calibration_error(records: Sequence[Record], *, grader: str | None = None,
                               judge: str | Judge = "exact", n_bins: int = 10,
                               **judge_options: Any) -> float:
    r"""Calibration error of the greedy answer's cluster frequency as P(correct).

    .. math:: \hat p_n = \frac{1}{k}\sum_{i=1}^{k}\mathbb 1[s_{n,i} \in C(y^*_n)], \qquad
              \mathrm{ECE} = \sum_{b=1}^{B} \frac{|S_b|}{N}\,
              \Big|\overline{g}_{S_b} - \overline{\hat p}_{S_b}\Big|

    :math:`\hat p_n` is the ``agreement`` scorer for record :math:`n` (clusters
    from ``judge``) and :math:`g_n` its grade; the ECE is
    :func:`~confide.metrics.calibration_error` with ``n_bins`` equal-width bins.
    (Here beside the scorer, not in :mod:`confide.metrics`, which takes arrays only.)

    Parameters
    ----------
    records : stored records with samples and grades
    grader : str, optional
        Which stored grade to use; default: the only grader of the records.
    judge : str or Judge, default "exact"
    n_bins : int, default 10

    Returns
    -------
    float in [0, 1]; lower is better.

    Raises
    ------
    InvalidInputError
        No records, a record without samples or without the grade, or an
        ambiguous grader.

    References
    ----------
    [1] Seed 000 / "Trained on Tokens, Calibrated on Concepts: The Emergence
        of Semantic Calibration in LLMs" (semantic calibration of sampled
        answers' cluster frequencies).
    [2] Guo et al., 2017, "On Calibration of Modern Neural Networks", ICML (ECE).
    """
    if not records:
        raise InvalidInputError("no records to measure", field="records")
    if grader is None:
        names = sorted({g for r in records for g in r.grades})
        if len(names) != 1:
            raise InvalidInputError(f"name one grader of {names}", field="grader")
        grader = names[0]
    judge_obj = judge if isinstance(judge, Judge) else make_judge(judge, **judge_options)
    ctx = ScoringContext(judge=judge_obj)
    probability, correct = [], []
    for r in records:
        if not r.samples:
            raise InvalidInputError(f"record {r.item.id!r} has no samples", field="samples")
        if grader not in r.grades:
            raise InvalidInputError(f"record {r.item.id!r} has no {grader!r} grade",
                                    field="grades")
        probability.append(agreement(r, ctx))
        correct.append(r.grades[grader])
    return calibration_error(probability, correct, n_bins=n_bins)
