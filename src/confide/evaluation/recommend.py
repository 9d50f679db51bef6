"""Which scorer to use: a short list for what a model gives, a sampling budget and a task.

Two kinds of evidence, never mixed:

- the quality table (``quality.json`` beside this module, written by
  ``benchmarks/quality.py --report-only`` from stored runs of the bundled models): each
  scorer's AUROC with its 95% bootstrap interval, its rank among the compared scorers on
  the items all of them scored, and whether it beats the length baseline there. Only
  pieces whose task is of the asked type and that rank scorers (not at chance, at least
  10 right and 10 wrong answers) count;
- the user's own labelled records, when given: a scorer is chosen on the training folds
  of the one fold rule (:func:`confide.metrics.crossfit.crossfit_splits`) and judged on
  the held-out fold, so the reported figure is not the winner's curse of choosing and
  judging on the same answers.

>>> rec = recommend(gives="topk", samples=0, task="short")
>>> rec.scorers[0].name in {s.name for s in rec.scorers}
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from confide.core.errors import InvalidInputError
from confide.core.needs import FULL_DISTRIBUTION, MODEL_PASSES, Need
from confide.core.records import Record
from confide.metrics.crossfit import crossfit_splits
from confide.metrics.ranking import auroc_score
from confide.pipeline.scorer_plan import skip_reason
from confide.scorers.base import ScorerSpec, scorers_at

__all__ = ["GIVES", "TASK_KINDS", "HeldOut", "Recommendation", "Suggestion", "recommend"]

Gives = Literal["none", "logprobs", "topk", "distribution", "hidden"]
TaskKind = Literal["short", "choice", "math", "long", "calls"]

#: What a model gives, from least to most: each level adds to the one before it.
GIVES: dict[str, frozenset[Need]] = {
    "none": frozenset(),
    "logprobs": frozenset({Need.TOKEN_LOGPROBS}),
    "topk": frozenset({Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS, Need.TOKEN_ENTROPIES}),
    "distribution": frozenset({Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS, Need.TOKEN_ENTROPIES,
                               *FULL_DISTRIBUTION, Need.UNCONDITIONED_LOGPROBS,
                               Need.ATTENTIONS, Need.CHOICE_LOGLIKELIHOODS}),
    "hidden": frozenset({Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS, Need.TOKEN_ENTROPIES,
                         *FULL_DISTRIBUTION, Need.UNCONDITIONED_LOGPROBS, Need.ATTENTIONS,
                         Need.CHOICE_LOGLIKELIHOODS, Need.HIDDEN_STATES}),
}

#: The quality table's tasks that stand for each kind of task.
TASK_KINDS: dict[str, tuple[str, ...]] = {
    "short": ("triviaqa", "truthfulqa"),
    "choice": ("arc_easy", "commonsense_qa", "boolq", "mmlu"),
    "math": ("gsm8k",),
    "long": (),
    "calls": ("bfcl",),
}

EVIDENCE = Path(__file__).with_name("quality.json")
MIN_COVERAGE = 0.5  # a scorer valued on fewer of the user's items is left out, with why


@dataclass
class Suggestion:
    """One proposed scorer and the evidence for it.

    ``evidence``: one entry per quality-table piece of the task kind (task, model, items,
    AUROC ``[point, low, high]``, rank of how many, beats the length baseline, and
    whether that lead vanishes within answer-length strata). ``mean_rank``: over those
    pieces (None without evidence).
    """

    name: str
    summary: str
    needs: list[str]
    cost: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    mean_rank: float | None = None

    @property
    def beats_length(self) -> bool:
        """On every piece it was measured on, a higher AUROC than answer length that does
        not vanish within length strata."""
        return bool(self.evidence) and all(
            e["beats_length"] and not e["lead_vanishes_within_lengths"] for e in self.evidence)


@dataclass
class HeldOut:
    """A choice made on the user's own labelled answers, out of fold.

    Per fold: the candidate with the best AUROC on the training folds (on the items every
    candidate scored), and its AUROC on the held-out fold; the same for the length
    baseline. ``chosen`` counts how often each scorer was chosen.
    """

    n_items: int
    n_right: int
    folds: int
    chosen: dict[str, int]
    held_out_auroc: float
    held_out_auroc_per_fold: list[float]
    length_auroc: float
    left_out: dict[str, str] = field(default_factory=dict)

    @property
    def final_choice(self) -> str:
        """The scorer chosen most often (ties: the first by name)."""
        return sorted(self.chosen.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


@dataclass
class Recommendation:
    """The proposed scorers, best evidence first, what was left out and why, and notes."""

    gives: str
    samples: int
    task: str
    scorers: list[Suggestion]
    left_out: dict[str, str]
    notes: list[str]
    held_out: HeldOut | None = None


@cache
def _evidence(path: str) -> dict[str, Any]:
    return dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _capabilities(gives: str, samples: int) -> frozenset[Need]:
    if gives not in GIVES:
        raise InvalidInputError(f"gives must be one of {', '.join(GIVES)}, not {gives!r}",
                                field="gives")
    have = set(GIVES[gives]) | {Need.EXTRA_PROMPT}  # any live model can be asked again
    if samples >= 2:
        have.add(Need.SAMPLES)
    return frozenset(have)


def _why_not(spec: ScorerSpec, have: frozenset[Need], samples: int,
             live: bool) -> str | None:
    if Need.TRAINING in spec.needs:
        return "fitted on labelled answers first (confide fit): not in the quality table"
    if not live and spec.needs & (MODEL_PASSES | {Need.EXTRA_PROMPT}):
        return "asks the model again, and the model cannot be called (live=False)"
    if Need.SAMPLES in spec.needs and samples < 2:
        return f"needs sampled answers; the budget is {samples}"
    why = skip_reason(spec, have)
    return None if why is None else why.replace("backend cannot give", "the model does not give")


def _piece_evidence(name: str, pieces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in pieces:
        for s in p["scorers"]:
            if s["scorer"] == name:
                out.append({"task": p["task"], "model": p["model"], "items": p["items"],
                            "auroc": s["auroc"], "rank": s["rank"],
                            "of": len(p["scorers"]), "beats_length": s.get("beats_length"),
                            "lead_vanishes_within_lengths":
                                s.get("lead_vanishes_within_lengths")})
    return out


def recommend(*, gives: Gives = "topk", samples: int = 0, task: TaskKind = "short",
              records: Sequence[Record] | None = None, grader: str | None = None,
              live: bool = True, top: int = 5, evidence: str | Path | None = None
              ) -> Recommendation:
    """Propose a short list of scorers for a model, a sampling budget and a kind of task.

    Parameters
    ----------
    gives : {"none", "logprobs", "topk", "distribution", "hidden"}
        What the model's answers carry: text only; the chosen tokens' log-probabilities;
        the top-k alternatives too (an OpenAI-compatible API); the whole next-token
        distribution (a local model); hidden states as well.
    samples : int
        How many sampled answers per question the budget allows (0: none; scorers that
        need samples need at least 2).
    task : {"short", "choice", "math", "long", "calls"}
        Short factual answers, multiple choice, math, long-form answers, function calls.
    records : graded records, optional
        The user's own labelled answers (a run's records): the choice is then also made
        out of fold on them (:class:`HeldOut`).
    grader : str, optional
        The grade of ``records`` to read (default: the first grade each record has).
    live : bool, default True
        Whether the model can be called again (second prompts, extra passes).
    top : int, default 5
        How many scorers to propose.

    Returns
    -------
    Recommendation
        ``scorers`` best first (by mean AUROC rank over the matching ranked pieces; those
        without evidence after, by cost), ``left_out`` with the reason per scorer, and
        ``notes``, which say plainly when no proposed scorer beats the length baseline.
    """
    if task not in TASK_KINDS:
        raise InvalidInputError(f"task must be one of {', '.join(TASK_KINDS)}, not {task!r}",
                                field="task")
    samples = int(samples)
    if samples < 0:
        raise InvalidInputError(f"samples must be 0 or more, not {samples}", field="samples")
    have = _capabilities(gives, samples)
    data = _evidence(str(evidence or EVIDENCE))
    pieces = [p for p in data["pieces"] if p["task"] in TASK_KINDS[task]]
    ranked = [p for p in pieces if p["status"] == "ranked"]
    notes = []
    if not pieces:
        notes.append(f"the quality table has no {task!r} task: the list below is ordered by "
                     "cost only, with no measured evidence")
    elif not ranked:
        notes.append(f"no {task!r} piece of the quality table ranks scorers ("
                     + "; ".join(f"{p['task']}×{p['model']}: {p['status']}" for p in pieces)
                     + "): the list below is ordered by cost only")
    candidates, left_out = [], {}
    for spec in scorers_at("answer"):
        why = _why_not(spec, have, samples, live)
        if why is None:
            candidates.append(spec)
        else:
            left_out[spec.name] = why
    suggestions = []
    for spec in candidates:
        found = _piece_evidence(spec.name, ranked)
        suggestions.append(Suggestion(
            spec.name, spec.summary, sorted(n.value for n in spec.needs), spec.cost.value,
            found, float(np.mean([e["rank"] for e in found])) if found else None))
    cost_order = {c: i for i, c in enumerate(("free", "features", "samples", "model_calls"))}
    suggestions.sort(key=lambda s: (s.mean_rank is None, s.mean_rank or 0.0,
                                    cost_order.get(s.cost, 9), s.name))
    chosen = [s for s in suggestions if s.name != "length"][:max(1, top)]
    measured = [s for s in chosen if s.evidence]
    if measured and not any(s.beats_length for s in measured):
        notes.append("no proposed scorer beats the length baseline on every piece it was "
                     "measured on (a higher AUROC than answer length that survives within "
                     "length strata): answer length alone does as well here")
    held = None
    if records is not None:
        held = _held_out([s.name for s in suggestions], records, grader)
        if held.held_out_auroc <= held.length_auroc:
            notes.append(f"on your {held.n_items} answers the scorer chosen out of fold "
                         f"reaches a held-out AUROC of {held.held_out_auroc:.3f}, no better "
                         f"than answer length ({held.length_auroc:.3f})")
    return Recommendation(gives, samples, task, chosen, left_out, notes, held)


def _held_out(names: list[str], records: Sequence[Record], grader: str | None) -> HeldOut:
    graded = [r for r in records if r.grades and (grader is None or grader in r.grades)]
    if not graded:
        raise InvalidInputError("the records have no grades"
                                + (f" from grader {grader!r}" if grader else "")
                                + ": grade or label them first (confide label)",
                                field="records")
    key = grader or next(iter(graded[0].grades))
    correct = np.array([r.grades.get(key, math.nan) >= 0.5 for r in graded], dtype=float)
    left_out: dict[str, str] = {}
    table = {}
    for name in [*names, "length"]:
        values = np.array([r.scores.get(name, math.nan) for r in graded], dtype=float)
        coverage = float(np.isfinite(values).mean())
        if coverage < MIN_COVERAGE:
            left_out[name] = (f"valued on {coverage:.0%} of your answers (below "
                              f"{MIN_COVERAGE:.0%})" if coverage else "not in your records")
        else:
            table[name] = values
    if "length" not in table:
        raise InvalidInputError("your records have no 'length' score: score them with "
                                "confide's default scorers first", field="records")
    common = np.all(np.isfinite(np.vstack(list(table.values()))), axis=0)
    y = correct[common]
    splits = crossfit_splits(y)
    chosen: dict[str, int] = {}
    per_fold, length_fold = [], []
    names_in = [n for n in table if n != "length"]
    if not names_in:
        raise InvalidInputError("none of the proposed scorers is valued on your records: "
                                "score them with those scorers first", field="records")
    for train, test in splits:
        best = max(names_in, key=lambda n: (auroc_score(table[n][common][train], y[train]),
                                            n))
        chosen[best] = chosen.get(best, 0) + 1
        per_fold.append(auroc_score(table[best][common][test], y[test]))
        length_fold.append(auroc_score(table["length"][common][test], y[test]))
    return HeldOut(int(common.sum()), int(y.sum()), len(splits), chosen,
                   float(np.mean(per_fold)), [float(v) for v in per_fold],
                   float(np.mean(length_fold)), left_out)
