"""Which characters of a function-calling answer carry its meaning: names and values.

:func:`meaningful_spans` finds the function names and argument values of the
calls in an answer (JSON or Python call syntax, fenced or not), for the
``meaningful_logprob`` scorer (:mod:`confide.scorers.semantic`).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable
from typing import Any

__all__ = ["meaningful_spans"]


def _char_offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _to_char(text: str, starts: list[int], lineno: int, byte_col: int) -> int:
    line_start = starts[lineno - 1]
    line = text[line_start:starts[lineno] if lineno < len(starts) else len(text)]
    return line_start + len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def _leaf_spans(node: ast.AST, span: Any) -> Iterable[tuple[int, int]]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for elt in node.elts:
            yield from _leaf_spans(elt, span)
    elif isinstance(node, ast.Dict):
        for value in node.values:  # keys of nested objects are names, not values
            if value is not None:
                yield from _leaf_spans(value, span)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        start, end = span(node)
        yield start + 1, end - 1  # without the quotes
    else:
        yield span(node)


def _calls_spans(tree: ast.Expression, span: Any) -> list[tuple[int, int]]:
    body = tree.body
    elements = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    out: list[tuple[int, int]] = []
    for el in elements:
        if isinstance(el, ast.Call):
            out.append(span(el.func))
            for arg in [*el.args, *(kw.value for kw in el.keywords)]:
                out.extend(_leaf_spans(arg, span))
        elif isinstance(el, ast.Dict):
            fields = {k.value: v for k, v in zip(el.keys, el.values)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            name = fields.get("name")
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                return []
            out.extend(_leaf_spans(name, span))
            args = next((fields[k] for k in ("arguments", "parameters", "args") if k in fields),
                        None)
            if isinstance(args, ast.Dict):
                for value in args.values:
                    out.extend(_leaf_spans(value, span))
            elif args is not None:
                out.extend(_leaf_spans(args, span))
        else:
            return []
    return out


_FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)```", re.S)


def meaningful_spans(text: str) -> list[tuple[int, int]] | None:
    """Character spans of the function names and argument values of the calls in ``text``.

    JSON (``[{"name": f, "arguments": {...}}]``) or Python call syntax
    (``f(a=1)``), inside a code fence or not. String values are spanned
    without their quotes; argument names, keys and punctuation are left out.
    ``None`` if no call parses.

    >>> text = '[{"name": "area", "arguments": {"r": 2}}]'
    >>> [text[a:b] for a, b in meaningful_spans(text)]
    ['area', '2']
    >>> text = "f(x='a b', y=[1, -2])"
    >>> [text[a:b] for a, b in meaningful_spans(text)]
    ['f', 'a b', '1', '-2']
    """
    if "(" not in text and "{" not in text:  # no call and no object: nothing can parse to one
        return None
    candidates = [(m.start(1), m.group(1)) for m in _FENCE.finditer(text)] + [(0, text)]
    begin = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    end = max(text.rfind("]"), text.rfind("}"))
    if 0 <= begin < end:
        candidates.append((begin, text[begin:end + 1]))
    for offset, cand in candidates:
        lead = len(cand) - len(cand.lstrip())
        body = cand.strip()
        if not body:
            continue
        source = re.sub(r"\btrue\b|\bfalse\b|\bnull\b", lambda m: {
            "true": "True", "false": "False", "null": "None"}[m.group()], body)
        if len(source) != len(body):  # pragma: no cover - replacements keep lengths
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)  # JSON escapes like "\/"
                tree = ast.parse(source, mode="eval")
        except SyntaxError:
            continue
        starts = _char_offsets(body)

        def span(node: Any, body: str = body, starts: list[int] = starts,
                 base: int = offset + lead) -> tuple[int, int]:
            return (base + _to_char(body, starts, node.lineno, node.col_offset),
                    base + _to_char(body, starts, node.end_lineno, node.end_col_offset))

        spans = _calls_spans(tree, span)
        if spans:
            return spans
    return None
