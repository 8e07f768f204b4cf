#!/usr/bin/env bash
# Recovery after kill -9 of vramd: running jobs whose process lives keep their
# reservations, a job whose process died meanwhile is failed with the reason,
# queued jobs keep their order, clients ride out the restart, and no job is
# lost or admitted twice (checked in the event log).
export VRAM_SIM=H100-80GB
source "$(dirname "$0")/daemon_lib.sh"
export VRAM_SAFETY_MARGIN=0
start_daemon --backfill false

job() { # NAME: 30 GiB on the job's GPU until the test writes to the fifo $T/NAME
    mkfifo "$T/$1"
    "$VRAM" run --quiet --mem 30GiB --name "$1" -- sh -c \
        "echo $1 >>'$T/order'; '$VRAM' sim alloc --mem 30GiB --device \$CUDA_VISIBLE_DEVICES >/dev/null & a=\$!; read _ <'$T/$1'; kill \$a; wait \$a; true" >/dev/null 2>&1 &
}
release() { echo go >"$T/$1"; }
job A; A=$!; wait_state 1 running
job D; D=$!; wait_state 2 running
job B; B=$!; wait_state 3 queued
job C; C=$!; wait_state 4 queued
check_ledger

kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true; DAEMON_PID=
# D dies while vramd is down: its COMMAND (the sim allocation inside sh) and
# sh first, so that nothing of D holds sim memory, then vram run.
sh_pid=$(pgrep -P "$D")
alloc_pid=$(pgrep -P "$sh_pid")
kill -9 "$alloc_pid" "$sh_pid"
kill -9 "$D"; wait "$D" 2>/dev/null || true
start_daemon --backfill false
j=$(api GET /v1/jobs/1)
[ "$(field "$j" 'd["state"]')" = running ] || fail "A lost its place: $j"
j=$(api GET /v1/jobs/2)
[ "$(field "$j" 'd["state"]')" = failed ] || fail "D: $j"
grep -q "while vramd was down" <<<"$j" || fail "D's reason: $j"
ev=$(api GET /v1/jobs/1/events)
[ "$(field "$ev" '",".join(e["kind"] for e in d["events"])')" = "submitted,admitted,recovered" ] || fail "A's events: $ev"
# D's 30 GiB went to B, the first queued job; C still waits behind A
wait_state 3 running
[ "$(job_state 4)" = queued ] || fail "C should still wait"
check_ledger
pass "after kill -9 of vramd: A kept its reservation, D failed with the reason, B admitted in order"

release A
wait "$A" || fail "A's vram run failed across the restart"
release B
wait "$B" || fail "B's vram run failed"
release C
wait "$C" || fail "C's vram run failed"
for id in 1 3 4; do [ "$(job_state $id)" = done ] || fail "job $id: $(job_state $id)"; done
[ "$(tr '\n' ' ' <"$T/order")" = "A D B C " ] || fail "start order: $(cat "$T/order")"
stop_daemon
# each job admitted exactly once; nothing lost
n=$(sqlite3 "$VRAM_DB" "select count(*) from jobs")
[ "$n" = 4 ] || fail "$n jobs in the store"
dups=$(sqlite3 "$VRAM_DB" "select job_id from events where kind='admitted' group by job_id having count(*) > 1")
[ -z "$dups" ] || fail "admitted twice: $dups"
[ "$(sqlite3 "$VRAM_DB" "select count(*) from events where kind='admitted'")" = 4 ] || fail "admissions"
[ "$(sqlite3 "$VRAM_DB" "select count(*) from events where kind='recovered'")" = 1 ] || fail "recovered event"
pass "all clients finished across the restart; 4 jobs, each admitted exactly once"
