"""Pages generated at build time (mkdocs-gen-files): nothing here is written by hand twice.

From the scorer registry (:data:`confide.scorers.SCORERS`, as ``confide scorers`` lists it)
and the files under ``benchmarks/results/``:

* ``choosing.md``: the hand-written guide with the scorer table put in place of its
  ``<!-- scorer-table -->`` line: one row per registered scorer (family, level, needs,
  cost, what a black-box API can feed, the measured cost per item, the quality figures of
  every ranked piece, parity with LM-Polygraph);
* ``scorers/NAME.md``: one page per scorer, from its registry entry and its docstring;
* ``results/*.md``: each file of ``benchmarks/results/`` with the command that reproduces it;
* ``api.md``: the API reference, one mkdocstrings entry per name of ``confide.api.__all__``.

The quality figures come from ``src/confide/evaluation/quality.json`` (written by
``benchmarks/quality.py``): ``{"pieces": [{"task", "model", "items", "accuracy": [p, lo,
hi], "status", "scorers": [{"scorer", "auroc": [p, lo, hi], "prr": [p, lo, hi], "rank",
"n_nan"}]}]}``; a piece whose status starts with ``ranked`` is a ranked piece. Without the
file the table says the figures are not there, and nothing is made up.

The functions are importable (``tests/test_docs.py`` runs them on small files); mkdocs-gen-files
runs this file with ``runpy`` (``__name__ == "<run_path>"``), which writes the pages.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import math
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
QUALITY = ROOT / "src" / "confide" / "evaluation" / "quality.json"  # what recommend reads
TABLE_MARK = "<!-- scorer-table -->"
# The measured cost column shown in the table (scoring_cost.md: answers of 32 tokens,
# 10 samples); a scorer's own page shows every column.
COST_COLUMN = "L=32 k=10"
# The one results file whose first command is not the whole one.
COMMANDS = {
    "quality.md": "CONFIDE_DATA_DIR=<data folder> .venv/bin/python benchmarks/quality.py "
                  "--task triviaqa --task truthfulqa --model smollm2 --model gemma3-270m "
                  "--items 500 --max-minutes 25\n"
                  ".venv/bin/python benchmarks/quality.py --report-only   # the table alone",
}


# --------------------------------------------------------------------------- tables in files


@dataclass
class MarkdownTable:
    """A pipe table of a markdown file, under the heading it sits in."""

    heading: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def column(self, *names: str) -> int | None:
        """The index of the first column whose header is one of ``names`` (None: none)."""
        for name in names:
            if name in self.header:
                return self.header.index(name)
        return None


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner  # one pipe each end: empty cells stay
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def read_tables(text: str) -> list[MarkdownTable]:
    """Every pipe table of ``text`` (a header row, a ``---`` row, body rows)."""
    tables: list[MarkdownTable] = []
    heading = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if (line.lstrip().startswith("|") and i + 1 < len(lines)
                and re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", lines[i + 1]) and "-" in lines[i + 1]):
            table = MarkdownTable(heading, _cells(line))
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                table.rows.append(_cells(lines[i]))
                i += 1
            tables.append(table)
            continue
        i += 1
    return tables


def _names(cell: str) -> list[str]:
    return [n.strip(" `*") for n in cell.split(",") if n.strip(" `*")]


def scoring_costs(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """``benchmarks/results/scoring_cost.md``'s seconds per item: (columns, scorer -> cells)."""
    if not path.is_file():
        return [], {}
    for table in read_tables(path.read_text(encoding="utf-8")):
        if table.header and table.header[0] == "scorer":
            return table.header[1:], {r[0]: r[1:] for r in table.rows if not r[0].startswith("*")}
    return [], {}


@dataclass(frozen=True)
class Parity:
    """One row of ``parity.md`` naming a scorer: how it was compared, and the figure."""

    section: str
    polygraph: str
    mapping: str
    figure: str
    why: str


