#!/usr/bin/env bash
# A hostile local user against a live vramd (temp socket, loopback port): it
# holds slow connections, floods status readers, submits past its quota,
# registers other users' pids and init, sends NUL paths. Meanwhile an honest
# client's job is admitted and, once its process is killed, released within
# 1 s (measured by vramd's own timestamps), and nothing of the attacker's
# reaches another user's jobs.
source "$(dirname "$0")/daemon_lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    echo "skip: needs root and setpriv to act as another uid"
    exit 0
fi
export VRAM_SAFETY_MARGIN=0 VRAM_MAX_QUEUED_PER_USER=3 VRAM_MAX_RUNNING_PER_USER=2
export VRAM_MAX_CONNECTIONS_PER_PEER=8 VRAM_REQUEST_TIMEOUT=2
start_daemon --socket-mode 0666
chmod 755 "$T"
tcp=$(tcp_address)
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# The attacker, in the background for the whole test.
cat >"$T/attack.py" <<'PY'
import json, os, socket, sys, threading, time
sock, tcp, stop_file, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
host, port = tcp.rsplit(":", 1)
stats = {"slow": 0, "status": 0, "refused": 0}
def unix():
    s = socket.socket(socket.AF_UNIX); s.connect(sock); s.settimeout(10); return s
def inet():
    s = socket.create_connection((host, int(port)), timeout=10); return s
def request(connect, raw):
    try:
        s = connect(); s.sendall(raw); data = b""
        while chunk := s.recv(65536): data += chunk
        return data
    except OSError:
        stats["refused"] += 1
        return b""
def slow(connect):                      # slowloris: a byte now and then
    while not os.path.exists(stop_file):
        try:
            s = connect(); stats["slow"] += 1
            for b in b"GET /v1/status HTTP/1.1\r\nHost: x\r\n":
                s.sendall(bytes([b])); time.sleep(0.5)
                if os.path.exists(stop_file): break
        except OSError:
            time.sleep(0.1)
def flood(connect):                     # status readers in a loop
    while not os.path.exists(stop_file):
        if request(connect, b"GET /v1/status HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200"):
            stats["status"] += 1
            if stats["status"] == 1: print("served", flush=True)  # the flood is being served
if mode == "slow":   # more than the per-uid and per-address limits
    threads = [threading.Thread(target=slow, args=(c,)) for c in [unix] * 10 + [inet] * 10]
else:                # readers of another uid, which that limit does not hold up
    threads = [threading.Thread(target=flood, args=(c,)) for c in [unix] * 4]
for t in threads: t.daemon = True; t.start()
while not os.path.exists(stop_file): time.sleep(0.1)
print(json.dumps(stats))
PY

