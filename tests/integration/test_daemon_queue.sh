#!/usr/bin/env bash
# vram run through vramd on one simulated 40 GiB GPU: admission, queue order,
# priorities, timeouts, degradation to a smaller batch, OOM retry, exit status,
# and reserved <= usable at every sample.
export VRAM_SIM=A100-40GB
source "$(dirname "$0")/daemon_lib.sh"
export VRAM_SAFETY_MARGIN=0
start_daemon --backfill false

# Admission and the environment of COMMAND
out=$("$VRAM" run --quiet --mem 10GiB --name env -- sh -c 'echo "$CUDA_VISIBLE_DEVICES|$VRAM_JOB_ID"')
[ "$out" = "0|1" ] || fail "environment: $out"
[ "$(job_state 1)" = done ] || fail "job 1 not done"
set +e; "$VRAM" run --quiet --mem 1GiB -- sh -c 'exit 7'; rc=$?; set -e
[ $rc = 7 ] || fail "exit status $rc, want 7"
j=$(api GET /v1/jobs/2)
[ "$(field "$j" 'd["state"]')" = failed ] && [ "$(field "$j" 'd["exit_status"]')" = 7 ] || fail "job 2: $j"
pass "admission, CUDA_VISIBLE_DEVICES/VRAM_JOB_ID, COMMAND's exit status"

# A blocker takes the whole GPU while jobs queue behind it; it holds until
# the test writes to the fifo $T/go (no timer decides the order).
next_id() { field "$(api GET '/v1/jobs?limit=1')" 'max([j["id"] for j in d["jobs"]] + [0]) + 1'; }
mkfifo "$T/go"
hold() { # SIZE NAME: a job holding SIZE until released through $T/go
    "$VRAM" run --quiet --mem "$1" --name "$2" -- sh -c \
        "'$VRAM' sim alloc --mem $1 >/dev/null & a=\$!; read _ <'$T/go'; kill \$a; wait \$a; true" >/dev/null
}
release() { echo go >"$T/go"; }
id=$(next_id); hold 40GiB blocker &
BG=($!)
wait_state "$id" running
queued() { field "$(api GET /v1/status)" 'd["pending_jobs"]'; }
submit_bg() { # NAME PRIORITY
    local id; id=$(next_id)
    "$VRAM" run --quiet --mem 30GiB --priority "$2" --name "$1" -- \
        sh -c "echo $1 >>'$T/order'; '$VRAM' sim alloc --mem 30GiB --seconds 0.2 >/dev/null" &
    BG+=($!)
    wait_state "$id" queued
}
submit_bg low1 0
submit_bg low2 0
submit_bg high 5
[ "$(queued)" = 3 ] || fail "three jobs should wait"
pos=$(field "$(api GET /v1/status)" '",".join(p["name"]+":"+str(p["queue_position"]) for p in d["pending"])')
[ "$pos" = "high:1,low1:2,low2:3" ] || fail "queue positions: $pos"
# a job that cannot wait that long times out with the documented error
set +e; err=$("$VRAM" run --mem 30GiB --timeout 1 -- true 2>&1); rc=$?; set -e
[ $rc = 124 ] || fail "timeout exit $rc"
grep -q "GPU memory timeout after 1 s" <<<"$err" || fail "timeout message: $err"
for _ in $(seq 5); do check_ledger; done
release
wait "${BG[@]}"
[ "$(tr '\n' ' ' <"$T/order")" = "high low1 low2 " ] || fail "start order: $(cat "$T/order")"
pass "queue: priority first, then arrival; --timeout ends as 'GPU memory timeout after 1 s'; ledger held"

