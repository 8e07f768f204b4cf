#!/usr/bin/env bash
# vramd's HTTP API: health/status/devices, bad input answered with clear 4xx
# errors while the daemon keeps serving and its state stays intact, the TCP
# token rule, and the CLI without a daemon.
source "$(dirname "$0")/daemon_lib.sh"

# Without a daemon the CLI says so and how to start it.
out=$(VRAM_SOCKET=$T/none.sock "$VRAM" jobs 2>&1) && fail "vram jobs without vramd succeeded"
grep -q "vramd is not running at $T/none.sock" <<<"$out" || fail "no hint: $out"
grep -q "vram serve" <<<"$out" || fail "no start hint: $out"
pass "CLI without a daemon names the socket and how to start vramd"

start_daemon --safety-margin 4GiB
h=$(api GET /v1/health); [ "$(status)" = 200 ] || fail "health $(status)"
[ "$(field "$h" 'd["status"]')" = ok ] || fail "health body $h"
d=$(api GET /v1/devices)
[ "$(field "$d" 'len(d["devices"])')" = 2 ] || fail "devices $d"
s=$(api GET /v1/status)
[ "$(field "$s" 'd["devices"][0]["usable_bytes"]')" = $((76 * GiB)) ] || fail "usable: $s"
pass "health, devices and status (80 GiB - 4 GiB margin = 76 GiB usable)"

# a valid job, so that we can check state stays intact afterwards
j=$(api POST /v1/jobs '{"name":"keep","mem_bytes":"10GiB"}')
[ "$(status)" = 201 ] || fail "submit: $(status) $j"
id=$(field "$j" 'd["id"]')
[ "$(field "$j" 'd["state"]')" = running ] || fail "not admitted: $j"

