"""The HTML report: curve maths against hand-computed cases and the metrics, the built file
(self-contained, escaped, panels present when their data exists), the CLI, a real-model run."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from confide.core.errors import InvalidInputError, StoreError
from confide.core.records import Generation
from confide.metrics import aurc_loss, auroc_score
from confide.report import build_report, write_comparison, write_report
from confide.report.data import risk_coverage_points, roc_points, sample_groups
from tests.report.runs import (
    HOSTILE_ANSWER,
    HOSTILE_QUESTION,
    HOSTILE_REFERENCE,
    HOSTILE_SAMPLE,
    make_records,
    store_run,
)


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def _parse(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


def _data(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="confide-data">(.*?)</script>', html,
                      re.S)
    assert block is not None
    return json.loads(block.group(1))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run"
    return store_run(path, make_records(80, graders=("contains", "exact"), hostile=True))


@pytest.fixture(scope="module")
def html(run_dir) -> str:
    return build_report([run_dir], n_resamples=50)


# --------------------------------------------------------------------------- curve maths


def test_roc_points_hand_computed():
    # thresholds 0.9, 0.8, 0.3, 0.1 over labels 1, 0, 1, 0
    assert roc_points([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0]) == [
        (0.0, 0.0), (0.0, 0.5), (0.5, 0.5), (0.5, 1.0), (1.0, 1.0)]


def test_roc_points_area_is_auroc(rng):
    conf = rng.normal(size=200).round(1)  # ties included
    correct = (rng.random(200) < 1 / (1 + np.exp(-conf))).astype(float)
    pts = np.array(roc_points(conf, correct))
    area = float(np.sum(np.diff(pts[:, 0]) * (pts[1:, 1] + pts[:-1, 1]) / 2))
    assert area == pytest.approx(auroc_score(conf, correct), abs=1e-4)


def test_roc_points_undefined_for_one_class():
    assert roc_points([0.2, 0.4], [1, 1]) is None


def test_risk_coverage_points_hand_computed():
    # most confident first: right, wrong, right, wrong
    assert risk_coverage_points([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0]) == [
        (0.25, 0.0), (0.5, 0.5), (0.75, 0.33333), (1.0, 0.5)]


def test_risk_coverage_points_mean_is_aurc(rng):
    conf = rng.normal(size=300).round(1)
    correct = (rng.random(300) < 0.6).astype(float)
    risks = np.array(risk_coverage_points(conf, correct))[:, 1]
    assert risks.mean() == pytest.approx(aurc_loss(conf, correct), abs=1e-4)


def test_risk_coverage_points_thins_long_curves(rng):
    pts = risk_coverage_points(rng.random(5000), rng.random(5000) < 0.5)
    assert len(pts) == 400 and pts[-1][0] == 1.0


def test_sample_groups_by_normalised_text():
    samples = [Generation(t) for t in ["Lyon", "Paris.", "the Paris", "paris", "Lyon", "Nice"]]
    groups = sample_groups(samples, "PARIS")
    assert [(g["n"], g["greedy"]) for g in groups] == [(3, True), (2, False), (1, False)]
    assert groups[0]["variants"] == ["Paris.", "the Paris", "paris"]
    assert groups[1]["text"] == "Lyon"


# --------------------------------------------------------------------------- the file


def test_report_builds_without_the_model(run_dir, tmp_path):
    out = tmp_path / "r.html"
    code = ("import sys; from confide.report import write_report; "
            f"write_report({str(run_dir)!r}, {str(out)!r}, n_resamples=20); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
    assert out.stat().st_size > 10_000


def test_report_is_self_contained(html):
    tags = _parse(html)
    assert not [t for t, _ in tags.tags if t in ("link", "img", "iframe", "object", "embed")]
    assert not [a for _, a in tags.tags
                if "src" in a or a.get("href", "#").startswith(("http", "//"))]
    # the only URL is the SVG namespace
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) <= {"http://www.w3.org/2000/svg"}


def test_report_escapes_hostile_text(html):
    tags = _parse(html)
    # two scripts only: the JSON data block and the page's own script
    assert [a.get("type") for t, a in tags.tags if t == "script"] == ["application/json", None]
    assert not any(k.startswith("on") for _, a in tags.tags for k in a)
    for text in (HOSTILE_ANSWER, HOSTILE_QUESTION, HOSTILE_SAMPLE, HOSTILE_REFERENCE):
        assert text not in html
    assert "<" not in tags.scripts[0]  # the data block cannot close itself
    data = json.loads(tags.scripts[0])
    first = data["runs"][0]["items"][0]
    assert (first["a"], first["q"]) == (HOSTILE_ANSWER, HOSTILE_QUESTION)
    assert HOSTILE_REFERENCE in first["refs"]


def test_report_script_builds_no_html_from_strings():
    script = resources.files("confide.report").joinpath("assets", "report.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "</script"):
        assert sink not in script


def test_report_content_security_policy_allows_only_its_script(html):
    import base64
    import hashlib

    tags = _parse(html)
    policy = next(a["content"] for t, a in tags.tags
                  if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    script = tags.scripts[1]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy


def test_report_shows_every_panel(html):
    for anchor in ('id="summary"', 'id="curves"', 'id="calibration"', 'id="length"',
                   'id="graders"', 'id="items"', 'class="roc"', 'class="risk-coverage"',
                   'class="reliability"', 'class="length-bias"', 'class="grader-pairs"'):
        assert anchor in html
    assert 'id="paired"' not in html  # one run: nothing to pair
    assert "NaN on 5 item(s): no token log-probabilities" in html
    assert "baseline" in html


def test_report_explorer_data(html):
    run = _data(html)["runs"][0]
    assert [s["name"] for s in run["scorers"]][-1] == "length" or "length" in [
        s["name"] for s in run["scorers"]]
    assert len(run["items"]) == 80 and run["graders"] == ["contains", "exact"]
    item = run["items"][1]
    assert set(item) >= {"q", "a", "refs", "g", "s", "e", "tok", "cl", "ns"}
    token, logprob, entropy, alternatives = item["tok"][0]
    assert isinstance(token, str) and logprob <= 0 and entropy >= 0
    assert alternatives[0][0] == token and len(alternatives) == 3
    assert item["ns"] == 3 and sum(g["n"] for g in item["cl"]) == 3
    # the samples in words: the same clusters as the list, largest first
    assert item["sm"].startswith(("Most likely", "Almost certainly"))
    assert item["cl"][0]["text"] in item["sm"]
    assert run["items"][5]["s"]["msp"] is None and "msp" in run["items"][5]["e"]


def test_report_adds_length_baseline_when_missing(tmp_path):
    records = make_records(30)
    for r in records:
        del r.scores["length"]
    path = store_run(tmp_path / "run", records, scorers=("msp", "mean_entropy"))
    html = build_report([path], n_resamples=20)
    assert "computed for the evaluation" in html
    assert "length" in [s["name"] for s in _data(html)["runs"][0]["scorers"]]


def test_report_without_samples_or_second_grader(tmp_path):
    path = store_run(tmp_path / "run", make_records(12, n_samples=0))
    html = build_report([path], n_resamples=20)
    assert 'id="graders"' not in html and "grouped by normalised" not in html


def test_report_on_tiny_run_explains_missing_panels(tmp_path):
    path = store_run(tmp_path / "run", make_records(2, n_samples=0))
    html = build_report([path], n_resamples=20)
    assert "cross-fitting needs at least 2 correct and 2 wrong answers" in html
    assert "needs at least 3 graded items" in html


def test_report_on_missing_run_raises(tmp_path):
    with pytest.raises(StoreError, match="no run here"):
        write_report(tmp_path / "nothing")


def test_report_default_path_is_in_the_run(run_dir):
    assert write_report(run_dir, n_resamples=10) == run_dir / "report.html"
    assert (run_dir / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_comparison_pairs_shared_items(tmp_path):
    a = store_run(tmp_path / "a", make_records(60, seed=1), model="model-a")
    b = store_run(tmp_path / "b", make_records(40, seed=2, skill=0.5), model="model-b")
    c = store_run(tmp_path / "c", make_records(20, seed=3, id_prefix="other"), model="model-c")
    out = write_comparison([a, b, c], tmp_path / "cmp.html", n_resamples=50)
    html = out.read_text()
    assert 'id="paired"' in html and "on 40 shared item(s)" in html
    assert "share no graded items" in html
    assert [r["name"] for r in _data(html)["runs"]] == ["a", "b", "c"]
    assert html.count('class="run" data-run="b"') >= 4  # every panel side by side


def test_comparison_needs_two_runs(run_dir, tmp_path):
    with pytest.raises(InvalidInputError, match="at least two"):
        write_comparison([run_dir], tmp_path / "x.html")


def test_report_of_5000_items_is_built(big_run, tmp_path):
    out = write_report(big_run, tmp_path / "big.html", n_resamples=20)
    run = _data(out.read_text())["runs"][0]
    assert len(run["items"]) == 5000
    assert out.stat().st_size < 40_000_000


# --------------------------------------------------------------------------- CLI


def test_cli_report_and_compare(run_dir, tmp_path):
    from confide.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["report", str(run_dir), "-o", str(tmp_path / "r.html"),
                               "--resamples", "20"])
    assert done.exit_code == 0, done.output
    assert "wrote" in done.output and (tmp_path / "r.html").exists()
    other = store_run(tmp_path / "b", make_records(30, seed=4))
    done = runner.invoke(app, ["compare", str(run_dir), str(other), "-o",
                               str(tmp_path / "c.html"), "--resamples", "20"])
    assert done.exit_code == 0, done.output
    assert 'id="paired"' in (tmp_path / "c.html").read_text()


def test_cli_compare_one_run_is_an_error(run_dir):
    from confide.cli import app

    done = CliRunner().invoke(app, ["compare", str(run_dir)])
    assert done.exit_code == 1 and "at least two runs" in done.output


def test_cli_report_missing_run_is_an_error(tmp_path):
    from confide.cli import app

    done = CliRunner().invoke(app, ["report", str(tmp_path / "none")])
    assert done.exit_code == 1 and "StoreError" in done.output


def _summary_cells(html: str) -> dict[str, list[str]]:
    """Scorer name -> the text of its summary-table cells (metrics, ECE, …)."""
    table = re.search(r'<table class="summary">(.*?)</table>', html, re.S).group(1)
    out = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]:
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                           row, re.S)]
        out[cells[0].split()[0]] = cells[1:]
    return out


def test_report_numbers_equal_confide_eval_json(run_dir, tmp_path):
    from confide.cli import app
    from confide.core.formatting import fmt_interval

    out = tmp_path / "eval.json"
    done = CliRunner().invoke(app, ["eval", str(run_dir), "--resamples", "40", "--json",
                                    str(out)])
    assert done.exit_code == 0, done.output
    evaluation = json.loads(out.read_text())
    html = build_report([run_dir], n_resamples=40)
    # the page carries the very evaluation `confide eval --json` writes ...
    assert _data(html)["runs"][0]["evaluation"] == evaluation
    # ... and shows every metric of every scorer from it
    cells = _summary_cells(html)
    metrics = evaluation["options"]["metrics"]
    assert metrics == ["auroc", "prr", "aurc"]
    assert sorted(cells) == sorted(s["scorer"] for s in evaluation["scorers"])
    for scorer in evaluation["scorers"]:
        shown = cells[scorer["scorer"]]
        for j, m in enumerate(metrics):
            value = tuple(math.nan if v is None else v for v in scorer[m])
            assert shown[j] == fmt_interval(value), (scorer["scorer"], m)
        ece = scorer["calibrated"]["ece"][0]
        assert shown[len(metrics)] == ("–" if ece is None else f"{ece:.3f}")


# --------------------------------------------------------------------------- real model


@pytest.mark.model
def test_report_of_a_real_model_run(hf_model, tmp_path):
    from confide import api
    from confide.cli import app

    run = api.generate_and_evaluate(hf_model, task="triviaqa", limit=4, max_new_tokens=16,
                                    out=tmp_path / "real")
    page = tmp_path / "real" / "report.html"
    # `confide run` on the stored run: nothing to generate (no model load); report by default
    args = ["run", "--task", "triviaqa", "--limit", "4", "--max-new-tokens", "16",
            "--model", run.config["model"], "--out", str(run.path)]
    done = CliRunner().invoke(app, [*args, "--no-report"])
    assert done.exit_code == 0, done.output
    assert not page.exists()
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "report written to" in done.output and page.exists()
    data = _data(page.read_text())["runs"][0]
    assert len(data["items"]) == 4
    record = run.records[0]
    item = data["items"][0]
    assert item["a"] == record.greedy.text
    assert [t[0] for t in item["tok"]] == record.greedy.tokens
    assert item["tok"][0][1] == pytest.approx(float(record.greedy.token_logprobs[0]), abs=1e-4)
    # every number of the report is the one `confide eval --json` gives for the run
    done = CliRunner().invoke(app, ["eval", str(run.path), "--json", str(tmp_path / "e.json")])
    assert done.exit_code == 0, done.output
    assert data["evaluation"] == json.loads((tmp_path / "e.json").read_text())


def test_run_view_length_audit_says_when_there_is_no_lead():
    from confide.report.data import run_view

    records = make_records(40, n_samples=0)
    for r in records:  # correctness follows length exactly; the scorer is its reverse
        r.grades["contains"] = float(r.greedy.n_tokens <= 3)
        r.scores["mean_entropy"] = float(r.greedy.n_tokens)
    view = run_view(records, name="x", grader="contains", n_resamples=10)
    by_name = {s.name: s for s in view.scorers}
    assert by_name["length"].length["lead"] is None
    assert by_name["mean_entropy"].length["lead"] is False
    assert by_name["length"].metrics["auroc"][0] == 1.0


def test_report_draws_raw_calibration_only_for_probabilities(tmp_path):
    # msp here and lexical_similarity lie in [0, 1] but are no probability of being right;
    # p_true is: only it gets a raw ECE and a raw reliability diagram
    from confide.report.data import run_view

    records = make_records(40, n_samples=0)
    for r in records:
        r.scores["p_true"] = r.scores["lexical_similarity"] = r.scores["msp"]
    view = run_view(records, name="x", grader="contains", n_resamples=10)
    raw = {s.name for s in view.scorers if s.row.raw_calibration is not None}
    assert raw == {"p_true"}
    path = store_run(tmp_path / "run", records,
                     scorers=("msp", "p_true", "lexical_similarity", "length"))
    html = build_report([path], n_resamples=10)
    assert len(re.findall(r'<figure class="reliability raw">', html)) == 1
    assert "p_true (raw)" in html and "msp (raw)" not in html


def test_sample_groups_follow_the_judge_clusters():
    from confide.equivalence import judges

    samples = [Generation(t) for t in ["12 apples", "12", "13", "twelve"]]
    groups = sample_groups(samples, "It is 12.", judge=judges.make_judge("numeric"))
    assert [(g["n"], g["greedy"]) for g in groups] == [(2, True), (1, False), (1, False)]
    assert groups[0]["variants"] == ["12 apples", "12"]


def test_report_says_how_samples_are_clustered(html):
    assert ("clusters of equal meaning by the run&#39;s exact judge" in html
            or "grouped by normalised exact text" in html)
