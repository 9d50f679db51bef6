"""What an answer can carry and a scorer can need: the one capability vocabulary.

A backend says which of these it gives (``Backend.capabilities``), a log reader which
an imported record holds (:func:`confide.ingest.common.capabilities_of`), a scorer
which it needs (``ScorerSpec.needs``), and the scorer plan
(:mod:`confide.pipeline.scorer_plan`) compares them. Each member's name is its value
in capitals; the per-token statistics are also the names of
:class:`~confide.core.records.Generation`'s columns.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["FULL_DISTRIBUTION", "MEMBER_STATISTICS", "MODEL_PASSES", "TOKEN_STATISTICS", "Need"]


class Need(str, Enum):
    """One thing a scorer may need and a backend or a record may give."""

    TOKEN_LOGPROBS = "token_logprobs"      # log p of each chosen token
    TOKEN_ENTROPIES = "token_entropies"    # entropy of the full next-token distribution
    TOKEN_KL_UNIFORM = "token_kl_uniform"  # every logit: KL(U || p), self-certainty
    TOKEN_RENYI_UNIFORM = "token_renyi_uniform"  # every logit: Rényi divergence to uniform
    TOKEN_FISHER_RAO_UNIFORM = "token_fisher_rao_uniform"  # every logit: Fisher-Rao distance
    TOP_LOGPROBS = "top_logprobs"          # top-k alternatives
    SAMPLES = "samples"                    # k sampled answers
    HIDDEN_STATES = "hidden_states"        # pooled hidden states
    EXTRA_PROMPT = "extra_prompt"          # asks the model a second question
    TRAINING = "training"                  # must be fitted on graded records first
    UNCONDITIONED_LOGPROBS = "unconditioned_logprobs"  # the answer again, without the question
    ATTENTIONS = "attentions"              # attention weights of a pass over prompt + answer
    CHOICE_LOGLIKELIHOODS = "choice_loglikelihoods"  # log p of each option (imported logs)
    TOKEN_BOOSTED_PROB = "token_boosted_prob"  # every logit: BoostedProb of the chosen token
    MEMBER_LOGPROBS = "member_logprobs"    # each ensemble member's log p of each answer token
    MEMBER_ENTROPIES = "member_entropies"  # members' whole distributions: H(p_m), H(mean), CE
    TRACE = "trace"                        # a reasoning reply's trace, a generation of its own


#: The per-token columns of a Generation, in its stored order.
TOKEN_STATISTICS: tuple[Need, ...] = (
    Need.TOKEN_LOGPROBS, Need.TOKEN_ENTROPIES, Need.TOKEN_KL_UNIFORM, Need.TOKEN_RENYI_UNIFORM,
    Need.TOKEN_FISHER_RAO_UNIFORM, Need.TOP_LOGPROBS, Need.TOKEN_BOOSTED_PROB)
#: Statistics of the whole next-token distribution: a log holding the top-k has none.
FULL_DISTRIBUTION = frozenset({Need.TOKEN_KL_UNIFORM, Need.TOKEN_RENYI_UNIFORM,
                               Need.TOKEN_FISHER_RAO_UNIFORM, Need.TOKEN_BOOSTED_PROB})
#: Needs only a live model pass can meet (the scorer calls the model again).
MODEL_PASSES = frozenset({Need.EXTRA_PROMPT, Need.UNCONDITIONED_LOGPROBS, Need.ATTENTIONS})
#: What an answer's :class:`~confide.core.records.MemberStatistics` hold (``Generation.members``):
#: ``member_logprobs`` its ``logprobs``; ``member_entropies`` its ``entropies``,
#: ``mean_entropy`` and ``mean_cross_entropy`` together (a file of chosen-token
#: log-probabilities has none of these three).
MEMBER_STATISTICS = frozenset({Need.MEMBER_LOGPROBS, Need.MEMBER_ENTROPIES})
