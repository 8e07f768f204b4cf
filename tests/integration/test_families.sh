#!/bin/bash
# Every family vram reads, checked against the real transformers code
# (bench/estimate/families.py --check): parameter counts of a small config
# of each family and of every published config.json in tests/data/hf/ must
# be exact, and the activations of every family within 1 % of one measured
# fp32 training step on the CPU, eager and SDPA (SDPA with the kernel a GPU
# would run: bench/estimate/gpu_sdpa.py). Needs the project's venv (make
# deps): VRAM_PYTHON.
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
