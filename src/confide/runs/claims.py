"""The claim stage of a long-form run: split, score and grade each stored answer's claims.

It reads the records a run stored and writes each one back with its claims
(:meth:`~confide.store.run_store.RunStore.replace`, one transaction per record), so it
resumes after a kill with the same command and redoes only the records not
done; the claim settings are stored with the run, and resuming with other
settings is refused with the list of differences. Like grading again or adding
a scorer, it never regenerates an answer.

Per record: :func:`~confide.scorers.claim_split.split_claims`, every claim-level scorer
(:func:`~confide.scorers.run_scorer` with the claims), the answer-level
aggregates into ``record.scores`` (:func:`~confide.scorers.claims.aggregate_claims`),
then the claim grades and the answer grade ``claims``
(:func:`~confide.grading.claims.grade_claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from confide.backends import Backend, load_backend
from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.options import check_choice, check_option
from confide.core.records import Record
from confide.equivalence.judges import JUDGES, Judge, default_judge, make_judge
from confide.grading import GRADERS
from confide.grading.claims import LABELS, grade_claims
from confide.scorers import ScoringContext, run_scorer, scorer_at
from confide.scorers.claim_split import split_claims
from confide.scorers.claims import DEFAULT_CLAIM_SCORERS, aggregate_claims
from confide.store.run_store import RunStore, config_differences

__all__ = ["ClaimConfig", "ClaimOutcome", "add_claims", "claim_record"]

_META = "claims_config"
AUTO = "auto"


@dataclass(frozen=True)
class ClaimConfig:
    """How a long answer's claims are found, scored, graded and acted on.

    ``grader``: a registered grader for each claim (``judge`` is the LLM
    judge), ``"labels"`` for the data file's per-claim labels, None (score
    only), or ``"auto"`` (default): ``labels`` when the run's data file has
    claim labels, else ``judge``. ``refine_scorer``, ``threshold`` and ``action`` drive
    :func:`~confide.decisions.refining.refine` in ``confide run --long-form``
    (default: the first claim scorer; the threshold is a calibrated
    probability). ``judge`` overrides the run's equivalence judge for the
    claim scorers and label matching.
    """

    splitter: str = "sentences"
    scorers: tuple[str, ...] = DEFAULT_CLAIM_SCORERS
    grader: str | None = "auto"
    judge: str | None = None
    judge_options: dict[str, Any] = field(default_factory=dict)
    refine_scorer: str | None = None
    threshold: float = 0.5
    action: str = "drop"

    def __post_init__(self) -> None:
        check_choice("claim_splitter", self.splitter)
        check_choice("claim_action", self.action)
        check_option("claim_threshold", self.threshold)
        if not self.scorers:
            raise InvalidInputError("name at least one claim scorer", field="claim_scorers")
        for name in (*self.scorers, *([self.refine_scorer] if self.refine_scorer else [])):
            scorer_at(name, "claim")
        if self.refine_scorer is not None and self.refine_scorer not in self.scorers:
            raise InvalidInputError(f"{self.refine_scorer!r} is not among the claim scorers",
                                    field="refine_scorer")
        if self.grader not in (None, LABELS, AUTO):
            GRADERS[self.grader]
        if self.judge is not None:
            JUDGES[self.judge]

    @property
    def n_samples(self) -> int:
        """The most samples any of the claim scorers needs."""
        return max(scorer_at(s, "claim").n_samples for s in self.scorers)

    @property
    def scorer_for_refine(self) -> str:
        return self.refine_scorer or self.scorers[0]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["scorers"] = list(self.scorers)
        return d


def claim_record(record: Record, config: ClaimConfig, *, backend: Backend | None = None,
                 judge: Judge | None = None, seed: int = 0) -> Record:
    """Split, score and grade ``record``'s claims in place (and return it).

    ``config.grader == "auto"`` grades by the item's labels when it has them,
    else with the ``judge`` grader.
    ``judge`` defaults to ``config.judge`` or ``exact``; ``backend`` asks the
    model's questions (``claim_p_true``, the model splitter, the ``judge`` grader).
    """
    if judge is None:
        judge = make_judge(config.judge or "exact", backend=backend, **config.judge_options)
    record.claims = split_claims(record.greedy, splitter=config.splitter, backend=backend,
                                 question=record.item.question)
    ctx = ScoringContext(backend=backend, judge=judge, seed=seed)
    for name in config.scorers:
        results = run_scorer(scorer_at(name, "claim"), record, ctx, claims=record.claims)
        for claim, (value, reason) in zip(record.claims, results):
            claim.scores[name] = value
            if reason is not None:
                claim.score_errors[name] = reason
        if record.claims:
            record.scores.update(aggregate_claims(name, [v for v, _ in results]))
    grader = config.grader
    if grader == AUTO:
        grader = LABELS if record.item.metadata.get("claims") else "llm"
    if grader is not None:
        grade_claims(record, grader, backend=backend, judge=judge)
    return record


@dataclass
class ClaimOutcome:
    """What :func:`add_claims` did: records done now, already done, claims found, and the
    claim grader used (``"auto"`` resolved; None when claims are not graded)."""

    path: Path
    total: int
    done: int
    resumed: int
    n_claims: int
    grader: str | None = None


def add_claims(run: str | Path, config: ClaimConfig, *, backend: Backend | None = None,
               progress: Callable[[int, int], None] | None = None) -> ClaimOutcome:
    """Run the claim stage over a stored run (resumable; see the module notes).

    ``backend`` defaults to the run's own model, loaded only when a record is
    left to do. The equivalence judge is ``config.judge`` or the run's.
    """
    path = Path(run)
    with RunStore.open(path) as store:
        records = store.records()
        if config.grader == AUTO:
            labelled = any(r.item.metadata.get("claims") for r in records)
            config = replace(config, grader=LABELS if labelled else "llm")
        wanted = config.to_dict()
        stored = store.get_meta(_META)
        if stored is None:
            store.set_meta(_META, wanted)
        elif stored != wanted:
            raise ConfigMismatch(f"{path} holds claims made with other settings:\n  "
                                 + "\n  ".join(config_differences(stored, wanted)))
        todo = [r for r in records if r.claims is None]
        run_config = store.config or {}
        if todo and backend is None:
            backend = load_backend(run_config.get("backend", "hf"), run_config["model"])
        name = config.judge or run_config.get("judge") or default_judge(
            run_config.get("grader"))
        options = config.judge_options if config.judge else run_config.get("judge_options", {})
        judge = make_judge(name, backend=backend, **options) if todo else None
        seed = int(run_config.get("seed", 0))
        for n, record in enumerate(todo):
            claim_record(record, config, backend=backend, judge=judge, seed=seed)
            store.replace(record)
            if progress:
                progress(len(records) - len(todo) + n + 1, len(records))
        return ClaimOutcome(path, len(records), len(todo), len(records) - len(todo),
                            sum(len(r.claims or []) for r in records), config.grader)
