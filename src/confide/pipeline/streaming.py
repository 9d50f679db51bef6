r"""Confidence while the answer streams: running confidence, early abstention, text deltas.

A backend with ``streaming = True`` calls a
:data:`~confide.backends.base.TokenCallback` once per generated token
(:class:`~confide.backends.base.TokenEvent`). :class:`AnswerStream` is that
callback for one prompt: it turns each event into a :class:`TokenUpdate` for
the choice it belongs to (choice 0 is the greedy answer, choice ``j + 1``
sample ``j``) and hands it to a sink (a queue the API or the server reads),
and it tells the backend when to stop a row:

* ``"cancelled"`` once :meth:`AnswerStream.cancel` was called (the client went
  away): every row ends at its next token, so no generation outlives its reader;
* ``"abstain"`` when the :class:`EarlyAbstention` policy fires on the greedy
  answer; the samples stop too (their only use was the greedy answer's scores).

With an early-abstention policy, no token of the greedy answer reaches the sink
before the running confidence has been checked with it: the first ``after - 1``
tokens (which the policy does not judge alone) are held back and handed on
together with token ``after`` once the check passes; every later token is
checked before it is handed on; a token on which the policy fires, and any still
held back, are never handed on. An answer that ends before ``after`` tokens was
never judged and is sent whole at its end (:meth:`AnswerStream.finish`). So a
reader of an abstaining stream has received the updates (and text deltas) of
exactly the greedy answer's first ``t - 1`` tokens when the policy fired at
token ``t > after`` (each of them passed the check), and nothing of it when the
policy fired at token ``after`` (the server's last chunk carries the text sent
as ``confide.sent_before_abstention``).
What this costs per token: from token ``after`` on, +0.7 µs (the check runs
before the token is handed on instead of after: 14.3 against 13.6 µs per
callback); a token ``t < after`` waits ``after - t`` token times for token
``after`` (with the default ``after = 4``: 3, 2 and 1 token times for the
first three tokens), and nothing else waits
(``.venv/bin/python benchmarks/stream_holdback.py --items 4 --after 4``).

The *running confidence* after :math:`t` tokens is the geometric-mean
probability of the tokens so far,

.. math:: c_t = \exp\Big(\frac{1}{t}\sum_{i=1}^{t} \log p(y_i \mid y_{<i}, x)\Big) \in (0, 1],

the exponential of the ``mean_logprob`` scorer on the prefix (higher = more
likely correct). It is a running statistic shown while streaming; the final
scores, calibrated probability and decision come from the same scorers,
calibrator and policy as a reply that is not streamed.

Text deltas are what is safe to send: the answer is sent without its leading
whitespace (the final answer is stripped), up to the first stop sequence, and a
tail that could still be the start of a stop sequence, trailing whitespace or
an incomplete character is held back until the next token decides. When the
row ends, :meth:`AnswerStream.closing_delta` gives the rest of the final text,
so the deltas of a choice always add up to its final answer.

A reasoning reply (``tags`` set, or a backend that gets the trace apart:
:attr:`TokenEvent.trace <confide.backends.base.TokenEvent.trace>`) is two spans, as its
record is (:mod:`confide.core.reasoning`): each token is the trace's up to and including
the one that completes the closing tag, the answer's after it; a reply whose prompt opened
the trace (:attr:`TokenEvent.trace_opened <confide.backends.base.TokenEvent.trace_opened>`:
a chat template's thinking mode ending with ``<think>``) holds no opening tag and is the
trace's from its first token, as :func:`~confide.core.reasoning.split_reasoning` reads
its record. A trace token's update
carries ``trace_delta`` (the trace's safe text: a tail that may become the closing tag
waits) and the trace's own running confidence; it is never held back nor judged.
Early abstention, the holdback and the answer's running confidence read the final
answer's tokens alone: ``after`` counts answer tokens, so a long trace never trips the
policy and never counts toward its warm-up. A reply that opens with a partial opening
tag (``<th``) is undecided until the tag completes or cannot: its tokens count as the
trace's and send nothing (they are the tag). :meth:`AnswerStream.closing_trace_delta`
gives the rest of the trace at the end, so the trace deltas add up to the trace.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confide.backends.base import (
    Backend,
    GenerationResult,
    GenerationSpec,
    Prompt,
    Streams,
    TokenEvent,
)
from confide.core.errors import InvalidInputError
from confide.core.options import check_option
from confide.core.reasoning import Tags
from confide.core.records import Item, Record
from confide.pipeline.answering import Pipeline

__all__ = ["AnswerStream", "EarlyAbstention", "StreamEnd", "TokenUpdate", "TraceStop",
           "running_confidence", "safe_text", "stream_answer"]


def running_confidence(sum_logprob: float, n_tokens: int) -> float | None:
    r"""Geometric-mean token probability :math:`\exp(\frac{1}{t}\sum_i \log p_i)`; None at 0 tokens.

    >>> round(running_confidence(math.log(0.5) + math.log(0.125), 2), 4)
    0.25
    >>> running_confidence(0.0, 0) is None
    True
    """
    if n_tokens <= 0:
        return None
    return math.exp(sum_logprob / n_tokens)


@dataclass(frozen=True)
class EarlyAbstention:
    """Stop the greedy answer once its running confidence falls below ``below``.

    The policy is read only after ``after`` tokens (the first tokens of an
    answer are often the least certain: one early dip should not end it).
    Both are checked by :func:`confide.core.options.check_option`, the same rules for
    the API, the CLI and the server.

    >>> EarlyAbstention(0.3, after=2).reason(0.2, 2)
    'running confidence 0.200 fell below 0.3 after 2 tokens'
    >>> EarlyAbstention(0.3, after=2).reason(0.2, 1) is None
    True
    """

    below: float
    after: int = 4

    def __post_init__(self) -> None:
        check_option("early_abstain_below", self.below)
        check_option("early_abstain_after", self.after)

    def reason(self, running: float | None, n_tokens: int) -> str | None:
        """Why to stop now, or None to go on (an answer without log-probabilities goes on)."""
        if running is None or n_tokens < self.after or running >= self.below:
            return None
        return (f"running confidence {running:.3f} fell below {self.below:g} after "
                f"{n_tokens} tokens")

    def to_dict(self) -> dict[str, Any]:
        return {"below": self.below, "after": self.after}


class TraceStop:
    r"""DeepConf-online's live stop: end a sampled trace once its group confidence falls
    below a threshold (Fu et al., 2025, §3.2), a :data:`~confide.backends.base.TokenCallback`.

    Per sampled row it keeps the token confidences of the trace,
    :math:`C_i = -\frac1k\sum_j \log P_i(j)`
    (:func:`confide.scorers.reasoning.token_confidences` of the event's top-k), and from
    the ``window``-th trace token on ends the row at the first token :math:`t` where

    .. math:: C_{G_t} = \frac1n \sum_{i=t-n+1}^{t} C_i < s

    (:math:`n` = ``window``, :math:`s` = ``threshold``); at the token that closes the trace
    (its text holds the closing tag) a trace shorter than :math:`n` is judged once on all
    its tokens. After the closing tag the row is the final answer and is never stopped;
    the greedy row (``event.sample is None``) is never stopped. So a trace with a final
    answer is stopped exactly when its lowest group confidence
    (:func:`confide.scorers.reasoning.trace_confidence`, ``lowest_group``) is below
    :math:`s`, at the stop point :func:`confide.decisions.deepconf.stop_point` finds on its
    full statistics. A row whose top-k are missing, fewer than two or not finite is not
    judged. ``stopped`` maps ``(prompt, sample)`` to the trace tokens generated at the stop.

    With ``opening`` True a row is judged only once it is a trace: its text opens with the
    opening tag (white space aside), or its prompt opened the trace
    (:attr:`TokenEvent.trace_opened <confide.backends.base.TokenEvent.trace_opened>`: a
    chat template that ends with ``<think>\n``, as DeepSeek-R1's and Qwen3's thinking
    mode; the ``hf`` backend marks it), judged from its first token. A reply without a
    trace (a k-shot prompt's model that skipped it) is never stopped, as
    :func:`~confide.decisions.deepconf.stop_point` judges only a trace. With ``opening``
    False every sampled row is judged from its first token (a backend that cannot say
    that its prompt opened the trace). A backend that gets the trace apart
    (:attr:`TokenEvent.in_trace <confide.backends.base.TokenEvent.in_trace>`) has its
    answer tokens never judged.

    Cost per token: one ``k``-vector mean and a running window sum; the closing tag is
    looked for in the row's text the loop already decodes for every event.

    >>> stop = TraceStop(1.0, window=2)
    >>> ev = lambda lp: TokenEvent(0, 0, "x", "x", lp[0], None, (("a", lp[0]), ("b", lp[1])))
    >>> [stop(ev(lp)) for lp in ([-0.1, -2.9], [-0.6, -0.8], [-0.6, -0.8])]
    [None, None, 'deepconf: group confidence 0.700 < 1 at trace token 3']
    >>> stop.stopped
    {(0, 0): 3}
    """

    def __init__(self, threshold: float, *, window: int = 2048,
                 tags: tuple[str, str] = ("<think>", "</think>"),
                 opening: bool = False) -> None:
        if not math.isfinite(threshold):
            raise InvalidInputError(f"must be a finite number, got {threshold!r}",
                                    field="threshold")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InvalidInputError(f"must be a positive integer, got {window!r}",
                                    field="window")
        self.threshold, self.window, self.closing = float(threshold), window, tags[1]
        self.opening = tags[0] if opening else None
        self._rows: dict[tuple[int, int], _TraceWindow] = {}
        self.stopped: dict[tuple[int, int], int] = {}

    def __call__(self, event: TokenEvent) -> str | None:
        from confide.core.errors import CannotScore
        from confide.scorers.reasoning import token_confidences

        if event.sample is None:
            return None
        key = (event.prompt, event.sample)
        row = self._rows.setdefault(key, _TraceWindow())
        if row.done:
            return None
        if event.trace is not None and not event.in_trace:
            # the backend split the trace off: its end shows at the answer's first token,
            # where a trace shorter than the window is judged once, as a closing tag is
            row.done = True
            n = len(row.values)
            return self._stop(key, row, n) if 0 < n < self.window else None
        try:
            c = float(token_confidences([[v for _, v in event.top]])[0])
        except CannotScore:
            row.done = True  # no usable top-k: this trace cannot be judged
            return None
        row.values.append(c)
        row.total += c
        if len(row.values) > self.window:
            row.total -= row.values[len(row.values) - self.window - 1]
        if event.trace_opened:
            row.opened = True  # the prompt ended with the opening tag: a trace from token 1
        if self.opening is not None and not row.opened and event.trace is None:
            head = event.text.lstrip()
            if not head.startswith(self.opening):
                row.done = not self.opening.startswith(head)  # a reply with no trace
                return None  # (or a partial opening tag: not judged yet)
            row.opened = True
        closed = event.trace is None and self.closing in event.text
        if closed:
            row.done = True  # the final answer follows: never stopped
        if len(row.values) >= self.window or closed:
            return self._stop(key, row, min(self.window, len(row.values)))
        return None

    def _stop(self, key: tuple[int, int], row: _TraceWindow, n: int) -> str | None:
        """End the row if its last ``n`` trace tokens' mean confidence is below the threshold."""
        if row.total / n >= self.threshold:
            return None
        self.stopped[key] = len(row.values)
        return (f"deepconf: group confidence {row.total / n:.3f} < {self.threshold:g} "
                f"at trace token {len(row.values)}")


@dataclass
class _TraceWindow:
    values: list[float] = field(default_factory=list)
    total: float = 0.0
    done: bool = False
    opened: bool = False


@dataclass(frozen=True)
class TokenUpdate:
    """One token of one choice: the text to send now and its confidence figures.

    ``span``: ``"answer"``, or ``"trace"`` for a token of a reasoning reply's trace;
    ``running_confidence`` and ``n_tokens`` are that span's. ``trace_delta``: the trace's
    text to send now (``delta`` is the final answer's)."""

    choice: int
    delta: str
    token: str
    logprob: float | None
    entropy: float | None
    running_confidence: float | None
    n_tokens: int
    top: tuple[tuple[str, float], ...] = ()
    trace_delta: str = ""
    span: str = "answer"


@dataclass
class StreamEnd:
    """The end of a stream: the backend's result, and why the greedy answer stopped early."""

    result: GenerationResult
    abstained: str | None = None
    record: Record | None = None
    closing: dict[int, str] = field(default_factory=dict)
    closing_trace: dict[int, str] = field(default_factory=dict)  # the traces' rest


def safe_text(text: str, stop: tuple[str, ...] = ()) -> str:
    """The part of a growing answer that later tokens cannot take back.

    >>> safe_text("  Paris is", ("\\n",))
    'Paris is'
    >>> safe_text("Paris\\nLyon", ("\\n",)), safe_text("Paris. Q", ("Q:",)), safe_text("Paris ")
    ('Paris', 'Paris.', 'Paris')
    """
    text = text.lstrip()
    cut = min((text.find(s) for s in stop if s in text), default=-1)
    if cut >= 0:
        return text[:cut].rstrip()
    for s in stop:  # a tail that may become a stop sequence waits
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                text = text[:-n]
                break
    return text.rstrip().rstrip("\ufffd")


@dataclass
class _Running:
    """A span's running sums: log-probabilities and tokens."""

    sum_logprob: float = 0.0
    n_logprobs: int = 0
    n_tokens: int = 0

    def add(self, logprob: float | None) -> float | None:
        """Count a token; the span's running confidence after it."""
        self.n_tokens += 1
        if logprob is not None and math.isfinite(logprob):
            self.sum_logprob += logprob
            self.n_logprobs += 1
        return running_confidence(self.sum_logprob, self.n_logprobs)


@dataclass
class _Choice(_Running):
    emitted: str = ""  # the text of the deltas made so far (held back or handed on)
    sent: str = ""  # the text of the deltas handed to the sink
    trace: _Running = field(default_factory=_Running)  # the trace's own sums
    trace_emitted: str = ""  # the trace text of the deltas made so far
    opened: bool | None = None  # tags: None undecided, True a trace, False none
    closed: bool = False  # tags: the closing tag came


class AnswerStream:
    """The token callback for one prompt (see the module notes).

    Parameters
    ----------
    sink : receives each :class:`TokenUpdate` (called on the generating thread).
    n_choices : choices streamed (the greedy answer and ``n_choices - 1`` samples);
        further samples are generated for the scorers but not streamed.
    stop : the request's stop sequences (text after one is never sent).
    early : the early-abstention policy, or None.
    trace_stop : DeepConf-online's stop of sampled traces (:class:`TraceStop`), or None.
    tags : a reasoning reply's trace tags (module notes), or None: a reply is all answer
        (unless the backend gives its trace apart).
    """

    def __init__(self, sink: Callable[[TokenUpdate], None], *, n_choices: int = 1,
                 stop: tuple[str, ...] = (), early: EarlyAbstention | None = None,
                 trace_stop: TraceStop | None = None, tags: Tags | None = None) -> None:
        self.sink, self.n_choices, self.stop, self.early = sink, n_choices, stop, early
        self.trace_stop = trace_stop
        self.tags = tags
        self.choices = [_Choice() for _ in range(n_choices)]
        self.abstained: str | None = None
        self.tokens = 0  # every row's tokens reported so far (greedy and samples)
        self._cancelled = threading.Event()
        self._held: list[TokenUpdate] = []  # the greedy answer's tokens not yet checked
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """End every row at its next token (the reader went away)."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def __call__(self, event: TokenEvent) -> str | None:
        self.tokens += 1
        if self._cancelled.is_set():
            return "cancelled"
        index = 0 if event.sample is None else event.sample + 1
        update = self._update(index, event) if index < self.n_choices else None
        if self.abstained is not None:
            if update is not None and index > 0:
                self.sink(update)
            return "abstain"
        if event.sample is None and self.early is not None and (
                update is None or update.span == "answer"):  # the policy reads the answer
            state = self.choices[0]
            reason = self.early.reason(running_confidence(state.sum_logprob, state.n_logprobs),
                                       state.n_tokens)
            if reason is not None:
                self.abstained = reason
                with self._lock:  # neither this token nor any held one is handed on
                    self._held.clear()
                state.emitted = state.sent
                return "abstain"
            if update is not None and state.n_tokens < self.early.after:
                with self._lock:  # not judged yet: wait for token ``after``
                    self._held.append(update)
                return None
        if update is not None:
            if index == 0:  # checked (or no policy): what was held goes first
                for held in self._release():
                    self.sink(held)
            self.sink(update)
            if index == 0:
                self.choices[0].sent = self.choices[0].emitted
        if event.sample is not None and self.trace_stop is not None:
            return self.trace_stop(event)  # the stopping token was generated: sent above
        return None

    def _release(self) -> list[TokenUpdate]:
        with self._lock:
            held, self._held = self._held, []
        return held

    def finish(self) -> list[TokenUpdate]:
        """The greedy answer's tokens still held back when generation ended: an answer shorter
        than ``after`` tokens, which the policy never judged and so never stopped; the
        caller sends them (in order) before the end of the stream. Empty after an
        abstention or without a policy."""
        held = [] if self.abstained is not None or self.cancelled else self._release()
        if held:
            self.choices[0].sent = self.choices[0].emitted
        return held

    def _update(self, index: int, event: TokenEvent) -> TokenUpdate:
        state = self.choices[index]
        trace, answer, in_trace = self._spans(state, event)
        trace_delta = ""
        if trace is not None:
            closing = () if self.tags is None or event.trace is not None else (self.tags[1],)
            safe = safe_text(trace, (*self.stop, *closing))
            if safe.startswith(state.trace_emitted):
                trace_delta, state.trace_emitted = safe[len(state.trace_emitted):], safe
        if in_trace:  # the trace's token: its own figures; the answer waits for its own
            running = state.trace.add(event.logprob)
            return TokenUpdate(index, "", event.token, event.logprob, event.entropy, running,
                               state.trace.n_tokens, event.top, trace_delta, "trace")
        running = state.add(event.logprob)
        safe = safe_text(answer, self.stop)
        delta = ""
        if safe.startswith(state.emitted):
            delta, state.emitted = safe[len(state.emitted):], safe
        return TokenUpdate(index, delta, event.token, event.logprob, event.entropy, running,
                           state.n_tokens, event.top, trace_delta)

    def _spans(self, state: _Choice, event: TokenEvent) -> tuple[str | None, str, bool]:
        """(the trace so far or None, the answer so far, whether this token is the
        trace's), from the backend's own split or the tags in the text."""
        if event.trace is not None:
            return event.trace, event.text, event.in_trace
        if self.tags is None or state.opened is False:
            return None, event.text, False
        opening, closing = self.tags
        text = event.text
        head = text.lstrip()
        written = head.startswith(opening)
        if state.opened is None:
            if not written and not event.trace_opened:
                if opening.startswith(head):  # may still become the opening tag
                    return "", "", True
                state.opened = False
                return None, text, False
            state.opened = True
        if not written and head and opening.startswith(head):
            return "", "", True  # the prompt opened the trace; the model may write the tag
        # the trace starts after the tag the reply wrote, else (the prompt opened it) at the
        # reply's start, as split_reasoning reads the record
        start = len(text) - len(head) + len(opening) if written else 0
        close = text.find(closing, start)
        if close < 0:
            return text[start:], "", True
        closes_here = not state.closed  # the token that completes the tag is the trace's
        state.closed = True
        return text[start:close], text[close + len(closing):], closes_here

    def closing_delta(self, index: int, final_text: str) -> str:
        """The rest of choice ``index``'s final answer, not yet sent."""
        state = self.choices[index]
        if not final_text.startswith(state.emitted):
            return ""  # cannot happen with safe_text; never send text twice
        delta, state.emitted = final_text[len(state.emitted):], final_text
        return delta

    def closing_trace_delta(self, index: int, trace_text: str) -> str:
        """The rest of choice ``index``'s trace, not yet sent."""
        state = self.choices[index]
        if not trace_text.startswith(state.trace_emitted):
            return ""  # never send text twice
        delta, state.trace_emitted = trace_text[len(state.trace_emitted):], trace_text
        return delta


def stream_answer(pipeline: Pipeline, item: Item, prompt: Prompt, spec: GenerationSpec,
                  seed: int, *, n_choices: int = 1, early: EarlyAbstention | None = None,
                  trace_stop: TraceStop | None = None) -> Iterator[TokenUpdate | StreamEnd]:
    """Generate one answer, yielding a :class:`TokenUpdate` per token, then a :class:`StreamEnd`
    with the record scored by ``pipeline`` (the same scoring as a reply that is not streamed).

    Generation runs on a background thread; closing the iterator early (``break``,
    garbage collection) cancels it at the next token. ``trace_stop`` ends sampled traces
    whose group confidence falls below its threshold (DeepConf-online).
    """
    backend: Backend = pipeline.backend
    if not (isinstance(backend, Streams) and backend.streaming):
        raise InvalidInputError(f"the {backend.name} backend cannot stream", field="backend")
    events: queue.Queue[Any] = queue.Queue()
    answer = AnswerStream(events.put, n_choices=n_choices, stop=spec.stop, early=early,
                          trace_stop=trace_stop, tags=pipeline.reasoning_tags)
    done = object()

    def work() -> None:
        try:
            result = backend.generate([prompt], spec, [seed], on_token=answer)[0]
            for held in answer.finish():  # a short answer the policy never judged
                events.put(held)
            events.put(result)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the reader's thread
            events.put(exc)
        finally:
            events.put(done)

    thread = threading.Thread(target=work, name="confide-stream", daemon=True)
    thread.start()
    result: Any = None
    try:
        while (got := events.get()) is not done:
            if isinstance(got, TokenUpdate):
                yield got
            else:
                result = got
        if isinstance(result, BaseException):
            raise result
        record = pipeline.complete(item, result, seed=seed)
        gens = [record.greedy, *record.samples[:n_choices - 1]]
        closing = {i: answer.closing_delta(i, g.text) for i, g in enumerate(gens)}
        traces = {i: answer.closing_trace_delta(i, g.trace.text)
                  for i, g in enumerate(gens) if g.trace is not None}
        yield StreamEnd(result, answer.abstained, record, closing, traces)
    finally:
        answer.cancel()
        thread.join()
