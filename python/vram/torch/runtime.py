"""The adaptive training runtime wired to PyTorch (docs/runtime.md): the
decisions come from libvram's controllers (vram.tune), the tensor work is
here.

The one loop that wires them together is vram.torch.AdaptiveTraining
(training.py); these are the pieces:

- AdaptiveBatchIterator: batches from any dataset whose size follows device
  memory; no sample is lost or repeated, also across out-of-memory errors.
- oom_guard: a training step that survives out-of-memory errors by the chain
  free cache -> micro-batches with gradient accumulation -> offload ->
  checkpoint and a clear error.
- SwapCache: named tensors under a GPU byte budget, the rest in host memory.
- memory_usage: the reading the controllers take.
"""
import contextlib
import functools
import logging

import torch

from .. import tune
from ..errors import OutOfMemoryError
from .microbatch import MicroBatchGuard

log = logging.getLogger("vram.runtime")


def process_cap():
    """The memory this process may use: its RLIMIT_AS or RLIMIT_DATA soft
    limit when one is set (the smaller), else None."""
    import resource
    caps = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, resource.RLIMIT_DATA)]
    caps = [c for c in caps if c != resource.RLIM_INFINITY and c > 0]
    return min(caps) if caps else None


def memory_usage(device=0, cap=None):
    """The reading the controllers take: a used fraction.

    On a GPU of libvram's backend (NVML, CUDA, VRAM_SIM) it is the device's
    used fraction, all processes (a neighbour's memory is what the run must
    fit beside). On the CPU backend it is this process's resident memory
    (/proc/self/statm) over `cap` (bytes or text such as "8GiB"; default:
    the process's RLIMIT_AS / RLIMIT_DATA, else the machine's RAM): other
    programs on the machine are not this run's memory."""
    from .. import api
    from ..profiling import rss_bytes
    dev = api.devices()[device]
    if dev.is_gpu:
        return dev.used_bytes / dev.total_bytes if dev.total_bytes else 0.0
    limit = api.parse_size(cap, "cap") if cap is not None else (process_cap() or
                                                                 dev.total_bytes)
    return rss_bytes() / limit if limit else 0.0


# Layers whose output for a sample depends on the other samples of the
# batch (batch statistics in train mode): splitting a batch into
# micro-batches changes what they compute, so the gradient of the split
# batch is not the whole batch's (ResNet-18 in train mode: relative
# difference 1.83 in the measurement).
BATCH_STATISTICS_LAYERS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d,
                           torch.nn.SyncBatchNorm, torch.nn.LazyBatchNorm1d,
                           torch.nn.LazyBatchNorm2d, torch.nn.LazyBatchNorm3d)
BATCH_NORM_MODES = ("refuse", "micro-batch", "freeze")


def batch_statistics_layers(model):
    """Names of the submodules of `model` that use batch statistics now:
    BatchNorm layers (any dimension, lazy or synchronized) in train mode."""
    return [name or type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, BATCH_STATISTICS_LAYERS) and m.training]


def check_batch_statistics(model, mode, what):
    """Applies the batch_norm mode before batches are split: "refuse"
    raises ValueError naming the layers, "freeze" puts them in eval mode
    (running statistics: the split gradient equals the whole batch's),
    "micro-batch" accepts statistics per micro-batch. Returns the layers
    found."""
    if mode not in BATCH_NORM_MODES:
        raise ValueError("vram: batch_norm must be one of %s, not %r" % (BATCH_NORM_MODES, mode))
    layers = batch_statistics_layers(model) if model is not None else []
    if layers and mode == "refuse":
        raise ValueError(
            "vram: %s splits batches into micro-batches, which changes what the batch-statistics "
            "layers %s compute (the gradient is no longer the whole batch's); pass "
            "batch_norm=\"freeze\" (running statistics, eval mode) or batch_norm=\"micro-batch\" "
            "(statistics per micro-batch, like any gradient accumulation)" % (
                what, ", ".join(layers[:5]) + (" ..." if len(layers) > 5 else "")))
    if layers and mode == "freeze":
        for m in model.modules():
            if isinstance(m, BATCH_STATISTICS_LAYERS):
                m.eval()
    return layers


