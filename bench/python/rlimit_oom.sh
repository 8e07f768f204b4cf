#!/bin/bash
# The batch-size search against REAL out-of-memory errors of PyTorch's CPU
# allocator under RLIMIT_DATA (tests/python/rlimit_probe.py), RUNS times:
# prints each run's outcome. Not in `make test`: Debian's PyTorch 1.13 often
# crashes (SIGSEGV in backward) when an allocation fails near the cap.
# usage: bench/python/rlimit_oom.sh [BUILD_DIR] [RUNS]
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build} runs=${2:-5}
export VRAM_LIBRARY=$build/libvram.so VRAM_BUILD_DIR=$build PYTHONPATH=$here/python
export OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=65536
for i in $(seq "$runs"); do
    out=$(/usr/bin/python3 "$here/tests/python/rlimit_probe.py" $((256 << 20)) "$(mktemp)" 2>/dev/null)
    rc=$?
    if [ $rc = 0 ]; then
        echo "run $i: $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("maximum", d["maximum"], "in", len(d["trials"]), "trials, predicted", d["predicted"])' "$out")"
    else
        echo "run $i: the probe died (exit $rc)"
    fi
done
