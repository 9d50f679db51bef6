"""The documentation site: its examples run, its commands exist, it builds and renders.

* Every ```` ```python ```` block of ``docs/**/*.md`` runs, page by page, each page in one
  namespace (a notebook) in a fresh folder with the bundled model, as tests/test_readme.py
  runs the README's; a block whose first line says it needs a server
  (``# needs an OpenAI-compatible server``) is left out (tests/test_integrations.py runs
  those calls against real servers). The Python example of one generated claim-scorer page
  runs too. ``confide.load_model()`` there returns the session's loaded bundled model
  (fixture ``hf_model``) instead of loading it once per page.
* Every ``confide ...`` line of a ```` ```console ```` block, hand-written or generated,
  names a command of ``confide --help`` and only options its ``--help`` lists.
* The generator (docs/gen_pages.py) reads a small quality file as the format says.
* ``mkdocs build --strict`` builds the site, and headless Chromium opens the home page, the
  scorer table and one scorer page: no console error, one table row per registered scorer,
  no broken image. Screenshots go to ``$CONFIDE_ARTIFACTS`` (default ``ci-artifacts``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from functools import cache
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from tests.report.browser import Browser, find_chromium

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ARTIFACTS = Path(os.environ.get("CONFIDE_ARTIFACTS", "ci-artifacts"))
PYTHON = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CONSOLE = re.compile(r"^```(?:console|bash)\n(.*?)^```", re.S | re.M)
SERVER = "# needs an OpenAI-compatible server"
# Scorers the docs' own examples register (docs/guides/plugins.md): not in the built table.
EXAMPLE_SCORERS = {"docs_worst_two"}
# The generated claim-scorer page whose Python example runs here (the others differ only
# in the name).
CLAIM_EXAMPLE = "claim_mean_logprob"
MKDOCS_ENV = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


def gen_pages() -> ModuleType:
    """docs/gen_pages.py as a module (mkdocs-gen-files runs it as a script)."""
    name = "confide_docs_gen_pages"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DOCS / "gen_pages.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def hand_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md"))


def python_blocks(text: str) -> list[str]:
    return [b for b in PYTHON.findall(text) if not b.startswith(SERVER)]


# --------------------------------------------------------------------------- examples


def test_the_site_has_python_examples_on_its_pages():
    with_code = [p.relative_to(DOCS).as_posix() for p in hand_pages()
                 if python_blocks(p.read_text(encoding="utf-8"))]
    assert {"getting-started.md", "guides/logs.md", "guides/calibration.md",
            "guides/plugins.md"} <= set(with_code)


@pytest.fixture
def bundled(hf_model, monkeypatch):
    """``confide.load_model()`` (no arguments: the bundled model) gives the session's loaded
    copy, so each page does not load it again; any other call loads as written."""
    import confide

    load = confide.load_model

    def load_model(*args, **options):
        return hf_model if not args and not options else load(*args, **options)

    monkeypatch.setattr(confide, "load_model", load_model)


@pytest.mark.model
@pytest.mark.parametrize("page", [p.relative_to(DOCS).as_posix() for p in hand_pages()
                                  if python_blocks(p.read_text(encoding="utf-8"))])
def test_a_pages_python_examples_run(page, tmp_path, monkeypatch, bundled):
    monkeypatch.chdir(tmp_path)  # files the examples write land here
    path = DOCS / page
    namespace: dict[str, object] = {"__name__": f"docs.{page}"}
    for code in python_blocks(path.read_text(encoding="utf-8")):
        exec(compile(code, str(path), "exec"), namespace)  # noqa: S102 (our own pages)


@pytest.mark.model
def test_a_generated_claim_scorer_example_runs(tmp_path, monkeypatch, bundled):
    from confide.scorers import SCORERS

    g = gen_pages()
    page = g.scorer_page(SCORERS[CLAIM_EXAMPLE], pieces=None, costs=([], {}), parity={})
    blocks = python_blocks(page)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], f"scorers/{CLAIM_EXAMPLE}.md", "exec"), namespace)  # noqa: S102
    answer = namespace["answer"]
    assert answer.record.claims  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- commands


@cache
def confide_help(*command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "confide.cli", *command, "--help"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"})
    assert done.returncode == 0, f"confide {' '.join(command)} --help: {done.stderr}"
    return done.stdout


def confide_lines(text: str) -> list[str]:
    """The ``confide ...`` commands of a page's console and bash blocks."""
    out = []
    for block in CONSOLE.findall(text):
        for line in block.splitlines():
            for part in line.split(";"):
                part = part.strip()
                if part.startswith("confide "):
                    out.append(part)
    return out


def all_console_lines() -> list[tuple[str, str]]:
    lines = [(p.relative_to(DOCS).as_posix(), line) for p in hand_pages()
             for line in confide_lines(p.read_text(encoding="utf-8"))]
    for path, text in gen_pages().pages(DOCS).items():
        if path.startswith("scorers/"):
            lines += [(path, line) for line in confide_lines(text)]
    return lines


