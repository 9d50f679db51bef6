r"""Fitted kinds: answer-level scorers whose model is fitted on a graded run first.

``confide fit RUN --kind KIND`` fits one (:func:`confide.learned.fit`,
:func:`confide.learned.density.fit`) and writes it as JSON; ``confide eval RUN --with
FILE`` applies it. Each kind is registered here like every other scorer, with
:attr:`~confide.scorers.base.Need.TRAINING` among its needs, so it is listed
with them and every score it gives goes through
:func:`~confide.scorers.base.run_scorer`: an empty answer gets NaN with the
reason, a non-finite value NaN. The function takes the fitted model from the
context (:func:`fitted_context`); the model's ``confidence(record, ctx)``
gives the value (its out-of-fold score on its own training run). A run plan
skips these kinds (nothing is fitted while generating;
:func:`confide.pipeline.scorer_plan.plan_scorers`).

The formulas and papers are in :func:`confide.learned.fit` and
:func:`confide.learned.density.fit`; each scorer's docstring gives its own.
"""

from __future__ import annotations

from confide.core.errors import CannotScore
from confide.core.records import Record
from confide.scorers.base import Need, no_readable, one_plus, scorer
from confide.scorers.context import Fitted, FittedModel, ScoringContext

__all__ = ["Fitted", "FittedModel", "fitted_context"]

_HIDDEN = {Need.TRAINING, Need.HIDDEN_STATES}


def fitted_context(model: FittedModel, *, run: str | None = None,
                   final: bool = False) -> ScoringContext:
    """A context that applies ``model`` to the records of run ``run`` (its digest).

    ``final``: the final model's score for every record, items it was trained
    on included (no out-of-fold scores, no refusal).
    """
    return ScoringContext(fitted=Fitted(model, run=run, final=final))


def _apply(kind: str, record: Record, ctx: ScoringContext) -> float:
    if ctx.fitted is None:
        raise CannotScore(f"{kind}: no fitted model; fit one with `confide fit RUN --kind "
                          f"{kind}` and apply it with `confide eval RUN --with FILE`")
    model = ctx.fitted.model
    if model.kind != kind:
        raise CannotScore(f"{kind}: the context holds a {model.kind} model")
    return model.confidence(record, ctx)


@scorer("probe", needs=_HIDDEN, probability=True)
def probe(record: Record, ctx: ScoringContext) -> float:
    r"""Hidden-state probe: a logistic regression's P(correct) from one pooled hidden state.

    .. math:: c(x) = \sigma\big(w^\top (h_\ell(x) - \mu) / s + b\big)

    for the pooled state :math:`h_\ell` of the greedy answer at the chosen
    layer (:func:`confide.learned.fit`).

    References: [1] Azaria & Mitchell, 2023, "The Internal State of an LLM Knows
    When It's Lying", Findings of EMNLP; [2] Kadavath et al., 2022,
    arXiv:2207.05221.
    """
    return _apply("probe", record, ctx)


@scorer("lens", needs=_HIDDEN | {Need.TOKEN_LOGPROBS, Need.TOKEN_ENTROPIES,
                                 Need.TOKEN_KL_UNIFORM}, probability=True)
def lens(record: Record, ctx: ScoringContext) -> float:
    r"""Lens probe: a probe on the hidden state plus the answer's token-probability features.

    .. math:: c(x) = \sigma\big(w^\top (z(x) - \mu) / s + b\big), \quad
              z = \big(h_\ell(x), \bar\ell, \ell_{\min}, \bar H, H_{\max},
              \overline{\mathrm{KL}}, \log(1 + T)\big)

    (:data:`confide.learned.TOKEN_FEATURES`).

    References: [1] Azaria & Mitchell, 2023, Findings of EMNLP (the probe);
    [2] Malinin & Gales, 2021, ICLR (the token statistics).
    """
    return _apply("lens", record, ctx)


@scorer("combiner", needs={Need.TRAINING}, probability=True)
def combiner(record: Record, ctx: ScoringContext) -> float:
    r"""Combiner: a model of P(correct) fitted over other scorers' outputs.

    .. math:: c(x) = \sigma\Big(\sum_j w_j\, \Phi^{-1}(\hat F_j(c_j(x)))
              + \sum_j v_j\, [c_j(x) = \mathrm{NaN}] + b\Big), \quad w_j \ge 0

    (logistic, inputs through their training quantiles) or gradient-boosted
    trees (:func:`confide.learned.fit`, ``estimator="boosting"``).

    References: [1] Chernozhukov et al., 2018, "Double/debiased machine learning
    for treatment and structural parameters", Econometrics Journal (the
    cross-fitting of its out-of-fold scores).
    """
    return _apply("combiner", record, ctx)


@scorer("mahalanobis", needs=_HIDDEN,
        readable=no_readable("a distance in hidden-state space, unbounded"))
def mahalanobis(record: Record, ctx: ScoringContext) -> float:
    r"""Negated Mahalanobis distance of the answer's hidden state to the training answers'.

    .. math:: c(x) = -\sqrt{(h(x) - \mu)^\top \Sigma^{-1} (h(x) - \mu)}

    (:class:`confide.learned.density.Gaussian`).

    References: [1] Lee et al., 2018, "A Simple Unified Framework for Detecting
    Out-of-Distribution Samples and Adversarial Attacks", NeurIPS.
    """
    return _apply("mahalanobis", record, ctx)


@scorer("relative_mahalanobis", needs=_HIDDEN,
        readable=no_readable("a difference of two distances, unbounded in both directions"))
def relative_mahalanobis(record: Record, ctx: ScoringContext) -> float:
    r"""Negated relative Mahalanobis distance: to the training answers' minus a background's.

    .. math:: c(x) = -\big(\mathrm{MD}(h(x)) - \mathrm{MD}_0(h(x))\big)

    with :math:`\mathrm{MD}_0` fitted on a background run (``--background RUN``).

    References: [1] Ren et al., 2023, "Out-of-Distribution Detection and
    Selective Generation for Conditional Language Models", ICLR.
    """
    return _apply("relative_mahalanobis", record, ctx)


@scorer("huq", needs=_HIDDEN | {Need.TOKEN_LOGPROBS},
        readable=one_plus("one minus the mean of the perplexity and Mahalanobis rank shares"))
def huq(record: Record, ctx: ScoringContext) -> float:
    r"""Negated HUQ: mean of the answer's perplexity and Mahalanobis ranks among training answers.

    .. math:: c(x) = -\tfrac12\big(R_{\mathrm{PPL}}(x) + R_{\mathrm{MD}}(x)\big)

    References: [1] Vazhentsev et al., 2023, "Hybrid Uncertainty Quantification
    for Selective Text Classification in Ambiguous Tasks", ACL (LM-Polygraph's
    ``PPLMDSeq``).
    """
    return _apply("huq", record, ctx)
