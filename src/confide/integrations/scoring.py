"""The ``confide`` object a wrapped client's reply carries: each choice of a chat reply
scored by :func:`confide.runs.answers.score_answers`, the engine of ``confide score``.

Both wrappers (:mod:`confide.integrations.openai_client`,
:mod:`confide.integrations.langchain`) build the same object, a JSON-safe dict
(``null`` for a confidence a scorer could not give, with the reason beside it)::

    {
        "confidences": {"msp": -0.41, "mean_logprob": null, ...},   # choice 0
        "reasons": {"mean_logprob": "why it is null"},              # choice 0
        "choices": [{"index": 0, "confidences": ..., "reasons": ...}, ...],
        "skipped": {"mean_logprob": "why"},     # scorers with no value on any choice
        "logprobs": null,                       # or why the reply had none
        "samples": ["...", ...],                # answers drawn for the sampling scorers
        "requested": {"logprobs": true, "top_logprobs": 10, "n": 10, "temperature": 1.0},
        "sample_requests": 1,                   # requests that drew the samples
        "scorers": ["msp", ...],
        "server": {...}                         # only where the server sent its own
    }

Every choice is scored against the same drawn samples (the answers of a separate
sampling request, never the reply's own other choices, so a reply with ``n > 1``
keeps its meaning). A reply whose answer or log-probabilities the import boundary
refuses (:func:`confide.ingest.parse_value`: tokens that do not spell the text, a
probability above 1) is not an error for the caller: every scorer is null with the
refusal as its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.jsonsafe import json_safe
from confide.core.options import DEFAULT_TEMPERATURE, check_option, check_sampling
from confide.ingest.common import BadField, text_prompt
from confide.pipeline.plan import sample_count
from confide.runs.answers import ScoredAnswer, score_answers
from confide.runs.importing import import_scorers
from confide.scorers.base import scorer_at

__all__ = ["DEFAULT_TOP_LOGPROBS", "Choice", "Scoring", "chat_messages", "confide_object"]

#: Alternatives asked per token when the caller did not set ``top_logprobs`` (the
#: ``openai`` backend's default; the OpenAI API allows up to 20).
DEFAULT_TOP_LOGPROBS = 10


@dataclass(frozen=True)
class Choice:
    """One answer of a reply: its text (None for a choice holding only tool calls) and
    its log-probabilities as OpenAI's ``logprobs.content`` list (None where none came)."""

    text: str | None
    logprobs: list[Any] | None = None


@dataclass(frozen=True)
class Scoring:
    """What a wrapper scores with: the scorer names, the samples it draws per reply,
    the equivalence judge of the sampling scorers, and the alternatives per token it
    asks for.

    Build it with :meth:`of`, which checks the names and counts once, when the client
    is wrapped, not at each call.
    """

    scorers: tuple[str, ...]
    samples: int
    judge: str | None
    top_logprobs: int
    temperature: float | None

    @classmethod
    def of(cls, scorers: str | Sequence[str], *, samples: int | None, judge: str | None,
           top_logprobs: int = DEFAULT_TOP_LOGPROBS, temperature: float | None = None
           ) -> Scoring:
        """Check the settings. ``scorers``: names (a list or one comma-separated text),
        ``"free"`` or ``"all"`` (:func:`confide.runs.importing.import_scorers`);
        ``samples``: answers drawn per reply for the sampling scorers (None: the most any
        chosen scorer asks for, 0 when none needs samples); ``temperature``: theirs (None:
        the request's when above 0, else :data:`~confide.core.options.DEFAULT_TEMPERATURE`).
        """
        if scorers in ("all", "free"):
            names = import_scorers(str(scorers))
        else:
            listed = scorers.split(",") if isinstance(scorers, str) else list(scorers)
            names = tuple(dict.fromkeys(s.strip() for s in listed if s.strip()))
        if not names:
            raise InvalidInputError("name at least one scorer (or 'free', 'all')",
                                    field="scorers")
        for name in names:
            scorer_at(name, "answer")  # UnknownNameError with suggestions
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int)
                                    or samples < 0):
            raise InvalidInputError(f"samples is a count of answers (0 or more), not "
                                    f"{samples!r}", field="samples")
        check_option("top_logprobs", top_logprobs, field="top_logprobs")
        if temperature is not None:
            check_option("temperature", temperature, field="temperature")
        n = sample_count(names, requested=samples)
        check_sampling(n, DEFAULT_TEMPERATURE if temperature is None else temperature)
        return cls(names, n, judge, int(top_logprobs), temperature)

    def sample_temperature(self, requested: Any) -> float:
        """The temperature of the sampling request: the wrapper's, else the caller's
        when it is a number above 0, else the default."""
        if self.temperature is not None:
            return self.temperature
        if isinstance(requested, (int, float)) and not isinstance(requested, bool) \
                and requested > 0:
            return float(requested)
        return DEFAULT_TEMPERATURE