nobody_api() { # METHOD PATH [BODY]: as uid 65534; prints "STATUS BODY"
    local args=(-s -w ' %{http_code}' --unix-socket "$VRAM_SOCKET" -X "$1")
    [ $# -ge 3 ] && args+=(--data-binary "$3")
    as_nobody curl "${args[@]}" "http://x$2" || true
}
# Submits past the quota: two run (50 GiB of each 80 GiB GPU), three wait,
# the rest are refused with 429.
codes=""
for i in $(seq 1 8); do
    r=$(nobody_api POST /v1/jobs '{"mem_bytes":"50GiB","name":"hog'$i'"}')
    codes+="${r##* } "
done
[ "$codes" = "201 201 201 201 201 429 429 429 " ] || fail "quota: $codes"
grep -q "MAX_QUEUED_PER_USER" <<<"$(nobody_api POST /v1/jobs '{"mem_bytes":1024}')" || fail "quota message"
# Foreign pids and init are refused; a NUL path routes nowhere.
r=$(nobody_api POST /v1/jobs '{"mem_bytes":1024,"pid":'$$'}'); [ "${r##* }" = 403 ] || fail "foreign pid: $r"
grep -q "belongs to uid 0" <<<"$r" || fail "foreign pid message: $r"
r=$(nobody_api POST /v1/jobs '{"mem_bytes":1024,"pid":1}'); [ "${r##* }" = 422 ] || fail "pid 1: $r"
r=$(nobody_api DELETE "/v1/jobs/1%00/x"); [ "${r##* }" = 400 ] || fail "NUL path: $r"
r=$(nobody_api POST "/v1/jobs%00x" '{"mem_bytes":1024}'); [ "${r##* }" = 400 ] || fail "NUL submit: $r"
pass "attacker: quota (2 running + 3 queued, then 429), foreign pid 403, pid 1 422, NUL paths 400"

# Then it holds slow connections (more than its limit) and floods readers.
as_nobody python3 "$T/attack.py" "$VRAM_SOCKET" "$tcp" "$T/stop" slow >"$T/attack.out" 2>&1 &
ATTACK=$!
setpriv --reuid=65533 --regid=65533 --clear-groups \
    python3 "$T/attack.py" "$VRAM_SOCKET" "$tcp" "$T/stop" flood >"$T/flood.out" 2>&1 &
FLOOD=$!
# the readers are being served before the honest client starts
wait_line "$T/flood.out" served
for _ in $(seq 600); do [ "$(grep -c "connections open (the limit)" "$T/vramd.log")" -gt 0 ] && break; sleep 0.1; done
grep -q "connections open (the limit)" "$T/vramd.log" || fail "the attacker never reached its connection limit"

# TCP is shared by every local user (all come from 127.0.0.1): the
# attacker's slow TCP connections, more than MAX_CONNECTIONS_PER_PEER, do not
# lock another user's health probe out (a limit per address did).
for _ in $(seq 600); do
    [ "$(ss -Htn state established "( sport = :${tcp##*:} )" | wc -l)" -gt 8 ] && break
    sleep 0.1
done
[ "$(ss -Htn state established "( sport = :${tcp##*:} )" | wc -l)" -gt 8 ] ||
    fail "the attacker never held more than 8 TCP connections"
for i in 1 2 3 4 5; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 "http://$tcp/v1/health") || true
    [ "$code" = 200 ] || fail "TCP health probe $i under the attacker's connections: $code"
done
pass "TCP: 5 of 5 health probes answered while another user holds more than 8 TCP connections"

# The honest client (root, over the same socket) under attack.
t0=$(date +%s.%N)
"$VRAM" run --quiet --mem 20GiB --name honest -- "$VRAM" sim alloc --mem 20GiB >"$T/honest.out" 2>&1 &
H=$!
wait_line "$T/honest.out" holding
id=$(field "$(api GET '/v1/jobs?limit=0')" '[j["id"] for j in d["jobs"] if j["name"]=="honest"][0]')
j=$(api GET "/v1/jobs/$id")
[ "$(field "$j" 'd["state"]')" = running ] || fail "honest job: $j"
[ "$(field "$j" 'd["owner_uid"]')" = 0 ] || fail "honest job owner: $j"
admit=$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(field "$j" 'd["started_at"]')")
t1=$(date +%s.%N)
kill -9 "$H"; wait "$H" 2>/dev/null || true
wait_state "$id" failed
j=$(api GET "/v1/jobs/$id")
release=$(python3 -c "import sys; d=float(sys.argv[2])-float(sys.argv[1]); print('%.3f' % d); sys.exit(0 if d < 1 else 1)" "$t1" "$(field "$j" 'd["ended_at"]')") \
    || fail "the honest job was released $release s after its process died"
touch "$T/stop"; wait "$ATTACK" || true; wait "$FLOOD" || true
stats=$(tail -n1 "$T/attack.out")
flood=$(tail -n1 "$T/flood.out")
# the attacker never sees the honest job's command or pid, nor may end it
hj=$(nobody_api GET "/v1/jobs/$id")
[ "${hj##* }" = 200 ] || fail "attacker's read of job $id: $hj"
grep -q '"command"' <<<"$hj" && fail "another uid sees the command: $hj"
grep -q '"pid"' <<<"$hj" && fail "another uid sees the pid: $hj"
r=$(nobody_api DELETE "/v1/jobs/$id"); [ "${r##* }" = 403 ] || fail "attacker's cancel: $r"
[ "$(field "$flood" 'd["status"]')" -gt 0 ] || fail "the status flood never got through: $flood"
check_ledger
pass "under attack (slow $stats, flood $flood): honest job admitted $admit s after vram run started, released $release s after kill -9"
