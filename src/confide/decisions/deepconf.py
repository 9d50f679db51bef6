r"""DeepConf-online on sampled reasoning traces: stop low-confidence traces, stop at consensus.

The online procedure of Fu et al. (2025, §3.2, Algorithm 2), per question:

1. **Warm-up.** Generate the first :math:`N_\text{init}` traces whole and read each one's
   lowest group confidence :math:`C_\text{least}`
   (:func:`confide.scorers.reasoning.trace_confidence`, ``lowest_group``). The stop
   threshold is a percentile of them,

   .. math:: s = \operatorname{Percentile}_{100-\eta}\big(\{C_\text{least}(t) : t \in
             T_\text{warmup}\}\big)

   (numpy's linear interpolation; :math:`\eta` = 10 is DeepConf-low, 90 DeepConf-high).
2. **Online traces.** Each later trace stops at the first token :math:`t` whose group
   confidence :math:`C_{G_t}` (the mean token confidence of its last :math:`n` trace
   tokens) falls below :math:`s` (:func:`stop_point`); a stopped trace does not vote.
3. **Vote.** Warm-up traces with :math:`C_\text{least} \ge s` and every completed online
   trace vote for their final answer, weighted by their :math:`C_\text{least}`:
   :math:`V(a) = \sum_t \mathbb 1(a_t = a)\, C_\text{least}(t)`.
4. **Consensus.** After the warm-up and after each online trace, the leader's share
   :math:`\beta = \max_a V(a) / \sum_a V(a)`; sampling stops once :math:`\beta \ge \tau`
   or the budget of traces is spent. The answer is :math:`\arg\max_a V(a)`.

Warm-up traces below :math:`s` and traces without a final answer never vote (the weight is
the trace confidence, which a trace cut by the token budget does not have), as in the
paper's released code. The threshold comes from the warm-up traces that have a trace
confidence; a question with none, or with fewer stored traces than the warm-up, cannot
be replayed and is counted.

**What the replay assumes.** :func:`replay_deepconf_online` replays each record's stored
samples, fully generated, in stored order: sample :math:`j` plays trace :math:`j`, and a
stop at trace token :math:`t` costs the trace's first :math:`t` tokens (the tokens after
it and the whole final answer are saved). That the first :math:`t` tokens are those a
live stop would have generated holds for the ``hf`` backend's sampling: sample :math:`j`
of an item draws, at every step, one uniform number from its own generator seeded
:math:`\text{seed}_\text{item} + j` (``backends/hf/decoding.py``: ``_rows``;
``steps.py``: ``choose_tokens``), so its tokens depend only on its own prefix and
seed, never on what other rows drew; the stop at :math:`t` is decided from tokens
:math:`1..t` only, so it cannot change them. That much is exact when the trace is
decoded in the same batch layout as the stored one (tests/decisions/
test_deepconf_online.py: a row stopped live is the prefix of the same row generated
whole). It is **not** exact across batch layouts: a row's logits differ in their last
bits with the batch's width and padding, and at temperature 1 and top-p 0.95 that moves
nucleus boundaries enough to change draws (SmolLM2-135M on the CPU: a sample drawn
alone and the same sample drawn in one call with others part within a few dozen
tokens). A live
procedure that draws the online traces one at a time (as the replay models, the
consensus checked after each; the released code draws them in parallel, checking no
consensus) so generates other traces from the same distribution, not the stored ones:
the replay's token counts and votes are those of the stored draws, a model of the live
procedure, not its exact result. Traces of an imported run (another server's sampling) carry no
such guarantee: the replay is then a model of the procedure, not its exact result.

References
----------
[1] Y. Fu, X. Wang, Y. Tian, J. Zhao (2025). Deep Think with Confidence.
    arXiv:2508.15260 (§3.2: online thinking with confidence; Algorithm 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from confide.core.errors import CannotScore, InvalidInputError
from confide.decisions._runs import sampled_records
from confide.decisions.voting import (
    filtered_vote,
    majority_vote,
    record_clusters,
    reply_tokens,
    trace_confidences,
)
from confide.grading import grade
from confide.scorers.reasoning import DEEPCONF_WINDOW, group_confidences, token_confidences

__all__ = ["DEEPCONF_CONSENSUS", "DEEPCONF_WARMUP", "OnlineItem", "OnlineOutcome",
           "OnlineTrace", "OnlineVoteComparison", "online_vote", "replay_deepconf_online",
           "stop_point", "warmup_threshold"]

DEEPCONF_WARMUP = 4        # ours: the paper warms up on 16, more than most stored runs hold
DEEPCONF_CONSENSUS = 0.95  # Fu et al. (2025): tau = 0.95


def warmup_threshold(lowest: ArrayLike, eta: float) -> float:
    r"""The stop threshold from the warm-up traces' lowest group confidences.

    .. math:: s = \operatorname{Percentile}_{100-\eta}(C_\text{least})

    NaN entries (traces without a trace confidence) are left out; linear interpolation
    between order statistics (numpy's default).

    >>> warmup_threshold([1.0, 2.0, 3.0, 5.0], eta=10)   # 90th percentile
    4.4
    >>> warmup_threshold([1.0, 2.0, 3.0, 5.0], eta=90)   # 10th percentile
    1.3
    """
    c = np.asarray(lowest, dtype=np.float64)
    c = c[np.isfinite(c)]
    if c.size == 0:
        raise CannotScore("no warm-up trace has a trace confidence to set the threshold")
    _check_eta(eta)
    return float(np.percentile(c, 100.0 - float(eta)))


def stop_point(confidences: ArrayLike, threshold: float, window: int = DEEPCONF_WINDOW, *,
               closed: bool = True) -> int | None:
    r"""Trace tokens generated when DeepConf-online stops the trace; None if it never stops.

    .. math:: t^* = \min\{t \ge n : C_{G_t} < s\}, \qquad
              C_{G_t} = \frac1n\sum_{i=t-n+1}^{t} C_i

    over the trace's token confidences :math:`C_i` (group confidences of
    :func:`confide.scorers.reasoning.group_confidences`). A trace shorter than the
    window :math:`n` is judged once, at its closing token, on all its tokens:
    :math:`t^* = T` when its mean is below :math:`s`; one that never closed (``closed``
    False: cut by the token budget) is never stopped. The live stop
    (:class:`confide.pipeline.streaming.TraceStop`) follows the same rule.

    >>> stop_point([2.0, 2.0, 0.5, 0.5, 2.0], threshold=1.5, window=2)
    3
    >>> stop_point([2.0, 0.5], threshold=1.5, window=4), stop_point([2.0], 1.5, 4)
    (2, None)
    >>> stop_point([2.0, 0.5], threshold=1.5, window=4, closed=False) is None
    True
    """
    c = np.asarray(confidences, dtype=np.float64)
    if c.size < window and not closed:
        return None
    below = np.flatnonzero(group_confidences(c, window) < threshold)
    if below.size == 0:
        return None
    return int(below[0]) + min(window, c.size)


@dataclass
class OnlineTrace:
    """One stored trace under the online procedure."""

    index: int                # its place in the record's samples
    role: Literal["warmup", "online", "unused"]
    tokens: int               # generated (trace and answer; at a stop, the trace's first t)
    tokens_full: int          # trace and answer tokens of the stored, whole reply
    confidence: float         # lowest group confidence (NaN: no final answer or no top-k)
    stopped_at: int | None = None  # trace tokens generated when stopped
    votes: bool = False


@dataclass
class OnlineOutcome:
    """The online procedure on one question's traces."""

    label: int               # the winning cluster
    threshold: float         # s
    share: float             # the leader's share beta when sampling ended
    reached: bool            # stopped by consensus (else the budget was spent)
    traces: list[OnlineTrace]

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.traces)

    @property
    def tokens_full(self) -> int:
        return sum(t.tokens_full for t in self.traces)

    def count(self, what: str) -> int:
        """Traces ``used`` (generated), ``stopped``, ``voted``, or ``no_answer`` (generated
        whole without a final answer or without a trace confidence: never voted)."""
        tests = {"used": lambda t: t.role != "unused",
                 "stopped": lambda t: t.stopped_at is not None,
                 "voted": lambda t: t.votes,
                 "no_answer": lambda t: (t.role != "unused" and t.stopped_at is None
                                         and math.isnan(t.confidence))}
        return sum(1 for t in self.traces if tests[what](t))


