#!/bin/bash
# The Python package's tests (tests/python, pytest) against this build's
# libvram: VRAM_LIBRARY points at it, so nothing installed is used. Needs
# Debian's python3-torch, python3-torchvision and python3-pytest (make deps).
set -euo pipefail
SRC=${VRAM_SOURCE_DIR:?}
BUILD=${VRAM_BUILD_DIR:?}
# The interpreter that has Debian's torch: VRAM_PYTHON, else /usr/bin/python3
# (a python3 earlier on PATH, e.g. pyenv's, does not see Debian's packages).
PY=${VRAM_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3)
for mod in pytest torch torchvision; do
    "$PY" -c "import $mod" 2>/dev/null || {
        echo "FAIL: $PY cannot import $mod (apt-get install python3-$mod; make deps)" >&2
        exit 1
    }
done
export VRAM_LIBRARY=$BUILD/libvram.so VRAM_BUILD_DIR=$BUILD
export VRAM_BIN=${VRAM_BIN:-$BUILD/vram}
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
cd "$SRC/tests/python"
rc=0
"$PY" -m pytest -p no:cacheprovider -q -ra "${@:-.}" || rc=$?
# pytest's 5 = no tests collected: a broken test tree, not a pass
[ $rc -eq 5 ] && echo "FAIL: pytest collected no tests" >&2 && exit 1
exit $rc
