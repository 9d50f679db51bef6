"""The data that flows through a run: Item → Generation → Record.

Plain dataclasses; numpy arrays hold per-token statistics. ``to_dict`` /
``from_dict`` give a JSON-safe form that round-trips floats exactly, which the
store and the exports use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from confide.core.jsonsafe import json_safe
from confide.core.needs import TOKEN_STATISTICS

__all__ = ["BOOSTEDPROB_EPSILON", "BOOSTEDPROB_JUMP", "Claim", "DIVERGENCE_TEMPERATURE",
           "Generation", "Item", "MemberStatistics", "Message", "RENYI_ALPHA", "Record"]

Message = dict[str, str]  # {"role": ..., "content": ...}


@dataclass
class Item:
    """One question.

    ``prompt`` is the question text (a chat template or few-shot format is
    applied by the task's prompt format), or a ready list of chat messages.
    ``references`` are the accepted answers; ``metadata`` holds task extras
    (choices, incorrect answers, tool schemas, ...).
    """

    id: str
    prompt: str | list[Message]
    references: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def question(self) -> str:
        """The question as text: ``prompt`` itself, or the last user message of a chat prompt.

        System messages and earlier turns (instructions, few-shot exemplars,
        conversation history) are context, not the question; a chat prompt
        without a user message has the question ``""``. Task templates,
        reflexive prompts, judges, graders, stores and reports all read this.

        >>> Item("q", [{"role": "system", "content": "Be brief."},
        ...            {"role": "user", "content": "Capital of France?"},
        ...            {"role": "assistant", "content": "Paris."},
        ...            {"role": "user", "content": "And of Italy?"}]).question
        'And of Italy?'
        """
        if isinstance(self.prompt, str):
            return self.prompt
        users = [m.get("content", "") for m in self.prompt if m.get("role") == "user"]
        return users[-1] if users else ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "references": list(self.references),
                "metadata": self.metadata}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Item:
        return cls(id=str(d["id"]), prompt=d["prompt"], references=list(d.get("references", [])),
                   metadata=dict(d.get("metadata", {})))


# The per-step divergences from uniform of the ``token_renyi_uniform`` and
# ``token_fisher_rao_uniform`` columns are taken at this temperature (and Rényi order), the
# values of the RAINPROOF scorers (Darrin et al., 2023) that LM-Polygraph also uses.
DIVERGENCE_TEMPERATURE = 2.0
RENYI_ALPHA = 0.5
# The "difference_jump" rule of BoostedProb (Dinh & Niehues, 2025; the defaults of its
# ``boostedprob`` package) behind the ``token_boosted_prob`` column: a drop between two
# sorted probabilities is a jump when it exceeds both BOOSTEDPROB_JUMP times the larger
# one and BOOSTEDPROB_EPSILON (confide.scorers.information.dominant_cut).
BOOSTEDPROB_JUMP = 0.3
BOOSTEDPROB_EPSILON = 0.005

_ARRAY_FIELDS = tuple(stat.value for stat in TOKEN_STATISTICS)


def _array(value: Any, ndim: int) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.asarray(value, dtype=np.float32)
    return arr.reshape((0,) * ndim) if arr.size == 0 else arr


def _listed(arr: np.ndarray | None) -> list[Any] | None:
    return None if arr is None else np.asarray(arr, dtype=np.float64).tolist()


@dataclass
class MemberStatistics:
    r"""An answer's tokens under each of :math:`M` ensemble members (teacher forcing).

    Per member :math:`m` and answer token :math:`t`: ``logprobs[m, t]`` :math:`= \log
    p_m(y_t \mid y_{<t})` and ``entropies[m, t]`` :math:`= H(p_{m,t})`. Over the
    members' mean :math:`\bar p_t = \frac1M \sum_m p_{m,t}`: ``mean_entropy[t]``
    :math:`= H(\bar p_t)` and ``mean_cross_entropy[t]`` :math:`= -\sum_v \bar p_t(v)
    \frac1M \sum_m \log p_{m,t}(v)`. With these four every token-level measure of
    Malinin and Gales (2021) follows without the vocabulary: expected entropy
    :math:`\frac1M\sum_m H(p_{m,t})`, mutual information :math:`H(\bar p_t)` minus it,
    expected pairwise KL ``mean_cross_entropy`` minus the expected entropy, reverse
    mutual information ``mean_cross_entropy`` minus :math:`H(\bar p_t)`. A statistic the
    source cannot give (an imported file with the members' chosen-token log-probabilities
    only) is ``None``; ``method`` names how the members were made (``lora``, ``sve``,
    ``mc-dropout``, or the source's own word).
    """

    logprobs: np.ndarray
    entropies: np.ndarray | None = None
    mean_entropy: np.ndarray | None = None
    mean_cross_entropy: np.ndarray | None = None
    method: str = ""

    @property
    def count(self) -> int:
        return int(self.logprobs.shape[0])

    def to_dict(self) -> dict[str, Any]:
        return {"logprobs": _listed(self.logprobs), "entropies": _listed(self.entropies),
                "mean_entropy": _listed(self.mean_entropy),
                "mean_cross_entropy": _listed(self.mean_cross_entropy), "method": self.method}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemberStatistics:
        logprobs = _array(d["logprobs"], 2)
        assert logprobs is not None
        return cls(logprobs=logprobs, entropies=_array(d.get("entropies"), 2),
                   mean_entropy=_array(d.get("mean_entropy"), 1),
                   mean_cross_entropy=_array(d.get("mean_cross_entropy"), 1),
                   method=str(d.get("method", "")))


@dataclass
class Generation:
    r"""One model output with the token statistics the backend could give.

    Per answer token ``t`` (the terminating end-of-sequence token is not part of
    the answer): ``token_logprobs[t] = log p_t(y_t)``, ``token_entropies[t] =
    H(p_t)``, ``token_kl_uniform[t] = KL(U || p_t)``, ``top_logprobs[t, j]`` and
    ``top_tokens[t][j]`` the j-th most likely alternatives. Two more columns
    compare the tempered distribution :math:`q_t \propto p_t^{1/\tau}`
    (:math:`\tau` = :data:`DIVERGENCE_TEMPERATURE` = 2) with the uniform
    :math:`U` over the :math:`V` vocabulary entries:
    ``token_renyi_uniform[t]`` :math:`= D_\alpha(q_t \| U) = \log V +
    \frac{1}{\alpha - 1}\log\sum_v q_t(v)^\alpha` with :math:`\alpha` =
    :data:`RENYI_ALPHA` = 1/2, and ``token_fisher_rao_uniform[t]`` :math:`=
    \frac{2}{\pi}\arccos\sum_v \sqrt{q_t(v)/V}` (the Fisher–Rao distance
    divided by its maximum :math:`\pi`); both are 0 for a uniform
    :math:`p_t` and grow as it peaks. ``token_boosted_prob[t]`` is BoostedProb's
    value of the chosen token, its dominant group's mass or its own probability,
    the rule applied to the *whole* sorted :math:`p_t`
    (:func:`confide.scorers.information.boosted_token_probability`; the ``hf``
    backend's :func:`~confide.backends.hf.steps.boosted_probabilities`). All are
    computed from the next-token distribution produced while generating. A statistic
    the backend cannot give is ``None``. ``hidden`` maps ``"layer:pool"``
    (pool is ``last`` or ``mean``) to a float16 vector.

    A reasoning model's reply is two spans: ``trace`` is the reasoning (the
    ``<think>`` block, or a server's ``reasoning_content``) as a generation of its own,
    with its own tokens and statistics, and this generation is the final answer after
    it; ``None`` when the reply has no trace. ``members`` holds the answer's tokens
    under each ensemble member, where a run has an ensemble. ``trace_opened``: the
    prompt itself ended with the opening tag (a chat template's thinking mode), so the
    whole reply is a trace until its closing tag
    (:func:`confide.core.reasoning.split_reasoning`); set by the backend that rendered
    the prompt, read once when the reply is split, never stored.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    token_logprobs: np.ndarray | None = None
    token_entropies: np.ndarray | None = None
    token_kl_uniform: np.ndarray | None = None
    token_renyi_uniform: np.ndarray | None = None
    token_fisher_rao_uniform: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None
    top_tokens: list[list[str]] | None = None
    finish_reason: str = "stop"
    hidden: dict[str, np.ndarray] | None = None
    # last, so positional construction is unchanged; records stored before it load as None
    token_boosted_prob: np.ndarray | None = None
    trace: Generation | None = None
    members: MemberStatistics | None = None
    trace_opened: bool = False

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids) if self.token_ids else len(self.tokens)

    @property
    def empty(self) -> bool:
        """No answer: no text but whitespace.

        Every part of confide treats an empty answer alike: equivalent to no other
        answer, never certain. A greedy answer that is empty gets no confidence; an empty
        sample counts as disagreement (where likelihoods weigh samples it gets the mean
        log-likelihood of the others: :func:`confide.scorers.features.agreement_logprobs`).
        """
        return not self.text.strip()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"text": self.text, "token_ids": list(self.token_ids),
                             "tokens": list(self.tokens), "finish_reason": self.finish_reason,
                             "top_tokens": self.top_tokens}
        for name in _ARRAY_FIELDS:
            arr = getattr(self, name)
            d[name] = None if arr is None else np.asarray(arr, dtype=np.float64).tolist()
        # written only when present, so records without them stay byte for byte as before
        if self.trace is not None:
            d["trace"] = self.trace.to_dict()
        if self.members is not None:
            d["members"] = self.members.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any],
                  hidden: dict[str, np.ndarray] | None = None) -> Generation:
        arrays = {n: None if d.get(n) is None else np.asarray(d[n], dtype=np.float32)
                  for n in _ARRAY_FIELDS}
        return cls(text=d["text"], token_ids=list(d.get("token_ids", [])),
                   tokens=list(d.get("tokens", [])), finish_reason=d.get("finish_reason", "stop"),
                   top_tokens=d.get("top_tokens"), hidden=hidden,
                   trace=None if d.get("trace") is None else cls.from_dict(d["trace"]),
                   members=(None if d.get("members") is None
                            else MemberStatistics.from_dict(d["members"])),
                   trace_opened=False, **arrays)  # split before it was stored


