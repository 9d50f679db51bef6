"""The function-call grader (BFCL AST evaluation): parsed calls against allowed values."""

from __future__ import annotations

import json
import math
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.records import Item
from confide.grading.base import grader, references
from confide.text import Call, parse_function_calls

__all__ = ["ast_match"]


_STRING_DROP = str.maketrans("", "", " ,./-_*^")


def _value_matches(value: Any, allowed: Any) -> bool:
    if isinstance(allowed, bool) or isinstance(value, bool):
        return type(allowed) is type(value) and allowed == value
    if isinstance(allowed, (int, float)):
        return isinstance(value, (int, float)) and math.isclose(value, allowed, rel_tol=1e-9,
                                                                abs_tol=1e-9)
    if isinstance(allowed, str):
        return isinstance(value, str) and (value.casefold().translate(_STRING_DROP)
                                           == allowed.casefold().translate(_STRING_DROP))
    if isinstance(allowed, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(allowed)
                and all(_value_matches(v, a) for v, a in zip(value, allowed)))
    if isinstance(allowed, dict):
        if not isinstance(value, dict):
            return False
        if allowed and all(isinstance(v, list) for v in allowed.values()):
            return _args_match(value, allowed)  # nested {key: [allowed values]}
        return set(value) == set(allowed) and all(_value_matches(value[k], allowed[k])
                                                  for k in allowed)
    return bool(value == allowed)


def _args_match(args: dict[str, Any], spec: dict[str, list[Any]]) -> bool:
    if set(args) - set(spec):
        return False  # an argument the ground truth does not know
    for key, allowed in spec.items():
        if key not in args:
            # "" marks an optional argument; null (the default) or no allowed value
            # at all can only be met by leaving the argument out
            if allowed and "" not in allowed and None not in allowed:
                return False
        elif not any(_value_matches(args[key], a) for a in allowed if a != ""
                     ) and not (args[key] == "" and "" in allowed):
            return False
    return True


def _calls_match(calls: list[Call], truth: list[dict[str, dict[str, list[Any]]]]) -> bool:
    if len(calls) != len(truth):
        return False
    specs = [next(iter(t.items())) for t in truth]

    def assign(i: int, used: frozenset[int]) -> bool:  # order-free bijection
        if i == len(calls):
            return True
        name, args = calls[i]
        return any(j not in used and specs[j][0] == name and _args_match(args, specs[j][1])
                   and assign(i + 1, used | {j}) for j in range(len(specs)))

    return assign(0, frozenset())


@grader("ast")
def ast_match(answer: str, item: Item) -> float:
    r"""Function-call match (BFCL AST style): every call's name and arguments are allowed.

    .. math:: g = \mathbb{1}\big[\exists\ \text{bijection } \pi:\ \text{calls} \to
              \text{truth},\ \forall i:\ \mathrm{name}_i = \mathrm{name}_{\pi(i)}
              \wedge \mathrm{args}_i \models \mathrm{allowed}_{\pi(i)}\big]

    A call's arguments satisfy the allowed values when it has no argument the
    ground truth does not list, every argument it gives matches one allowed
    value, and every argument it omits is optional (``""`` or ``null`` among
    its allowed values, or an empty list of allowed values). Strings match
    case-insensitively ignoring spaces and ``,./-_*^``
    (as BFCL does); numbers match numerically (an int is accepted for a
    float); lists element-wise; nested objects recursively. Parallel calls
    match in any order.

    Parameters
    ----------
    answer : str
        The model's reply, parsed by :func:`parse_function_calls`.
    item : Item
        ``metadata["ground_truth"]`` (or ``references[0]`` as JSON) is a list
        ``[{func_name: {arg: [allowed values]}}]``; an empty list means no
        call should be made. ``metadata["tools"]`` (optional) maps
        positional arguments.

    Returns
    -------
    float
        1.0 or 0.0; a malformed call scores 0.0.

    Raises
    ------
    InvalidInputError
        The item has no references, or its ground truth is not in the form above.

    Notes
    -----
    Not measured against human labels. Every one of the 2,351 BFCL v4
    ground truths in the shared data, written back as a JSON call and as a
    Python call, grades 1.0 (``CONFIDE_DATA_DIR=<data folder> pytest
    tests/test_tasks.py -k bfcl_full``).

    References
    ----------
    [1] Patil et al. (2025), "The Berkeley Function Calling Leaderboard (BFCL):
        From Tool Use to Agentic Evaluation of Large Language Models", ICML —
        AST evaluation.

    Examples
    --------
    >>> it = Item("q", "?", ['[{"area": {"r": [2, 2.0], "unit": ["cm", ""]}}]'])
    >>> ast_match('area(r=2)', it), ast_match('area(r=3)', it), ast_match('area(r=2', it)
    (1.0, 0.0, 0.0)
    """
    refs = references(item)
    truth = item.metadata.get("ground_truth")
    if truth is None:
        try:
            truth = json.loads(refs[0])
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"item {item.id!r}: reference is not JSON ground truth",
                                    field="references") from exc
    if not (isinstance(truth, list) and all(
            isinstance(t, dict) and len(t) == 1 and isinstance(next(iter(t.values())), dict)
            for t in truth)):
        raise InvalidInputError(f"item {item.id!r}: ground truth must be "
                                "[{func_name: {arg: [allowed values]}}]", field="ground_truth")
    calls = parse_function_calls(answer, item.metadata.get("tools"))
    if not truth:
        return float(not calls)
    if calls is None:
        return 0.0
    return float(_calls_match(calls, truth))

