#!/usr/bin/env bash
# vram info against the real-driver backends, loaded from the fake NVIDIA
# libraries of tests/fakes (and the CUDA toolkit's real stub when installed):
# the reported numbers, auto's fallback and its one-line reason, and injected
# driver failures, which must end in the ERROR state or a clear error, never
# in a crash.
set -euo pipefail
VRAM_BIN=${VRAM_BIN:?VRAM_BIN must name the vram binary}
FAKES=${VRAM_FAKES_DIR:?VRAM_FAKES_DIR must name the fake driver libraries}
FAKE_NVML=$FAKES/libnvidia-ml.so.1
FAKE_NVML_V1=$FAKES/v1only/libnvidia-ml.so.1
FAKE_CUDA=$FAKES/libcuda.so.1
REAL_STUB=/usr/local/cuda/lib64/stubs/libcuda.so
if [ ! -f "$FAKE_NVML" ] || [ ! -f "$FAKE_CUDA" ]; then
    echo "FAIL: fakes not built in $FAKES" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MISSING_NVML=$tmp/missing/libnvidia-ml.so.1
MISSING_CUDA=$tmp/missing/libcuda.so.1
GIB=$((1 << 30))
MIB=$((1 << 20))
passed=0

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { passed=$((passed + 1)); echo "ok - $*"; }

# Every run starts from a clean slate: no knob of a previous case leaks in.
clean_env() {
    local v
    for v in $(env | sed -n 's/^\(FAKE_[A-Z0-9_]*\)=.*/\1/p; s/^\(VRAM_[A-Z0-9_]*\)=.*/\1/p'); do
        case $v in VRAM_BIN | VRAM_FAKES_DIR | VRAM_SOURCE_DIR | VRAM_BUILD_DIR) ;; *) unset "$v" ;; esac
    done
    export VRAM_SIM_STATE=$tmp/sim.state
}

# check JSON_FILE PYTHON_EXPR: the expression sees the document as `d`.
check() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2" ||
        { cat "$1" >&2; fail "$2"; }
}

# run_info OUT [args...]: vram info, stdout to OUT, stderr to OUT.err; the
# exit status in $rc. A status of 128 or more is a crash (a signal).
run_info() {
    local out=$1
    shift
    rc=0
    "$VRAM_BIN" info "$@" >"$out" 2>"$out.err" || rc=$?
    [ "$rc" -lt 128 ] || { cat "$out.err" >&2; fail "vram info $* crashed (exit $rc) with $(env | grep ^FAKE_ | tr '\n' ' ')"; }
}

# ---- nvml: the reported numbers ----------------------------------------
clean_env
export VRAM_BACKEND=nvml VRAM_NVML_LIBRARY=$FAKE_NVML
export FAKE_NVML_DEVICES=2 FAKE_NVML_NAME="NVIDIA Fake H200" FAKE_NVML_MEM_TOTAL=80G,40G
export FAKE_NVML_MEM_USED=10G,1G FAKE_NVML_MEM_RESERVED=512M FAKE_NVML_CC=9.0
export FAKE_NVML_UTIL=37,100 FAKE_NVML_TEMP=45,80 FAKE_NVML_POWER_MW=250000,400500
export FAKE_NVML_PROCESSES="$$:3G,4242:1G@1,4243:512M@1"
run_info "$tmp/nvml.json" --json
[ "$rc" = 0 ] || { cat "$tmp/nvml.json.err" >&2; fail "nvml info exited $rc"; }
check "$tmp/nvml.json" "d['backend']=='nvml' and d['device_count']==2 and [x['index'] for x in d['devices']]==[0,1]"
check "$tmp/nvml.json" "all(x['name']=='NVIDIA Fake H200' and x['backend']=='nvml' and x['compute_capability']=='9.0' for x in d['devices'])"
check "$tmp/nvml.json" "[x['uuid'] for x in d['devices']]==['GPU-fa4e0000-0000-4000-8000-000000000000','GPU-fa4e0000-0000-4000-8000-000000000001']"
D0="d['devices'][0]"
D1="d['devices'][1]"
check "$tmp/nvml.json" "${D0}['total_bytes']==80*$GIB and ${D0}['used_bytes']==10*$GIB and ${D0}['free_bytes']==70*$GIB-512*$MIB"
check "$tmp/nvml.json" "${D1}['total_bytes']==40*$GIB and ${D1}['used_bytes']==$GIB and ${D1}['free_bytes']==39*$GIB-512*$MIB"
check "$tmp/nvml.json" "${D0}['utilization_pct']==37 and ${D0}['temperature_c']==45 and abs(${D0}['power_w']-250.0)<0.01"
check "$tmp/nvml.json" "${D1}['utilization_pct']==100 and ${D1}['temperature_c']==80 and abs(${D1}['power_w']-400.5)<0.01"
check "$tmp/nvml.json" "${D0}['multiprocessors'] is None and ${D0}['health']=='AVAILABLE' and ${D0}['error'] is None"
check "$tmp/nvml.json" "${D1}['health']=='BUSY'" # fully utilized
check "$tmp/nvml.json" "[(p['pid'],p['used_bytes']) for p in ${D0}['processes']]==[($$,3*$GIB)] and ${D0}['processes'][0]['name']=='bash'"
check "$tmp/nvml.json" "[(p['pid'],p['used_bytes']) for p in ${D1}['processes']]==[(4242,$GIB),(4243,512*$MIB)]"
ok "nvml: numbers, per-device values and processes"

