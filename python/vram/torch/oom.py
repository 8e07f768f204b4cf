"""The one place that decides whether an exception is an out-of-memory error."""
from ..errors import OutOfMemoryError as VramOutOfMemoryError

_CUDA_TEXTS = ("CUDA out of memory", "CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED",
               "cuDNN error: CUDNN_STATUS_ALLOC_FAILED")
# c10's DefaultCPUAllocator; ATen's NNPACK convolution workspace (the CPU
# convolutions with oneDNN off, torch 2.x: "posix_memalign failed:" + ENOMEM)
_CPU_TEXTS = ("can't allocate memory", "posix_memalign failed:Cannot allocate memory")


def is_oom(exc):
    """True for torch.cuda.OutOfMemoryError, CUDA's "out of memory"
    RuntimeErrors, the CPU allocator's "can't allocate memory" errors and
    vram.OutOfMemoryError (the vram pool refusing); False for anything else
    (a plain MemoryError of Python included)."""
    try:
        import torch
        cuda_oom = getattr(torch.cuda, "OutOfMemoryError", None)
        if cuda_oom is not None and isinstance(exc, cuda_oom):
            return True
    except ImportError:
        pass
    if isinstance(exc, VramOutOfMemoryError):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return any(t in text for t in _CUDA_TEXTS + _CPU_TEXTS)
    return False
