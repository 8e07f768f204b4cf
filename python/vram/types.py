"""Plain dataclasses of the package. Sizes are bytes (int); None where the
device cannot tell. `raw` keeps the library's JSON for keys added later."""
from dataclasses import dataclass, field
from typing import List, Optional


def gib(n):
    return (n or 0) / (1 << 30)


@dataclass
class Process:
    pid: int
    name: Optional[str]
    used_bytes: Optional[int]
    user: Optional[str] = None     # login name of the owner
    command: Optional[str] = None  # command line


@dataclass
class Device:
    index: int
    name: Optional[str]
    uuid: Optional[str]
    backend: str
    total_bytes: Optional[int]
    used_bytes: Optional[int]
    free_bytes: Optional[int]
    compute_capability: Optional[str]
    multiprocessors: Optional[int]
    utilization_pct: Optional[int]
    temperature_c: Optional[int]
    power_w: Optional[float]
    health: str
    error: Optional[str]
    processes: Optional[List[Process]]

    @property
    def is_gpu(self):
        return self.backend != "cpu"

    @classmethod
    def from_json(cls, d):
        procs = d.get("processes")
        kw = {k: d.get(k) for k in cls.__dataclass_fields__}
        kw["processes"] = None if procs is None else [Process(**p) for p in procs]
        return cls(**kw)


@dataclass
class Estimate:
    """Memory per GPU of a workload (vram_estimate)."""
    model: str
    family: str
    parameters_count: int
    mode: str
    batch_size: int
    seq_len: int
    image_size: int
    precision: str
    optimizer: str
    parameters: int
    buffers: int
    gradients: int
    optimizer_states: int
    activations: int
    kv_cache: int
    overhead: int
    total: int
    # what a real GPU adds (docs/estimation.md), and the three figures people
    # measure: allocated at the peak, reserved by the allocator, nvidia-smi
    autocast_cache: int = 0
    backward_temps: int = 0
    optimizer_temps: int = 0
    workspaces: int = 0
    allocator_rounding: int = 0
    cuda_context: int = 0
    allocated_peak: int = 0
    reserved: int = 0
    nvidia_smi: int = 0
    # the same parts as they are at the peak: they add up to total
    at_peak: dict = field(default_factory=dict)
    raw: dict = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, d):
        kw = {k: d[k] for k in ("model", "family", "parameters_count", "mode", "batch_size",
                                "seq_len", "image_size", "precision", "optimizer")}
        kw.update(d["bytes"])
        return cls(raw=d, at_peak=dict(d.get("at_peak", {})), **kw)


@dataclass
class Suggestion:
    change: str
    description: str
    saving_bytes: int
    fits: bool


