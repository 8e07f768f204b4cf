"""Devices, the estimator and the planner: thin calls into libvram."""
import ctypes
import math
import numbers
import sys

from . import _lib
from ._lib import lib, check
from .errors import InvalidArgumentError
from .types import Device, Estimate, Plan, gib


class Context:
    """An open device context (vram_ctx_open): the backend chosen by
    VRAM_BACKEND (auto: a real driver, else VRAM_SIM, else the CPU). Closed
    by close(), `with`, or when collected."""

    def __init__(self, backend=None):
        self._h = None
        h = ctypes.c_void_p()
        if backend:
            check(lib.vram_ctx_open_backend(backend.encode(), ctypes.byref(h)), "backend")
        else:
            check(lib.vram_ctx_open(ctypes.byref(h)))
        self._h = h.value

    @property
    def handle(self):
        if not self._h:
            raise ValueError("vram: the context is closed")
        return self._h

    def info(self, index=-1):
        """The JSON document of `vram info --json` (all devices, or one)."""
        return _lib.call_json(lib.vram_info_json, self.handle, index)

    def select(self, need_bytes=0):
        """Index of the best device for need_bytes (vram_device_select)."""
        idx = ctypes.c_int()
        check(lib.vram_device_select(self.handle, parse_size(need_bytes, "need_bytes"),
                                     ctypes.byref(idx)))
        return idx.value

    def close(self):
        if getattr(self, "_h", None):
            lib.vram_ctx_close(self._h)
            self._h = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def device_report(backend=None):
    """(backend, reason, [Device]) in one look."""
    with Context(backend) as ctx:
        doc = ctx.info()
    return doc["backend"], doc["reason"], [Device.from_json(d) for d in doc["devices"]]


def devices(backend=None):
    """The devices of the backend as Device dataclasses (sizes in bytes).
    With no GPU and no VRAM_SIM this is the CPU backend's one device."""
    return device_report(backend)[2]


def print_gpu_info(file=None, backend=None):
    """Prints the devices with their memory, one per line."""
    out = file or sys.stdout
    name, reason, devs = device_report(backend)
    gpus = [d for d in devs if d.is_gpu]
    if not gpus:
        print("No GPU available (%s backend%s); PyTorch work runs on the CPU." %
              (name, ": " + reason if reason else ""), file=out)
    else:
        print("%d GPU%s (%s backend)" % (len(gpus), "" if len(gpus) == 1 else "s", name),
              file=out)
    for d in devs:
        pct = 100.0 * d.used_bytes / d.total_bytes if d.total_bytes and d.used_bytes is not None \
            else 0.0
        print("  [%d] %s: %.2f GiB total, %.2f GiB used (%.1f %%), %.2f GiB free, %s%s" % (
            d.index, d.name or "?", gib(d.total_bytes), gib(d.used_bytes), pct,
            gib(d.free_bytes), d.health,
            ", compute %s" % d.compute_capability if d.compute_capability else ""), file=out)


def _model_request(model, hf_config, profile, settings):
    req = {k: v for k, v in settings.items() if v is not None}
    if model is not None:
        req["model"] = model
    if hf_config is not None:
        req["hf_config"] = str(hf_config)
    if profile is not None:
        req["profile"] = profile.to_dict() if hasattr(profile, "to_dict") else (
            profile if isinstance(profile, dict) else str(profile))
    return req


def estimate(model=None, *, hf_config=None, profile=None, **settings):
    """One GPU's memory for a workload: the bytes `vram estimate` gives for
    the same settings.

    model: a catalog name; or hf_config: a config.json path; or profile: a
    measured profile (vram.torch.analyze(), a dict, or a JSON file path).
    settings: every estimate setting of libvram's table, by its JSON key
    (`vram estimate --help` lists them as flags: --lora-rank is
    lora_rank=16, --zero is zero_stage=3, --quantize-base is
    quantize_base="nf4", --gpu-name is gpu_name="H100"). None leaves a
    setting at its default; an unknown key raises VramError naming it."""
    req = _model_request(model, hf_config, profile, _sized(settings))
    return Estimate.from_json(_lib.call_json(lib.vram_estimate_json, _lib.encode(req)))


