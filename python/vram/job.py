"""vram.job(): what `vram run` tells the program it started, from the
environment (VRAM_JOB_ID, VRAM_BATCH_SIZE, VRAM_GRAD_ACCUM,
CUDA_VISIBLE_DEVICES), with lease renewal while the job runs."""
import logging
import os
import threading

from .api import parse_size
from .client import Client
from .errors import Error

log = logging.getLogger("vram")


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("vram: %s=%r is not an integer" % (name, v)) from None


class JobInfo:
    """The job this process runs as. Outside `vram run`, id is None, the
    batch size is None and accumulation_steps is 1, so code can use it
    unconditionally:

        with vram.job() as j:
            loader = DataLoader(ds, batch_size=j.batch_size or 32)
            for step, batch in enumerate(loader):
                ...
                if (step + 1) % j.accumulation_steps == 0:
                    opt.step()
    """

    def __init__(self, client=None, renew_interval=30.0):
        self.id = _env_int("VRAM_JOB_ID")
        self.batch_size = _env_int("VRAM_BATCH_SIZE")
        self.accumulation_steps = _env_int("VRAM_GRAD_ACCUM") or 1
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.devices = [d for d in cvd.split(",") if d] if cvd else []
        self.renew_interval = renew_interval
        self.renewals = 0
        self.peak_bytes = 0
        self._client = client
        self._stop = threading.Event()
        self._thread = None

    @property
    def managed(self):
        """True inside `vram run` (a vramd job id is set)."""
        return self.id is not None

    @property
    def client(self):
        if self._client is None:
            self._client = Client()
        return self._client

    def renew(self):
        """Renews the lease once (POST /v1/jobs/{id}/renew)."""
        if self.managed:
            self.client.renew(self.id)
            self.renewals += 1

    def _renew_loop(self):
        warned = False
        while not self._stop.wait(self.renew_interval):
            try:
                self.renew()
            except Error as e:
                if not warned:
                    log.warning("vram: cannot renew the lease of job %s: %s", self.id, e)
                    warned = True

    def start(self):
        """Starts renewing the lease every renew_interval seconds."""
        if self.managed and self.renew_interval and self._thread is None:
            self._thread = threading.Thread(target=self._renew_loop, name="vram-lease",
                                            daemon=True)
            self._thread.start()
        return self

    def record_peak(self, nbytes):
        """Notes a peak usage (kept as the maximum seen)."""
        self.peak_bytes = max(self.peak_bytes, parse_size(nbytes, "nbytes"))

    def stop(self):
        """Stops renewing and reports the peak usage seen by record_peak() or
        by PyTorch's CUDA allocator to vramd (POST /v1/jobs/{id}/peak; a
        failure is logged, not raised: the job's work is done)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            import torch
            if torch.cuda.is_available():
                self.record_peak(torch.cuda.max_memory_allocated())
        except ImportError:
            pass
        if self.managed:
            log.info("vram: job %s peak usage %d bytes", self.id, self.peak_bytes)
            try:
                self.client.report_peak(self.id, self.peak_bytes)
            except Error as e:
                log.warning("vram: cannot report the peak usage of job %s: %s", self.id, e)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def job(client=None, renew_interval=30.0):
    """The job from the environment of `vram run` (see JobInfo)."""
    return JobInfo(client=client, renew_interval=renew_interval)
