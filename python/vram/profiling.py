"""vram.profile("name"): time and memory delta per named operation, as a
context manager or a decorator, with count/mean/p50/p99/max per name.

Memory comes from the first source that applies: a vram.Pool given with
pool= (its allocated bytes), PyTorch's CUDA allocator when CUDA is in use
(memory_allocated), else the process's resident set (RSS, /proc)."""
import functools
import json
import os
import threading
import time

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _percentile(sorted_values, q):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, int(-(-q * len(sorted_values) // 100)) - 1))
    return sorted_values[k]


def _summary(values):
    v = sorted(values)
    return {"mean": sum(v) / len(v), "p50": _percentile(v, 50), "p99": _percentile(v, 99),
            "max": v[-1], "min": v[0]}


class Profiler:
    """Collects samples per operation name. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._samples = {}  # name -> ([seconds], [memory delta bytes], source)

    def record(self, name, seconds, mem_delta, source):
        with self._lock:
            t, m, _ = self._samples.setdefault(name, ([], [], source))
            t.append(seconds)
            m.append(mem_delta)

    def stats(self):
        """{name: {"count", "seconds": {mean,p50,p99,max,min}, "memory_delta_bytes":
        {...}, "memory_source"}}"""
        with self._lock:
            items = [(n, list(t), list(m), s) for n, (t, m, s) in self._samples.items()]
        return {n: {"count": len(t), "seconds": _summary(t), "memory_delta_bytes": _summary(m),
                    "memory_source": s} for n, t, m, s in items}

    def reset(self):
        with self._lock:
            self._samples.clear()

    def dump(self, path=None):
        """The statistics as JSON text; written to `path` when given."""
        text = json.dumps(self.stats(), indent=2, sort_keys=True)
        if path:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def report(self, file=None):
        import sys
        out = file or sys.stdout
        print("%-24s %6s %10s %10s %10s %10s %12s" % (
            "OPERATION", "COUNT", "MEAN ms", "P50 ms", "P99 ms", "MAX ms", "MEM MEAN MiB"),
            file=out)
        for name, s in sorted(self.stats().items()):
            t, m = s["seconds"], s["memory_delta_bytes"]
            print("%-24s %6d %10.2f %10.2f %10.2f %10.2f %12.2f" % (
                name[:24], s["count"], 1e3 * t["mean"], 1e3 * t["p50"], 1e3 * t["p99"],
                1e3 * t["max"], m["mean"] / 2**20), file=out)


default_profiler = Profiler()


def _memory_reader(pool, device):
    if pool is not None:
        return "vram_pool", lambda: pool.stats().allocated_bytes
    try:
        import torch
        if torch.cuda.is_available() and (device is None or str(device).startswith("cuda")):
            return "torch_cuda", lambda: torch.cuda.memory_allocated(device)
    except ImportError:
        pass
    return "rss", rss_bytes


class profile:  # noqa: N801 (used like a function: `with vram.profile("x"):`)
    """Times a block or a function under `name`:

        with vram.profile("forward"):
            out = model(x)

        @vram.profile("step")
        def step(batch): ...

        vram.profile_stats()["forward"]["seconds"]["p99"]
    """

    def __init__(self, name, pool=None, device=None, profiler=None):
        self.name, self.profiler = name, profiler or default_profiler
        self.source, self._read = _memory_reader(pool, device)
        self._starts = threading.local()

    def __enter__(self):
        stack = getattr(self._starts, "stack", None)
        if stack is None:
            stack = self._starts.stack = []
        stack.append((self._read(), time.perf_counter()))
        return self

    def __exit__(self, *exc):
        mem0, t0 = self._starts.stack.pop()
        self.profiler.record(self.name, time.perf_counter() - t0, self._read() - mem0,
                             self.source)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper


def profile_stats():
    """Statistics of the default profiler (see Profiler.stats)."""
    return default_profiler.stats()


def dump_profile(path=None):
    return default_profiler.dump(path)


def reset_profile():
    default_profiler.reset()


def print_profile(file=None):
    default_profiler.report(file)
