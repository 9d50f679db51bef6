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

**Live.** :func:`deepconf` runs the procedure on a backend that streams its sampled rows
(``hf``): the warm-up traces are generated whole, then each later trace is watched token by
token by :class:`~confide.pipeline.streaming.TraceStop`, which ends the row at the stop
point, so its remaining tokens are never generated. What it reports as a full run's
tokens is an estimate (the warm-up traces' mean length times the budget), not a
measurement.

References
----------
[1] Y. Fu, X. Wang, Y. Tian, J. Zhao (2025). Deep Think with Confidence.
    arXiv:2508.15260 (§3.2: online thinking with confidence; Algorithm 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from confide.backends.base import GenerationSpec, Streams
from confide.core.errors import BackendError, CannotScore, InvalidInputError
from confide.core.options import DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from confide.core.reasoning import DEFAULT_TAGS, split_reasoning
from confide.core.reasoning import reasoning_tags as parse_tags
from confide.core.records import Item
from confide.decisions._runs import sampled_records
from confide.decisions.voting import (
    filtered_vote,
    majority_vote,
    record_clusters,
    reply_tokens,
    trace_confidences,
)
from confide.equivalence.judges import make_judge
from confide.grading import GRADERS, grade
from confide.pipeline.streaming import TraceStop
from confide.scorers.reasoning import (
    DEEPCONF_WINDOW,
    group_confidences,
    token_confidences,
    trace_confidence,
)

__all__ = ["DEEPCONF_CONSENSUS", "DEEPCONF_WARMUP", "LIVE_MAX_NEW_TOKENS", "LIVE_PROMPTS",
           "LiveDeepConf", "LiveTrace", "OnlineItem", "OnlineOutcome", "OnlineTrace",
           "OnlineVoteComparison", "deepconf", "online_vote", "replay_deepconf_online",
           "stop_point", "warmup_threshold", "weighted_shares"]

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


# ------------------------------------------------------------------ live, on a backend


def weighted_shares(labels: ArrayLike, confidence: ArrayLike, voters: list[int]
                    ) -> dict[int, float]:
    r"""Each answer's share of DeepConf's confidence-weighted vote among ``voters``.

    .. math:: \beta(a) = \frac{V(a)}{\sum_b V(b)}, \qquad
              V(a) = \sum_{t \in \text{voters}} \mathbb 1(a_t = a)\, C_\text{least}(t)

    Answers (cluster labels) in order of their first voter; empty without voters or
    when every weight is 0. The leader is the first answer with the largest share.

    >>> weighted_shares([0, 1, 0, 1, 2], [2.0, 1.5, 0.5, 1.0, 9.0], [0, 1, 2, 3])
    {0: 0.5, 1: 0.5}
    """
    labs = np.asarray(labels, dtype=np.intp)
    conf = np.asarray(confidence, dtype=np.float64)
    totals: dict[int, float] = {}
    for i in voters:
        totals[int(labs[i])] = totals.get(int(labs[i]), 0.0) + float(conf[i])
    total = sum(totals.values())
    return {a: v / total for a, v in totals.items()} if total > 0 else {}


#: How a question is put to the model (:func:`deepconf`).
LIVE_PROMPTS = ("cot", "chat", "text")
#: The answer budget of :func:`deepconf` with ``prompt`` ``chat`` or ``text`` unless set.
LIVE_MAX_NEW_TOKENS = 1024


@dataclass
class LiveTrace:
    """One trace generated by :func:`deepconf`."""

    index: int                # its place in the drawing order (its seed's offset)
    role: Literal["warmup", "online"]
    answer: str               # the final answer ("" when none: stopped or cut)
    tokens: int               # generated: trace and answer
    confidence: float         # lowest group confidence (NaN: no final answer or no top-k)
    stopped_at: int | None = None  # trace tokens generated when stopped live
    votes: bool = False
    finish_reason: str | None = None
    trace_tokens: int = 0     # of ``tokens``, the trace's (0: a reply without a trace)


@dataclass
class LiveDeepConf:
    """DeepConf-online run live on one question (:func:`deepconf`).

    ``shares``: each answer's share of the confidence-weighted vote when sampling ended,
    largest first; ``majority``: the plain majority vote over every trace generated whole
    with a final answer (stopped traces and the vote's filter aside), for comparison.
    ``tokens_full``: the tokens a run of the whole ``budget`` without stopping would have
    generated, *estimated* as the warm-up traces' mean length times ``budget``.
    ``correct`` and ``majority_correct``: the two answers' grades when the question has
    references (else None).
    """

    id: str
    answer: str | None
    share: float
    shares: dict[str, float]
    reached: bool
    threshold: float
    traces: list[LiveTrace]
    majority: str | None
    tokens_full: float
    warmup: int
    budget: int
    eta: float
    consensus: float
    window: int
    max_new_tokens: int
    judge: str
    grader: str | None = None
    correct: float | None = None
    majority_correct: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.traces)

    @property
    def saved(self) -> float:
        return self.tokens_full - self.tokens

    @property
    def saved_share(self) -> float:
        return self.saved / self.tokens_full if self.tokens_full > 0 else math.nan

    def count(self, what: str) -> int:
        """Traces ``generated``, ``stopped`` (live), ``voted``, or ``no_answer`` (generated
        whole without a final answer or without a trace confidence: never voted)."""
        tests = {"generated": lambda t: True,
                 "stopped": lambda t: t.stopped_at is not None,
                 "voted": lambda t: t.votes,
                 "no_answer": lambda t: t.stopped_at is None and math.isnan(t.confidence)}
        return sum(1 for t in self.traces if tests[what](t))


def _live_prompt(model: Any, item: Any, prompt: str) -> tuple[Any, tuple[str, ...], int]:
    """(the rendered prompt, its stop sequences, its default answer budget)."""
    if prompt == "cot":
        from confide.tasks.loading import load_task
        from confide.tasks.prompts import COT_MAX_NEW_TOKENS, chain_of_thought

        task = chain_of_thought(load_task("gsm8k", limit=1))
        rendered = task.render(item, chat=bool(getattr(model, "has_chat_template", False)))
        return rendered, tuple(task.stop), COT_MAX_NEW_TOKENS
    if prompt == "chat":
        messages = item.prompt if not isinstance(item.prompt, str) else [
            {"role": "user", "content": item.prompt}]
        return messages, (), LIVE_MAX_NEW_TOKENS
    if prompt == "text":
        if not isinstance(item.prompt, str):
            raise InvalidInputError("prompt='text' sends the question as written: give text, "
                                    "not chat messages", field="prompt")
        return item.prompt, (), LIVE_MAX_NEW_TOKENS
    raise InvalidInputError(f"must be one of {', '.join(LIVE_PROMPTS)}, not {prompt!r}",
                            field="prompt")


class _Seen:
    """A token callback that counts the sampled rows' events (does the backend stream its
    samples?) and hands each to ``stop`` (None: never stops)."""

    def __init__(self, stop: Any = None) -> None:
        self.stop, self.events = stop, 0

    def __call__(self, event: Any) -> str | None:
        if event.sample is None:
            return None
        self.events += 1
        return None if self.stop is None else self.stop(event)


def deepconf(model: Any, question: str | Any, *, warmup: int = DEEPCONF_WARMUP,
             budget: int = 16, eta: float = 10.0, consensus: float = DEEPCONF_CONSENSUS,
             window: int | None = None, threshold: float | None = None, prompt: str = "cot",
             max_new_tokens: int | None = None, stop: tuple[str, ...] | None = None,
             temperature: float | None = None, top_p: float | None = None, top_k: int = 10,
             batch: int = 1, seed: int = 0,
             judge: str | None = None, grader: str | None = None,
             reasoning_tags: tuple[str, str] | str | None = None) -> LiveDeepConf:
    r"""DeepConf-online live on a streaming backend: traces stopped as they are generated.

    The procedure of the module notes (Fu et al. 2025, §3.2, Algorithm 2), run rather than
    replayed:

    1. ``warmup`` traces are generated whole (one call; trace :math:`j` draws from seed
       :math:`\text{seed} + j`) and :math:`s` is the :math:`(100-\eta)`-th percentile of
       their lowest group confidences (:func:`warmup_threshold`), unless ``threshold``
       fixes it. Warm-up traces with :math:`C_\text{least} \ge s` vote.
    2. Later traces are drawn ``batch`` at a time (trace :math:`j`, seed
       :math:`\text{seed} + j`), each watched token by token by
       :class:`~confide.pipeline.streaming.TraceStop`: the backend ends the row at the first
       window whose group confidence falls below :math:`s`, so the rest of the trace is
       never generated. Only a trace is judged: a reply that writes the opening tag, or
       one whose prompt ended with it (a chat template's thinking mode), from its first
       token; a reply without a trace is never stopped. A stopped trace does not vote; a
       trace generated whole with a final answer votes with weight :math:`C_\text{least}`.
    3. After the warm-up and after each batch the leader's share
       :math:`\beta = \max_a V(a) / \sum_a V(a)` (:func:`weighted_shares`) is checked;
       sampling stops once :math:`\beta \ge \tau` (``consensus``) or ``budget`` traces
       (warm-up included) were drawn.

    Parameters
    ----------
    model : a backend that streams its sampled rows with their top-k log-probabilities
        (``hf``). The ``openai`` backend streams only its greedy row (temperature 0) and
        ``vllm`` does not stream: both are refused after the warm-up, which shows it.
    question : text or an :class:`~confide.core.records.Item` (its references grade the
        answers).
    warmup, budget : :math:`N_\text{init}` and the most traces drawn in all.
    eta : the percentage of warm-up traces kept: 10 is DeepConf-low, 90 DeepConf-high.
    consensus : :math:`\tau`.
    window : the group size :math:`n` in trace tokens (default 2048, the paper's).
    threshold : a fixed :math:`s` instead of the warm-up's percentile.
    prompt : ``"cot"`` (default): GSM8K's k-shot chain-of-thought exemplars, each trace in
        ``<think>`` tags (``confide run --prompt cot``; what the bundled models need);
        ``"chat"``: the question as one user turn (a chat template's thinking mode on: a
        reasoning model); ``"text"``: the question text as the whole prompt.
    max_new_tokens : per trace (default 384 with ``cot``, else 1024).
    stop : stop sequences (default: the ``cot`` prompt's next question, else none).
    temperature, top_p : sampling (default confide's: 1.0 and 0.9).
    top_k : top alternatives read per token (DeepConf's token confidence needs >= 2).
    batch : traces drawn per call after the warm-up (the consensus is checked per batch).
    judge : clusters equal final answers (default ``numeric`` with ``cot``, else ``exact``).
    grader : grades the answers of a question with references (default ``numeric`` with
        ``cot``, else ``contains``).
    reasoning_tags : the trace's tags (default ``("<think>", "</think>")``).

    Returns
    -------
    LiveDeepConf : the answer, the vote's shares, each trace (role, tokens, stop, vote),
        the tokens generated against an estimate of a full-budget run's, and the majority
        vote over every complete trace.

    Raises
    ------
    InvalidInputError
        An option out of range, or a backend that does not stream its sampled traces.

    Without a warm-up trace confidence (no trace closed with a final answer, or no top-k)
    and no ``threshold``, :math:`s` is NaN and no trace is stopped (said in ``notes``).
    """
    window = window or DEEPCONF_WINDOW
    _check_options(warmup, eta, consensus, window, budget)
    for name, value, least in (("batch", batch, 1), ("top_k", top_k, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidInputError(f"must be an integer >= {least}, got {value!r}",
                                    field=name)
    if threshold is not None and (isinstance(threshold, bool)
                                  or not isinstance(threshold, (int, float))
                                  or not math.isfinite(threshold)):
        raise InvalidInputError(f"must be a finite number, got {threshold!r}",
                                field="threshold")
    if not (isinstance(model, Streams) and model.streaming):
        raise InvalidInputError(f"the {getattr(model, 'name', model)!r} backend cannot stream: "
                                "live DeepConf stops traces as they are generated; replay "
                                "it on a stored run instead (confide vote RUN --online)",
                                field="model")
    tags = parse_tags(DEFAULT_TAGS if reasoning_tags is None else reasoning_tags)
    if tags is None:
        raise InvalidInputError("live DeepConf reads traces: give their tags",
                                field="reasoning_tags")
    item = question if isinstance(question, Item) else Item(id="q0", prompt=question)
    rendered, stops, default_budget = _live_prompt(model, item, prompt)
    cot = prompt == "cot"
    judge_name = judge or ("numeric" if cot else "exact")
    equiv = make_judge(judge_name, backend=model)
    if item.references and grader is None:
        grader = "numeric" if cot else "contains"
    if grader is not None:
        GRADERS[grader]  # a typo fails before generating
    base = GenerationSpec(max_new_tokens=max_new_tokens or default_budget,
                          stop=stops if stop is None else tuple(stop), n_samples=1,
                          temperature=DEFAULT_TEMPERATURE if temperature is None else temperature,
                          top_p=DEFAULT_TOP_P if top_p is None else top_p,
                          top_k_alternatives=top_k, greedy=False, reasoning_tags=tags)

    gens: list[Any] = []
    traces: list[LiveTrace] = []

    def draw(n: int, stopper: Any) -> list[Any]:
        spec = replace(base, n_samples=n)
        result = model.generate([rendered], spec, [seed + len(gens)], on_token=stopper)[0]
        if result.error is not None or len(result.samples) != n:
            raise BackendError(result.error or f"{len(result.samples)} traces of {n} came back")
        return [split_reasoning(g, tags) for g in result.samples]

    def trace_of(gen: Any, role: Literal["warmup", "online"], stopped: int | None
                 ) -> LiveTrace:
        try:
            c = math.nan if stopped is not None else trace_confidence(gen, "lowest_group",
                                                                      window=window)
        except CannotScore:
            c = math.nan
        return LiveTrace(len(traces), role, "" if stopped is not None else gen.text,
                         reply_tokens(gen), c, stopped, finish_reason=gen.finish_reason,
                         trace_tokens=0 if gen.trace is None else int(gen.trace.n_tokens))

    seen = _Seen()
    for g in draw(warmup, seen):
        traces.append(trace_of(g, "warmup", None))
        gens.append(g)
    if seen.events == 0 and any(reply_tokens(g) for g in gens):
        raise InvalidInputError(
            f"the {getattr(model, 'name', 'chosen')} backend does not stream its sampled "
            "traces (openai streams only its greedy answer): live DeepConf cannot stop them; "
            "sample a run and replay it (confide vote RUN --online)", field="model")
    notes: list[str] = []
    s = float(threshold) if threshold is not None else math.nan
    if threshold is None:
        try:
            s = warmup_threshold([t.confidence for t in traces], eta)
        except CannotScore as exc:
            notes.append(f"no threshold, no trace stopped: {exc}")
    for t in traces:
        t.votes = bool(t.confidence >= s) if math.isfinite(s) else math.isfinite(t.confidence)

    def tally() -> tuple[Any, dict[int, float]]:
        labels = np.asarray(equiv.clusters([t.answer for t in traces], item), dtype=np.intp)
        voters = [t.index for t in traces if t.votes]
        return labels, weighted_shares(labels, [t.confidence for t in traces], voters)

    labels, shares = tally()
    while len(traces) < budget and max(shares.values(), default=0.0) < consensus:
        n = min(batch, budget - len(traces))
        # only a trace is stopped: a reply that writes the opening tag (a k-shot prompt's
        # model) or whose prompt ended with it (a chat template's thinking mode: the hf
        # backend marks its events trace_opened); a reply without one never is
        stopper = TraceStop(s, window=window, tags=tags, opening=True) \
            if math.isfinite(s) else None
        for j, g in enumerate(draw(n, _Seen(stopper))):
            at = None if stopper is None else stopper.stopped.get((0, j))
            t = trace_of(g, "online", at)
            t.votes = at is None and math.isfinite(t.confidence)
            traces.append(t)
            gens.append(g)
        labels, shares = tally()

    first: dict[int, str] = {}  # each answer's text: its first voter's (else its first trace's)
    for t in sorted(traces, key=lambda t: (not t.votes, t.index)):
        first.setdefault(int(labels[t.index]), t.answer)
    leader = max(shares, key=lambda a: shares[a]) if shares else None  # ties: the first
    whole = [t.index for t in traces if t.stopped_at is None and t.answer]
    majority = None
    if whole:
        most = majority_vote(labels[whole])
        majority = next(traces[i].answer for i in whole if labels[i] == most)
    answer = None if leader is None else next(
        t.answer for t in traces if t.votes and labels[t.index] == leader)
    warm = [t.tokens for t in traces[:warmup]]
    out = LiveDeepConf(
        id=item.id, answer=answer, share=max(shares.values(), default=math.nan),
        shares={first[a]: v for a, v in sorted(shares.items(), key=lambda kv: -kv[1])},
        reached=max(shares.values(), default=0.0) >= consensus, threshold=s, traces=traces,
        majority=majority, tokens_full=float(np.mean(warm)) * budget, warmup=warmup,
        budget=budget, eta=float(eta), consensus=float(consensus), window=window,
        max_new_tokens=base.max_new_tokens,
        judge=judge_name, grader=grader, notes=notes)
    if grader is not None and item.references:
        out.correct = None if answer is None else grade(answer, item, grader)
        out.majority_correct = None if majority is None else grade(majority, item, grader)
    return out
