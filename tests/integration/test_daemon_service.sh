#!/usr/bin/env bash
# vramd as the one service of a machine: one daemon per database and per set
# of devices (a refused start writes nothing), private files and directories,
# the token from a private file and never from the command line, and the
# connection guard (per-peer limit, deadline for slow requests).
source "$(dirname "$0")/daemon_lib.sh"

# Directories: an explicit database's parent is never created; a directory
# writable by others or owned by another user is refused.
set +e
out=$(VRAM_DB=$T/missing/dir/vramd.db "$VRAMD" --foreground 2>&1); rc=$?
set -e
[ $rc != 0 ] && grep -q "$T/missing/dir" <<<"$out" || fail "missing parent of VRAM_DB: $rc $out"
[ ! -e "$T/missing" ] || fail "parents of an explicit VRAM_DB were created"
mkdir -m 0777 "$T/open"
set +e; out=$(VRAM_DB=$T/open/vramd.db "$VRAMD" --foreground 2>&1); rc=$?; set -e
[ $rc != 0 ] && grep -q "writable by others" <<<"$out" || fail "world-writable db dir: $out"
if [ "$(id -u)" = 0 ]; then
    mkdir -m 0700 "$T/theirs"; chown 65534 "$T/theirs"
    set +e; out=$(VRAM_DB=$T/theirs/vramd.db "$VRAMD" --foreground 2>&1); rc=$?; set -e
    [ $rc != 0 ] && grep -q "belongs to uid 65534" <<<"$out" || fail "foreign db dir: $out"
fi
[ ! -e "$T/open/vramd.db" ] || fail "a database was created in a refused directory"
pass "explicit VRAM_DB: no parents created; directories writable by others or foreign refused"

# The token: never on the command line; a token file must be private.
set +e; out=$("$VRAMD" --foreground --token s3cret 2>&1); rc=$?; set -e
[ $rc = 2 ] && grep -q "never given on the command line" <<<"$out" || fail "--token accepted: $out"
echo "file-token" >"$T/token"; chmod 0644 "$T/token"
set +e; out=$(VRAM_TOKEN_FILE=$T/token "$VRAMD" --foreground 2>&1); rc=$?; set -e
[ $rc = 2 ] && grep -q "chmod 600" <<<"$out" || fail "readable token file accepted: $out"
chmod 0600 "$T/token"
ln -s "$T/token" "$T/token-link"
set +e; out=$(VRAM_TOKEN_FILE=$T/token-link "$VRAMD" --foreground 2>&1); rc=$?; set -e
[ $rc = 2 ] || fail "token file through a symlink accepted: $out"
pass "token: --token refused, token files must be 0600 and not symlinks"

export VRAM_MAX_CONNECTIONS_PER_PEER=4 VRAM_REQUEST_TIMEOUT=1
VRAM_TOKEN_FILE=$T/token start_daemon
ps -o args= -p "$DAEMON_PID" | grep -q file-token && fail "ps shows the token"
tcp=$(tcp_address)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer file-token' \
    -d '{"mem_bytes":1024,"name":"tok"}' "http://$tcp/v1/jobs")
[ "$code" = 201 ] || fail "the token from the file is not accepted: $code"
pass "the token from VRAM_TOKEN_FILE allows TCP mutations; ps does not show it"

# Files and modes: database, -wal, -shm and lock 0600 in a 0700 directory.
mode() { stat -c %a "$1"; }
for f in "$VRAM_DB" "$VRAM_DB-wal" "$VRAM_DB-shm" "$VRAM_DB.lock"; do
    [ -e "$f" ] || continue
    [ "$(mode "$f")" = 600 ] || fail "$f has mode $(mode "$f")"
done
[ "$(mode "$VRAM_DB")" = 600 ] || fail "database missing or not 0600"
pass "database, -wal, -shm and lock are 0600"

