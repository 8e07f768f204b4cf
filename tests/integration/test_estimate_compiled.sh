#!/bin/bash
# `vram estimate --compile on` against PyTorch's own partitioner
# (bench/estimate/compiled_layer.py --check): the tensors one compiled
# decoder layer of each covered family hands to its backward, read from the
# compiled backward graph on the CPU, must be within 1 % of the estimate.
# Needs the project's venv (make deps): VRAM_PYTHON.
set -euo pipefail
SRC=${VRAM_SOURCE_DIR:?}
BIN=${VRAM_BIN:?}
PY=${VRAM_PYTHON:-}
[ -n "$PY" ] && [ -x "$PY" ] || { echo "FAIL: VRAM_PYTHON is not set (make deps)" >&2; exit 1; }
"$PY" -c "import torch, transformers" || {
    echo "FAIL: $PY cannot import torch and transformers (make deps)" >&2
    exit 1
}
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
# inductor's caches in a temporary directory, not the user's
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 \
    TORCHINDUCTOR_CACHE_DIR="$CACHE" TRITON_CACHE_DIR="$CACHE"
"$PY" "$SRC/bench/estimate/compiled_layer.py" --vram "$BIN" --check
