"""The README's Python examples run as written, with the bundled model, in a fresh folder.

Every ```` ```python ```` block of README.md is executed in one namespace: first the
blocks that import confide (they define ``model``), then the others in file order, as a
reader pasting them into a notebook would. A block whose first line says it needs a
server (``# needs an OpenAI-compatible server``) is left out: tests/test_integrations.py
runs the same calls against real servers.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[str]:
    blocks = [b for b in BLOCK.findall(README.read_text(encoding="utf-8"))
              if not b.startswith("# needs an OpenAI-compatible server")]
    return sorted(blocks, key=lambda code: "import confide" not in code)  # stable


def test_the_readme_has_python_examples():
    blocks = python_blocks()
    assert blocks and "import confide" in blocks[0]


@pytest.mark.model
def test_the_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples' out= folders land here
    namespace: dict[str, object] = {}
    for code in python_blocks():
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 (our own README)
    assert "model" in namespace