# Degradation: 30 GiB held, 10 GiB free; batch 64 at 20 GiB does not fit;
# of the listed batches 22 (9.5 GiB) is the largest that does: 3 x 22 keeps
# the batch >= 64, reserving exactly the listed 9.5 GiB.
id=$(next_id); hold 30GiB hold &
HOLD=$!
wait_state "$id" running
out=$("$VRAM" run --mem 20GiB --batch-size 64 --min-batch-size 8 \
    --mem-at 8=3GiB,16=5GiB,22=9.5GiB,32=12GiB -- \
    sh -c 'echo "$VRAM_BATCH_SIZE x $VRAM_GRAD_ACCUM"' 2>"$T/err")
[ "$out" = "22 x 3" ] || fail "degraded batch: $out"
grep -q "batch 22 x 3 accumulation" "$T/err" || fail "degradation not shown: $(cat "$T/err")"
id=$(field "$(api GET '/v1/jobs?limit=1')" '[j for j in d["jobs"] if j["batch_size"]==64][0]["id"]')
j=$(api GET "/v1/jobs/$id")
[ "$(field "$j" 'd["degraded"]')" = True ] || fail "not marked degraded: $j"
[ "$(field "$j" 'd["reserved_bytes"]')" = $((19 * GiB / 2)) ] || fail "reserved: $j"
release
wait $HOLD
pass "degradation: batch 64 -> 22 x 3 accumulation steps in 9.5 GiB"

# OOM retry: COMMAND fails with 'CUDA out of memory' above batch 16.
cmd='echo "batch $VRAM_BATCH_SIZE accum $VRAM_GRAD_ACCUM"; [ "$VRAM_BATCH_SIZE" -le 16 ] || { echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1; }'
out=$("$VRAM" run --quiet --mem 4GiB --batch-size 64 --retry-oom 3 -- sh -c "$cmd" 2>/dev/null)
[ "$(tr '\n' ' ' <<<"$out")" = "batch 64 accum 1 batch 32 accum 2 batch 16 accum 4 " ] || fail "retries: $out"
set +e; "$VRAM" run --quiet --mem 4GiB --batch-size 64 --retry-oom 1 -- sh -c "$cmd" >/dev/null 2>&1; rc=$?; set -e
[ $rc = 1 ] || fail "retry budget: exit $rc"
n=$(field "$(api GET '/v1/jobs?limit=100')" 'sum(1 for j in d["jobs"] if j["error"].startswith("out of memory"))')
[ "$n" = 4 ] || fail "$n jobs ended 'out of memory', want 4"
# the exit-status form
set +e; "$VRAM" run --quiet --mem 4GiB --batch-size 8 --retry-oom 2 --oom-exit-code 3 -- sh -c '[ "$VRAM_BATCH_SIZE" -le 2 ] || exit 3'; rc=$?; set -e
[ $rc = 0 ] || fail "oom exit code retry: $rc"
pass "--retry-oom halves the batch and doubles accumulation (stderr text or --oom-exit-code)"
check_ledger

# Signals: SIGINT while queued cancels the job; SIGTERM while running is
# passed to COMMAND, vram run returns 143 and the job is recorded cancelled.
id=$(next_id)
"$VRAM" run --quiet --mem 30GiB --name sig-run -- sleep 300 &
R1=$!
wait_state "$id" running
id=$(next_id)
"$VRAM" run --quiet --mem 30GiB --name sig-queued -- true &
R2=$!
wait_state "$id" queued
kill -INT $R2; set +e; wait $R2; rc2=$?; set -e
kill -TERM $R1; set +e; wait $R1; rc1=$?; set -e
[ $rc2 = 130 ] || fail "SIGINT while queued: exit $rc2"
[ $rc1 = 143 ] || fail "SIGTERM while running: exit $rc1"
states=$(field "$(api GET '/v1/jobs?limit=2')" '",".join(j["name"]+":"+j["state"] for j in d["jobs"])')
[ "$states" = "sig-queued:cancelled,sig-run:cancelled" ] || fail "states after signals: $states"
pass "signals: SIGINT while queued cancels the job; SIGTERM reaches COMMAND (exit 143)"
