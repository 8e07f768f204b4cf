"""analyze(): measures a real nn.Module's memory on the CPU and returns a
profile that `vram plan --profile` and vram.plan(profile=...) accept.

What is measured, by running real training steps:
- parameters (all, numel) and buffers (bytes), from the module;
- activations saved for backward: unique storages seen by
  torch.autograd.graph.saved_tensors_hooks during forward + loss, with the
  parameters and buffers excluded and the inputs included, at two batch
  sizes; per sample = the slope, fixed = the intercept;
- batch gradients: what forward and backward hold at once beyond the saved
  activations (the gradients with respect to activations, the kernels'
  temporaries, and the parameters' gradients backward has made by then),
  from the CPU allocator's own events (torch.profiler, profile_memory)
  over each forward + backward, at b1, b2 and 4 * b2; per sample and fixed
  through the larger two (small batches are ruled by fixed-size
  transients). The parameters' gradients are absent before (None), as
  zero_grad(set_to_none=True), PyTorch 2's default, leaves them: backward
  makes them while the earlier layers' activations are still saved;
- the same at b2 with the gradients of the step before kept (accumulation):
  what the step then holds less is the gradients backward had made by its
  peak (backward_gradient_bytes), which the planner counts once;
- gradients of trainable parameters after backward, and optimizer states
  after one step of the real optimizer (unique storages).
The module's weights, gradients and mode are restored afterwards."""
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import List

import torch

log = logging.getLogger("vram")
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass
class Profile:
    """A measured profile. The first six fields are the profile format of
    `vram plan --profile` (docs/estimation.md); the rest are the other
    measurements, kept in the JSON for people (the planner ignores them)."""
    name: str
    parameters: int
    buffers_bytes: int
    activation_bytes_per_sample: int
    activation_bytes_fixed: int
    dtype: str
    precision: str = "fp32"  # the training precision the planner should assume
    trainable_parameters: int = 0
    parameter_bytes: int = 0
    gradient_bytes: int = 0
    optimizer: str = ""
    optimizer_state_bytes: int = 0
    input_bytes_per_sample: int = 0
    # read by the planner as the backward pass's transient memory
    backward_bytes_per_sample: int = 0
    backward_bytes_fixed: int = 0
    # the parameter gradients backward has made by its peak (part of the
    # above): when gradients are kept from an earlier micro-batch the
    # planner counts them all already, and backward adds into them
    backward_gradient_bytes: int = 0
    batch_sizes: List[int] = field(default_factory=list)
    activation_bytes: List[int] = field(default_factory=list)  # measured, per batch size
    backward_bytes: List[int] = field(default_factory=list)  # at b1, b2 and 4 * b2
    device: str = "cpu"  # where it was measured: "cpu" or "meta"

    def to_dict(self):
        return asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2)

    def save(self, path):
        with open(path, "w") as f:
            f.write(self.to_json() + "\n")

    @classmethod
    def load(cls, path):
        with open(path) as f:
            d = json.load(f)
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def activation_bytes_at(self, batch):
        return self.activation_bytes_fixed + batch * self.activation_bytes_per_sample

    def backward_bytes_at(self, batch):
        return self.backward_bytes_fixed + batch * self.backward_bytes_per_sample


def storage_of(t):
    """(identity, bytes) of a tensor's storage: the unit memory is counted
    in. The identity is the storage's Python object, which PyTorch keeps
    one of per storage while it lives (meta tensors have storages too, but
    their data pointers are all 0); a caller keeping the identity keeps the
    storage object, so it is never confused with a later one."""
    st = t.untyped_storage()
    return st, st.nbytes()


def is_wrapped_number(t):
    """A Python number autograd saved as a 0-dim tensor (`x / 2.0` saves 2.0
    as a float64 scalar since torch 2): host memory, never on the device,
    and saved without calling the saved-tensor hooks. PyTorch has no public
    test for the flag, so this is its visible signature: a 0-dim CPU tensor
    of Python's number types that no graph produced."""
    return (t.dim() == 0 and t.device.type == "cpu" and t.grad_fn is None and
            not t.requires_grad and t.dtype in (torch.float64, torch.int64, torch.complex128,
                                                torch.bool))