class AdaptiveBatchIterator:
    """Yields lists of samples from `dataset` (indexable with len(), or any
    iterable). Every `check_every` samples it reads `usage_fn()` (default:
    memory_usage(0)); above high_mark the batch halves, below low_mark it
    doubles up to batch_size. When a step fails, call failed() (or let
    oom_guard do it): the batch's samples come again, first, in smaller
    batches. Every sample is yielded until it is trained on once.

        it = AdaptiveBatchIterator(dataset, 64)
        for samples in it:
            try:
                step(collate(samples))
            except RuntimeError as e:
                if not vram.torch.is_oom(e): raise
                it.failed()
    """

    def __init__(self, dataset, batch_size, check_every=10, high_mark=0.85, low_mark=0.50,
                 min_batch=1, usage_fn=None, collate_fn=None):
        self.dataset = dataset
        self.usage_fn = usage_fn or memory_usage
        self.collate_fn = collate_fn
        sized = hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")
        self._source = None if sized else iter(dataset)
        self._fetched = {}  # index -> sample, for iterables (until committed)
        self._next_fetch = 0
        self.policy = tune.BatchIteratorPolicy(batch_size, len(dataset) if sized else None,
                                               check_every, high_mark, low_mark, min_batch)
        self._pending = None
        self._changes_seen = 0

    def _sample(self, i):
        if self._source is None:
            return self.dataset[i]
        while i >= self._next_fetch:
            try:
                self._fetched[self._next_fetch] = next(self._source)
            except StopIteration:
                return None
            self._next_fetch += 1
        return self._fetched[i]

    def __iter__(self):
        return self

    def __next__(self):
        if self._pending is not None:
            self.policy.done(self._pending[0])
            self._forget(self._pending[1])
            self._pending = None
        usage = self.usage_fn() if self.policy.check_due() else None
        bid, idx = self.policy.next(usage)
        self._log_changes()
        samples = []
        for k, i in enumerate(idx):
            s = self._sample(i)
            if s is None:  # the iterable ended inside this batch
                self.policy.set_length(i)
                idx = idx[:k]
                break
            samples.append(s)
        if not idx:
            raise StopIteration
        self._pending = (bid, idx)
        return self.collate_fn(samples) if self.collate_fn else samples

    def _forget(self, idx):
        if self._source is not None:
            for i in idx:
                self._fetched.pop(i, None)

    def failed(self):
        """The batch just yielded ran out of memory: it will come again."""
        if self._pending is None:
            raise RuntimeError("vram: failed() without a batch in flight")
        self.policy.failed(self._pending[0])
        self._pending = None
        self._log_changes()

    def _log_changes(self):
        st = self.policy.stats()
        new = st["nchanges"] - self._changes_seen
        for c in st["changes"][-new:] if new > 0 else []:
            log.info("batch %d -> %d (%s, usage %.2f) after %d samples", c["old_batch"],
                     c["new_batch"], c["reason"], c["usage"], c["sample"])
        self._changes_seen = st["nchanges"]

    @property
    def batch_size(self):
        return self.policy.stats()["batch"]

    @batch_size.setter
    def batch_size(self, batch):
        """The next batches' size, clamped to min_batch..the initial batch
        size; this iterator's own memory checks go on from it. To let a
        BatchSizeOptimizer own the size, use AdaptiveTraining (or turn the
        marks off: high_mark=1.0, low_mark=0.0); with both deciding, the
        batch alternates."""
        self.policy.set_batch(batch)
        self._log_changes()

    def stats(self):
        return self.policy.stats()


class ActivationOffload:
    """The chain's default offload step: once called, the guarded step's
    forward passes run under torch.autograd.graph.save_on_cpu, so the tensors
    autograd keeps for the backward pass (the activations) wait in host
    memory (pinned when CUDA is there) and come back for the backward. It
    stays on for later steps (the same batch would run out again); set `on`
    to False to stop. Nothing is faked: where save_on_cpu is missing (PyTorch
    before 1.10) the strategy frees nothing and the chain moves on."""

    def __init__(self):
        self.on = False
        self.available = hasattr(torch.autograd.graph, "save_on_cpu")

    def __call__(self, request):
        if self.on or not self.available:
            return 0  # nothing more to free this way
        self.on = True
        log.warning("out of memory: activations go to host memory from now on (save_on_cpu)")
        return max(1, int(request))  # the retry will tell; nonzero asks for one

    def context(self):
        if not self.on:
            return contextlib.nullcontext()
        return torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())


