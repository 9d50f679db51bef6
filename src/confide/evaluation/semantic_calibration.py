"""Semantic calibration: is the greedy answer's cluster frequency a probability of being right?"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Record
from confide.equivalence.judges import Judge, make_judge
from confide.metrics.calibration import calibration_error
from confide.scorers import ScoringContext
from confide.scorers.semantic import agreement

__all__ = ["semantic_calibration_error"]


def semantic_calibration_error(records: Sequence[Record], *, grader: str | None = None,
                               judge: str | Judge = "exact", n_bins: int = 10,
                               **judge_options: Any) -> float:
    r"""Calibration error of the greedy answer's cluster frequency as P(correct).

    .. math:: \hat p_n = \frac{1}{k}\sum_{i=1}^{k}\mathbb 1[s_{n,i} \in C(y^*_n)], \qquad
              \mathrm{ECE} = \sum_{b=1}^{B} \frac{|S_b|}{N}\,
              \Big|\overline{g}_{S_b} - \overline{\hat p}_{S_b}\Big|

    :math:`\hat p_n` is the ``agreement`` scorer for record :math:`n` (clusters
    from ``judge``) and :math:`g_n` its grade; the ECE is
    :func:`~confide.metrics.calibration_error` with ``n_bins`` equal-width bins.
    (An evaluation over records, so not in :mod:`confide.metrics`, which takes arrays only.)

    Parameters
    ----------
    records : stored records with samples and grades
    grader : str, optional
        Which stored grade to use; default: the only grader of the records.
    judge : str or Judge, default "exact"
    n_bins : int, default 10

    Returns
    -------
    float in [0, 1]; lower is better.

    Raises
    ------
    InvalidInputError
        No records, a record without samples or without the grade, or an
        ambiguous grader.

    References
    ----------
    [1] Seed 000 / "Trained on Tokens, Calibrated on Concepts: The Emergence
        of Semantic Calibration in LLMs" (semantic calibration of sampled
        answers' cluster frequencies).
    [2] Guo et al., 2017, "On Calibration of Modern Neural Networks", ICML (ECE).
    """
    if not records:
        raise InvalidInputError("no records to measure", field="records")
    if grader is None:
        names = sorted({g for r in records for g in r.grades})
        if len(names) != 1:
            raise InvalidInputError(f"name one grader of {names}", field="grader")
        grader = names[0]
    judge_obj = judge if isinstance(judge, Judge) else make_judge(judge, **judge_options)
    ctx = ScoringContext(judge=judge_obj)
    probability, correct = [], []
    for r in records:
        if not r.samples:
            raise InvalidInputError(f"record {r.item.id!r} has no samples", field="samples")
        if grader not in r.grades:
            raise InvalidInputError(f"record {r.item.id!r} has no {grader!r} grade",
                                    field="grades")
        probability.append(agreement(r, ctx))
        correct.append(r.grades[grader])
    return calibration_error(probability, correct, n_bins=n_bins)
