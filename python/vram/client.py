"""vram.Client: vramd's HTTP API (docs/daemon.md) over its Unix socket,
with http.client on an AF_UNIX socket. vramd takes the caller's uid from
the socket (SO_PEERCRED), so no token is needed there."""
import ctypes
import http.client
import json
import os
import socket
import time
import urllib.parse

from . import _lib
from .api import batch_table, parse_size
from .errors import ConnectionError as VramConnectionError
from .errors import DaemonError, TimeoutError as VramTimeoutError
from .types import Job

FINAL_STATES = ("done", "failed", "cancelled", "timeout")


def _from_estimate(estimate, mem_bytes, batch_size, min_batch_size, batch_bytes):
    """submit()'s memory fields from the workload's estimate settings."""
    if mem_bytes is not None or batch_bytes is not None:
        raise ValueError("vram.Client.submit: estimate= and %s both give the memory: keep one" %
                         ("mem_bytes=" if mem_bytes is not None else "batch_bytes="))
    req = getattr(estimate, "estimate_request", estimate)
    if not isinstance(req, dict):
        raise ValueError("vram.Client.submit: estimate= must be a dict of vram.estimate()'s "
                         "arguments or a Plan made by vram.plan(), not %r" % (estimate,))
    req = dict(req)
    batch = batch_size if batch_size is not None else req.pop("batch_size", None)
    req.pop("batch_size", None)
    if batch is None:
        raise ValueError("vram.Client.submit: estimate= needs the batch: batch_size= or "
                         "estimate[\"batch_size\"]")
    low = min_batch_size if min_batch_size is not None else batch
    table = batch_table(**req, batch_size=batch, min_batch_size=low)
    return table[batch], batch, low, (table if len(table) > 1 else None)