def _share(labels: np.ndarray, weights: np.ndarray, voters: list[int]) -> float:
    totals: dict[int, float] = {}
    for i in voters:
        totals[int(labels[i])] = totals.get(int(labels[i]), 0.0) + float(weights[i])
    total = sum(totals.values())
    return max(totals.values()) / total if total > 0 else math.nan


def _check_eta(eta: float) -> None:
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not 0 < eta <= 100:
        raise InvalidInputError(f"must be a percentage in (0, 100], got {eta!r}", field="eta")


def _check_options(warmup: int, eta: float, consensus: float, window: int,
                   budget: int | None) -> None:
    _check_eta(eta)
    for name, value in (("warmup", warmup), ("window", window)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"must be a positive integer, got {value!r}", field=name)
    if isinstance(consensus, bool) or not isinstance(consensus, (int, float)) \
            or not 0 < consensus <= 1:
        raise InvalidInputError(f"must lie in (0, 1], got {consensus!r}", field="consensus")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                               or budget < warmup):
        raise InvalidInputError(f"must be an integer >= the warm-up ({warmup}), got "
                                f"{budget!r}", field="budget")


def _token_confidences(gen: Any) -> np.ndarray | None:
    """The trace's token confidences, or None where it cannot be judged (no trace, no
    top-k, fewer than two alternatives, NaN)."""
    trace = getattr(gen, "trace", None)
    if trace is None or trace.top_logprobs is None or trace.n_tokens == 0:
        return None
    try:
        return token_confidences(trace.top_logprobs)
    except CannotScore:
        return None


