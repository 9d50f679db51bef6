"""Imports point one way, and no module reaches into another's private names.

Every module of ``src/confide`` is parsed (``ast``, nothing is imported) and
each of its imports, at module level, inside functions and under
``TYPE_CHECKING`` alike, is checked against :data:`LAYERS`: a module may
import from its own layer and the layers listed before it, never from one
after it. A new module must be placed in a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "confide"

# Bottom to top. A module belongs to the layer of its longest matching prefix.
# The flow of the README (task → backend → record → scorers → grading →
# metrics → evaluation → decisions → report/serve/CLI) read as imports: the
# data types and the answer-reading helpers the stages share sit below them.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("confide.errors", "confide.registry", "confide.records", "confide.formatting",
              "confide.options", "confide.outputs")),  # option ranges; output paths
    ("text", ("confide.text",)),            # answer normalisation, similarity, calls, embeddings
    ("tasks", ("confide.tasks",)),
    ("backends", ("confide.backends",)),
    ("store", ("confide.store",)),
    ("scorers", ("confide.judges", "confide.features", "confide.scorers",
                 "confide.claims.split", "confide.claims.scorers",  # claims and their scorers
                 "confide.summary")),  # summary: the sampled answers' clusters in words
    ("grading", ("confide.grading", "confide.claims.grading")),
    ("pipeline", ("confide.pipeline",       # generate → record → score → grade
                  "confide.streaming",      # token by token, early abstention
                  "confide.selfreflect")),  # how faithful a summary is (a judge model)
    ("metrics", ("confide.metrics", "confide.audit")),
    ("evaluation", ("confide.evaluation", "confide.claims.evaluation")),
    # the run loop, here or over Ray workers; a stored run and its table; the claim stage
    ("runs", ("confide.runner", "confide.distributed", "confide.runs", "confide.claims.run")),
    ("decisions", ("confide.decisions", "confide.learned", "confide.density",
                   "confide.claims")),  # refine: acting on claim confidences
    ("outputs", ("confide.report", "confide.serve")),
    ("api", ("confide.api",)),
    ("cli", ("confide.cli", "confide.render")),  # the Rich renderer is the CLI's alone
    ("package", ("confide",)),
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str | None:
    best, found = -1, None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), name
    return found


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


def imports(module: str, path: Path, found: dict[str, Path]
            ) -> list[tuple[int, str, str | None]]:
    """``(line, imported module, imported name or None)`` for each confide import, and for
    each ``alias._name`` read through a name bound to a confide module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
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
