#!/usr/bin/env bash
# vram info and vram sim against the sim and cpu backends: reported numbers,
# two processes sharing simulated GPUs, failure injection, usage errors.
set -euo pipefail
VRAM_BIN=${VRAM_BIN:?VRAM_BIN must name the vram binary}
tmp=$(mktemp -d)
holders=()
cleanup() {
    for pid in "${holders[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# Never let a real or fake driver on this machine decide the backend.
export VRAM_NVML_LIBRARY=$tmp/missing/libnvidia-ml.so.1 VRAM_CUDA_LIBRARY=$tmp/missing/libcuda.so.1
export VRAM_SIM=2xH100-80GB VRAM_SIM_STATE=$tmp/sim.state
unset VRAM_BACKEND
GIB=$((1 << 30))
passed=0

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { passed=$((passed + 1)); echo "ok - $*"; }

# check JSON_FILE PYTHON_EXPR: the expression sees the document as `d`.
check() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2" ||
        { cat "$1" >&2; fail "$2"; }
}

# expect_exit CODE NEEDLE CMD...: exit status CODE and NEEDLE on stderr.
expect_exit() {
    local want=$1 needle=$2 rc=0
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" = "$want" ] || { cat "$tmp/err" >&2; fail "$* exited $rc, expected $want"; }
    grep -qF -- "$needle" "$tmp/err" || { cat "$tmp/err" >&2; fail "$* stderr lacks \"$needle\""; }
}

# ---- sim: the reported numbers --------------------------------------
"$VRAM_BIN" info --json >"$tmp/a.json"
check "$tmp/a.json" "d['backend']=='sim' and d['device_count']==2 and len(d['devices'])==2"
check "$tmp/a.json" "'no NVIDIA driver' in d['reason'] and 'using 2 simulated GPUs from VRAM_SIM' in d['reason']"
check "$tmp/a.json" "all(x['total_bytes']==80*$GIB and x['used_bytes']==0 and x['free_bytes']==80*$GIB for x in d['devices'])"
check "$tmp/a.json" "[x['index'] for x in d['devices']]==[0,1] and all(x['name']=='H100-80GB' and x['backend']=='sim' for x in d['devices'])"
check "$tmp/a.json" "all(x['compute_capability']=='9.0' and x['multiprocessors']==132 and x['health']=='AVAILABLE' and x['error'] is None and x['processes']==[] for x in d['devices'])"
check "$tmp/a.json" "d['devices'][0]['uuid']!=d['devices'][1]['uuid']"
ok "sim devices in JSON"

"$VRAM_BIN" info -i 1 --json >"$tmp/b.json"
check "$tmp/b.json" "d['device_count']==2 and [x['index'] for x in d['devices']]==[1]"
"$VRAM_BIN" info --id=1 --json >"$tmp/b.json"
check "$tmp/b.json" "[x['index'] for x in d['devices']]==[1]"
ok "-i/--id selects one device"

"$VRAM_BIN" info >"$tmp/table" 2>"$tmp/err"
grep -q "2 devices (sim backend)" "$tmp/table" || fail "table header"
grep -Eq "^ +0 +H100-80GB +80\.00 +0\.00 +80\.00 +9\.0 +132 .*AVAILABLE" "$tmp/table" || { cat "$tmp/table"; fail "table row"; }
# why sim was chosen is a note: stderr stays empty unless -v (issue 27)
[ ! -s "$tmp/err" ] || { cat "$tmp/err" >&2; fail "a note on stderr without -v"; }
"$VRAM_BIN" -v info >/dev/null 2>"$tmp/err"
grep -q "using 2 simulated GPUs" "$tmp/err" || fail "reason on stderr with -v"
ok "table"

