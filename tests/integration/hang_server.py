"""A receiver that never answers (the alert tests' dead webhook): accepts
connections, reads what they send and never replies. Appends "open" to a file
when a connection arrives and "closed" when its client gives up, and writes
its port to a file once it listens.

usage: hang_server.py LOG_PATH PORT_PATH"""
import os
import socket
import sys
import threading

log_path, port_path = sys.argv[1], sys.argv[2]
lock = threading.Lock()


def note(word):
    with lock, open(log_path, "a") as f:
        f.write(word + "\n")


def hold(conn):
    note("open")
    while conn.recv(65536):
        pass
    note("closed")
    conn.close()


server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(64)
with open(port_path + ".tmp", "w") as f:
    f.write(str(server.getsockname()[1]))
os.rename(port_path + ".tmp", port_path)
while True:
    conn, _ = server.accept()
    threading.Thread(target=hold, args=(conn,), daemon=True).start()
