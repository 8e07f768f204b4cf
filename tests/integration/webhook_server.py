"""A loopback HTTP server for the alert tests: appends each POSTed body as a
line to a file, answers 503 to the first FAIL_FIRST requests (to exercise the
sender's retries), and writes its port to a file once it listens."""
import http.server
import sys

out_path, port_path, fail_first = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = {"n": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        seen["n"] += 1
        with open(out_path + ".attempts", "a") as f:
            f.write("x\n")
        if seen["n"] <= fail_first:
            self.send_response(503)
            self.end_headers()
            return
        with open(out_path, "ab") as f:
            f.write(body + b"\n")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(port_path + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(port_path + ".tmp", port_path)
server.serve_forever()