# ---- two processes share the simulated GPUs ----------------------------
"$VRAM_BIN" sim alloc --mem 10GiB --seconds 30 >"$tmp/holder.out" &
holder=$!
holders+=("$holder")
for _ in $(seq 200); do [ -s "$tmp/holder.out" ] && break; sleep 0.05; done
grep -q "holding 10.00 GiB on sim device 0" "$tmp/holder.out" || fail "holder did not start"
"$VRAM_BIN" info --json >"$tmp/c.json"
check "$tmp/c.json" "d['devices'][0]['used_bytes']==10*$GIB and d['devices'][0]['free_bytes']==70*$GIB and d['devices'][1]['used_bytes']==0"
check "$tmp/c.json" "[(p['pid'],p['used_bytes'],p['name']) for p in d['devices'][0]['processes']]==[($holder,10*$GIB,'vram')]"
# The memory is really taken: 71 GiB no longer fits, 70 GiB does.
expect_exit 1 "70.00 GiB free" "$VRAM_BIN" sim alloc --mem 71GiB --seconds 0
"$VRAM_BIN" sim alloc --mem 70GiB --seconds 0 >/dev/null
ok "another process's allocation is visible as used memory and per-process usage"

kill -TERM "$holder"
rc=0
wait "$holder" || rc=$?
[ "$rc" = 0 ] || fail "sim alloc exited $rc after SIGTERM"
grep -q "released 10.00 GiB" "$tmp/holder.out" || fail "holder did not release"
"$VRAM_BIN" info --json >"$tmp/d.json"
check "$tmp/d.json" "d['devices'][0]['used_bytes']==0 and d['devices'][0]['processes']==[]"
ok "SIGTERM frees the memory"

"$VRAM_BIN" sim alloc --mem 30GiB --device 1 >"$tmp/holder2.out" &
holder=$!
holders+=("$holder")
for _ in $(seq 200); do [ -s "$tmp/holder2.out" ] && break; sleep 0.05; done
"$VRAM_BIN" info -i 1 --json >"$tmp/e.json"
check "$tmp/e.json" "d['devices'][0]['used_bytes']==30*$GIB"
kill -KILL "$holder"
wait "$holder" 2>/dev/null || true
"$VRAM_BIN" info -i 1 --json >"$tmp/f.json"
check "$tmp/f.json" "d['devices'][0]['used_bytes']==0 and d['devices'][0]['processes']==[]"
ok "memory of a killed process is reclaimed"

"$VRAM_BIN" sim alloc --mem 5GiB --seconds 30 >"$tmp/holder3.out" &
holder=$!
holders+=("$holder")
for _ in $(seq 200); do [ -s "$tmp/holder3.out" ] && break; sleep 0.05; done
"$VRAM_BIN" sim status >"$tmp/status"
grep -q "state file: $VRAM_SIM_STATE" "$tmp/status" || fail "sim status names the state file"
grep -Eq "pid $holder +vram +5.00 GiB" "$tmp/status" || { cat "$tmp/status"; fail "sim status lists the holder"; }
"$VRAM_BIN" sim status --json >"$tmp/st.json"
check "$tmp/st.json" "d['state_file']=='$VRAM_SIM_STATE' and d['devices'][0]['used_bytes']==5*$GIB and [p['pid'] for p in d['devices'][0]['processes']]==[$holder]"
"$VRAM_BIN" sim free-all --json >"$tmp/fa.json"
check "$tmp/fa.json" "d=={'dropped': 1}"
"$VRAM_BIN" info --json >"$tmp/s.json"
check "$tmp/s.json" "d['devices'][0]['used_bytes']==0"
kill -TERM "$holder"
rc=0
wait "$holder" || rc=$?
[ "$rc" = 0 ] || fail "holder exited $rc after its memory was dropped by free-all"
ok "sim status and free-all"

CUDA_VISIBLE_DEVICES=1,0 "$VRAM_BIN" sim alloc --mem 1GiB --seconds 0 >"$tmp/cvd.out"
grep -q "on sim device 1" "$tmp/cvd.out" || fail "sim alloc follows CUDA_VISIBLE_DEVICES"
CUDA_VISIBLE_DEVICES=1 "$VRAM_BIN" sim alloc --mem 1GiB --device 0 --seconds 0 >"$tmp/cvd.out"
grep -q "on sim device 0" "$tmp/cvd.out" || fail "--device wins over CUDA_VISIBLE_DEVICES"
ok "sim alloc defaults to the first of CUDA_VISIBLE_DEVICES"

