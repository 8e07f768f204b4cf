"""vram.torch.optimize(): applies what `vram plan` suggests to a real
nn.Module where the installed PyTorch supports it, and reports what each step
saved as measured by analyze() before and after it.

Steps: activation checkpointing of repeated blocks (the model's own
gradient_checkpointing_enable() when it has one, as Hugging Face models do,
torch.utils.checkpoint around repeated submodules otherwise), channels_last
for convolutional models, precision (an autocast wrapper for "mixed", a cast
for "fp16"/"bf16", dynamic int8 quantization of Linear layers for inference),
L1 pruning when asked. A step that does not apply is refused with the reason,
never faked."""
import copy
import functools
import types
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.utils.checkpoint

from .analyze import analyze

LEVELS = ("none", "basic", "aggressive")
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "mixed")


# What _measure() adds up, for the report.
MEASURED = ("training-step peak at batch %d by analyze(): parameters, buffers, and the larger of "
            "the saved activations with what the step makes beyond them (the gradients made by "
            "then included) and every gradient")


def _mib(n):
    """Bytes as MiB, with enough digits that a change is never shown as 0.0."""
    mib = n / 2**20
    return "%.1f MiB" % mib if abs(mib) >= 0.05 or n == 0 else "%.3f MiB" % mib


@dataclass
class Step:
    name: str
    applied: bool
    reason: str = ""
    saved_bytes: Optional[int] = None  # before - after (negative: it grew); None: not measured
    bytes_before: Optional[int] = None  # the measured figure (Report.measured) before the step
    bytes_after: Optional[int] = None  # and after it
    not_measured: str = ""  # why an applied step has no figures

    def measurement(self):
        """What was measured for this step, in words."""
        if self.saved_bytes is None:
            return "not measured (%s)" % self.not_measured if self.applied else ""
        change = ("saved %s" % _mib(self.saved_bytes) if self.saved_bytes > 0 else
                  "grew %s" % _mib(-self.saved_bytes) if self.saved_bytes < 0 else "no change")
        return "%s -> %s, %s" % (_mib(self.bytes_before), _mib(self.bytes_after), change)


@dataclass
class Report:
    steps: List[Step] = field(default_factory=list)
    bytes_before: Optional[int] = None
    bytes_after: Optional[int] = None
    measured: str = ""  # what bytes_before/after and each step's figures are; "" not measured

    def __str__(self):
        lines = []
        for s in self.steps:
            figure = s.measurement()
            lines.append("%-14s %s%s%s" % (s.name, "applied" if s.applied else "refused",
                                           ": " + s.reason if s.reason else "",
                                           "; " + figure if figure else ""))
        if self.measured:
            lines.append("(measured: %s)" % self.measured)
        return "\n".join(lines)


def _checkpointed_forward(self, *args, **kwargs):
    """The forward of a block checkpointed in place: under
    torch.utils.checkpoint (non-reentrant) while training with grad, its
    activations are recomputed in backward instead of kept."""
    inner = functools.partial(type(self).forward, self)
    if self.training and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(inner, *args, use_reentrant=False, **kwargs)
    return inner(*args, **kwargs)


def checkpoint_in_place(block):
    """Checkpoints `block` by giving the module itself a checkpointed forward
    (a method bound to it, so copy.deepcopy rebinds it to the copy). The
    block stays where it was, under its own class: its state_dict keys do
    not change, and containers that read their children's attributes keep
    working (torch 2's nn.TransformerEncoder reads layers[0].self_attn to
    choose its fast path, which a wrapper module hides)."""
    block.forward = types.MethodType(_checkpointed_forward, block)
    return block


class Autocast(torch.nn.Module):
    """Runs the wrapped model under torch.autocast (mixed precision)."""

    def __init__(self, model, device_type, dtype):
        super().__init__()
        self.model, self.device_type, self.dtype = model, device_type, dtype

    def forward(self, *args, **kwargs):
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(*args, **kwargs)


def _repeated_blocks(model):
    """(container, name) of children that repeat: two or more children of one
    class with submodules of their own, in a Sequential or ModuleList (ResNet
    stages, transformer layer stacks). Outermost first; no nesting."""
    found, taken = [], set()
    for cname, container in model.named_modules():
        if any(cname == t or cname.startswith(t + ".") for t in taken):
            continue
        if not isinstance(container, (torch.nn.Sequential, torch.nn.ModuleList)):
            continue
        kinds = {}
        for name, child in container.named_children():
            if any(True for _ in child.children()):
                kinds.setdefault(type(child), []).append(name)
        for names in kinds.values():
            if len(names) >= 2:
                for n in names:
                    found.append((container, n))
                    taken.add((cname + "." if cname else "") + n)
    return found


def _checkpointing(model):
    if hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable()
        return model, "the model's gradient_checkpointing_enable()"
    blocks = _repeated_blocks(model)
    if not blocks:
        raise _Refused("no repeated blocks to checkpoint")
    for container, name in blocks:
        checkpoint_in_place(getattr(container, name))
    return model, "torch.utils.checkpoint around %d repeated blocks" % len(blocks)


def _channels_last(model):
    if not any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
        raise _Refused("no Conv2d layers")
    return model.to(memory_format=torch.channels_last), "weights in channels_last"