def _parity_section(heading: str) -> str:
    for key, short in (("fed statistics", "fed statistics"), ("own samples", "Polygraph's samples"),
                       ("Fitted", "fitted, same states"), ("Greedy estimators", "end to end")):
        if key in heading:
            return short
    return heading


def parity_rows(path: Path) -> dict[str, list[Parity]]:
    """Scorer -> its rows in ``benchmarks/results/parity.md`` (tables whose first column is
    ``confide``). The figure is the like-for-like one where the table has it."""
    if not path.is_file():
        return {}
    out: dict[str, list[Parity]] = {}
    for table in read_tables(path.read_text(encoding="utf-8")):
        if not table.header or table.header[0] != "confide":
            continue
        figure = table.column("without end token", r"max \|Δ\|")
        why = table.column("why the rest", "why")
        for row in table.rows:
            entry = Parity(_parity_section(table.heading), row[1], row[2],
                           row[figure] if figure is not None else "",
                           row[why] if why is not None and why < len(row) else "")
            for name in _names(row[0]):
                out.setdefault(name, []).append(entry)
    return out


# --------------------------------------------------------------------------- quality figures


@dataclass(frozen=True)
class Piece:
    """One task × model of the quality table."""

    task: str
    model: str
    items: int
    accuracy: tuple[float, float, float]
    status: str
    scorers: dict[str, dict[str, Any]]

    @property
    def ranked(self) -> bool:
        return self.status.startswith("ranked")

    @property
    def label(self) -> str:
        return f"{self.task} × {self.model}"


def _triple(value: Any) -> tuple[float, float, float]:
    if value is None:
        return (math.nan, math.nan, math.nan)
    p, lo, hi = (math.nan if v is None else float(v) for v in value)
    return (p, lo, hi)


def read_quality(path: Path) -> list[Piece] | None:
    """The pieces of ``quality.json`` (None when the file is not there). A file of another
    shape raises ``ValueError`` naming the file and the field."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    pieces = []
    for i, raw in enumerate(data.get("pieces", [])):
        try:
            pieces.append(Piece(raw["task"], raw["model"], int(raw["items"]),
                                _triple(raw["accuracy"]), str(raw["status"]),
                                {s["scorer"]: s for s in raw["scorers"]}))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: pieces[{i}]: {type(exc).__name__}: {exc} (expected "
                             "task, model, items, accuracy, status, scorers)") from exc
    return pieces


def interval(value: Any, digits: int = 3) -> str:
    """``0.747 [0.650, 0.837]``; a missing interval shows the point alone, NaN as ``—``."""
    p, lo, hi = _triple(value)
    if math.isnan(p):
        return "—"
    if math.isnan(lo) or math.isnan(hi):
        return f"{p:.{digits}f}"
    return f"{p:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def quality_cell(piece: Piece, scorer: str) -> str:
    """A scorer's AUROC with its interval and rank on one piece (``—`` when not run there)."""
    row = piece.scorers.get(scorer)
    if row is None:
        return "—"
    rank = row.get("rank")
    return interval(row.get("auroc")) + (f" #{rank}" if rank is not None else "")


def mean_rank(ranked: Sequence[Piece], scorer: str) -> str:
    """The mean of a scorer's ranks over the ranked pieces that rank it (``—``: none)."""
    ranks = [float(p.scorers[scorer]["rank"]) for p in ranked
             if p.scorers.get(scorer, {}).get("rank") is not None]
    return f"{sum(ranks) / len(ranks):.1f}" if ranks else "—"


# --------------------------------------------------------------------------- the registry


def _feeds(spec: Any, have: frozenset[Any]) -> bool:
    from confide.core.needs import Need

    return all(n in have for n in spec.needs if n is not Need.TRAINING)


def black_box(spec: Any) -> tuple[bool, bool]:
    """(fed by an API that gives top-k log-probabilities, fed by one that gives text only):
    the capabilities of the ``openai`` backend with and without log-probabilities."""
    from confide.backends.topk import TOPK_STATISTICS
    from confide.core.needs import Need

    text = frozenset({Need.SAMPLES, Need.EXTRA_PROMPT})
    return _feeds(spec, text | TOPK_STATISTICS), _feeds(spec, text)


