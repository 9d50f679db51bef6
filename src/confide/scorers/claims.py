r"""Claim-level scorers: one confidence per claim of a long answer (higher = more likely true).

Each is a plain function ``fn(record, claims, ctx)`` registered in the one
:data:`~confide.scorers.SCORERS` with ``level="claim"``
(:func:`~confide.scorers.base.scorer`), and applied through the one
:func:`~confide.scorers.base.run_scorer` (``claims=``): it returns one entry
per claim, a number or a :class:`~confide.core.errors.CannotScore` naming why that
claim has none, and is stored as NaN with the reason for such a claim and for
a value that is not a finite number; a scorer that cannot score the record at
all raises :class:`~confide.core.errors.CannotScore` and every claim gets NaN with
that reason. An empty answer has no claims, and a claim with empty text gets
NaN with the reason without reaching the scorer. The claim stage of a run is
:mod:`confide.runs.claims`.

Notation: a claim :math:`C` covers the answer tokens :math:`t \in C`
(:func:`~confide.scorers.claim_split.split_claims`); :math:`p_t` is the model's
next-token distribution at step :math:`t` and :math:`y_t` the chosen token.

=========================  ======================================================
``claim_mean_logprob``     mean log-probability of the claim's tokens
``claim_min_logprob``      least likely token of the claim
``claim_mean_entropy``     negative mean token entropy over the claim
``claim_self_certainty``   mean :math:`\mathrm{KL}(U \| p_t)` over the claim
``claim_ccp``              claim-conditioned probability (Fadeeva et al., 2024)
``claim_support``          share of sampled answers that support the claim (LUQ)
``claim_p_true``           P(True) asked about the claim
=========================  ======================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from confide.backends.base import HasChatTemplate
from confide.backends.binary import two_way_probabilities
from confide.core.errors import CannotScore
from confide.core.records import Claim, Record
from confide.scorers.base import Cost, Need, ScoringContext, scorer, scorer_at
from confide.scorers.claim_split import sentence_spans, token_spans
from confide.scorers.reflexive import P_TRUE_TOP_K, P_TRUE_VARIANTS, question_text

__all__ = ["DEFAULT_CLAIM_SCORERS", "aggregate_claims", "claim_p_true_prompt"]

ClaimValue = float | CannotScore
DEFAULT_SAMPLES = 5


# --------------------------------------------------------------------------- token statistics


def _claim_stat(record: Record, claim: Claim, name: str) -> np.ndarray | CannotScore:
    values = getattr(record.greedy, name)
    if values is None:
        raise CannotScore(f"the backend gave no {name.replace('_', ' ')}")
    if not claim.tokens:
        return CannotScore("the claim covers no answer token")
    out = np.asarray(values, dtype=np.float64)[claim.tokens]
    if not np.isfinite(out).all():
        return CannotScore(f"{name.replace('_', ' ')} not finite inside the claim")
    return out


def _over_tokens(record: Record, claims: list[Claim], name: str,
                 reduce: Callable[[np.ndarray], float]) -> list[ClaimValue]:
    out: list[ClaimValue] = []
    for claim in claims:
        values = _claim_stat(record, claim, name)
        out.append(values if isinstance(values, CannotScore) else reduce(values))
    return out


@scorer("claim_mean_logprob", level="claim", needs={Need.TOKEN_LOGPROBS})
def claim_mean_logprob(record: Record, claims: list[Claim], ctx: ScoringContext
                       ) -> list[ClaimValue]:
    r"""Mean log-probability of the claim's tokens.

    .. math:: c(C) = \frac{1}{|C|}\sum_{t \in C} \log p_t(y_t)

    References: [1] Fadeeva et al., 2024, "Fact-Checking the Output of Large
    Language Models via Token-Level Uncertainty Quantification", ACL Findings
    (Perplexity baseline at claim level); [2] Malinin & Gales, 2021, ICLR.
    """
    return _over_tokens(record, claims, "token_logprobs", lambda v: float(np.mean(v)))


@scorer("claim_min_logprob", level="claim", needs={Need.TOKEN_LOGPROBS})
def claim_min_logprob(record: Record, claims: list[Claim], ctx: ScoringContext
                      ) -> list[ClaimValue]:
    r"""Log-probability of the claim's least likely token.

    .. math:: c(C) = \min_{t \in C} \log p_t(y_t)

    References: [1] Manakul et al., 2023, "SelfCheckGPT", EMNLP (Max(−log p)
    per sentence, negated here so that higher means more confident).
    """
    return _over_tokens(record, claims, "token_logprobs", lambda v: float(np.min(v)))


@scorer("claim_mean_entropy", level="claim", needs={Need.TOKEN_ENTROPIES})
def claim_mean_entropy(record: Record, claims: list[Claim], ctx: ScoringContext
                       ) -> list[ClaimValue]:
    r"""Negative mean entropy of the next-token distributions over the claim.

    .. math:: c(C) = -\frac{1}{|C|}\sum_{t \in C} H(p_t)

    References: [1] Manakul et al., 2023, "SelfCheckGPT", EMNLP (Avg(H) per
    sentence); [2] Fadeeva et al., 2024, ACL Findings (token entropy at claim level).
    """
    return _over_tokens(record, claims, "token_entropies", lambda v: -float(np.mean(v)))


@scorer("claim_self_certainty", level="claim", needs={Need.TOKEN_KL_UNIFORM})
def claim_self_certainty(record: Record, claims: list[Claim], ctx: ScoringContext
                         ) -> list[ClaimValue]:
    r"""Self-certainty over the claim: mean KL divergence from uniform to each :math:`p_t`.

    .. math:: c(C) = \frac{1}{|C|}\sum_{t \in C} \mathrm{KL}(U \,\|\, p_t)

    References: [1] Kang et al., 2025, "Scalable Best-of-N Selection for Large
    Language Models via Self-Certainty", arXiv:2502.18581 (per answer; here
    restricted to the claim's tokens).
    """
    return _over_tokens(record, claims, "token_kl_uniform", lambda v: float(np.mean(v)))


# --------------------------------------------------------------------------- CCP


def _judge(ctx: ScoringContext) -> Any:
    if ctx.judge is None:
        raise CannotScore("no equivalence judge in the run")
    return ctx.judge


@scorer("claim_ccp", level="claim", needs={Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS},
        cost=Cost.FEATURES, probability=True)
def claim_ccp(record: Record, claims: list[Claim], ctx: ScoringContext) -> list[ClaimValue]:
    r"""Claim-conditioned probability: the share of each token's probability that keeps the claim.

    For token :math:`t` of claim :math:`C` with chosen token :math:`y_t` and
    top alternatives :math:`y_t^{(k)}`, let :math:`x_t^{(k)}` be the claim's
    text up to :math:`t` with :math:`y_t` replaced by :math:`y_t^{(k)}`, and
    :math:`E_t` the alternatives whose :math:`x_t^{(k)}` the run's
    equivalence judge (:mod:`confide.equivalence.judges`) finds equivalent to the
    original :math:`x_t`. Then

    .. math::
        \mathrm{CCP}_t = \frac{p_t(y_t) + \sum_{k \in E_t} p_t(y_t^{(k)})}
                              {p_t(y_t) + \sum_{k} p_t(y_t^{(k)})}, \qquad
        c(C) = \prod_{t \in C} \mathrm{CCP}_t

    The paper classifies each alternative by NLI as entailing, contradicting
    or neutral and leaves neutral ones out of both sums; a judge only says
    equivalent or not, so every alternative that changes the meaning counts
    as contradicting. LM-Polygraph's ``ClaimConditionedProbabilityClaim``
    (``nli_context="fact_pref"``, the claim prefix given to the NLI model, as
    here) also counts every NLTK stop word as fully kept; confide ships no
    stop-word list, so every token counts. Our value equals Polygraph's
    (negated, it returns :math:`-c`) when its NLI finds no neutral alternative
    and no claim token is a stop word, and is lower or equal otherwise. A token without
    alternatives contributes 1 (nothing the claim could have said instead).
    The answer-level ``ccp`` scorer (:mod:`confide.scorers.information`)
    judges each alternative token alone; here, as in the paper's claim-level
    definition, the judge sees the claim's words up to the token, so an
    alternative is read in context.

    References: [1] Fadeeva et al., 2024, "Fact-Checking the Output of Large
    Language Models via Token-Level Uncertainty Quantification", ACL Findings.
    """
    gen = record.greedy
    if gen.token_logprobs is None or gen.top_tokens is None or gen.top_logprobs is None:
        raise CannotScore("the backend gave no top alternatives")
    judge = _judge(ctx)
    text = gen.text
    spans = token_spans(text, gen.tokens)
    out: list[ClaimValue] = []
    for claim in claims:
        if not claim.tokens:
            out.append(CannotScore("the claim covers no answer token"))
            continue
        if not np.isfinite(np.asarray(gen.token_logprobs)[claim.tokens]).all():
            out.append(CannotScore("token logprobs not finite inside the claim"))
            continue
        total = 0.0
        for t in claim.tokens:
            start, end = spans[t]
            prefix = text[max(claim.start, 0):max(start, claim.start)]
            original = text[max(claim.start, 0):end]
            chosen = float(np.exp(gen.token_logprobs[t]))
            kept = alts = 0.0
            for piece, lp in zip(gen.top_tokens[t], gen.top_logprobs[t]):
                if piece == gen.tokens[t] or not np.isfinite(lp):
                    continue
                p = float(np.exp(lp))
                alts += p
                if judge.decide(original, prefix + piece, record.item).equivalent:
                    kept += p
            if chosen + kept <= 0.0:  # underflow: no probability left on this meaning
                total = -math.inf
                break
            total += math.log((chosen + kept) / (chosen + alts))
        out.append(math.exp(total))
    return out


# --------------------------------------------------------------------------- samples


@scorer("claim_support", level="claim", needs={Need.SAMPLES}, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES, probability=True)
def claim_support(record: Record, claims: list[Claim], ctx: ScoringContext) -> list[ClaimValue]:
    r"""Share of sampled answers that support the claim (LUQ-style).

    .. math:: c(C) = \frac{1}{S}\sum_{s=1}^{S} \max_{u \in s} W(C, u)

    over the :math:`S` sampled answers, where :math:`u` runs over the
    sentences of sample :math:`s` (:func:`~confide.scorers.claim_split.sentence_spans`)
    and :math:`W \in [0, 1]` is the run's equivalence judge's affinity
    (:mod:`confide.equivalence.judges`: 0/1 for key judges, cosine for ``embedding``,
    mean entailment probability for ``nli`` and ``llm``). An empty sample
    supports nothing. LUQ scores with one-way entailment P(sample ⊨ claim) by
    an NLI model; the judge here is symmetric (the sample's sentence and the
    claim must mean the same), which asks more of a sample, so values are
    lower or equal for the same model. UQLM's 2026 long-form study found this
    plain claim-versus-sample agreement as strong as more complex claim scorers.

    References: [1] Zhang et al., 2024, "LUQ: Long-text Uncertainty
    Quantification for LLMs", EMNLP; [2] Manakul et al., 2023, "SelfCheckGPT"
    (sample support of each sentence).
    """
    if not record.samples:
        raise CannotScore("no sampled answers")
    judge = _judge(ctx)
    units = [[s.text[a:b] for a, b in sentence_spans(s.text)] for s in record.samples]
    out: list[ClaimValue] = []
    for claim in claims:
        support = 0.0
        for sentences in units:
            if sentences:
                support += max(judge.decide(claim.text, u, record.item).affinity
                               for u in sentences)
        out.append(support / len(units))
    return out


# --------------------------------------------------------------------------- asking the model


def claim_p_true_prompt(question: str, answer: str, claim: str, *, chat: bool) -> Any:
    """The question asked about one claim of an answer.

    >>> print(claim_p_true_prompt("Capital?", "Paris. It is big.", "It is big.", chat=False))
    Question: Capital?
    Proposed answer: Paris. It is big.
    Claim from the proposed answer: It is big.
    Is the claim true or false?
    Answer:
    """
    body = (f"Question: {question}\nProposed answer: {answer}\n"
            f"Claim from the proposed answer: {claim}\nIs the claim true or false?")
    if chat:
        return [{"role": "user", "content": body + " Reply with one word: True or False."}]
    return body + "\nAnswer:"


@scorer("claim_p_true", level="claim", needs={Need.EXTRA_PROMPT}, cost=Cost.MODEL_CALLS,
        probability=True)
def claim_p_true(record: Record, claims: list[Claim], ctx: ScoringContext) -> list[ClaimValue]:
    r"""P(True) of each claim: the probability the model says "True" when asked about it.

    .. math::
        c(C) = \frac{P(\text{True} \mid q, y, C)}{P(\text{True} \mid q, y, C)
               + P(\text{False} \mid q, y, C)}

    after :func:`claim_p_true_prompt` (question, whole answer, the claim),
    through the one yes/no helper
    (:func:`~confide.backends.binary.two_way_probabilities`) with the
    spellings of the answer-level ``p_true``; all claims of a record in one call.

    References: [1] Kadavath et al., 2022, "Language Models (Mostly) Know What
    They Know", arXiv:2207.05221; [2] Fadeeva et al., 2024, ACL Findings
    (P(True) per claim as a baseline).
    """
    if ctx.backend is None:
        raise CannotScore("no backend to ask the extra question")
    chat = isinstance(ctx.backend, HasChatTemplate) and bool(ctx.backend.has_chat_template)
    question = question_text(record.item)
    prompts = [claim_p_true_prompt(question, record.greedy.text, c.text, chat=chat)
               for c in claims]
    try:
        return list(two_way_probabilities(ctx.backend, prompts, P_TRUE_VARIANTS["true"],
                                          P_TRUE_VARIANTS["false"], top_k=P_TRUE_TOP_K))
    except CannotScore as exc:
        raise CannotScore(f"claim_p_true: {exc.reason}") from exc


# Claim support first: the simple strong baseline (UQLM's 2026 long-form study), which
# `confide run --long-form` refines with unless told otherwise.
DEFAULT_CLAIM_SCORERS = ("claim_support", "claim_p_true", "claim_ccp", "claim_mean_logprob",
                         "claim_min_logprob", "claim_mean_entropy", "claim_self_certainty")


# --------------------------------------------------------------------------- to the answer


def aggregate_claims(name: str, values: Sequence[float]) -> dict[str, float]:
    r"""Answer-level scores from one claim scorer's values on the answer's claims.

    .. math:: c_{\min} = \min_C c(C), \qquad c_{\text{mean}} = \frac{1}{n}\sum_C c(C),
              \qquad c_{\text{share}} = \frac{1}{n}\sum_C [\,c(C) \ge \tfrac12\,]

    over the claims with a value; ``share`` (the share of claims supported)
    only for scorers whose values are probabilities. An answer none of whose
    claims has a value gets NaN. Named ``<scorer>.min``, ``.mean``, ``.share``.

    >>> aggregate_claims("claim_support", [0.2, 0.8, 0.6])  # doctest: +NORMALIZE_WHITESPACE
    {'claim_support.min': 0.2, 'claim_support.mean': 0.5333333333333333,
     'claim_support.share': 0.6666666666666666}
    """
    arr = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    out = {f"{name}.min": float(arr.min()) if arr.size else math.nan,
           f"{name}.mean": float(arr.mean()) if arr.size else math.nan}
    if scorer_at(name, "claim").probability:
        out[f"{name}.share"] = float((arr >= 0.5).mean()) if arr.size else math.nan
    return out
