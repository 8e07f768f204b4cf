# Helpers for the vramd integration tests (sourced, not a test itself).
# Every test gets its own temp dir: socket, database, sim state; loopback only.

# The test's shell becomes a child subreaper: processes orphaned by a kill -9
# (a job's COMMAND after its `vram run` dies) are reparented to it and reaped
# at once, instead of lingering as zombies that the sim backend would still
# count as holding memory.
if [ -z "${VRAM_TEST_SUBREAPER:-}" ]; then
    export VRAM_TEST_SUBREAPER=1
    exec python3 -c 'import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
os.execv("/bin/bash", ["bash"] + sys.argv[1:])' "$0" "$@"
fi
set -euo pipefail

VRAM=${VRAM_BIN:?VRAM_BIN must point to the vram binary}
VRAMD=${VRAM_BUILD_DIR:?}/vramd
T=$(mktemp -d /tmp/vram-itest-XXXXXX)
export VRAM_BACKEND=sim VRAM_SIM=${VRAM_SIM:-2xH100-80GB} VRAM_SIM_STATE=$T/sim.state
export VRAM_SOCKET=$T/vramd.sock VRAM_DB=$T/vramd.db VRAM_LISTEN=127.0.0.1:0
export VRAM_LOG_LEVEL=info
# Status answers from a fresh probe, so a test sees a change it caused at once.
export VRAM_STATUS_CACHE=0
DAEMON_PID=
GiB=$((1024 * 1024 * 1024))

cleanup() {
    local rc=$?
    # our own background jobs only (the daemon is one of them)
    {
        if [ -n "$DAEMON_PID" ]; then
            kill -TERM "$DAEMON_PID" || true
            for _ in $(seq 500); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.02; done
        fi
        for p in $(jobs -p); do kill -9 "$p" || true; done
        wait || true
        [ -z "${CLEANUP_HOOK:-}" ] || $CLEANUP_HOOK
    } 2>/dev/null
    if [ $rc -ne 0 ] && [ -f "$T/vramd.log" ]; then
        echo "---- vramd log ----"; tail -n 60 "$T/vramd.log"
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

# start_daemon [extra vramd flags...]: runs vramd in the background and waits for it.
start_daemon() {
    "$VRAMD" --foreground "$@" >>"$T/vramd.log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 1 600); do
        if curl -sf --unix-socket "$VRAM_SOCKET" http://x/v1/health >/dev/null 2>&1; then return 0; fi
        kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$T/vramd.log"; fail "vramd exited at start"; }
        sleep 0.05
    done
    fail "vramd did not answer within 30 s"
}

stop_daemon() {
    kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=
}

tcp_address() { api GET /v1/health | python3 -c 'import json,sys; print(json.load(sys.stdin)["tcp"])'; }

# api METHOD PATH [BODY]: prints the body; HTTP status in $T/status
api() {
    local args=(-s -o "$T/body" -w '%{http_code}' --unix-socket "$VRAM_SOCKET" -X "$1")
    [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
    curl "${args[@]}" "http://localhost$2" >"$T/status" || true
    cat "$T/body"
}
status() { cat "$T/status"; }

# jq-like field access with python: field JSON EXPR  (EXPR in python on `d`)
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print($2)" "$1"; }

job_state() { field "$(api GET /v1/jobs/$1)" 'd.get("state", "missing")'; }

# wait_state ID STATE: waits for job ID (submitted or not yet) to reach STATE
# by long polls that vramd answers the moment the job changes state
# (?wait=S&since=CURRENT), never by sleeping; fails at once when the job ends
# in another state.
wait_state() {
    local since=missing st body
    for _ in $(seq 1 20); do
        body=$(api GET "/v1/jobs/$1?wait=30&since=$since")
        st=$(field "$body" 'd.get("state", "missing")' 2>/dev/null || echo "no answer")
        [ "$st" = "$2" ] && return 0
        case $st in done | failed | cancelled | timeout) fail "job $1 ended $st, expected $2" ;; esac
        since=$st
    done
    fail "job $1 is $st, expected $2 (last answer: HTTP $(status) $body)"
}

# wait_line FILE TEXT: waits until FILE has a line containing TEXT (written by
# a process the test started), up to 60 s.
wait_line() {
    for _ in $(seq 1 600); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "no \"$2\" in $1 after 60 s: $(cat "$1" 2>/dev/null)"
}

# reserved <= usable on every device, from one /v1/status sample
check_ledger() {
    local s; s=$(api GET /v1/status)
    field "$s" 'all(x["reserved_bytes"] <= x["usable_bytes"] for x in d["devices"])' | grep -qx True \
        || fail "reserved above usable: $s"
}
