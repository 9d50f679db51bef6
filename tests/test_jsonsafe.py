"""The one JSON-safe conversion (confide.core.jsonsafe): NaN and infinity → null,
numpy → Python, on a hand-written case."""

from __future__ import annotations

import json
import math

import numpy as np

from confide.core.jsonsafe import finite_or_none, json_safe


def test_finite_or_none_by_hand():
    assert finite_or_none(None) is None
    assert finite_or_none(math.nan) is None
    assert finite_or_none(math.inf) is None and finite_or_none(-math.inf) is None
    assert finite_or_none(np.float64(np.nan)) is None
    value = finite_or_none(np.float32(0.25))      # 0.25 is exact in float32
    assert value == 0.25 and type(value) is float
    assert finite_or_none(3) == 3.0 and type(finite_or_none(3)) is float
    assert finite_or_none(-1e308) == -1e308


def test_json_safe_by_hand():
    value = {
        "auroc": np.float64(0.75), "ece": math.nan, "threshold": math.inf,
        "n": np.int64(7), "kept": np.bool_(False), "name": "msp", "none": None,
        "plain": [1, True, 0.5], 2: (np.float32(0.5), -math.inf),
        "diagram": {"counts": np.array([3, 0]), "accuracy": np.array([0.5, np.nan])},
    }
    expected = {
        "auroc": 0.75, "ece": None, "threshold": None,
        "n": 7, "kept": False, "name": "msp", "none": None,
        "plain": [1, True, 0.5], "2": [0.5, None],
        "diagram": {"counts": [3, 0], "accuracy": [0.5, None]},
    }
    out = json_safe(value)
    assert out == expected
    # the types, not only the values: plain Python everywhere
    assert type(out["auroc"]) is float and type(out["n"]) is int and type(out["kept"]) is bool
    assert [type(v) for v in out["diagram"]["counts"]] == [int, int]
    # standard JSON: dumps succeeds without NaN or Infinity
    assert json.dumps(out, allow_nan=False, sort_keys=True) == (
        '{"2": [0.5, null], "auroc": 0.75, "diagram": {"accuracy": [0.5, null], '
        '"counts": [3, 0]}, "ece": null, "kept": false, "n": 7, "name": "msp", "none": null, '
        '"plain": [1, true, 0.5], "threshold": null}')


def test_json_safe_leaves_the_input_alone():
    value = {"a": [math.nan]}
    json_safe(value)
    assert math.isnan(value["a"][0])
