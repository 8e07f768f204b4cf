"""vram: GPU memory management for machine learning (Python side of
libvram, over ctypes). docs/python.md describes every function.

    import vram
    vram.print_gpu_info()
    vram.estimate("gpt2", batch_size=8).total
    vram.plan("resnet50", gpu_name="A100-80GB").recommended
"""
from ._lib import path as library_path
from .errors import (BusyError, ConnectionError, DaemonError, DriverError, Error, IOError,
                     InvalidArgumentError, LibraryNotFoundError, NoDeviceError,
                     NotFoundError, NotSupportedError, OutOfMemoryError, ParseError,
                     PermissionError, StateError, TimeoutError, TryAgainError)
from .types import Device, Estimate, Job, Plan, PoolStats, Process, Suggestion
from .api import Context, batch_table, devices, estimate, parse_size, plan, print_gpu_info
from .pool import Pool
from .client import Client, default_socket_path
from .job import JobInfo, job
from .profiling import Profiler, dump_profile, print_profile, profile, profile_stats, reset_profile

__version__ = "0.1.0"
