"""Probes, lens probes and combiners: direction recovery, cross-fitting, files, transfer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.learned import Learned, fit, token_features
from confide.learned.estimators import fit_boosting, predict_boosting, predict_params

MODEL = {"backend": "hf", "model": "smollm2", "kind": "alias", "dtype": "float32"}


def _records(hidden: np.ndarray, correct: np.ndarray, *, layer: str = "8:mean",
             scores: dict[str, np.ndarray] | None = None, prefix: str = "t") -> list[Record]:
    out = []
    for i, (vec, c) in enumerate(zip(hidden, correct, strict=True)):
        gen = Generation(text="a", token_ids=[1, 2], token_logprobs=np.array([-0.5, -1.0 - i % 3]),
                         token_entropies=np.array([0.3, 0.7]),
                         token_kl_uniform=np.array([5.0, 6.0]),
                         hidden={layer: vec.astype(np.float16)})
        rec = Record(item=Item(f"{prefix}{i}", "q?", ["a"]), greedy=gen,
                     grades={"contains": float(c)})
        for name, values in (scores or {}).items():
            rec.scores[name] = float(values[i])
        out.append(rec)
    return out


def _separable(rng, n=200, d=24):
    direction = rng.normal(size=d)
    direction /= np.linalg.norm(direction)
    x = rng.normal(size=(n, d))
    y = (x @ direction + 0.1 * rng.normal(size=n)) > 0
    return x, y.astype(int), direction


def _auroc(score, y):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(y, score)


def test_probe_recovers_the_separating_direction(rng):
    x, y, direction = _separable(rng)
    model = fit(_records(x, y), kind="probe", grader="contains", model=MODEL, layer="8:mean")
    coef = np.asarray(model.params["coef"]) / np.asarray(model.params["scale"])
    cosine = coef @ direction / np.linalg.norm(coef)
    assert cosine > 0.9
    assert model.report["oof_auroc"] > 0.9
    assert model.layer == "8:mean"


def test_probe_best_layer_picks_the_informative_one(rng):
    x, y, _ = _separable(rng, n=120)
    records = _records(x, y, layer="16:mean")
    noise = rng.normal(size=x.shape)
    for r, v in zip(records, noise, strict=True):
        r.greedy.hidden["4:mean"] = v.astype(np.float16)
    model = fit(records, kind="probe", grader="contains", model=MODEL, layer="best")
    assert model.layer == "16:mean"
    assert {"4:mean logistic C=0.1", "16:mean logistic C=0.1"} <= set(
        model.report["selection_auroc"])


def test_crossfit_with_shuffled_labels_gives_chance_auroc(rng):
    # 64 dimensions and 120 items: an in-sample probe would separate any labels.
    x = rng.normal(size=(120, 64))
    y = rng.permutation(np.r_[np.ones(60), np.zeros(60)]).astype(int)
    model = fit(_records(x, y), kind="probe", grader="contains", model=MODEL, layer="8:mean")
    assert abs(model.report["oof_auroc"] - 0.5) < 0.15
    in_sample = [s for s, _ in model.predict(_records(x, y))]
    assert _auroc(in_sample, y) > 0.9  # the final model memorises; only OOF is honest


def test_fit_needs_two_correct_and_two_wrong(rng):
    x = rng.normal(size=(10, 3))
    with pytest.raises(InvalidInputError, match="2 correct and 2 wrong"):
        fit(_records(x, np.array([1] * 9 + [0])), kind="probe", grader="contains", model=MODEL,
            layer="8:mean")


def test_probe_is_sklearn_nested_cross_validation_over_the_one_fold_rule(rng):
    # out-of-fold scores = cross_val_predict of a GridSearchCV over C on confide's folds
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from confide.learned.estimators import C_GRID, SELECTION_FOLDS
    from confide.metrics.crossfit import CrossfitCV, crossfit_splits

    x, y, _ = _separable(rng, n=60, d=4)
    model = fit(_records(x, y), kind="probe", grader="contains", model=MODEL, layer="8:mean",
                n_folds=4)
    x16 = x.astype(np.float16).astype(np.float64)  # records store hidden states as float16
    search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)),
                          {"logisticregression__C": list(C_GRID)}, scoring="roc_auc",
                          cv=CrossfitCV(SELECTION_FOLDS, 0))
    ref = cross_val_predict(search, x16, y, cv=crossfit_splits(y, n_folds=4, seed=0),
                            method="predict_proba")[:, 1]
    oof = np.array([model.oof[f"t{i}"] for i in range(60)])
    np.testing.assert_allclose(oof, ref, atol=1e-6)
    final = search.fit(x16, y).best_estimator_
    ours = np.array([s for s, _ in model.predict(_records(x, y))])
    np.testing.assert_allclose(ours, final.predict_proba(x16)[:, 1], atol=1e-6)


def test_learned_save_load_round_trip_is_exact(tmp_path, rng):
    x, y, _ = _separable(rng, n=80, d=8)
    records = _records(x, y)
    model = fit(records, kind="lens", grader="contains", model=MODEL, layer="8")
    path = model.save(tmp_path / "probe.json")
    text = path.read_text()
    assert "pickle" not in text and json.loads(text)["format"] == "confide-learned/1"
    again = Learned.load(path)
    assert again == model
    assert [s for s, _ in again.predict(records)] == [s for s, _ in model.predict(records)]
    assert again.model["model"] == "smollm2" and again.layer == "8:mean"


def test_probe_refuses_another_model(tmp_path, rng):
    x, y, _ = _separable(rng, n=60, d=8)
    model = Learned.load(fit(_records(x, y), kind="probe", grader="contains", model=MODEL,
                             layer="8:mean").save(tmp_path / "p.json"))
    with pytest.raises(ConfigMismatch, match="gemma3-270m"):
        model.apply(_records(x, y), run="other", backend={**MODEL, "model": "gemma3-270m"})


def test_load_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  nope")
    with pytest.raises(InvalidInputError, match=r"bad.json:2"):
        Learned.load(bad)
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(InvalidInputError, match="format"):
        Learned.load(bad)


def test_apply_uses_oof_on_own_run_and_refuses_trained_items_elsewhere(rng):
    x, y, _ = _separable(rng, n=60, d=8)
    records = _records(x, y)
    model = fit(records, kind="probe", grader="contains", model=MODEL, layer="8:mean",
                run="run-a")
    own = model.apply(records, run="run-a", backend=MODEL)
    assert [s for s, _ in own] == [model.oof[r.item.id] for r in records]
    other = model.apply(records, run="run-b", backend=MODEL)
    assert all(math.isnan(s) and "training set" in why for s, why in other)
    fresh = _records(x[:5], y[:5], prefix="new")
    scored = model.apply(fresh, run="run-b", backend=MODEL)
    assert all(why is None and 0 <= s <= 1 for s, why in scored)


@pytest.mark.parametrize("kind", ["probe", "combiner"])
def test_an_empty_answer_gets_nan_with_the_reason_from_a_fitted_model(kind, rng):
    # A probe reads the empty answer's hidden state and a combiner fills its NaN inputs
    # with training medians: alone, each would give it a confidence. Applied through the
    # registered scorer of the kind and run_scorer, it gets NaN with the reason.
    from confide.scorers.base import EMPTY_ANSWER

    x, y, _ = _separable(rng, n=60, d=8)
    scores = {"a": x[:, 0], "b": x[:, 1]}
    model = fit(_records(x, y, scores=scores), kind=kind, grader="contains", model=MODEL,
                layer="8:mean", run="run-a")
    fresh = _records(x[:2], y[:2], prefix="new", scores={"a": x[:2, 0], "b": x[:2, 1]})
    fresh[0].greedy.text = "  "
    fresh[0].scores = {"a": math.nan, "b": math.nan}  # what every scorer gives it
    for (value, why), (other, other_why) in (model.apply(fresh, run="run-b", backend=MODEL),
                                            model.predict(fresh)):
        assert math.isnan(value) and why == EMPTY_ANSWER
        assert other_why is None and 0 <= other <= 1
    own = _records(x, y, scores=scores)
    own[3].greedy.text = ""  # a training item on its own run: NaN, not its out-of-fold score
    applied = model.apply(own, run="run-a", backend=MODEL)
    assert math.isnan(applied[3][0]) and applied[3][1] == EMPTY_ANSWER
    assert [v for i, (v, _) in enumerate(applied) if i != 3] == \
        [model.oof[r.item.id] for i, r in enumerate(own) if i != 3]


def test_fitted_kinds_are_registered_scorers_applied_from_the_context(rng):
    from confide.pipeline.scorer_plan import plan_scorers
    from confide.scorers import SCORERS, Need, run_scorer
    from confide.scorers.fitted import fitted_context

    kinds = ("probe", "lens", "combiner", "mahalanobis", "relative_mahalanobis", "huq")
    assert all(SCORERS[k].level == "answer" and SCORERS[k].family == "fitted"
               and Need.TRAINING in SCORERS[k].needs for k in kinds)
    usable, skipped = plan_scorers(["msp", *kinds], frozenset({"token_logprobs",
                                                              "hidden_states"}))
    assert [s.name for s in usable] == ["msp"] and all("confide fit" in skipped[k]
                                                       for k in kinds)
    x, y, _ = _separable(rng, n=40, d=4)
    records = _records(x, y)
    model = fit(records, kind="probe", grader="contains", model=MODEL, layer="8:mean")
    fresh = _records(x[:3], y[:3], prefix="new")
    one_by_one = [run_scorer(SCORERS["probe"], r, fitted_context(model)) for r in fresh]
    assert [why for _, why in one_by_one] == [None] * 3  # one row at a time: equal to a ulp
    assert [v for v, _ in one_by_one] == pytest.approx([v for v, _ in model.predict(fresh)])
    value, why = run_scorer(SCORERS["probe"], fresh[0])
    assert math.isnan(value) and "no fitted model" in why


def test_probe_without_hidden_states_is_nan_with_reason(rng):
    x, y, _ = _separable(rng, n=40, d=4)
    model = fit(_records(x, y), kind="probe", grader="contains", model=MODEL, layer="8:mean")
    bare = _records(x[:2], y[:2], layer="3:last", prefix="z")
    (s, why), _ = model.predict(bare)
    assert math.isnan(s) and "--hidden-layers 8" in why


def test_fit_needs_hidden_states_for_probes(rng):
    recs = _records(np.zeros((6, 2)), np.array([0, 1] * 3))
    for r in recs:
        r.greedy.hidden = None
    with pytest.raises(InvalidInputError, match="hidden-layers"):
        fit(recs, kind="probe", grader="contains", model=MODEL)


def test_token_features_hand_computed():
    g = Generation("ab", token_ids=[1, 2], token_logprobs=np.array([-1.0, -3.0]),
                   token_entropies=np.array([0.5, 1.5]), token_kl_uniform=np.array([4.0, 6.0]))
    f = token_features(Record(Item("x", "q"), g))
    assert f.tolist() == pytest.approx([-2.0, -3.0, 1.0, 1.5, 5.0, math.log(3)])


def test_combiner_weights_and_explicit_nan_handling(rng):
    n = 200
    y = (rng.random(n) < 0.5).astype(int)
    good = y + 0.5 * rng.normal(size=n)
    noise = rng.normal(size=n)
    good[::5] = np.nan  # a fifth of the useful scorer is missing
    records = _records(np.zeros((n, 2)), y, scores={"good": good, "noise": noise})
    model = fit(records, kind="combiner", grader="contains", model=MODEL)
    w = model.report["weights"]
    assert w["good"] > 0 and abs(w["noise"]) < abs(w["good"]) / 3
    assert set(model.report["missing_weights"]) == {"good", "noise"}
    assert model.report["oof_auroc"] > 0.8
    scores = [s for s, why in model.predict(records)]
    assert not np.isnan(scores).any()  # NaN inputs are imputed + flagged, never dropped silently
    assert model.params["fill"][0] == pytest.approx(float(np.nanmedian(good)))


def test_normal_scores_equal_sklearn_quantile_transformer(rng):
    # ties, values beyond the training range and exactly at its ends
    from sklearn.preprocessing import QuantileTransformer

    from confide.learned.estimators import normal_scores

    train = np.column_stack([rng.normal(size=300), rng.integers(0, 4, 300).astype(float),
                             np.exp(rng.normal(size=300))])
    qt = QuantileTransformer(n_quantiles=100, output_distribution="normal",
                             subsample=None).fit(train)
    test = np.column_stack([rng.normal(scale=3, size=50), rng.integers(-1, 6, 50).astype(float),
                            np.exp(rng.normal(scale=2, size=50))])
    test[:3] = train.min(0), train.max(0), np.median(train, 0)
    ours = normal_scores(test, qt.quantiles_.T, qt.references_)
    np.testing.assert_allclose(ours, qt.transform(test), atol=1e-12)
    # a constant input (a scorer that never varied in training) and infinities stay finite
    flat = QuantileTransformer(n_quantiles=10, output_distribution="normal",
                               subsample=None).fit(np.ones((20, 1)))
    odd = np.array([[1.0], [0.0], [2.0]])
    np.testing.assert_allclose(normal_scores(odd, flat.quantiles_.T, flat.references_),
                               flat.transform(odd), atol=1e-12)
    beyond = normal_scores(np.array([[np.inf], [-np.inf]]), qt.quantiles_.T[:1],
                            qt.references_)  # sklearn refuses these; we clip them
    assert np.isfinite(beyond).all() and beyond[0, 0] > 5 > -5 > beyond[1, 0]


def test_combiner_file_predicts_what_the_sklearn_pipeline_predicts(rng):
    # the plain-JSON model (median fill, normal scores, indicators, standardise, logistic)
    # is the fitted scikit-learn pipeline, rebuilt without pickle
    from sklearn.impute import MissingIndicator, SimpleImputer
    from sklearn.pipeline import make_pipeline, make_union
    from sklearn.preprocessing import QuantileTransformer, StandardScaler

    from confide.learned.estimators import COMBINER_C, non_negative_logistic

    n = 120
    y = (rng.random(n) < 0.4).astype(int)
    a = np.exp(y + rng.normal(size=n))  # heavy-tailed, like a perplexity
    b = np.round(rng.normal(size=n))  # ties
    a[::7] = np.nan
    model = fit(_records(np.zeros((n, 2)), y, scores={"a": a, "b": b}), kind="combiner",
                grader="contains", model=MODEL)
    x = np.column_stack([a, b])
    ref = make_pipeline(
        make_union(make_pipeline(SimpleImputer(strategy="median"),
                                 QuantileTransformer(n_quantiles=n // 2, subsample=None,
                                                     output_distribution="normal")),
                   MissingIndicator(features="all")),
        StandardScaler(), non_negative_logistic()(C=COMBINER_C)).fit(x, y)
    fresh = np.column_stack([np.exp(rng.normal(scale=2, size=30)), rng.normal(size=30)])
    fresh[::4, 0] = np.nan
    records = _records(np.zeros((30, 2)), np.zeros(30), scores={"a": fresh[:, 0],
                                                                "b": fresh[:, 1]}, prefix="n")
    ours = np.array([s for s, _ in model.predict(records)])
    np.testing.assert_allclose(ours, ref.predict_proba(fresh)[:, 1], atol=1e-9)


def test_non_negative_logistic_is_sklearns_logistic_regression_within_its_bounds(rng):
    # columns: two confidences, then their two missing indicators (sign free)
    from sklearn.linear_model import LogisticRegression

    from confide.learned.estimators import non_negative_logistic

    n = 400
    y = (rng.random(n) < 0.4).astype(int)
    good = y + rng.normal(size=n)
    inverted = -y + rng.normal(size=n)  # anti-correlated with correctness
    missing = (rng.random((n, 2)) < 0.2).astype(float)
    missing[:, 0] += y * (rng.random(n) < 0.3)  # the first indicator says "more likely right"
    missing = np.minimum(missing, 1.0)
    x = np.column_stack([good, inverted, -missing])  # indicators pushed negative on purpose
    ours = non_negative_logistic()(C=0.5).fit(x, y)
    # the inverted input's weight is held at zero; the rest is the unbounded fit without it
    assert ours.coef_[0, 1] == 0.0
    keep = [0, 2, 3]
    ref = LogisticRegression(C=0.5, tol=1e-10, max_iter=10_000).fit(x[:, keep], y)
    np.testing.assert_allclose(ours.coef_[0, keep], ref.coef_[0], atol=1e-4)
    assert ours.coef_[0, 2] < 0  # an indicator's weight may be negative
    np.testing.assert_allclose(ours.predict_proba(x)[:, 1], ref.predict_proba(x[:, keep])[:, 1],
                               atol=1e-5)
    np.testing.assert_array_equal(ours.predict(x), ref.predict(x[:, keep]))
    # with no bound binding it is the unbounded fit
    free = non_negative_logistic()(C=0.5).fit(np.column_stack([good, -inverted, -missing]), y)
    ref = LogisticRegression(C=0.5, tol=1e-10, max_iter=10_000).fit(
        np.column_stack([good, -inverted, -missing]), y)
    np.testing.assert_allclose(free.coef_[0], ref.coef_[0], atol=1e-4)
    np.testing.assert_allclose(free.intercept_, ref.intercept_, atol=1e-4)


def test_combiner_never_turns_a_scorer_upside_down(rng):
    # a scorer that anti-correlates with correctness in training gets weight 0, not < 0
    n = 200
    y = (rng.random(n) < 0.5).astype(int)
    records = _records(np.zeros((n, 2)), y, scores={"good": y + rng.normal(size=n),
                                                    "inverted": -2 * y + rng.normal(size=n)})
    w = fit(records, kind="combiner", grader="contains", model=MODEL).report["weights"]
    assert w["good"] > 0 and w["inverted"] == 0.0


def test_combiner_file_without_quantiles_is_applied_as_it_was_fitted(rng):
    # files written before the normal scores: median fill, indicators, standardise, logistic
    y = np.array([0, 1] * 30)
    records = _records(np.zeros((60, 2)), y, scores={"s": y + rng.normal(size=60)})
    params = fit(records, kind="combiner", grader="contains", model=MODEL).to_dict()["params"]
    del params["quantiles"], params["references"]
    x = np.array([[0.5], [np.nan], [3.0]])
    z = np.array([[0.5, 0.0], [params["fill"][0], 1.0], [3.0, 0.0]])
    logit = ((z - params["mean"]) / params["scale"]) @ params["coef"] + params["intercept"]
    np.testing.assert_allclose(predict_params(params, x), 1 / (1 + np.exp(-logit)))


def test_combiner_transfers_to_another_model_only_when_allowed(rng):
    y = np.array([0, 1] * 20)
    records = _records(np.zeros((40, 2)), y, scores={"s": y + rng.normal(size=40)})
    model = fit(records, kind="combiner", grader="contains", model=MODEL)
    fresh = _records(np.zeros((3, 2)), y[:3], scores={"s": np.array([0.0, 1.0, 2.0])},
                     prefix="n")
    gpt = {"backend": "openai", "model": "gpt"}
    with pytest.raises(ConfigMismatch, match="allow-other-model"):
        model.apply(fresh, run="x", backend=gpt)
    # the same model through another backend is the same model for scores
    assert model.check_compatible({**gpt, "model": "smollm2"}) is None
    out = model.apply(fresh, run="x", backend=gpt, allow_other_model=True)
    assert [s for s, _ in out] == sorted(s for s, _ in out)


def test_boosting_export_matches_sklearn(rng):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # small fits; oversubscribed OpenMP threads are slow

    x = rng.normal(size=(150, 3))
    y = ((x[:, 0] + x[:, 1] ** 2) > 0.8).astype(int)
    x[::6, 1] = np.nan
    params = fit_boosting(x, y, seed=0)
    ref = HistGradientBoostingClassifier(max_iter=100, learning_rate=0.05, max_leaf_nodes=8,
                                         min_samples_leaf=10, l2_regularization=1.0,
                                         early_stopping=False, random_state=0).fit(x, y)
    test = rng.normal(size=(40, 3))
    test[::4, 1] = np.nan
    assert np.allclose(predict_boosting(params, test), ref.predict_proba(test)[:, 1])


def test_combiner_boosting_reports_importances_and_round_trips(tmp_path, rng):
    n = 150
    y = (rng.random(n) < 0.5).astype(int)
    a = np.where(y == 1, rng.normal(1.5, 1, n), rng.normal(0, 1, n))
    records = _records(np.zeros((n, 2)), y, scores={"a": a, "b": rng.normal(size=n)})
    model = fit(records, kind="combiner", grader="contains", model=MODEL, estimator="boosting")
    assert model.params["type"] == "boosting"
    assert model.report["importances"]["a"] > model.report["importances"]["b"]
    again = Learned.load(model.save(tmp_path / "c.json"))
    assert [s for s, _ in again.predict(records)] == [s for s, _ in model.predict(records)]


def test_fit_rejects_bad_options(rng):
    recs = _records(np.zeros((10, 2)), np.array([0, 1] * 5))
    with pytest.raises(InvalidInputError, match="kind"):
        fit(recs, kind="nope", grader="contains", model=MODEL)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="boosting is for the combiner"):
        fit(recs, kind="probe", grader="contains", model=MODEL, estimator="boosting")
    with pytest.raises(InvalidInputError, match="grader"):
        fit(recs, kind="probe", grader="exact", model=MODEL)
    with pytest.raises(InvalidInputError, match="layer"):
        fit(recs, kind="probe", grader="contains", model=MODEL, layer="99")


# ------------------------------------------------------------------ CLI on a stored run


def _store_run(path, records, *, model=MODEL):
    from confide.store.run_store import RunStore

    config = {"task": {"name": "synthetic"}, "grader": "contains", "scorers": ["msp"], "seed": 0}
    with RunStore.open(path, config) as store:
        store.set_meta("backend", model)
        for i, r in enumerate(records):
            store.put(r, i)
    return path


def test_cli_fit_then_eval_with_on_own_and_other_run(tmp_path, rng):
    from typer.testing import CliRunner

    from confide.cli import app

    x, y, _ = _separable(rng, n=80, d=8)
    msp = np.where(y == 1, 0.0, -1.0) + rng.normal(size=80)
    own = _store_run(tmp_path / "a", _records(x, y, scores={"msp": msp}))
    other = _store_run(tmp_path / "b", _records(x[:30], y[:30], scores={"msp": msp[:30]},
                                                prefix="o"))
    runner = CliRunner()
    probe = tmp_path / "probe.json"
    res = runner.invoke(app, ["fit", str(own), "--kind", "probe", "--layer", "8", "-o",
                              str(probe), "--name", "p8"])
    assert res.exit_code == 0, res.output
    assert "cross-fitted AUROC" in res.output and probe.exists()
    comb = tmp_path / "comb.json"
    res = runner.invoke(app, ["fit", str(own), "--kind", "combiner", "-o", str(comb)])
    assert res.exit_code == 0, res.output
    assert "msp" in res.output and "weight" in res.output
    for run_dir in (own, other):
        table = tmp_path / f"{run_dir.name}.json"
        res = runner.invoke(app, ["eval", str(run_dir), "--with", str(probe), "--with", str(comb),
                                  "--resamples", "50", "--json", str(table)])
        assert res.exit_code == 0, res.output
        rows = {r["scorer"]: r for r in json.loads(table.read_text())["scorers"]}
        assert {"msp", "p8", f"combiner:{Path(own).name}"} <= set(rows)
        if run_dir == own:  # cross-fitted scores on the training run
            assert rows["p8"]["n_nan"] == 0 and rows["p8"]["auroc"][0] > 0.8
        else:  # items o0.. are new: scored by the final model
            assert rows["p8"]["n"] == 30

    from confide import api

    run = api.apply_learned(api.open_run(own), [probe])
    model = Learned.load(probe)
    assert [r.scores["p8"] for r in run.records] == [model.oof[r.item.id] for r in run.records]


def test_cli_fit_refuses_run_of_another_model_and_bad_kind(tmp_path, rng):
    from typer.testing import CliRunner

    from confide.cli import app

    x, y, _ = _separable(rng, n=40, d=4)
    own = _store_run(tmp_path / "a", _records(x, y))
    gemma = _store_run(tmp_path / "g", _records(x, y, prefix="g"),
                       model={**MODEL, "model": "gemma3-270m"})
    probe = tmp_path / "p.json"
    runner = CliRunner()
    assert runner.invoke(app, ["fit", str(own), "-o", str(probe)]).exit_code == 0
    res = runner.invoke(app, ["eval", str(gemma), "--with", str(probe)])
    assert res.exit_code == 1 and "ConfigMismatch" in res.output
    res = runner.invoke(app, ["fit", str(own), "--kind", "tree", "-o", str(probe)])
    assert res.exit_code == 1 and "unknown kind" in res.output


def test_cli_run_rejects_bad_hidden_layers():
    from typer.testing import CliRunner

    from confide.cli import app

    res = CliRunner().invoke(app, ["run", "--hidden-layers", "8,last", "--limit", "1"])
    assert res.exit_code == 2 and "comma-separated integers" in res.output


def test_combiner_refuses_infinite_scores_naming_scorer_and_item(rng):
    y = np.array([0, 1] * 20)
    a = rng.normal(size=40)
    a[3] = -np.inf
    with pytest.raises(InvalidInputError, match=r"score a of item 't3' is -inf") as err:
        fit(_records(np.zeros((40, 2)), y, scores={"a": a}), kind="combiner",
            grader="contains", model=MODEL)
    assert err.value.field == "scores.a"


def test_default_combiner_leaves_out_a_scorer_without_values_and_says_so(tmp_path, rng):
    """Issue "Numbers that hold under audit", item 12: on an imported run where
    meaningful_logprob has no value on any record (no answer is a function call), the
    default "every scorer" combiner was refused; it leaves that scorer out with a note,
    while naming it still fails."""
    from typer.testing import CliRunner

    from confide.cli import app
    from confide.runs.importing import import_file

    path = tmp_path / "answers.jsonl"
    rows = []
    for i in range(40):
        correct = i % 2
        first, second = -0.1 - 0.5 * (1 - correct) - rng.uniform(0, 0.4), -rng.uniform(0, 1)
        rows.append({"id": f"q{i}", "question": f"Q{i}?", "answer": "Paris is",
                     "tokens": ["Paris", " is"], "token_logprobs": [first, second],
                     "label": bool(correct)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = tmp_path / "run"
    import_file(path, run, scorers=["msp", "mean_logprob", "length", "meaningful_logprob"])
    runner = CliRunner()
    out = tmp_path / "combiner.json"
    res = runner.invoke(app, ["fit", str(run), "--kind", "combiner", "-o", str(out)])
    assert res.exit_code == 0, res.output
    shown = " ".join(res.output.split())
    assert "left out meaningful_logprob: no record has a value" in shown
    model = Learned.load(out)
    assert model.features == ["length", "mean_logprob", "msp"]
    assert set(model.report["left_out"]) == {"meaningful_logprob"}
    assert model.report["left_out"]["meaningful_logprob"] == (
        "no record has a value (40 of 40: the answer holds no parseable function call)")
    assert any("meaningful_logprob" in note for note in model.report["notes"])
    # named explicitly, a scorer without values is still an error
    res = runner.invoke(app, ["fit", str(run), "--kind", "combiner", "-o", str(out),
                              "--scorers", "msp,meaningful_logprob"])
    assert res.exit_code == 1
    assert "no record has a value for meaningful_logprob" in " ".join(res.output.split())