def family_summary(family: str, module: str) -> str:
    """The first sentence of the family module's docstring."""
    doc = inspect.getdoc(importlib.import_module(module)) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=[.:])\s", first, maxsplit=1)[0].rstrip(":.") + "."


def _needs(spec: Any) -> str:
    return ", ".join(sorted(n.value for n in spec.needs)) or "—"


def _mark(flag: bool) -> str:
    return "yes" if flag else "no"


def scorer_table(specs: Sequence[Any], pieces: list[Piece] | None,
                 costs: tuple[list[str], dict[str, list[str]]],
                 parity: dict[str, list[Parity]], *, link: Callable[[str], str]) -> str:
    """The markdown table of every scorer in ``specs``, one row each."""
    ranked = [p for p in (pieces or []) if p.ranked]
    columns, seconds = costs
    at = columns.index(COST_COLUMN) if COST_COLUMN in columns else None
    head = ["scorer", "family", "level", "needs", "cost", "top-k API", "text-only API",
            f"s/item ({COST_COLUMN})", *[f"AUROC {p.label}" for p in ranked], "mean rank",
            "parity"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for spec in specs:
        topk, text = black_box(spec)
        cost = spec.cost.value + (f", {spec.n_samples} samples" if spec.n_samples else "")
        measured = seconds.get(spec.name, [])
        row = [f"[`{spec.name}`]({link(spec.name)})", spec.family, spec.level, _needs(spec),
               cost, _mark(topk), _mark(text),
               measured[at] if at is not None and at < len(measured) else "—",
               *[quality_cell(p, spec.name) for p in ranked], mean_rank(ranked, spec.name),
               "; ".join(f"{r.figure} ({r.section})" for r in parity.get(spec.name, [])) or "—"]
        lines.append("| " + " | ".join(c.replace("|", r"\|") if "\\|" not in c else c
                                        for c in row) + " |")
    if pieces is None:
        note = ("Quality figures: `src/confide/evaluation/quality.json` is not there yet "
                "(`benchmarks/quality.py` writes it), so this table has none.")
    elif not ranked:
        note = "Quality figures: no piece of `src/confide/evaluation/quality.json` is ranked."
    else:
        note = ("AUROC: 95% bootstrap interval, `#` the rank on that piece, from "
                "`src/confide/evaluation/quality.json` ([Results](results/quality.md)); a ranked "
                "piece is one where the model is above chance and has at least 10 right and "
                "10 wrong answers.")
    return "\n".join(lines) + "\n\n" + note + "\n"


# --------------------------------------------------------------------------- docstrings


_ROLE = re.compile(r":(?:func|class|mod|data|attr|meth|obj|exc|math|ref|doc):`([^`]+)`")


def _role(match: re.Match[str]) -> str:
    text = match.group(1)
    named = re.fullmatch(r"(.*?)\s*<(.+)>", text)
    if named:
        text = named.group(1)
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return f"`{text}`"


def _inline(text: str) -> str:
    """reST inline markup to markdown: roles and double backquotes become code."""
    out = []
    # code spans are kept as they are; only the text between them is escaped
    for i, part in enumerate(re.split(r"(``.+?``|:[a-z]+:`[^`]+`|`[^`]+`)", text)):
        if i % 2:
            if part.startswith("``"):
                out.append(f"`{part[2:-2]}`")
            elif part.startswith(":"):
                out.append(_ROLE.sub(_role, part))
            else:
                out.append(part)
        else:
            out.append(part.replace("<", "&lt;").replace(">", "&gt;"))
    return "".join(out)


@dataclass
class Docstring:
    """A scorer's docstring in markdown: summary, formulas, the rest, its references."""

    summary: str
    formulas: list[str]
    body: str
    references: list[str]


def convert_docstring(doc: str) -> Docstring:
    """Split a numpy/reST docstring into markdown parts (``.. math::`` blocks kept as LaTeX
    source: the site renders them as code, as it is built without a math renderer)."""
    lines = doc.splitlines()
    summary = _inline(lines[0].strip()) if lines else ""
    formulas: list[str] = []
    body: list[str] = []
    references: list[str] = []
    i = 1
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(".. math::"):
            indent = len(line) - len(line.lstrip())
            block = [stripped[len(".. math::"):].strip()]
            i += 1
            while i < len(lines) and (not lines[i].strip()
                                      or len(lines[i]) - len(lines[i].lstrip()) > indent):
                if not lines[i].strip() and (i + 1 >= len(lines) or len(lines[i + 1])
                                             - len(lines[i + 1].lstrip()) <= indent):
                    break
                block.append(lines[i])
                i += 1
            formula = textwrap.dedent("\n".join(b for b in block if b.strip() or block))
            formula = "\n".join(x.strip() for x in formula.strip().splitlines())
            formulas.append(formula)
            body.append(f"\n```latex\n{formula}\n```\n")
            continue
        if re.match(r"references\s*:?$", stripped, re.I) or stripped.startswith("References:"):
            rest = " ".join(x.strip() for x in lines[i:] if not re.fullmatch(r"-+", x.strip()))
            rest = re.sub(r"^References\s*:?", "", rest).strip()
            references = [_inline(r.strip().rstrip(";").strip())
                          for r in re.split(r"\[\d+\]", rest) if r.strip(" ;")]
            break
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()) and stripped:
            body.append(f"\n**{stripped}**\n")
            i += 2
            continue
        if stripped.startswith(">>>") or stripped.startswith("..."):
            body.append(f"    {stripped}")
        else:
            body.append(_inline(line))
        i += 1
    return Docstring(summary, formulas, "\n".join(body).strip(), references)


