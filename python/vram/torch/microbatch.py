"""The one micro-batch loop: a batch's forward and backward run in as many
micro-batches as libvram's OOM chain (vram.tune.OOMChain) says, retried
after each out-of-memory error. oom_guard (runtime.py) and the trainer
integrations (vram.integrations) are built on it."""
import gc
import logging

import torch

from .. import tune
from .oom import is_oom

log = logging.getLogger("vram")

# the default chain's strategies: what any training step can use
ORDER = ("free-cache", "micro-batch")


def _empty_cuda_cache():
    torch.cuda.empty_cache()
    return 1  # unknown, but something may have been freed


def _length(x):
    if torch.is_tensor(x):
        return x.shape[0]
    if isinstance(x, (list, tuple)) and x and (torch.is_tensor(x[0]) or
                                               isinstance(x[0], (list, tuple, dict))):
        return _length(x[0])
    if isinstance(x, dict):
        return _length(next(iter(x.values())))
    return len(x)


def _slice(x, a, b):
    if torch.is_tensor(x):
        return x[a:b]
    if isinstance(x, dict):
        return {k: _slice(v, a, b) for k, v in x.items()}
    if isinstance(x, tuple) and x and (torch.is_tensor(x[0]) or isinstance(x[0], (list, dict))):
        return tuple(_slice(v, a, b) for v in x)
    return x[a:b]


def _split(batch, parts):
    """Splits tensors (dim 0), lists and tuples of them into `parts` pieces."""
    n = _length(batch)
    size = -(-n // parts)
    return [_slice(batch, s, min(s + size, n)) for s in range(0, n, size)]


class MicroBatchGuard:
    """Runs each batch's forward and backward in micro-batches, as many as
    `chain` (a vram.tune.OOMChain) says: 1 until an out-of-memory error,
    then what the chain's next strategy gives (free the cache and retry;
    twice as many micro-batches; offload; checkpoint), kept for the
    following batches of the same size. The default chain (a trainer's
    step: nothing of vram's to offload or checkpoint) frees the CUDA cache,
    then splits into 2, 4, ... up to 2**max_splits micro-batches of at
    least min_micro_batch samples. Nothing is lost or
    counted twice:

    - a failed attempt leaves partial gradients, so zero_grad() is called
      and every batch of the current accumulation cycle (since the last
      optimizer step, end_cycle()) is run again in the new split before the
      failed batch is; the optimizer sees the same gradient as without the
      error;
    - step_piece(piece, share) does one micro-batch's forward and backward
      and returns its (detached) loss; share = len(piece) / len(batch), by
      which a mean loss must be weighted (a loss already divided by the
      batch's item count needs no weight).

    When the chain is exhausted, run() raises its vram.OutOfMemoryError.
    The trainer keeps the batches of a cycle anyway; the guard holds
    references to them until end_cycle(), no copies."""

    def __init__(self, zero_grad, max_splits=3, min_micro_batch=1, logger=None, chain=None):
        self.zero_grad = zero_grad
        self.chain = chain or tune.OOMChain(
            ORDER, _empty_cuda_cache if torch.cuda.is_available() else None, None, None,
            max_splits, min_micro_batch)
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

    def limit_micro_batch(self, max_samples):
        """Runs every following batch in micro-batches of at most
        max_samples, from its first attempt: the batch vramd granted when it
        reserved memory for fewer samples than the batch (the chain still
        halves them after an out-of-memory error). None removes the limit."""
        self.chain.limit_micro_batch(max_samples)

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