def plan(model=None, *, hf_config=None, profile=None, gpu=None, gpu_mem=None, gpu_name=None,
         target=None, power_of_two=None, host=None, **settings):
    """Batch-size recommendations (the knobs of `vram plan`). The device is
    one of gpu= (an index: its free memory now), gpu_mem= (bytes or "24GiB")
    or gpu_name= ("A100-80GB", "L40S"); gpu=0 is the default. host=True:
    the memory is the host's (a CPU run), so each batch is judged by the
    estimate's allocated peak, without a caching allocator's rounding
    (vram_plan_host). settings: as estimate(). Plan.bytes_at(b) is the full
    estimate at batch b."""
    if gpu is None and gpu_mem is None and gpu_name is None:
        gpu = 0
    est = _model_request(model, hf_config, profile, dict(_sized(settings), gpu_name=gpu_name))
    req = dict(est, gpu=gpu, gpu_mem=optional_size(gpu_mem, "gpu_mem"), target=target,
               power_of_two=power_of_two, host=host)
    req = {k: v for k, v in req.items() if v is not None}
    p = Plan.from_json(_lib.call_json(lib.vram_plan_json, _lib.encode(req)))
    p.estimate_request = est
    return p


def batch_table(model=None, *, hf_config=None, profile=None, min_batch_size=None, **settings):
    """The memory per GPU at each batch vramd may grant a job, from
    min_batch_size (default 1) up to batch_size: {batch: bytes}, batches
    increasing, the last one batch_size itself. Each entry is the full
    estimate at that batch; which batches are listed (the smallest for each
    number of accumulation steps, at most what vramd accepts) is libvram's
    choice (vram_estimate_batch_table through vram_batch_table_json): the
    table `vram run`/`vram submit --model ... --min-batch-size` sends.
    Arguments as estimate(). Give it to Client.submit(batch_bytes=...), or
    let Client.submit(estimate=...) build it."""
    req = _model_request(model, hf_config, profile, _sized(settings))
    if min_batch_size is not None:
        req["min_batch_size"] = min_batch_size
    doc = _lib.call_json(lib.vram_batch_table_json, _lib.encode(req))
    return {e["batch"]: e["bytes"] for e in doc["batch_bytes"]}


def _sized(settings):
    """The size settings through the one size parser (errors name the argument)."""
    return {k: optional_size(v, k) if k == "overhead_bytes" else v for k, v in settings.items()}


_U64_MAX = (1 << 64) - 1


def parse_size(value, name="size"):
    """Bytes from a size argument: an int (or a float holding a whole
    number, such as 2e9) of bytes, or text libvram's parser reads
    (vram_parse_size: "512", "64KiB", "20GiB", "1.5GB"). Every size argument
    of the package comes through here; `name` is the argument's, and every
    error (vram.InvalidArgumentError, a ValueError) starts with it: a bool,
    a negative or fractional number, a value past 2^64 - 1 bytes, text that
    is not a size, anything else."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str, bytes)):
        raise InvalidArgumentError("%s: %r is not a size (give bytes as an int, or text such "
                                   "as \"24GiB\")" % (name, value))
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or value != int(value):
            raise InvalidArgumentError("%s: %r is not a whole number of bytes (write units as "
                                       "text: \"%sGiB\")" % (name, value, value))
        value = int(value)
    if isinstance(value, numbers.Integral):
        value = int(value)
        if value < 0:
            raise InvalidArgumentError("%s: %d bytes is negative" % (name, value))
        if value > _U64_MAX:
            raise InvalidArgumentError("%s: %d bytes is too large (at most 2^64 - 1)" %
                                       (name, value))
        return value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    out = ctypes.c_uint64()
    lib.vram_clear_error()
    check(lib.vram_parse_size(text.encode("utf-8", "replace"), ctypes.byref(out)), name)
    return out.value


def optional_size(value, name):
    """parse_size, passing None through (an argument left unset)."""
    return None if value is None else parse_size(value, name)
