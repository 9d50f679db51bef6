"""Density models (Mahalanobis, relative Mahalanobis, HUQ): hand values, fitting, files, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.learned import Learned
from confide.learned.density import Density, Gaussian, fit, load_fitted

MODEL = {"backend": "hf", "model": "smollm2", "kind": "alias", "dtype": "float32"}


def _records(states: dict[str, np.ndarray], correct, *, logprobs=None, prefix="t"):
    out = []
    n = len(correct)
    for i in range(n):
        lp = np.array([-0.5, -1.0]) if logprobs is None else np.asarray(logprobs[i])
        gen = Generation(text="a", token_ids=list(range(lp.size)), token_logprobs=lp,
                         hidden={k: v[i].astype(np.float16) for k, v in states.items()})
        out.append(Record(Item(f"{prefix}{i}", "q?", ["a"]), gen,
                          grades={"contains": float(correct[i])}))
    return out


def _outliers_wrong(rng, n=120, d=6):
    """Correct answers' states in the bulk, wrong answers' states scattered far out."""
    y = (rng.random(n) < 0.8).astype(int)
    x = rng.normal(size=(n, d))
    x[y == 0] *= 5.0
    return x, y


def test_gaussian_equals_the_textbook_distance(rng):
    train = rng.normal(size=(50, 4)) @ rng.normal(size=(4, 4))
    h = rng.normal(size=(3, 4))
    mu, cov = train.mean(0), np.cov(train, rowvar=False)
    expected = [math.sqrt((v - mu) @ np.linalg.inv(cov) @ (v - mu)) for v in h]
    g = Gaussian(train)
    assert g.jitter == 1e-15
    assert g.distance(h) == pytest.approx(expected, rel=1e-9)


def test_gaussian_regularises_a_singular_covariance():
    g = Gaussian(np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))  # rank 1 in 3 dimensions
    assert g.jitter >= 1e-15
    d = g.distance(np.array([[0.5, 0.5, 0.5], [0.0, 1.0, 0.0]]))
    assert np.isfinite(d).all() and d[0] < d[1]


def test_gaussian_needs_two_states():
    with pytest.raises(InvalidInputError, match="at least 2"):
        Gaussian(np.zeros((1, 3)))


def test_mahalanobis_ranks_outlying_states_as_wrong(rng):
    x, y = _outliers_wrong(rng)
    noise = rng.normal(size=x.shape)
    records = _records({"8:mean": x, "4:mean": noise}, y)
    model = fit(records, kind="mahalanobis", grader="contains", model=MODEL, layer="best")
    assert model.layer == "8:mean"
    assert model.report["oof_auroc"] > 0.9
    # the final model is the Gaussian of every training state
    value = model.predict(records[:1])[0][0]
    assert value == pytest.approx(-Gaussian(np.asarray(model.params["train"])).distance(
        x[:1].astype(np.float16))[0], rel=1e-9)


def test_relative_mahalanobis_subtracts_the_background_distance(rng):
    x, y = _outliers_wrong(rng, n=60, d=3)
    back = rng.normal(size=(40, 3)) * 3
    records = _records({"8:mean": x}, y)
    background = _records({"8:mean": back}, np.ones(40), prefix="b")
    model = fit(records, kind="relative_mahalanobis", grader="contains", model=MODEL,
                layer="8", background=background)
    h = x[:2].astype(np.float16).astype(np.float64)
    expected = -(Gaussian(x.astype(np.float16)).distance(h)
                 - Gaussian(back.astype(np.float16)).distance(h))
    got = [v for v, _ in model.predict(records[:2])]
    assert got == pytest.approx(expected.tolist(), rel=1e-9)
    with pytest.raises(InvalidInputError, match="background"):
        fit(records, kind="relative_mahalanobis", grader="contains", model=MODEL, layer="8")


def test_huq_averages_perplexity_and_distance_ranks(rng):
    from sklearn.model_selection import train_test_split

    n = 40
    x, y = _outliers_wrong(rng, n=n, d=3)
    logprobs = [[-0.1 - i / n] for i in range(n)]
    records = _records({"8:mean": x}, y, logprobs=logprobs)
    model = fit(records, kind="huq", grader="contains", model=MODEL, layer="8")
    train = x.astype(np.float16).astype(np.float64)
    ppl = np.array([0.1 + i / n for i in range(n)])
    part, held = train_test_split(train, test_size=0.3, random_state=42)
    held_md = Gaussian(part).distance(held)
    md = Gaussian(train).distance(train[:3])
    expected = [-((ppl <= ppl[i]).mean() + (held_md <= md[i]).mean()) / 2 for i in range(3)]
    assert [v for v, _ in model.predict(records[:3])] == pytest.approx(expected)
    assert all(-1.0 <= v <= 0.0 for v, _ in model.predict(records))


def test_density_applies_oof_on_own_run_and_refuses_trained_items_elsewhere(rng):
    x, y = _outliers_wrong(rng, n=40, d=3)
    records = _records({"8:mean": x}, y)
    model = fit(records, kind="mahalanobis", grader="contains", model=MODEL, layer="8",
                run="digest")
    own = model.apply(records, run="digest", backend=MODEL)
    assert [v for v, _ in own] == [model.oof[r.item.id] for r in records]
    elsewhere = model.apply(records[:2], run="other", backend=MODEL)
    assert all(math.isnan(v) and "training set" in why for v, why in elsewhere)
    with pytest.raises(ConfigMismatch, match="gemma"):
        model.apply(records, run="x", backend={**MODEL, "model": "gemma3-270m"})


def test_density_file_round_trip(tmp_path, rng):
    x, y = _outliers_wrong(rng, n=30, d=3)
    records = _records({"8:mean": x}, y, logprobs=[[-0.2 * (i % 5)] for i in range(30)])
    model = fit(records, kind="huq", grader="contains", model=MODEL, layer="8")
    path = model.save(tmp_path / "huq.json")
    again = load_fitted(path)
    assert isinstance(again, Density) and again.kind == "huq"
    assert again.predict(records) == model.predict(records)
    with pytest.raises(InvalidInputError, match="unknown kind"):
        Learned.load(path)  # the probe loader does not take density kinds


def test_density_without_hidden_state_or_tokens_is_nan_with_reason(rng):
    x, y = _outliers_wrong(rng, n=20, d=3)
    records = _records({"8:mean": x}, y)
    model = fit(records, kind="huq", grader="contains", model=MODEL, layer="8")
    bare = Record(Item("n", "q"), Generation("a", token_logprobs=np.array([-1.0])))
    empty = Record(Item("e", "q"), Generation("", token_logprobs=np.zeros(0),
                                              hidden={"8:mean": np.zeros(3, np.float16)}))
    (v1, why1), (v2, why2) = model.predict([bare, empty])
    assert math.isnan(v1) and "hidden state 8:mean" in why1
    assert math.isnan(v2) and "empty answer" in why2


@pytest.mark.parametrize("kind", ["mahalanobis", "huq"])
def test_an_empty_answer_gets_nan_with_the_reason_from_a_density_model(kind, rng):
    # The Gaussian alone would score an empty answer's hidden state like any other; the
    # registered scorer of the kind, applied through run_scorer, gives NaN with the reason.
    from confide.scorers.base import EMPTY_ANSWER

    x, y = _outliers_wrong(rng, n=40, d=3)
    records = _records({"8:mean": x}, y)
    model = fit(records, kind=kind, grader="contains", model=MODEL, layer="8", run="digest")
    empty = Record(Item("e", "q"), Generation(" ", token_logprobs=np.array([-0.1]),
                                              hidden={"8:mean": np.zeros(3, np.float16)}))
    for value, why in (*model.apply([empty], run="other", backend=MODEL),
                       *model.predict([empty])):
        assert math.isnan(value) and why == EMPTY_ANSWER
    records[0].greedy.text = ""  # on its own run too: NaN, not its out-of-fold score
    own = model.apply(records, run="digest", backend=MODEL)
    assert math.isnan(own[0][0]) and own[0][1] == EMPTY_ANSWER
    assert [v for v, _ in own[1:]] == [model.oof[r.item.id] for r in records[1:]]


def test_density_fit_rejects_bad_input(rng):
    x, y = _outliers_wrong(rng, n=20, d=3)
    records = _records({"8:mean": x}, y)
    with pytest.raises(InvalidInputError, match="unknown kind"):
        fit(records, kind="kde", grader="contains", model=MODEL)
    with pytest.raises(InvalidInputError, match="layer"):
        fit(records, kind="mahalanobis", grader="contains", model=MODEL, layer="99")
    with pytest.raises(InvalidInputError, match="hidden states"):
        fit(_records({}, y), kind="mahalanobis", grader="contains", model=MODEL)


def _store_run(path, records, *, model=MODEL):
    from confide.store.run_store import RunStore

    config = {"task": {"name": "synthetic"}, "grader": "contains", "scorers": ["msp"], "seed": 0}
    with RunStore.open(path, config) as store:
        store.set_meta("backend", model)
        for i, r in enumerate(records):
            store.put(r, i)
    return path


def test_cli_fit_density_then_eval_with(tmp_path, rng):
    from typer.testing import CliRunner

    from confide.cli import app

    x, y = _outliers_wrong(rng, n=60, d=4)
    own = _store_run(tmp_path / "a", _records({"8:mean": x}, y))
    back = _store_run(tmp_path / "b", _records({"8:mean": rng.normal(size=(30, 4))},
                                               np.ones(30), prefix="b"))
    gemma = _store_run(tmp_path / "g", _records({"8:mean": x}, y, prefix="g"),
                       model={**MODEL, "model": "gemma3-270m"})
    runner = CliRunner()
    files = []
    for kind, extra in (("mahalanobis", []), ("relative_mahalanobis", ["--background", str(back)]),
                        ("huq", [])):
        out = tmp_path / f"{kind}.json"
        res = runner.invoke(app, ["fit", str(own), "--kind", kind, "-o", str(out), *extra])
        assert res.exit_code == 0, res.output
        assert "cross-fitted AUROC" in res.output
        files += ["--with", str(out)]
    table = tmp_path / "t.json"
    res = runner.invoke(app, ["eval", str(own), *files, "--resamples", "20", "--json", str(table)])
    assert res.exit_code == 0, res.output
    rows = {r["scorer"]: r for r in json.loads(table.read_text())["scorers"]}
    assert rows["mahalanobis:a"]["auroc"][0] > 0.9 and rows["mahalanobis:a"]["n_nan"] == 0
    res = runner.invoke(app, ["eval", str(gemma), *files[:2]])
    assert res.exit_code == 1 and "ConfigMismatch" in res.output
    res = runner.invoke(app, ["fit", str(own), "--kind", "probe", "--background", str(back),
                              "-o", str(tmp_path / "p.json")])
    assert res.exit_code == 1 and "background" in res.output
