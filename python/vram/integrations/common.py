"""What the trainer integrations share (one copy for Hugging Face, Lightning
and Accelerate): the out-of-memory guard that retries a batch as smaller
micro-batches with gradient accumulation, the prediction of the largest
batch, the reservation with vramd and the figures logged to the trainers.

The decisions stay in libvram: how many micro-batches after each
out-of-memory error is vram.tune.OOMChain (src/tune/oomchain.c), the batch
prediction is vram.plan, the search is vram.torch.find_batch_size."""
import gc
import io
import logging
import os
import resource

import torch

from .. import api, tune
from ..client import Client
from ..errors import Error, OutOfMemoryError
from ..job import job as _job_from_env
from ..torch.oom import is_oom
from ..torch.report import print_memory_analysis
from ..torch.runtime import _length, _slice

log = logging.getLogger("vram")

ORDER = ("free-cache", "micro-batch")  # the chain's strategies a trainer's step can use


def _empty_cuda_cache():
    torch.cuda.empty_cache()
    return 1  # unknown, but something may have been freed


class MicroBatchGuard:
    """Runs each batch's forward and backward in micro-batches, as many as
    libvram's OOM chain says: 1 until an out-of-memory error, then twice as
    many each time (up to 2**max_splits), kept for the following batches
    of the same size. Nothing is lost or counted twice:

    - a failed attempt leaves partial gradients, so zero_grad() is called
      and every batch of the current accumulation cycle (since the last
      optimizer step, end_cycle()) is run again in the new split before the
      failed batch is; the optimizer sees the same gradient as without the
      error;
    - step_piece(piece, share) does one micro-batch's forward and backward
      and returns its (detached) loss; share = len(piece) / len(batch), by
      which a mean loss must be weighted (a loss already divided by the
      batch's item count needs no weight).

    The trainer keeps the batches of a cycle anyway; the guard holds
    references to them until end_cycle(), no copies."""

    def __init__(self, zero_grad, max_splits=3, min_micro_batch=1, logger=None):
        self.zero_grad = zero_grad
        self.chain = tune.OOMChain(ORDER, _empty_cuda_cache if torch.cuda.is_available() else None,
                                   None, None, max_splits, min_micro_batch)
        self.logger = logger or log
        self.micro_batch_size = None  # None until the first batch
        self.parts = 1
        self.errors = []  # the first line of each out-of-memory error, in order
        self._cycle = []

    def run(self, batch, step_piece):
        n = _length(batch)
        self.parts = self.chain.begin_step(n)
        replay = False
        while True:
            size = -(-n // self.parts)
            try:
                if replay:
                    for old in self._cycle:
                        self._pieces(old, size, step_piece)
                total = self._pieces(batch, size, step_piece)
                failed = None
            except Exception as e:  # noqa: BLE001 (only OOMs are handled; the rest re-raised)
                if not is_oom(e):
                    raise
                failed = str(e).splitlines()[0][:200]
                del e
            if failed is None:
                break
            # outside the except block: the failed frames and their tensors are gone
            self.errors.append(failed)
            self.zero_grad()
            gc.collect()
            action = self.chain.on_oom()  # raises vram.OutOfMemoryError when exhausted
            self.logger.warning("vram: out of memory (%s): %s%s", failed, action["message"],
                                " (%d earlier batches of this accumulation cycle run again)" %
                                len(self._cycle) if self._cycle else "")
            self.parts = action["micro_batches"]
            replay = True
        self.chain.end_step()
        self.micro_batch_size = size
        self._cycle.append(batch)
        return total

    @staticmethod
    def _pieces(batch, size, step_piece):
        n = _length(batch)
        total = 0.0
        for start in range(0, n, size):
            piece = _slice(batch, start, min(start + size, n)) if size < n else batch
            total = total + step_piece(piece, (min(start + size, n) - start) / n)
        return total

    def end_cycle(self):
        """The optimizer stepped: the gradients of the kept batches are used."""
        self._cycle = []

    @property
    def ooms(self):
        return self.chain.stats()["ooms"]

    def figures(self):
        """vram/* figures for a trainer's log."""
        out = {"vram/ooms": self.ooms, "vram/micro_batches": self.parts}
        if self.micro_batch_size is not None:
            out["vram/micro_batch_size"] = self.micro_batch_size
        return out


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


def estimate_bytes(profile, batch_size, device=None):
    """The estimate's total bytes for training `profile` at batch_size; on
    a CPU device without the CUDA context and workspaces."""
    cpu = device is None or torch.device(device).type == "cpu"
    return api.estimate(profile=profile, batch_size=int(batch_size),
                        optimizer=profile.optimizer or None,
                        overhead_bytes=0 if cpu else None).total


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

    def reserve(self, mem_bytes, name=None, batch_size=None):
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
        self.job = client.submit(mem_bytes=int(mem_bytes), name=name, pid=os.getpid(),
                                 batch_size=batch_size)
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
        self.logger = logger or log
        self.guard = MicroBatchGuard(zero_grad, max_splits=max_splits, logger=self.logger)
        self.reservation = Reservation(client=client, wait_timeout=wait_timeout,
                                       logger=self.logger)
        self.profile = self.predicted_batch = self.estimated_bytes = None
        self.device = None

    def start(self, model, profile, batch_size, device, reserve=True, name=None):
        """Logs the memory analysis of `profile` at batch_size (INFO), keeps
        the prediction and the estimate, and reserves the estimate."""
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
        if reserve:
            self.reservation.reserve(self.estimated_bytes, name=name, batch_size=batch_size)

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
