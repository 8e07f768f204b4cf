"""analyze() on the meta device: tensors with shapes and no data, so a
model is measured without its memory or its arithmetic. What the meta
device cannot run (operations whose output shape depends on the data, such
as torch.nonzero or boolean masks) raises, and analyze() measures on the CPU
instead. TorchDispatchMode lives in torch.utils._python_dispatch, the
module PyTorch's own documentation of __torch_dispatch__ points to; there
is no other home for it."""
import copy
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .analyze import storage_of, tensors_in


def meta_copy(model):
    """A copy of `model` whose parameters and buffers are meta tensors of the
    same shapes, dtypes and requires_grad; the model's data is not copied."""
    memo = {}
    for t in list(model.parameters()) + list(model.buffers()):
        m = torch.empty_like(t, device="meta")
        memo[id(t)] = torch.nn.Parameter(m, t.requires_grad) if isinstance(
            t, torch.nn.Parameter) else m
    return copy.deepcopy(model, memo)


def to_meta(batch):
    """The batch with every tensor (also inside tuples, lists, dicts) on meta."""
    if isinstance(batch, torch.Tensor):
        return batch.to("meta")
    if isinstance(batch, dict):
        return {k: to_meta(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_meta(v) for v in batch)
    return batch


class LiveBytes(TorchDispatchMode):
    """Counts the storages that ops return (new ones: not an input's, so
    views and in-place results are not new memory) until their last tensor
    dies, and keeps the largest total held at once. Kernels' internal
    scratch is invisible here, unlike to the CPU allocator's events. Works
    on any device (meta here; the CPU for auto_select_batch_size's
    memory_cap)."""

    def __init__(self):
        super().__init__()
        self.tensors, self.sizes = {}, {}  # storage -> live tensors, bytes
        self.live = self.peak = 0

    def _dead(self, key):
        self.tensors[key] -= 1
        if not self.tensors[key]:
            del self.tensors[key]
            self.live -= self.sizes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {storage_of(t)[0] for t in tensors_in((args, kwargs or {}))}
        for t in tensors_in(out):
            key, nbytes = storage_of(t)
            if key not in self.tensors:
                if key in inputs:
                    continue  # a view of, or written into, memory from before
                self.tensors[key], self.sizes[key] = 0, nbytes
                self.live += nbytes
                self.peak = max(self.peak, self.live)
            self.tensors[key] += 1
            weakref.finalize(t, self._dead, key)
        return out


def live_peak_bytes(run):
    """Calls run() (on meta tensors) and returns the most bytes of new
    tensors it held at once (the meta counterpart of
    analyze.allocated_peak_bytes)."""
    mode = LiveBytes()
    with mode:
        run()
    return mode.peak