def allocated_peak_bytes(run):
    """Calls run() and returns the most bytes it allocated and held at
    once, from the CPU allocator's allocation and free events
    (torch.profiler with profile_memory; blocks freed in run() that were
    allocated before it are not reported, so this is what run() adds).
    The events are read from the profiler's public export, the Chrome trace
    (its "[memory]" instant events, each with the signed "Bytes" and the
    "Device Type", 0 being the CPU): the profiler's own event list keeps
    only the sums per operation, which hide what an operation frees before
    it returns."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    with tempfile.TemporaryDirectory(prefix="vram-trace-") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    memory = [e for e in events if e.get("name") == "[memory]" and
              e.get("args", {}).get("Device Type") == 0]
    live = peak = 0
    for e in sorted(memory, key=lambda e: e["ts"]):  # stable: ties keep the trace's order
        live += e["args"]["Bytes"]
        peak = max(peak, live)
    return peak


def step_bytes(model, make_batch, loss_fn, forward=None, peak_bytes=allocated_peak_bytes):
    """One forward + loss + backward of `model` on make_batch() (made inside
    the measured run, as a real step's batch is there while it runs):
    (saved, extra, input_bytes): the bytes of the activations saved for
    backward (inputs included), what the step held at once beyond them (its
    peak less the saved bytes: backward's transients, the parameters'
    gradients made by then, forward's own temporaries, inputs not saved)
    and the batch's bytes. The saved bytes are counted in a forward of
    their own (saved_activation_bytes), the peak in a plain step without
    the hooks. peak_bytes(run) measures run()'s peak (the CPU
    allocator's events; meta.live_peak_bytes on the meta device). The
    parameter gradients present before (None after set_to_none, else kept
    ones that backward adds into) are the caller's."""
    forward = forward or call_model
    batch = make_batch()
    inputs = sum(storage_of(t)[1] for t in tensors_in(batch))
    saved, loss = saved_activation_bytes(model, batch, loss_fn, forward)
    del batch, loss  # unused: a step under the hooks peaks higher than a plain one

    def run():
        batch = make_batch()
        loss = loss_fn(forward(model, batch), batch)
        del batch
        loss.backward()
    return saved, max(0, peak_bytes(run) - saved), inputs


def tensors_in(obj):
    """Every tensor inside nested tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_in(v)


def resize_batch(example, batch):
    """The example batch with `batch` rows along dim 0, repeating its rows
    (tensors, and tensors in tuples/lists/dicts; other values unchanged)."""
    if callable(example):
        return example(batch)
    if isinstance(example, torch.Tensor):
        if example.dim() == 0:
            return example
        reps = -(-batch // example.shape[0])
        return example.repeat((reps,) + (1,) * (example.dim() - 1))[:batch].clone()
    if isinstance(example, dict):
        return {k: resize_batch(v, batch) for k, v in example.items()}
    if isinstance(example, (list, tuple)):
        return type(example)(resize_batch(v, batch) for v in example)
    return example


def call_model(model, batch):
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


def default_loss(output, batch):
    """Mean square of the first floating output: keeps the output for backward
    like a real loss and works for any module."""
    for t in tensors_in(output):
        if t.is_floating_point() and t.requires_grad:
            return t.float().pow(2).mean()
    raise ValueError("vram.torch.analyze: the model's output has no tensor requiring grad; "
                     "pass loss_fn=")


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=1e-3),
    "momentum": lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
}


def make_optimizer(optimizer, params):
    """A real optimizer from a name (sgd, momentum, adam, adamw), a class or
    a factory taking the parameters."""
    if isinstance(optimizer, str):
        try:
            return OPTIMIZERS[optimizer](params)
        except KeyError:
            raise ValueError("vram.torch: unknown optimizer %r (use %s, or pass a class)" % (
                optimizer, ", ".join(OPTIMIZERS))) from None
    return optimizer(params)


def optimizer_name(optimizer):
    if isinstance(optimizer, str):
        return optimizer
    name = getattr(optimizer, "__name__", type(optimizer).__name__).lower()
    return {"sgd": "sgd", "adam": "adam", "adamw": "adamw"}.get(name, name)


def _excluded_storages(model):
    return {storage_of(t)[0] for t in list(model.parameters()) + list(model.buffers())}


def saved_activation_bytes(model, batch, loss_fn, forward=call_model):
    """Forward + loss under saved_tensors_hooks: the bytes of the unique
    storages autograd keeps for backward (parameters and buffers excluded),
    and the loss (for backward)."""
    excluded = _excluded_storages(model)
    saved = {}

    def pack(t):
        ptr, nbytes = storage_of(t)
        if ptr not in excluded and nbytes:
            saved[ptr] = max(saved.get(ptr, 0), nbytes)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(forward(model, batch), batch)
    return sum(saved.values()), loss


def graph_saved_bytes(loss, model):
    """A second, independent count of the same thing: walks the autograd
    graph from `loss` and sums the unique storages of the nodes' _saved_*
    tensors (parameters and buffers excluded). For tests and checks."""
    excluded = _excluded_storages(model)
    seen_nodes, saved, stack = set(), {}, [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen_nodes:
            continue
        seen_nodes.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:  # freed or not a tensor
                continue
            for t in tensors_in(value if isinstance(value, (list, tuple)) else [value]):
                if is_wrapped_number(t):  # the hooks never see these either
                    continue
                ptr, nbytes = storage_of(t)
                if ptr not in excluded and nbytes:
                    saved[ptr] = max(saved.get(ptr, 0), nbytes)
        stack.extend(n for n, _ in node.next_functions)
    return sum(saved.values())


def analyze(model, example_batch, loss_fn=None, optimizer="adamw", precision="fp32",
            batch_sizes=(2, 4), name=None, forward=None, device="cpu"):
    """Measures `model` (an nn.Module on the CPU) with real training steps
    (what and how: this module's docstring, docs/python.md).

    example_batch: a tensor, a tuple/list/dict of tensors (batch along dim
    0; rows are repeated to reach the measured sizes), or a function
    batch_size -> batch. forward(model, batch) -> output (default: the batch
    as the arguments: model(*batch), model(**batch) or model(batch); for an
    (inputs, targets) pair use forward=lambda m, b: m(b[0])).
    loss_fn(output, batch) -> scalar (default: mean square of the output).
    optimizer: "sgd", "momentum", "adam", "adamw", a torch.optim class or a
    factory. precision is recorded for the planner ("fp32" measures in
    fp32; the planner scales activations for amp-*). device="meta"
    measures a data-less copy on the meta device (no memory, no arithmetic)
    and falls back to the CPU, logging why, where an op has no meta kernel.
    Returns a Profile; vram.plan(profile=p, ...) and `vram plan --profile
    FILE` (after p.save(FILE)) accept it."""
    b1, b2 = sorted(batch_sizes)
    if not (1 <= b1 < b2):
        raise ValueError("vram.torch.analyze: batch_sizes must be two different sizes >= 1")
    if device not in ("cpu", "meta"):
        raise ValueError("vram.torch.analyze: device must be \"cpu\" or \"meta\", not %r" % (
            device,))
    # backward's peak is the largest of several transients, some of a fixed
    # size (a parameter's gradient in flight) that win at small batches: its
    # line is taken between b2 and a larger b3, where the batch's part rules
    sizes = (b1, b2, 4 * b2)
    loss_fn = loss_fn or default_loss
    forward = forward or call_model
    measured = None
    if device == "meta":
        from . import meta
        try:
            measured = _measure(meta.meta_copy(model), example_batch, loss_fn, forward,
                                optimizer, sizes, meta.to_meta, meta.live_peak_bytes)
        except (NotImplementedError, RuntimeError) as e:
            log.warning("vram.torch.analyze: measuring %s on the CPU: the meta device cannot "
                        "run it (%s)", name or type(model).__name__,
                        str(e).strip().splitlines()[0][:200])
            device = "cpu"
    if measured is None:
        measured = _measure_restoring(model, example_batch, loss_fn, forward, optimizer, sizes)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    dtype = next((p.dtype for p in params if p.is_floating_point()), torch.float32)
    per_sample, fixed = _line(measured["acts"], b1, b2)
    bwd_per_sample, bwd_fixed = _line(measured["bwds"][1:], b2, sizes[2])
    return Profile(
        name=name or type(model).__name__,
        parameters=sum(p.numel() for p in params),
        buffers_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        activation_bytes_per_sample=per_sample, activation_bytes_fixed=fixed,
        dtype=_DTYPE_NAMES.get(dtype, "fp32"), precision=precision,
        trainable_parameters=sum(p.numel() for p in trainable),
        parameter_bytes=sum(p.numel() * p.element_size() for p in params),
        gradient_bytes=measured["grad_bytes"], optimizer=optimizer_name(optimizer),
        optimizer_state_bytes=measured["state_bytes"],
        input_bytes_per_sample=(measured["inputs"][1] - measured["inputs"][0]) // (b2 - b1),
        backward_bytes_per_sample=bwd_per_sample, backward_bytes_fixed=bwd_fixed,
        backward_gradient_bytes=measured["bwd_grads"], batch_sizes=[b1, b2],
        activation_bytes=measured["acts"], backward_bytes=measured["bwds"], device=device)


def _measure_restoring(model, example_batch, loss_fn, forward, optimizer, sizes):
    """_measure on the model itself (CPU), restoring its weights, buffers,
    gradients and train/eval mode afterwards."""
    params = list(model.parameters())
    was_training = model.training
    weights = [p.detach().clone() for p in params]
    buffers = [b.detach().clone() for b in model.buffers()]
    old_grads = [p.grad for p in params]
    try:
        return _measure(model, example_batch, loss_fn, forward, optimizer, sizes,
                        lambda batch: batch, allocated_peak_bytes)
    finally:
        with torch.no_grad():
            for p, w, g in zip(params, weights, old_grads):
                p.copy_(w)
                p.grad = g
            for b, w in zip(model.buffers(), buffers):
                b.copy_(w)
        model.train(was_training)


def _measure(model, example_batch, loss_fn, forward, optimizer, sizes, place, peak_bytes):
    """Training steps at the batch sizes (b1, b2, b3): saved activations and
    input bytes at b1 and b2, the step's bytes beyond them at all three
    (step_bytes, the parameter gradients None before each, as PyTorch 2's
    zero_grad leaves them), then gradient and optimizer-state bytes.
    place(batch) moves a batch to the model's device; peak_bytes(run)
    measures a run's peak."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    acts, bwds, inputs = [], [], []
    model.train()
    for b in sizes:
        for p in model.parameters():
            p.grad = None
        act, extra, nbytes = step_bytes(
            model, lambda: place(resize_batch(example_batch, b)), loss_fn, forward, peak_bytes)
        if b != sizes[2]:
            inputs.append(nbytes)
            acts.append(act)
        bwds.append(extra)
    # at b2 again with the gradients of the last step kept (accumulation,
    # set_to_none=False): backward adds into them, so the step holds less
    # beyond its saved activations by the gradients it made by its peak
    _, kept, _ = step_bytes(model, lambda: place(resize_batch(example_batch, sizes[1])),
                            loss_fn, forward, peak_bytes)
    grads = dict(storage_of(p.grad) for p in trainable if p.grad is not None)
    opt = make_optimizer(optimizer, trainable)
    opt.step()
    states = {}
    for st in opt.state.values():
        for t in tensors_in(st):
            if t.dim() > 0:  # scalar step counters are not memory
                key, n = storage_of(t)
                states[key] = n
    return {"acts": acts, "bwds": bwds, "inputs": inputs, "grad_bytes": sum(grads.values()),
            "state_bytes": sum(states.values()), "bwd_grads": max(0, bwds[1] - kept)}


def _line(measured, b1, b2):
    """(per sample, fixed) through two measurements at batch sizes b1 < b2."""
    per_sample = max(0, (measured[1] - measured[0]) // (b2 - b1))
    return per_sample, max(0, measured[0] - per_sample * b1)
