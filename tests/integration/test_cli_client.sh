#!/bin/bash
# How clients find vramd: VRAM_SOCKET, then $XDG_RUNTIME_DIR/vram/vramd.sock,
# then /run/vram/vramd.sock (-v names it); a socket the user may not open is
# "permission denied", never "not running"; vram run rides out a daemon that
# is not up yet; over TCP the token comes from a 0600 file.
source "$(dirname "$0")/daemon_lib.sh"
chmod 711 "$T"
run_rc() { local __v=$1 __rc=0; shift; "$@" || __rc=$?; printf -v "$__v" %s "$__rc"; }
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# ---- VRAM_SOCKET, -v ------------------------------------------------------------
start_daemon --socket-mode 0660
"$VRAM" -v status 2>"$T/err" >/dev/null
grep -qx "vram: using socket $VRAM_SOCKET (VRAM_SOCKET)" "$T/err" || fail "-v said: $(cat "$T/err")"
pass "-v names the socket and why (VRAM_SOCKET)"

# ---- permission denied, not "not running" -------------------------------------------
run_rc rc as_nobody "$VRAM" status 2>"$T/err"
[ "$rc" = 1 ] || fail "nobody on a 0660 root socket: exit $rc"
grep -qx "vram status: permission denied on $VRAM_SOCKET: ask the administrator to add you to group vram" "$T/err" \
    || fail "message: $(cat "$T/err")"
run_rc rc as_nobody "$VRAM" run --mem 1GiB -- true 2>"$T/err"
[ "$rc" = 1 ] && grep -q 'permission denied on' "$T/err" && ! grep -q 'not running' "$T/err" \
    || fail "vram run as nobody: $(cat "$T/err")"
mkdir -m 700 "$T/hidden"
run_rc rc as_nobody env VRAM_SOCKET="$T/hidden/vramd.sock" "$VRAM" jobs 2>"$T/err"
grep -q "permission denied on $T/hidden/vramd.sock" "$T/err" || fail "hidden socket: $(cat "$T/err")"
pass "a socket the user may not open: permission denied and the group to ask for"
stop_daemon

# ---- $XDG_RUNTIME_DIR, and nothing at all ---------------------------------------------
mkdir -p "$T/xdg/vram"
VRAM_SOCKET=$T/xdg/vram/vramd.sock start_daemon
env -u VRAM_SOCKET XDG_RUNTIME_DIR="$T/xdg" "$VRAM" -v status 2>"$T/err" >/dev/null \
    || fail "status through XDG_RUNTIME_DIR: $(cat "$T/err")"
grep -qx "vram: using socket $T/xdg/vram/vramd.sock (your own vramd, \$XDG_RUNTIME_DIR)" "$T/err" \
    || fail "-v said: $(cat "$T/err")"
stop_daemon
if [ ! -e /run/vram/vramd.sock ]; then
    run_rc rc env -u VRAM_SOCKET XDG_RUNTIME_DIR="$T/xdg" "$VRAM" status 2>"$T/err"
    [ "$rc" = 1 ] && grep -q "vramd is not running: no socket at $T/xdg/vram/vramd.sock or /run/vram/vramd.sock" "$T/err" \
        || fail "no daemon: $(cat "$T/err")"
fi
pass "the user's own socket under \$XDG_RUNTIME_DIR; none: not running, both places named"

# ---- vram run retries a refused connection with backoff ---------------------------------
"$VRAM" run --mem 1GiB -- sh -c 'echo ran' >"$T/run.out" 2>"$T/run.err" &
RUN=$!
for _ in $(seq 200); do grep -q retrying "$T/run.err" 2>/dev/null && break; sleep 0.05; done
grep -q 'vramd is not running.*retrying for 30 s' "$T/run.err" || fail "no retry message: $(cat "$T/run.err")"
start_daemon
run_rc rc wait "$RUN"
[ "$rc" = 0 ] && [ "$(cat "$T/run.out")" = ran ] || fail "vram run after the daemon came up: $rc $(cat "$T/run.err")"
pass "vram run waits with backoff for a vramd that is not up yet"

