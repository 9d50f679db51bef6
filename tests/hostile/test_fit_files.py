"""Issue 38, fitted files: a ``confide fit`` file edited by hand, cut short or applied to a
run it does not fit is refused with the file and the field named, never a traceback and
never a silent 100 % coverage.

Every file here is written by a real ``confide fit`` on a small real stored run and then
edited the way a user (or a broken copy) would.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.learned import apply_to_run
from confide.learned.density import load_fitted
from confide.store.run_store import RunStore

runner = CliRunner()
MODEL = {"backend": "hf", "model": "smollm2", "kind": "alias", "dtype": "float32"}
N, D = 40, 6


def _records(n: int, *, prefix: str, seed: int, scores: tuple[str, ...] = ("msp", "length"),
             width: int = D, hidden: bool = True) -> list[Record]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.normal(size=(n, width)) + y[:, None]
    out = []
    for i in range(n):
        gen = Generation(text="a b", token_ids=[1, 2], tokens=["a", " b"],
                         token_logprobs=np.array([-0.5, -1.0 - i % 3]),
                         token_entropies=np.array([0.3, 0.7]),
                         token_kl_uniform=np.array([5.0, 6.0]),
                         hidden={"8:mean": x[i].astype(np.float16)} if hidden else None)
        rec = Record(item=Item(f"{prefix}{i}", f"question {prefix}{i}?", ["a"]), greedy=gen,
                     grades={"contains": float(y[i])})
        for name in scores:
            rec.scores[name] = float(y[i] + rng.normal())
        out.append(rec)
    return out


def _store(path: Path, records: list[Record], *, model: dict[str, Any] = MODEL,
           task: str = "synthetic") -> Path:
    config = {"task": {"name": task}, "grader": "contains", "scorers": ["msp"], "seed": 0}
    with RunStore.open(path, config) as store:
        store.set_meta("backend", model)
        for i, r in enumerate(records):
            store.put(r, i)
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> dict[str, Path]:
    """A stored run, and a probe, a lens, a combiner (logistic and boosting) and a
    Mahalanobis model fitted on it by ``confide fit``."""
    root = tmp_path_factory.mktemp("fit")
    run = _store(root / "run", _records(N, prefix="t", seed=0))
    out = {"run": run}
    for kind, extra in (("probe", ["--layer", "8"]), ("lens", ["--layer", "8"]),
                        ("combiner", []), ("boosting", ["--estimator", "boosting"]),
                        ("mahalanobis", ["--layer", "8"])):
        path = root / f"{kind}.json"
        res = runner.invoke(app, ["fit", str(run), "--kind",
                                  "combiner" if kind == "boosting" else kind, "-o", str(path),
                                  "--folds", "2", *extra])
        assert res.exit_code == 0, res.output
        out[kind] = path
    return out


Edit = Callable[[dict[str, Any], dict[str, Path]], Any]


def _edited(fitted: dict[str, Path], tmp_path: Path, kind: str, edit: Edit) -> Path:
    data = json.loads(fitted[kind].read_text())
    edit(data, fitted)
    path = tmp_path / f"edited-{kind}.json"
    path.write_text(json.dumps(data))
    return path


def _set(**values: Any) -> Edit:
    """Set ``a__b=v`` (``data["a"]["b"] = v``; a callable maps the old value)."""
    def edit(data: dict[str, Any], files: dict[str, Path]) -> None:
        for dotted, value in values.items():
            *parents, last = dotted.split("__")
            node = data
            for key in parents:
                node = node[key]
            node[last] = value(node[last]) if callable(value) else value
    return edit


# kind, the edit, the field the error must name
HOSTILE: list[tuple[str, str, Edit, str]] = [
    ("coef-cut-short", "probe", _set(params__coef=lambda c: c[:-2]), "params.coef"),
    ("mean-cut-short", "lens", _set(params__mean=lambda c: c[:3]), "params.mean"),
    ("coef-string", "probe", _set(params__coef=lambda c: ["0.5", *c[1:]]), "params.coef[0]"),
    ("intercept-string", "combiner", _set(params__intercept="big"), "params.intercept"),
    ("intercept-null", "probe", _set(params__intercept=None), "params.intercept"),
    ("scale-zero", "probe", _set(params__scale=lambda s: [0.0, *s[1:]]), "params.scale"),
    ("coef-not-list", "combiner", _set(params__coef=3.0), "params.coef"),
    ("combiner-as-probe", "combiner", _set(kind="probe"), "layer"),
    ("combiner-as-lens", "combiner", _set(kind="lens"), "layer"),
    ("probe-as-combiner", "probe", _set(kind="combiner"), "layer"),
    ("probe-as-lens", "probe", _set(kind="lens"), "features"),
    ("combiner-as-probe-with-layer", "combiner", _set(kind="probe", layer="8:mean"),
     "features"),
    ("combiner-params-in-probe", "probe", lambda d, files: d.update(
        params=json.loads(files["combiner"].read_text())["params"]), "params.indicators"),
    ("boosting-as-probe", "boosting", _set(kind="probe", layer="8:mean", features=[]),
     "params.type"),
    ("format-version", "probe", _set(format="confide-learned/9"), "format"),
    ("unknown-kind", "probe", _set(kind="tree"), "kind"),
    ("quantiles-cut-short", "combiner", _set(params__quantiles=lambda q: q[:1]),
     "params.quantiles"),
    ("references-cut-short", "combiner", _set(params__references=lambda r: r[:5]),
     "params.references"),
    ("features-extra-input", "combiner", _set(features=lambda f: [*f, "msp2"]), "params.coef"),
    ("tree-cycle", "boosting", _set(params__trees=lambda t: [
        {**t[0], "left": [0] * len(t[0]["left"])}, *t[1:]]), "params.trees[0].left[0]"),
    ("tree-feature-out-of-range", "boosting", _set(params__trees=lambda t: [
        {**t[0], "feature_idx": [9] * len(t[0]["feature_idx"])}, *t[1:]]),
     "params.trees[0].feature_idx[0]"),
    ("tree-cut-short", "boosting", _set(params__trees=lambda t: [
        {**t[0], "value": t[0]["value"][:1]}, *t[1:]]), "params.trees[0].value"),
    ("oof-string", "probe", _set(oof=lambda o: {k: "high" for k in o}), "oof.t0"),
    ("item-ids-string", "probe", _set(training__item_ids="t0,t1"), "training.item_ids"),
    ("training-missing", "probe", lambda d, files: d.pop("training"), "training"),
    ("layer-garbage", "probe", _set(layer="eight"), "layer"),
    ("name-empty", "probe", _set(name=""), "name"),
    ("unknown-field", "probe", _set(weights=[1, 2]), "weights"),
    ("train-ragged", "mahalanobis", _set(params__train=lambda t: [t[0], t[1][:2], *t[2:]]),
     "params.train[1]"),
    ("train-strings", "mahalanobis", _set(params__train=lambda t: [[str(v) for v in t[0]],
                                                                   *t[1:]]),
     "params.train[0][0]"),
]


@pytest.mark.parametrize(("case", "kind", "edit", "field"), HOSTILE,
                         ids=[c[0] for c in HOSTILE])
def test_hand_edited_fit_file_is_refused_naming_file_and_field(fitted, tmp_path, case, kind,
                                                                edit, field):
    path = _edited(fitted, tmp_path, kind, edit)
    with pytest.raises(InvalidInputError) as err:
        load_fitted(path)
    assert f"{path}: {field}:" in str(err.value)
    assert err.value.file == str(path) and err.value.field == field
    res = runner.invoke(app, ["eval", str(fitted["run"]), "--with", str(path),
                              "--resamples", "20"])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    flat = res.output.replace("\n", "")  # rich folds long paths
    assert "Traceback" not in flat and "InvalidInputError" in flat
    assert path.name in flat and field in flat


@pytest.mark.parametrize("cut", [0.3, 0.7, 0.99])
def test_fit_file_cut_short_is_refused_with_its_line(fitted, tmp_path, cut):
    text = fitted["combiner"].read_text()
    path = tmp_path / "cut.json"
    path.write_text(text[:int(len(text) * cut)])
    with pytest.raises(InvalidInputError, match=r"cut\.json:\d+: not JSON"):
        load_fitted(path)
    res = runner.invoke(app, ["eval", str(fitted["run"]), "--with", str(path)])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    assert "not JSON" in " ".join(res.output.split())


@pytest.mark.parametrize("content", [b"[1, 2]", b"null", b"\xff\xfe{}", b""])
def test_fit_file_that_is_not_an_object_is_refused(tmp_path, content):
    path = tmp_path / "odd.json"
    path.write_bytes(content)
    with pytest.raises(InvalidInputError, match="odd.json"):
        load_fitted(path)


def test_nan_where_a_number_belongs_is_refused(fitted, tmp_path):
    text = fitted["probe"].read_text()
    data = json.loads(text)
    data["params"]["coef"][1] = float("nan")
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(data))  # writes NaN, which json.loads reads back
    with pytest.raises(InvalidInputError, match=r"nan.json: params.coef\[1\]: expected a finite"):
        load_fitted(path)


def test_unedited_files_load_and_apply(fitted):
    notes: list[str] = []
    models = [load_fitted(fitted[k]) for k in ("probe", "lens", "combiner", "boosting",
                                                "mahalanobis")]
    records = apply_to_run(fitted["run"], models, notes=notes)
    for m in models:
        assert all(m.name in r.scores for r in records)
    # the notes say what each was fitted on
    assert any(str(fitted["run"]) in n and "probe" in n and "smollm2" in n for n in notes)


# -- applied to a run that does not fit ------------------------------------------------------

def test_combiner_whose_input_no_record_has_is_refused(fitted, tmp_path):
    only_msp = _store(tmp_path / "msp-only", _records(12, prefix="m", seed=1, scores=("msp",)))
    model = load_fitted(fitted["combiner"])
    with pytest.raises(InvalidInputError, match="input scorer 'length'") as err:
        apply_to_run(only_msp, [model])
    assert err.value.file == str(fitted["combiner"]) and err.value.field == "features"
    res = runner.invoke(app, ["eval", str(only_msp), "--with", str(fitted["combiner"])])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    assert "'length'" in res.output and "combiner.json" in res.output.replace("\n", "")


def test_combiner_whose_input_is_nan_everywhere_is_refused(fitted, tmp_path):
    records = _records(12, prefix="n", seed=2)
    for r in records:
        r.scores["length"] = float("nan")
        r.score_errors["length"] = "no answer"
    run = _store(tmp_path / "nan-run", records)
    with pytest.raises(InvalidInputError, match="every record's value is NaN"):
        apply_to_run(run, [load_fitted(fitted["combiner"])])


def test_combiner_naming_a_scorer_that_does_not_exist_is_refused(fitted, tmp_path):
    path = _edited(fitted, tmp_path, "combiner",
                   _set(features=lambda f: ["lenght" if n == "length" else n for n in f]))
    with pytest.raises(InvalidInputError, match="'lenght' is not a scorer") as err:
        apply_to_run(fitted["run"], [load_fitted(path)])
    assert "did you mean 'length'" in str(err.value)
    assert err.value.field == "features"


@pytest.mark.parametrize("kind", ["probe", "combiner", "mahalanobis"])
def test_model_fitted_on_another_model_needs_allow_other_model(fitted, tmp_path, kind):
    gemma = _store(tmp_path / "gemma", _records(12, prefix="g", seed=3),
                   model={**MODEL, "model": "gemma3-270m"})
    with pytest.raises(ConfigMismatch, match="gemma3-270m.*--allow-other-model"):
        apply_to_run(gemma, [load_fitted(fitted[kind])])
    res = runner.invoke(app, ["eval", str(gemma), "--with", str(fitted[kind])])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    assert "--allow-other-model" in res.output
    table = tmp_path / "table.json"
    res = runner.invoke(app, ["eval", str(gemma), "--with", str(fitted[kind]),
                              "--allow-other-model", "--resamples", "20", "--json", str(table)])
    assert res.exit_code == 0, res.output
    notes = json.loads(table.read_text())["notes"]
    assert any("gemma3-270m" in n and "--allow-other-model" in n for n in notes), notes


def test_allow_other_model_without_a_fitted_file_is_refused(fitted):
    res = runner.invoke(app, ["eval", str(fitted["run"]), "--allow-other-model"])
    assert res.exit_code == 1 and "--with" in res.output


def test_probe_on_a_run_without_its_hidden_state_is_refused(fitted, tmp_path):
    bare = _store(tmp_path / "bare", _records(12, prefix="b", seed=4, hidden=False))
    with pytest.raises(InvalidInputError, match="hidden state 8:mean; no record") as err:
        apply_to_run(bare, [load_fitted(fitted["probe"])])
    assert err.value.field == "layer" and "--hidden-layers 8" in str(err.value)


def test_probe_on_hidden_states_of_another_width_is_refused(fitted, tmp_path):
    wide = _store(tmp_path / "wide", _records(12, prefix="w", seed=5, width=D + 4))
    for kind in ("probe", "lens", "mahalanobis"):
        with pytest.raises(InvalidInputError, match=f"of {D} numbers.*states of {D + 4}"):
            apply_to_run(wide, [load_fitted(fitted[kind])])


def test_background_equal_to_the_training_run_is_refused(fitted, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(fitted["run"], copy)
    for background in (fitted["run"], copy):
        res = runner.invoke(app, ["fit", str(fitted["run"]), "--kind", "relative_mahalanobis",
                                  "--layer", "8", "--background", str(background),
                                  "-o", str(tmp_path / "rmd.json")])
        assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
        shown = " ".join(res.output.split())
        assert "background" in shown and "is the training run" in shown
        assert not (tmp_path / "rmd.json").exists()
    other = _store(tmp_path / "other", _records(N, prefix="o", seed=6), task="other")
    res = runner.invoke(app, ["fit", str(fitted["run"]), "--kind", "relative_mahalanobis",
                              "--layer", "8", "--background", str(other), "--folds", "2",
                              "-o", str(tmp_path / "rmd.json")])
    assert res.exit_code == 0, res.output


def test_fit_message_says_what_was_fitted_on_what(fitted, tmp_path):
    res = runner.invoke(app, ["fit", str(fitted["run"]), "--kind", "combiner", "--folds", "2",
                              "-o", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    shown = " ".join(res.output.split())
    assert "from 2 scorers (length, msp) fitted on" in shown
    assert str(fitted["run"]) in res.output.replace("\n", "")
    assert "'smollm2'" in shown and "graded with 'contains'" in shown


def test_fit_on_too_few_answers_quotes_the_runs_counts_not_a_folds(tmp_path):
    run = _store(tmp_path / "tiny", _records(4, prefix="s", seed=7))  # 2 correct of 4
    res = runner.invoke(app, ["fit", str(run), "--kind", "probe", "--layer", "8",
                              "-o", str(tmp_path / "p.json")])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    shown = " ".join(res.output.split())
    assert "4 graded with 'contains': 2 correct, 2 wrong" in shown
    assert "1 correct of 2" not in shown


def test_probe_on_an_import_says_imports_hold_no_hidden_states(tmp_path):
    from confide.runs.importing import import_file

    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps({
        "id": f"q{i}", "question": f"Q{i}?", "answer": "Paris", "tokens": ["Paris"],
        "token_logprobs": [-0.1 - i % 2], "label": bool(i % 2)}) + "\n" for i in range(12)))
    run = tmp_path / "imported"
    import_file(path, run, scorers=["msp"])
    res = runner.invoke(app, ["fit", str(run), "--kind", "probe", "-o", str(tmp_path / "p.json")])
    assert res.exit_code == 1
    shown = " ".join(res.output.split())
    assert "logs hold no hidden states" in shown and "--kind combiner" in shown
