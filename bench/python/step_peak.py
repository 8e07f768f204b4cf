"""What a training step of the bench's models really holds at once, per
batch, against what analyze()'s profile says: the CPU allocator's peak
over one plain forward + loss + backward (torch.profiler's memory events,
vram.torch.analyze.allocated_peak_bytes), with the parameter gradients
absent before (set_to_none, PyTorch 2's default) and kept (zeros), the
activations saved for backward, and the profile's saved activations plus
step bytes at that batch, as they are (gradients None) and less the
gradients backward had made by its peak (kept: the planner counts every
gradient already). The measurement behind issue 23's ResNet-18
prediction (bench/RESULTS.md). Same settings as bench_trainers.py (one
thread, oneDNN and NNPACK off).

usage: python bench/python/step_peak.py [MODEL [BATCH...]]   (build/ or VRAM_LIBRARY)"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"), HERE]

import torch  # noqa: E402
from torch.utils.data import default_collate  # noqa: E402

import bench_trainers  # noqa: E402
import vram.torch as vt  # noqa: E402
from vram.torch.analyze import allocated_peak_bytes, call_model, saved_activation_bytes  # noqa: E402

MB = 1e6


def main(name, batches):
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    torch.backends.nnpack.set_flags(False)
    model, sample, loss_fn, forward = bench_trainers.build(name)
    forward = forward or call_model
    prof = vt.analyze(model, default_collate([sample(0), sample(1)]), loss_fn=loss_fn,
                      forward=forward, optimizer="adamw", name=name)
    grads = sum(p.numel() * p.element_size() for p in model.parameters())
    print("%s: parameter gradients %.1f MB; MB at each batch:" % (name, grads / MB))
    print("%6s %9s %14s %14s %15s %15s" % ("batch", "saved", "peak (None)", "peak (zeros)",
                                           "profile (None)", "profile (kept)"))
    model.train()
    for b in batches:
        batch = default_collate([sample(i) for i in range(b)])
        peaks = []
        for before in (None, "zeros"):
            for p in model.parameters():
                p.grad = None if before is None else torch.zeros_like(p)

            def step():
                loss_fn(forward(model, batch), batch).backward()
            peaks.append(allocated_peak_bytes(step))
        saved = saved_activation_bytes(model, batch, loss_fn, forward)[0]
        said = prof.activation_bytes_at(b) + prof.backward_bytes_at(b)
        kept = said - prof.backward_gradient_bytes  # what the planner counts when kept
        print("%6d %9.1f %14.1f %14.1f %15.1f %15.1f" % (
            b, saved / MB, peaks[0] / MB, peaks[1] / MB, said / MB, kept / MB), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "resnet18", [int(a) for a in args[1:]] or [16, 64, 128])
