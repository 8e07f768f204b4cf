"""print_memory_analysis() and recommend_batch_size(): the measured profile
through libvram's planner, on a device of the backend or a given size."""
import sys

from .. import api
from ..types import gib
from .analyze import analyze

GIB = 1 << 30


def _profile_of(model, profile, example_batch, optimizer, loss_fn, forward):
    if profile is not None:
        return profile
    if example_batch is None:
        raise ValueError("vram.torch: give example_batch= (to measure the model) or profile=")
    return analyze(model, example_batch, loss_fn=loss_fn, optimizer=optimizer, forward=forward)


def _precision(mixed_precision, profile):
    if mixed_precision is True:
        return "amp-bf16"
    if mixed_precision:
        return str(mixed_precision)  # "amp-fp16", "bf16", ...
    return getattr(profile, "precision", "fp32") or "fp32"


def _target(device, gpu_memory_gb):
    if gpu_memory_gb is not None:
        return {"gpu_mem": int(gpu_memory_gb * GIB)}
    return {"gpu": int(getattr(device, "index", device) or 0)}


def recommend_batch_size(model, gpu_memory_gb=None, safety_margin=0.7, mixed_precision=False,
                         example_batch=None, profile=None, device=0, optimizer="adamw",
                         loss_fn=None, forward=None):
    """{'maximum', 'recommended', 'safe'} batch sizes (powers of two) for
    training `model` within safety_margin of the free memory of `device`
    (an index of vram.devices()), or of a GPU with gpu_memory_gb GiB."""
    prof = _profile_of(model, profile, example_batch, optimizer, loss_fn, forward)
    p = api.plan(profile=prof, target=safety_margin, precision=_precision(mixed_precision, prof),
                 optimizer=prof.optimizer or optimizer, **_target(device, gpu_memory_gb))
    return {"maximum": p.maximum, "recommended": p.recommended, "safe": p.safe}


def print_memory_analysis(model, batch_size, device=0, mixed_precision=False,
                          example_batch=None, profile=None, gpu_memory_gb=None,
                          safety_margin=0.7, optimizer="adamw", loss_fn=None, forward=None,
                          file=None):
    """Prints the memory report of training `model` at batch_size on
    `device` (index of vram.devices(); or a GPU of gpu_memory_gb GiB)."""
    out = file or sys.stdout
    prof = _profile_of(model, profile, example_batch, optimizer, loss_fn, forward)
    prec = _precision(mixed_precision, prof)
    opt = prof.optimizer or optimizer
    target = _target(device, gpu_memory_gb)
    p = api.plan(profile=prof, target=safety_margin, precision=prec, optimizer=opt,
                 batch_size=batch_size, **target)
    e = api.estimate(profile=prof, precision=prec, optimizer=opt, batch_size=batch_size)
    fp32 = api.estimate(profile=prof, precision="fp32", optimizer=opt, batch_size=batch_size)

    def row(label, n, note=""):
        print("  %-24s %10.3f GiB%s" % (label, gib(n), note), file=out)

    def pct(n):
        return 100.0 * n / p.total_bytes if p.total_bytes else 0.0

    print("Memory analysis: %s (%s parameters), batch %d, %s, %s" % (
        prof.name, format(prof.parameters, ","), batch_size, prec, opt), file=out)
    print("GPU: %s" % p.gpu, file=out)
    row("Total", p.total_bytes)
    row("Used", p.used_bytes)
    row("Free", p.free_bytes)
    print("Model memory", file=out)
    row("Parameters", e.parameters)
    row("Buffers", e.buffers)
    row("Gradients", e.gradients)
    row("Optimizer states", e.optimizer_states)
    model_total = e.parameters + e.buffers + e.gradients + e.optimizer_states
    row("Total", model_total)
    print("Batch memory", file=out)
    scale = e.activations / max(1, prof.activation_bytes_at(batch_size))  # precision scaling
    inputs = min(e.activations, int(prof.input_bytes_per_sample * batch_size * scale))
    row("Input data", inputs)
    row("Activations", e.activations - inputs)
    # backward's transient memory: for a measured profile, what backward
    # held at once beyond the saved activations (analyze())
    row("Batch gradients", e.backward_temps, "  (in flight during backward)")
    row("Total", e.activations + e.backward_temps)
    print("Total", file=out)
    row("Runtime overhead", e.overhead - e.backward_temps,
        "  (CUDA context, workspaces, allocator rounding)")
    row("Estimated usage", e.total, "  (%.1f %% of the GPU)" % pct(e.total))
    if p.free_bytes >= e.total:
        row("Remaining", p.free_bytes - e.total)
    else:
        row("Short by", e.total - p.free_bytes)
    print("Batch size recommendations (within %.0f %% of free memory)" % (100 * p.target),
          file=out)
    if p.largest_fitting == 0:
        print("  not even batch 1 fits", file=out)
    for label, b in (("Maximum", p.maximum), ("Recommended", p.recommended), ("Safe", p.safe)):
        if b:
            # the full estimate at b, with the settings this report was made with
            at = api.estimate(profile=prof, precision=prec, optimizer=opt, batch_size=b).total
            print("  %-12s %6d  (%.1f %% of GPU memory)" % (label, b, pct(at)), file=out)
    verdict = {"tight": "tight (fits only without the safety margin)"}.get(p.verdict, p.verdict)
    print("Current batch %d: %s" % (batch_size, verdict), file=out)
    if not p.fits and p.micro_batch_size:
        print("  use micro-batch %d with %d gradient-accumulation steps" % (
            p.micro_batch_size, p.accumulation_steps), file=out)
    saved = fp32.total - e.total
    if prec == "fp32":
        amp = api.estimate(profile=prof, precision="amp-bf16", optimizer=opt,
                           batch_size=batch_size)
        print("Mixed precision: off (amp-bf16 would change usage by %+.3f GiB)" % (
            gib(amp.total - e.total) if amp.total >= e.total else -gib(e.total - amp.total)),
            file=out)
    else:
        print("Mixed precision: %s (%s %.3f GiB against fp32)" % (
            prec, "saves" if saved >= 0 else "costs", gib(abs(saved))), file=out)
    return p
