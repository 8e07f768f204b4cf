"""vram.Pool: the caching device-memory pool of libvram on one device."""
import ctypes
import json

from . import _lib
from ._lib import lib, check
from .api import Context, parse_size
from .errors import InvalidArgumentError
from .types import PoolStats


class _PoolConfig(ctypes.Structure):
    """vram_pool_config_t."""
    _fields_ = [("strategy", ctypes.c_int), ("limit_bytes", ctypes.c_uint64),
                ("limit_fraction", ctypes.c_double), ("trace_path", ctypes.c_char_p),
                ("expandable", ctypes.c_int)]  # vram_pool_expandable_t


_lib.check_layouts({_PoolConfig: "vram_pool_config_t"})


class Pool:
    """A caching allocator of device memory (docs/pool.md) on `device` of
    the backend (VRAM_SIM devices included; the CPU backend allocates host
    memory). Pointers are ints; memory of sim devices is reserved address
    space, never to be touched. Defaults come from VRAM_POOL_STRATEGY /
    VRAM_POOL_LIMIT. A refused allocation raises vram.OutOfMemoryError.

        with vram.Pool(0, limit="1GiB") as pool:
            p = pool.alloc(256 << 20)
            pool.free(p)
            print(pool.stats().reserved_bytes)
    """

    def __init__(self, device=0, strategy=None, limit=None, trace_path=None, context=None):
        self._h = None
        self._ctx = context or Context()
        self._own_ctx = context is None
        self._live = set()
        cfg = _PoolConfig()
        check(lib.vram_pool_config_from_options(ctypes.byref(cfg)))
        if strategy is not None:
            s = ctypes.c_int()
            check(lib.vram_pool_strategy_parse(strategy.encode(), ctypes.byref(s)), "strategy")
            cfg.strategy = s.value
        if limit is not None:
            if isinstance(limit, float) and 0 < limit <= 1:
                cfg.limit_bytes, cfg.limit_fraction = 0, limit
            elif isinstance(limit, float) and limit != int(limit):
                raise InvalidArgumentError(
                    "limit: %r is neither a fraction of the device in (0, 1] nor a whole "
                    "number of bytes (write units as text: \"%sGiB\")" % (limit, limit))
            else:
                cfg.limit_bytes, cfg.limit_fraction = parse_size(limit, "limit"), 0.0
        self._trace = trace_path.encode() if trace_path else None  # kept alive with the pool
        if trace_path is not None:
            cfg.trace_path = self._trace
        h = ctypes.c_void_p()
        check(lib.vram_pool_create(self._ctx.handle, int(device), ctypes.byref(cfg),
                                   ctypes.byref(h)))
        self._h, self.device = h.value, device

    @property
    def handle(self):
        if not self._h:
            raise ValueError("vram: the pool is closed")
        return self._h

    def alloc(self, size, stream=None):
        """Allocates `size` bytes (an int, or text such as "256MiB");
        returns the address (int; 0 for size 0)."""
        size = parse_size(size, "size")
        if size > ctypes.c_size_t(-1).value:
            raise InvalidArgumentError("size: %d bytes does not fit a size_t" % size)
        p = ctypes.c_void_p()
        check(lib.vram_pool_alloc(self.handle, size, stream, ctypes.byref(p)),
              "pool alloc of %d bytes" % size)
        if p.value:
            self._live.add(p.value)
        return p.value or 0

    def free(self, ptr):
        """Returns a block to the pool (cached for reuse)."""
        check(lib.vram_pool_free(self.handle, ptr or None))
        self._live.discard(ptr)

    def free_all(self):
        """Frees every block this object handed out and has not freed."""
        for p in list(self._live):
            self.free(p)

    def trim(self):
        """Returns unused cached segments to the device; the bytes released."""
        out = ctypes.c_uint64()
        check(lib.vram_pool_trim(self.handle, ctypes.byref(out)))
        return out.value

    def set_limit(self, limit):
        """Caps the reserved bytes (0 = no limit)."""
        check(lib.vram_pool_set_limit(self.handle, parse_size(limit, "limit")))

    def reset_peaks(self):
        lib.vram_pool_reset_peaks(self.handle)

    def snapshot(self):
        """The pool as a dict: strategy, limit, stats, segments and blocks."""
        return snapshot_of(self.handle)

    def stats(self):
        return PoolStats.from_json(self.snapshot()["stats"])

    def close(self):
        """Returns every segment to the device and frees the pool."""
        if getattr(self, "_h", None):
            lib.vram_pool_destroy(self._h)
            self._h = None
            self._live.clear()
        if getattr(self, "_own_ctx", False) and self._ctx:
            self._ctx.close()

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def snapshot_of(handle):
    text = _lib.take_text(lib.vram_pool_snapshot_json(handle))
    if text is None:
        raise MemoryError("vram: out of host memory for the pool snapshot")
    return json.loads(text)
