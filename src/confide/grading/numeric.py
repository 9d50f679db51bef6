"""The numeric grader: the answer's final number against the references' numbers."""

from __future__ import annotations

from confide.core.errors import InvalidInputError
from confide.core.records import Item
from confide.grading.base import grader, references
from confide.text import extract_final_number

__all__ = ["numeric"]


@grader("numeric")
def numeric(answer: str, item: Item, *, tolerance: float = 1e-6,
            rel_tolerance: float = 0.0) -> float:
    r"""Final-number match: 1 if the answer's final number equals a reference number.

    .. math:: g = \max_{r} \mathbb{1}\big[|x_a - x_r| \le \max(\tau, \rho\,|x_r|)\big]

    with :math:`x_a` the answer's final number (:func:`extract_final_number`),
    :math:`x_r` each reference's number, :math:`\tau` = ``tolerance`` and
    :math:`\rho` = ``rel_tolerance``.

    Parameters
    ----------
    answer : str
        The model's answer, possibly a worked solution.
    item : Item
        Its ``references`` are numbers written as text (``"18"``, ``"1,000"``).
    tolerance : float, default 1e-6
        Absolute tolerance.
    rel_tolerance : float, default 0.0
        Relative tolerance.

    Returns
    -------
    float
        1.0 or 0.0; an answer without any number scores 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references, a reference holds no number, or a
        tolerance is negative.

    Notes
    -----
    Not measured against human labels (the EVOUNA set holds no numeric
    tasks); checked by hand-made cases and by grading every bundled GSM8K
    worked solution against its own final answer (all correct;
    ``pytest tests/test_tasks.py -k gsm8k``).

    References
    ----------
    [1] Cobbe et al. (2021), "Training Verifiers to Solve Math Word Problems"
        (GSM8K; final answer after ``####``), arXiv:2110.14168.

    Examples
    --------
    >>> numeric("So she makes $18 per day.", Item("q", "?", ["18"]))
    1.0
    >>> numeric("The answer is 1,000 km", Item("q", "?", ["1000"]))
    1.0
    >>> numeric("#### 17", Item("q", "?", ["18"]))
    0.0
    """
    if tolerance < 0 or rel_tolerance < 0:
        raise InvalidInputError("tolerances must be non-negative", field="tolerance")
    targets = []
    for ref in references(item):
        x = extract_final_number(ref)
        if x is None:
            raise InvalidInputError(f"item {item.id!r}: reference {ref!r} holds no number",
                                    field="references")
        targets.append(x)
    x_a = extract_final_number(answer)
    if x_a is None:
        return 0.0
    return float(any(abs(x_a - x) <= max(tolerance, rel_tolerance * abs(x)) for x in targets))

