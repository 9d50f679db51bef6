#!/usr/bin/env bash
# The vllm backend on a GPU machine with vLLM installed, in one go, within 8 minutes:
# what the machine has, an end-to-end `confide` run on a small model, and confide's
# throughput against raw vLLM on the same prompts (target >= 0.9x). No network.
#
#   benchmarks/gpu/vllm_check.sh [MODEL_DIR]
#
# MODEL_DIR: a local transformers model directory. Without it: the bundled SmolLM2 if
# its package is installed, else random weights of SmolLM2-135M's architecture.
# PYTHON picks the interpreter (default: .venv/bin/python, else python3).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4
"$PY" -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1
echo "== vllm_check.py"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
timeout --signal=TERM --kill-after=15 470 "$PY" benchmarks/gpu/vllm_check.py \
    ${1:+--model "$1"}
rc=$?
[ $rc -eq 124 ] && echo "vllm_check.py ran past 470 s and was stopped"
echo "== tests/backends/test_vllm.py"
timeout 60 "$PY" -m pytest -q -p no:cacheprovider tests/backends/test_vllm.py 2>&1 | tail -5
exit $rc
