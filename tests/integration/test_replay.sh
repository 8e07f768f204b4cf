#!/usr/bin/env bash
# vram replay: the shared traces through every strategy and both baselines
# (JSON keys and sane figures), and malformed traces rejected with the line.
set -euo pipefail
: "${VRAM_BIN:?}" "${VRAM_SOURCE_DIR:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

# A small trace of our own, so the test runs without ../shared too.
cat >"$tmp/small.trace" <<'T'
# two steps of a toy loop
a 1 1048576
a 2 4096
a 3 25165824
f 2
a 4 3000000
f 3
f 4
a 5 25165824
f 5
a 6 4096
T
traces=("$tmp/small.trace")
shared=$VRAM_SOURCE_DIR/../shared/traces
if [ -r "$shared/mlp_train.trace" ]; then
  traces+=("$shared/mlp_train.trace" "$shared/resnet18_train.trace")
else
  echo "note: $shared not present; replaying only the built-in trace"
fi

check_json() { # file: every documented key present, figures consistent
  python3 - "$1" <<'PY'
import json, sys
def check(d):
    keys = ["ops", "ns_per_op_p50", "ns_per_op_p99", "peak_requested_bytes",
            "peak_reserved_bytes", "fragmentation_ratio", "device_allocs", "ooms",
            "batch_ns_per_op_p50", "batch_ns_per_op_mean", "batch_ns_per_op_with_device_cost"]
    missing = [k for k in keys if k not in d]
    assert not missing, f"missing keys {missing}"
    assert d["ops"] > 0 and d["ooms"] == 0, d
    assert 0 < d["ns_per_op_p50"] <= d["ns_per_op_p99"], d
    # Batch timing: positive, and the device calls' modelled cost on top of the p50.
    assert 0 < d["batch_ns_per_op_p50"] and 0 < d["batch_ns_per_op_mean"], d
    extra = d["batch_ns_per_op_with_device_cost"] - d["batch_ns_per_op_p50"]
    assert abs(extra - d["device_cost_ns"] / d["ops"]) < 1e-6 * max(1, extra), d
    assert d["peak_reserved_bytes"] >= d["peak_requested_bytes"] > 0 or d["baseline"] == "malloc", d
    if d["peak_requested_bytes"]:
        ratio = d["peak_reserved_bytes"] / d["peak_requested_bytes"]
        assert abs(ratio - d["fragmentation_ratio"]) < 1e-9, d
doc = json.load(open(sys.argv[1]))
runs = doc.get("runs", [doc])
assert runs and all(r["trace"] == runs[0]["trace"] for r in runs), doc
for d in runs:
    check(d)
PY
}

for t in "${traces[@]}"; do
  events=$(grep -c '^[af] ' "$t")
  for s in greedy balanced consolidated fragmentation-aware; do
    if "$VRAM_BIN" replay "$t" --strategy "$s" --json >"$tmp/out.json" && check_json "$tmp/out.json" &&
       [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ops"])' "$tmp/out.json")" = "$events" ]; then
      ok
    else bad "replay $t --strategy $s"; cat "$tmp/out.json" || true; fi
  done
  # each baseline beside the pool: {"runs": [pool, baseline]}
  for b in device malloc torch torch-expandable; do
    if "$VRAM_BIN" replay "$t" --baseline "$b" --json >"$tmp/out.json" && check_json "$tmp/out.json" &&
       python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"]; assert [x["baseline"] for x in r] == ["none", sys.argv[2]], r' "$tmp/out.json" "$b"; then ok
    else bad "replay $t --baseline $b"; fi
  done
done

# Every block of the small trace is freed, so a device baseline allocates and
# frees once per request; the pool reuses its cache on the second pass.
"$VRAM_BIN" replay "$tmp/small.trace" --baseline device --json >"$tmp/dev.json"
"$VRAM_BIN" replay "$tmp/small.trace" --strategy greedy --repeat 3 --json >"$tmp/pool.json"
if python3 - "$tmp/dev.json" "$tmp/pool.json" <<'PY'
import json, sys
dev, pool = (json.load(open(p)) for p in sys.argv[1:])
dev = dev["runs"][1]
assert dev["device_allocs"] == 6 and dev["device_frees"] == 6, dev
assert pool["ops"] == 30 and pool["repeat"] == 3, pool
assert pool["device_allocs"] <= 3, pool   # cached after the first pass
PY
then ok; else bad "device baseline counts / pool caching"; fi

# Expandable segments (the simulated GPU has virtual memory): the second pass
# of a repeated trace makes no device call, the cost model charges what the
# calls would cost, and --expandable false gives segments again.
"$VRAM_BIN" replay "$tmp/small.trace" --repeat 2 --json >"$tmp/exp.json"
"$VRAM_BIN" replay "$tmp/small.trace" --repeat 2 --expandable false \
  --device-cost alloc=1000,free=0,unmap=3 --json >"$tmp/seg.json"
"$VRAM_BIN" replay "$tmp/small.trace" --repeat 2 --expandable false \
  --device-cost alloc=0,free=0,map=0 --json >"$tmp/free.json"
if python3 - "$tmp/exp.json" "$tmp/seg.json" "$tmp/free.json" <<'PY'
import json, sys
exp, seg, free = (json.load(open(p)) for p in sys.argv[1:])
assert exp["expandable"] is True and exp["device_maps"] > 0 and exp["device_allocs"] == 0, exp
assert exp["second_pass_device_calls"] == 0, exp
assert exp["device_maps"] == exp["first_pass_device_calls"], exp
# live requests lie in mapped granules: their peak is at most what was mapped
assert 0 < exp["peak_touched_bytes"] <= exp["peak_reserved_bytes"], exp
# a pass without device calls keeps every granule it touches mapped
assert exp["later_pass_device_calls_max"] == 0, exp
assert 0 < exp["pass_touched_bytes"] <= exp["peak_reserved_bytes"], exp
assert seg["expandable"] is False and seg["device_maps"] == 0 and seg["device_allocs"] > 0, seg
assert seg["device_cost_us"] == {"alloc": 1000.0, "free": 0.0, "map": 29.0, "unmap": 3.0,
                                 "move": 33.0}, seg