@dataclass
class Plan:
    """Batch-size recommendations on a device (vram_plan)."""
    model: str
    gpu: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    target: float
    budget_bytes: int
    model_bytes: int  # at batch 1, the peak without what the batch scales
    maximum: int
    recommended: int
    safe: int
    largest_fitting: int
    batch_size: Optional[int] = None  # the judged batch, when one was given
    fits: Optional[bool] = None
    verdict: Optional[str] = None  # "fits", "tight" or "will not fit"
    current_bytes: Optional[int] = None
    micro_batch_size: Optional[int] = None
    accumulation_steps: Optional[int] = None
    suggestions: List[Suggestion] = field(default_factory=list)
    shown_batch: Optional[int] = None  # the batch `vram plan` shows, and its full estimate
    shown_bytes: Optional[int] = None
    raw: dict = field(repr=False, default_factory=dict)
    estimate_request: Optional[dict] = field(repr=False, default=None)

    @classmethod
    def from_json(cls, d):
        g, r, cur = d["gpu"], d["recommendations"], d.get("current") or {}
        return cls(model=d["model"], gpu=g["name"], total_bytes=g["total_bytes"],
                   used_bytes=g["used_bytes"], free_bytes=g["free_bytes"], target=d["target"],
                   budget_bytes=d["budget_bytes"], model_bytes=d["model_bytes"],
                   maximum=r["maximum"],
                   recommended=r["recommended"], safe=r["safe"],
                   largest_fitting=r["largest_fitting"], batch_size=cur.get("batch_size"),
                   fits=cur.get("fits"), verdict=cur.get("verdict"),
                   current_bytes=cur.get("total_bytes"),
                   micro_batch_size=cur.get("micro_batch_size"),
                   accumulation_steps=cur.get("accumulation_steps"),
                   suggestions=[Suggestion(**s) for s in d.get("suggestions", [])],
                   shown_batch=d.get("shown", {}).get("batch_size"),
                   shown_bytes=d.get("shown", {}).get("total_bytes"), raw=d)

    def bytes_at(self, batch):
        """The memory at `batch`: the full estimate there with the plan's
        settings (vram_estimate_at_batch's figure), never a slope."""
        if self.estimate_request is None:
            raise ValueError("vram: this plan was not made by vram.plan(); use vram.estimate()")
        from .api import estimate
        req = dict(self.estimate_request, batch_size=int(batch))
        return estimate(**req).total

    def batch_table(self, batch_size, min_batch_size=None):
        """vram.batch_table() with the plan's settings at batch_size: the
        memory at each batch vramd may grant, down to min_batch_size."""
        if self.estimate_request is None:
            raise ValueError("vram: this plan was not made by vram.plan(); use vram.batch_table()")
        from .api import batch_table
        return batch_table(**dict(self.estimate_request, batch_size=int(batch_size)),
                           min_batch_size=min_batch_size)


@dataclass
class PoolStats:
    """The pool's counters (PyTorch memory_stats meanings), for all blocks."""
    allocated_bytes: int
    allocated_bytes_peak: int
    reserved_bytes: int
    reserved_bytes_peak: int
    requested_bytes: int
    active_allocations: int
    segments: int
    num_alloc_retries: int
    num_ooms: int
    num_device_alloc: int
    num_device_free: int
    num_invalid_frees: int
    largest_free_block: int
    limit_bytes: int
    fragmentation: float
    efficiency: float
    raw: dict = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, s):
        return cls(allocated_bytes=s["allocated_bytes.all.current"],
                   allocated_bytes_peak=s["allocated_bytes.all.peak"],
                   reserved_bytes=s["reserved_bytes.all.current"],
                   reserved_bytes_peak=s["reserved_bytes.all.peak"],
                   requested_bytes=s["requested_bytes.all.current"],
                   active_allocations=s["allocation.all.current"],
                   segments=s["segment.all.current"],
                   **{k: s[k] for k in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                                        "num_device_free", "num_invalid_frees",
                                        "largest_free_block", "limit_bytes", "fragmentation",
                                        "efficiency")}, raw=s)


@dataclass
class Job:
    """A vramd job (GET /v1/jobs/{id}); `raw` has every key of the API."""
    id: int
    name: str
    state: str
    mem_bytes: int
    gpus: int
    devices: List[int]
    reserved_bytes: int
    batch_size: int
    granted_batch_size: int
    grad_accum: int
    queue_position: int
    error: str
    exit_status: Optional[int]
    peak_bytes: Optional[int] = None  # largest peak the job reported; None: never
    raw: dict = field(repr=False, default_factory=dict)

    @property
    def active(self):
        return self.state in ("queued", "running")

    @classmethod
    def from_json(cls, d):
        return cls(id=d["id"], name=d.get("name", ""), state=d["state"],
                   mem_bytes=d.get("mem_bytes", 0), gpus=d.get("gpus", 1),
                   devices=d.get("devices") or [], reserved_bytes=d.get("reserved_bytes") or 0,
                   batch_size=d.get("batch_size") or 0,
                   granted_batch_size=d.get("granted_batch_size") or 0,
                   grad_accum=d.get("grad_accum") or 0,
                   queue_position=d.get("queue_position") or 0, error=d.get("error") or "",
                   exit_status=d.get("exit_status"), peak_bytes=d.get("peak_bytes"), raw=d)
