"""AdaptiveTraining: the adaptive runtime as one loop (docs/runtime.md,
section 5). One owner of the batch size, libvram's BatchSizeOptimizer:

- the batch iterator hands out the sample indices and keeps every sample
  trained exactly once, but takes no memory readings of its own (its marks
  are off): its batch is always the optimizer's;
- each micro-batch that ran at the optimizer's setting is one reading for
  the optimizer (update), which decides grow / shrink / stay;
- an out-of-memory error goes to the optimizer first (on_oom: a smaller
  setting and its OOM cooldown); the samples of the failed optimizer step
  come back first, all of them, with the gradients so far discarded; only
  at the optimizer's minima does the OOM chain take over (offload of
  activations, then the checkpoint and a clear error);
- the swap cache (swap_budget=) is `swap`; at the optimizer's minima the
  chain's offload step moves its tensors to host memory first.
"""
import contextlib
import logging
from dataclasses import dataclass

import torch

from .. import tune
from ..errors import StateError
from .oom import is_oom
from .runtime import ActivationOffload, SwapCache, check_batch_statistics, memory_usage

log = logging.getLogger("vram.runtime")


@dataclass
class StepResult:
    """One optimizer step of AdaptiveTraining."""
    step: int  # optimizer steps so far, this one included
    loss: float  # the step's loss (micro-batch losses weighted by their share)
    samples: int  # samples in the step (the effective batch; fewer at the end)
    micro_batches: int
    batch: int  # the optimizer's batch (micro-batch) setting after the step
    lq: int  # and its lq setting (0 when not used)


