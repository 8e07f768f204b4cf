"""The adaptive-runtime controllers of libvram (src/tune/, docs/runtime.md)
for Python: thin ctypes wrappers, the logic stays in C.

    opt = vram.tune.BatchSizeOptimizer("train.yaml", batch=8, lq=64)
    batch_delta, lq_delta = opt.update(usage)      # once per iteration
    batch, lq = opt.on_oom()                       # after an out-of-memory error

BatchIteratorPolicy, OOMChain and SwapLRU are the bookkeeping under
vram.torch.runtime's AdaptiveBatchIterator, oom_guard and SwapCache."""
import ctypes
import numbers
import os

from . import _lib, errors
from .api import parse_size
from ._lib import lib, check

_I, _D, _B, _V = ctypes.c_int, ctypes.c_double, ctypes.c_bool, ctypes.c_void_p
_U64, _I64, _SZ, _S = ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t, ctypes.c_char_p
_OUT = ctypes.POINTER(ctypes.c_void_p)
LOG = 64  # VRAM_BATCHOPT_LOG, VRAM_BATCHITER_LOG

REASONS = ("none", "grow", "shrink", "oom", "external")
ITER_REASONS = ("high", "low", "fail", "set")
STRATEGIES = ("free-cache", "micro-batch", "offload", "checkpoint")
TIERS = (None, "gpu", "host")  # vram_swap_tier_t: NONE, GPU, HOST


class _OptConfig(ctypes.Structure):
    _fields_ = [("enabled", _B), ("target_usage", _D), ("safety_margin", _D),
                ("adjustment_frequency", _I), ("min_batch", _I), ("max_batch", _I),
                ("min_lq", _I), ("max_lq", _I), ("history_size", _I), ("max_adjustments", _I),
                ("oom_cooldown_windows", _I), ("policy", _I)]


class _Decision(ctypes.Structure):
    _fields_ = [("batch_delta", _I), ("lq_delta", _I), ("batch", _I), ("lq", _I),
                ("reason", _I)]


class _Adjustment(ctypes.Structure):
    _fields_ = [("iteration", _I64), ("old_batch", _I), ("old_lq", _I), ("new_batch", _I),
                ("new_lq", _I), ("peak_usage", _D), ("predicted_usage", _D), ("reason", _I)]


class _OptStats(ctypes.Structure):
    _fields_ = [("peak_usage", _D), ("average_usage", _D), ("current_usage", _D),
                ("batch", _I), ("lq", _I), ("iterations", _I64), ("adjustments", _I64),
                ("oom_recoveries", _I64), ("model_quadratic", _B), ("model_a", _D),
                ("model_b", _D), ("nlog", _I), ("log", _Adjustment * LOG)]


class _IterConfig(ctypes.Structure):
    _fields_ = [("initial_batch", _I), ("min_batch", _I), ("check_every", _I),
                ("high_mark", _D), ("low_mark", _D)]


class _IterChange(ctypes.Structure):
    _fields_ = [("sample", _U64), ("old_batch", _I), ("new_batch", _I), ("usage", _D),
                ("reason", _I)]


class _IterStats(ctypes.Structure):
    _fields_ = [("batch", _I), ("handed_out", _U64), ("committed", _U64), ("returned", _U64),
                ("pending", _U64), ("checks", _U64), ("nchanges", _U64), ("nlog", _I),
                ("log", _IterChange * LOG)]


_FREE_FN = ctypes.CFUNCTYPE(_U64, _V)
_OFFLOAD_FN = ctypes.CFUNCTYPE(_U64, _V, _SZ)
_CKPT_FN = ctypes.CFUNCTYPE(_I, _V, ctypes.POINTER(ctypes.c_char), _SZ)


class _ChainConfig(ctypes.Structure):
    _fields_ = [("order", _I * 4), ("norder", _I), ("max_splits", _I), ("min_micro_batch", _I),
                ("free_cache", _FREE_FN), ("offload", _OFFLOAD_FN), ("checkpoint", _CKPT_FN),
                ("user", _V)]


class _Action(ctypes.Structure):
    _fields_ = [("strategy", _I), ("retry", _B), ("micro_batches", _I),
                ("micro_batch_size", _I), ("freed_bytes", _U64), ("message", ctypes.c_char * 512)]


