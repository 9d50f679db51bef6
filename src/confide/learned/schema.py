r"""What a ``confide fit`` file must hold, checked before anything is applied.

A fit file is plain JSON that users may keep, share and edit by hand.
:func:`check_file` checks one against what its kind needs, so that a file cut
short, a string where a number belongs or a combiner relabelled as a probe is
refused with :class:`~confide.core.errors.InvalidInputError` naming the file
and the field (``probe.json: params.coef: ...``), never met later as a
``ValueError``, ``TypeError`` or ``IndexError`` inside the maths:

* ``format`` is :data:`~confide.learned.model.FORMAT` (the schema version);
* ``kind`` is one the loader reads, and the file's shape is that kind's: a probe
  or lens reads one hidden-state key (``layer`` ``"<layer>:<pool>"``) and a lens
  the six :data:`~confide.learned.model.TOKEN_FEATURES`; a combiner reads named
  scorers (``features``) and no layer; a density model holds hidden states;
* ``params`` has the arrays its estimator needs, of numbers, finite, with the
  lengths that agree with each other and with the inputs (``logistic``:
  ``mean``, ``scale``, ``coef`` of one length, twice the inputs with missing
  indicators; ``boosting``: trees whose nodes point forwards to nodes that exist,
  so applying one always ends);
* ``training`` and ``oof`` name item ids and give finite scores;
* a probe or lens fitted on several runs (``multitask``) names its weighting (one of
  :data:`WEIGHTINGS`), two or more tasks of distinct names, each with its run, grader,
  counts, item ids and out-of-fold scores of those items, the learned log-variance
  :math:`s_t` within :data:`LOG_VARIANCE_BOUNDS` with :math:`\sigma_t = e^{s_t/2}` and
  weight :math:`e^{-s_t}` (``uncertainty``), or each task's own probe (``per-task``,
  checked as ``params`` is) and which one is applied.

What needs the run (its hidden-state width, the scorers its records hold, the
model that generated it) is checked when the file is applied
(:func:`confide.learned.apply_to_run`).
"""

from __future__ import annotations

import collections
import math
import re
from typing import Any

from confide.core.errors import InvalidInputError

__all__ = ["HIDDEN_KEY", "LOG_VARIANCE_BOUNDS", "TOKEN_FEATURES", "WEIGHTINGS", "check_file",
           "input_width"]

#: A hidden-state key: a layer index and a pooling (``8:mean``, ``-1:last``).
HIDDEN_KEY = re.compile(r"^-?\d+:(mean|last)$")
#: The token-probability features a lens reads (:func:`confide.learned.model.token_features`).
TOKEN_FEATURES = ("mean_logprob", "min_logprob", "mean_entropy", "max_entropy",
                  "mean_kl_uniform", "log_length")
#: How a probe fitted on several runs weighs their tasks (:mod:`confide.learned.multitask`).
WEIGHTINGS = ("equal", "uncertainty", "per-task")
#: Bounds of each learned log-variance :math:`s_t` (task weights within :math:`[e^{-4}, e^4]`).
LOG_VARIANCE_BOUNDS = (-4.0, 4.0)
_LINEAR = ("probe", "lens", "combiner")
_DENSITY = ("mahalanobis", "relative_mahalanobis", "huq")
_TREE_FIELDS = ("value", "feature_idx", "num_threshold", "missing_go_to_left", "left", "right",
                "is_leaf")