run_info "$tmp/one.json" --json -i 1
check "$tmp/one.json" "[x['index'] for x in d['devices']]==[1] and d['devices'][0]['total_bytes']==40*$GIB"
ok "nvml: -i selects one device"

# An old driver without the _v2 symbols: v1 counts the reservation as used.
export VRAM_NVML_LIBRARY=$FAKE_NVML_V1
run_info "$tmp/v1.json" --json
check "$tmp/v1.json" "${D0}['used_bytes']==10*$GIB+512*$MIB and ${D0}['free_bytes']==70*$GIB-512*$MIB"
check "$tmp/v1.json" "[(p['pid'],p['used_bytes']) for p in ${D1}['processes']]==[(4242,$GIB),(4243,512*$MIB)]"
ok "nvml: v1 fallback on an old driver"

# Hundreds of processes, and memory the driver cannot account.
clean_env
export VRAM_BACKEND=nvml VRAM_NVML_LIBRARY=$FAKE_NVML FAKE_NVML_PROCESS_COUNT=300
run_info "$tmp/many.json" --json
check "$tmp/many.json" "len(${D0}['processes'])==300 and sorted(p['pid'] for p in ${D0}['processes'])==list(range(100000,100300))"
check "$tmp/many.json" "sum(p['used_bytes'] for p in ${D0}['processes'])==300*301//2*$MIB"
export FAKE_NVML_PROC_UNKNOWN=1 FAKE_NVML_PROCESS_COUNT=3
run_info "$tmp/unknown.json" --json
check "$tmp/unknown.json" "len(${D0}['processes'])==3 and all(p['used_bytes'] is None for p in ${D0}['processes'])"
ok "nvml: 300 processes, unknown process memory is null"

# ---- cuda: the reported numbers ----------------------------------------
clean_env
export VRAM_BACKEND=cuda VRAM_CUDA_LIBRARY=$FAKE_CUDA
export FAKE_CUDA_DEVICES=2 FAKE_CUDA_MEM=16G,24G FAKE_CUDA_USED=1G,6G FAKE_CUDA_CC=8.6 FAKE_CUDA_SMS=84
run_info "$tmp/cuda.json" --json
[ "$rc" = 0 ] || { cat "$tmp/cuda.json.err" >&2; fail "cuda info exited $rc"; }
check "$tmp/cuda.json" "d['backend']=='cuda' and d['device_count']==2"
check "$tmp/cuda.json" "${D0}['total_bytes']==16*$GIB and ${D0}['used_bytes']==$GIB and ${D0}['free_bytes']==15*$GIB"
check "$tmp/cuda.json" "${D1}['total_bytes']==24*$GIB and ${D1}['used_bytes']==6*$GIB and ${D1}['free_bytes']==18*$GIB"
check "$tmp/cuda.json" "all(x['compute_capability']=='8.6' and x['multiprocessors']==84 and x['health']=='AVAILABLE' for x in d['devices'])"
check "$tmp/cuda.json" "all(x['utilization_pct'] is None and x['temperature_c'] is None and x['power_w'] is None for x in d['devices'])"
check "$tmp/cuda.json" "all(x['processes']==[] for x in d['devices'])"
ok "cuda: numbers"

# ---- auto: which backend, and why, in one line -------------------------
clean_env
export VRAM_NVML_LIBRARY=$FAKE_NVML VRAM_CUDA_LIBRARY=$FAKE_CUDA FAKE_NVML_DEVICES=3
run_info "$tmp/auto.json" --json
check "$tmp/auto.json" "d['backend']=='nvml' and d['device_count']==3"
ok "auto: prefers NVML when it answers"

export VRAM_NVML_LIBRARY=$MISSING_NVML FAKE_CUDA_DEVICES=2
run_info "$tmp/auto.json" --json
check "$tmp/auto.json" "d['backend']=='cuda' and d['device_count']==2 and '$MISSING_NVML not found' in d['reason']"
ok "auto: CUDA when NVML is missing"