expect() { # expect STATUS CODE_SUBSTRING MESSAGE_SUBSTRING METHOD PATH [BODY]
    local want=$1 code=$2 msg=$3; shift 3
    local b; b=$(api "$@")
    [ "$(status)" = "$want" ] || fail "$1 $2 -> $(status) (want $want): $b"
    grep -q "\"code\":\"$code" <<<"$b" || fail "$1 $2: code not $code: $b"
    grep -q -- "$msg" <<<"$b" || fail "$1 $2: message lacks '$msg': $b"
}
expect 400 bad_json "line 1, column" POST /v1/jobs '{"name": "x", "mem_bytes": 5,'
expect 400 bad_json "line 2" POST /v1/jobs $'{"name": "x",\n "mem_bytes": }'
expect 400 bad_json "JSON object" POST /v1/jobs '[1,2]'
expect 400 bad_json "empty" POST /v1/jobs ''
expect 400 bad_type '\\"gpus\\" must be an integer' POST /v1/jobs '{"mem_bytes":1024,"gpus":"two"}'
expect 400 bad_type '\\"name\\" must be a string' POST /v1/jobs '{"mem_bytes":1024,"name":7}'
expect 400 bad_type "mem_bytes" POST /v1/jobs '{"mem_bytes":1.5e30}'
expect 400 unknown_field "memory" POST /v1/jobs '{"memory":1024}'
expect 422 invalid_value "mem_bytes" POST /v1/jobs '{"mem_bytes":-5}'
expect 422 invalid_value "mem_bytes" POST /v1/jobs '{"mem_bytes":0}'
expect 422 invalid_value "mem_bytes" POST /v1/jobs '{"mem_bytes":"200GiB"}'
expect 422 invalid_value "mem_bytes" POST /v1/jobs '{"mem_bytes":"lots"}'
expect 422 invalid_value "gpus" POST /v1/jobs '{"mem_bytes":1024,"gpus":3}'
expect 422 invalid_value "gpus" POST /v1/jobs '{"mem_bytes":1024,"gpus":-1}'
expect 422 invalid_value "timeout_s" POST /v1/jobs '{"mem_bytes":1024,"timeout_s":-1}'
expect 422 invalid_value "pid" POST /v1/jobs '{"mem_bytes":1024,"pid":999999999}'
expect 422 invalid_value "devices" POST /v1/jobs '{"mem_bytes":1024,"devices":[5]}'
expect 422 invalid_value "min_batch_size" POST /v1/jobs '{"mem_bytes":1024,"batch_size":4,"min_batch_size":8}'
expect 404 not_found "no route" GET /v2/jobs
expect 404 not_found "no route" GET /v1/nothing
expect 404 not_found "no job" GET /v1/jobs/424242
expect 404 not_found "ids are positive" GET /v1/jobs/abc
expect 405 method_not_allowed "PUT" PUT /v1/jobs
expect 405 method_not_allowed "DELETE" DELETE /v1/status
expect 405 method_not_allowed "GET" GET "/v1/jobs/$id/finish"
expect 400 bad_query "wait" GET "/v1/jobs/$id?wait=forever"
# a body over 64 KiB
python3 -c 'print("{\"name\":\"" + "x" * 70000 + "\",\"mem_bytes\":1}")' >"$T/huge.json"
b=$(curl -s -o - -w '\n%{http_code}' --unix-socket "$VRAM_SOCKET" -X POST \
    -H 'Content-Type: application/json' --data-binary @"$T/huge.json" http://x/v1/jobs)
[ "$(tail -n1 <<<"$b")" = 413 ] || fail "huge body: $b"
grep -q too_large <<<"$b" || fail "huge body code: $b"
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$VRAM_SOCKET" -X POST \
    -H 'Transfer-Encoding: chunked' --data-binary @"$T/huge.json" http://x/v1/jobs)
[ "$code" = 413 ] || fail "huge chunked body: $code"
pass "bad input: malformed JSON (line/column), wrong types, bad values, routes, methods, 64 KiB limit"

# A NUL in the path (%00, or raw) is a 400, never routed as its prefix: these
# used to cancel job $id and to create a job.
expect 400 bad_path "NUL" DELETE "/v1/jobs/$id%00/x"
expect 400 bad_path "NUL" POST "/v1/jobs%00x" '{"mem_bytes":1024}'
expect 400 bad_path "NUL" GET "/v1/jobs/$id%00"
# One table maps libvram's errors to HTTP (VRAM_ERRORS): a value libvram
# rejects (EINVAL) is 422 invalid_value on the monitoring routes as on
# /v1/jobs, a device that does not exist (ENODEV) 404 on both.
expect 422 invalid_value "at most" GET '/v1/history?device=0&from=0&to=100000000&step=0.001'
expect 422 invalid_value "mem_bytes" POST /v1/jobs '{"mem_bytes":"lots"}'
expect 404 not_found "no such device" GET '/v1/history?device=9'
expect 404 not_found "no such device" POST /v1/peaks/reset '{"device": 9}'
raw=$(python3 - "$VRAM_SOCKET" "$id" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(30)
s.sendall(b"DELETE /v1/jobs/" + sys.argv[2].encode() + b"\x00/x HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
while chunk := s.recv(65536): data += chunk   # the daemon answers and closes
print(data.split(b"\r\n")[0].decode())
PY
)
case $raw in "HTTP/1.1 400"*) ;; *) fail "raw NUL in the request line: $raw" ;; esac
[ "$(job_state "$id")" = running ] || fail "a NUL path changed job $id"
# escapes of ordinary characters route as the characters (they once drew a
# false "NUL in the path" 400: the decoded path is shorter than the raw one)
b=$(api GET "/v1/h%65alth")
[ "$(status)" = 200 ] || fail "percent-escaped path: $(status) $b"
# a request line that is garbage gets an answer and a close
garbage=$(python3 - "$VRAM_SOCKET" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(30)
s.sendall(b"\x01\x02 garbage\r\n\r\n")
data = b""
while chunk := s.recv(65536): data += chunk
print(data.split(b"\r\n")[0].decode(errors="replace"))
PY
)
case $garbage in "HTTP/1."*" 400"*) ;; *) fail "garbage request line: $garbage" ;; esac
pass "NUL and control characters in paths: 400 JSON, nothing routed; garbage request line answered and closed"

# Malformed request heads and bodies, first or later on a connection:
# test_daemon_screen.sh.

# still serving, state intact: exactly the one job, still running
jobs=$(api GET /v1/jobs)
[ "$(field "$jobs" 'len(d["jobs"])')" = 1 ] || fail "jobs changed: $jobs"
[ "$(job_state "$id")" = running ] || fail "job state changed"
[ "$(field "$(api GET /v1/status)" 'd["total_reserved_bytes"]')" = $((10 * GiB)) ] || fail "ledger changed"
pass "after bad input the daemon serves and its state is intact"

