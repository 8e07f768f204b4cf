#!/usr/bin/env bash
# Release: when a job's process dies by kill -9 (COMMAND, or `vram run`
# itself), its reservation is freed and the next queued job starts within
# 1 s; multi-GPU jobs get all their GPUs at once; reserved <= usable at every
# sample throughout.
source "$(dirname "$0")/daemon_lib.sh"
export VRAM_SAFETY_MARGIN=0
start_daemon

now() { date +%s.%N; }
# started_within T0 ID: prints how long after T0 vramd started job ID (its own
# started_at, so the test's polling is not counted); fails above 1 s.
started_within() {
    python3 -c "import sys; d=float(sys.argv[2])-float(sys.argv[1]); print('%.3f' % d); sys.exit(0 if d < 1.0 else 1)" \
        "$1" "$(field "$(api GET "/v1/jobs/$2")" 'd["started_at"]')"
}
# wait_state, then one sample of the ledger
watch_state() { wait_state "$1" "$2"; check_ledger; }

# Two GPUs of 80 GiB. A reserves 70 GiB on each GPU (a 2-GPU job) and uses it
# on GPU 0 (COMMAND is one process: PR_SET_PDEATHSIG kills it with vram run);
# B waits for 60 GiB.
"$VRAM" run --quiet --gpus 2 --mem 70GiB --name A -- "$VRAM" sim alloc --mem 70GiB --device 0 >"$T/a.out" 2>&1 &
A=$!
watch_state 1 running
a=$(api GET /v1/jobs/1)
[ "$(field "$a" 'sorted(d["devices"])')" = "[0, 1]" ] || fail "A not on both GPUs: $a"
"$VRAM" run --quiet --mem 60GiB --name B -- sh -c "echo started; exec '$VRAM' sim alloc --mem 60GiB --device \$CUDA_VISIBLE_DEVICES" >"$T/b.out" 2>&1 &
B=$!
watch_state 2 queued
wait_line "$T/a.out" holding
used=$(field "$(api GET /v1/status)" 'd["devices"][0]["used_bytes"]')
[ "$used" = $((70 * GiB)) ] || fail "sim usage of A not seen: $used"
[ "$(field "$(api GET /v1/status)" 'd["devices"][0]["unmanaged_bytes"]')" = 0 ] || fail "A's own use counted as outside use"

# kill -9 of `vram run` itself: the daemon sees the pid die (its COMMAND dies with it)
t0=$(now)
kill -9 "$A"
watch_state 2 running
{ wait "$A"; } 2>/dev/null || true
d=$(started_within "$t0" 2) || fail "release after kill -9 of vram run took $d s"
j=$(api GET /v1/jobs/1)
[ "$(field "$j" 'd["state"]')" = failed ] || fail "A: $j"
grep -q "exited without reporting" <<<"$j" || fail "A's reason: $j"
pass "kill -9 of vram run: reservation released, next job running after $d s"

# kill -9 of the job's COMMAND: vram run reports it at once. C needs 60 GiB on
# both GPUs, so it waits for B.
# C holds its GPUs until the test writes to the fifo $T/goC (a short sleep
# could end before the test sees it running).
mkfifo "$T/goC"
"$VRAM" run --quiet --gpus 2 --mem 60GiB --name C -- sh -c "read _ <'$T/goC'" >/dev/null 2>&1 &
C=$!
watch_state 3 queued
wait_line "$T/b.out" holding   # B's COMMAND holds its 60 GiB
child=$(pgrep -P "$B" -f "sim alloc") || fail "B's COMMAND not found"
t0=$(now)
kill -9 "$child"
watch_state 3 running
d=$(started_within "$t0" 3) || fail "release after kill -9 of COMMAND took $d s"
echo go >"$T/goC"
wait "$C"
set +e; wait "$B"; rc=$?; set -e
[ $rc = 137 ] || fail "vram run should return 128+9 for a killed COMMAND, got $rc"
j=$(api GET /v1/jobs/2)
[ "$(field "$j" 'd["state"]')" = failed ] && [ "$(field "$j" 'd["exit_status"]')" = 137 ] || fail "B: $j"
pass "kill -9 of COMMAND: vram run exits 137, next job running after $d s"

# Memory used outside vramd shrinks what it admits.
"$VRAM" sim alloc --mem 50GiB --device 0 >"$T/out0" &
OUT=$!
"$VRAM" sim alloc --mem 50GiB --device 1 >"$T/out1" &
OUT2=$!
wait_line "$T/out0" holding
wait_line "$T/out1" holding
[ "$(field "$(api GET /v1/status)" 'd["devices"][1]["unmanaged_bytes"]')" = $((50 * GiB)) ] || fail "outside use not seen: $(api GET /v1/status)"
"$VRAM" run --quiet --mem 40GiB --name D -- true &
D=$!
watch_state 4 queued
check_ledger
kill "$OUT2"; wait "$OUT2" || true
watch_state 4 done
wait "$D"
[ "$(field "$(api GET /v1/jobs/4)" 'd["devices"]')" = "[1]" ] || fail "D not on the freed GPU"
kill "$OUT"; wait "$OUT" || true
pass "memory used outside vramd is not handed out; D started when it was freed"
