"""What the trainer integrations share (one copy for Hugging Face, Lightning
and Accelerate): the out-of-memory guard that retries a batch as smaller
micro-batches with gradient accumulation (vram.torch.microbatch's
MicroBatchGuard, which oom_guard is built on too), the prediction of the largest
batch, the reservation with vramd and the figures logged to the trainers.

The decisions stay in libvram: how many micro-batches after each
out-of-memory error is vram.tune.OOMChain (src/tune/oomchain.c), the batch
prediction is vram.plan, the search is vram.torch.find_batch_size."""
import io
import logging
import os
import resource

import torch

from .. import api
from ..client import Client
from ..errors import Error, OutOfMemoryError
from ..job import job as _job_from_env
from ..torch.microbatch import MicroBatchGuard
from ..torch.report import print_memory_analysis

log = logging.getLogger("vram")

def peak_bytes(device=None):
    """This process's peak memory: the CUDA allocator's peak on a CUDA
    device, else the process's peak resident set (getrusage)."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def predict(profile, memory_bytes=None, device=0, host=False):
    """The largest batch predicted for training with `profile` on
    memory_bytes of memory (the model included), or on vram device `device`
    (its free memory now): the whole budget, no rounding to powers of two,
    no CUDA context. host=True (memory of the CPU): libvram's host planner
    (vram_plan_host) judges each batch by the estimate's allocated peak,
    without the CUDA caching allocator's rounding (2 MiB blocks, 20 MiB
    segments: they rule small models and do not exist on the CPU)."""
    target = {"gpu_mem": int(memory_bytes)} if memory_bytes else {"gpu": int(device or 0)}
    return api.plan(profile=profile, target=1.0, power_of_two=False, overhead_bytes=0,
                    optimizer=profile.optimizer or None, host=bool(host), **target).largest_fitting


def estimate_settings(profile, device=None):
    """vram.estimate()'s arguments for training `profile` (batch aside); on
    a CPU device without the CUDA context and workspaces."""
    cpu = device is None or torch.device(device).type == "cpu"
    return {"profile": profile, "optimizer": profile.optimizer or None,
            "overhead_bytes": 0 if cpu else None}


def estimate_bytes(profile, batch_size, device=None):
    """The estimate's total bytes for training `profile` at batch_size."""
    return api.estimate(batch_size=int(batch_size), **estimate_settings(profile, device)).total


class Reservation:
    """The job's memory reserved with vramd while it trains. Inside `vram
    run` the job exists already (vram.job()): its lease is renewed and the
    peak reported at the end. Otherwise, when a vramd answers on its socket,
    a job of mem_bytes is submitted for this process (vramd releases it
    when the process ends, also on a crash) and waited for while queued
    (wait_timeout seconds, None = as long as it takes); no vramd: nothing
    is reserved and the training goes on."""

    def __init__(self, client=None, wait_timeout=None, logger=None):
        self.client = client
        self.wait_timeout = wait_timeout
        self.logger = logger or log
        self.job = None  # the vram.Job reserved here
        self.env_job = None  # vram.job() inside `vram run`

    def reserve(self, mem_bytes=None, name=None, batch_size=None, estimate=None,
                min_batch_size=None):
        """Reserves mem_bytes at batch_size, or with estimate= (and
        min_batch_size) the table Client.submit(estimate=) builds, so vramd
        may grant a smaller batch: the returned Job's granted_batch_size is
        the micro-batch to train with (batch_size stays the effective
        batch, through accumulation). None when nothing was reserved."""
        env = _job_from_env(client=self.client)
        if env.managed:
            self.env_job = env.start()
            self.logger.info("vram: running as vramd job %s (reserved by vram run)", env.id)
            return None
        client = self.client or Client()
        try:
            client.health()
        except Error as e:
            self.logger.info("vram: no reservation (%s)", e)
            return None
        self.client = client
        self.job = client.submit(mem_bytes=None if mem_bytes is None else int(mem_bytes),
                                 name=name, pid=os.getpid(), batch_size=batch_size,
                                 estimate=estimate, min_batch_size=min_batch_size)
        if self.job.state == "queued":
            self.logger.warning("vram: job %d queued at position %d for %d bytes; waiting",
                                self.job.id, self.job.queue_position, self.job.mem_bytes)
            self.job = client.wait(self.job.id, timeout=self.wait_timeout)
        if self.job.state != "running":
            raise OutOfMemoryError("vram: vramd job %d is %s, not running: %s" % (
                self.job.id, self.job.state, self.job.error or "no reason given"))
        self.logger.info("vram: reserved %d bytes on device(s) %s as vramd job %d",
                         self.job.reserved_bytes, self.job.devices, self.job.id)
        return self.job

    @property
    def granted_batch_size(self):
        """The batch vramd granted: the reserved job's, or inside `vram run`
        what it set in VRAM_BATCH_SIZE; None when nothing was granted."""
        if self.job is not None:
            return self.job.granted_batch_size or None
        return self.env_job.batch_size if self.env_job is not None else None

    def release(self, peak, failed=None):
        """Reports the peak and ends the reservation (done, or failed with
        the error); problems are logged, the training's result stands."""
        if self.env_job is not None:
            self.env_job.record_peak(peak)
            self.env_job.stop()
            self.env_job = None
        if self.job is None:
            return
        try:
            self.client.report_peak(self.job.id, peak)
            self.job = self.client.finish(self.job.id, exit_status=1 if failed else 0,
                                          error=failed)
        except Error as e:
            self.logger.warning("vram: cannot end vramd job %d: %s", self.job.id, e)

    def figures(self):
        if self.job is not None:
            return {"vram/job": self.job.id, "vram/reserved_bytes": self.job.reserved_bytes}
        return {}


