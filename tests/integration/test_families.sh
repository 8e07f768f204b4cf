#!/bin/bash
# Every family vram reads, checked against the real transformers code
# (bench/estimate/families.py --check): parameter counts of a small config
# of each family and of every published config.json in tests/data/hf/ must
# be exact, and the activations of every family within 1 % of one measured
# fp32 training step on the CPU, eager and SDPA (SDPA with the kernel a GPU
# would run: bench/estimate/gpu_sdpa.py). Then `--compile on` against
# PyTorch's own partitioner (bench/estimate/compiled_layer.py --check): what
# one compiled decoder layer of each covered family hands to its backward
# must be within 1 % of the estimate. Needs the project's venv (make deps):
# VRAM_PYTHON.
set -euo pipefail
SRC=${VRAM_SOURCE_DIR:?}
BIN=${VRAM_BIN:?}
PY=${VRAM_PYTHON:-}
[ -n "$PY" ] && [ -x "$PY" ] || { echo "FAIL: VRAM_PYTHON is not set (make deps)" >&2; exit 1; }
"$PY" -c "import torch, transformers" || {
    echo "FAIL: $PY cannot import torch and transformers (make deps)" >&2
    exit 1
}
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1
"$PY" "$SRC/bench/estimate/families.py" --vram "$BIN" --check
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
# inductor's caches in a temporary directory, not the user's
TORCHINDUCTOR_CACHE_DIR="$CACHE" "$PY" "$SRC/bench/estimate/compiled_layer.py" --vram "$BIN" --check