def oom_guard(loss_fn=None, *, optimizer, free_cache=None, offload="activations", checkpoint=None,
              order=tune.STRATEGIES, max_splits=3, min_micro_batch=1, pool=None,
              iterator=None, model=None, batch_norm="refuse"):
    """Decorator for a function computing the loss of a batch: the guarded
    call does the whole training step (zero_grad, backward, optimizer.step)
    and survives out-of-memory errors by the chain in `order`. Micro-batches
    see the same samples and accumulate each part's loss weighted by its share
    of the batch, so the gradient equals the whole batch's (mean losses).

        @vram.torch.runtime.oom_guard(optimizer=opt, checkpoint=save)
        def step(batch):
            x, y = batch
            return F.cross_entropy(model(x), y)
        loss = step((x, y))

    free_cache defaults to torch.cuda.empty_cache when CUDA is available;
    offload: "activations" (default) is ActivationOffload, available as
    `guarded.activation_offload`; a callable offload(request) frees memory
    its own way (e.g. moves optimizer states to the host) and returns the
    bytes freed; None skips the step. checkpoint() saves and returns where. When
    the chain is exhausted the call raises vram.OutOfMemoryError saying how to
    resume (after the checkpoint). `iterator`: an AdaptiveBatchIterator that
    is told when a batch is given up. The chain is `guarded.chain`; the
    micro-batch loop is vram.torch.microbatch.MicroBatchGuard (the one the
    trainer integrations use), `guarded.guard`. An out-of-memory error in
    optimizer.step() is not retried (some parameters may have been updated
    already): it propagates.

    model= lets the guard check for batch-statistics layers (BatchNorm in
    train mode), for which micro-batches do not give the whole batch's
    gradient: batch_norm="refuse" (default) drops the micro-batch strategy
    from the chain (logged), "freeze" puts those layers in eval mode,
    "micro-batch" splits anyway (statistics per micro-batch). Without
    model= nothing is checked."""
    if free_cache is None and torch.cuda.is_available():
        def free_cache():
            torch.cuda.empty_cache()
            return 1  # unknown, but something may have been freed
    if batch_norm not in BATCH_NORM_MODES:
        raise ValueError("vram: batch_norm must be one of %s, not %r" % (BATCH_NORM_MODES,
                                                                        batch_norm))
    layers = batch_statistics_layers(model) if model is not None else []
    if layers and batch_norm == "refuse" and "micro-batch" in order:
        order = tuple(s for s in order if s != "micro-batch")
        log.warning("oom_guard: no micro-batches: batch-statistics layers (%s) would compute "
                    "other statistics on them (batch_norm=\"freeze\" or \"micro-batch\" to "
                    "split)", ", ".join(layers[:5]))
    elif layers:
        check_batch_statistics(model, batch_norm, "oom_guard")
    activations = ActivationOffload() if offload == "activations" else None
    if activations is not None:
        offload = activations
    chain = tune.OOMChain(order, free_cache, offload, checkpoint, max_splits, min_micro_batch)
    if pool is not None:
        chain.attach_pool(pool)

    def wrap(fn):
        guard = MicroBatchGuard(lambda: optimizer.zero_grad(set_to_none=True), chain=chain,
                                logger=log)

        def piece(part, share):
            with activations.context() if activations else contextlib.nullcontext():
                loss = fn(part) * share
            loss.backward()
            return float(loss.detach())

        @functools.wraps(fn)
        def guarded(batch):
            optimizer.zero_grad(set_to_none=True)
            guard.end_cycle()  # one batch a step: nothing earlier to run again
            try:
                total = guard.run(batch, piece)
            except OutOfMemoryError:
                if iterator is not None:
                    iterator.failed()
                raise
            # an OOM inside optimizer.step is not retried: it may have
            # updated some parameters already, and a second step would
            # apply their update twice
            optimizer.step()
            return total
        guarded.chain = chain
        guarded.guard = guard
        guarded.activation_offload = activations
        return guarded

    return wrap(loss_fn) if loss_fn is not None else wrap


class SwapCache:
    """Named tensors under a GPU byte budget: get(name, loader) returns the
    tensor on `device` when it fits, moving the least recently used ones to
    host memory (pinned when the device is CUDA) and dropping the least
    recently used host ones beyond host_budget (0 = unlimited); an item larger
    than the GPU budget is served from the host. loader() makes the tensor
    on a miss. Budgets are enforced by the tensors' bytes; set_gpu_budget()
    and spill() hand device memory back (AdaptiveTraining's offload step).

    With device="cpu" both tiers are host memory (for tests and CPU runs)."""

    def __init__(self, gpu_budget, host_budget=0, device=None):
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.lru = tune.SwapLRU(gpu_budget, host_budget)
        self._ids, self._names, self._tensors = {}, {}, {}

    def _id(self, name):
        if name not in self._ids:
            self._ids[name] = len(self._ids) + 1
            self._names[self._ids[name]] = name
        return self._ids[name]

    def _to_host(self, t):
        t = t.to("cpu")
        return t.pin_memory() if self.device.type == "cuda" else t

    def get(self, name, loader):
        key = self._id(name)
        t = self._tensors.get(key)
        size = t.element_size() * t.nelement() if t is not None else None
        if t is None:
            t = loader()
            size = t.element_size() * t.nelement()
        found, now, moves = self.lru.get(key, max(1, size))
        self._apply(moves, skip=key)
        t = t.to(self.device) if now == "gpu" else self._to_host(t)
        self._tensors[key] = t
        return t

    def _apply(self, moves, skip=None):
        for k, _, src, dst in moves:
            if k == skip:
                continue
            if dst is None:
                self._tensors.pop(k, None)
            elif dst == "host":
                self._tensors[k] = self._to_host(self._tensors[k])

    def set_gpu_budget(self, gpu_budget):
        """Changes the GPU budget (bytes or text); a smaller one moves the
        least recently used tensors to the host now. Returns the bytes that
        left the device."""
        moves = self.lru.set_gpu_budget(gpu_budget)
        self._apply(moves)
        return sum(size for _, size, src, _ in moves if src == "gpu")

    def spill(self):
        """Moves every tensor off the device (GPU budget 1 byte: later gets
        are served from the host); the bytes that left the device."""
        return self.set_gpu_budget(1)

    def __contains__(self, name):
        return name in self._ids and self.lru.where(self._ids[name]) is not None

    def tier(self, name):
        return self.lru.where(self._ids[name]) if name in self._ids else None

    def remove(self, name):
        key = self._ids.get(name)
        if key is not None and key in self._tensors:
            self.lru.remove(key)
            del self._tensors[key]

    def stats(self):
        return self.lru.stats()