assert abs(seg["device_cost_ns"] - seg["device_allocs"] * 1e6) < 1e-6, seg
# 1 ms per segment allocation, spread over the operations
extra = seg["ns_per_op_with_device_cost"] - free["ns_per_op_with_device_cost"]
assert extra > 0.5 * seg["device_allocs"] * 1e6 / seg["ops"], (seg, free)
PY
then ok; else bad "expandable segments / device cost model"; cat "$tmp/exp.json"; fi

# One pass: no later pass; the granules a pass touches over its course are
# at least those it touches at any one moment. Three passes: the most calls
# of a later pass is reported (none with expandable segments).
"$VRAM_BIN" replay "$tmp/small.trace" --json >"$tmp/one.json"
"$VRAM_BIN" replay "$tmp/small.trace" --repeat 3 --json >"$tmp/three.json"
if python3 - "$tmp/one.json" "$tmp/three.json" <<'PY'
import json, sys
one, three = (json.load(open(p)) for p in sys.argv[1:])
assert one["later_pass_device_calls_max"] is None and one["second_pass_device_calls"] is None, one
assert 0 < one["peak_touched_bytes"] <= one["pass_touched_bytes"] <= one["peak_reserved_bytes"], one
assert three["later_pass_device_calls_max"] == 0 == three["second_pass_device_calls"], three
assert three["pass_touched_bytes"] <= three["peak_reserved_bytes"], three
PY
then ok; else bad "granule floors / later passes"; cat "$tmp/one.json" "$tmp/three.json"; fi

# The human table names the figures.
if "$VRAM_BIN" replay "$tmp/small.trace" | grep -q "fragmentation ratio"; then ok; else bad "table output"; fi

# Under a low address-space limit the pool reserves less room for its block
# metadata instead of failing (it used to ask for 16 GiB, all or nothing).
if (ulimit -v 2000000 && "$VRAM_BIN" replay "$tmp/small.trace" --json >"$tmp/ulimit.json") &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ops"] > 0, d' "$tmp/ulimit.json"
then ok; else bad "replay under ulimit -v 2000000"; fi

# A device too small for the trace: OOMs are counted, the replay goes on.
if "$VRAM_BIN" replay "$tmp/small.trace" --device-mem 20MiB --json >"$tmp/oom.json" &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ooms"] >= 2, d' "$tmp/oom.json"; then ok
else bad "--device-mem 20MiB should count OOMs"; fi

# Malformed traces: exit 1, the file and line in the message.
expect_reject() { # text line-number words
  printf '%b' "$1" >"$tmp/bad.trace"
  rc=0
  "$VRAM_BIN" replay "$tmp/bad.trace" >"$tmp/stdout" 2>"$tmp/err" || rc=$?
  if [ $rc -eq 1 ] && grep -q "bad.trace:$2:" "$tmp/err" && grep -q "$3" "$tmp/err"; then ok
  else bad "rejection of '$1' (rc $rc): $(cat "$tmp/err")"; fi
}
expect_reject 'a 1 10\nf 1\nf 1\n' 3 'unknown id 1'
expect_reject 'a 1 10\n# c\nq 2\n' 3 'unknown event'
expect_reject 'a 1 10\na 2 ten\n' 2 'bad number'
expect_reject 'a 1 10\na 1 20\n' 2 'already live'

# --baseline compares side by side: the pool's table, then a column for the
# pool and each baseline, each run on its own device (the device baseline's
# calls are its own, not the pool's)
"$VRAM_BIN" replay "$tmp/small.trace" --repeat 2 --baseline device,torch >"$tmp/side.txt"
if grep -q '^allocator  pool, strategy balanced' "$tmp/side.txt" &&
   grep -Eq '^side by side +pool balanced +device +torch$' "$tmp/side.txt" &&
   grep -Eq '^device calls, second pass +0 +12 +0$' "$tmp/side.txt"; then ok
else bad "--baseline side by side: $(cat "$tmp/side.txt")"; fi

# Usage errors: exit 2.
for args in "--strategy best $tmp/small.trace" "--baseline gpu $tmp/small.trace" \
            "--baseline device,device $tmp/small.trace" "--baseline device, $tmp/small.trace" \
            "--repeat 0 $tmp/small.trace" "--device-mem lots $tmp/small.trace" \
            "--device-cost map=x $tmp/small.trace" "--device-cost gpu=3 $tmp/small.trace" \
            "--device-cost alloc=-1 $tmp/small.trace" "--expandable maybe $tmp/small.trace" ""; do
  rc=0
  # shellcheck disable=SC2086
  "$VRAM_BIN" replay $args >/dev/null 2>&1 || rc=$?
  if [ $rc -eq 2 ]; then ok; else bad "replay $args: exit $rc, expected 2"; fi
done
if "$VRAM_BIN" replay "$tmp/missing.trace" 2>"$tmp/err"; then bad "missing file accepted"
elif grep -q "missing.trace" "$tmp/err"; then ok; else bad "missing file message"; fi

# Nothing left behind in the temp dir by the private sim devices.
if [ -z "$(find "$tmp" -name 'vram-replay-*')" ]; then ok; else bad "replay left its sim state behind"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