def online_vote(samples: list[Any], labels: ArrayLike, *, warmup: int = DEEPCONF_WARMUP,
                eta: float = 10.0, window: int = DEEPCONF_WINDOW,
                consensus: float = DEEPCONF_CONSENSUS, budget: int | None = None
                ) -> OnlineOutcome:
    r"""Replay DeepConf-online on one question's fully generated traces (module notes).

    Parameters
    ----------
    samples : the reasoning replies in generation order (each a final answer with its
        ``trace``), all generated whole.
    labels : their clusters of equal final answers (an equivalence judge's).
    warmup : :math:`N_\text{init}`, traces generated whole to set the threshold.
    eta : the percentage kept: :math:`s` is the :math:`(100-\eta)`-th percentile.
    window : the group size :math:`n` (the paper's 2048).
    consensus : :math:`\tau`; sampling stops once :math:`\beta \ge \tau`.
    budget : the most traces drawn (default: every stored one).

    Returns
    -------
    OnlineOutcome : the winning cluster, :math:`s`, :math:`\beta`, and per trace its
        role, tokens generated against the whole reply's, stop point and vote.

    Raises
    ------
    CannotScore
        Fewer traces than the warm-up, or no warm-up trace with a trace confidence.
    InvalidInputError
        An option out of range.
    """
    _check_options(warmup, eta, consensus, window, budget)
    labs = np.asarray(labels, dtype=np.intp)
    samples = samples[:budget] if budget else samples
    labs = labs[:len(samples)]
    if len(samples) < warmup:
        raise CannotScore(f"{len(samples)} trace(s), fewer than the warm-up of {warmup}")
    conf = trace_confidences(SimpleNamespace(samples=samples), "lowest_group", window=window)
    s = warmup_threshold(conf[:warmup], eta)
    traces = [OnlineTrace(i, "unused", 0, reply_tokens(g), float(conf[i]))
              for i, g in enumerate(samples)]
    voters: list[int] = []
    for t in traces[:warmup]:  # generated whole before the threshold existed
        t.role, t.tokens, t.votes = "warmup", t.tokens_full, bool(t.confidence >= s)
        voters += [t.index] if t.votes else []
    beta = _share(labs, conf, voters)
    for t in traces[warmup:]:
        if beta >= consensus:
            break
        t.role = "online"
        c = _token_confidences(samples[t.index])
        t.stopped_at = None if c is None else stop_point(
            c, s, window, closed=not samples[t.index].empty)
        if t.stopped_at is not None:
            t.tokens = t.stopped_at
            continue  # a stopped trace does not vote: the share is unchanged
        t.tokens, t.votes = t.tokens_full, not math.isnan(t.confidence)
        if t.votes:
            voters.append(t.index)
            beta = _share(labs, conf, voters)
    # the most confident warm-up trace is at or above any percentile of them: >= 1 voter
    label = int(filtered_vote(labs[voters], conf[voters], eta=100.0)[0])
    return OnlineOutcome(label, s, beta, bool(beta >= consensus), traces)


@dataclass
class OnlineItem:
    """One record: the online vote against majority voting and the offline filtered vote
    over all its traces (grades), and what the online procedure generated."""

    id: str
    k: int                # stored traces (the full run)
    threshold: float
    used: int             # traces generated online (warm-up included)
    stopped: int
    voted: int
    no_answer: int        # generated whole without a final answer (or trace confidence)
    share: float          # beta at the end
    reached: bool         # consensus reached before the budget
    tokens: int           # generated by the online procedure
    tokens_all: int       # of every stored trace (the full run)
    majority: float
    offline: float
    online: float

    @property
    def saved(self) -> int:
        return self.tokens_all - self.tokens


