"""use_pool(): the vram pool as PyTorch's CUDA allocator, through
torch.cuda.memory.CUDAPluggableAllocator and libvram's vram_torch_malloc /
vram_torch_free. Unverified on a GPU (none exists where it was written)."""
from .. import _lib
from ..errors import NotSupportedError
from ..pool import snapshot_of

_installed = None


def use_pool():
    """Installs the pool as the CUDA allocator; must run before the first
    CUDA allocation of the process. The pools are created per device from
    VRAM_POOL_STRATEGY / VRAM_POOL_LIMIT. Raises vram.NotSupportedError when
    PyTorch has no CUDA or no pluggable-allocator support."""
    global _installed
    import torch

    if _installed is not None:
        return _installed
    if not torch.cuda.is_available():
        raise NotSupportedError(
            "vram.torch.use_pool: PyTorch has no CUDA device here (torch.cuda.is_available() "
            "is False), so there is no CUDA allocator to replace")
    pluggable = getattr(torch.cuda.memory, "CUDAPluggableAllocator", None)
    if pluggable is None:
        raise NotSupportedError("vram.torch.use_pool: this PyTorch (%s) has no "
                                "CUDAPluggableAllocator" % torch.__version__)
    alloc = pluggable(_lib.path, "vram_torch_malloc", "vram_torch_free")
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise NotSupportedError("vram.torch.use_pool: %s (call it before any CUDA tensor "
                                "exists)" % e) from e
    _installed = alloc
    return alloc


def pool_snapshot(device=0):
    """The snapshot dict of the pool use_pool() created for `device`."""
    h = _lib.lib.vram_torch_pool(int(device))
    if not h:
        raise NotSupportedError("vram: no torch pool on device %d (use_pool() not called or "
                                "nothing allocated yet)" % device)
    return snapshot_of(h)