def test_every_confide_command_on_the_site_exists_with_its_options():
    listed = set(re.findall(r"│ (\w+) ", confide_help()))
    lines = all_console_lines()
    assert len(lines) > 60  # the hand-written guides and one per generated scorer page
    problems = []
    for page, line in lines:
        words = shlex.split(line, comments=True)
        command = words[1]
        if command not in listed:
            problems.append(f"{page}: {line}: no command {command!r}")
            continue
        options = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", confide_help(command)))
        for word in words[2:]:
            option = word.split("=", 1)[0]
            if re.fullmatch(r"--?[a-zA-Z][\w-]*", option) and option not in options:
                problems.append(f"{page}: {line}: confide {command} has no {option}")
    assert problems == []


# --------------------------------------------------------------------------- the generator


def test_every_results_file_names_the_benchmark_that_reproduces_it():
    g = gen_pages()
    for path in sorted(g.RESULTS.glob("*.md")):
        command = g.reproducing_command(path.name, path.read_text(encoding="utf-8"))
        assert command, path
        script = re.search(r"benchmarks/[\w/]+\.py", command)
        assert script and (ROOT / script.group(0)).is_file(), (path.name, command)


QUALITY = {"pieces": [
    {"task": "triviaqa", "model": "smollm2", "items": 384, "accuracy": [0.07, 0.044, 0.094],
     "status": "ranked; no lead significant over all",
     "scorers": [{"scorer": "msp", "auroc": [0.747, 0.65, 0.837], "prr": [0.4, 0.2, 0.6],
                  "rank": 1, "n_nan": 0},
                 {"scorer": "length", "auroc": [0.544, 0.429, 0.648], "prr": [0.1, -0.1, 0.3],
                  "rank": 3, "n_nan": 0}]},
    {"task": "truthfulqa", "model": "smollm2", "items": 168,
     "accuracy": [0.226, 0.167, 0.292], "status": "ranked",
     "scorers": [{"scorer": "msp", "auroc": [0.70, 0.61, 0.79], "prr": [0.3, 0.1, 0.5],
                  "rank": 4, "n_nan": 2}]},
    {"task": "arc_easy", "model": "smollm2", "items": 264, "accuracy": [0.22, 0.17, 0.273],
     "status": "at chance: accuracy 0.22 reaches 1/options = 0.25",
     "scorers": [{"scorer": "msp", "auroc": [0.6, 0.5, 0.7], "prr": [0.1, 0.0, 0.2],
                  "rank": None, "n_nan": 0}]}]}


def test_quality_figures_come_from_the_quality_file(tmp_path):
    from confide.scorers import SCORERS

    g = gen_pages()
    path = tmp_path / "quality.json"
    path.write_text(json.dumps(QUALITY), encoding="utf-8")
    pieces = g.read_quality(path)
    specs = [SCORERS["msp"], SCORERS["length"]]
    table = g.scorer_table(specs, pieces, ([], {}), {}, link=lambda n: f"scorers/{n}.md")
    header, _, msp, length = table.splitlines()[:4]
    # the two ranked pieces get a column each; the piece at chance none
    assert "AUROC triviaqa × smollm2" in header and "AUROC truthfulqa × smollm2" in header
    assert "arc_easy" not in header
    assert "| 0.747 [0.650, 0.837] #1 | 0.700 [0.610, 0.790] #4 | 2.5 |" in msp
    assert "| 0.544 [0.429, 0.648] #3 | — | 3.0 |" in length
    assert "[`msp`](scorers/msp.md)" in msp

    page = g.scorer_page(SCORERS["msp"], pieces=pieces, costs=([], {}), parity={})
    rows = [ln for ln in page.splitlines() if ln.startswith("| triviaqa") or
            ln.startswith("| arc_easy") or ln.startswith("| truthfulqa")]
    assert rows[0] == ("| triviaqa × smollm2 | 384 | 0.070 [0.044, 0.094] | "
                       "0.747 [0.650, 0.837] | 0.400 [0.200, 0.600] | 1 | 0 | "
                       "0.544 [0.429, 0.648] | ranked; no lead significant over all |")
    assert rows[2].startswith("| arc_easy × smollm2 | 264 |") and "| — |" in rows[2]

    assert g.read_quality(tmp_path / "absent.json") is None
    assert "not there yet" in g.scorer_table(specs, None, ([], {}), {}, link=str)
    path.write_text(json.dumps({"pieces": [{"task": "x"}]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"quality\.json: pieces\[0\]"):
        g.read_quality(path)


def test_a_docstring_becomes_markdown_with_its_formula_and_references():
    g = gen_pages()
    doc = g.convert_docstring(
        "Negated entropy of the answer.\n\n"
        ".. math:: c = -\\frac{1}{T}\\sum_t H(p_t)\n\n"
        "Reads ``token_entropies`` (:func:`~confide.scorers.whitebox.mean_entropy`); "
        ":math:`T` tokens, p < 1.\n\n"
        "References: [1] A, 2020, \"One\"; [2] B, 2021, \"Two\".")
    assert doc.formulas == ["c = -\\frac{1}{T}\\sum_t H(p_t)"]
    assert "```latex\nc = -\\frac{1}{T}\\sum_t H(p_t)\n```" in doc.body
    assert "Reads `token_entropies` (`mean_entropy`); `T` tokens, p &lt; 1." in doc.body
    assert doc.references == ['A, 2020, "One"', 'B, 2021, "Two".']


def test_parity_rows_name_each_scorer_of_a_merged_row():
    g = gen_pages()
    rows = g.parity_rows(g.RESULTS / "parity.md")
    assert {"msp", "cocoa", "cocoa_mte", "eigv", "mahalanobis"} <= set(rows)
    assert any(r.section == "end to end" for r in rows["msp"])


# --------------------------------------------------------------------------- the site


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if importlib.util.find_spec("mkdocs") is None or \
            importlib.util.find_spec("mkdocs_gen_files") is None:
        pytest.skip("mkdocs is not installed (the docs extra: mkdocs-material, "
                    "mkdocstrings[python], mkdocs-gen-files)")
    out = tmp_path_factory.mktemp("site")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **MKDOCS_ENV})
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"mkdocs build --strict: {seconds:.1f} s, "
          f"{sum(1 for _ in out.rglob('*.html'))} HTML pages")
    return out