class _ChainStats(ctypes.Structure):
    _fields_ = [("attempts", _U64 * 4), ("recovered", _U64 * 4), ("freed_bytes", _U64 * 4),
                ("pool_calls", _U64), ("steps", _U64), ("ooms", _U64), ("failures", _U64)]


class _Move(ctypes.Structure):
    _fields_ = [("key", _U64), ("size", _U64), ("from_", _I), ("to", _I)]


class _SwapStats(ctypes.Structure):
    _fields_ = [(n, _U64) for n in (
        "gpu_budget", "host_budget", "gpu_bytes", "host_bytes", "gpu_items", "host_items",
        "hits_gpu", "hits_host", "misses", "bytes_to_gpu", "bytes_to_host", "bytes_loaded",
        "evictions_gpu", "evictions_host")]


_lib.check_layouts({
    _OptConfig: "vram_batchopt_config_t", _Decision: "vram_batchopt_decision_t",
    _Adjustment: "vram_batchopt_adjustment_t", _OptStats: "vram_batchopt_stats_t",
    _IterConfig: "vram_batchiter_config_t", _IterChange: "vram_batchiter_change_t",
    _IterStats: "vram_batchiter_stats_t", _ChainConfig: "vram_oomchain_config_t",
    _Action: "vram_oom_action_t", _ChainStats: "vram_oomchain_stats_t",
    _Move: "vram_swap_move_t", _SwapStats: "vram_swap_stats_t"})


