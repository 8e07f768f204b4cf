#!/usr/bin/env bash
# vram info's monitoring side: --query/--format like nvidia-smi --query-gpu,
# --watch redrawing until interrupted, and with vramd running: reserved
# memory, free for admission, process users and command lines.
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"

out=$("$VRAM" info --query index,name,memory.used,memory.total,utilization.gpu,power.draw --format csv)
[ "$(head -1 <<<"$out")" = "index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], power.draw [W]" ] \
    || fail "header: $out"
grep -qx "1, H100-80GB, 0 MiB, 81920 MiB, 0 %, 70.00 W" <<<"$out" || fail "row: $out"
out=$("$VRAM" info --query name,memory.free,memory.reserved --format csv,noheader,nounits -i 1)
[ "$out" = "H100-80GB, 81920, [N/A]" ] || fail "noheader,nounits without vramd: $out"
for bad in "--query nope" "--query name --format xml" "--query name --format csv,bold" "--format csv"; do
    rc=0
    # shellcheck disable=SC2086
    "$VRAM" info $bad >/dev/null 2>"$T/err" || rc=$?
    [ $rc -eq 2 ] || fail "exit status $rc (usage error is 2) for: $bad"
    grep -q "vram info:" "$T/err" || fail "no message for: $bad"
done
grep -q 'unknown field "nope"' <("$VRAM" info --query nope 2>&1) || fail "bad field not named"
pass "--query with csv, noheader, nounits; bad fields and formats named"

# --watch: redraws until SIGINT, then exits 0
"$VRAM" info --watch 0.2 >"$T/watch.out" 2>&1 &
W=$!
frames() { [ "$(grep -c "devices (sim backend)" "$T/watch.out")" -ge "$1" ]; }
wait_for "three frames" frames 3
kill -INT $W
wait $W || fail "info --watch exit status $?"
grep -q $'\033\\[H' "$T/watch.out" || fail "no screen redraw"
pass "--watch redraws until interrupted"

start_daemon
"$VRAM" run --mem 10GiB --name infojob -- "$VRAM" sim alloc --mem 4GiB >/dev/null 2>&1 &
job_running() { [ "$(job_state 1)" = running ]; }
wait_for "the job" job_running
uses_4g() { "$VRAM" info --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if d['devices'][0]['used_bytes']==4*$GiB else 1)"; }
wait_for "the job's memory" uses_4g
"$VRAM" info --json >"$T/i.json"
python3 - "$T/i.json" "$(id -un)" <<'PY' || fail "info --json with vramd: $(cat "$T/i.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["vramd"] is True
g = d["devices"][0]
assert g["reserved_bytes"] == 10 * 2**30, g
assert g["free_for_admission_bytes"] > 0
p = g["processes"][0]
assert p["user"] == sys.argv[2] and "sim alloc --mem 4GiB" in p["command"], p
PY
"$VRAM" info | grep -q "RESV GiB" || fail "table without the reserved column"
"$VRAM" info | grep -E "^ +0 .* 10\.00 " >/dev/null || fail "reserved 10 GiB not shown: $("$VRAM" info)"
"$VRAM" info | grep -q "sim alloc --mem 4GiB" || fail "process command line missing"
out=$("$VRAM" info --query index,memory.reserved,memory.free_for_admission --format csv,noheader)
grep -q "^0, 10240 MiB, " <<<"$out" || fail "query reserved: $out"
pass "with vramd: reserved, free for admission, process users and command lines"