# A second vramd on the same database, or on the same (simulated) GPUs,
# refuses, names the holder, and writes nothing.
before=$(sqlite3 "$VRAM_DB" "select count(*) from jobs; select count(*) from events")
sum=$(cat "$VRAM_DB" "$VRAM_DB-wal" 2>/dev/null | md5sum)
set +e
out=$(VRAM_SOCKET=$T/second.sock "$VRAMD" --foreground 2>&1); rc=$?
set -e
[ $rc != 0 ] && grep -q "pid $DAEMON_PID" <<<"$out" && grep -q "database" <<<"$out" || fail "second vramd on the database: $out"
out2=$(VRAM_SOCKET=$T/third.sock VRAM_DB=$T/other.db "$VRAMD" --foreground 2>&1) && fail "second vramd on the same GPUs started"
grep -q "pid $DAEMON_PID" <<<"$out2" && grep -q "simulated GPUs" <<<"$out2" || fail "same GPUs: $out2"
[ "$(cat "$VRAM_DB" "$VRAM_DB-wal" 2>/dev/null | md5sum)" = "$sum" ] || fail "a refused start wrote to the database"
[ "$(sqlite3 "$VRAM_DB" "select count(*) from jobs; select count(*) from events")" = "$before" ] || fail "rows changed"
[ ! -e "$T/second.sock" ] || fail "a refused vramd left a socket"
pass "a second vramd on the same database or GPUs refuses, names pid $DAEMON_PID, writes nothing"

# Connection guard: the 5th connection of one uid is closed at once; a
# request that dribbles in is cut after REQUEST_TIMEOUT; the daemon serves on.
python3 - "$VRAM_SOCKET" <<'PY'
import socket, sys, time
path = sys.argv[1]
def conn():
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.settimeout(20); return s
held = [conn() for _ in range(4)]
for s in held: s.sendall(b"GET /v1/he")          # incomplete requests
extra = conn()
try:
    extra.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = extra.recv(100)
except (BrokenPipeError, ConnectionResetError):
    got = b""
assert got == b"", "a 5th connection of one uid was served"
t0 = time.time()
for s in held:                                   # cut by the request deadline
    assert s.recv(100) in (b"",), "a slow request was answered"
took = time.time() - t0
assert took < 10, f"slow connections held {took:.1f} s"
print(f"ok - slow requests cut after {took:.1f} s")
PY
[ "$(field "$(api GET /v1/health)" 'd["status"]')" = ok ] || fail "daemon stopped serving"
pass "connection guard: 4 connections per uid, slow requests cut after REQUEST_TIMEOUT"

# As root, a driver library named by VRAM_NVML_LIBRARY must be root's and
# writable by nobody else (it would run with root's rights).
if [ "$(id -u)" = 0 ] && [ -f "${VRAM_FAKES_DIR:-}/libnvidia-ml.so.1" ]; then
    mkdir -m 0755 "$T/libs"
    cp "$VRAM_FAKES_DIR/libnvidia-ml.so.1" "$T/libs/"
    chmod 0666 "$T/libs/libnvidia-ml.so.1"
    out=$(VRAM_BACKEND=nvml VRAM_NVML_LIBRARY=$T/libs/libnvidia-ml.so.1 FAKE_NVML_DEVICES=1 "$VRAM" info 2>&1) || true
    grep -q "refusing to load" <<<"$out" || fail "a world-writable driver library was loaded as root: $out"
    chmod 0755 "$T/libs/libnvidia-ml.so.1"
    VRAM_BACKEND=nvml VRAM_NVML_LIBRARY=$T/libs/libnvidia-ml.so.1 FAKE_NVML_DEVICES=1 "$VRAM" info >/dev/null \
        || fail "a root-owned 0755 driver library was refused"
    pass "as root, a world-writable VRAM_NVML_LIBRARY is refused, a root-owned one loads"
fi

# The sim never writes through a symlink nor over a file that is not its own.
echo "precious" >"$T/precious"
out=$(VRAM_SIM_STATE=$T/precious "$VRAM" sim status 2>&1) && fail "a foreign file was taken as sim state: $out"
grep -q "not a sim state file" <<<"$out" || fail "message: $out"
[ "$(cat "$T/precious")" = precious ] || fail "the foreign file was overwritten"
ln -s "$T/precious" "$T/state-link"
out=$(VRAM_SIM_STATE=$T/state-link "$VRAM" sim status 2>&1) && fail "a symlinked sim state was followed: $out"
[ "$(cat "$T/precious")" = precious ] || fail "written through the symlink"
pass "sim state: a foreign file or a symlink is refused, never overwritten"
