#!/usr/bin/env bash
# Bytes the dashboard moves per 2 s refresh, the old way (the whole 10-minute
# history of every GPU each time) against deltas (only the buckets since the
# last refresh), on a vramd with sim GPUs that has sampled for SECONDS at
# 0.2 s. The old requests are extrapolated from bytes per history point to
# a full 10-minute window (1,000 points), which a vramd up for 10 minutes
# serves.
# usage: bench/watch/dashboard_refresh.sh BUILD_DIR [NGPUS] [SECONDS]
set -euo pipefail
B=${1:?build dir}; N=${2:-2}; S=${3:-30}
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
export VRAM_BACKEND=sim VRAM_SIM="${N}xH100-80GB" VRAM_SIM_STATE=$T/sim VRAM_SOCKET=$T/s VRAM_DB=$T/db VRAM_LISTEN=127.0.0.1:0
"$B/vramd" --foreground --watch-interval 0.2 >"$T/log" 2>&1 &
until curl -sf --unix-socket "$T/s" http://x/v1/health >/dev/null; do sleep 0.1; done
for d in $(seq 0 $((N - 1))); do "$B/vram" sim alloc --mem $((d + 3))GiB --device "$d" >/dev/null & done
sleep "$S"
TCP=$(curl -s --unix-socket "$T/s" http://x/v1/health | python3 -c 'import json,sys; print(json.load(sys.stdin)["tcp"])')
python3 - "$TCP" "$N" <<'PY'
import json, sys, time, urllib.request
base, n = "http://" + sys.argv[1], int(sys.argv[2])
def size(path):
    with urllib.request.urlopen(base + path) as r:
        return len(r.read())
common = sum(size(p) for p in ("/v1/status", "/v1/watch", "/v1/alerts?limit=5", "/v1/health"))
now = json.load(urllib.request.urlopen(base + "/v1/watch"))["t"]
old = delta = 0
for d in range(n):
    h = json.load(urllib.request.urlopen(base + "/v1/history?device=%d&from=-600" % d))
    b = size("/v1/history?device=%d&from=-600" % d)
    pts = len(json.dumps(h["points"], separators=(",", ":")))
    per_point = pts / max(1, len(h["points"]))
    old += (b - pts) + per_point * 1000  # the same document with a full window
    step = 2.0
    delta += size("/v1/history?device=%d&from=%r&step=%r" % (d, (now // step - 1) * step, step))
print("GPUs %d: common JSON %d B; history old (full window, extrapolated) %d B; deltas %d B" % (n, common, old, delta))
print("per refresh: old %.1f kB, new %.1f kB (%.0fx less)" % ((common + old) / 1e3, (common + delta) / 1e3, (common + old) / (common + delta)))
PY
