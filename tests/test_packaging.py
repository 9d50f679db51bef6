"""What a clone needs: every imported package declared, no machine's path, no index host."""

from __future__ import annotations

import ast
import os
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "confide"
# Files that set the repository up; none of them may name a package index.
SETUP_FILES = ["Makefile", "pyproject.toml", "scripts/setup.sh", ".ci/run"]


def _requirement_name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, str]:
    """Normalised distribution name -> where pyproject.toml declares it."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    where = {_requirement_name(r): "dependencies" for r in project["dependencies"]}
    for extra, reqs in project["optional-dependencies"].items():
        for r in reqs:
            where.setdefault(_requirement_name(r), extra)
    return where


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> the first file of src/confide that imports it."""
    found: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "confide" and top not in sys.stdlib_module_names:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared():
    declared = _declared()
    dists = packages_distributions()
    imports = _third_party_imports()
    assert {"numpy", "torch", "httpx", "fastapi", "markupsafe"} <= set(imports)
    missing = {}
    for module, where in imports.items():
        names = {_requirement_name(d) for d in dists.get(module, [])} or \
            {_requirement_name(module)}  # not installed here: its name as published
        if not names & set(declared):
            missing[module] = where
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_extras_match_what_each_part_imports():
    declared = _declared()
    assert declared["markupsafe"] == "dependencies"
    assert declared["httpx"] == "openai"  # the openai backend
    assert {declared["fastapi"], declared["uvicorn"]} == {"serve"}
    # the peer server builds llama.cpp from source: the test set-up only
    assert declared["llama-cpp-python"] == "peer"
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    run_part, test_part = setup[setup.index("\nrun)"):].split("\ntest)", 1)
    run_extras = set(re.search(r'-e "\.\[([\w,]+)\]"', run_part).group(1).split(","))
    test_extras = set(re.search(r'-e "\.\[([\w,]+)\]"', test_part).group(1).split(","))
    assert run_extras >= {"hf"} and not run_extras & {"peer", "test"}
    assert test_extras >= run_extras | {"peer", "test"}


def _text_files() -> list[tuple[Path, str]]:
    """The repository's own text files (no venv, build output or bundled data)."""
    skip = {".git", ".venv", "runs", "ci-artifacts", "build", "dist", "__pycache__", "data",
            ".pytest_cache", ".hypothesis"}
    out = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        for name in set(files) - skip:  # a worktree's .git is a file
            path = Path(folder, name)
            try:
                out.append((path.relative_to(ROOT), path.read_text(encoding="utf-8")))
            except UnicodeDecodeError:
                continue
    return out

def test_repository_names_no_machine_path():
    # A path of the machine the code was written on, or a user's home folder.
    pattern = re.compile(r"(?<![\w.~])/(?:work|home|Users|root)/\w")
    found = [f"{rel}:{n}" for rel, text in _text_files()
             for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert not found, f"absolute paths of a machine: {found}"


def test_setup_files_name_no_package_index():
    for rel in SETUP_FILES:
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert not re.search(r"https?://|--(extra-)?index-url|--find-links", text), rel