def registered() -> set[str]:
    from confide.scorers import SCORERS

    return {name for name in SCORERS if name not in EXAMPLE_SCORERS}


def test_the_site_has_a_page_per_scorer_and_per_results_file(site):
    assert {p.stem for p in (site / "scorers").glob("*.html")} == registered()
    assert {p.stem for p in (site / "results").glob("*.html")} == \
        {p.stem for p in (ROOT / "benchmarks" / "results").glob("*.md")} | {"index"}
    for page in ("index", "getting-started", "choosing", "api", "architecture", "changelog"):
        assert (site / f"{page}.html").is_file(), page


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on 127.0.0.1, as ``python -m http.server -d build/site`` serves
    it (search fetches its index, which a file:// page may not)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass


@pytest.fixture(scope="module")
def browser():
    path = find_chromium()
    if path is None:
        pytest.fail("Chromium is not installed: run scripts/setup.sh "
                    "(apt-get install chromium) for the browser tests")
    with Browser(path) as b:
        yield b


def _h1(page) -> str:
    return page.eval("document.querySelector('article h1').textContent").strip().rstrip("¶")


def _no_broken_image(page) -> None:
    broken = page.eval("Array.from(document.images).filter(function (i) {"
                       " return !i.complete || i.naturalWidth === 0; })"
                       ".map(function (i) { return i.src; })")
    assert broken == []


def test_home_table_and_a_scorer_page_render(served, browser):
    home = browser.open(f"{served}/index.html")
    assert home.problems() == []
    assert _h1(home) == "confide"
    assert home.eval("document.querySelectorAll('nav a[href]').length") > 10
    _no_broken_image(home)
    home.screenshot(ARTIFACTS / "docs-home.png")

    table_page = browser.open(f"{served}/choosing.html")
    assert table_page.problems() == []
    names = table_page.eval("""(function () {
        var t = Array.from(document.querySelectorAll('article table')).filter(function (t) {
            var th = t.querySelector('thead th'); return th && th.textContent.trim() === 'scorer';
        })[0];
        return Array.from(t.querySelectorAll('tbody tr')).map(function (r) {
            return r.querySelector('td a').textContent.trim(); });
    })()""")
    assert len(names) == len(set(names)) == len(registered())
    assert set(names) == registered()
    _no_broken_image(table_page)
    table_page.screenshot(ARTIFACTS / "docs-scorers.png")

    # a scorer's page, reached from its row as a reader would
    href = table_page.eval("document.querySelector('article a[href$=\"scorers/msp.html\"]')"
                           ".getAttribute('href')")
    msp = browser.open(f"{served}/{href}")
    assert msp.problems() == []
    assert _h1(msp) == "msp"
    headings = msp.eval("Array.from(document.querySelectorAll('article h2'))"
                        ".map(function (h) { return h.textContent.trim(); })")
    assert {"Definition", "Degenerate input", "Example"} <= {h.rstrip("¶") for h in headings}
    assert "\\log P(y \\mid x)" in msp.eval("document.querySelector('article pre').textContent")
    _no_broken_image(msp)
    msp.screenshot(ARTIFACTS / "docs-scorer-msp.png")
