# Helpers of the monitoring tests (sourced after daemon_lib.sh).

# wait_for DESCRIPTION COMMAND...: runs COMMAND until it succeeds; fails after
# 60 s (a bound for a stuck test, not a timing the test relies on).
wait_for() {
    local what=$1; shift
    for _ in $(seq 1 600); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    fail "timed out waiting for: $what"
}

# metric NAME_WITH_LABELS: the value in vramd's /metrics (socket), "" if absent
metric() {
    # the key through the environment: awk -v would unescape its backslashes
    curl -s --unix-socket "$VRAM_SOCKET" http://x/metrics | K="$1" awk '$1 == ENVIRON["K"] { print $2 }'
}

# gpu_uuid N: the uuid of GPU N (the label of its series in /metrics)
gpu_uuid() {
    curl -s --unix-socket "$VRAM_SOCKET" http://x/v1/watch |
        python3 -c "import json,sys; print(json.load(sys.stdin)['devices'][$1]['uuid'])"
}

# wait_samples N: waits until the sampler has taken N more samples
samples_at_least() { [ "$(metric vram_watch_samples_total)" -ge "$1" ]; }
wait_samples() {
    local start; start=$(metric vram_watch_samples_total)
    wait_for "$1 more samples" samples_at_least $((start + $1))
}

# free_port: a free loopback TCP port (for servers that cannot take port 0)
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# job_is ID STATE: the job is in that state now
job_is() { [ "$(job_state "$1")" = "$2" ]; }

# memory_rule FILE ABOVE FOR [CLEAR]: a rules file with one WARNING rule,
# memory-high, on memory_used_ratio (more rules may be appended to FILE)
memory_rule() {
    printf 'rules:\n  - name: memory-high\n    metric: memory_used_ratio\n    above: %s\n' "$2" >"$1"
    [ -z "${4:-}" ] || printf '    clear: %s\n' "$4" >>"$1"
    printf '    for: %s\n    level: warning\n' "$3" >>"$1"
}

# use_tmux: a private tmux server for vram top's tests (tmx ARGS...), killed
# at exit before the usual cleanup
use_tmux() {
    command -v tmux >/dev/null || fail "tmux missing"
    TMUX_SOCK="vram-top-$$"
    trap 'rc=$?; tmx kill-server >/dev/null 2>&1 || true; (exit $rc); cleanup' EXIT
}
tmx() { tmux -L "$TMUX_SOCK" "$@"; }