def _reason_text(node: ast.AST, names: dict[str, Any]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "…"
                        for v in node.values)]
    if isinstance(node, ast.IfExp):
        return _reason_text(node.body, names) + _reason_text(node.orelse, names)
    if isinstance(node, ast.Name) and isinstance(names.get(node.id), str):
        return [names[node.id]]
    if isinstance(node, ast.BinOp):
        return ["".join(_reason_text(node.left, names)[:1] + ["…"])]
    return []


def own_reasons(fn: Callable[..., Any], depth: int = 2) -> list[str]:
    """The reasons of the ``CannotScore`` the scorer raises in its own body and in the
    functions of its module it calls (``depth`` levels down), in source order."""
    seen: list[str] = []
    done: set[str] = set()

    def visit(f: Callable[..., Any], left: int) -> None:
        if f.__qualname__ in done:
            return
        done.add(f.__qualname__)
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
        except (OSError, TypeError, SyntaxError):
            return
        names = vars(importlib.import_module(f.__module__))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "id", None)
            if called == "CannotScore" and node.args:
                for text in _reason_text(node.args[0], names):
                    if text not in seen:
                        seen.append(text)
            elif left and called and inspect.isfunction(names.get(called)) \
                    and names[called].__module__ == f.__module__:
                visit(names[called], left - 1)

    visit(fn, depth)
    return seen


# --------------------------------------------------------------------------- scorer pages


