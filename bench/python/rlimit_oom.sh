#!/bin/bash
# The batch-size search against REAL out-of-memory errors of PyTorch's CPU
# allocator under RLIMIT_DATA (tests/python/rlimit_probe.py), RUNS times per
# model: prints each run's outcome and the planner's prediction from
# analyze()'s profile. A crash is reported as a crash, never as an OOM.
# usage: bench/python/rlimit_oom.sh [BUILD_DIR] [RUNS] [MODELS...]
#   MODELS: transformer (cap 64 MiB), resnet18 (cap 256 MiB; minutes a run)
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build} runs=${2:-5}
shift 2 2>/dev/null
models=${*:-transformer resnet18}
export VRAM_LIBRARY=$build/libvram.so VRAM_BUILD_DIR=$build PYTHONPATH=$here/python
export OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=65536
# the project's venv (make deps), as the Python tests use: vram.torch needs torch 2.1+
py=${VRAM_PYTHON:-$here/.venv/bin/python}
for model in $models; do
    cap=$((64 << 20))
    [ "$model" = resnet18 ] && cap=$((256 << 20))
    for i in $(seq "$runs"); do
        out=$("$py" "$here/tests/python/rlimit_probe.py" "$model" $cap "$(mktemp)" 2>/dev/null)
        rc=$?
        if [ $rc = 0 ]; then
            echo "$model run $i: $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("maximum", d["maximum"], "in", len(d["trials"]), "trials, predicted", d["predicted"], "(host plan; GPU plan", d["predicted_gpu"], end=")\n")' "$out")"
        else
            echo "$model run $i: the probe died (exit $rc)"
        fi
    done
done