def _precision(model, precision, device_type, inference):
    if precision == "fp32":
        raise _Refused("already fp32")
    if precision == "int8":
        if not inference:
            raise _Refused("dynamic int8 quantization is for inference (inference=True)")
        quant = getattr(getattr(torch, "ao", None), "quantization", None)
        if quant is None or not hasattr(quant, "quantize_dynamic"):
            raise _Refused("torch %s has no torch.ao.quantization.quantize_dynamic" %
                           torch.__version__)
        engines = torch.backends.quantized.supported_engines
        if not any(e in engines for e in ("fbgemm", "qnnpack", "x86")):
            raise _Refused("no quantized engine in torch %s" % torch.__version__)
        return (quant.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8),
                "Linear layers quantized to int8 (dynamic)")
    if precision == "mixed":
        dtype = torch.bfloat16 if device_type == "cpu" else torch.float16
        return Autocast(model, device_type, dtype), "autocast to %s" % str(dtype)[6:]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    if not kernels_run(dtype, device_type):
        raise _Refused("%s matmuls or convolutions do not run on %s in torch %s; use bf16 or "
                       "mixed" % (precision, device_type, torch.__version__))
    return model.to(dtype), "parameters cast to %s" % precision


def kernels_run(dtype, device_type):
    """Whether a matmul and a convolution of `dtype` run on `device_type`
    (torch 1.13 had no float16 CPU kernels; torch 2 has them): asked of
    PyTorch itself on 2x2 tensors rather than assumed from a version."""
    try:
        a = torch.ones(2, 2, dtype=dtype, device=device_type)
        a @ a
        torch.nn.functional.conv2d(a[None, None], a[None, None])
        return True
    except (RuntimeError, NotImplementedError):
        return False


def _prune(model, amount):
    from torch.nn.utils import prune
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    if not layers:
        raise _Refused("no Linear or Conv2d layers")
    for m in layers:
        prune.l1_unstructured(m, "weight", amount=amount)
        prune.remove(m, "weight")
    return model, "%.0f %% of each weight zeroed by magnitude (dense storage: no bytes saved)" % (
        100 * amount)


class _Refused(Exception):
    pass


def _measure(model, example_batch, loss_fn, forward, batch):
    """The training step's peak at `batch` as analyze() measures it (MEASURED):
    what autocast saves is in the activations and backward's transient, what
    it adds (low-precision copies of the weights, saved for backward) too."""
    p = analyze(model, example_batch, loss_fn=loss_fn, forward=forward, optimizer="sgd")
    param_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    # as the planner reads a profile: the step holds the saved activations and
    # what it makes beyond them (the gradients made by then included), or,
    # after backward, every gradient
    return param_bytes + p.buffers_bytes + max(
        p.activation_bytes_at(batch) + p.backward_bytes_at(batch), p.gradient_bytes)


def optimize(model, level="basic", precision=None, checkpointing=None, channels_last=None,
             prune=0.0, inference=False, example_batch=None, loss_fn=None, forward=None,
             device_type=None, copy_model=False):
    """Applies the memory optimizations of `level` ("none", "basic":
    checkpointing + channels_last, "aggressive": also mixed precision);
    precision / checkpointing / channels_last / prune override the level.
    With example_batch (as for analyze()), every applied step is measured by
    analyze() before and after it. Returns (model, Report): the model may be
    a new module (autocast wrapper, quantized copy); copy_model=True leaves
    the argument untouched."""
    if level not in LEVELS:
        raise ValueError("vram.torch.optimize: level must be one of %s, not %r" % (LEVELS, level))
    if precision is not None and precision not in PRECISIONS:
        raise ValueError("vram.torch.optimize: precision must be one of %s, not %r" %
                         (PRECISIONS, precision))
    if not 0.0 <= prune < 1.0:
        raise ValueError("vram.torch.optimize: prune must be in [0, 1), not %r" % (prune,))
    if copy_model:
        model = copy.deepcopy(model)
    device_type = device_type or next((p.device.type for p in model.parameters()), "cpu")
    basic = level in ("basic", "aggressive")
    if checkpointing is None:
        checkpointing = basic and not inference
    if channels_last is None:
        channels_last = basic
    if precision is None:
        precision = "mixed" if level == "aggressive" else "fp32"
    plan = []
    if checkpointing:
        plan.append(("checkpointing", _checkpointing))
    if channels_last:
        plan.append(("channels_last", _channels_last))
    if precision != "fp32":
        plan.append(("precision=" + precision,
                     lambda m: _precision(m, precision, device_type, inference)))
    if prune:
        plan.append(("prune", lambda m: _prune(m, prune)))

    report = Report()
    batch = None
    measure = example_batch is not None and not inference
    why_not = ("inference=True: analyze() measures training steps" if inference else
               "no example_batch")
    if measure:
        batch = _batch_size(example_batch)
        report.measured = MEASURED % batch
        report.bytes_before = before = _measure(model, example_batch, loss_fn, forward, batch)
    for name, apply in plan:
        try:
            model, how = apply(model)
        except _Refused as e:
            report.steps.append(Step(name, False, str(e)))
            continue
        step = Step(name, True, how)
        if measure:
            after = _measure(model, example_batch, loss_fn, forward, batch)
            step.bytes_before, step.bytes_after = before, after
            step.saved_bytes, before = before - after, after
        else:
            step.not_measured = why_not
        report.steps.append(step)
    report.bytes_after = before if measure else None
    return model, report


def _batch_size(example_batch):
    if callable(example_batch):
        return 4
    t = example_batch
    while isinstance(t, (list, tuple)):
        t = t[0]
    if isinstance(t, dict):
        t = next(iter(t.values()))
    return t.shape[0]
