"""Imports point one way, no module reaches into another's private names, and no circles.

Every module of ``src/confide`` is parsed (``ast``, nothing is imported) and
each of its imports, at module level, inside functions and under
``TYPE_CHECKING`` alike, is checked against :data:`LAYERS`: a module may
import from its own layer and the layers listed before it, never from one
after it. A new module must be placed in a layer here.

Within a layer imports may go either way, so the same imports also form a
graph in which no two modules may reach each other (:func:`import_cycles`).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "confide"

# Bottom to top, one package a layer: the flow of docs/architecture.md read as imports
# (test_architecture_draws_the_layers keeps the two the same). A module belongs to the
# layer of its package; api.py is a layer of its own, and the package itself ("confide")
# only by its exact name, so a module nobody placed is caught.
LAYERS = ["core", "metrics", "text", "tasks", "backends", "ingest", "store", "grading",
          "equivalence", "scorers", "pipeline", "evaluation", "runs", "learned", "decisions",
          "report", "serve", "integrations", "api", "cli"]
RANK = {name: i for i, name in enumerate([*LAYERS, "package"])}


def layer_of(module: str) -> str | None:
    if module == "confide":
        return "package"
    parts = module.split(".")
    if parts[0] != "confide" or len(parts) < 2 or parts[1] not in LAYERS:
        return None
    return parts[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def _parse(source: str, filename: str) -> ast.Module:
    return ast.parse(source, filename=filename)


def imports(module: str, path: Path, found: dict[str, Path]
            ) -> list[tuple[int, str, str | None]]:
    """``(line, imported module, imported name or None)`` for each confide import, and for
    each ``alias._name`` read through a name bound to a confide module."""
    tree = _parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[int, str, str | None]] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "confide":
                    out.append((node.lineno, a.name, None))
                    if a.asname:
                        aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node, path.name == "__init__.py")
            if target.split(".")[0] == "confide":
                out += [(node.lineno, target, a.name) for a in node.names]
                aliases.update({a.asname or a.name: f"{target}.{a.name}" for a in node.names
                                if f"{target}.{a.name}" in found})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _is_private(node.attr)):
            out.append((node.lineno, aliases[node.value.id], node.attr))
    return out


def _owner(module: str) -> str:
    """The module whose private names ``module``'s names are: a private submodule
    (``confide.decisions._runs``) is private to its package."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            return ".".join(parts[:i])
    return module


def violations(found: dict[str, Path]) -> list[str]:
    problems = []
    for module, path in found.items():
        here = layer_of(module)
        if here is None:
            problems.append(f"{module}: not placed in a layer (add it to LAYERS)")
            continue
        for line, target, name in imports(module, path, found):
            where = f"{path.relative_to(SRC) if path.is_relative_to(SRC) else path.name}:{line}"
            full = f"{target}.{name}" if name and f"{target}.{name}" in found else target
            there = layer_of(full)
            if there is not None and RANK[there] > RANK[here]:
                problems.append(f"{where}: {module} ({here}) imports {full} ({there}), "
                                "a layer above it")
            owner = _owner(full)
            inside = module == owner or module.startswith(owner + ".")
            if owner != full and not inside:
                problems.append(f"{where}: {module} imports the private module {full}")
            if name is not None and _is_private(name) and full == target and target != module:
                problems.append(f"{where}: {module} imports the private name {name} from "
                                f"{target}")
    return problems


def _where(path: Path) -> Path | str:
    return path.relative_to(SRC) if path.is_relative_to(SRC) else path.name


def _is_inside(module: str, package: str) -> bool:
    return module.startswith(package + ".")


def import_graph(found: dict[str, Path]) -> dict[str, dict[str, int]]:
    """``module -> {imported module: first line}`` over confide's modules, from the same
    imports the layer check reads (module level, functions, ``TYPE_CHECKING``).

    ``from pkg import name`` inside ``pkg`` itself (a submodule importing its own
    package) points at the module ``pkg/__init__.py`` re-exports ``name`` from: a package
    re-exporting its submodules is not a circle with them. A name the ``__init__``
    defines itself keeps the edge to the package. Parent packages a dotted import runs
    first are not edges.
    """
    def target_of(target: str, name: str | None) -> str:
        full = f"{target}.{name}" if name else target
        return full if full in found else target

    exports: dict[str, dict[str, str]] = {}
    for module, path in found.items():
        if path.name == "__init__.py":
            exports[module] = {name: target_of(target, name)
                               for _, target, name in imports(module, path, found)
                               if name is not None}
    graph: dict[str, dict[str, int]] = {}
    for module, path in found.items():
        edges = graph.setdefault(module, {})
        for line, target, name in imports(module, path, found):
            there = target_of(target, name)
            if there == target and _is_inside(module, target) and name is not None:
                there = exports.get(target, {}).get(name, target)
            if there in found and there != module:
                edges.setdefault(there, line)
    return graph


def import_cycles(found: dict[str, Path]) -> list[str]:
    """Each group of modules that import each other (a strongly connected component of
    :func:`import_graph` with more than one module), with the imports that close it."""
    graph = import_graph(found)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in sorted(groups):
        members = set(group)
        closing = [f"{_where(found[a])}:{line} imports {b}"
                   for a in group for b, line in sorted(graph[a].items()) if b in members]
        out.append(f"import circle among {', '.join(group)}: " + "; ".join(closing))
    return out


def test_every_module_has_a_layer():
    assert not [m for m in modules() if layer_of(m) is None]


