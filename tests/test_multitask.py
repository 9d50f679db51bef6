"""A probe fitted on several tasks at once: equal, uncertainty (Kendall et al.) and per-task
weighting, their file, and the refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.learned import Learned, apply_to_run, fit, run_digest
from confide.learned.multitask import (
    Task,
    _objective,
    fit_multitask,
    fit_runs,
    joint_logistic,
    task_folds,
)

MODEL = {"backend": "hf", "model": "smollm2", "kind": "alias", "dtype": "float32"}


def _records(hidden: np.ndarray, correct: np.ndarray, *, prefix: str,
             layer: str = "8:mean") -> list[Record]:
    out = []
    for i, (vec, c) in enumerate(zip(hidden, correct, strict=True)):
        gen = Generation(text="a", token_ids=[1, 2], token_logprobs=np.array([-0.5, -1.0 - i % 3]),
                         token_entropies=np.array([0.3, 0.7]),
                         token_kl_uniform=np.array([5.0, 6.0]),
                         hidden={layer: vec.astype(np.float16)})
        out.append(Record(item=Item(f"{prefix}{i}", "q?", ["a"]), greedy=gen,
                          grades={"contains": float(c)}))
    return out


def _informative(rng, direction, n, noise=0.3):
    x = rng.normal(size=(n, direction.size))
    return x, (x @ direction + noise * rng.normal(size=n) > 0).astype(int)


def _noise(rng, d, n):
    return rng.normal(size=(n, d)), rng.permutation(np.r_[np.ones(n // 2), np.zeros(n - n // 2)]
                                                    ).astype(int)


def _direction(rng, d):
    v = rng.normal(size=d)
    return v / np.linalg.norm(v)


def _cosine(fitted, direction):
    coef = fitted.coef / fitted.scale  # back to the raw inputs' scale
    return float(coef @ direction / np.linalg.norm(coef))


# ------------------------------------------------------------------ the joint objective


def test_joint_objective_by_hand():
    # two tasks, one input; w = 1, b = 0, s = (log 2, 0), C = 1
    z = np.array([[1.0], [-1.0], [2.0]])
    y = np.array([1.0, 1.0, 0.0])
    task = np.array([0, 0, 1])
    mean_size = 1.5  # 3 records, 2 tasks
    weight = np.array([0.75, 0.75, 1.5])  # n̄ / n_t
    theta = np.array([1.0, 0.0, math.log(2.0), 0.0])
    l0 = (math.log1p(math.exp(-1)) + math.log1p(math.exp(1))) / 2  # task 0's mean loss
    l1 = math.log1p(math.exp(2)) - 0.0  # task 1: y = 0, logit 2
    want = 1.5 * (0.5 * l0 + math.log(2.0)) + 1.5 * (l1 + 0.0) + 0.5
    value, grad = _objective(theta, z, y, task, weight, 2, mean_size, 1.0, True)
    assert value == pytest.approx(want, rel=1e-12)
    # the gradient, against central differences
    for j in range(theta.size):
        step = np.zeros_like(theta)
        step[j] = 1e-6
        up = _objective(theta + step, z, y, task, weight, 2, mean_size, 1.0, True)[0]
        down = _objective(theta - step, z, y, task, weight, 2, mean_size, 1.0, True)[0]
        assert grad[j] == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-7)


def test_learned_log_variance_is_the_log_of_the_tasks_mean_loss(rng):
    # the minimum over s_t of e^{-s_t} L_t + s_t is at s_t = log L_t
    d = 6
    x, y = _informative(rng, _direction(rng, d), 80, noise=1.0)
    task = np.r_[np.zeros(40, int), np.ones(40, int)]
    fitted = joint_logistic(x, y, task, n_tasks=2, C=0.1)
    p = fitted.predict(x)
    loss = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    mean_loss = np.array([loss[task == t].mean() for t in (0, 1)])
    np.testing.assert_allclose(fitted.log_variance, np.log(mean_loss), atol=1e-4)


def test_uncertainty_weighting_gives_a_noise_task_a_large_sigma_and_a_small_weight(rng):
    d = 16
    direction = _direction(rng, d)
    xa, ya = _informative(rng, direction, 120)
    xb, yb = _noise(rng, d, 120)  # correctness unrelated to the state
    x, y = np.vstack([xa, xb]), np.r_[ya, yb]
    task = np.r_[np.zeros(120, int), np.ones(120, int)]
    uncertain = joint_logistic(x, y, task, n_tasks=2, C=0.1, weighting="uncertainty")
    equal = joint_logistic(x, y, task, n_tasks=2, C=0.1, weighting="equal")
    sigma = np.exp(uncertain.log_variance / 2)
    weight = np.exp(-uncertain.log_variance)
    assert sigma[1] > 1.5 * sigma[0]  # the noise task's sigma grew
    assert weight[1] < 0.5 * weight[0]  # and its weight shrank
    assert equal.log_variance.tolist() == [0.0, 0.0]
    # down-weighting the noise, the probe finds the informative direction better
    assert _cosine(uncertain, direction) > _cosine(equal, direction) + 0.02


def test_equal_weights_reproduce_the_pooled_fit(rng):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    d = 5
    direction = _direction(rng, d)
    xa, ya = _informative(rng, direction, 60, noise=1.0)
    xb, yb = _informative(rng, direction, 60, noise=2.0)
    x, y = np.vstack([xa, xb]), np.r_[ya, yb]
    z = StandardScaler().fit_transform(x)
    ours = joint_logistic(x, y, np.r_[np.zeros(60, int), np.ones(60, int)], n_tasks=2, C=0.1,
                          weighting="equal")
    pooled = LogisticRegression(C=0.1, tol=1e-10, max_iter=10000).fit(z, y)
    np.testing.assert_allclose(ours.coef, pooled.coef_[0], atol=1e-5)
    assert ours.intercept == pytest.approx(pooled.intercept_[0], abs=1e-5)
    # tasks of unequal sizes: each task's mean loss weighs 1 (record weight n̄ / n_t)
    task = np.r_[np.zeros(90, int), np.ones(30, int)]
    ours = joint_logistic(x, y, task, n_tasks=2, C=0.1, weighting="equal")
    weights = np.where(task == 0, 60 / 90, 60 / 30)
    pooled = LogisticRegression(C=0.1, tol=1e-10, max_iter=10000).fit(z, y,
                                                                       sample_weight=weights)
    np.testing.assert_allclose(ours.coef, pooled.coef_[0], atol=1e-5)


def test_task_folds_follow_the_one_fold_rule_within_each_task():
    from confide.metrics.crossfit import crossfit_folds

    y = np.array([1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0])
    task = np.array([0] * 8 + [1] * 6)
    fold, k = task_folds(y, task, ["a", "b"], n_folds=5, seed=3)
    assert k == 3  # task b holds 3 right and 3 wrong
    assert fold[8:].tolist() == crossfit_folds(y[8:], n_folds=3, seed=3).tolist()
    assert fold[:8].tolist() == crossfit_folds(y[:8], n_folds=3, seed=3).tolist()
    with pytest.raises(InvalidInputError, match="task 'b'.*1 correct"):
        task_folds(np.r_[y[:8], [1, 0, 0, 0]], np.r_[task[:8], [1] * 4], ["a", "b"],
                   n_folds=5, seed=0)


# ------------------------------------------------------------------ fitting on records


def _tasks(rng, d=12, n=80):
    direction = _direction(rng, d)
    xa, ya = _informative(rng, direction, n)
    xb, yb = _informative(rng, direction, n, noise=0.6)
    xc, yc = _noise(rng, d, n)
    return direction, [Task("a", _records(xa, ya, prefix="a"), "contains", "da", "runs/a"),
                       Task("b", _records(xb, yb, prefix="b"), "contains", "db", "runs/b"),
                       Task("noise", _records(xc, yc, prefix="n"), "contains", "dn", "runs/n")]


def test_fit_multitask_uncertainty_records_the_tasks_and_their_sigmas(rng):
    _, tasks = _tasks(rng)
    model = fit_multitask(tasks, kind="probe", model=MODEL, weighting="uncertainty",
                          layer="8:mean")
    multi = model.multitask
    assert multi is not None and multi["weighting"] == "uncertainty"
    entries = {t["name"]: t for t in multi["tasks"]}
    assert entries["noise"]["sigma"] > entries["a"]["sigma"]
    assert entries["noise"]["weight"] < entries["a"]["weight"]
    assert entries["a"]["oof_auroc"] > 0.85 and abs(entries["noise"]["oof_auroc"] - 0.5) < 0.2
    # every item got a cross-fitted score; the report's AUROC is the mean over tasks
    assert all(len(t["oof"]) == 80 for t in multi["tasks"])
    assert model.report["oof_auroc"] == pytest.approx(
        np.mean([t["oof_auroc"] for t in multi["tasks"]]))
    assert model.training["n"] == 240 and len(model.training["item_ids"]) == 240


def test_per_task_fits_one_probe_per_task_and_applies_the_one_that_transfers(rng):
    _, tasks = _tasks(rng)
    model = fit_multitask(tasks, kind="probe", model=MODEL, weighting="per-task",
                          layer="8:mean")
    multi = model.multitask
    assert multi is not None and multi["applied"] in ("a", "b")  # never the noise task's
    for entry, task in zip(multi["tasks"], tasks, strict=True):
        alone = fit(task.records, kind="probe", grader="contains", model=MODEL, layer="8:mean")
        assert entry["params"] == alone.params  # exactly the single-run fit
        assert entry["oof"] == alone.oof
    applied = next(t for t in multi["tasks"] if t["name"] == multi["applied"])
    assert model.params == applied["params"]
    assert applied["transfer_auroc"] == max(t["transfer_auroc"] for t in multi["tasks"])
    assert multi["applied"] in model.report["applied"]


def test_multitask_refuses_bad_input(rng):
    _, tasks = _tasks(rng, n=20)
    with pytest.raises(InvalidInputError, match="two or more tasks"):
        fit_multitask(tasks[:1], kind="probe", model=MODEL)
    with pytest.raises(InvalidInputError, match="not a combiner"):
        fit_multitask(tasks, kind="combiner", model=MODEL)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="unknown weighting"):
        fit_multitask(tasks, kind="probe", model=MODEL, weighting="soft")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="named twice"):
        fit_multitask([tasks[0], tasks[0]], kind="probe", model=MODEL)


# ------------------------------------------------------------------ runs, files, the CLI


def _store_run(path, records, *, model=MODEL, task="synthetic"):
    from confide.store.run_store import RunStore

    config = {"task": {"name": task}, "grader": "contains", "scorers": ["msp"], "seed": 0}
    with RunStore.open(path, config) as store:
        store.set_meta("backend", model)
        for i, r in enumerate(records):
            store.put(r, i)
    return path


def _digest(path):
    from confide.store.run_store import RunStore

    with RunStore.open(path) as store:
        return run_digest(store.config, store.get_meta("backend"))


def test_file_round_trip_and_apply_on_training_runs_and_a_new_one(tmp_path, rng):
    direction, tasks = _tasks(rng, n=60)
    a = _store_run(tmp_path / "a", tasks[0].records, task="a")
    b = _store_run(tmp_path / "b", tasks[1].records, task="b")
    x, y = _informative(rng, direction, 30)
    new = _store_run(tmp_path / "new", _records(x, y, prefix="new") + tasks[0].records[:5],
                     task="c")
    model = fit_runs([a, b], kind="lens", weighting="uncertainty", layer="8")
    path = model.save(tmp_path / "mt.json")
    again = Learned.load(path)
    assert again.to_dict() == model.to_dict()
    assert [t["name"] for t in again.multitask["tasks"]] == ["a", "b"]
    assert again.multitask["tasks"][0]["run_digest"] == _digest(a)
    # each training run gets its own cross-fitted scores
    for run, entry in zip((a, b), again.multitask["tasks"], strict=True):
        scored = apply_to_run(run, [again])
        assert {r.item.id: r.scores[again.name] for r in scored} == entry["oof"]
    # a new run: the final model's scores, NaN for items of a training set
    notes: list[str] = []
    scored = apply_to_run(new, [again], notes=notes)
    values = [r.scores[again.name] for r in scored]
    assert all(math.isfinite(v) for v in values[:30]) and all(math.isnan(v) for v in values[30:])
    assert "tasks weighed uncertainty" in notes[0]
    # a single-run file is written as before: no multitask field
    single = fit(tasks[0].records, kind="probe", grader="contains", model=MODEL, layer="8")
    assert "multitask" not in single.to_dict()


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["multitask"].update(weighting="soft"), "multitask.weighting"),
    (lambda d: d["multitask"]["tasks"][1].update(sigma=3.0), "multitask.tasks[1].sigma"),
    (lambda d: d["multitask"]["tasks"][0].update(log_variance=9.0),
     "multitask.tasks[0].log_variance"),
    (lambda d: d["multitask"]["tasks"].pop(), "multitask.tasks"),
    (lambda d: d["multitask"].update(applied="a"), "multitask.applied"),
    (lambda d: d["multitask"]["tasks"][0]["oof"].update(zz=0.5), "multitask.tasks[0].oof.zz"),
])
def test_schema_refuses_an_edited_multitask_file(tmp_path, rng, edit, field):
    _, tasks = _tasks(rng, n=40)
    model = fit_multitask(tasks[:2], kind="probe", model=MODEL, layer="8:mean",
                          weighting="uncertainty")
    data = model.to_dict()
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError) as err:
        Learned.load(path)
    assert err.value.field == field and str(path) in str(err.value)


def test_schema_refuses_a_combiner_with_tasks(tmp_path, rng):
    _, tasks = _tasks(rng, n=40)
    probe = fit_multitask(tasks[:2], kind="probe", model=MODEL, layer="8:mean")
    records = tasks[0].records
    for r in records:
        r.scores["msp"] = float(rng.normal())
    data = fit(records, kind="combiner", grader="contains", model=MODEL).to_dict()
    data["multitask"] = probe.multitask
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError, match="only a probe or lens") as err:
        Learned.load(path)
    assert err.value.field == "multitask"


def test_schema_checks_each_per_task_probe(tmp_path, rng):
    _, tasks = _tasks(rng, n=40)
    data = fit_multitask(tasks[:2], kind="probe", model=MODEL, weighting="per-task",
                         layer="8:mean").to_dict()
    data["multitask"]["tasks"][1]["params"]["coef"].pop()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError, match="expected 12 numbers") as err:
        Learned.load(path)
    assert err.value.field.startswith("multitask.tasks[1].params.")


def test_runs_of_different_models_are_refused(tmp_path, rng):
    _, tasks = _tasks(rng, n=30)
    a = _store_run(tmp_path / "a", tasks[0].records, task="a")
    gemma = _store_run(tmp_path / "g", tasks[1].records, task="b",
                       model={**MODEL, "model": "gemma3-270m"})
    with pytest.raises(ConfigMismatch, match="gemma3-270m.*smollm2.*share no probe"):
        fit_runs([a, gemma], kind="probe")
    with pytest.raises(InvalidInputError, match="two or more runs"):
        fit_runs([a], kind="probe")
    with pytest.raises(InvalidInputError, match="given twice"):
        fit_runs([a, tmp_path / "a"], kind="probe")


def test_cli_fits_several_runs_and_eval_applies_the_file(tmp_path, rng):
    from typer.testing import CliRunner

    from confide.cli import app

    _, tasks = _tasks(rng, n=40)
    a = _store_run(tmp_path / "a", tasks[0].records, task="a")
    b = _store_run(tmp_path / "b", tasks[1].records, task="b")
    out = tmp_path / "mt.json"
    runner = CliRunner()
    res = runner.invoke(app, ["fit", str(a), str(b), "--layer", "8", "--weighting",
                              "uncertainty", "-o", str(out), "--name", "mt"])
    assert res.exit_code == 0, res.output
    assert "sigma" in res.output and "weight" in res.output and out.exists()
    table = tmp_path / "table.json"
    res = runner.invoke(app, ["eval", str(b), "--with", str(out), "--resamples", "20",
                              "--json", str(table)])
    assert res.exit_code == 0, res.output
    rows = {r["scorer"]: r for r in json.loads(table.read_text())["scorers"]}
    assert rows["mt"]["n_nan"] == 0
    res = runner.invoke(app, ["fit", str(a), "--weighting", "equal", "-o", str(out)])
    assert res.exit_code == 1 and "two or more runs" in res.output
    res = runner.invoke(app, ["fit", str(a), str(b), "--kind", "combiner", "-o", str(out)])
    assert res.exit_code == 1 and "probe or a lens" in res.output
