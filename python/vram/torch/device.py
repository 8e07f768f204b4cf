"""select_device() / device_context(): the best GPU by libvram's score, or
the CPU with a logged reason when no GPU is usable."""
import contextlib
import logging

from .. import api
from ..errors import Error

log = logging.getLogger("vram")


def select_device(min_free=0, logger=None):
    """torch.device of the best usable GPU with at least min_free bytes free
    (vram_device_select: free memory, utilization, health), else
    torch.device("cpu") with the reason logged (a warning) and kept in
    select_device.reason. Simulated GPUs (VRAM_SIM) are not usable by
    PyTorch, so they give the CPU too."""
    import torch

    logger = logger or log
    min_free = api.parse_size(min_free, "min_free")
    reason = None
    if not torch.cuda.is_available():
        reason = "PyTorch sees no CUDA device (torch.cuda.is_available() is False)"
    else:
        try:
            with api.Context() as ctx:
                backend = ctx.info(-1)["backend"]
                if backend not in ("nvml", "cuda"):
                    reason = "vram's %s backend has no real GPU" % backend
                else:
                    index = ctx.select(min_free)
                    select_device.reason = ""
                    return torch.device("cuda", index)
        except Error as e:
            reason = "no GPU with %d bytes free: %s" % (min_free, e.message)
    select_device.reason = reason
    logger.warning("vram: using the CPU: %s", reason)
    return torch.device("cpu")


select_device.reason = ""


@contextlib.contextmanager
def device_context(min_free=0, logger=None):
    """`with device_context(min_free="4GiB") as dev:` runs the block with
    dev = select_device(...) as the current CUDA device (or on the CPU)."""
    import torch

    dev = select_device(min_free, logger)
    if dev.type == "cuda":
        with torch.cuda.device(dev):
            yield dev
    else:
        yield dev