export VRAM_CUDA_LIBRARY=$MISSING_CUDA VRAM_SIM=2xA100-80GB
run_info "$tmp/auto.table"
[ "$rc" = 0 ] || fail "auto with no driver exited $rc"
grep -q "(sim backend)" "$tmp/auto.table" || { cat "$tmp/auto.table"; fail "auto did not fall back to sim"; }
# the reason is a note: not on stderr unless asked (-v, VRAM_LOG_LEVEL=debug)
[ ! -s "$tmp/auto.table.err" ] || { cat "$tmp/auto.table.err"; fail "a note on stderr without -v"; }
for verbose in "-v" "--verbose" "VRAM_LOG_LEVEL=debug"; do
    rc=0
    case $verbose in
    -*) "$VRAM_BIN" "$verbose" info >/dev/null 2>"$tmp/auto.table.err" || rc=$? ;;
    *) env "$verbose" "$VRAM_BIN" info >/dev/null 2>"$tmp/auto.table.err" || rc=$? ;;
    esac
    [ "$rc" = 0 ] || fail "$verbose vram info exited $rc"
    [ "$(wc -l <"$tmp/auto.table.err")" = 1 ] || { cat "$tmp/auto.table.err"; fail "$verbose: reason is not one line"; }
    grep -qF "no NVIDIA driver: $MISSING_NVML not found" "$tmp/auto.table.err" || { cat "$tmp/auto.table.err"; fail "$verbose: reason"; }
done
unset VRAM_SIM
run_info "$tmp/auto.json" --json
check "$tmp/auto.json" "d['backend']=='cpu' and 'not found' in d['reason']"
# host memory instead of a GPU is said without being asked
run_info "$tmp/auto.cpu"
grep -q "using host memory" "$tmp/auto.cpu.err" || { cat "$tmp/auto.cpu.err"; fail "the fall-back to host memory is not said"; }
ok "auto: missing libraries fall back to sim, then cpu, with a one-line reason"

# The toolkit's stub libcuda: the fake's imitation always, the real one when installed.
stubs=("$FAKE_CUDA")
if [ -f "$REAL_STUB" ]; then stubs+=("$REAL_STUB"); else echo "# $REAL_STUB not installed: real-stub case skipped"; fi
for stub in "${stubs[@]}"; do
    clean_env
    export VRAM_NVML_LIBRARY=$MISSING_NVML VRAM_CUDA_LIBRARY=$stub FAKE_CUDA_STUB=1
    run_info "$tmp/stub.json" --json
    [ "$rc" = 0 ] || fail "auto with a stub libcuda exited $rc"
    check "$tmp/stub.json" "d['backend']=='cpu' and \"stub library\" in d['reason']"
    export VRAM_BACKEND=cuda
    run_info "$tmp/stub.out"
    [ "$rc" = 1 ] || fail "VRAM_BACKEND=cuda with a stub exited $rc, expected 1"
    grep -qF "$stub is the CUDA toolkit's stub library, not a driver" "$tmp/stub.out.err" || { cat "$tmp/stub.out.err"; fail "stub message"; }
done
ok "stub libcuda: clean fallback under auto, exit 1 when named (${#stubs[@]} librar$([ ${#stubs[@]} = 1 ] && echo y || echo ies))"

# ---- injected failures --------------------------------------------------
clean_env
export VRAM_BACKEND=nvml VRAM_NVML_LIBRARY=$FAKE_NVML FAKE_NVML_DEVICES=2
export FAKE_NVML_FAIL="nvmlDeviceGetMemoryInfo_v2@1=10" # device 1 times out, always
run_info "$tmp/err.json" --json
[ "$rc" = 0 ] || fail "one failing device made info exit $rc"
check "$tmp/err.json" "${D0}['health']=='AVAILABLE' and ${D0}['total_bytes']==80*$GIB"
check "$tmp/err.json" "${D1}['health']=='ERROR' and 'nvmlDeviceGetMemoryInfo_v2(device 1): Timeout' in ${D1}['error']"
ok "persistent timeout on one device: ERROR state, the other device unaffected"

export FAKE_NVML_FAIL="nvmlDeviceGetTemperature=10:2" # transient: retried away
run_info "$tmp/err.json" --json
check "$tmp/err.json" "all(x['health']=='AVAILABLE' and x['temperature_c']==45 for x in d['devices'])"
ok "transient failures are retried"

export FAKE_NVML_FAIL="nvmlDeviceGetName=15"
run_info "$tmp/err.json" --json
check "$tmp/err.json" "all(x['health']=='ERROR' and 'GPU is lost' in x['error'] for x in d['devices'])"
ok "lost GPU: ERROR state"