@dataclass
class OnlineVoteComparison:
    """DeepConf-online replayed on a run: accuracy and tokens against the full run's majority
    vote and DeepConf's offline filtered vote (same :math:`\\eta`, lowest group
    confidence, confidence-weighted), per item and overall."""

    n: int
    k: int
    warmup: int
    eta: float
    window: int
    consensus: float
    judge: str
    grader: str
    majority: float
    offline: float
    online: float
    tokens: int
    tokens_all: int
    items: list[OnlineItem] = field(default_factory=list)
    n_skipped: int = 0     # records without samples or grade
    n_too_few: int = 0     # fewer stored traces than the warm-up
    n_unreadable: int = 0  # no warm-up trace with a trace confidence
    n_reached: int = 0     # items stopped by consensus

    @property
    def saved(self) -> int:
        return self.tokens_all - self.tokens

    @property
    def saved_share(self) -> float:
        return self.saved / self.tokens_all if self.tokens_all else math.nan


def replay_deepconf_online(run: Any, *, warmup: int = DEEPCONF_WARMUP, eta: float = 10.0,
                           consensus: float = DEEPCONF_CONSENSUS, window: int | None = None,
                           budget: int | None = None, judge: str | None = None,
                           grader: str | None = None) -> OnlineVoteComparison:
    """Replay DeepConf-online on each record's stored sampled traces (module notes).

    ``run``: a :class:`~confide.api.Run` or its directory whose samples are reasoning
    replies (a trace with top-k log-probabilities and a final answer). Options as
    :func:`online_vote` (``window`` default 2048). Each record's chosen answers (online,
    majority over every stored trace, the offline filtered vote keeping the top ``eta``
    % by lowest group confidence) are graded with the run's grader, each the first
    sample of its cluster (for the online vote, the first that voted). A record with
    fewer traces than the warm-up, or no warm-up trace with a trace confidence, is
    skipped and counted.
    """
    window = window or DEEPCONF_WINDOW
    _check_options(warmup, eta, consensus, window, budget)
    run, grader, judge_name, equiv, usable = sampled_records(run, grader, judge)
    items: list[OnlineItem] = []
    too_few = unreadable = k_used = 0
    for record in usable:
        samples = record.samples[:budget] if budget else record.samples
        if len(samples) < warmup:
            too_few += 1
            continue
        labels = record_clusters(SimpleNamespace(item=record.item, samples=samples), equiv)
        try:
            out = online_vote(samples, labels, warmup=warmup, eta=eta, window=window,
                              consensus=consensus)
        except CannotScore:
            unreadable += 1
            continue
        k_used = max(k_used, len(samples))
        conf = np.asarray([t.confidence for t in out.traces])

        def graded(label: int, among: list[int], samples: list[Any] = samples,
                   record: Any = record, labels: Any = labels) -> float:
            first = next(i for i in among if labels[i] == label)
            return grade(samples[first].text, record.item, grader)

        every = list(range(len(samples)))
        offline = int(filtered_vote(labels, conf, eta=eta, weighted=True)[0])
        items.append(OnlineItem(
            id=record.item.id, k=len(samples), threshold=out.threshold,
            used=out.count("used"), stopped=out.count("stopped"), voted=out.count("voted"),
            no_answer=out.count("no_answer"), share=out.share, reached=out.reached,
            tokens=out.tokens, tokens_all=out.tokens_full,
            majority=graded(majority_vote(labels), every), offline=graded(offline, every),
            online=graded(out.label, [t.index for t in out.traces if t.votes])))
    if not items:
        raise InvalidInputError(
            f"no graded record could be replayed: {too_few} with fewer sampled traces than "
            f"the warm-up of {warmup} (lower --warmup or sample more), {unreadable} whose "
            "warm-up traces have no trace confidence (reasoning replies with top-k "
            "log-probabilities and a final answer)", file=str(run.path), field="samples")
    return OnlineVoteComparison(
        n=len(items), k=k_used, warmup=warmup, eta=float(eta), window=window,
        consensus=float(consensus), judge=judge_name, grader=grader,
        majority=float(np.mean([it.majority for it in items])),
        offline=float(np.mean([it.offline for it in items])),
        online=float(np.mean([it.online for it in items])),
        tokens=sum(it.tokens for it in items), tokens_all=sum(it.tokens_all for it in items),
        items=items, n_skipped=len(run.records) - len(usable), n_too_few=too_few,
        n_unreadable=unreadable, n_reached=sum(it.reached for it in items))
