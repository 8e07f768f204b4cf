#!/usr/bin/env bash
# No TCP load starves the Unix socket (issue 24 §3): TCP without the token
# is served under its own cap. A client holds more TCP connections than the
# listener's cap (512) while vramd runs with a descriptor limit of 1,024:
# the connections past the cap are answered with one JSON 503 and closed,
# and meanwhile every request on the Unix socket is answered (health, a
# submit, a cancel, status). Once the TCP connections close, TCP answers
# again.
source "$(dirname "$0")/daemon_lib.sh"
# the idle connections are held by the test, not cut by the request timeout
export VRAM_REQUEST_TIMEOUT=0
# vramd's descriptors: 512 TCP clients fit with room for the socket's own
# (a relay of several descriptors per connection would not)
ulimit -Sn 1024
ulimit -Hn 1024
start_daemon
tcp=$(tcp_address)

python3 - "$tcp" "$VRAM_SOCKET" <<'PY' || fail "TCP load against the Unix socket"
import http.client, json, select, socket, sys
tcp, unix_path = sys.argv[1], sys.argv[2]
host, port = tcp.rsplit(":", 1)
CAP, EXTRA = 512, 40

class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(30)  # a bound for a failing run
        self.sock.connect(unix_path)

def unix(method, path, body=None):
    c = Unix("localhost", timeout=30)
    c.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)

held = [socket.create_connection((host, int(port)), timeout=30) for _ in range(CAP + EXTRA)]
# the connections past the cap get a reply and a close; the others nothing
refused, pending = [], list(held)
while len(refused) < EXTRA:
    ready, _, _ = select.select(pending, [], [], 60)
    assert ready, "only %d of %d connections past the cap answered" % (len(refused), EXTRA)
    for s in ready:
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        refused.append(data)
        pending.remove(s)
assert len(pending) == CAP, "%d connections held, expected %d" % (len(pending), CAP)
for data in refused:
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"Connection: close" in head, data[:200]
    assert json.loads(body)["error"]["code"] == "busy", body
# TCP at its cap: the Unix socket serves its callers
for i in range(5):
    st, b = unix("GET", "/v1/health")
    assert st == 200, (st, b)
    st, job = unix("POST", "/v1/jobs", json.dumps({"mem_bytes": "1GiB", "name": "under-load-%d" % i}))
    assert st == 201 and job["state"] == "running", (st, job)
    st, b = unix("DELETE", "/v1/jobs/%d" % job["id"])
    assert st == 200 and b["state"] == "cancelled", (st, b)
    st, b = unix("GET", "/v1/status")
    assert st == 200 and b["active_jobs"] == 0, (st, b)
print("ok: %d TCP connections held, %d past the cap answered 503 busy; 5 rounds of health, "
      "submit, cancel and status answered on the Unix socket" % (len(pending), len(refused)))
for s in held:
    s.close()
PY
tcp_health() { [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$tcp/v1/health")" = 200 ]; }
for _ in $(seq 600); do tcp_health && break; sleep 0.1; done
tcp_health || fail "TCP does not answer once its connections closed"
pass "TCP held at its cap (512, the rest 503 busy), vramd at 1,024 descriptors: the Unix socket answers every request; TCP answers again after"
