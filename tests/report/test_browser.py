"""The report in a real browser: Debian's headless Chromium opens it from a file URL.

Checks that it renders without console errors (a blocked script or a CSP
violation counts as one), that the key elements exist, that the item explorer
filters, sorts and paginates, and that hostile text never runs. Screenshots go
to ``$CONFIDE_ARTIFACTS`` (default ``ci-artifacts``), which CI keeps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from confide.report import write_comparison, write_report
from tests.report.browser import Browser, Page, find_chromium
from tests.report.runs import HOSTILE_ANSWER, HOSTILE_SAMPLE, make_records, store_run

ARTIFACTS = Path(os.environ.get("CONFIDE_ARTIFACTS", "ci-artifacts"))


@pytest.fixture(scope="module")
def browser():
    path = find_chromium()
    if path is None:
        pytest.fail("Chromium is not installed: run scripts/setup.sh "
                    "(apt-get install chromium) for the browser tests")
    with Browser(path) as b:
        yield b


def _set(page: Page, element_id: str, value: str) -> int:
    """Set a control as a user would and return the explorer's match count."""
    page.eval(f"""(function () {{
        var el = document.getElementById({json.dumps(element_id)});
        el.value = {json.dumps(value)};
        el.dispatchEvent(new Event("input"));
        el.dispatchEvent(new Event("change"));
    }})()""")
    return _count(page)


def _count(page: Page) -> int:
    return int(page.eval("document.getElementById('explorer-count').getAttribute('data-count')"))


def _rows(page: Page) -> list[str]:
    return page.eval("Array.from(document.querySelectorAll('#explorer-table tr.item'))"
                     ".map(function (r) { return r.getAttribute('data-id'); })")


def _nothing_ran(page: Page) -> None:
    assert page.eval("typeof window.__pwned") == "undefined"
    assert page.eval("document.querySelectorAll('img, iframe, object, embed').length") == 0
    assert page.eval("document.querySelectorAll('script').length") == 2
    assert page.eval("document.querySelectorAll('[onerror], [onload]').length") == 0


def test_report_in_browser(browser, tmp_path):
    records = make_records(80, graders=("contains", "exact"), hostile=True)
    run = store_run(tmp_path / "run", records)
    page = browser.open(write_report(run, n_resamples=50).resolve().as_uri())
    assert page.problems() == []
    assert page.eval("document.getElementById('explorer').getAttribute('data-ready')") == "true"

    # key elements
    assert page.eval("document.querySelectorAll('table.summary tbody tr').length") == 3
    assert page.eval("document.querySelectorAll('figure.roc polyline.series').length") == 3
    assert page.eval(
        "document.querySelectorAll('figure.risk-coverage polyline.series').length") == 3
    assert page.eval("document.querySelectorAll('figure.reliability:not(.raw) svg').length") == 3
    # msp's values here lie in [0, 1], but it is no probability of being right
    # (ScorerSpec.probability): no raw calibration is drawn for it
    assert page.eval("document.querySelectorAll('figure.reliability.raw svg').length") == 0
    assert page.eval("document.querySelectorAll('table.length-bias tbody tr').length") == 3
    assert page.eval("document.querySelectorAll('table.grader-pairs tbody tr').length") == 1
    assert len(_rows(page)) == 50 and _count(page) == 80
    assert page.eval("document.querySelectorAll('#explorer-table .tok[title]').length") > 50

    # filters: correct/wrong, grader, confidence range, search; sort
    wrong = [r for r in records if r.grades["contains"] < 0.5]
    assert _set(page, "explorer-filter", "wrong") == len(wrong)
    assert _set(page, "explorer-grader", "exact") == sum(r.grades["exact"] < 0.5 for r in records)
    _set(page, "explorer-grader", "contains")
    assert _set(page, "explorer-min", "0.3") == sum(
        1 for r in wrong if not np.isnan(r.scores["msp"]) and r.scores["msp"] >= 0.3)
    _set(page, "explorer-filter", "correct")
    assert _set(page, "explorer-max", "0.6") == sum(
        1 for r in records if r.grades["contains"] >= 0.5 and not np.isnan(r.scores["msp"])
        and 0.3 <= r.scores["msp"] <= 0.6)
    for control, value in (("explorer-min", ""), ("explorer-max", ""), ("explorer-filter", "all")):
        _set(page, control, value)
    assert _set(page, "explorer-search", "question number 7") == 11  # 7 and 70..79
    _set(page, "explorer-search", "")
    _set(page, "explorer-sort", "conf-desc")
    best = max((r for r in records if not np.isnan(r.scores["msp"])),
               key=lambda r: r.scores["msp"])
    assert _rows(page)[0] == best.item.id

    # legend toggles hide a scorer's curves
    page.eval("document.querySelector('.series-toggle').click()")
    assert page.eval("document.querySelectorAll('polyline.series.hidden').length") >= 2

    # the hostile item: open its details; its text shows as text and nothing runs
    _set(page, "explorer-sort", "position")
    page.eval("document.querySelector('#explorer-table tr.item').click()")
    detail = page.eval("document.querySelector('#explorer-table tr.detail').textContent")
    assert HOSTILE_ANSWER in detail and "samples in" in detail
    if any(s.text == HOSTILE_SAMPLE for s in records[0].samples):
        assert HOSTILE_SAMPLE in detail
    assert "alternatives" in page.eval(
        "document.querySelector('#explorer-table .tok').getAttribute('title')")
    _nothing_ran(page)
    assert page.problems() == []
    shot = page.screenshot(ARTIFACTS / "report.png")
    assert shot.stat().st_size > 20_000


def test_comparison_in_browser(browser, tmp_path):
    a = store_run(tmp_path / "model-a", make_records(60, seed=1, hostile=True), model="a")
    b = store_run(tmp_path / "model-b", make_records(40, seed=2, skill=0.5), model="b")
    page = browser.open(write_comparison([a, b], tmp_path / "cmp.html",
                                         n_resamples=50).resolve().as_uri())
    assert page.problems() == []
    assert page.eval("document.querySelectorAll('table.paired tbody tr').length") == 7
    assert page.eval("document.querySelectorAll('#summary .run').length") == 2
    assert _count(page) == 60
    assert _set(page, "explorer-run", "1") == 40
    page.eval("document.querySelector('#explorer-table tr.item').click()")
    assert "model-a" in page.eval(
        "document.querySelector('#explorer-table tr.detail .other-runs').textContent")
    _nothing_ran(page)
    assert page.problems() == []
    page.screenshot(ARTIFACTS / "compare.png")


def test_report_of_5000_items_opens_and_paginates(browser, big_run, tmp_path):
    page = browser.open(write_report(big_run, tmp_path / "big.html",
                                     n_resamples=20).resolve().as_uri())
    assert page.problems() == []
    assert _count(page) == 5000 and len(_rows(page)) == 50
    assert page.eval("document.getElementById('explorer-page').textContent") == "page 1 of 100"
    page.eval("document.getElementById('explorer-next').click()")
    assert _rows(page)[0] == "q50"
    assert _set(page, "explorer-filter", "wrong") == sum(
        r.grades["contains"] < 0.5 for r in make_records(5000, n_samples=2))
    assert page.problems() == []
    page.screenshot(ARTIFACTS / "report-5000.png", full_page=False)