def default_socket_path():
    """Where vramd's socket is, as libvram's vram_endpoint decides for every
    client (the CLI, the Slurm plugin): VRAM_SOCKET, else the socket this
    user's own vramd listens on when it exists, else the system socket
    /run/vram/vramd.sock when it exists. When neither exists, the user's own
    socket (a connection then fails naming it)."""
    buf = ctypes.create_string_buffer(4096)
    why = ctypes.c_char_p()
    _lib.lib.vram_endpoint(1, buf, len(buf), ctypes.byref(why))
    return buf.value.decode()


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Client:
    """A client of vramd. Every call opens one connection (vramd closes idle
    ones); errors of the API raise vram.DaemonError with its status and
    code, an unreachable daemon vram.ConnectionError naming the socket.

        c = vram.Client()
        job = c.submit(mem_bytes="20GiB", name="finetune")
        job = c.wait(job.id)            # until it leaves the queue
        c.cancel(job.id)
    """

    def __init__(self, socket_path=None, timeout=70.0):
        self.socket_path = socket_path or default_socket_path()
        self.timeout = timeout

    def request(self, method, path, body=None):
        """One API call; the decoded JSON answer."""
        conn = _UnixConnection(self.socket_path, self.timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8", "replace")
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise VramConnectionError("cannot connect to vramd at %s: %s (is it running?)" %
                                      (self.socket_path, e.strerror or e)) from e
        except OSError as e:
            raise VramConnectionError("vramd at %s: %s" % (self.socket_path, e)) from e
        finally:
            conn.close()
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            raise DaemonError(resp.status, "bad_reply", "not JSON: %r" % text[:200]) from None
        if resp.status >= 400:
            err = doc.get("error", {}) if isinstance(doc, dict) else {}
            raise DaemonError(resp.status, err.get("code", "error"),
                              err.get("message", text[:200]))
        return doc

    def health(self):
        return self.request("GET", "/v1/health")

    def status(self):
        """The memory summary of GET /v1/status (a dict)."""
        return self.request("GET", "/v1/status")

    def devices(self):
        return self.request("GET", "/v1/devices")["devices"]

    def submit(self, mem_bytes=None, gpus=None, name=None, command=None, priority=None,
               timeout_s=None, pid=None, devices=None, batch_size=None, min_batch_size=None,
               batch_bytes=None, estimate=None):
        """POST /v1/jobs. mem_bytes per GPU (int or "20GiB") at batch_size;
        batch_bytes maps each smaller batch the job accepts to its memory per
        GPU (full estimates: vram.batch_table()): vramd may start the job
        with the largest of them that fits. estimate= instead of both: the
        workload, as a dict of vram.estimate()'s arguments ({"model":
        "gpt2", "batch_size": 8, "precision": "amp-bf16"}) or a Plan made by
        vram.plan(); mem_bytes is the estimate at batch_size and, with
        min_batch_size, batch_bytes is vram.batch_table() down to it: the
        request `vram submit --model ... --min-batch-size` makes. Returns
        the Job (already "running" when it fits now; granted_batch_size is
        the batch vramd started it with)."""
        if estimate is not None:
            mem_bytes, batch_size, min_batch_size, batch_bytes = _from_estimate(
                estimate, mem_bytes, batch_size, min_batch_size, batch_bytes)
        if mem_bytes is None:
            raise ValueError("vram.Client.submit: give mem_bytes= (per GPU, e.g. \"20GiB\") or "
                             "estimate= (the workload's settings)")
        body = {k: v for k, v in dict(
            mem_bytes=parse_size(mem_bytes, "mem_bytes"), gpus=gpus, name=name, command=command,
            priority=priority,
            timeout_s=timeout_s, pid=pid, devices=devices, batch_size=batch_size,
            min_batch_size=min_batch_size,
            batch_bytes=None if batch_bytes is None else [
                {"batch": int(b), "bytes": parse_size(v, "batch_bytes[%s]" % b)}
                for b, v in sorted(dict(batch_bytes).items())]).items()
            if v is not None}
        return Job.from_json(self.request("POST", "/v1/jobs", body))

    def jobs(self, limit=None):
        """Active jobs first, then ended ones, newest first."""
        q = "" if limit is None else "?limit=%d" % int(limit)
        return [Job.from_json(j) for j in self.request("GET", "/v1/jobs" + q)["jobs"]]

    def job(self, job_id):
        return Job.from_json(self.request("GET", "/v1/jobs/%d" % int(job_id)))

    def events(self, job_id):
        return self.request("GET", "/v1/jobs/%d/events" % int(job_id))["events"]

    def cancel(self, job_id):
        return Job.from_json(self.request("DELETE", "/v1/jobs/%d" % int(job_id)))

    def finish(self, job_id, exit_status=0, error=None, reason=None, retry_batch=None):
        """Reports how a running job ended: its exit status, an optional
        message, and reason="oom" (with retry_batch, the micro-batch the next
        attempt asks for) when it ran out of GPU memory."""
        body = {"exit_status": int(exit_status)}
        if error:
            body["error"] = error
        if reason:
            body["reason"] = reason
        if retry_batch:
            body["retry_batch"] = int(retry_batch)
        return Job.from_json(self.request("POST", "/v1/jobs/%d/finish" % int(job_id), body))

    def report_peak(self, job_id, peak_bytes):
        """Reports the job's measured peak usage in bytes per GPU (vramd keeps
        the largest report); returns the Job."""
        body = {"peak_bytes": parse_size(peak_bytes, "peak_bytes")}
        return Job.from_json(self.request("POST", "/v1/jobs/%d/peak" % int(job_id), body))

    def renew(self, job_id):
        return Job.from_json(self.request("POST", "/v1/jobs/%d/renew" % int(job_id)))

    def wait(self, job_id, timeout=None, until="started"):
        """Waits until the job leaves the queue (until="started", vramd's
        long poll) or reaches a final state (until="ended"); returns the Job.
        vram.TimeoutError after `timeout` seconds (None = forever)."""
        if until not in ("started", "ended"):
            raise ValueError("until must be \"started\" or \"ended\", not %r" % (until,))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 60.0 if deadline is None else deadline - time.monotonic()
            s = max(0, min(60, int(left)))
            j = Job.from_json(self.request(
                "GET", "/v1/jobs/%d?%s" % (int(job_id), urllib.parse.urlencode({"wait": s}))))
            if j.state in FINAL_STATES or (until == "started" and j.state != "queued"):
                return j
            if deadline is not None and time.monotonic() >= deadline:
                raise VramTimeoutError("job %d still %s after %g s" % (j.id, j.state, timeout))
            if j.state == "running":
                time.sleep(min(0.2, max(0.0, left)))  # no event for the end of a run