def test_layers_point_one_way_and_private_names_stay_home():
    problems = violations(modules())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("source", "expected"), [
    ("from confide.api import Run\n", "a layer above it"),
    ("from confide.metrics import _auroc\n", "private name _auroc"),
    ("from confide.decisions._runs import as_run\n", "private module"),
    ("from confide import metrics\nx = metrics._auroc\n", "private name _auroc"),
])
def test_layer_check_catches(tmp_path, source, expected):
    # The check itself can fail: a scorer module that reaches up, or into privates.
    fake = tmp_path / "whitebox.py"
    fake.write_text((PACKAGE / "scorers" / "whitebox.py").read_text(encoding="utf-8")
                    + "\n" + source, encoding="utf-8")
    problems = violations({**modules(), "confide.scorers.whitebox": fake})
    assert [p for p in problems if p.startswith("whitebox.py") and expected in p]


def test_no_import_circles():
    cycles = import_cycles(modules())
    assert not cycles, "\n".join(cycles)


def _fake(tmp_path: Path, name: str, source: str) -> tuple[str, Path]:
    path = tmp_path.joinpath(*name.split(".")[1:]).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    return name, path


def test_cycle_check_catches_a_pair_importing_each_other(tmp_path):
    # The check itself can fail: two modules reaching each other, one of them only
    # inside a function, are one circle, reported with both modules named.
    fakes = dict([
        _fake(tmp_path, "confide.fake_a",
              "from confide.fake_b import b\n\ndef a():\n    return b\n"),
        _fake(tmp_path, "confide.fake_b",
              "def b():\n    from confide.fake_a import a\n    return a\n"),
    ])
    cycles = import_cycles({**modules(), **fakes})
    ours = [c for c in cycles if "confide.fake_a" in c]
    assert len(ours) == 1 and "confide.fake_a, confide.fake_b:" in ours[0]
    assert "fake_a.py:1 imports confide.fake_b" in ours[0]


def test_cycle_check_leaves_a_package_reexporting_its_submodules(tmp_path):
    # pkg/__init__.py re-exports pkg.one and pkg.two; pkg.two takes pkg.one's name from
    # the package: that resolves to pkg.one, not a circle. A name the package defines
    # itself, read back by the submodule it imports, is one.
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    init = pkg / "__init__.py"
    init.write_text("from confide.fakepkg.one import x\nfrom confide.fakepkg.two import y\n",
                    encoding="utf-8")
    fakes = {"confide.fakepkg": init,
             **dict([_fake(tmp_path, "confide.fakepkg.one", "x = 1\n"),
                     _fake(tmp_path, "confide.fakepkg.two",
                           "from confide.fakepkg import x\ny = x\n")])}
    assert not [c for c in import_cycles({**modules(), **fakes}) if "fakepkg" in c]
    init.write_text(init.read_text(encoding="utf-8") + "z = 3\n", encoding="utf-8")
    fakes["confide.fakepkg.two"].write_text("from confide.fakepkg import z\ny = z\n",
                                            encoding="utf-8")
    assert [c for c in import_cycles({**modules(), **fakes})
            if "confide.fakepkg, confide.fakepkg.two:" in c]


def test_architecture_draws_the_layers() -> None:
    """docs/architecture.md draws the same stages in the same order as LAYERS."""
    text = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## The flow", 1)[1].split("```", 2)[1]
    drawn = [line.split()[0] for line in block.splitlines() if line.strip()]
    assert drawn == LAYERS


def test_the_package_top_holds_only_packages() -> None:
    """src/confide holds __init__.py, api.py and one package a stage, nothing else."""
    top = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    assert top == {"__init__.py", "api.py", *(n for n in LAYERS if n != "api")}


# The CLI is a thin layer over the API: it parses options and renders, and reaches the
# package only through the public API, the shared core (errors, option ranges, paths,
# number formats) and its own modules.
CLI_MAY_IMPORT = ("confide.api", "confide.core", "confide.cli")


def cli_reaches_past_the_api(found: dict[str, Path]) -> list[str]:
    """Each import of a ``confide.cli`` module (module level, in functions and under
    ``TYPE_CHECKING``) of anything but ``confide`` itself and :data:`CLI_MAY_IMPORT`."""
    problems = []
    for module, path in found.items():
        if module != "confide.cli" and not _is_inside(module, "confide.cli"):
            continue
        for line, target, name in imports(module, path, found):
            full = f"{target}.{name}" if name and f"{target}.{name}" in found else target
            if full == "confide" or any(full == ok or _is_inside(full, ok)
                                        for ok in CLI_MAY_IMPORT):
                continue
            problems.append(f"{_where(path)}:{line}: {module} imports {full}; the CLI calls "
                            "confide.api (add a public function there)")
    return problems


def test_cli_calls_only_the_public_api():
    problems = cli_reaches_past_the_api(modules())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("source", [
    "from confide.decisions.calibration import calibrate_run\n",
    "def f():\n    from confide.scorers import SCORERS\n",
    "from confide import scorers\n",
    "import confide.store.run_store\n",
])
def test_cli_check_catches(tmp_path, source):
    # The check itself can fail: a command reaching a stage's module, even inside a
    # function or through the package's name.
    fake = tmp_path / "reading.py"
    fake.write_text((PACKAGE / "cli" / "reading.py").read_text(encoding="utf-8") + "\n"
                    + source, encoding="utf-8")
    problems = cli_reaches_past_the_api({**modules(), "confide.cli.reading": fake})
    assert [p for p in problems if p.startswith("reading.py")]