class AdaptiveTraining:
    """Trains `model` with `optimizer` on `dataset` (indexable with len())
    under the batch size libvram's optimizer chooses from memory readings.

        train = vram.torch.AdaptiveTraining(model, opt, dataset, "train.yaml",
                                            loss_fn=loss, collate_fn=collate,
                                            effective_batch=64)
        for step in train:          # one optimizer step each; one pass
            print(step.loss, step.batch)

    or `with AdaptiveTraining(...) as train: train.run()`.

    config: as vram.tune.BatchSizeOptimizer (a YAML path, a dict of its
    keys, None). batch_size / lq: the first setting (default: the config's
    minimum batch, its maximum lq). loss_fn(model, batch) returns the mean
    loss of a batch, where batch = collate_fn(samples) (or
    collate_fn(samples, lq) when the config has lq sizes; default: the list
    of samples). effective_batch: samples per optimizer step, made of
    micro-batches of the optimizer's size with gradient accumulation (each
    micro-batch's loss weighted by its share of effective_batch, the last,
    partial step's too), so the training does not change with memory;
    None: every batch is its own step. usage_fn(): the
    reading after each micro-batch, a used fraction at the step's peak
    (default: memory_usage(device, cap) — on CUDA the peak PyTorch reserved
    over the device's memory, elsewhere vram's view of the device or this
    process). batch_norm: what to do when `model` has batch-statistics
    layers and micro-batches would split a step ("refuse", "freeze",
    "micro-batch"; runtime.check_batch_statistics). checkpoint(),
    offload, free_cache, pool: the OOM chain's hooks (oom_guard). The
    object's `batch_optimizer`, `iterator`, `chain` and `swap` are the
    pieces; stats() sums them up."""

    def __init__(self, model, optimizer, dataset, config=None, *, loss_fn, collate_fn=None,
                 batch_size=None, lq=None, effective_batch=None, usage_fn=None, device=0,
                 cap=None, batch_norm="refuse", checkpoint=None, offload="activations",
                 free_cache=None, pool=None, swap_budget=None, swap_host_budget=0,
                 policy="model"):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError("vram.AdaptiveTraining: the dataset must be indexable with len() "
                            "(a map-style dataset)")
        self.model, self.optimizer, self.dataset = model, optimizer, dataset
        self.loss_fn, self.collate_fn = loss_fn, collate_fn
        probe = tune.BatchSizeOptimizer(config, batch=1, lq=0, policy=policy)
        cfg = probe.config
        probe.close()
        self.uses_lq = cfg["max_lq"] > 0
        batch = int(batch_size) if batch_size is not None else cfg["min_batch"]
        lq = int(lq) if lq is not None else (cfg["max_lq"] if self.uses_lq else 0)
        self.batch_optimizer = tune.BatchSizeOptimizer(config, batch=batch, lq=lq, policy=policy)
        self.max_batch = cfg["max_batch"]
        if effective_batch is not None and int(effective_batch) < 1:
            raise ValueError("vram.AdaptiveTraining: effective_batch must be >= 1, not %r" %
                             (effective_batch,))
        self.effective_batch = int(effective_batch) if effective_batch else None
        self.batch_norm = batch_norm
        splits = self.effective_batch is not None and self.effective_batch > cfg["min_batch"]
        # without accumulation a batch is never split: BatchNorm sees whole batches
        self.batch_norm_layers = check_batch_statistics(
            model, batch_norm if splits else "micro-batch", "AdaptiveTraining(effective_batch=)")
        if usage_fn is None:
            usage_fn = self._default_usage(device, cap)
        self.usage_fn = usage_fn
        if free_cache is None:
            def free_cache():
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                if pool is not None:
                    pool.trim()
                return 1
        self.free_cache = free_cache
        self.swap = SwapCache(swap_budget, swap_host_budget) if swap_budget is not None else None
        self.activations = ActivationOffload() if offload == "activations" else None
        self._offload = self.activations if self.activations else offload
        self.chain = tune.OOMChain(("offload", "checkpoint"), None,
                                   self._offload_step if (self._offload or self.swap) else None,
                                   checkpoint, max_splits=0)
        # the pool is trimmed by free_cache; it is not attached to the chain,
        # whose offload would then run inside the failing allocation, before
        # the optimizer had its say
        self.iterator, self._closed_stats = None, None
        self.steps = self.ooms = self.micro_batches = 0
        self.readings = []  # (step, batch, lq, usage) of each reading given to the optimizer

    def _offload_step(self, request):
        """The chain's offload: the swap cache's tensors leave the device
        first (spill), then the activations (or the offload hook given)."""
        if self.swap is not None and self.swap.stats()["gpu_bytes"]:
            freed = self.swap.spill()
            log.warning("out of memory: the swap cache moved %d bytes to host memory", freed)
            return max(1, freed)
        return self._offload(request) if self._offload else 0

    @staticmethod
    def _default_usage(device, cap):
        if torch.cuda.is_available():
            index = device if isinstance(device, int) else torch.device(device).index or 0
            total = torch.cuda.get_device_properties(index).total_memory

            def cuda_peak():
                used = torch.cuda.max_memory_reserved(index)
                torch.cuda.reset_peak_memory_stats(index)
                free, dev_total = torch.cuda.mem_get_info(index)
                # this process's peak plus what the others hold now
                others = max(0, dev_total - free - torch.cuda.memory_reserved(index))
                return (used + others) / total
            return cuda_peak
        return lambda: memory_usage(device if isinstance(device, int) else 0, cap)

    @property
    def batch(self):
        return self.batch_optimizer.batch

    @property
    def lq(self):
        return self.batch_optimizer.lq

    def _collate(self, samples):
        if self.collate_fn is None:
            return samples
        return self.collate_fn(samples, self.lq) if self.uses_lq else self.collate_fn(samples)

    def _new_iterator(self):
        if self.iterator is not None:
            self.iterator.close()
        # its marks are off (no readings are given to it): the optimizer owns the batch
        self.iterator = tune.BatchIteratorPolicy(self.max_batch, len(self.dataset),
                                                 check_every=1 << 30, high_mark=1.0,
                                                 low_mark=0.0)

    def __iter__(self):
        """One pass over the dataset, one StepResult per optimizer step."""
        self._new_iterator()
        it = self.iterator
        pending, done_samples, total = [], 0, 0.0  # batch ids of this optimizer step
        chain_open = False
        self.optimizer.zero_grad(set_to_none=True)
        while True:
            if self.batch_norm == "freeze":
                check_batch_statistics(self.model, "freeze", "AdaptiveTraining")
            setting = self.batch
            want = setting if self.effective_batch is None else min(
                setting, self.effective_batch - done_samples)
            it.set_batch(want)
            bid, idx = it.next()
            if not idx:
                break
            samples = [self.dataset[i] for i in idx]
            try:
                if not chain_open:  # a retry after an OOM is the same step for the chain
                    self.chain.begin_step(len(idx))
                    chain_open = True
                with self.activations.context() if self.activations else \
                        contextlib.nullcontext():
                    loss = self.loss_fn(self.model, self._collate(samples))
                share = len(idx) / (self.effective_batch or len(idx))
                (loss * share).backward()
                total += float(loss.detach()) * share
                del loss
                self.chain.end_step()
                chain_open = False
            except Exception as e:  # noqa: BLE001 (only OOMs are handled; the rest re-raised)
                if not is_oom(e):
                    raise
                del e
                self._recover(it, pending + [bid])
                pending, done_samples, total = [], 0, 0.0
                continue
            self.micro_batches += 1
            pending.append(bid)
            done_samples += len(idx)
            if len(idx) == setting:  # a reading of the setting itself
                usage = float(self.usage_fn())
                self.readings.append((self.steps + 1, setting, self.lq, usage))
                self.batch_optimizer.update(usage)
            step_full = self.effective_batch is None or done_samples >= self.effective_batch
            if step_full or self._all_handed_out(it):
                # an OOM inside optimizer.step is not retried: it may have
                # updated some parameters already, and a second step would
                # apply their update twice
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                for b in pending:
                    it.done(b)
                self.steps += 1
                yield StepResult(self.steps, total, done_samples, len(pending), self.batch,
                                 self.lq)
                pending, done_samples, total = [], 0, 0.0

    def _all_handed_out(self, it):
        """Every sample is trained or in this step: the step is the last."""
        st = it.stats()
        return st["committed"] + st["pending"] >= len(self.dataset)

    def _recover(self, it, batch_ids):
        """An out-of-memory error in the step: its samples come back (all of
        the step: the gradients so far are dropped with it), the cache is
        freed, and the optimizer lowers its setting; at its minima the OOM
        chain goes on (offload, checkpoint, error)."""
        self.ooms += 1
        self.optimizer.zero_grad(set_to_none=True)
        for b in batch_ids:
            it.failed(b)
        self.free_cache()
        try:
            batch, lq = self.batch_optimizer.on_oom()
            log.warning("out of memory: batch %d lq %d from now on", batch, lq)
        except StateError:
            action = self.chain.on_oom()  # raises vram.OutOfMemoryError when exhausted
            log.warning("out of memory at the smallest setting: %s", action["message"])

    def run(self, max_steps=None):
        """Runs the pass (at most max_steps optimizer steps); returns the
        last StepResult (None when nothing ran)."""
        last = None
        for last in self:
            if max_steps is not None and last.step >= max_steps:
                break
        return last

    def stats(self):
        """The pieces' statistics in one dict (kept as they were at close())."""
        if self._closed_stats is not None:
            return self._closed_stats
        return {"steps": self.steps, "micro_batches": self.micro_batches, "ooms": self.ooms,
                "batch": self.batch, "lq": self.lq,
                "optimizer": self.batch_optimizer.stats(),
                "iterator": self.iterator.stats() if self.iterator else None,
                "chain": self.chain.stats(),
                "swap": self.swap.stats() if self.swap else None,
                "batch_norm_layers": list(self.batch_norm_layers)}

    def close(self):
        if self._closed_stats is None:
            self._closed_stats = self.stats()
        for part in (self.iterator, self.batch_optimizer):
            if part is not None:
                part.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
