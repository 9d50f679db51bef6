from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.special import expit

from confide.core.errors import InvalidInputError
from confide.decisions import (
    Calibrator,
    calibrate_run,
    fit_calibrator,
    load_calibrator,
    reliability_diagram,
)
from confide.decisions.calibration import CALIBRATION_METHODS
from confide.metrics import calibration_error, crossfit_probabilities
from tests.decisions.helpers import scored_records, write_run


@pytest.fixture
def calibrated_data(rng):
    """Scores in [0, 1] that are already calibrated: P(correct | c) = c."""
    c = rng.random(20_000)
    return c, (rng.random(c.size) < c).astype(float)


@pytest.mark.parametrize("method", ["isotonic", "histogram"])
def test_calibrator_recovers_identity_on_calibrated_scores(calibrated_data, method):
    c, y = calibrated_data
    cal = fit_calibrator(c, y, method=method, n_bins=20)
    grid = np.linspace(0.05, 0.95, 19)
    # sampling noise of a bin mean (~500 items) or an isotonic step is ~0.02
    assert np.abs(cal.predict(grid) - grid).max() < 0.05


def test_platt_recovers_known_sigmoid(rng):
    s = rng.normal(size=20_000) * 1.5 - 3.0
    y = (rng.random(s.size) < expit(2.0 * s + 5.0)).astype(float)
    cal = fit_calibrator(s, y, method="platt")
    assert cal.params["a"] == pytest.approx(2.0, abs=0.1)
    assert cal.params["b"] == pytest.approx(5.0, abs=0.25)


def test_platt_matches_sklearn_sigmoid_calibration(rng):
    # scikit-learn's Platt fit (same smoothed targets, its own optimiser) as the reference
    from sklearn.calibration import _sigmoid_calibration

    s = rng.normal(size=200)
    y = (rng.random(200) < expit(s)).astype(float)
    test = np.linspace(-3, 3, 13)
    ours = fit_calibrator(s, y, method="platt").predict(test)
    a, b = _sigmoid_calibration(s, y)
    np.testing.assert_allclose(ours, expit(-(a * test + b)), atol=1e-4)


def test_isotonic_matches_sklearn(rng):
    from sklearn.isotonic import IsotonicRegression

    s = rng.normal(size=300)
    y = (rng.random(300) < expit(2 * s)).astype(float)
    test = np.r_[np.linspace(-4, 4, 41), s[:10]]
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(s, y)
    np.testing.assert_allclose(fit_calibrator(s, y, method="isotonic").predict(test),
                               iso.predict(test), atol=1e-12)


def test_histogram_hand_computed():
    # 2 equal-mass bins of 4 scores: (-inf, 0.2] and (0.2, inf)
    cal = fit_calibrator([0.1, 0.2, 0.7, 0.9], [0, 1, 1, 1], method="histogram", n_bins=2)
    assert cal.params == {"edges": [0.2], "values": [0.5, 1.0]}
    assert cal.predict([0.0, 0.2, 0.21, 5.0]).tolist() == [0.5, 0.5, 1.0, 1.0]


def test_histogram_keeps_ties_together():
    cal = fit_calibrator([1, 1, 1, 1, 1, 2], [0, 1, 0, 1, 0, 1], method="histogram", n_bins=3)
    assert cal.params["edges"] == [1.0]
    assert cal.predict(1.0) == pytest.approx(0.4)


def test_platt_hand_computed_prediction():
    cal = Calibrator("msp", "platt", {"a": 2.0, "b": -1.0})
    assert cal.predict(0.5) == 0.5
    assert cal.predict(1.0) == pytest.approx(1 / (1 + math.exp(-1)))


def test_platt_predict_extremes_without_warnings():
    cal = Calibrator("msp", "platt", {"a": 1.0, "b": 0.0})
    np.testing.assert_allclose(cal.predict([-1e6, 1e6, -np.inf, np.inf]), [0, 1, 0, 1])
    flat = Calibrator("msp", "platt", {"a": 0.0, "b": 0.0})
    assert flat.predict(np.inf) == 0.5


def test_predict_scalar_array_and_nan():
    cal = Calibrator("msp", "isotonic", {"x": [0.0, 1.0], "y": [0.2, 0.8]})
    assert isinstance(cal.predict(0.5), float) and cal.predict(0.5) == pytest.approx(0.5)
    assert math.isnan(cal.predict(float("nan")))
    out = cal.predict([[0.0, 2.0], [float("-inf"), float("nan")]])
    assert out.shape == (2, 2)
    assert out[0].tolist() == [0.2, 0.8] and out[1, 0] == 0.2 and math.isnan(out[1, 1])


@pytest.mark.parametrize("method", CALIBRATION_METHODS)
def test_calibrator_json_round_trip(tmp_path, rng, method):
    s = rng.normal(size=100)
    y = (rng.random(100) < expit(s)).astype(float)
    cal = fit_calibrator(s, y, method=method, scorer="mean_logprob", grader="exact")
    path = cal.save(tmp_path / "cal.json")
    loaded = load_calibrator(path)
    assert loaded == cal
    test = np.linspace(-3, 3, 25)
    np.testing.assert_array_equal(loaded.predict(test), cal.predict(test))
    assert json.loads(path.read_text())["method"] == method  # plain JSON, no pickle


