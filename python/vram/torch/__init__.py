"""vram.torch: PyTorch integration (needs the torch package).

analyze() measures a real nn.Module; print_memory_analysis() and
recommend_batch_size() plan from it; find_batch_size() and
auto_select_batch_size() find the largest batch that really runs;
is_oom() recognizes out-of-memory errors; select_device() and
device_context() fall back to the CPU; use_pool() installs the vram pool
as PyTorch's CUDA allocator. The adaptive runtime (docs/runtime.md):
AdaptiveTraining (the one loop), and its pieces oom_guard(),
AdaptiveBatchIterator, SwapCache; optimize()."""
try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover
    raise ImportError("vram.torch needs PyTorch (apt install python3-torch)") from e

from .allocator import pool_snapshot, use_pool
from .analyze import Profile, analyze, graph_saved_bytes
from .batch import (BatchSearch, BatchSizeError, Trial, auto_select_batch_size,
                    find_batch_size, probe_batch, training_step)
from .device import device_context, select_device
from .oom import is_oom
from .report import print_memory_analysis, recommend_batch_size
from .runtime import (AdaptiveBatchIterator, SwapCache, batch_statistics_layers, memory_usage,
                      oom_guard)
from .training import AdaptiveTraining, StepResult
from .optimize import optimize  # noqa: E402  (the function; the module stays importable)