_P = ctypes.POINTER
_PROTOTYPES = {
    "vram_batchopt_config_init": (None, [_P(_OptConfig)]),
    "vram_batchopt_config_load": (_I, [_S, _P(_OptConfig)]),
    "vram_batchopt_config_parse": (_I, [_S, _S, _P(_OptConfig)]),
    "vram_batchopt_create": (_I, [_P(_OptConfig), _I, _I, _OUT]),
    "vram_batchopt_destroy": (None, [_V]),
    "vram_batchopt_update": (_I, [_V, _D, _P(_Decision)]),
    "vram_batchopt_set_current": (_I, [_V, _I, _I]),
    "vram_batchopt_set_target": (_I, [_V, _I, _I]),
    "vram_batchopt_on_oom": (_I, [_V, _P(_I), _P(_I)]),
    "vram_batchopt_stats": (_I, [_V, _P(_OptStats)]),
    "vram_batchiter_config_init": (None, [_P(_IterConfig), _I]),
    "vram_batchiter_create": (_I, [_P(_IterConfig), _U64, _OUT]),
    "vram_batchiter_destroy": (None, [_V]),
    "vram_batchiter_check_due": (_B, [_V]),
    "vram_batchiter_next": (_I, [_V, _D, _P(_U64), _SZ, _P(_SZ), _P(_U64)]),
    "vram_batchiter_done": (_I, [_V, _U64]),
    "vram_batchiter_failed": (_I, [_V, _U64]),
    "vram_batchiter_set_length": (_I, [_V, _U64]),
    "vram_batchiter_set_batch": (_I, [_V, _I]),
    "vram_batchiter_finished": (_B, [_V]),
    "vram_batchiter_stats": (_I, [_V, _P(_IterStats)]),
    "vram_batchiter_check": (_I, [_V]),
    "vram_oomchain_config_init": (None, [_P(_ChainConfig)]),
    "vram_oomchain_create": (_I, [_P(_ChainConfig), _OUT]),
    "vram_oomchain_destroy": (None, [_V]),
    "vram_oomchain_attach_pool": (_I, [_V, _V]),
    "vram_oomchain_begin_step": (_I, [_V, _I, _P(_I)]),
    "vram_oomchain_limit_micro_batch": (_I, [_V, _I]),
    "vram_oomchain_on_oom": (_I, [_V, _P(_Action)]),
    "vram_oomchain_end_step": (_I, [_V]),
    "vram_oomchain_stats": (_I, [_V, _P(_ChainStats)]),
    "vram_oom_strategy_parse": (_I, [_S, _P(_I)]),
    "vram_swap_create": (_I, [_U64, _U64, _OUT]),
    "vram_swap_destroy": (None, [_V]),
    "vram_swap_get": (_I, [_V, _U64, _U64, _P(_I), _P(_I), _P(_SZ)]),
    "vram_swap_move": (_I, [_V, _SZ, _P(_Move)]),
    "vram_swap_set_gpu_budget": (_I, [_V, _U64, _P(_SZ)]),
    "vram_swap_remove": (_I, [_V, _U64]),
    "vram_swap_where": (_I, [_V, _U64]),
    "vram_swap_stats": (_I, [_V, _P(_SwapStats)]),
    "vram_swap_check": (_I, [_V]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args

_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def config_text(config):
    """The training_automations YAML of a dict of DynamicBatchSizeOptimizer
    keys, so that a dict goes through libvram's one reader (its key table,
    types and ranges; docs/runtime.md) like a file does. Values must be
    bools or numbers: nothing else belongs in the section, and text could
    smuggle in other keys."""
    lines = ["training_automations:", "  enabled: true", "  DynamicBatchSizeOptimizer:"]
    for key, value in config.items():
        if not isinstance(key, str) or not key or not set(key) <= _KEY_CHARS:
            raise errors.InvalidArgumentError("vram: optimizer config key %r is not a key name"
                                              % (key,))
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, numbers.Integral):
            text = str(int(value))
        elif isinstance(value, numbers.Real):
            text = repr(float(value))
        else:
            raise errors.InvalidArgumentError(
                "vram: optimizer config %s: %r is not a number or a bool" % (key, value))
        lines.append("    %s: %s" % (key, text))
    return "\n".join(lines) + "\n"


def _struct_dict(s):
    return {name: getattr(s, name) for name, _ in s._fields_ if name != "log"}


class _Handle:
    """Owns one C handle; close() (or the with-block, or GC) destroys it."""
    _destroy = None

    def __init__(self, handle):
        self._h = handle

    @property
    def handle(self):
        if not self._h:
            raise ValueError("vram: %s is closed" % type(self).__name__)
        return self._h

    def close(self):
        if self._h:
            getattr(lib, self._destroy)(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class BatchSizeOptimizer(_Handle):
    """Dynamic batch size and lq size (patch, crop or sequence length).

    config: a path to the training_automations YAML, a dict of its
    DynamicBatchSizeOptimizer keys (target_vram_usage, min_batch_size, ...),
    or None for the defaults; policy "model" (default) or "fixed-step"."""
    _destroy = "vram_batchopt_destroy"

    def __init__(self, config=None, batch=8, lq=0, policy="model"):
        cfg = config if isinstance(config, _OptConfig) else _OptConfig()
        if not isinstance(config, _OptConfig):
            lib.vram_batchopt_config_init(ctypes.byref(cfg))
        if isinstance(config, (str, os.PathLike)):
            check(lib.vram_batchopt_config_load(os.fsencode(config), ctypes.byref(cfg)))
        elif isinstance(config, dict):
            check(lib.vram_batchopt_config_parse(config_text(config).encode(), b"config dict",
                                                 ctypes.byref(cfg)))
        elif config is not None and not isinstance(config, _OptConfig):
            raise errors.InvalidArgumentError(
                "vram: config must be a YAML path, a dict or None, not %s" %
                type(config).__name__)
        if policy not in ("model", "fixed-step"):
            raise ValueError("vram: policy must be 'model' or 'fixed-step', not %r" % (policy,))
        cfg.policy = 0 if policy == "model" else 1
        h = ctypes.c_void_p()
        check(lib.vram_batchopt_create(ctypes.byref(cfg), int(batch), int(lq), ctypes.byref(h)))
        super().__init__(h.value)
        self.config = _struct_dict(cfg)
        self.last_reason = "none"

    @classmethod
    def from_yaml_text(cls, text, batch=8, lq=0, origin="<config>", policy="model"):
        cfg = _OptConfig()
        lib.vram_batchopt_config_init(ctypes.byref(cfg))
        check(lib.vram_batchopt_config_parse(text.encode(), origin.encode(), ctypes.byref(cfg)))
        return cls(cfg, batch, lq, policy)

    def update(self, usage):
        """One iteration's reading (fraction of the device); returns
        (batch_delta, lq_delta) to apply now."""
        d = _Decision()
        check(lib.vram_batchopt_update(self.handle, float(usage), ctypes.byref(d)))
        self.last_reason = REASONS[d.reason]
        return d.batch_delta, d.lq_delta

    def set_current(self, batch, lq=0):
        check(lib.vram_batchopt_set_current(self.handle, int(batch), int(lq)))

    def set_target(self, batch, lq=0):
        check(lib.vram_batchopt_set_target(self.handle, int(batch), int(lq)))

    def on_oom(self):
        """The current settings ran out of memory: the (batch, lq) to retry
        with. At both minima it raises vram.StateError."""
        b, q = _I(), _I()
        check(lib.vram_batchopt_on_oom(self.handle, ctypes.byref(b), ctypes.byref(q)))
        return b.value, q.value

    def stats(self):
        s = _OptStats()
        check(lib.vram_batchopt_stats(self.handle, ctypes.byref(s)))
        out = _struct_dict(s)
        out["adjustments_log"] = [dict(_struct_dict(a), reason=REASONS[a.reason])
                                  for a in s.log[:s.nlog]]
        return out

    @property
    def batch(self):
        return self.stats()["batch"]

    @property
    def lq(self):
        return self.stats()["lq"]


class BatchIteratorPolicy(_Handle):
    """Batch sizes and exactly-once bookkeeping of sample indices."""
    _destroy = "vram_batchiter_destroy"

    def __init__(self, initial_batch, length=None, check_every=10, high_mark=0.85,
                 low_mark=0.50, min_batch=1):
        cfg = _IterConfig()
        lib.vram_batchiter_config_init(ctypes.byref(cfg), int(initial_batch))
        cfg.check_every, cfg.high_mark, cfg.low_mark = int(check_every), high_mark, low_mark
        cfg.min_batch = int(min_batch)
        h = ctypes.c_void_p()
        check(lib.vram_batchiter_create(ctypes.byref(cfg),
                                        (1 << 64) - 1 if length is None else int(length),
                                        ctypes.byref(h)))
        super().__init__(h.value)
        self._buf = (_U64 * int(initial_batch))()

    def check_due(self):
        return bool(lib.vram_batchiter_check_due(self.handle))

    def next(self, usage=None):
        """(batch_id, [indices]); an empty list when nothing is left."""
        n, bid = _SZ(), _U64()
        check(lib.vram_batchiter_next(self.handle, -1.0 if usage is None else float(usage),
                                      self._buf, len(self._buf), ctypes.byref(n),
                                      ctypes.byref(bid)))
        return bid.value, list(self._buf[:n.value])

    def done(self, batch_id):
        check(lib.vram_batchiter_done(self.handle, batch_id))

    def failed(self, batch_id):
        check(lib.vram_batchiter_failed(self.handle, batch_id))

    def set_length(self, length):
        check(lib.vram_batchiter_set_length(self.handle, int(length)))

    def set_batch(self, batch):
        check(lib.vram_batchiter_set_batch(self.handle, int(batch)))

    def finished(self):
        return bool(lib.vram_batchiter_finished(self.handle))

    def check(self):
        check(lib.vram_batchiter_check(self.handle))

    def stats(self):
        s = _IterStats()
        check(lib.vram_batchiter_stats(self.handle, ctypes.byref(s)))
        out = _struct_dict(s)
        out["changes"] = [dict(_struct_dict(c), reason=ITER_REASONS[c.reason])
                          for c in s.log[:s.nlog]]
        return out


class OOMChain(_Handle):
    """The OOM recovery chain. Hooks are Python callables: free_cache() and
    offload(request) return the bytes they freed (any nonzero number when
    unknown), checkpoint() returns a string saying where it saved (or raises).
    An exception in a hook counts as "freed nothing" / "could not save"."""
    _destroy = "vram_oomchain_destroy"

    def __init__(self, order=STRATEGIES, free_cache=None, offload=None, checkpoint=None,
                 max_splits=3, min_micro_batch=1):
        cfg = _ChainConfig()
        lib.vram_oomchain_config_init(ctypes.byref(cfg))
        for i, name in enumerate(order):
            s = _I()
            check(lib.vram_oom_strategy_parse(name.encode(), ctypes.byref(s)))
            cfg.order[i] = s.value
        cfg.norder = len(order)
        cfg.max_splits, cfg.min_micro_batch = int(max_splits), int(min_micro_batch)
        self.hook_errors = []
        # ctypes callbacks must live as long as the chain
        self._hooks = []
        if free_cache:
            cfg.free_cache = self._keep(_FREE_FN(lambda user: self._call(free_cache)))
        if offload:
            cfg.offload = self._keep(_OFFLOAD_FN(lambda user, req: self._call(offload, req)))
        if checkpoint:
            cfg.checkpoint = self._keep(_CKPT_FN(self._checkpoint_hook(checkpoint)))
        h = ctypes.c_void_p()
        check(lib.vram_oomchain_create(ctypes.byref(cfg), ctypes.byref(h)))
        super().__init__(h.value)
        self._pools = []

    def _keep(self, fn):
        self._hooks.append(fn)
        return fn

    def _call(self, fn, *args):
        try:
            return max(0, int(fn(*args) or 0))
        except Exception as e:  # never across the C boundary
            self.hook_errors.append(e)
            return 0

    def _checkpoint_hook(self, fn):
        def hook(user, msg, cap):
            try:
                where = str(fn()).encode()[:cap - 1]
            except Exception as e:
                self.hook_errors.append(e)
                return -1
            ctypes.memmove(msg, where + b"\0", len(where) + 1)
            return 0
        return hook

    def attach_pool(self, pool):
        """Runs free-cache and offload inside failing allocations of a
        vram.Pool; the chain then stays alive as long as the pool needs it."""
        check(lib.vram_oomchain_attach_pool(self.handle, pool.handle))
        self._pools.append(pool)

    def begin_step(self, batch):
        parts = _I()
        check(lib.vram_oomchain_begin_step(self.handle, int(batch), ctypes.byref(parts)))
        return parts.value

    def limit_micro_batch(self, max_samples):
        """Every following step runs in micro-batches of at most max_samples
        (the batch vramd granted); 0 or None removes the limit."""
        check(lib.vram_oomchain_limit_micro_batch(self.handle, int(max_samples or 0)))

    def on_oom(self):
        """Applies the next strategy: a dict (strategy, retry, micro_batches,
        micro_batch_size, freed_bytes, message). When the chain is exhausted
        it raises vram.OutOfMemoryError whose message says how to resume."""
        a = _Action()
        check(lib.vram_oomchain_on_oom(self.handle, ctypes.byref(a)))
        return dict(_struct_dict(a), strategy=STRATEGIES[a.strategy],
                    message=a.message.decode("utf-8", "replace"))

    def end_step(self):
        check(lib.vram_oomchain_end_step(self.handle))

    def stats(self):
        s = _ChainStats()
        check(lib.vram_oomchain_stats(self.handle, ctypes.byref(s)))
        per = {name: {"attempts": s.attempts[i], "recovered": s.recovered[i],
                      "freed_bytes": s.freed_bytes[i]} for i, name in enumerate(STRATEGIES)}
        return {"strategies": per, "pool_calls": s.pool_calls, "steps": s.steps,
                "ooms": s.ooms, "failures": s.failures}

    def close(self):
        if self._pools:  # a pool may still call the handler: keep the chain
            return
        super().close()


class SwapLRU(_Handle):
    """LRU bookkeeping of a two-tier cache; keys are non-zero ints."""
    _destroy = "vram_swap_destroy"

    def __init__(self, gpu_budget, host_budget=0):
        h = ctypes.c_void_p()
        check(lib.vram_swap_create(parse_size(gpu_budget, "gpu_budget"),
                                   parse_size(host_budget, "host_budget"), ctypes.byref(h)))
        super().__init__(h.value)

    def get(self, key, size):
        """(found tier, tier now, [(key, size, from, to), ...]) with tiers
        None (not cached), "gpu", "host"; the moves in the order to do them."""
        found, now, n = _I(), _I(), _SZ()
        check(lib.vram_swap_get(self.handle, key, int(size), ctypes.byref(found),
                                ctypes.byref(now), ctypes.byref(n)))
        return TIERS[found.value], TIERS[now.value], self._moves(n.value)

    def _moves(self, n):
        moves = []
        for i in range(n):
            m = _Move()
            check(lib.vram_swap_move(self.handle, i, ctypes.byref(m)))
            moves.append((m.key, m.size, TIERS[m.from_], TIERS[m.to]))
        return moves

    def set_gpu_budget(self, gpu_budget):
        """A new GPU budget; a smaller one demotes the least recently used
        items: returns the moves to carry out, as get() does."""
        n = _SZ()
        check(lib.vram_swap_set_gpu_budget(self.handle, parse_size(gpu_budget, "gpu_budget"),
                                           ctypes.byref(n)))
        return self._moves(n.value)

    def remove(self, key):
        check(lib.vram_swap_remove(self.handle, key))

    def where(self, key):
        return TIERS[lib.vram_swap_where(self.handle, key)]

    def check(self):
        check(lib.vram_swap_check(self.handle))

    def stats(self):
        s = _SwapStats()
        check(lib.vram_swap_stats(self.handle, ctypes.byref(s)))
        return _struct_dict(s)