def test_load_calibrator_errors_name_file_line_and_field(tmp_path):
    with pytest.raises(InvalidInputError, match="nope.json: cannot read"):
        load_calibrator(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{\n "kind": "confide.calibrator",\n oops\n}')
    with pytest.raises(InvalidInputError, match=r"bad\.json:3: not valid JSON"):
        load_calibrator(bad)
    good = Calibrator("msp", "histogram", {"edges": [0.5], "values": [0.1, 0.9]}).to_dict()
    for change, field in [({"kind": "other"}, "kind"), ({"method": "magic"}, "method"),
                          ({"scorer": ""}, "scorer"),
                          ({"params": {"edges": [0.5], "values": [0.1]}}, "params.values"),
                          ({"params": {"edges": [0.5, 0.4], "values": [0, 0, 1]}},
                           "params.edges"),
                          ({"params": {"edges": [0.5], "values": [0.1, 1.5]}}, "params.values")]:
        bad.write_text(json.dumps({**good, **change}))
        with pytest.raises(InvalidInputError, match=rf"bad\.json: {field}:"):
            load_calibrator(bad)


def test_fit_calibrator_rejects_bad_input():
    with pytest.raises(InvalidInputError, match="method"):
        fit_calibrator([0, 1], [0, 1], method="beta")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="both right and wrong"):
        fit_calibrator([0.1, 0.5, 0.9], [1, 1, 1])
    with pytest.raises(InvalidInputError, match="binary"):
        fit_calibrator([0.1, 0.5, 0.9], [0, 0.5, 1], method="platt")
    with pytest.raises(InvalidInputError, match="finite"):
        fit_calibrator([0.1, -np.inf, 0.9], [0, 0, 1])


def test_fit_calibrator_drops_nan_rows():
    cal = fit_calibrator([0.1, np.nan, 0.9, 0.2], [0, 1, 1, 1], method="isotonic")
    assert cal.n_fit == 3


def test_reliability_diagram_hand_computed_and_matches_ece():
    p = [0.05, 0.15, 0.35, 0.4, 0.95]
    y = [0, 0, 1, 0, 1]
    d = reliability_diagram(p, y, n_bins=4)
    assert d.centers.tolist() == [0.125, 0.375, 0.625, 0.875]
    assert d.counts.tolist() == [2, 2, 0, 1]
    np.testing.assert_allclose(d.accuracy[[0, 1, 3]], [0.0, 0.5, 1.0])
    np.testing.assert_allclose(d.mean_confidence[[0, 1, 3]], [0.1, 0.375, 0.95])
    assert math.isnan(d.accuracy[2])
    used = d.counts > 0
    ece = np.sum(d.counts[used] / 5 * np.abs(d.accuracy[used] - d.mean_confidence[used]))
    assert ece == pytest.approx(calibration_error(p, y, n_bins=4))
    assert d.to_dict()["accuracy"][2] is None


def test_reliability_diagram_quantile_bins():
    d = reliability_diagram([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1], n_bins=2, strategy="quantile")
    assert d.counts.tolist() == [2, 2]
    assert d.accuracy.tolist() == [0.0, 1.0]


def test_crossfit_never_uses_own_label():
    # one item per fold pair; a calibrator fitted on the others cannot see the item itself
    c = np.arange(10, dtype=float)
    y = np.r_[np.zeros(5), np.ones(5)]
    p = crossfit_probabilities(c, y, method="histogram", n_folds=10, n_bins=2)
    assert p.shape == (10,) and ((p >= 0) & (p <= 1)).all()


def test_calibrate_run_on_stored_run(tmp_path, rng):
    s = rng.normal(size=60)
    y = (rng.random(60) < expit(2 * s)).astype(float)
    records = scored_records(s, y)
    records[0].scores["msp"] = float("nan")
    run = write_run(tmp_path / "run", records)
    fit = calibrate_run(run, "msp", method="platt")
    assert fit.n == 59 and fit.n_missing == 1
    assert fit.calibrator.scorer == "msp" and fit.calibrator.grader == "contains"
    assert fit.calibrator.source == str(run)
    assert 0 <= fit.crossfit_ece <= 1 and fit.reliability.counts.sum() == 59
    with pytest.raises(InvalidInputError, match="no record has scorer 'nope'.*msp"):
        calibrate_run(run, "nope")
    with pytest.raises(InvalidInputError, match="not a run directory"):
        calibrate_run(tmp_path / "missing", "msp")


def test_server_loads_the_calibrator(tmp_path):
    from confide.serve import decisions as serve_decisions

    path = Calibrator("msp", "platt", {"a": 1.0, "b": 0.0}).save(tmp_path / "c.json")
    loaded = serve_decisions.load_calibrator(path)
    assert loaded.scorer == "msp" and loaded.predict(0.0) == 0.5