def _example(spec: Any) -> str:
    from confide.core.needs import Need

    if spec.level == "claim":
        return ("```python\n"
                "import confide\n\n"
                "model = confide.load_model()\n"
                "answer = confide.score(model, \"Describe Paris.\", max_new_tokens=24, stop=(),\n"
                f"                       claims=confide.ClaimConfig(scorers=(\"{spec.name}\",),"
                " grader=None))\n"
                "for claim in answer.record.claims:\n"
                f"    print(claim.text, claim.scores[\"{spec.name}\"])\n```\n\n"
                "The site's tests run this example for `claim_mean_logprob` (the others differ "
                "in the name alone); `confide run --long-form` runs the default claim "
                "scorers.\n")
    if Need.TRAINING in spec.needs:
        run = "confide run --task triviaqa --limit 200 --out runs/first"
        if Need.HIDDEN_STATES in spec.needs:
            run += " --hidden-layers -1"
        return ("```console\n"
                f"{run}\n"
                f"confide fit runs/first --kind {spec.name} -o {spec.name}.json\n"
                f"confide eval runs/other --with {spec.name}.json\n```\n\n"
                "Fitted on a graded run, applied to another run with `eval --with` "
                "([Fitting probes and combiners](../guides/fitting.md)).\n")
    line = f"confide run --task triviaqa --limit 3 --scorers {spec.name},length"
    note = ""
    if Need.HIDDEN_STATES in spec.needs:
        line += " --hidden-layers -1"
    if spec.family == "reasoning" or spec.family == "ensemble":
        note = ("\nIt needs what the bundled model does not give "
                f"({_needs(spec)}): the run names it among the skipped scorers with why.\n")
    return f"```console\n{line}\n```\n{note}"


def scorer_page(spec: Any, *, pieces: list[Piece] | None,
                costs: tuple[list[str], dict[str, list[str]]],
                parity: dict[str, list[Parity]]) -> str:
    """The markdown page of one scorer."""
    doc = convert_docstring(inspect.getdoc(spec.fn) or spec.name)
    topk, text = black_box(spec)
    samples = ", ".join(sorted(n.value for n in spec.sample_statistics)) or "—"
    readable = spec.readable.formula if spec.readable is not None else "not declared"
    facts = [
        ("family", f"`{spec.family}` (`{spec.fn.__module__}`)"),
        ("level", spec.level),
        ("needs", _needs(spec)),
        ("token statistics read from the samples", samples),
        ("cost", spec.cost.value + (f" ({spec.n_samples} samples)" if spec.n_samples else "")),
        ("fed by an API with top-k log-probabilities", _mark(topk)),
        ("fed by an API that gives text only", _mark(text)),
        ("values are probabilities of being right", _mark(spec.probability)),
        ("readable [0, 1] form", _inline(readable)),
    ]
    out = [f"# {spec.name}", "", doc.summary, "", "| | |", "|---|---|",
           *[f"| {k} | {v.replace('|', chr(92) + '|')} |" for k, v in facts], ""]
    out += ["## Definition", "", doc.body or doc.summary, ""]
    if doc.formulas:
        out += ["!!! note \"Formulas\"",
                "    Shown as LaTeX source: the site is built offline, without a math renderer.",
                ""]
    if doc.references:
        out += ["## References", "", *[f"{i}. {r}" for i, r in enumerate(doc.references, 1)],
                ""]
    out += ["## Degenerate input", ""]
    if spec.level == "claim":
        out.append("An empty greedy answer gives every claim NaN (*empty answer: nothing to put "
                   "a confidence on*), an empty claim NaN (*empty claim: nothing to put a "
                   "confidence on*), a value that is not finite NaN with the reason "
                   "(`confide.scorers.run_scorer`; checked for every claim scorer by "
                   "`tests/claims/test_contract.py`).")
    else:
        out.append("An empty greedy answer gives NaN (*empty answer: nothing to put a confidence "
                   "on*), and a value that is not finite NaN with the reason "
                   "(`confide.scorers.run_scorer`); a table counts every NaN, never reads it as "
                   "confident.")
        if "training" not in {n.value for n in spec.needs}:
            out.append(" `tests/test_contract.py` checks it on degenerate records of the bundled "
                       "model: empty samples never score above identical ones, an empty sample "
                       "never raises the confidence.")
    reasons = own_reasons(spec.fn)
    if reasons:
        out += ["", "Its own reasons for NaN (… stands for a value filled in):", "",
                *[f"- *{_inline(r)}*" for r in reasons]]
    out.append("")
    columns, seconds = costs
    if spec.name in seconds:
        out += ["## Measured cost", "",
                "Seconds per item on the bundled model, each scorer alone (L: answer tokens, "
                "k: samples; [Scoring cost](../results/scoring_cost.md)):", "",
                "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
                "| " + " | ".join(seconds[spec.name]) + " |", ""]
    out += ["## Quality", ""]
    shown = [p for p in (pieces or []) if spec.name in p.scorers]
    if pieces is None:
        out.append("No figures yet: `src/confide/evaluation/quality.json` is not there.")
    elif not shown:
        out.append("Not in the quality benchmark (it runs the scorers that need only the "
                   "generations).")
    else:
        out += ["| task × model | items | accuracy | AUROC | PRR | rank | NaN | length baseline "
                "AUROC | status |", "|---|---|---|---|---|---|---|---|---|"]
        for p in shown:
            row = p.scorers[spec.name]
            length = p.scorers.get("length", {}).get("auroc")
            rank = row.get("rank")
            out.append(f"| {p.label} | {p.items} | {interval(p.accuracy)} | "
                       f"{interval(row.get('auroc'))} | {interval(row.get('prr'))} | "
                       f"{'—' if rank is None else rank} | {row.get('n_nan', '—')} | "
                       f"{interval(length)} | {p.status} |")
        out += ["", "95% bootstrap intervals; ranks only on ranked pieces "
                "([Quality](../results/quality.md))."]
    out.append("")
    rows = parity.get(spec.name, [])
    if rows:
        out += ["## Parity with LM-Polygraph 0.7.0", "",
                "| compared | Polygraph | mapping | max \\|Δ\\| | why the rest |",
                "|---|---|---|---|---|",
                *[f"| {r.section} | {r.polygraph} | {r.mapping} | {r.figure} | {r.why} |"
                  for r in rows],
                "", "[Parity](../results/parity.md) has the commands and the columns.", ""]
    out += ["## Example", "", _example(spec)]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- results pages