for spec in "nvmlInit_v2=9:kernel module is not loaded" "nvmlDeviceGetCount_v2=999:nvmlDeviceGetCount_v2" \
    "nvmlInit_v2=18:does not match the NVIDIA kernel module"; do
    export FAKE_NVML_FAIL=${spec%%:*}
    run_info "$tmp/err.out"
    [ "$rc" = 1 ] || fail "$FAKE_NVML_FAIL: exited $rc, expected 1"
    grep -qF "${spec#*:}" "$tmp/err.out.err" || { cat "$tmp/err.out.err"; fail "$FAKE_NVML_FAIL message"; }
done
ok "NVML that will not initialize: exit 1 with the driver's message"

clean_env
export VRAM_BACKEND=cuda VRAM_CUDA_LIBRARY=$FAKE_CUDA FAKE_CUDA_FAIL="cuMemGetInfo_v2=214"
run_info "$tmp/err.json" --json
check "$tmp/err.json" "${D0}['health']=='ERROR' and 'CUDA_ERROR_ECC_UNCORRECTABLE' in ${D0}['error']"
export FAKE_CUDA_FAIL="cuInit=999"
run_info "$tmp/err.out"
if [ "$rc" != 1 ] || ! grep -qF "cuInit failed" "$tmp/err.out.err"; then
    cat "$tmp/err.out.err"
    fail "cuInit failure: exit $rc"
fi
ok "cuda failures: ERROR state, exit 1 when cuInit fails"

# What the driver API reports for a machine that cannot run CUDA, each named
# with what to do (the driver API's old-driver code is 36, not the runtime's 35).
for spec in "803:does not match the NVIDIA kernel module" "804:forward-compatibility driver" \
    "36:older than vram's calls need" \
    "802:nvidia-fabricmanager" "100:reports no device"; do
    export FAKE_CUDA_FAIL="cuInit=${spec%%:*}"
    run_info "$tmp/err.out"
    if [ "$rc" != 1 ] || ! grep -qF "${spec#*:}" "$tmp/err.out.err"; then
        cat "$tmp/err.out.err"
        fail "$FAKE_CUDA_FAIL: exit $rc, or no '${spec#*:}'"
    fi
done
ok "cuInit's driver/module mismatch, forward-compat, not-ready and no-device: each explained"

# Every call we make, failing with a spread of codes: never a crash, and a
# run that succeeds prints valid JSON.
nvml_calls="nvmlInit_v2 nvmlDeviceGetCount_v2 nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetName
nvmlDeviceGetUUID nvmlDeviceGetMemoryInfo_v2 nvmlDeviceGetCudaComputeCapability
nvmlDeviceGetUtilizationRates nvmlDeviceGetTemperature nvmlDeviceGetPowerUsage
nvmlDeviceGetComputeRunningProcesses_v3"
cuda_calls="cuInit cuDeviceGetCount cuDeviceGet cuDeviceGetName cuDeviceGetUuid_v2 cuDeviceGetAttribute
cuDevicePrimaryCtxRetain cuCtxGetCurrent cuCtxSetCurrent cuMemGetInfo_v2"
runs=0
mkdir "$tmp/spread"
for backend in nvml cuda; do
    clean_env
    export VRAM_BACKEND=$backend VRAM_NVML_LIBRARY=$FAKE_NVML VRAM_CUDA_LIBRARY=$FAKE_CUDA VRAM_DRIVER_RETRIES=1
    export FAKE_NVML_PROCESSES="1:1G"
    if [ $backend = nvml ]; then calls=$nvml_calls codes="1 2 3 7 9 10 13 15 999"; else calls=$cuda_calls codes="1 2 3 34 100 201 214 999"; fi
    for call in $calls; do
        for code in $codes; do
            if [ $backend = nvml ]; then export FAKE_NVML_FAIL="$call=$code"; else export FAKE_CUDA_FAIL="$call=$code"; fi
            run_info "$tmp/spread.json" --json
            runs=$((runs + 1))
            case $rc in
            0) mv "$tmp/spread.json" "$tmp/spread/$backend-$call-$code.json" ;;
            1) [ -s "$tmp/spread.json.err" ] || fail "$call=$code: exit 1 without a message" ;;
            *) fail "$call=$code: exit $rc" ;;
            esac
        done
    done
done
# One interpreter for all the successful runs' JSON (starting one per run is slow).
python3 - "$tmp"/spread/*.json <<'PY' || fail "invalid JSON after an injected failure"
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    assert d['device_count'] == len(d['devices']) >= 1, path
    for x in d['devices']:
        assert x['health'] in ('AVAILABLE', 'BUSY', 'ERROR'), path
        assert (x['health'] == 'ERROR') == (x['error'] is not None), path
PY
ok "$runs injected failures: no crash, valid JSON or a message"

echo "$passed passed, 0 failed"
