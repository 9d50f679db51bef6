"""Reading confidences and grades out of stored runs, with errors that say what is there."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from confide.core.errors import InvalidInputError
from confide.equivalence.judges import default_judge, make_judge
from confide.runs.stored import Run, open_run

if TYPE_CHECKING:
    from confide.core.records import Record

__all__ = ["RunColumn", "as_run", "run_column", "sampled_records"]


def as_run(run: Run | str | Path) -> Run:
    """A :class:`~confide.runs.stored.Run` from a run or its directory."""
    if isinstance(run, Run):
        return run
    path = Path(run)
    if not (path / "run.sqlite").is_file():
        raise InvalidInputError("not a run directory (no run.sqlite)", file=str(path))
    return open_run(path)


@dataclass(frozen=True)
class RunColumn:
    """One scorer's confidences and one grader's correctness over the graded records."""

    ids: list[str]
    confidence: NDArray[np.float64]
    correct: NDArray[np.float64]
    scorer: str
    grader: str
    n_missing: int  # graded records whose confidence is NaN (dropped)
    source: str


def _scorers(records: list[Record]) -> list[str]:
    return sorted({name for r in records for name in r.scores})


def run_column(run: Run | str | Path, scorer: str, grader: str | None = None) -> RunColumn:
    """The graded records of ``run`` with a value for ``scorer``; NaN confidences dropped."""
    run = as_run(run)
    records = run.records
    grader = grader or run.grader
    where = str(run.path)
    if not records:
        raise InvalidInputError("the run holds no records", file=where)
    if not any(scorer in r.scores for r in records):
        raise InvalidInputError(f"no record has scorer {scorer!r}; the run has: "
                                f"{', '.join(_scorers(records)) or 'none'}", file=where,
                                field="scorer")
    graded = [r for r in records if grader in r.grades]
    if not graded:
        graders = sorted({g for r in records for g in r.grades})
        raise InvalidInputError(f"no record is graded by {grader!r}; the run has: "
                                f"{', '.join(graders) or 'no grades'}", file=where,
                                field="grader")
    values = [r.scores.get(scorer, math.nan) for r in graded]
    keep = [i for i, v in enumerate(values) if not math.isnan(v)]
    return RunColumn(ids=[graded[i].item.id for i in keep],
                     confidence=np.asarray([values[i] for i in keep], dtype=np.float64),
                     correct=np.asarray([graded[i].grades[grader] for i in keep],
                                        dtype=np.float64),
                     scorer=scorer, grader=grader, n_missing=len(graded) - len(keep),
                     source=where)


def sampled_records(run: Run | str | Path, grader: str | None, judge: str | None
                    ) -> tuple[Run, str, str, Any, list[Record]]:
    """The run, its grader, the judge's name, the judge, and the graded records with samples."""
    run = as_run(run)
    grader = grader or run.grader
    judge_name = judge or run.config.get("judge") or default_judge(grader)
    equiv = make_judge(judge_name)
    usable = [r for r in run.records if r.samples and grader in r.grades]
    if not usable:
        raise InvalidInputError("no graded record has samples; run with n_samples "
                                "(confide run --samples K)", file=str(run.path), field="samples")
    return run, grader, judge_name, equiv, usable
