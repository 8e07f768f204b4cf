#!/usr/bin/env bash
# vram top laid out for its terminal, in tmux at 80x24 and 200x50 with 2 and
# 8 GPUs: nothing wraps (every line starts as one of top's own lines), each
# GPU row keeps its health on its line, a queued job's row stays whole, the
# firing alert shows, a process row is visible even with 8 GPUs at 80x24,
# the process list scrolls (Tab, End), `?` shows the keys, and a newline in
# a process's command line is shown escaped instead of moving the cursor.
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"
use_tmux

screen() { tmx capture-pane -p -t top; }
shows() { screen | grep -qE -- "$1"; }
start_top() { # COLS ROWS
    tmx new-session -d -s top -x "$1" -y "$2" \
        "env VRAM_BACKEND=sim VRAM_SIM=$VRAM_SIM VRAM_SIM_STATE=$VRAM_SIM_STATE VRAM_SOCKET=$VRAM_SOCKET LANG=C.UTF-8 $VRAM top --delay 0.2; echo EXITED \$?; sleep 30"
}
stop_top() {
    tmx send-keys -t top q
    wait_for "top exits on q" shows "EXITED 0"
    tmx kill-session -t top
}
# every line of the screen is one of top's own: a wrapped line would start
# with the tail of another (`E`, `waited 12 s`, ...)
OWN='^(vram top|ALERT |GPU[0-9]|GPU +PID|JOB +NAME| {6}\[| +\.\.\. [0-9]+ more GPU|[0-9]+ +|\(no |q quit|$)'
nothing_wraps() {
    local bad; bad=$(screen | grep -vE "$OWN") || true
    [ -z "$bad" ] || fail "$1: lines that are not top's own (wrapped?):
$bad
---- screen ----
$(screen)"
}

run_case() { # NGPUS
    local n=$1
    export VRAM_SIM="${n}xH100-80GB" VRAM_DB="$T/vramd-$n.db" # job ids from 1 again
    rm -f "$VRAM_SIM_STATE"
    memory_rule "$T/rules.yaml" 50% 0.2s
    start_daemon --watch-interval 0.2 --alert-rules "$T/rules.yaml"
    "$VRAM" run --mem 10GiB --devices 0 --name 'a-training-job-with-a-long-name' -- \
        "$VRAM" sim alloc --mem 6GiB >/dev/null 2>&1 &
    wait_for "job running" job_is 1 running
    # 75 GiB on GPU 0 cannot be reserved next to 10: queued
    "$VRAM" run --mem 75GiB --devices 0 --name queued-one -- true >/dev/null 2>&1 &
    wait_for "job queued" job_is 2 queued
    "$VRAM" sim alloc --mem 50GiB --device 1 >/dev/null &
    # a command line with a newline (argv[0]): shown escaped, on its own row
    (exec -a $'evil\nGPU9 forged' "$VRAM" sim alloc --mem 1GiB --device 1) >/dev/null &
    for k in $(seq 1 8); do "$VRAM" sim alloc --mem 1GiB --device $((k % n)) >/dev/null & done
    firing() { field "$(api GET /v1/alerts)" 'len(d["firing"]) >= 1' | grep -qx True; }
    wait_for "the alert fires" firing
    procs_seen() { [ "$(curl -s --unix-socket "$VRAM_SOCKET" http://x/v1/watch | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["processes"]))')" -ge 11 ]; }
    wait_for "11 processes sampled" procs_seen

    for size in 80x24 200x50; do
        local cols=${size%x*} rows=${size#*x}
        start_top "$cols" "$rows"
        wait_for "$n GPUs at $size: the jobs" shows "queued-one"
        wait_for "$n GPUs at $size: the alert" shows "^ALERT warning +memory-high"
        wait_for "$n GPUs at $size: processes" shows "^[0-9] +[0-9]+ .* GiB  "
        nothing_wraps "$n GPUs at $size"
        for d in $(seq 0 $((n - 1))); do
            # a GPU that does not fit is counted on the "... N more GPU(s)" line
            screen | grep -qiE "^GPU$d +H100-80GB.*available" || shows "\.\.\. [0-9]+ more GPU" \
                || fail "GPU $d at $size: $(screen)"
        done
        shows "^2 +queued-one +$(id -un) +queued +want 1 " || fail "queued row at $size: $(screen)"
        shows "^GPU9" && fail "a newline in a command line moved the cursor at $size"
        if [ "$size" = 200x50 ]; then
            shows 'evil( |\\n)GPU9 forged' || fail "the escaped command line at $size: $(screen)"
        fi
        # the process list scrolls to its last row
        tmx send-keys -t top Tab
        tmx send-keys -t top End
        total=$(curl -s --unix-socket "$VRAM_SOCKET" http://x/v1/watch | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["processes"]))')
        if screen | grep -qE " [0-9]+-[0-9]+ of [0-9]+"; then
            wait_for "scrolled to the end at $size" shows " [0-9]+-$total of $total"
        fi
        tmx send-keys -t top '?'
        wait_for "help at $size" shows "Tab +switch between jobs and processes"
        tmx send-keys -t top x
        wait_for "help closed at $size" sh -c "! tmux -L $TMUX_SOCK capture-pane -p -t top | grep -q 'this help'"
        nothing_wraps "$n GPUs at $size after scrolling"
        stop_top
        pass "$n GPUs at $size: nothing wraps, GPU rows whole, queued row whole, alert, processes, scrolling, help"
    done
    # the jobs' `vram run` first (SIGKILL: they would wait for a vramd that
    # stopped), then vramd
    for p in $(jobs -p); do [ "$p" = "$DAEMON_PID" ] || kill -9 "$p" 2>/dev/null || true; done
    stop_daemon
    wait 2>/dev/null || true
}
run_case 2
run_case 8