def reproducing_command(name: str, text: str) -> str | None:
    """The command that reproduces a results file: the first ``benchmarks/*.py`` command it
    quotes (continuation lines included), or the one given in :data:`COMMANDS`."""
    if name in COMMANDS:
        return COMMANDS[name]
    lines = text.splitlines()
    command_line = re.compile(r"^\s*((?:[A-Z_]+=\S+ )?(?:\.venv/bin/)?python "
                              r"benchmarks/[\w/]+\.py.*)$")
    mention = re.compile(r"((?:[A-Z_]+=\S+ )?(?:\.venv/bin/)?(?:python )?"
                         r"benchmarks/[\w/]+\.py[^`\n]*)")
    # a command on a line of its own (a code block) before one quoted inside a sentence
    hits = [(n, m) for n, ln in enumerate(lines) if (m := command_line.match(ln))] or \
           [(n, m) for n, ln in enumerate(lines) if (m := mention.search(ln))]
    for line_no, found in hits[:1]:
        command = [found.group(1).rstrip()]
        while command[-1].endswith("\\") and line_no + 1 < len(lines):
            line_no += 1
            command.append(lines[line_no].strip())
        first = command[0]
        if not re.search(r"(^|\s)(\.venv/bin/)?python ", first):
            env = re.match(r"(?:[A-Z_]+=\S+ )?", first)
            cut = env.end() if env else 0
            first = first[:cut] + ".venv/bin/python " + first[cut:]
        command[0] = first.replace(".venv/bin/.venv/bin/", ".venv/bin/")
        if command[0].startswith("python "):
            command[0] = ".venv/bin/" + command[0]
        return "\n".join(command)
    return None


