"""Run as a subprocess by test_torch.py: a REAL out-of-memory error without
a GPU. After the model, its optimizer states and the first step exist, the
process's data limit (RLIMIT_DATA: heap and private mappings) is set to
what it uses plus CAP bytes, so PyTorch's own CPU allocator fails
("DefaultCPUAllocator: can't allocate memory") when a batch needs more.
glibc is told (MALLOC_MMAP_THRESHOLD_, set by the caller) to map every large
block on its own, so freed tensors go back to the system between trials.

usage: rlimit_probe.py MODEL CAP_BYTES PROFILE_OUT -> prints the search as JSON
MODEL: transformer (the test's small one) or resnet18 (torchvision, 32 px)"""
import json
import os
import resource
import sys

import torch
import torchvision
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

import vram  # noqa: E402
import vram.torch as vt  # noqa: E402


def vm_data():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData")


def subject(name):
    """(model, example batch, loss_fn, forward, data set) of a probed model."""
    if name == "resnet18":
        size = 32
        model = torchvision.models.resnet18(num_classes=10)
        data = TensorDataset(*models.image_batch(1024, size=size, classes=10, seed=1))
        return (model, models.image_batch(8, size=size, classes=10), models.image_loss,
                models.image_forward, data)
    if name == "transformer":
        model = models.TinyTransformer(vocab=1000, d=128, layers=2, heads=4, max_len=64)
        data = TensorDataset(models.token_batch(1024, seq=64, seed=1))
        return (model, (models.token_batch(8, seq=64),), lambda out, b: models.lm_loss(out, b[0]),
                lambda m, b: m(b[0]), data)
    raise SystemExit("rlimit_probe.py: unknown model %r (resnet18, transformer)" % name)


def main():
    name, cap, profile_out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    # oneDNN's JIT does not check its own allocations: when one fails under
    # the cap it dies of SIGSEGV in primitive creation (gdb: __itt_pt_write in
    # dnnl_primitive_create under convolution_backward). PyTorch's native
    # kernels allocate through c10's CPU allocator, which raises instead.
    torch.backends.mkldnn.enabled = False
    # NNPACK (convolutions of batches >= 16) takes its workspace with
    # posix_memalign, outside c10's allocator and the profiler's memory
    # events that analyze() reads, and keeps it between calls, grown to the
    # largest batch seen: RLIMIT_DATA counts it, the profile cannot (measured
    # in bench/RESULTS.md). Off, as in bench_trainers.py and step_peak.py.
    torch.backends.nnpack.set_flags(False)
    torch.manual_seed(0)
    model, example, loss_fn, forward, data = subject(name)
    prof = vt.analyze(model, example, loss_fn=loss_fn, forward=forward, optimizer="adamw",
                      name=name)
    prof.save(profile_out)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    vt.training_step(model, opt, example, loss_fn, forward)  # states exist

    def step(b):
        batch = next(iter(DataLoader(data, batch_size=b, shuffle=True)))
        vt.training_step(model, opt, batch, loss_fn, forward)

    resident = prof.parameter_bytes + prof.optimizer_state_bytes + prof.buffers_bytes
    # the prediction only chooses the first trial; the answer comes from real
    # OOMs. Host memory: the host plan (allocated peak, no caching allocator),
    # as auto_select_batch_size plans off CUDA; the GPU plan printed beside it
    target = dict(profile=prof, gpu_mem=cap + resident, target=1.0, power_of_two=False,
                  overhead_bytes=0)
    plan, gpu_plan = vram.plan(host=True, **target), vram.plan(**target)
    base = vm_data()
    resource.setrlimit(resource.RLIMIT_DATA, (base + cap, resource.RLIM_INFINITY))
    found = vt.find_batch_size(step, predicted=plan.largest_fitting, min_batch_size=2,
                               max_batch_size=1024)
    resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    json.dump({"maximum": found.maximum, "exact": found.exact,
               "trials": [[t.batch_size, t.ok, t.error] for t in found.trials],
               "resident_bytes": resident, "predicted": plan.largest_fitting,
               "predicted_gpu": gpu_plan.largest_fitting}, sys.stdout)


if __name__ == "__main__":
    main()