# ---- custom models and failure injection -------------------------------
VRAM_SIM="mygpu:24GiB,A100-40GB@fail" VRAM_SIM_STATE=$tmp/g.state "$VRAM_BIN" info --json >"$tmp/g.json"
check "$tmp/g.json" "d['devices'][0]['name']=='mygpu' and d['devices'][0]['total_bytes']==24*$GIB and d['devices'][0]['compute_capability'] is None and d['devices'][0]['multiprocessors'] is None and d['devices'][0]['power_w'] is None"
check "$tmp/g.json" "d['devices'][1]['health']=='ERROR' and 'simulated driver failure' in d['devices'][1]['error'] and d['devices'][1]['total_bytes'] is None"
check "$tmp/g.json" "d['devices'][1]['name']=='A100-40GB' and d['devices'][1]['processes'] is None"
VRAM_SIM="mygpu:24GiB,A100-40GB@fail" VRAM_SIM_STATE=$tmp/g.state "$VRAM_BIN" info >"$tmp/table" 2>/dev/null
grep -Eq "^ +1 .*ERROR" "$tmp/table" || { cat "$tmp/table"; fail "ERROR row"; }
grep -q "device 1: simulated driver failure" "$tmp/table" || fail "error line"
ok "custom model and a failing device (ERROR, no crash)"

# ---- cpu backend vs /proc/meminfo ------------------------------------------
VRAM_BACKEND=cpu "$VRAM_BIN" info --json >"$tmp/h.json"
total_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
check "$tmp/h.json" "d['backend']=='cpu' and d['reason']=='' and d['device_count']==1"
check "$tmp/h.json" "d['devices'][0]['total_bytes']==$total_kib*1024"
# MemAvailable moves a little between the two reads: within 5% of total.
check "$tmp/h.json" "abs(d['devices'][0]['free_bytes']-$avail_kib*1024) <= $total_kib*1024*0.05"
check "$tmp/h.json" "d['devices'][0]['used_bytes']+d['devices'][0]['free_bytes']==d['devices'][0]['total_bytes']"
check "$tmp/h.json" "d['devices'][0]['multiprocessors']==$(nproc) and d['devices'][0]['temperature_c'] is None"
check "$tmp/h.json" "len(d['devices'][0]['processes'])==1 and d['devices'][0]['processes'][0]['used_bytes']>0"
VRAM_SIM= "$VRAM_BIN" info --json >"$tmp/i.json"
check "$tmp/i.json" "d['backend']=='cpu' and 'VRAM_SIM not set' in d['reason']"
ok "cpu backend matches /proc/meminfo; auto falls back to it"

# ---- usage and runtime errors --------------------------------------------
expect_exit 2 '"bogus"' env VRAM_SIM=2xH100-80GB,bogus "$VRAM_BIN" info
expect_exit 2 '"12XB"' env VRAM_SIM=mygpu:12XB "$VRAM_BIN" info --json
expect_exit 2 '"10XB"' "$VRAM_BIN" sim alloc --mem 10XB
expect_exit 2 "no device 5" "$VRAM_BIN" info -i 5
expect_exit 2 '"x"' "$VRAM_BIN" info -i x
expect_exit 2 '"--frobnicate"' "$VRAM_BIN" info --frobnicate
expect_exit 2 'unexpected argument "extra"' "$VRAM_BIN" info extra
expect_exit 2 '"warp"' env VRAM_BACKEND=warp "$VRAM_BIN" info
expect_exit 2 "no device 2" "$VRAM_BIN" sim alloc --mem 1GiB --device 2
expect_exit 2 "--mem SIZE is required" "$VRAM_BIN" sim alloc
expect_exit 2 "VRAM_SIM" env VRAM_SIM= "$VRAM_BIN" sim status
expect_exit 1 "libnvidia-ml.so.1" env VRAM_BACKEND=nvml "$VRAM_BIN" info
expect_exit 1 "81.00 GiB requested" "$VRAM_BIN" sim alloc --mem 81GiB --seconds 0
"$VRAM_BIN" info --help | grep -q -- "--json" || fail "help"
ok "usage errors exit 2 naming the bad token; runtime errors exit 1"

echo "$passed passed, 0 failed"