# The CLI views
"$VRAM" jobs | grep -q "keep" || fail "vram jobs table"
"$VRAM" jobs --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["jobs"][0]["name"]=="keep"'
"$VRAM" status | grep -q "H100-80GB" || fail "vram status table"
"$VRAM" status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["active_jobs"]==1'
"$VRAM" cancel --json "$id" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["state"]=="cancelled"'
out=$("$VRAM" cancel "$id" 2>&1) && fail "second cancel succeeded"
grep -q "already ended" <<<"$out" || fail "second cancel: $out"
set +e; "$VRAM" cancel nope >/dev/null 2>&1; rc=$?; set -e
[ $rc = 2 ] || fail "bad id is a usage error (exit $rc)"
pass "vram jobs / status / cancel, with --json"

# TCP without the token serves what health checks and a Prometheus scrape
# need, nothing else. Every operation of docs/openapi.yaml is asked over TCP
# without the token: those whose security is empty answer, the others are
# refused with a JSON error (403 while vramd has no token, 401 with one).
tcp_unidentified() { # EXPECTED_CLOSED_STATUS [HEADER]: checks every operation
    python3 - "$VRAM_SOURCE_DIR/docs/openapi.yaml" "$(tcp_address)" "$id" "$1" "${2:-}" <<'PY'
import http.client, json, sys, yaml
spec_path, tcp, job, closed, header = sys.argv[1:6]
spec = yaml.safe_load(open(spec_path))
host, port = tcp.rsplit(":", 1)
opened, refused = [], []
for path, ops in spec["paths"].items():
    for method, op in ops.items():
        if method not in ("get", "post", "delete"):
            continue
        is_open = op.get("security", spec["security"]) == []
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {"Content-Type": "application/json"}
        if header:
            headers["Authorization"] = header
        target = path.replace("{id}", job) + ("?device=0" if path == "/v1/history" else "")
        c.request(method.upper(), target, body="{}" if method == "post" else None, headers=headers)
        r = c.getresponse()
        body = r.read()
        if is_open:
            assert r.status == 200, "%s %s open, answered %d" % (method, path, r.status)
            opened.append(method.upper() + " " + path)
            continue
        assert r.status == int(closed), "%s %s without the token: %d %s" % (method, path, r.status, body)
        err = json.loads(body)["error"]
        assert err["code"] == ("unauthorized" if closed == "401" else "forbidden"), err
        assert "/v1/health" in err["message"] and "/metrics" in err["message"], err
        assert (r.getheader("WWW-Authenticate") == 'Bearer realm="vramd"') == (closed == "401"), r.getheaders()
        refused.append(method.upper() + " " + path)
assert sorted(opened) == ["GET /metrics", "GET /v1/health"], "open on TCP: %s" % opened
assert len(refused) >= 18, refused
print("%d operations refused, open: %s" % (len(refused), ", ".join(sorted(opened))))
PY
}
tcp_unidentified 403 || fail "TCP without a token, vramd without one"
tcp=$(tcp_address)
b=$(curl -s -w '\n%{http_code}' -X POST -d '{"mem_bytes":1024}' "http://$tcp/v1/jobs")
[ "$(tail -n1 <<<"$b")" = 403 ] || fail "tcp POST without token: $b"
grep -q "has no token" <<<"$b" || fail "tcp POST message: $b"
stop_daemon
export VRAM_TOKEN=s3cret-token
start_daemon
tcp_unidentified 401 || fail "TCP without the token"
tcp_unidentified 401 "Bearer wrong" || fail "TCP with a wrong token"
tcp=$(tcp_address)
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $VRAM_TOKEN" "http://$tcp/v1/watch")
[ "$code" = 200 ] || fail "GET /v1/watch with the token: $code"
b=$(curl -s -X POST -d '{"mem_bytes":1024,"name":"tcp"}' -H "Authorization: Bearer $VRAM_TOKEN" "http://$tcp/v1/jobs")
tid=$(field "$b" 'd["id"]')
[ "$(field "$b" 'd["state"]')" = running ] || fail "token submit: $b"
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $VRAM_TOKEN" "http://$tcp/v1/jobs/$tid")
[ "$code" = 200 ] || fail "token cancel: $code"
# the config view never shows the token
api GET /v1/config | grep -q s3cret && fail "token leaked by /v1/config"
pass "TCP without the token: /metrics and /v1/health only (every other operation of openapi.yaml: 403 while vramd has no token, 401 with WWW-Authenticate with one or with a wrong one); with the token: reads and mutations"