def results_page(path: Path) -> str:
    """A results file as a page: its text, the command that reproduces it after the title."""
    text = path.read_text(encoding="utf-8")
    command = reproducing_command(path.name, text)
    if command is None:
        raise ValueError(f"{path}: names no benchmarks/*.py command; add the command that "
                         "reproduces it to the file (or to COMMANDS in docs/gen_pages.py)")
    lines = text.splitlines()
    title = 0 if lines and lines[0].startswith("# ") else -1
    box = ["", "!!! example \"Reproduce\"", "", "    ```console",
           *[f"    {c}" for c in command.splitlines()], "    ```", "",
           f"    Source: `benchmarks/results/{path.name}`.", ""]
    return "\n".join(lines[:title + 1] + box + lines[title + 1:]) + "\n"


def first_command(commands: str) -> str:
    """The first command of ``commands`` on one line (continuation lines joined)."""
    parts: list[str] = []
    for line in commands.splitlines():
        parts.append(line.strip().rstrip("\\").strip())
        if not line.rstrip().endswith("\\"):
            break
    return " ".join(parts)


def results_index(paths: Iterable[Path]) -> str:
    out = ["# Results", "",
           "Every figure of the site comes from these files under `benchmarks/results/`, each "
           "written by the benchmark named on its page, recomputed from stored runs.", "",
           "| page | reproduce |", "|---|---|"]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        title = next((ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")),
                     path.stem)
        command = first_command(reproducing_command(path.name, text) or "")
        out.append(f"| [{title}]({path.stem}.md) | `{command}` |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- API reference


# A docstring the numpy parser cannot read (doctest lines inside its Parameters section):
# rendered with the plain parser until it has an Examples heading.
_PLAIN_DOCSTRING = {"summarize"}


def api_page() -> str:
    """One mkdocstrings entry per public name (``confide.api.__all__``), by kind."""
    import confide.api as api

    groups: dict[str, list[str]] = {"Functions": [], "Classes": [], "Errors": [],
                                    "Constants": []}
    for name in api.__all__:
        obj = getattr(api, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            groups["Errors"].append(name)
        elif isinstance(obj, type):
            groups["Classes"].append(name)
        elif callable(obj):
            groups["Functions"].append(name)
        else:
            groups["Constants"].append(name)
    out = ["# API reference", "",
           "Every public name of `import confide` (`confide.api.__all__`), from its docstring. "
           "`confide.NAME` and `confide.api.NAME` are the same object.", ""]
    for title, names in groups.items():
        out += [f"## {title}", ""]
        for name in names:
            out.append(f"::: confide.api.{name}")
            out.append("    options:\n      heading_level: 3")
            if name in _PLAIN_DOCSTRING:
                out.append("      docstring_style: google")
            out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the build


def scorer_link(name: str) -> str:
    return f"scorers/{name}.md"


def pages(docs: Path, results: Path = RESULTS, quality: Path = QUALITY) -> dict[str, str]:
    """Every generated page: path under the docs folder -> markdown."""
    from confide.api import list_scorers

    specs = list_scorers()
    pieces = read_quality(quality)
    costs = scoring_costs(results / "scoring_cost.md")
    parity = parity_rows(results / "parity.md")
    out: dict[str, str] = {}
    guide = (docs / "choosing.md").read_text(encoding="utf-8")
    if TABLE_MARK not in guide:
        raise ValueError(f"{docs / 'choosing.md'}: the line {TABLE_MARK} is missing")
    out["choosing.md"] = guide.replace(
        TABLE_MARK, scorer_table(specs, pieces, costs, parity, link=scorer_link))
    for spec in specs:
        out[f"scorers/{spec.name}.md"] = scorer_page(spec, pieces=pieces, costs=costs,
                                                     parity=parity)
    files = sorted(results.glob("*.md"))
    for path in files:
        out[f"results/{path.name}"] = results_page(path)
    out["results/index.md"] = results_index(files)
    out["api.md"] = api_page()
    return out


def main() -> None:
    import mkdocs_gen_files

    for path, text in pages(ROOT / "docs").items():
        with mkdocs_gen_files.open(path, "w") as handle:
            handle.write(text)


if __name__ == "<run_path>":
    main()