@dataclass
class Claim:
    """One atomic claim of a long answer (:mod:`confide.runs.claims`).

    ``text[start:end]`` of the greedy answer is where the claim stands (for a
    claim a model listed in its own words, the sentence it came from);
    ``tokens`` are the indices of the answer tokens inside that span.
    ``scores`` maps claim scorer → confidence (higher = more likely true; NaN
    with the reason in ``score_errors``); ``grades`` maps claim grader →
    correctness in [0, 1].
    """

    text: str
    start: int
    end: int
    tokens: list[int] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    score_errors: dict[str, str] = field(default_factory=dict)
    grades: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "start": self.start, "end": self.end,
                "tokens": list(self.tokens),
                "scores": json_safe(self.scores),
                "score_errors": dict(self.score_errors), "grades": dict(self.grades)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Claim:
        return cls(text=d["text"], start=int(d["start"]), end=int(d["end"]),
                   tokens=[int(t) for t in d.get("tokens", [])],
                   scores={k: (math.nan if v is None else float(v))
                           for k, v in d.get("scores", {}).items()},
                   score_errors=dict(d.get("score_errors", {})),
                   grades={k: float(v) for k, v in d.get("grades", {}).items()})


@dataclass
class Record:
    """An item with its greedy generation, its samples, its scores and its grades.

    ``scores`` maps scorer name → confidence (higher = more likely correct; NaN
    when the scorer could not answer, with the reason in ``score_errors``).
    ``grades`` maps grader name → correctness in [0, 1]; ``grade_errors`` maps a grader
    that could not grade the answer to why (a reasoning trace with no final answer:
    :func:`confide.core.reasoning.missing_answer_reason`), the record then ungraded by it.
    ``claims``: the greedy answer's claims, once a long-form run has split it.
    """

    item: Item
    greedy: Generation
    samples: list[Generation] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    score_errors: dict[str, str] = field(default_factory=dict)
    grades: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    claims: list[Claim] | None = None  # long answers only: None until split into claims
    grade_errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "item": self.item.to_dict(),
            "greedy": self.greedy.to_dict(),
            "samples": [s.to_dict() for s in self.samples],
            # JSON has no NaN: store None and keep the reason next to it.
            "scores": json_safe(self.scores),
            "score_errors": dict(self.score_errors),
            "grades": dict(self.grades),
            "seconds": self.seconds,
        }
        if self.claims is not None:
            d["claims"] = [c.to_dict() for c in self.claims]
        if self.grade_errors:  # only when present: records without stay byte for byte
            d["grade_errors"] = dict(self.grade_errors)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Record:
        return cls(
            item=Item.from_dict(d["item"]),
            greedy=Generation.from_dict(d["greedy"]),
            samples=[Generation.from_dict(s) for s in d.get("samples", [])],
            scores={k: (math.nan if v is None else float(v)) for k, v in d["scores"].items()},
            score_errors=dict(d.get("score_errors", {})),
            grades={k: float(v) for k, v in d.get("grades", {}).items()},
            seconds=float(d.get("seconds", 0.0)),
            claims=(None if d.get("claims") is None
                    else [Claim.from_dict(c) for c in d["claims"]]),
            grade_errors=dict(d.get("grade_errors", {})),
        )
