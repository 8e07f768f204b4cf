#!/usr/bin/env bash
# Every request of a connection is screened (Unix socket and TCP): a
# malformed request — first, second on a kept-alive connection, or
# pipelined behind a good one; a bad head, a bad chunked body, a request
# past the size bounds — gets the replies owed before it, then exactly one
# JSON error and a close, from vramd's one HTTP parser (http_head.c).
# Pipelined good requests are all answered, in order; good chunked bodies
# pass; a slow later request is still cut by the request timeout; and the
# peer's uid is still the client's (not vramd's) through the relay. vramd
# links no other HTTP server library (one parser in the tree).
source "$(dirname "$0")/daemon_lib.sh"
# one HTTP parser in the tree: vramd links no HTTP server library beside its own
servers=$(ldd "$VRAMD" | grep -Eo 'lib(microhttpd|civetweb|h2o[^ ]*|event[^ ]*)\.so[^ ]*' || true)
[ -z "$servers" ] || fail "vramd links another HTTP server: $servers"
export VRAM_REQUEST_TIMEOUT=3
export VRAM_TOKEN=screen-token # TCP reads /v1/status with it
start_daemon --socket-mode 0666
chmod 755 "$T"

cat >"$T/screen.py" <<'PY'
import json, re, socket, sys

def connect(where):
    if where.startswith("/"):
        s = socket.socket(socket.AF_UNIX); s.connect(where)
    else:
        host, port = where.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    s.settimeout(60)  # a bound for a failing run, never waited out by a passing one
    return s

class Conn:
    def __init__(self, where):
        self.s, self.buf = connect(where), b""
    def more(self):
        try:
            chunk = self.s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        self.buf += chunk
        return chunk
    def reply(self):
        """One reply (status, headers, body), framed by its Content-Length."""
        while b"\r\n\r\n" not in self.buf:
            if not self.more(): raise EOFError("closed before a reply: %r" % self.buf[:300])
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        m = re.match(rb"HTTP/1\.1 ([0-9]{3}) ", lines[0])
        if not m: raise ValueError("bad status line %r" % lines[0])
        headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get(b"content-length", b"0"))
        while len(self.buf) < n:
            if not self.more(): raise EOFError("closed inside a body")
        body, self.buf = self.buf[:n], self.buf[n:]
        return int(m.group(1)), headers, body
    def rest(self):
        """Everything until vramd closes."""
        while self.more(): pass
        data, self.buf = self.buf, b""
        return data

