"""Trials to find the largest batch: vram.torch.find_batch_size against two
baselines written here after the documented behaviour of
- Lightning's Tuner.scale_batch_size(mode="binsearch"): start at 2, double
  until the first failure, then bisect until the bounds touch;
- Accelerate's find_executable_batch_size: start high, halve on every
  out-of-memory error, stop at the first success (not the maximum).

Each model is measured with vram.torch.analyze() (real PyTorch, CPU); each
trial then allocates that training step's memory on a simulated GPU
(VRAM_SIM) through vram.Pool, so an out-of-memory error is the pool and the
device really refusing: rounding, segments and a transient activation
gradient in backward, which the estimate does not know about, make the
prediction err the way it does on a GPU.

usage: python3 bench/python/bench_batch_search.py  (VRAM_LIBRARY or a build/)"""
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
CAPS_GIB = (8, 24, 80)
os.environ.update(VRAM_BACKEND="sim", VRAM_SIM=",".join("gpu%d:%dGiB" % (c, c) for c in CAPS_GIB),
                  VRAM_SIM_STATE=os.path.join(tempfile.mkdtemp(), "sim.state"))

import torch  # noqa: E402
import torchvision  # noqa: E402

import models  # noqa: E402  (tests/python/models.py: the small transformer)
import vram  # noqa: E402
import vram.torch as vt  # noqa: E402

GiB = 1 << 30
LAYERS = 48  # activations are allocated in this many tensors


class Step:
    """One training step's memory on a pool: the model state stays, the
    activations are allocated layer by layer, then the gradients, the
    backward peak the profile measured (backward_bytes_at: the temporaries
    of backward beyond the saved activations, e.g. attention scores'
    gradients) and a transient of 2/48 of the activations that the profile
    does not contain."""

    def __init__(self, pool, prof):
        self.pool, self.prof = pool, prof
        self.resident = pool.alloc(prof.parameter_bytes + prof.optimizer_state_bytes +
                                   prof.buffers_bytes)

    def __call__(self, b):
        live = []
        try:
            act = self.prof.activation_bytes_at(b)
            for _ in range(LAYERS):
                live.append(self.pool.alloc(act // LAYERS))
            live.append(self.pool.alloc(self.prof.gradient_bytes))
            backward = self.prof.backward_bytes_at(b)
            if backward:
                live.append(self.pool.alloc(backward))
            live.append(self.pool.alloc(2 * act // LAYERS))  # unmeasured transient
        finally:
            for p in live:
                self.pool.free(p)
            self.pool.trim()

    def peak(self, reset=False):
        if reset:
            self.pool.reset_peaks()
        return self.pool.stats().reserved_bytes_peak  # what the device gave

    def close(self):
        self.pool.free(self.resident)


def lightning_binsearch(step, init=2, max_trials=64):
    """Lightning's binsearch mode: double until a failure, then bisect."""
    lo, hi, b, n = 0, None, init, 0
    while n < max_trials:
        n += 1
        try:
            step(b)
            lo = b
            b = b * 2 if hi is None else (lo + hi) // 2
        except vram.OutOfMemoryError:
            hi = b
            b = (lo + hi) // 2
        if hi is not None and hi - lo <= 1:
            break
    return lo, n


def accelerate_halving(step, start=4096):
    """Accelerate's find_executable_batch_size: halve until one runs."""
    b, n = start, 0
    while b >= 1:
        n += 1
        try:
            step(b)
            return b, n
        except vram.OutOfMemoryError:
            b //= 2
    return 0, n


def profiles():
    torch.manual_seed(0)
    img = models.image_batch(2, size=224)
    cnn = dict(loss_fn=models.image_loss, forward=models.image_forward)
    out = []
    for name in ("resnet18", "resnet50", "mobilenet_v2", "vgg11"):
        m = getattr(torchvision.models, name)()
        out.append(vt.analyze(m, img, name=name, **cnn))
    for d, layers, seq in ((256, 4, 256), (512, 6, 512)):
        m = models.TinyTransformer(vocab=8000, d=d, layers=layers, heads=8, max_len=seq)
        out.append(vt.analyze(m, models.token_batch(2, seq=seq, vocab=8000),
                              loss_fn=models.lm_loss, name="transformer-d%d-L%d-s%d" %
                              (d, layers, seq)))
    return out


def cached_profiles():
    """The measured profiles, kept in bench/out/ for reruns (delete to remeasure)."""
    path = os.path.join(ROOT, "bench", "out", "python_profiles.json")
    if os.path.exists(path):
        with open(path) as f:
            return [vt.Profile(**d) for d in json.load(f)]
    profs = profiles()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump([p.to_dict() for p in profs], f)
    return profs


def main():
    t0 = time.time()
    profs = cached_profiles()
    print("profiles measured in %.1f s; load average %.2f %.2f %.2f" % (
        (time.time() - t0,) + os.getloadavg()))
    rows = []
    print("\n%-24s %5s %8s | %5s %5s | %9s | %10s %8s" % (
        "model", "cap", "maximum", "vram", "pred", "lightning", "accelerate", "found"))
    for prof in profs:
        for dev, cap in enumerate(CAPS_GIB):
            with vram.Pool(dev) as pool:
                step = Step(pool, prof)
                plan = vram.plan(profile=prof, gpu_mem=cap * GiB, target=1.0,
                                 power_of_two=False, overhead_bytes=0)
                ours = vt.find_batch_size(step, predicted=plan.largest_fitting,
                                          memory_fn=step.peak, capacity=cap * GiB,
                                          intercept=plan.model_bytes)
                lmax, ln = lightning_binsearch(step)
                amax, an = accelerate_halving(step)
                step.close()
            assert ours.exact and lmax == ours.maximum, (prof.name, cap, ours, lmax)
            rows.append((prof.name, cap, ours.maximum, ours.count, plan.largest_fitting, ln,
                         an, amax))
            print("%-24s %4dG %8d | %5d %5d | %9d | %10d %7.0f%%" % (
                prof.name, cap, ours.maximum, ours.count, plan.largest_fitting, ln, an,
                100.0 * amax / ours.maximum))
    ours_n = [r[3] for r in rows]
    light_n = [r[5] for r in rows]
    acc_n = [r[6] for r in rows]
    acc_frac = [r[7] / r[2] for r in rows]
    print("\n%d model/cap pairs" % len(rows))
    print("trials, median (mean): vram %.1f (%.2f), lightning binsearch %.1f (%.2f), "
          "accelerate halving %.1f (%.2f)" % (
              statistics.median(ours_n), statistics.mean(ours_n), statistics.median(light_n),
              statistics.mean(light_n), statistics.median(acc_n), statistics.mean(acc_n)))
    print("lightning / vram trials: %.2fx (ratio of means); both exact" % (
        statistics.mean(light_n) / statistics.mean(ours_n)))
    print("accelerate's batch as a share of the maximum: median %.0f%%, min %.0f%%" % (
        100 * statistics.median(acc_frac), 100 * min(acc_frac)))
    print("total %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
