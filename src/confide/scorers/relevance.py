r"""Relevance-weighted scorers: the answer's log-probabilities, each part weighted by how
much it matters to the question (TokenSAR, SAR, MARS, meaningful log-probability).

A part's relevance is how far removing it moves the sentence embedding of question +
answer (:func:`removal_relevance`); past :data:`RELEVANCE_WINDOW` tokens a part is
removed from its own sentence, since the whole-answer form is quadratic in length and
blind past the encoder's 256 word pieces. SAR's sample similarity shares the semantic
scorers' embeddings (:mod:`confide.scorers.features`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from confide.core.errors import CannotScore
from confide.core.options import DEFAULT_SAMPLES
from confide.core.records import Generation, Record
from confide.scorers.base import Cost, Need, ScoringContext, exp_of, no_readable, scorer
from confide.scorers.features import answers, embeddings, require_samples
from confide.scorers.spans import meaningful_spans
from confide.text import embed_texts

__all__ = ["MARS_TEMPERATURE", "RELEVANCE_WINDOW", "SAR_TEMPERATURE", "mars_value",
           "meaningful_spans", "relevance_spans", "removal_relevance", "removal_relevances",
           "word_units"]

SAR_TEMPERATURE = 1e-3          # Duan et al. (2024): t in SentSAR
MARS_TEMPERATURE = 0.1          # Bakman et al. (2024): temperature of the importance softmax
RELEVANCE_WINDOW = 32           # longer answers: relevance within a sentence (removal_relevance)


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


@scorer("token_sar", needs={Need.TOKEN_LOGPROBS}, cost=Cost.FEATURES,
        readable=exp_of("the relevance-weighted geometric-mean token probability"))
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


@scorer("sar", needs={Need.SAMPLES, Need.TOKEN_LOGPROBS}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=no_readable("a log of a likelihood plus 1/t = 1000 times similar samples' "
                             "likelihoods: it rises above 0 and has no fixed upper bound"))
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
    measured cost). An empty sample has no tokens to weigh: it is similar to no
    sample and its :math:`\log p'` is the mean of the other samples'
    (the rule of :func:`~confide.scorers.features.agreement_logprobs`), so it counts
    as a sample no other supports; a record whose samples are all empty is refused.

    References: [1] Duan et al., 2024, "Shifting Attention to Relevance", ACL (SAR).
    """
    samples = require_samples(record, 2)
    empty = np.array([s.empty for s in samples], dtype=bool)
    if empty.all():
        raise CannotScore("every sample is empty")
    kept = [s for s, gone in zip(samples, empty, strict=True) if not gone]
    log_p = np.empty(len(samples))
    log_p[~empty] = -np.array(ctx.cached(record, "token_sar:samples",
                                         lambda: _token_sar_values(record, kept)))
    measured = log_p[~empty][np.isfinite(log_p[~empty])]
    log_p[empty] = measured.mean() if measured.size else -np.inf  # the typical likelihood
    p = np.exp(log_p)
    e = embeddings(record, ctx, "answers", answers(record))[1:]
    sim = np.clip(e @ e.T, 0.0, 1.0)
    sim[empty, :] = 0.0  # an empty sample is no answer: similar to none
    sim[:, empty] = 0.0
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


@scorer("mars", needs={Need.TOKEN_LOGPROBS}, cost=Cost.FEATURES,
        readable=exp_of("the meaning-aware weighted geometric-mean token probability"))
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


@scorer("meaningful_logprob", needs={Need.TOKEN_LOGPROBS},
        readable=exp_of("the geometric-mean probability of the tokens that carry "
                        "the call's meaning"))
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