def chat_messages(messages: Any) -> list[dict[str, str]]:
    """The request's chat messages as confide's prompt: ``role`` and text ``content``
    (text parts joined, other parts left out), from dicts or objects with
    ``model_dump`` (the OpenAI SDK's message types)."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise InvalidInputError("messages is a list of chat messages", field="messages")
    plain = [m.model_dump() if hasattr(m, "model_dump") else dict(m)
             if isinstance(m, Mapping) else m for m in messages]
    try:
        prompt = text_prompt(plain, "messages")
    except BadField as exc:
        raise InvalidInputError(exc.message, field=exc.field) from None
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def _row(index: int, answer: ScoredAnswer | None, names: Sequence[str], why: str | None
         ) -> dict[str, Any]:
    if answer is None:  # not scored: every scorer null with why
        return {"index": index, "confidences": dict.fromkeys(names),
                "reasons": dict.fromkeys(names, why)}
    return {"index": index, "confidences": json_safe(answer.confidences),
            "reasons": dict(answer.reasons)}


def confide_object(scoring: Scoring, messages: Any, choices: Sequence[Choice], *,
                   samples: Sequence[Choice] = (), requested: Mapping[str, Any] | None = None,
                   sample_requests: int = 0, no_logprobs: str | None = None,
                   server: Any = None) -> dict[str, Any]:
    """Score each choice of one reply and describe it as the ``confide`` object.

    Parameters
    ----------
    scoring : the wrapper's settings.
    messages : the request's chat messages (:func:`chat_messages` reads them).
    choices : the reply's answers, in choice order.
    samples : the answers drawn for the sampling scorers (empty when none need them).
    requested : what the wrapper added to the request (``logprobs``, ``top_logprobs``,
        and the sampling request's ``n`` and ``temperature``).
    sample_requests : how many requests drew ``samples``.
    no_logprobs : why the reply holds no log-probabilities (None when it holds them).
    server : the server's own ``confide`` object, kept under ``"server"``.

    Returns
    -------
    dict
        JSON-safe, as the module docstring draws it.
    """
    names = scoring.scorers
    rows: list[dict[str, Any]] = []
    try:
        prompt = chat_messages(messages)
        texted = [(i, c) for i, c in enumerate(choices) if c.text is not None]
        scored: list[ScoredAnswer] = []
        if texted:
            question = {"question": prompt}
            sample_texts = [s.text or "" for s in samples]
            sample_lps = ([s.logprobs for s in samples]
                          if samples and all(s.logprobs is not None for s in samples) else None)
            out = score_answers([question] * len(texted), [c.text or "" for _, c in texted],
                                samples=[sample_texts] * len(texted),
                                logprobs=[c.logprobs for _, c in texted],
                                sample_logprobs=None if sample_lps is None
                                else [sample_lps] * len(texted),
                                scorers=list(names), judge=scoring.judge)
            scored = out if isinstance(out, list) else [out]
        by_index = {i: a for (i, _), a in zip(texted, scored, strict=True)}
        rows = [_row(i, by_index.get(i), names, "the choice holds no text (tool calls only)")
                for i in range(len(choices))]
    except InvalidInputError as exc:  # the reply itself, not the caller: say so per scorer
        rows = [_row(i, None, names, f"the reply could not be scored: {exc}")
                for i in range(len(choices))]
    first = rows[0] if rows else {"confidences": {}, "reasons": {}}
    skipped = {name: first["reasons"].get(name, "")
               for name in names if rows and all(r["confidences"].get(name) is None
                                                 for r in rows)}
    out_obj: dict[str, Any] = {
        "confidences": first["confidences"], "reasons": first["reasons"], "choices": rows,
        "skipped": skipped, "logprobs": no_logprobs, "samples": [s.text or "" for s in samples],
        "requested": dict(requested or {}), "sample_requests": sample_requests,
        "scorers": list(names)}
    if server is not None:
        out_obj["server"] = json_safe(server)
    return out_obj
