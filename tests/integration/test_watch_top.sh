#!/usr/bin/env bash
# vram top in tmux: the devices, a vramd job, a sort key, cancelling a job
# with confirmation and quitting with q; then without vramd (devices only).
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"
use_tmux

start_daemon
"$VRAM" run --mem 10GiB --name topjob -- "$VRAM" sim alloc --mem 6GiB >/dev/null 2>&1 &
wait_for "job 1 running" job_is 1 running
"$VRAM" run --mem 5GiB --devices 1 --name otherjob -- "$VRAM" sim alloc --mem 1GiB >/dev/null 2>&1 &
wait_for "job 2 running" job_is 2 running

screen() { tmx capture-pane -p -t top; }
shows() { screen | grep -q -- "$1"; }
start_top() {
    tmx new-session -d -s top -x 160 -y 45 \
        "env VRAM_BACKEND=sim VRAM_SIM=$VRAM_SIM VRAM_SIM_STATE=$VRAM_SIM_STATE VRAM_SOCKET=$VRAM_SOCKET LANG=C.UTF-8 $VRAM top --delay 0.2; echo EXITED $?; sleep 30"
}
start_top
wait_for "devices on screen" shows "GPU0  H100-80GB"
wait_for "the job on screen" shows "topjob"
shows "GPU1  H100-80GB" || fail "GPU1 missing: $(screen)"
shows "vramd connected" || fail "not connected: $(screen)"
shows "10.0 reserved" || fail "reserved missing: $(screen)"
screen | grep -E "^1 +topjob +$(id -un) +running" >/dev/null || fail "job row: $(screen)"
screen | grep -q "sim alloc --mem 6GiB" || fail "process command line missing: $(screen)"
pass "devices, memory bars, the job and its process"

tmx send-keys -t top s
wait_for "sort key shown" shows "sort: pid"
tmx send-keys -t top s
wait_for "next sort key" shows "sort: user"
pass "s cycles the sort key"

wait_for "both jobs on screen" shows "otherjob"
tmx send-keys -t top j
tmx send-keys -t top c
wait_for "j selects the next job" shows 'Cancel job 2 "otherjob"? \[y/N\]'
tmx send-keys -t top n
wait_for "declined" shows "not cancelled"
tmx send-keys -t top Up
tmx send-keys -t top c
wait_for "the confirmation" shows 'Cancel job 1 "topjob"? \[y/N\]'
tmx send-keys -t top n
wait_for "declined" shows "not cancelled"
[ "$(job_state 1)" = running ] && [ "$(job_state 2)" = running ] || fail "cancelled without a yes"
tmx send-keys -t top c
wait_for "the confirmation again" shows "Cancel job 1"
tmx send-keys -t top y
wait_for "the job cancelled" job_is 1 cancelled
wait_for "the message" shows "job 1 cancelled"
[ "$(job_state 2)" = running ] || fail "job 2 cancelled too"
pass "j and Up select a job; c cancels the selected one after a y"

tmx send-keys -t top q
wait_for "top exits on q" shows "EXITED 0"
tmx kill-session -t top
pass "q quits"

stop_daemon
start_top
wait_for "devices without vramd" shows "GPU0  H100-80GB"
wait_for "says vramd is not running" shows "vramd: not running - devices only"
tmx send-keys -t top q
wait_for "top exits on q" shows "EXITED 0"
pass "without vramd: devices only, and says so"
