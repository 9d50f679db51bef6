r"""Ensemble scorers: total, aleatoric and epistemic uncertainty of M members (Malinin & Gales).

An answer scored under an ensemble of :math:`M` members (LoRA adapters, singular-value
members, MC-dropout passes: :class:`~confide.core.records.MemberStatistics`, held in
``Generation.members``) carries, per member :math:`m` and answer token :math:`t`,
``logprobs[m, t]`` :math:`= \log p_m(y_t \mid y_{<t}, x)` and ``entropies[m, t]`` :math:`=
H(p_{m,t})`, and over the members' mean :math:`\bar p_t = \frac1M\sum_m p_{m,t}`
``mean_entropy[t]`` :math:`= H(\bar p_t)` and ``mean_cross_entropy[t]`` :math:`= -\sum_v
\bar p_t(v)\,\frac1M\sum_m \log p_{m,t}(v)`. Every measure of Malinin & Gales (2021)
follows from these without the vocabulary:

.. math::

    \underbrace{H(\bar p_t)}_{\text{total}} =
    \underbrace{\tfrac1M\textstyle\sum_m H(p_{m,t})}_{\text{expected entropy (aleatoric)}}
    + \underbrace{I_t}_{\text{mutual information (epistemic)}}, \qquad
    \underbrace{K_t}_{\text{EPKL}} = I_t + \underbrace{R_t}_{\text{reverse MI}}

with :math:`K_t = \frac{1}{M^2}\sum_{m,m'} \mathrm{KL}(p_{m,t} \,\|\, p_{m',t})` =
``mean_cross_entropy`` minus the expected entropy and :math:`R_t = \frac1M\sum_m
\mathrm{KL}(\bar p_t \,\|\, p_{m,t})` = ``mean_cross_entropy`` minus :math:`H(\bar p_t)`.

Names: ``ens_<measure>`` reads the greedy answer, the measure averaged over its
tokens (the paper's chain-rule estimator on one hypothesis); ``ens_seq_<measure>``
the same averaged over the sampled answers (the chain rule, Monte Carlo over the
samples, each length-normalised); ``ens_seq_total_pe|ep`` and ``ens_seq_rmi_pe|ep``
are the paper's estimators from the samples' *sequence* probabilities under the
product-of-expectations (PE) or expectation-of-products (EP) ensemble. The chain-rule
measures use the members' plain mean :math:`\bar p_t` at each step (PE); the EP
token distribution, the members weighted by their probability of the prefix, is not
in the statistics. Each confidence is minus its uncertainty, so
``ens_total_entropy`` = ``ens_expected_entropy`` + ``ens_mutual_information`` in
confidence too (:data:`SPLITS`; every run table shows it).

The samples stand for draws from the ensemble's predictive distribution, as in the
paper; where the backend drew them from one model the sequence-level figures are
plug-in estimates under that model's draws. An empty sample has no tokens to
normalise by and no recorded end token, so a record holding one gets no sequence-level
value (as ``mc_entropy_normalized``).

References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
Structured Prediction", ICLR, https://openreview.net/forum?id=jN5y-zb5Q7m;
[2] Lakshminarayanan, Pritzel & Blundell, 2017, "Simple and Scalable Predictive
Uncertainty Estimation using Deep Ensembles", NeurIPS; [3] Depeweg et al., 2018,
"Decomposition of Uncertainty in Bayesian Deep Learning", ICML (total = aleatoric +
epistemic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy.special import logsumexp

from confide.core.errors import CannotScore
from confide.core.options import DEFAULT_SAMPLES
from confide.core.records import Generation, MemberStatistics, Record
from confide.scorers.base import Cost, Need, exp_of, scorer
from confide.scorers.features import require_samples

__all__ = ["SPLITS", "Posterior", "expected_entropy", "expected_pairwise_kl",
           "member_statistics", "mutual_information", "reverse_mutual_information",
           "sequence_logprob", "sequence_rmi", "sequence_total"]

Posterior = Literal["pe", "ep"]

#: ``(total, aleatoric, epistemic)`` scorer names whose uncertainties add up exactly:
#: total = expected entropy + mutual information (the run table shows the split).
SPLITS: tuple[tuple[str, str, str], ...] = (
    ("ens_total_entropy", "ens_expected_entropy", "ens_mutual_information"),
    ("ens_seq_total_entropy", "ens_seq_expected_entropy", "ens_seq_mutual_information"),
)

_FULL = frozenset({Need.MEMBER_ENTROPIES})
_SEQ = frozenset({Need.SAMPLES, Need.MEMBER_LOGPROBS})
_SEQ_FULL = frozenset({Need.SAMPLES, Need.MEMBER_ENTROPIES})

# ---------------------------------------------------------------------------
# Pure functions on arrays


def member_statistics(logprobs: np.ndarray, token_ids: Sequence[int], *,
                      method: str = "") -> MemberStatistics:
    r"""The statistics of one answer from its members' whole next-token distributions.

    .. math:: \ell_{m,t} = \log p_{m,t}(y_t), \quad \bar p_t = \tfrac1M\textstyle\sum_m p_{m,t},
              \quad \mathrm{CE}_t = -\textstyle\sum_v \bar p_t(v)\,\tfrac1M\sum_m
              \log p_{m,t}(v)

    Parameters
    ----------
    logprobs : array of shape ``(M, T, V)``, each member's log-probabilities of every
        vocabulary entry at each answer step (normalised: each row's ``logsumexp`` is 0).
    token_ids : the answer's ``T`` token ids :math:`y_t`.
    method : how the members were made (``lora``, ``sve``, ``mc-dropout``).

    Returns
    -------
    MemberStatistics with ``logprobs`` ``(M, T)``, ``entropies`` ``(M, T)``,
    ``mean_entropy`` and ``mean_cross_entropy`` ``(T,)``. A token a member gives
    probability 0 contributes :math:`0 \log 0 = 0` to the entropies.

    >>> lp = np.log([[[0.5, 0.5]], [[0.9, 0.1]]])
    >>> s = member_statistics(lp, [0])
    >>> np.round(s.mean_entropy - s.entropies.mean(0), 4).tolist()  # mutual information
    [0.1017]
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 3:
        raise ValueError(f"logprobs must have shape (members, tokens, vocabulary), not "
                         f"{lp.shape}")
    ids = np.asarray(token_ids, dtype=np.intp)
    if ids.shape != (lp.shape[1],):
        raise ValueError(f"{ids.size} token ids for {lp.shape[1]} steps")
    p = np.exp(lp)
    finite = np.where(np.isfinite(lp), lp, 0.0)  # 0 log 0 = 0
    entropies = -(p * finite).sum(-1)
    mean_p = p.mean(0)
    log_mean = np.log(np.where(mean_p > 0, mean_p, 1.0))
    mean_entropy = -(mean_p * log_mean).sum(-1)
    mean_cross_entropy = -(mean_p * lp.mean(0)).sum(-1)
    chosen = np.take_along_axis(lp, ids[None, :, None], axis=2)[..., 0]
    return MemberStatistics(logprobs=chosen, entropies=entropies, mean_entropy=mean_entropy,
                            mean_cross_entropy=mean_cross_entropy, method=method)


def expected_entropy(entropies: np.ndarray) -> np.ndarray:
    r"""Expected entropy (aleatoric, data uncertainty) of each step: :math:`\frac1M\sum_m
    H(p_{m,t})`, from ``entropies`` ``(M, T)``; shape ``(T,)``.

    >>> expected_entropy(np.array([[0.2, 1.0], [0.4, 0.0]])).tolist()
    [0.30000000000000004, 0.5]
    """
    return np.asarray(entropies, dtype=np.float64).mean(0)


def mutual_information(mean_entropy: np.ndarray, entropies: np.ndarray) -> np.ndarray:
    r"""Mutual information (epistemic, knowledge uncertainty) of each step:
    :math:`I_t = H(\bar p_t) - \frac1M\sum_m H(p_{m,t})`; shape ``(T,)``. Not clipped at
    0, so total = aleatoric + epistemic stays exact under rounding."""
    return np.asarray(mean_entropy, dtype=np.float64) - expected_entropy(entropies)


def expected_pairwise_kl(mean_cross_entropy: np.ndarray, entropies: np.ndarray) -> np.ndarray:
    r"""Expected pairwise KL divergence of each step: :math:`K_t = \frac{1}{M^2}
    \sum_{m,m'}\mathrm{KL}(p_{m,t}\|p_{m',t}) = \mathrm{CE}_t - \frac1M\sum_m H(p_{m,t})`;
    shape ``(T,)``."""
    return np.asarray(mean_cross_entropy, dtype=np.float64) - expected_entropy(entropies)


def reverse_mutual_information(mean_cross_entropy: np.ndarray,
                               mean_entropy: np.ndarray) -> np.ndarray:
    r"""Reverse mutual information of each step: :math:`R_t = \frac1M\sum_m
    \mathrm{KL}(\bar p_t\|p_{m,t}) = \mathrm{CE}_t - H(\bar p_t)`; shape ``(T,)``."""
    return (np.asarray(mean_cross_entropy, dtype=np.float64)
            - np.asarray(mean_entropy, dtype=np.float64))


def sequence_logprob(logprobs: np.ndarray, posterior: Posterior) -> float:
    r"""Log-probability of one answer under the ensemble, from ``logprobs`` ``(M, T)``.

    .. math:: \text{PE: } \log P(y) = \sum_t \log \tfrac1M\textstyle\sum_m p_m(y_t \mid
              y_{<t}), \qquad \text{EP: } \log P(y) = \log \tfrac1M\textstyle\sum_m
              \prod_t p_m(y_t \mid y_{<t})

    >>> lp = np.log([[0.5, 0.5], [0.1, 1.0]])
    >>> round(float(np.exp(sequence_logprob(lp, "pe"))), 4)  # 0.3 * 0.75
    0.225
    >>> round(float(np.exp(sequence_logprob(lp, "ep"))), 4)  # (0.25 + 0.1) / 2
    0.175
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    m = lp.shape[0]
    if posterior == "pe":
        return float((logsumexp(lp, axis=0) - np.log(m)).sum())
    if posterior == "ep":
        return float(logsumexp(lp.sum(axis=1)) - np.log(m))
    raise ValueError(f"posterior must be 'pe' or 'ep', not {posterior!r}")


def sequence_total(samples: Sequence[np.ndarray], posterior: Posterior) -> float:
    r"""Monte-Carlo total uncertainty from the samples' ensemble log-probabilities,
    each length-normalised (Malinin & Gales, 2021, eq. for :math:`\hat{\mathcal H}_S`).

    .. math:: \hat H_S = -\frac1S\sum_{s=1}^{S}\frac{1}{L_s}\log P(y^{(s)} \mid x, \mathcal D)

    ``samples``: one ``(M, L_s)`` member log-probability array per sample, ``L_s > 0``.
    """
    return float(-np.mean([sequence_logprob(lp, posterior) / lp.shape[1] for lp in samples]))


def sequence_rmi(samples: Sequence[np.ndarray], posterior: Posterior) -> float:
    r"""Monte-Carlo reverse mutual information from the samples' sequence probabilities,
    each length-normalised (Malinin & Gales, 2021, :math:`\hat{\mathcal M}_S`).

    .. math:: \hat M_S = \frac1S\sum_{s=1}^{S}\frac{1}{L_s}\Big(\log P(y^{(s)} \mid x,
              \mathcal D) - \frac1M\sum_m \log P(y^{(s)} \mid x, \theta_m)\Big)

    At least 0 for either posterior (Jensen), 0 when the members agree on every token.
    """
    return float(np.mean([(sequence_logprob(lp, posterior) - lp.sum(axis=1).mean())
                          / lp.shape[1] for lp in samples]))


# ---------------------------------------------------------------------------
# Reading the statistics of an answer


def _members(gen: Generation, what: str, *, epistemic: bool) -> MemberStatistics:
    """``gen``'s member statistics, checked, or :class:`CannotScore` naming why not."""
    stats = gen.members
    if stats is None:
        raise CannotScore(f"{what} has no ensemble member statistics (run with an ensemble, "
                          "or import a file with per-member log-probabilities)")
    lp = np.asarray(stats.logprobs)
    if lp.ndim != 2 or lp.shape[0] == 0:
        raise CannotScore(f"{what}: the member log-probabilities have shape {lp.shape}, not "
                          "(members, tokens)")
    if epistemic and lp.shape[0] < 2:
        raise CannotScore(f"{what} is scored under {lp.shape[0]} ensemble member: "
                          "disagreement between members needs at least 2")
    if lp.shape[1] == 0 or gen.empty:
        raise CannotScore(f"{what} is empty: no tokens to score")
    if gen.n_tokens and gen.n_tokens != lp.shape[1]:
        raise CannotScore(f"{what}: the member statistics cover {lp.shape[1]} tokens, the "
                          f"answer has {gen.n_tokens}")
    return stats


def _column(stats: MemberStatistics, name: str, what: str) -> np.ndarray:
    values = getattr(stats, name)
    if values is None:
        raise CannotScore(f"{what}: the members' {name} are not recorded (chosen-token "
                          "log-probabilities only): this measure needs each member's whole "
                          "next-token distribution")
    arr = np.asarray(values, dtype=np.float64)
    want = stats.logprobs.shape if name == "entropies" else stats.logprobs.shape[1:]
    if arr.shape != tuple(want):
        raise CannotScore(f"{what}: the members' {name} have shape {arr.shape}, not {want}")
    if not np.isfinite(arr).all():
        raise CannotScore(f"{what}: the members' {name} hold a NaN or infinite value")
    return arr


def _logprobs(stats: MemberStatistics, what: str, *, epistemic: bool) -> np.ndarray:
    lp = np.asarray(stats.logprobs, dtype=np.float64)
    if np.isnan(lp).any() or np.isposinf(lp).any():
        raise CannotScore(f"{what}: the member log-probabilities hold NaN or +inf")
    if np.isneginf(lp).all(axis=0).any():
        raise CannotScore(f"{what}: every member gives a token probability 0: the "
                          "uncertainty estimate is infinite")
    if epistemic and np.isneginf(lp).any():
        raise CannotScore(f"{what}: a member gives a token probability 0: the reverse "
                          "mutual information is infinite")
    return lp


_Measure = Literal["total", "expected", "mi", "epkl", "rmi"]
_EPISTEMIC = frozenset({"mi", "epkl", "rmi"})


def _token_measure(gen: Generation, measure: _Measure, what: str) -> float:
    """The mean over ``gen``'s tokens of one token-level measure (an uncertainty)."""
    stats = _members(gen, what, epistemic=measure in _EPISTEMIC)

    def col(name: str) -> np.ndarray:
        return _column(stats, name, what)

    if measure == "total":
        per_token = col("mean_entropy")
    elif measure == "expected":
        per_token = expected_entropy(col("entropies"))
    elif measure == "mi":
        per_token = mutual_information(col("mean_entropy"), col("entropies"))
    elif measure == "epkl":
        per_token = expected_pairwise_kl(col("mean_cross_entropy"), col("entropies"))
    else:
        per_token = reverse_mutual_information(col("mean_cross_entropy"), col("mean_entropy"))
    return float(per_token.mean())


def _greedy(record: Record, measure: _Measure) -> float:
    return -_token_measure(record.greedy, measure, "the answer")


def _samples(record: Record) -> list[tuple[int, Generation]]:
    return list(enumerate(require_samples(record), start=1))


def _chain(record: Record, measure: _Measure) -> float:
    """Minus the chain-rule estimate: the token measure's mean over each sample, averaged
    over the samples."""
    return -float(np.mean([_token_measure(s, measure, f"sample {i}")
                           for i, s in _samples(record)]))


def _sequence(record: Record, posterior: Posterior, *, rmi: bool) -> float:
    arrays = []
    for i, s in _samples(record):
        what = f"sample {i}"
        arrays.append(_logprobs(_members(s, what, epistemic=rmi), what, epistemic=rmi))
    return -(sequence_rmi(arrays, posterior) if rmi else sequence_total(arrays, posterior))


# ---------------------------------------------------------------------------
# Token level: the greedy answer


@scorer("ens_total_entropy", needs=_FULL,
        readable=exp_of("1 / exp(mean H(p̄)): the inverse of the effective number of "
                        "next-token choices of the members' mean"))
def ens_total_entropy(record: Record) -> float:
    r"""Negative total uncertainty: the entropy of the members' mean, over the answer.

    .. math:: c = -\frac1T\sum_{t=1}^{T} H(\bar p_t), \qquad
              \bar p_t = \frac1M\sum_{m=1}^{M} p_m(\cdot \mid y_{<t}, x)

    Reads the greedy answer's ``members.mean_entropy``. Equals
    ``ens_expected_entropy + ens_mutual_information``. Defined for :math:`M \ge 1`.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (total uncertainty, token level).
    """
    return _greedy(record, "total")


@scorer("ens_expected_entropy", needs=_FULL,
        readable=exp_of("1 / exp(mean expected entropy): the inverse of the members' "
                        "typical effective number of next-token choices"))
def ens_expected_entropy(record: Record) -> float:
    r"""Negative expected entropy (aleatoric, data uncertainty) over the answer.

    .. math:: c = -\frac1T\sum_{t=1}^{T} \frac1M\sum_{m=1}^{M} H(p_{m,t})

    Reads the greedy answer's ``members.entropies``. Defined for :math:`M \ge 1`.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (expected entropy, data uncertainty);
    [2] Depeweg et al., 2018, ICML (the decomposition).
    """
    return _greedy(record, "expected")


@scorer("ens_mutual_information", needs=_FULL,
        readable=exp_of("exp(-MI): the members' effective number of choices over their "
                        "mean's, 1 when the members agree"))
def ens_mutual_information(record: Record) -> float:
    r"""Negative mutual information (epistemic, knowledge uncertainty) over the answer.

    .. math:: c = -\frac1T\sum_{t=1}^{T}\Big(H(\bar p_t) - \frac1M\sum_{m=1}^{M}
              H(p_{m,t})\Big)

    Reads the greedy answer's ``members.mean_entropy`` and ``members.entropies``;
    needs :math:`M \ge 2`. 0 when every member gives the same distributions.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (mutual information, knowledge uncertainty).
    """
    return _greedy(record, "mi")


@scorer("ens_epkl", needs=_FULL,
        readable=exp_of("exp(-EPKL): 1 when the members agree"))
def ens_epkl(record: Record) -> float:
    r"""Negative expected pairwise KL divergence between the members, over the answer.

    .. math:: c = -\frac1T\sum_{t=1}^{T}\frac{1}{M^2}\sum_{m,m'}
              \mathrm{KL}(p_{m,t}\,\|\,p_{m',t}) = -\frac1T\sum_{t=1}^{T}\Big(\mathrm{CE}_t
              - \frac1M\sum_m H(p_{m,t})\Big)

    with :math:`\mathrm{CE}_t` the greedy answer's ``members.mean_cross_entropy``; also
    reads ``members.entropies``; needs :math:`M \ge 2`. EPKL = MI + RMI.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (expected pairwise KL divergence).
    """
    return _greedy(record, "epkl")


@scorer("ens_rmi", needs=_FULL,
        readable=exp_of("exp(-RMI): 1 when the members agree"))
def ens_rmi(record: Record) -> float:
    r"""Negative reverse mutual information over the answer.

    .. math:: c = -\frac1T\sum_{t=1}^{T}\frac1M\sum_{m=1}^{M}
              \mathrm{KL}(\bar p_t\,\|\,p_{m,t}) = -\frac1T\sum_{t=1}^{T}
              \big(\mathrm{CE}_t - H(\bar p_t)\big)

    Reads the greedy answer's ``members.mean_cross_entropy`` and ``members.mean_entropy``;
    needs :math:`M \ge 2`.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (reverse mutual information).
    """
    return _greedy(record, "rmi")


# ---------------------------------------------------------------------------
# Sequence level, chain rule: the token measures averaged over the samples


@scorer("ens_seq_total_entropy", needs=_SEQ_FULL, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("1 / exp(total): the inverse of the effective number of next-token "
                        "choices of the members' mean, typical of the samples"))
def ens_seq_total_entropy(record: Record) -> float:
    r"""Negative chain-rule total uncertainty over the samples, length-normalised.

    .. math:: c = -\hat H_C = -\frac1S\sum_{s=1}^{S}\frac{1}{L_s}\sum_{t=1}^{L_s}
              H\big(\bar p(\cdot \mid y^{(s)}_{<t}, x)\big)

    :math:`\bar p` is the members' plain mean at each step (PE). Reads every sample's
    ``members.mean_entropy``; equals ``ens_seq_expected_entropy +
    ens_seq_mutual_information``.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (chain-rule Monte-Carlo estimators).
    """
    return _chain(record, "total")


@scorer("ens_seq_expected_entropy", needs=_SEQ_FULL, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=exp_of("1 / exp(expected entropy): the inverse of the members' typical "
                        "effective number of next-token choices along the samples"))
def ens_seq_expected_entropy(record: Record) -> float:
    r"""Negative chain-rule expected entropy (aleatoric) over the samples.

    .. math:: c = -\frac1S\sum_{s=1}^{S}\frac{1}{L_s}\sum_{t=1}^{L_s}\frac1M\sum_{m=1}^{M}
              H\big(p_m(\cdot \mid y^{(s)}_{<t}, x)\big)

    Reads every sample's ``members.entropies``.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (chain-rule Monte-Carlo estimators).
    """
    return _chain(record, "expected")


@scorer("ens_seq_mutual_information", needs=_SEQ_FULL, cost=Cost.SAMPLES,
        n_samples=DEFAULT_SAMPLES,
        readable=exp_of("exp(-MI): 1 when the members agree along every sample"))
def ens_seq_mutual_information(record: Record) -> float:
    r"""Negative chain-rule mutual information (epistemic) over the samples.

    .. math:: c = -\hat I_C = -\frac1S\sum_{s=1}^{S}\frac{1}{L_s}\sum_{t=1}^{L_s}
              \Big(H(\bar p^{(s)}_t) - \frac1M\sum_m H(p^{(s)}_{m,t})\Big)

    PE at each step. Reads every sample's ``members.mean_entropy`` and
    ``members.entropies``; needs :math:`M \ge 2`.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (chain-rule Monte-Carlo estimators).
    """
    return _chain(record, "mi")


@scorer("ens_seq_epkl", needs=_SEQ_FULL, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("exp(-EPKL): 1 when the members agree along every sample"))
def ens_seq_epkl(record: Record) -> float:
    r"""Negative chain-rule expected pairwise KL divergence over the samples.

    .. math:: c = -\hat K_C = -\frac1S\sum_{s=1}^{S}\frac{1}{L_s}\sum_{t=1}^{L_s}
              \Big(\mathrm{CE}^{(s)}_t - \frac1M\sum_m H(p^{(s)}_{m,t})\Big)

    Reads every sample's ``members.mean_cross_entropy`` and ``members.entropies``;
    needs :math:`M \ge 2`.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (chain-rule Monte-Carlo estimators).
    """
    return _chain(record, "epkl")


# ---------------------------------------------------------------------------
# Sequence level: the samples' ensemble sequence probabilities


@scorer("ens_seq_total_pe", needs=_SEQ, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("the samples' geometric-mean token probability under the "
                        "product-of-expectations ensemble"))
def ens_seq_total_pe(record: Record) -> float:
    r"""Negative Monte-Carlo total uncertainty, product-of-expectations ensemble.

    .. math:: c = -\hat H_S = \frac1S\sum_{s=1}^{S}\frac{1}{L_s}\sum_{t=1}^{L_s}
              \log\frac1M\sum_{m=1}^{M} p_m(y^{(s)}_t \mid y^{(s)}_{<t}, x)

    Reads every sample's ``members.logprobs`` alone, so an imported file of per-member
    chosen-token log-probabilities feeds it.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (sequence-level estimator, product of expectations).
    """
    return _sequence(record, "pe", rmi=False)


@scorer("ens_seq_total_ep", needs=_SEQ, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("the samples' per-token geometric mean of the expectation-of-products "
                        "ensemble's sequence probability"))
def ens_seq_total_ep(record: Record) -> float:
    r"""Negative Monte-Carlo total uncertainty, expectation-of-products ensemble.

    .. math:: c = -\hat H_S = \frac1S\sum_{s=1}^{S}\frac{1}{L_s}
              \log\frac1M\sum_{m=1}^{M}\prod_{t=1}^{L_s} p_m(y^{(s)}_t \mid y^{(s)}_{<t}, x)

    Reads every sample's ``members.logprobs`` alone.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (sequence-level estimator, expectation of products).
    """
    return _sequence(record, "ep", rmi=False)


@scorer("ens_seq_rmi_pe", needs=_SEQ, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("exp(-RMI): 1 when the members agree on every sampled token"))
def ens_seq_rmi_pe(record: Record) -> float:
    r"""Negative Monte-Carlo reverse mutual information, product-of-expectations ensemble.

    .. math:: c = -\hat M_S = -\frac1S\sum_{s=1}^{S}\frac{1}{L_s}\sum_{t=1}^{L_s}
              \Big(\log\frac1M\sum_m p_m(y^{(s)}_t \mid \cdot) - \frac1M\sum_m
              \log p_m(y^{(s)}_t \mid \cdot)\Big)

    Reads every sample's ``members.logprobs`` alone; needs :math:`M \ge 2`. A member
    giving a sampled token probability 0 makes it infinite (NaN with the reason).

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (sequence-level reverse mutual information).
    """
    return _sequence(record, "pe", rmi=True)


@scorer("ens_seq_rmi_ep", needs=_SEQ, cost=Cost.SAMPLES, n_samples=DEFAULT_SAMPLES,
        readable=exp_of("exp(-RMI): 1 when the members give every sample the same "
                        "probability"))
def ens_seq_rmi_ep(record: Record) -> float:
    r"""Negative Monte-Carlo reverse mutual information, expectation-of-products ensemble.

    .. math:: c = -\hat M_S = -\frac1S\sum_{s=1}^{S}\frac{1}{L_s}\Big(\log\frac1M
              \sum_{m=1}^{M} P_m(y^{(s)}) - \frac1M\sum_{m=1}^{M}\log P_m(y^{(s)})\Big),
              \quad P_m(y) = \prod_t p_m(y_t \mid y_{<t}, x)

    Reads every sample's ``members.logprobs`` alone; needs :math:`M \ge 2`.

    References: [1] Malinin & Gales, 2021, "Uncertainty Estimation in Autoregressive
    Structured Prediction", ICLR (sequence-level reverse mutual information).
    """
    return _sequence(record, "ep", rmi=True)
