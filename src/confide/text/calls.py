"""Function calls read out of a model's answer, and their canonical form.

:func:`parse_function_calls` reads JSON or Python call syntax;
:func:`canonical_calls` normalises parsed calls against the tool schemas so
that equal strings mean the same calls. The ``ast`` grader matches parsed
calls against BFCL ground truth; the ``ast`` equivalence judge clusters
sampled calls by their canonical form.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from confide.text.normalize import collapse_whitespace

__all__ = ["Call", "canonical_calls", "parse_function_calls"]

Call = tuple[str, dict[str, Any]]
_FENCE = re.compile(r"```(?:[\w-]*)\s*\n?(.*?)```", re.S)


class _Unparsable(Exception):
    pass


def _calls_from_json(obj: Any) -> list[Call]:
    if isinstance(obj, list):
        return [c for o in obj for c in _calls_from_json(o)]
    if not isinstance(obj, dict):
        raise _Unparsable("not a call")
    if "tool_calls" in obj and isinstance(obj["tool_calls"], list):
        return _calls_from_json(obj["tool_calls"])
    if "function" in obj and isinstance(obj["function"], dict):
        return _calls_from_json(obj["function"])
    if "name" in obj and isinstance(obj["name"], str):
        args: Any = next((obj[k] for k in ("arguments", "parameters", "args") if k in obj), {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError as exc:
                raise _Unparsable("arguments are not JSON") from exc
        if not isinstance(args, dict):
            raise _Unparsable("arguments are not an object")
        return [(obj["name"], args)]
    if len(obj) == 1:  # BFCL ground-truth style {"func": {"arg": value}}
        (name, args), = obj.items()
        if isinstance(args, dict):
            return [(name, args)]
    raise _Unparsable("not a call")


def _dotted_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise _Unparsable("call target is not a name")


def _calls_from_python(text: str, tools: list[dict[str, Any]]) -> list[Call]:
    try:
        tree = ast.parse(text.strip())
    except SyntaxError as exc:
        raise _Unparsable(str(exc)) from exc
    nodes: list[ast.expr] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr):
            raise _Unparsable("not an expression")
        value = stmt.value
        nodes.extend(value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value])
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise _Unparsable("not a call")
        name = _dotted_name(node.func)
        try:
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords
                    if kw.arg is not None}
            positional = [ast.literal_eval(a) for a in node.args]
        except ValueError as exc:
            raise _Unparsable("argument is not a literal") from exc
        if len(args) != len(node.keywords):
            raise _Unparsable("**kwargs in call")
        if positional:  # map by the schema's parameter order
            schema = next((t for t in tools if t.get("name") == name), None)
            order = list((schema or {}).get("parameters", {}).get("properties", {}))
            if len(positional) > len(order):
                raise _Unparsable("positional arguments without a schema")
            for key, value in zip(order, positional):
                if key in args:
                    raise _Unparsable(f"argument {key!r} given twice")
                args[key] = value
        calls.append((name, args))
    return calls


def parse_function_calls(text: str, tools: list[dict[str, Any]] | None = None
                         ) -> list[Call] | None:
    """Parse function calls from a model's answer; ``None`` if the answer holds none.

    Accepted forms (inside a Markdown code fence or not): JSON — one call or a
    list of calls as ``{"name": f, "arguments": {...}}`` (``arguments`` may be
    a JSON string; ``parameters``/``args`` are synonyms), OpenAI
    ``{"function": {...}}`` / ``{"tool_calls": [...]}``, or BFCL
    ``{f: {...}}`` — or Python — ``f(a=1)``, ``[f(a=1), g(b="x")]``, one call
    per line; positional arguments are mapped by the schema's parameter
    order when ``tools`` are given.

    Examples
    --------
    >>> parse_function_calls('[{"name": "area", "arguments": {"r": 2}}]')
    [('area', {'r': 2})]
    >>> parse_function_calls("math.factorial(number=5)")
    [('math.factorial', {'number': 5})]
    >>> parse_function_calls("I cannot help with that.") is None
    True
    """
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for cand in candidates:
        cand = cand.strip()
        if not cand:
            continue
        try:
            return _calls_from_json(json.loads(cand))
        except (json.JSONDecodeError, _Unparsable):
            pass
        try:
            return _calls_from_python(cand, tools or [])
        except _Unparsable:
            pass
        start = min((i for i in (cand.find("["), cand.find("{")) if i >= 0), default=-1)
        end = max(cand.rfind("]"), cand.rfind("}"))
        if 0 <= start < end:
            try:
                return _calls_from_json(json.loads(cand[start:end + 1]))
            except (json.JSONDecodeError, _Unparsable):
                pass
    return None


def _tool_properties(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    for tool in tools or []:
        if isinstance(tool, dict) and tool.get("name") == name:
            params = tool.get("parameters") or {}
            props = params.get("properties") if isinstance(params, dict) else None
            return props if isinstance(props, dict) else {}
    return {}


def _canonical_value(value: Any, schema: dict[str, Any] | None) -> Any:
    kind = (schema or {}).get("type")
    if isinstance(value, str):
        text = collapse_whitespace(value).casefold()
        if kind in ("integer", "float", "number"):
            try:
                value = float(text)
            except ValueError:
                return text
        elif kind == "boolean" and text in ("true", "false"):
            return text == "true"
        else:
            return text
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        if kind == "string":
            return collapse_whitespace(str(value)).casefold()
        number = float(value)
        if math.isfinite(number) and number == int(number):
            return int(number)  # 5, 5.0 and "5" for a number parameter are one value
        return number
    if isinstance(value, (list, tuple)):
        item_schema = (schema or {}).get("items")
        return [_canonical_value(v, item_schema if isinstance(item_schema, dict) else None)
                for v in value]
    if isinstance(value, dict):
        props = (schema or {}).get("properties")
        props = props if isinstance(props, dict) else {}
        return {str(k): _canonical_value(v, props.get(k)) for k, v in sorted(value.items())}
    return value


def canonical_calls(calls: list[tuple[str, dict[str, Any]]],
                    tools: list[dict[str, Any]] | None = None) -> str:
    r"""A canonical string for a list of function calls: equal strings, same calls.

    Normalisation, per call: arguments sorted by name; an argument the schema
    gives a ``default`` for is filled in when omitted (so omitting it and
    passing its default are the same call); values are normalised by the
    schema's type (``integer``/``float``/``number``: ``5``, ``5.0`` and
    ``"5"`` are one value; ``boolean``: ``"true"`` is ``True``; ``string``:
    case-folded, whitespace collapsed); nested lists and objects recursively.
    Parallel calls are sorted, so their order does not matter.

    >>> tools = [{"name": "area", "parameters": {"properties": {
    ...     "r": {"type": "float"}, "unit": {"type": "string", "default": "cm"}}}}]
    >>> canonical_calls([("area", {"unit": "CM", "r": 2})], tools) == \
    ...     canonical_calls([("area", {"r": 2.0})], tools)
    True
    """
    out = []
    for name, args in calls:
        props = _tool_properties(tools, name)
        filled = dict(args)
        for arg, schema in props.items():
            if isinstance(schema, dict) and "default" in schema and arg not in filled:
                filled[arg] = schema["default"]
        canon = {str(k): _canonical_value(v, props.get(k) if isinstance(props.get(k), dict)
                                          else None)
                 for k, v in filled.items()}
        out.append(json.dumps([name, canon], sort_keys=True, ensure_ascii=False))
    return json.dumps(sorted(out), ensure_ascii=False)

