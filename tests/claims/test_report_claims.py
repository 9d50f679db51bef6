"""The item explorer shows each long answer's claims, coloured by confidence, with grades."""

from __future__ import annotations

import pytest

from confide.grading.claims import ANSWER_GRADE
from confide.report import write_report
from confide.scorers.claim_split import split_claims
from tests.report.browser import Browser, find_chromium
from tests.report.runs import HOSTILE_ANSWER, make_records, store_run


@pytest.fixture(scope="module")
def browser():
    path = find_chromium()
    if path is None:
        pytest.fail("Chromium is not installed: run scripts/setup.sh "
                    "(apt-get install chromium) for the browser tests")
    with Browser(path) as b:
        yield b


def _long_records():
    records = make_records(12, hostile=True)
    for n, record in enumerate(records):
        record.greedy.text = (f"{HOSTILE_ANSWER} is claim one. Zürich is claim two. "
                              if n == 0 else f"Paris is big. Lyon is small {n}. Nice is warm.")
        record.greedy.tokens = []
        record.claims = split_claims(record.greedy.text)
        for k, claim in enumerate(record.claims):
            claim.scores = {"claim_support": (k + n) % 3 / 2, "claim_mean_logprob": -k}
            claim.grades = {"llm": float(k % 2 == 0)}
        record.grades[ANSWER_GRADE] = 0.5
    return records


def test_explorer_colours_claims_by_confidence(browser, tmp_path):
    records = _long_records()
    page = browser.open(write_report(store_run(tmp_path / "run", records),
                                     n_resamples=20).resolve().as_uri())
    assert page.problems() == []
    page.eval("document.querySelector('#explorer-table tr.item').click()")
    marks = page.eval("Array.from(document.querySelectorAll('tr.detail mark.claim'))"
                      ".map(function (m) { return [m.textContent, m.style.backgroundColor]; })")
    first = records[0]
    assert [m[0] for m in marks] == [c.text for c in first.claims]
    # claim_support 0, 0.5 (hue 0: red, 60: yellow) on the first answer
    assert marks[0][1] != marks[1][1] and all(m[1] for m in marks)
    table = page.eval("document.querySelector('tr.detail table.claims-table').textContent")
    assert "llm" in table and "claim_support" in table and "✓" in table and "✗" in table
    assert page.eval("typeof window.__pwned") == "undefined"
    assert page.eval("document.querySelectorAll('img, iframe, object, embed').length") == 0
    assert page.problems() == []