class Session:
    """What a trainer's callback keeps for one run: the MicroBatchGuard,
    the analysis (profile, prediction, estimate), the Reservation, and the
    figures logged from them. memory_bytes: what the run may use, model
    included (int or "2GiB"; default: the free memory of the vram device the
    model is on)."""

    def __init__(self, zero_grad, memory_bytes=None, client=None, wait_timeout=None,
                 max_splits=3, logger=None):
        self.memory_bytes = api.parse_size(memory_bytes) if memory_bytes else None
        self.max_splits = max_splits
        self.logger = logger or log
        self.guard = MicroBatchGuard(zero_grad, max_splits=max_splits, logger=self.logger)
        self.reservation = Reservation(client=client, wait_timeout=wait_timeout,
                                       logger=self.logger)
        self.profile = self.predicted_batch = self.estimated_bytes = None
        self.device = None

    def start(self, model, profile, batch_size, device, reserve=True, name=None, split=True):
        """Logs the memory analysis of `profile` at batch_size (INFO), keeps
        the prediction and the estimate, and reserves the estimate with its
        batch table down to batch_size / 2**max_splits (the smallest
        micro-batch the guard would run): when vramd grants a smaller
        batch, every batch runs in micro-batches of at most the granted
        size from the start, with accumulation, and the DataLoader's batch,
        the effective batch and the step count stay as they are.
        split=False (the guard does not run the steps): the estimate at
        batch_size alone, no smaller grant."""
        dev = self.device = torch.device(device)
        self.profile = profile
        index = (dev.index or 0) if dev.type == "cuda" else 0
        target = {"gpu_memory_gb": self.memory_bytes / (1 << 30)} if self.memory_bytes else {
            "device": index}
        out = io.StringIO()
        print_memory_analysis(model, batch_size, profile=profile, file=out,
                              optimizer=profile.optimizer, **target)
        for line in out.getvalue().rstrip().splitlines():
            self.logger.info("vram: %s", line)
        self.predicted_batch = predict(profile, self.memory_bytes, index, host=dev.type == "cpu")
        self.estimated_bytes = estimate_bytes(profile, batch_size, dev)
        self.logger.info("vram: batch %d, estimated %d bytes; the largest batch predicted to "
                         "fit is %d", batch_size, self.estimated_bytes, self.predicted_batch)
        if not reserve:
            return
        settings = dict(estimate_settings(profile, dev), batch_size=batch_size)
        low = max(1, -(-batch_size // (1 << self.max_splits))) if split else batch_size
        self.reservation.reserve(name=name, estimate=settings, min_batch_size=low)
        granted = self.reservation.granted_batch_size
        if not granted or granted >= batch_size:
            return
        if split:
            self.guard.limit_micro_batch(granted)
            self.logger.warning("vram: vramd granted batch %d of %d: each batch runs as "
                                "micro-batches of at most %d with accumulation", granted,
                                batch_size, granted)
        else:
            self.logger.warning("vram: vramd granted batch %d but the trainer runs %d: use a "
                                "batch of %d (VRAM_BATCH_SIZE) or let vram split the steps",
                                granted, batch_size, granted)

    def figures(self):
        """The vram/* figures for the trainer's log."""
        out = {"vram/peak_bytes": peak_bytes(self.device)}
        if self.estimated_bytes:
            out["vram/estimated_bytes"] = self.estimated_bytes
            out["vram/predicted_batch"] = self.predicted_batch
        out.update(self.guard.figures())
        out.update(self.reservation.figures())
        return out

    def finish(self):
        self.reservation.release(peak_bytes(self.device))
