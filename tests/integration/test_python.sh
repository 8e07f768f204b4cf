#!/bin/bash
# The Python package's tests (tests/python, pytest) against this build's
# libvram: VRAM_LIBRARY points at it, so nothing installed is used. Needs
# the project's venv (make deps: torch >= 2.1, torchvision, pytest), whose
# interpreter CMake passes as VRAM_PYTHON.
set -euo pipefail
SRC=${VRAM_SOURCE_DIR:?}
BUILD=${VRAM_BUILD_DIR:?}
PY=${VRAM_PYTHON:-$SRC/.venv/bin/python}
[ -x "$PY" ] || { echo "FAIL: no Python at $PY (make deps creates the venv)" >&2; exit 1; }
for mod in pytest torch torchvision; do
    "$PY" -c "import $mod" 2>/dev/null || {
        echo "FAIL: $PY cannot import $mod (make deps)" >&2
        exit 1
    }
done
# the supported floor (docs/python.md, "Supported PyTorch")
"$PY" -c 'import sys, torch; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 1))' || {
    echo "FAIL: $PY has torch $("$PY" -c 'import torch; print(torch.__version__)'); vram.torch needs 2.1 or later (make deps)" >&2
    exit 1
}
export VRAM_LIBRARY=$BUILD/libvram.so VRAM_BUILD_DIR=$BUILD
export VRAM_BIN=${VRAM_BIN:-$BUILD/vram}
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
cd "$SRC/tests/python"
rc=0
"$PY" -m pytest -p no:cacheprovider -q -ra "${@:-.}" || rc=$?
# pytest's 5 = no tests collected: a broken test tree, not a pass
[ $rc -eq 5 ] && echo "FAIL: pytest collected no tests" >&2 && exit 1
exit $rc