HOST = b"x"
def make(host):
    """The cases, with the Host header the listener accepts (TCP: its address)."""
    global HOST, GOOD, STATUS, HEADS, CHUNKS, LIMITS, EDGES
    HOST = host
    GOOD = b"GET /v1/health HTTP/1.1\r\nHost: " + HOST + b"\r\n\r\n"
    auth = b"" if host == b"localhost" else b"Authorization: Bearer screen-token\r\n"
    STATUS = b"GET /v1/status HTTP/1.1\r\nHost: " + HOST + b"\r\n" + auth + b"\r\n"
    def chunked(body):
        return (b"POST /v1/jobs HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + body)
    HEADS = [
        (400, b"POST /v1/jobs HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Length: abc\r\n\r\n"),
        (400, b"POST /v1/jobs HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Length: -5\r\n\r\n"),
        (400, b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
        (413, b"POST /v1/jobs HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
        (400, b"\x01\x02 garbage\r\n\r\n"),
        (400, b"GET /v1/health HTTP/1.1\r\nno colon here\r\n\r\n"),
        (400, b"GET /v1/health HTTP/1.1\r\nX-A: a\x1bb\r\n\r\n"),
        (431, b"GET /v1/health HTTP/1.1\r\nHost: " + HOST + b"\r\nX-A: " + b"a" * 100000 + b"\r\n\r\n"),
        (505, b"GET /v1/health HTTP/9.9\r\nHost: " + HOST + b"\r\n\r\n"),
    ]
    CHUNKS = [
        (400, chunked(b"zz\r\n{}\r\n0\r\n\r\n")),                     # size not hex
        (400, chunked(b"2 \r\n{}\r\n0\r\n\r\n")),                     # space after the size
        (400, chunked(b"2\r\n{}}\r\n0\r\n\r\n")),                     # data longer than its size
        (400, chunked(b"2;ext\x01\r\n{}\r\n0\r\n\r\n")),              # control byte in an extension
        (400, chunked(b"0000000000000002\r\n{}\r\n0\r\n\r\n")),       # 16 digits
        (413, chunked(b"ffffff\r\n")),                                # over 64 KiB
        (400, chunked(b"2\r\n{}\r\n0\r\nno colon\r\n\r\n")),          # malformed trailer
        (400, chunked(b"\r\n{}\r\n0\r\n\r\n")),                       # empty size line
    ]
    # Past vramd's bounds.
    global head_of
    def head_of(fields, size):
        """A GET of `fields` header fields (Host the first), `size` bytes in all."""
        start, end = b"GET /v1/health HTTP/1.1\r\n", b"\r\n"
        host = b"Host: " + HOST + b"\r\n"
        n = fields - 1
        room = size - len(start) - len(end) - len(host)
        per = room // n
        lines = [b"X-%02d: " % i for i in range(n)]
        lines = [l + b"a" * (per - len(l) - 2) + b"\r\n" for l in lines]
        lines[-1] = lines[-1][:-2] + b"a" * (room - per * n) + b"\r\n"
        h = start + host + b"".join(lines) + end
        assert len(h) == size, (len(h), size)
        return h
    def trailer(fields, size):
        return b"".join(b"T%d: " % i + b"b" * (size // fields - len(b"T%d: " % i) - 2) + b"\r\n"
                        for i in range(fields))
    LIMITS = [
        (431, head_of(65, 4000)),                                      # 65 fields
        (431, head_of(64, 16 * 1024 + 1)),                             # 16 KiB + 1
        (400, chunked(b"2;" + b"e" * 1100 + b"\r\n{}\r\n0\r\n\r\n")),  # chunk line over 1 KiB
        (431, chunked(b"2\r\n{}\r\n0\r\n" + trailer(17, 600) + b"\r\n")),  # 17 trailer fields
        (431, chunked(b"2\r\n{}\r\n0\r\n" + trailer(4, 1100) + b"\r\n")),  # trailer over 1 KiB
    ]
    # Just inside them: answered by vramd's routes, in JSON, the connection kept.
    EDGES = [
        head_of(64, 16 * 1024),
        chunked(b"2;" + b"e" * 1000 + b"\r\n{}\r\n0\r\n" + trailer(16, 1000) + b"\r\n"),
    ]

problems = []
def check_error(where, what, data, want):
    """data: all that came after the replies owed; one JSON error, then closed."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    p = []
    if not lines[0].startswith(b"HTTP/1.1 %d " % want): p.append("status")
    if sum(1 for l in data.split(b"\r\n") if re.match(rb"HTTP/1\.[01] [0-9]{3} ", l)) != 1:
        p.append("not exactly one status line")
    if b"Content-Type: application/json" not in lines: p.append("not JSON")
    if b"Connection: close" not in lines: p.append("no Connection: close")
    try:
        if not json.loads(body)["error"]["code"]: p.append("no error code")
    except (ValueError, KeyError):
        p.append("body is not a JSON error")
    if p: problems.append("%s %s: %s %r" % (where, what, p, data[:300]))

def good_reply(where, c, what, key):
    status, headers, body = c.reply()
    if status != 200 or headers.get(b"content-type") != b"application/json" or key not in json.loads(body):
        problems.append("%s %s: reply %d %r" % (where, what, status, body[:200]))

for where in sys.argv[1:]:
    make(b"localhost" if where.startswith("/") else where.encode())
    for want, bad in HEADS + CHUNKS + LIMITS:
        what = repr(bad[:50])
        c = Conn(where)  # first on its connection
        try:
            c.s.sendall(bad)
        except OSError:
            pass
        check_error(where, "first " + what, c.rest(), want)
        # a good first request, its reply read, then the malformed one
        c = Conn(where)
        c.s.sendall(GOOD)
        good_reply(where, c, "first of " + what, "version")
        try:
            c.s.sendall(bad)
        except OSError:
            pass  # the answer may come before all of a huge head is sent
        check_error(where, "second " + what, c.rest(), want)
        # the same pipelined behind a good request: its reply, then the error
        c = Conn(where)
        try:
            c.s.sendall(GOOD + bad)
        except OSError:
            pass
        good_reply(where, c, "pipelined before " + what, "version")
        check_error(where, "pipelined " + what, c.rest(), want)
    for edge in EDGES:  # second and pipelined, then a third request
        c = Conn(where)
        c.s.sendall(GOOD + edge)
        good_reply(where, c, "before an edge", "version")
        status, headers, body = c.reply()
        if headers.get(b"content-type") != b"application/json" or "html" in body.decode(errors="replace"):
            problems.append("%s edge %r: %d %r" % (where, edge[:40], status, body[:200]))
        c.s.sendall(GOOD)
        good_reply(where, c, "after an edge", "version")
        c.s.close()
    # two pipelined good requests, then a third after them: all answered in order
    c = Conn(where)
    c.s.sendall(GOOD + STATUS)
    good_reply(where, c, "pipelined 1 of 2", "version")
    good_reply(where, c, "pipelined 2 of 2", "devices")
    c.s.sendall(STATUS)
    good_reply(where, c, "after the pipelined pair", "devices")
    c.s.close()
print("\n".join(problems), file=sys.stderr)
sys.exit(1 if problems else 0)
PY
python3 "$T/screen.py" "$VRAM_SOCKET" "$(tcp_address)" || fail "later requests are not all screened"
api GET /v1/health >/dev/null; [ "$(status)" = 200 ] || fail "vramd stopped serving"
[ "$(field "$(api GET /v1/jobs)" 'len(d["jobs"])')" = 0 ] || fail "a malformed request created a job"
pass "a malformed request (9 heads, 8 chunked bodies, 5 past the size bounds), first, second, or pipelined behind a good one: the good reply, then one JSON error and a close (Unix socket and TCP); requests just inside the bounds answered in JSON; 2 pipelined good requests answered in order"

# Good chunked bodies pass (with an extension and a trailer), after a good
# request on the same connection.
python3 - "$VRAM_SOCKET" <<'PY' || fail "chunked request bodies"
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(60)
body = b'{"mem_bytes":1024,"name":"chunky"}'
s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
          b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\n\r\n"
          b"5;x=y\r\n" + body[:5] + b"\r\n" + b"%x\r\n" % (len(body) - 5) + body[5:] +
          b"\r\n0\r\nX-Trailer: 1\r\n\r\n"
          b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while chunk := s.recv(65536): data += chunk
replies = data.split(b"HTTP/1.1 ")[1:]
assert [r[:3] for r in replies] == [b"200", b"201", b"200"], data[:600]
assert json.loads(replies[1].partition(b"\r\n\r\n")[2])["name"] == "chunky", replies[1]
PY
[ "$(field "$(api GET /v1/jobs)" '[j["name"] for j in d["jobs"]]')" = "['chunky']" ] || fail "chunked job"
pass "chunked bodies with an extension and a trailer, pipelined between good requests: 200, 201, 200"

# The cases two parsers once disagreed on, each answered once with a status
# line and a JSON body by vramd's one parser: a Content-Length or a
# Transfer-Encoding with a trailing space (well-formed: the value is
# trimmed), 459 query parameters (refused, not dropped), and on TCP a Host
# that does not name the listener (DNS rebinding) or none at all.
python3 - "$VRAM_SOCKET" "$(tcp_address)" <<'PY' || fail "once-disputed requests"
import json, socket, sys
sock, tcp = sys.argv[1], sys.argv[2]
def exchange(where, data):
    if where.startswith("/"):
        s = socket.socket(socket.AF_UNIX); s.connect(where)
    else:
        h, p = where.rsplit(":", 1); s = socket.create_connection((h, int(p)))
    s.settimeout(60)
    s.sendall(data)
    out = b""
    while chunk := s.recv(65536): out += chunk
    return out
def one_json_reply(out, want):
    statuses = [l for l in out.split(b"\r\n") if l.startswith(b"HTTP/1.")]
    assert len(statuses) == 1 and statuses[0].startswith(b"HTTP/1.1 %d " % want), out[:400]
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"Content-Type: application/json" in head.split(b"\r\n"), out[:400]
    return json.loads(body)
close = b"Connection: close\r\n"
body = b'{"mem_bytes":1024,"name":"spaced"}'
out = exchange(sock, b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\n" + close +
               b"Content-Length: %d \r\n\r\n" % len(body) + body)
assert one_json_reply(out, 201)["name"] == "spaced"
out = exchange(sock, b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\n" + close +
               b"Transfer-Encoding: chunked \r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
assert one_json_reply(out, 201)["name"] == "spaced"
query = "&".join("k%d=v" % i for i in range(459)).encode()
for where, host in ((sock, b"localhost"), (tcp, tcp.encode())):
    out = exchange(where, b"GET /v1/jobs?" + query + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + close + b"\r\n")
    assert "query parameters" in one_json_reply(out, 400)["error"]["message"]
for host in (b"Host: attacker.example\r\n", b"Host: attacker.example:" + tcp.rsplit(":", 1)[1].encode() + b"\r\n"):
    out = exchange(tcp, b"GET /v1/status HTTP/1.1\r\n" + host + close + b"\r\n")
    assert one_json_reply(out, 421)["error"]["code"] == "misdirected_request"
out = exchange(tcp, b"GET /v1/status HTTP/1.0\r\n\r\n")
assert one_json_reply(out, 421)["error"]["code"] == "misdirected_request"
for host in (tcp.encode(), b"localhost:" + tcp.rsplit(":", 1)[1].encode()):
    out = exchange(tcp, b"GET /v1/health HTTP/1.1\r\nHost: " + host + b"\r\n" + close + b"\r\n")
    assert "version" in one_json_reply(out, 200)
PY
[ "$(field "$(api GET /v1/jobs)" 'len([j for j in d["jobs"] if j["name"] == "spaced"])')" = 2 ] || fail "spaced jobs"
pass "Content-Length and Transfer-Encoding with a trailing space: one JSON 201 each; 459 query parameters: one JSON 400; on TCP a Host of attacker.example (with or without the port) or none: 421, the listener's address or localhost: 200"

# Replies of 1 KiB or more are gzipped for a client that accepts it (the
# dashboard's refreshes and static files): the same bytes once inflated;
# plain without Accept-Encoding, with gzip;q=0, and for small replies.
python3 - "$(tcp_address)" <<'PY' || fail "gzip replies"
import gzip, socket, sys
tcp = sys.argv[1]
def get(path, extra=b""):
    h, p = tcp.rsplit(":", 1)
    s = socket.create_connection((h, int(p))); s.settimeout(60)
    s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + tcp.encode() + b"\r\nConnection: close\r\n" + extra + b"\r\n")
    out = b""
    while chunk := s.recv(65536): out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    fields = {l.split(b":", 1)[0].lower(): l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")[1:]}
    assert int(fields[b"content-length"]) == len(body), head
    return fields, body
for path in (b"/static/dygraph.min.js", b"/static/dashboard.js", b"/metrics"):
    plain_f, plain = get(path)
    assert b"content-encoding" not in plain_f and len(plain) >= 1024, (path, plain_f)
    zf, z = get(path, b"Accept-Encoding: br, gzip;q=0.8\r\n")
    assert zf.get(b"content-encoding") == b"gzip" and zf.get(b"vary") == b"Accept-Encoding", (path, zf)
    assert len(z) < len(plain), (path, len(z), len(plain))
    if path != b"/metrics":  # metrics move between two scrapes
        assert gzip.decompress(z) == plain, path
    else:
        assert gzip.decompress(z).startswith(b"# HELP"), path
    nf, _ = get(path, b"Accept-Encoding: gzip;q=0\r\n")
    assert b"content-encoding" not in nf, (path, nf)
small_f, _ = get(b"/v1/health", b"Accept-Encoding: gzip\r\n")
assert b"content-encoding" not in small_f, small_f
PY
pass "replies of 1 KiB or more gzipped when accepted (identical once inflated), plain otherwise and when small"

# A slow later request is cut by the request timeout (3 s here): the
# connection closes (waited on: recv returns at the close).
python3 - "$VRAM_SOCKET" "$(tcp_address)" <<'PY' || fail "slow later request"
import socket, sys, time
for where in sys.argv[1:]:
    if where.startswith("/"):
        s = socket.socket(socket.AF_UNIX); s.connect(where)
    else:
        h, p = where.rsplit(":", 1); s = socket.create_connection((h, int(p)))
    s.settimeout(60)
    host = b"localhost" if where.startswith("/") else where.encode()  # TCP: the listener's
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    data = b""
    while b'"version"' not in data:
        chunk = s.recv(65536)
        assert chunk, "closed before the first reply: %r" % data[:300]
        data += chunk
    t0 = time.monotonic()
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost:")   # and nothing more
    rest = b""
    try:
        while chunk := s.recv(65536): rest += chunk
    except ConnectionResetError:
        pass
    assert b"HTTP/1.1" not in rest, rest
    waited = time.monotonic() - t0
    assert 1 < waited < 50, waited
PY
pass "a slow second request is cut by REQUEST_TIMEOUT (Unix socket and TCP)"

# The peer's identity is the client's, on its second request too: vramd
# reads it at accept.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    setpriv --reuid=65534 --regid=65534 --clear-groups python3 - "$VRAM_SOCKET" <<'PY' >"$T/nobody.json" || fail "as uid 65534"
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(60)
s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
while b'"version"' not in data: data += s.recv(65536)
body = b'{"mem_bytes":1024,"name":"nobody-job"}'
s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
data = b""
while chunk := s.recv(65536): data += chunk
print(data.partition(b"\r\n\r\n")[2].decode())
PY
    id=$(field "$(cat "$T/nobody.json")" 'd["id"]')
    j=$(api GET "/v1/jobs/$id")
    [ "$(field "$j" 'd["owner_uid"]')" = 65534 ] || fail "owner of uid 65534's job: $j"
    pass "uid 65534's job, sent as the 2nd request of a kept-alive connection, is owned by uid 65534"
else
    echo "skip: the identity check needs root and setpriv to act as another uid"
fi
