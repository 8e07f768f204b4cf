"""analyze(): measures a real nn.Module's memory on the CPU and returns a
profile that `vram plan --profile` and vram.plan(profile=...) accept.

What is measured, by running real training steps:
- parameters (all, numel) and buffers (bytes), from the module;
- activations saved for backward: unique storages seen by
  torch.autograd.graph.saved_tensors_hooks during forward + loss, with the
  parameters and buffers excluded and the inputs included, at two batch
  sizes; per sample = the slope, fixed = the intercept;
- gradients of trainable parameters after backward, and optimizer states
  after one step of the real optimizer (unique storages).
The module's weights, gradients and mode are restored afterwards."""
import json
from dataclasses import asdict, dataclass, field
from typing import List

import torch

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
    batch_sizes: List[int] = field(default_factory=list)
    activation_bytes: List[int] = field(default_factory=list)  # measured, per batch size

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


def storage_of(t):
    """(address, bytes) of a tensor's storage: the unit memory is counted in."""
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()  # torch < 2
    return st.data_ptr(), st.nbytes()


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
                ptr, nbytes = storage_of(t)
                if ptr not in excluded and nbytes:
                    saved[ptr] = max(saved.get(ptr, 0), nbytes)
        stack.extend(n for n, _ in node.next_functions)
    return sum(saved.values())


def analyze(model, example_batch, loss_fn=None, optimizer="adamw", precision="fp32",
            batch_sizes=(2, 4), name=None, forward=None):
    """Measures `model` (an nn.Module on the CPU) with real training steps.

    example_batch: a tensor, a tuple/list/dict of tensors (batch along dim
    0; rows are repeated to reach the measured sizes), or a function
    batch_size -> batch. forward(model, batch) -> output (default: the batch
    as the arguments: model(*batch), model(**batch) or model(batch); for an
    (inputs, targets) pair use forward=lambda m, b: m(b[0])).
    loss_fn(output, batch) -> scalar (default: mean square of the output). optimizer: "sgd", "momentum", "adam", "adamw", a
    torch.optim class or a factory. precision is recorded for the planner
    ("fp32" measures in fp32; the planner scales activations for amp-*).
    Returns a Profile; vram.plan(profile=p, ...) and `vram plan --profile
    FILE` (after p.save(FILE)) accept it."""
    b1, b2 = sorted(batch_sizes)
    if not (1 <= b1 < b2):
        raise ValueError("vram.torch.analyze: batch_sizes must be two different sizes >= 1")
    loss_fn = loss_fn or default_loss
    forward = forward or call_model
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    dtype = next((p.dtype for p in params if p.is_floating_point()), torch.float32)
    was_training = model.training
    weights = [p.detach().clone() for p in params]
    buffers = [b.detach().clone() for b in model.buffers()]
    old_grads = [p.grad for p in params]
    acts = []
    grad_bytes = state_bytes = input_per_sample = 0
    try:
        model.train()
        for p in params:
            p.grad = None
        inputs = []
        for b in (b1, b2):
            batch = resize_batch(example_batch, b)
            inputs.append(sum(storage_of(t)[1] for t in tensors_in(batch)))
            act, loss = saved_activation_bytes(model, batch, loss_fn, forward)
            acts.append(act)
            loss.backward()
            del loss
        grads = {storage_of(p.grad)[0]: storage_of(p.grad)[1] for p in trainable
                 if p.grad is not None}
        grad_bytes = sum(grads.values())
        opt = make_optimizer(optimizer, trainable)
        opt.step()
        states = {}
        for st in opt.state.values():
            for t in tensors_in(st):
                if t.dim() > 0:  # scalar step counters are not memory
                    ptr, n = storage_of(t)
                    states[ptr] = n
        state_bytes = sum(states.values())
        input_per_sample = (inputs[1] - inputs[0]) // (b2 - b1)
        del opt
    finally:
        with torch.no_grad():
            for p, w, g in zip(params, weights, old_grads):
                p.copy_(w)
                p.grad = g
            for b, w in zip(model.buffers(), buffers):
                b.copy_(w)
        model.train(was_training)
    per_sample = max(0, (acts[1] - acts[0]) // (b2 - b1))
    fixed = max(0, acts[0] - per_sample * b1)
    return Profile(
        name=name or type(model).__name__,
        parameters=sum(p.numel() for p in params),
        buffers_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        activation_bytes_per_sample=per_sample, activation_bytes_fixed=fixed,
        dtype=_DTYPE_NAMES.get(dtype, "fp32"), precision=precision,
        trainable_parameters=sum(p.numel() for p in trainable),
        parameter_bytes=sum(p.numel() * p.element_size() for p in params),
        gradient_bytes=grad_bytes, optimizer=optimizer_name(optimizer),
        optimizer_state_bytes=state_bytes, input_bytes_per_sample=input_per_sample,
        batch_sizes=[b1, b2], activation_bytes=acts)
