"""Scorer plugins: another package registers a scorer through the ``confide.scorers``
entry-point group, and it is listed and run like a built-in one.

The plugin is a real installed distribution (a ``.dist-info`` folder with its
``entry_points.txt``) on the path of a fresh interpreter, as ``pip install`` leaves one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLUGIN = '''
from confide.scorers import scorer


@scorer("plugin_short_answer")
def short_answer(record):
    """1 / (1 + characters of the answer): shorter answers, more confident."""
    return 1.0 / (1.0 + len(record.greedy.text))
'''


def _install(site: Path, module: str, body: str, *, name: str) -> None:
    """A distribution ``name`` whose entry point in ``confide.scorers`` is ``module``."""
    (site / f"{module}.py").write_text(body, encoding="utf-8")
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[confide.scorers]\n{name} = {module}\n",
                                           encoding="utf-8")


def _confide(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "confide.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_an_installed_plugin_scorer_is_listed_and_scores_a_log(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "confide_plugin_demo", PLUGIN, name="confide-plugin-demo")
    listed = _confide(site, "scorers")
    assert listed.returncode == 0, listed.stderr
    assert "plugin_short_answer" in listed.stdout

    log = tmp_path / "answers.jsonl"
    rows = [{"id": "a", "question": "Capital of France?", "answer": "Paris",
             "references": ["Paris"]},
            {"id": "b", "question": "Largest planet?", "answer": "It is Saturn, I think",
             "references": ["Jupiter"]}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "run"
    scored = _confide(site, "score", str(log), "--out", str(out), "--scorers",
                      "plugin_short_answer,length")
    assert scored.returncode == 0, scored.stdout + scored.stderr
    code = ("import sys; from confide import open_run; "
                "print({r.item.id: r.scores['plugin_short_answer'] "
                "for r in open_run(sys.argv[1]).records})")
    read = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(site)}, timeout=300)
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == str({"a": 1 / 6, "b": 1 / 22})


def test_a_broken_plugin_is_left_out_with_a_warning_naming_it(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "confide_plugin_broken", "raise RuntimeError('no model here')\n",
             name="confide-plugin-broken")
    listed = _confide(site, "scorers")
    assert listed.returncode == 0, listed.stderr
    assert "msp" in listed.stdout  # the built-in scorers are all there
    shown = " ".join(listed.stderr.split())
    assert "scorer plugin 'confide-plugin-broken'" in shown
    assert "RuntimeError: no model here" in shown
