#!/usr/bin/env python3
"""What an idle client connection costs vramd: threads and file descriptors.

  idle_connections.py VRAMD [CONNECTIONS]

Starts VRAMD on 2 simulated GPUs in a temporary directory, counts its
threads (/proc/PID/task) and descriptors (/proc/PID/fd), then opens
CONNECTIONS (default 50) connections to the Unix socket that each send one
GET /v1/health, read the reply and stay open (keep-alive), counts again,
and prints the difference per connection.
"""
import os, socket, subprocess, sys, tempfile, time


def counts(pid):
    return (len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd")))


def health(sock_path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    while len(body) < length:
        body += s.recv(4096)
    return s


def settle(pid, want, key):
    # the daemon makes its per-connection state as the request arrives: wait
    # until the count stops moving (bounded), never a fixed sleep
    last, same = None, 0
    for _ in range(200):
        now = counts(pid)
        same = same + 1 if now == last else 0
        if same >= 5:
            return now
        last = now
        time.sleep(0.02)
    return last


def main():
    vramd = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    with tempfile.TemporaryDirectory() as t:
        sock = os.path.join(t, "vramd.sock")
        env = dict(os.environ, VRAM_SIM="2xH100-80GB", VRAM_SIM_STATE=os.path.join(t, "sim"),
                   VRAM_SOCKET=sock, VRAM_DB=os.path.join(t, "db"), VRAM_TCP="127.0.0.1:0",
                   VRAM_LOG_LEVEL="warn")
        p = subprocess.Popen([vramd, "--foreground"], env=env)
        try:
            for _ in range(500):
                if os.path.exists(sock):
                    try:
                        health(sock).close()
                        break
                    except OSError:
                        pass
                time.sleep(0.01)
            base = settle(p.pid, None, "base")
            conns = [health(sock) for _ in range(n)]
            after = settle(p.pid, None, "after")
            print(f"vramd {vramd}: {n} idle keep-alive connections on the Unix socket")
            print(f"  threads: {base[0]} -> {after[0]}  ({(after[0] - base[0]) / n:.2f} per connection)")
            print(f"  fds:     {base[1]} -> {after[1]}  ({(after[1] - base[1]) / n:.2f} per connection)")
            for c in conns:
                c.close()
        finally:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