# kill -9 of vramd under a waiting and a running vram run: both ride it out
"$VRAM" run --quiet --mem 70GiB --devices 0 -- sh -c "touch $T/held; while [ ! -e $T/go ]; do sleep 0.05; done" &
HOLD=$!
for _ in $(seq 200); do [ -e "$T/held" ] && break; sleep 0.05; done
"$VRAM" run --quiet --mem 70GiB --devices 0 -- echo second-ran >"$T/second.out" &
SECOND=$!
for _ in $(seq 200); do [ "$(job_state 3)" = queued ] && break; sleep 0.05; done
[ "$(job_state 3)" = queued ] || fail "second job not queued"
kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true; DAEMON_PID=
start_daemon
touch "$T/go"
run_rc rc wait "$HOLD"; [ "$rc" = 0 ] || fail "holder across kill -9 of vramd: $rc"
run_rc rc wait "$SECOND"; [ "$rc" = 0 ] || fail "queued vram run across kill -9 of vramd: $rc"
[ "$(cat "$T/second.out")" = second-ran ] || fail "second job did not run"
pass "a running and a queued vram run ride out kill -9 and restart of vramd"
stop_daemon

# ---- TCP: the token from a 0600 file, never from the command line -----------------------
VRAM_TOKEN=s3cret-token start_daemon
addr=$(tcp_address)
id=$("$VRAM" submit --parsable --mem 1GiB -- sleep 300)
printf 's3cret-token\n' >"$T/token"
chmod 644 "$T/token"
run_rc rc env VRAM_URL="http://$addr" "$VRAM" --token-file "$T/token" cancel "$id" 2>"$T/err"
[ "$rc" = 1 ] && grep -q "must be yours and mode 0600" "$T/err" || fail "0644 token file: $(cat "$T/err")"
run_rc rc env VRAM_URL="http://$addr" "$VRAM" cancel "$id" 2>"$T/err"
[ "$rc" = 1 ] && grep -q "token" "$T/err" || fail "no token over TCP: $(cat "$T/err")"
chmod 600 "$T/token"
env VRAM_URL="http://$addr" "$VRAM" -v --token-file "$T/token" cancel "$id" >/dev/null 2>"$T/err" \
    || fail "cancel with the token file: $(cat "$T/err")"
grep -q "using address http://$addr (VRAM_URL) with a token" "$T/err" || fail "-v: $(cat "$T/err")"
[ "$(job_state "$id")" = cancelled ] || fail "not cancelled over TCP"
id=$("$VRAM" submit --parsable --mem 1GiB -- sleep 300)
VRAM_URL="http://$addr" VRAM_TOKEN_FILE="$T/token" "$VRAM" cancel "$id" >/dev/null || fail "VRAM_TOKEN_FILE"
run_rc rc "$VRAM" --token s3cret-token jobs 2>/dev/null
[ "$rc" = 2 ] || fail "a token on the command line was accepted"
pass "TCP: token from --token-file or VRAM_TOKEN_FILE (0600 only), -v names the address"

# ---- vram status --cluster: several vramds by address, a dead one named ------------------
id=$("$VRAM" submit --parsable --mem 1GiB -- sleep 300)
run_rc rc env VRAM_TOKEN_FILE="$T/token" "$VRAM" status --cluster "a=http://$addr,http://127.0.0.1:1" --json >"$T/cl.json" 2>"$T/err"
[ "$rc" = 1 ] || fail "--cluster with a dead node: rc $rc"
python3 - "$T/cl.json" "$id" <<'PY' || fail "--cluster --json: $(cat "$T/cl.json")"
import json, sys
nodes = json.load(open(sys.argv[1]))["nodes"]
assert [n["name"] for n in nodes] == ["a", "127.0.0.1"], nodes
assert len(nodes[0]["status"]["devices"]) >= 1 and "error" not in nodes[0], nodes[0]
assert [j["id"] for j in nodes[0]["jobs"]] == [int(sys.argv[2])], nodes[0]["jobs"]
assert "not running at http://127.0.0.1:1" in nodes[1]["error"], nodes[1]
PY
env VRAM_TOKEN_FILE="$T/token" "$VRAM" status --cluster "a=http://$addr" >"$T/cl.txt" || fail "--cluster: $(cat "$T/cl.txt")"
grep -q "^a  .*GiB" "$T/cl.txt" && grep -q "^a  *$id  running" "$T/cl.txt" || fail "--cluster table: $(cat "$T/cl.txt")"
for bad in "" "a" "a=ftp://x" "=http://x:1" "http://"; do
    run_rc rc "$VRAM" status --cluster "$bad" 2>"$T/err"
    [ "$rc" = 2 ] && grep -q -- "--cluster" "$T/err" || fail "--cluster \"$bad\": rc $rc, $(cat "$T/err")"
done
"$VRAM" cancel "$id" >/dev/null
pass "vram status --cluster: every node's GPUs and jobs, a dead node named (exit 1), bad lists refused (exit 2)"
