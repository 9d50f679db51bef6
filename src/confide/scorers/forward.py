r"""White-box scorers that need one more forward pass of the model over the greedy answer.

The decoding loop keeps what every step's distribution says about the answer
(:mod:`confide.scorers.whitebox`); these scorers need what it does not keep,
so they ask the backend for one teacher-forced pass over the answer when they
are chosen, and never otherwise:

* ``pmi``, ``cpmi``: the answer's tokens scored **without the question**
  (:meth:`HFBackend.unconditioned_logprobs
  <confide.backends.hf.HFBackend.unconditioned_logprobs>`, need
  ``unconditioned_logprobs``);
* ``rauq``, ``attention_score``: **attention weights** over prompt + answer
  (:meth:`HFBackend.attention_diagonals
  <confide.backends.hf.HFBackend.attention_diagonals>`, need ``attentions``).

Backends that cannot give these (an OpenAI-compatible server) do not declare
the capability, and the runner skips the scorers with that reason.

A reasoning reply (:mod:`confide.core.reasoning`) is read as it was generated: the
attention pass runs over the prompt as a reasoning run rendered it (a chat template's
thinking mode on), then the trace's tokens, then the final answer's, exactly the tokens
the decoding loop read; the scorers, answer-level, read the answer's positions (and
``attention_score`` the prompt's), never the trace's. A reply whose trace's tokens are
unknown cannot be fed again and is not scored.

Notation: answer tokens :math:`y_0..y_{T-1}` after a prompt :math:`x` of
:math:`p` tokens; :math:`\ell_t = \log p(y_t \mid x, y_{<t})` (stored while
generating), :math:`u_t = \log p(y_t \mid n, y_{<t})` with :math:`n` the
backend's neutral prompt, :math:`H_t` the entropy of step :math:`t`, and
:math:`A^{(l,h)}` the attention matrix of layer :math:`l`, head :math:`h` of a
pass over :math:`x \oplus y`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from confide.backends.base import HasAttentions, HasChatTemplate, Prompt, ScoresUnconditioned
from confide.core.errors import CannotScore
from confide.core.records import Generation, Record
from confide.scorers.base import Cost, Need, ScoringContext, exp_of, no_readable, scorer
from confide.scorers.whitebox import token_statistic

__all__ = ["ATTENTION_EPSILON", "CPMI_LAMBDA", "CPMI_TAU", "RAUQ_ALPHA_BASE", "RAUQ_ALPHA_CHAT",
           "attention_score_value", "cpmi_value", "pmi_value", "rauq_value"]

CPMI_TAU = 0.0656     # entropy threshold (nats) of van der Poel et al. (2022), as LM-Polygraph
CPMI_LAMBDA = 3.599   # weight of the unconditioned term, same source
RAUQ_ALPHA_CHAT = 0.5  # RAUQ's alpha for instruction-tuned models (Vazhentsev et al., 2025)
RAUQ_ALPHA_BASE = 0.2  # and for base models
ATTENTION_EPSILON = 1e-12  # added before the log (LM-Polygraph's value); weights are > 0


def _backend_with(ctx: ScoringContext, protocol: type, what: str) -> Any:
    """The context's backend if it offers ``protocol`` (an extra forward pass); else
    :class:`CannotScore` saying it cannot give ``what``."""
    backend = ctx.backend
    if backend is None or not isinstance(backend, protocol):
        raise CannotScore(f"the backend cannot give {what}")
    return backend


def _chat_prompt(ctx: ScoringContext) -> bool:
    """Whether the answer was generated from chat messages: the rendered prompt decides
    (TriviaQA's k-shot text is a completion even for a chat model); without one, the
    backend's kind."""
    prompt = ctx.prompt
    if prompt is not None:
        return isinstance(prompt, list)
    return isinstance(ctx.backend, HasChatTemplate) and bool(ctx.backend.has_chat_template)


# ---------------------------------------------------------------------------
# pointwise mutual information


def _unconditioned(record: Record, ctx: ScoringContext) -> np.ndarray:
    """:math:`u_t` of the greedy answer, computed once per record and shared."""
    ids = list(record.greedy.token_ids)
    if not ids:
        raise CannotScore("empty answer: no tokens to score")

    def compute() -> np.ndarray:
        backend = _backend_with(ctx, ScoresUnconditioned, "unconditioned logprobs")
        return np.asarray(backend.unconditioned_logprobs([ids], chat=_chat_prompt(ctx))[0],
                          dtype=np.float64)

    u: np.ndarray = ctx.cached(record, "unconditioned_logprobs", compute)
    if u.shape != (len(ids),):
        raise CannotScore("unconditioned log-probabilities and answer tokens differ in length")
    if not np.isfinite(u).all():
        raise CannotScore("an answer token has probability 0 without the question")
    return u


def pmi_value(logprobs: np.ndarray, unconditioned: np.ndarray) -> float:
    r"""Mean pointwise mutual information between the question and each answer token.

    .. math:: c = \frac{1}{T}\sum_{t=0}^{T-1} \big(\ell_t - u_t\big)

    >>> round(pmi_value(np.log([0.5, 0.8]), np.log([0.25, 0.8])), 6)  # (log 2 + 0) / 2
    0.346574
    """
    return float(np.mean(np.asarray(logprobs, float) - np.asarray(unconditioned, float)))


def cpmi_value(logprobs: np.ndarray, unconditioned: np.ndarray, entropies: np.ndarray, *,
               tau: float = CPMI_TAU, lam: float = CPMI_LAMBDA) -> float:
    r"""Mean conditional PMI: the unconditioned term counts only at uncertain steps.

    .. math:: c = \frac{1}{T}\sum_{t=0}^{T-1}
              \big(\ell_t - \lambda\,\mathbb 1[H_t \ge \tau]\,u_t\big)

    >>> round(cpmi_value(np.log([0.5, 0.8]), np.log([0.25, 0.4]), [1.0, 0.01], lam=1.0), 6)
    0.235002
    """
    ell = np.asarray(logprobs, float)
    gate = np.asarray(entropies, float) >= tau
    return float(np.mean(ell - lam * np.where(gate, np.asarray(unconditioned, float), 0.0)))


_PMI_NEEDS = {Need.TOKEN_LOGPROBS, Need.UNCONDITIONED_LOGPROBS}


@scorer("pmi", needs=_PMI_NEEDS, cost=Cost.MODEL_CALLS,
        readable=no_readable("a log ratio of two probabilities, unbounded in both directions"))
def pmi(record: Record, ctx: ScoringContext) -> float:
    r"""Mean pointwise mutual information of the greedy answer's tokens with the question.

    .. math:: c = \frac{1}{T}\sum_{t=0}^{T-1}
              \big(\log p(y_t \mid x, y_{<t}) - \log p(y_t \mid n, y_{<t})\big)

    How much the question raised each token's probability: an answer the
    model would give to no question at all scores low. :math:`n` is the
    backend's neutral prompt in the form the answer's own prompt took (chat
    messages: the template around an empty user message; a completion prompt
    such as TriviaQA's k-shot text: the empty text as the tokenizer encodes a text
    prompt, its start token where it adds one, else a newline, never a chat-role
    marker such as SmolLM2's ``<|im_start|>``:
    :meth:`~confide.backends.hf.passes.ExtraPasses.neutral_prompt`), so every
    token, the first included, has an unconditioned probability. Cost: one forward pass over
    neutral prompt + answer per record.

    LM-Polygraph's ``MeanPointwiseMutualInformation`` returns :math:`-c`
    with the first token's unconditioned term left out (it scores the
    answer with no prompt at all, so the first token has no context); its
    ``greedy_lm_log_likelihoods`` calculator also reads each token's
    probability one position late (``logprobs[-T + j, y_j]``, the
    distribution that predicts :math:`y_{j+1}`). Fed the same :math:`u_t`
    with :math:`u_0 = 0`, its value equals ours
    (``benchmarks/peers/polygraph.py``). On LM-Polygraph's own pipeline the
    shifted reading is confirmed (its u equals log p(y_j | y_<=j) of a pass
    over the answer alone to 2.2e-5) and the two differed by up to 18, measured
    with the former neutral prompt ``<|im_start|>`` (``benchmarks/results/parity.md``;
    not measured again since).

    References: [1] Takayama & Arase, 2019, "Relevant and Informative
    Response Generation using Pointwise Mutual Information", NLP4ConvAI
    workshop (PMI); [2] Fadeeva et al., 2023, LM-Polygraph, EMNLP demo.
    """
    return pmi_value(token_statistic(record.greedy, "token_logprobs"), _unconditioned(record, ctx))


@scorer("cpmi", needs=_PMI_NEEDS | {Need.TOKEN_ENTROPIES}, cost=Cost.MODEL_CALLS,
        readable=no_readable("a log ratio of two probabilities, unbounded in both directions"))
def cpmi(record: Record, ctx: ScoringContext) -> float:
    r"""Mean conditional PMI: the unconditioned term subtracted only at uncertain steps.

    .. math:: c = \frac{1}{T}\sum_{t=0}^{T-1}
              \big(\ell_t - \lambda\,\mathbb 1[H_t \ge \tau]\, u_t\big),
              \qquad \tau = 0.0656,\ \lambda = 3.599

    Where the model is sure (:math:`H_t < \tau`) the token's likelihood
    counts alone; where it hesitates, a token that is likely whatever the
    question is penalised (:math:`-\lambda u_t > 0` is the reward for an
    unlikely-without-context token). :math:`\tau, \lambda` are the values
    tuned by van der Poel et al. and used by LM-Polygraph. :math:`u_t` as in
    ``pmi``. LM-Polygraph's ``MeanConditionalPointwiseMutualInformation``
    returns :math:`-c` without the first token's unconditioned term (see
    ``pmi``); fed the same inputs with :math:`u_0 = 0` the two are equal.
    On LM-Polygraph's own pipeline, with its shifted u (see ``pmi``), they
    differed by up to 68 with the former neutral prompt
    (``benchmarks/results/parity.md``).

    References: [1] van der Poel, Cotterell & Meister, 2022, "Mutual
    Information Alleviates Hallucinations in Abstractive Summarization",
    EMNLP (CPMI), arXiv:2210.13210; [2] Takayama & Arase, 2019, NLP4ConvAI
    (PMI).
    """
    return cpmi_value(token_statistic(record.greedy, "token_logprobs"), _unconditioned(record, ctx),
                      token_statistic(record.greedy, "token_entropies"))


# ---------------------------------------------------------------------------
# attention


def _generation_prompt(record: Record, ctx: ScoringContext) -> Prompt:
    """The prompt the greedy answer was generated from (the pipeline passes it along)."""
    prompt = ctx.prompt
    if prompt is None and isinstance(record.item.prompt, list):
        prompt = record.item.prompt  # chat messages are sent as they are
    if prompt is None:
        raise CannotScore("the prompt the answer was generated from is not known (score "
                          "through the pipeline, which passes it)")
    return prompt


def _trace_ids(gen: Generation) -> list[int]:
    """The token ids of ``gen``'s reasoning trace, generated before its answer ([] for a
    reply without a trace, or with an empty one); :class:`CannotScore` where the trace has
    text but no token ids (an imported log's): the pass could not read what generation read.
    """
    trace = gen.trace
    if trace is None:
        return []
    if not trace.token_ids and (trace.n_tokens or not trace.empty):
        raise CannotScore("the trace's token ids are unknown: the attention pass cannot read "
                          "the answer after it as it was generated")
    return list(trace.token_ids)


def _attention(record: Record, ctx: ScoringContext) -> tuple[int, np.ndarray]:
    """(prompt length :math:`p`, self-attention weights (layers, heads, :math:`p + T`) of
    the prompt's and the answer's positions), once per record.

    One pass over the tokens generation read: the prompt as the run rendered it (in a
    reasoning run, or for a reply with a trace, in thinking mode:
    :meth:`ScoringContext.thinking <confide.scorers.context.ScoringContext.thinking>`,
    :func:`~confide.backends.base.encode_prompt`), a
    reasoning reply's trace, then the answer; the trace's positions are dropped after it,
    so position :math:`p + j` is answer token :math:`y_j` read after the trace.
    """
    gen = record.greedy
    ids = list(gen.token_ids)
    if not ids:
        raise CannotScore("empty answer: no tokens to score")
    prompt = _generation_prompt(record, ctx)
    trace = _trace_ids(gen)
    # a reasoning run's reply (with a trace or not) was generated in thinking mode
    thinking = ctx.thinking(gen)

    def compute() -> tuple[int, np.ndarray]:
        backend = _backend_with(ctx, HasAttentions, "attention diagonals")
        length, diagonal = backend.attention_diagonals([prompt], [trace + ids],
                                                       thinking=thinking)[0]
        length, diagonal = int(length), np.asarray(diagonal, dtype=np.float64)
        if diagonal.ndim != 3 or diagonal.shape[-1] != length + len(trace) + len(ids):
            raise CannotScore("attention weights do not cover prompt + trace + answer")
        return length, np.delete(diagonal, np.s_[length:length + len(trace)], axis=-1)

    length, diagonal = ctx.cached(record, "attention_diagonals", compute)
    if diagonal.ndim != 3 or diagonal.shape[-1] != length + len(ids):
        raise CannotScore("attention weights do not cover prompt + answer")
    return length, diagonal


def rauq_layers(n_layers: int) -> range:
    r"""The middle third of the layers RAUQ reads: :math:`\lfloor L/3\rfloor .. \lceil 2L/3\rceil`.

    >>> list(rauq_layers(30))[:2], list(rauq_layers(30))[-1]
    ([10, 11], 20)
    """
    return range(n_layers // 3, min(n_layers, -(-2 * n_layers // 3) + 1))


def rauq_value(logprobs: np.ndarray, previous_attention: np.ndarray, alpha: float) -> float:
    r"""RAUQ's confidence from token log-probabilities and each layer's head attentions.

    ``previous_attention[l, h, j - 1]`` is :math:`a^{(l,h)}_j`, the weight
    head :math:`h` of layer :math:`l` gives :math:`y_{j-1}` in the step that
    chooses :math:`y_j` (:math:`j = 1..T-1`).

    .. math::
        h^*_l = \arg\max_h \frac{1}{T-1}\sum_{j} a^{(l,h)}_j, \quad
        c^{(l)}_0 = p(y_0), \quad
        c^{(l)}_j = \alpha\, p(y_j) + (1-\alpha)\, a^{(l,h^*_l)}_j\, c^{(l)}_{j-1},
        \qquad c = \min_l \frac{1}{T}\sum_{j=0}^{T-1}\log c^{(l)}_j

    >>> c1 = 0.5 * 0.8 + 0.5 * 0.5 * 0.5  # head 0 attends more; c0 = p(y0) = 0.5
    >>> value = rauq_value(np.log([0.5, 0.8]), np.array([[[0.5], [0.1]]]), 0.5)
    >>> bool(np.isclose(value, np.mean(np.log([0.5, c1]))))
    True
    """
    p = np.exp(np.asarray(logprobs, dtype=np.float64))
    scores = []
    for layer in np.asarray(previous_attention, dtype=np.float64):
        conf = np.empty_like(p)
        conf[0] = p[0]
        if p.size > 1:
            weights = layer[int(np.argmax(layer.mean(-1)))]
            for j in range(1, p.size):
                conf[j] = alpha * p[j] + (1.0 - alpha) * weights[j - 1] * conf[j - 1]
        with np.errstate(divide="ignore"):
            scores.append(float(np.mean(np.log(conf))))
    return min(scores)


@scorer("rauq", needs={Need.TOKEN_LOGPROBS, Need.ATTENTIONS}, cost=Cost.MODEL_CALLS,
        readable=exp_of("the geometric mean of the attention-carried token confidences of the "
                        "least confident middle layer"))
def rauq(record: Record, ctx: ScoringContext) -> float:
    r"""RAUQ: token probabilities carried along by the most previous-token-attentive head.

    .. math::
        c^{(l)}_j = \alpha\, p(y_j) + (1-\alpha)\, a^{(l,h^*_l)}_j\, c^{(l)}_{j-1}, \qquad
        c = \min_{l \in M} \frac{1}{T}\sum_{j=0}^{T-1}\log c^{(l)}_j

    (:func:`rauq_value`). :math:`a^{(l,h)}_j = A^{(l,h)}_{p+j-1,\,p+j-1}`
    is the weight the step choosing :math:`y_j` gives the token
    :math:`y_{j-1}` just generated (its own input), from one teacher-forced
    pass over prompt + answer; :math:`M` the middle third of the layers
    (:func:`rauq_layers`); :math:`h^*_l` the head of layer :math:`l` that
    attends most to the previous token on average; :math:`\alpha = 0.5` for
    an answer to chat messages, 0.2 for one continuing a completion prompt (as
    the rendered prompt was given, not whether the model has a chat template;
    ``ctx.options["rauq_alpha"]`` overrides). A confident token after a doubtful
    one inherits some doubt when the head looks back at it. A reasoning reply's
    final answer is read after its trace :math:`z`: the pass runs over
    :math:`x \oplus z \oplus y` (the prompt in thinking mode) and
    :math:`a^{(l,h)}_j = A^{(l,h)}_{p+|z|+j-1,\,p+|z|+j-1}`, the weights of the steps that
    chose the answer (module notes).

    Equals LM-Polygraph's ``RAUQ`` (:math:`c = 1 - U`, its uncertainty is
    :math:`\max_l (1 - \cdot)`) fed the same attentions: Polygraph reads
    them from ``generate`` step by step (row :math:`j`, column :math:`j-1`
    of its ``attention_all``), the very weights of our teacher-forced pass
    up to rounding. Cost: one forward pass with attention weights (eager
    attention) per record.
    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 6.1e-6 once its
    answer's end token is removed, 0.66 with it (``benchmarks/results/parity.md``).

    References: [1] Vazhentsev et al., 2025, "Uncertainty-Aware Attention
    Heads: Efficient Unsupervised Uncertainty Quantification for LLMs",
    arXiv:2505.20045 (RAUQ).
    """
    logprobs = token_statistic(record.greedy, "token_logprobs")
    length, diagonal = _attention(record, ctx)
    alpha = ctx.options.get("rauq_alpha")
    if alpha is None:
        alpha = RAUQ_ALPHA_CHAT if _chat_prompt(ctx) else RAUQ_ALPHA_BASE
    t = logprobs.size
    previous = diagonal[list(rauq_layers(diagonal.shape[0])), :, length:length + t - 1]
    return rauq_value(logprobs, previous, float(alpha))


def attention_score_value(self_attention: np.ndarray, *, start: int = 0,
                          mean: bool = False) -> float:
    r"""Mean over heads of the summed (``mean``: averaged) log self-attention of the
    positions from ``start`` on.

    .. math:: c = \frac{1}{H}\sum_{h=1}^{H}\sum_{i \ge s} \log\big(A^{(h)}_{ii} + \epsilon\big)

    ``self_attention[h, i]`` is :math:`A^{(h)}_{ii}`.

    >>> round(attention_score_value(np.array([[1.0, 0.5], [1.0, 0.25]])), 6)  # (ln .5 + ln .25)/2
    -1.039721
    """
    a = np.log(np.asarray(self_attention, dtype=np.float64)[:, start:] + ATTENTION_EPSILON)
    return float(np.mean(a.mean(-1) if mean else a.sum(-1)))


@scorer("attention_score", needs={Need.ATTENTIONS}, cost=Cost.MODEL_CALLS,
        readable=exp_of("the geometric mean over heads of det A (the product of the "
                        "self-attention weights over prompt and answer; near 0 for long prompts)"))
def attention_score(record: Record, ctx: ScoringContext) -> float:
    r"""LLM-Check's attention score: log-determinant of a middle layer's attention maps.

    .. math:: c = \frac{1}{H}\sum_{h=1}^{H} \log\det A^{(l,h)}
              = \frac{1}{H}\sum_{h=1}^{H}\sum_{i=0}^{p+T-1} \log\big(A^{(l,h)}_{ii} + \epsilon\big),
              \qquad l = \lfloor L/2 \rfloor

    (:func:`attention_score_value`). The causal attention matrix is lower
    triangular, so its log-determinant is the sum of the log diagonal: how
    much each position attends to itself rather than to its context, over
    prompt and answer. :math:`\epsilon = 10^{-12}`. The paper's formula sums
    over the whole sequence, unnormalised; this is the default because it is
    also LM-Polygraph's default, so the two can be compared. The authors'
    code instead averages over the response's positions:
    :func:`attention_score_response`. ``ctx.options["attention_layer"]``
    chooses another layer. A reasoning reply's pass runs over prompt (in thinking
    mode), trace and final answer, and the sum is over the prompt's and the answer's
    positions, the trace's left out: the log-determinant of the principal submatrix of
    those positions (triangular too), so the trace's length does not enter an
    answer-level score (module notes).

    Equals LM-Polygraph's ``AttentionScore`` (default: whole sequence, layer
    :math:`\lfloor L/2 \rfloor`; :math:`c = -U`) on the same attention
    weights.
    Parity with LM-Polygraph 0.7's own pipeline: |Δ| ≤ 8.2e-5 once its
    answer's end token is removed, 5.0 with it (``benchmarks/results/parity.md``).

    References: [1] Sriramanan et al., 2024, "LLM-Check: Investigating
    Detection of Hallucinations in Large Language Models", NeurIPS
    (attention score).
    """
    _, diagonal = _attention(record, ctx)
    return _finite_attention(attention_score_value(_attention_layer(diagonal, ctx)))


@scorer("attention_score_response", needs={Need.ATTENTIONS}, cost=Cost.MODEL_CALLS,
        readable=exp_of("the geometric-mean self-attention weight of the answer's positions"))
def attention_score_response(record: Record, ctx: ScoringContext) -> float:
    r"""LLM-Check's attention score as the authors' code computes it: the response's mean.

    .. math:: c = \frac{1}{H}\sum_{h=1}^{H} \frac{1}{T}\sum_{i=p}^{p+T-1}
              \log\big(A^{(l,h)}_{ii} + \epsilon\big), \qquad l = \lfloor L/2 \rfloor

    over the answer's :math:`T` positions after the prompt's :math:`p`, so
    it does not grow with the length of prompt or answer (unlike
    :func:`attention_score`, the paper's formula over the whole sequence). A
    reasoning reply's answer positions are read in a pass over prompt (in thinking
    mode), trace and answer (module notes).

    >>> round(attention_score_value(np.array([[1.0, 0.5], [1.0, 0.25]]), start=1,
    ...                             mean=True), 6)  # (ln .5 + ln .25) / 2
    -1.039721

    References: [1] Sriramanan et al., 2024, "LLM-Check: Investigating
    Detection of Hallucinations in Large Language Models", NeurIPS
    (attention score; the response-span average of its released code).
    """
    length, diagonal = _attention(record, ctx)
    if diagonal.shape[-1] <= length:
        raise CannotScore("no answer positions in the attention weights")
    return _finite_attention(attention_score_value(_attention_layer(diagonal, ctx),
                                                   start=length, mean=True))


def _attention_layer(diagonal: np.ndarray, ctx: ScoringContext) -> np.ndarray:
    """The layer LLM-Check reads (the middle one, or ``ctx.options["attention_layer"]``)."""
    layer = ctx.options.get("attention_layer")
    layer = diagonal.shape[0] // 2 if layer is None else int(layer)
    if not -diagonal.shape[0] <= layer < diagonal.shape[0]:
        raise CannotScore(f"attention layer {layer} outside the model's {diagonal.shape[0]}")
    return diagonal[layer]


def _finite_attention(value: float) -> float:
    if not math.isfinite(value):
        raise CannotScore("attention weights are not finite")
    return value