class _Check:
    """Raises the file's :class:`InvalidInputError` for one field."""

    def __init__(self, path: str, prefix: str = "") -> None:
        self.path, self.prefix = path, prefix  # prefix: where a nested model sits

    def fail(self, field: str, why: str) -> InvalidInputError:
        return InvalidInputError(f"{why}; this file was not written by `confide fit` as it "
                                 "is (edited or cut short?): fit the model again",
                                 file=self.path, field=self.prefix + field)

    def mapping(self, data: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
        value = data.get(key)
        if not isinstance(value, dict):
            raise self.fail(prefix + key, f"expected an object, got {_what(value)}")
        return value

    def number(self, value: Any, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"expected a number, got {_what(value)}")
        if not math.isfinite(value):
            raise self.fail(field, f"expected a finite number, got {value}")
        return float(value)

    def integer(self, value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, f"expected an integer, got {_what(value)}")
        return value

    def numbers(self, value: Any, field: str, length: int | None = None) -> list[float]:
        if not isinstance(value, list):
            raise self.fail(field, f"expected a list of numbers, got {_what(value)}")
        if length is not None and len(value) != length:
            raise self.fail(field, f"expected {length} numbers, got {len(value)}")
        return [self.number(v, f"{field}[{i}]") for i, v in enumerate(value)]

    def matrix(self, value: Any, field: str, *, min_rows: int) -> int:
        """A list of equally long lists of numbers; returns the row length."""
        if not isinstance(value, list) or len(value) < min_rows:
            got = f"{len(value)} rows" if isinstance(value, list) else _what(value)
            raise self.fail(field, f"expected a list of at least {min_rows} lists of numbers, "
                                   f"got {got}")
        width = None
        for i, row in enumerate(value):
            width = len(self.numbers(row, f"{field}[{i}]", width))
        if not width:
            raise self.fail(field, "expected rows of at least one number")
        return width


def _what(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return {"list": "a list", "dict": "an object"}.get(type(value).__name__,
                                                       type(value).__name__)


def check_file(data: Any, path: str, *, kinds: tuple[str, ...], format_: str) -> None:
    """Refuse a fit file whose content is not what its kind needs (module notes).

    Parameters
    ----------
    data : the parsed JSON.
    path : the file, named in every error.
    kinds : the kinds the caller reads.
    format_ : the schema version it reads.

    Raises
    ------
    InvalidInputError : ``path: field:`` and what is wrong with that field.
    """
    check = _Check(path)
    if not isinstance(data, dict):
        raise InvalidInputError(f"expected a JSON object holding a fitted model, got "
                                f"{_what(data)}", file=path, field="format")
    fmt = data.get("format")
    if fmt != format_:
        raise InvalidInputError(
            f"not a confide fit file of a format this version reads: {fmt!r} (expected "
            f"{format_!r}); fit the model again with this version (`confide fit`)",
            file=path, field="format")
    kind = data.get("kind")
    if kind not in kinds:
        raise InvalidInputError(f"unknown kind {kind!r}; one of {', '.join(kinds)}",
                                file=path, field="kind")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise check.fail("name", f"expected the score's name, got {_what(name)}")
    check.mapping(data, "model")
    _check_training(check, data)
    features = data.get("features")
    if not isinstance(features, list) or not all(isinstance(f, str) and f for f in features):
        raise check.fail("features", f"expected a list of names, got {_what(features)}")
    if len(set(features)) != len(features):
        raise check.fail("features", "names an input twice")
    layer = data.get("layer")
    if kind == "combiner":
        if layer is not None:
            raise check.fail("layer", f"a combiner reads scorers, not a hidden state; got "
                                      f"layer {layer!r} (a probe relabelled as a combiner?)")
        if not features:
            raise check.fail("features", "a combiner needs the names of its input scorers")
    else:
        if not isinstance(layer, str) or not HIDDEN_KEY.match(layer):
            raise check.fail("layer", f"a {kind} reads one hidden state, named like '8:mean' "
                                      f"or '-1:last'; got {_what(layer)}"
                                      + (" (a combiner relabelled?)" if layer is None else ""))
        wanted = list(TOKEN_FEATURES) if kind == "lens" else []
        if features != wanted:
            raise check.fail("features", f"a {kind} reads {wanted or 'no named inputs'}; got "
                                         f"{features}")
    params = check.mapping(data, "params")
    if kind in _DENSITY:
        _check_density(check, kind, params)
    else:
        _check_estimator(check, kind, params, features)
    report = data.get("report", {})
    if not isinstance(report, dict):
        raise check.fail("report", f"expected an object, got {_what(report)}")
    if data.get("multitask") is not None:
        _check_multitask(check, data["multitask"], kind, features)


def _check_multitask(check: _Check, multi: Any, kind: str, features: list[str]) -> None:
    """The tasks of a probe fitted on several runs (module notes)."""
    if kind not in ("probe", "lens"):
        raise check.fail("multitask", f"only a probe or lens is fitted on several runs, not a "
                                      f"{kind}")
    if not isinstance(multi, dict):
        raise check.fail("multitask", f"expected an object, got {_what(multi)}")
    weighting = multi.get("weighting")
    if weighting not in WEIGHTINGS:
        raise check.fail("multitask.weighting", f"expected one of {', '.join(WEIGHTINGS)}, got "
                                                f"{_what(weighting)}")
    tasks = multi.get("tasks")
    if not isinstance(tasks, list) or len(tasks) < 2:
        raise check.fail("multitask.tasks", f"expected a list of two or more tasks, got "
                                            f"{_what(tasks)}")
    names: list[str] = []
    for i, task in enumerate(tasks):
        where = f"multitask.tasks[{i}]"
        if not isinstance(task, dict):
            raise check.fail(where, f"expected an object, got {_what(task)}")
        name = task.get("name")
        if not isinstance(name, str) or not name or name in names:
            raise check.fail(f"{where}.name", f"expected a task name not given before, got "
                                              f"{_what(name)}")
        names.append(name)
        for key in ("run_digest", "run_path"):
            if task.get(key) is not None and not isinstance(task[key], str):
                raise check.fail(f"{where}.{key}", f"expected text or null, got "
                                                   f"{_what(task[key])}")
        if not isinstance(task.get("grader"), str):
            raise check.fail(f"{where}.grader", f"expected a grader's name, got "
                                                f"{_what(task.get('grader'))}")
        n = check.integer(task.get("n"), f"{where}.n")
        correct = check.integer(task.get("n_correct"), f"{where}.n_correct")
        if not 0 <= correct <= n:
            raise check.fail(f"{where}.n_correct", f"expected 0 to {n}, got {correct}")
        ids = task.get("item_ids")
        if not isinstance(ids, list) or not all(isinstance(v, str) for v in ids):
            raise check.fail(f"{where}.item_ids", f"expected a list of item ids, got "
                                                  f"{_what(ids)}")
        oof = task.get("oof")
        if not isinstance(oof, dict):
            raise check.fail(f"{where}.oof", f"expected an object of item id: score, got "
                                             f"{_what(oof)}")
        known = set(ids)
        for item, value in oof.items():
            check.number(value, f"{where}.oof.{item}")
            if item not in known:
                raise check.fail(f"{where}.oof.{item}", "a score of an item not in the task's "
                                                        "item_ids")
        if weighting == "uncertainty":
            s = check.number(task.get("log_variance"), f"{where}.log_variance")
            low, high = LOG_VARIANCE_BOUNDS
            if not low <= s <= high:
                raise check.fail(f"{where}.log_variance", f"expected {low} to {high}, got {s}")
            for key, want in (("sigma", math.exp(s / 2)), ("weight", math.exp(-s))):
                got = check.number(task.get(key), f"{where}.{key}")
                if not math.isclose(got, want, rel_tol=1e-9):
                    raise check.fail(f"{where}.{key}", f"expected {want!r} from log_variance "
                                                       f"{s!r}, got {got!r}")
        if weighting == "per-task":
            layer = task.get("layer")
            if not isinstance(layer, str) or not HIDDEN_KEY.match(layer):
                raise check.fail(f"{where}.layer", f"expected a hidden key like '8:mean', got "
                                                   f"{_what(layer)}")
            nested = _Check(check.path, prefix=f"{where}.")
            _check_estimator(nested, kind, nested.mapping(task, "params"), features)
    applied = multi.get("applied")
    wanted = names if weighting == "per-task" else ["joint"]
    if applied not in wanted:
        raise check.fail("multitask.applied", f"expected {' or '.join(map(repr, wanted))}, got "
                                              f"{_what(applied)}")


def _check_training(check: _Check, data: dict[str, Any]) -> None:
    training = check.mapping(data, "training")
    digest = training.get("run_digest")
    if digest is not None and not isinstance(digest, str):
        raise check.fail("training.run_digest", f"expected the run's digest, got {_what(digest)}")
    ids = training.get("item_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise check.fail("training.item_ids", f"expected a list of item ids, got {_what(ids)}")
    oof = data.get("oof", {})
    if not isinstance(oof, dict):
        raise check.fail("oof", f"expected an object of item id: score, got {_what(oof)}")
    for item, value in oof.items():
        check.number(value, f"oof.{item}")


def _check_estimator(check: _Check, kind: str, params: dict[str, Any],
                     features: list[str]) -> None:
    kind_of = params.get("type")
    if kind_of == "boosting":
        if kind != "combiner":
            raise check.fail("params.type", f"boosted trees are fitted for combiners only, not "
                                            f"a {kind} (a combiner relabelled as a {kind}?)")
        _check_trees(check, params, len(features))
        return
    if kind_of != "logistic":
        raise check.fail("params.type", f"expected 'logistic' or 'boosting', got "
                                        f"{_what(kind_of)}")
    indicators = params.get("indicators")
    if not isinstance(indicators, bool):
        raise check.fail("params.indicators", f"expected true or false, got {_what(indicators)}")
    if indicators != (kind == "combiner"):
        raise check.fail("params.indicators",
                         "missing-value indicators belong to a combiner's parameters; "
                         + (f"this {kind}'s parameters have them (a combiner relabelled as a "
                            f"{kind}?)" if indicators else "this combiner's have none"))
    check.number(params.get("C"), "params.C")
    check.number(params.get("intercept"), "params.intercept")
    arrays = {f: check.numbers(params.get(f), f"params.{f}") for f in ("coef", "mean", "scale")}
    lengths = collections.Counter(len(v) for v in arrays.values())
    if len(lengths) > 1:  # name the one that differs from the others (the one cut short)
        usual = lengths.most_common(1)[0][0]
        odd = next(f for f, v in arrays.items() if len(v) != usual)
        raise check.fail(f"params.{odd}", f"expected {usual} numbers, as params."
                                          f"{next(f for f in arrays if f != odd)} holds; got "
                                          f"{len(arrays[odd])}")
    coef, scale = arrays["coef"], arrays["scale"]
    if not coef:
        raise check.fail("params.coef", "expected at least one weight")
    if any(s == 0 for s in scale):
        raise check.fail("params.scale", "a scale of 0 divides by zero")
    width = len(coef) // 2 if indicators else len(coef)
    if indicators and len(coef) % 2:
        raise check.fail("params.coef", f"a combiner has one weight per input and one per "
                                        f"missing indicator (an even count); got {len(coef)}")
    if kind == "combiner" and width != len(features):
        raise check.fail("params.coef", f"{len(features)} inputs ({', '.join(features)}) "
                                        f"need {2 * len(features)} weights; got {len(coef)}")
    if kind == "lens" and width <= len(features):
        raise check.fail("params.coef", f"a lens weighs a hidden state and {len(features)} "
                                        f"token features; got {width} weights")
    check.numbers(params.get("fill", [0.0] * width), "params.fill", width)
    if "quantiles" in params or "references" in params:
        if not indicators:
            raise check.fail("params.quantiles", "only a combiner maps its inputs through "
                                                 "quantiles")
        n = check.matrix(params.get("quantiles"), "params.quantiles", min_rows=width)
        if len(params["quantiles"]) != width:
            raise check.fail("params.quantiles", f"expected {width} lists (one per input), got "
                                                 f"{len(params['quantiles'])}")
        if n < 2:
            raise check.fail("params.quantiles", "expected at least 2 quantiles per input")
        for j, q in enumerate(params["quantiles"]):
            if any(b < a for a, b in zip(q, q[1:], strict=False)):
                raise check.fail(f"params.quantiles[{j}]", "quantiles must not decrease")
        refs = check.numbers(params.get("references"), "params.references", n)
        if any(b < a for a, b in zip(refs, refs[1:], strict=False)):
            raise check.fail("params.references", "references must not decrease")


def _check_trees(check: _Check, params: dict[str, Any], n_inputs: int) -> None:
    check.number(params.get("baseline"), "params.baseline")
    trees = params.get("trees")
    if not isinstance(trees, list) or not trees:
        raise check.fail("params.trees", f"expected a list of trees, got {_what(trees)}")
    for t, tree in enumerate(trees):
        where = f"params.trees[{t}]"
        if not isinstance(tree, dict):
            raise check.fail(where, f"expected an object, got {_what(tree)}")
        columns = {}
        for f in _TREE_FIELDS:
            column = tree.get(f)
            if not isinstance(column, list) or not column:
                raise check.fail(f"{where}.{f}", f"expected a list, got {_what(column)}")
            columns[f] = column
        n = len(columns["is_leaf"])
        for f, column in columns.items():
            if len(column) != n:
                raise check.fail(f"{where}.{f}", f"expected {n} entries (one per node), got "
                                                 f"{len(column)}")
        for i in range(n):
            node = f"{where}.{{}}[{i}]"
            leaf = columns["is_leaf"][i]
            if leaf not in (0, 1) or isinstance(leaf, float):
                raise check.fail(node.format("is_leaf"), f"expected true or false, got "
                                                         f"{_what(leaf)}")
            check.number(columns["value"][i], node.format("value"))
            if leaf:
                continue
            feature = check.integer(columns["feature_idx"][i], node.format("feature_idx"))
            if not 0 <= feature < n_inputs:
                raise check.fail(node.format("feature_idx"), f"input {feature} does not exist "
                                                             f"({n_inputs} inputs)")
            check.number(columns["num_threshold"][i], node.format("num_threshold"))
            if columns["missing_go_to_left"][i] not in (0, 1):
                raise check.fail(node.format("missing_go_to_left"), "expected true or false")
            for side in ("left", "right"):
                child = check.integer(columns[side][i], node.format(side))
                if not i < child < n:  # forwards only: a walk down the tree always ends
                    raise check.fail(node.format(side), f"node {child} is not a later node of "
                                                        f"this tree (nodes {i + 1}-{n - 1})")


def _check_density(check: _Check, kind: str, params: dict[str, Any]) -> None:
    width = check.matrix(params.get("train"), "params.train", min_rows=4)
    rows = len(params["train"])
    if kind == "relative_mahalanobis":
        back = check.matrix(params.get("background"), "params.background", min_rows=2)
        if back != width:
            raise check.fail("params.background", f"background states have {back} numbers; the "
                                                  f"training states {width}")
    if kind == "huq":
        check.numbers(params.get("train_ppl"), "params.train_ppl", rows)


def input_width(kind: str, params: dict[str, Any], n_features: int) -> int:
    """The length of the hidden state a checked file's ``params`` read (0 for a combiner)."""
    if kind == "combiner":
        return 0
    if kind in _DENSITY:
        return len(params["train"][0])
    return len(params["coef"]) - (n_features if kind == "lens" else 0)
