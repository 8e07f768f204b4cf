"""Run as a subprocess by test_torch.py: a REAL out-of-memory error without
a GPU. After the model, its optimizer states and the first step exist, the
process's data limit (RLIMIT_DATA: heap and private mappings) is set to
what it uses plus CAP bytes, so PyTorch's own CPU allocator fails
("DefaultCPUAllocator: can't allocate memory") when a batch needs more.
glibc is told (MALLOC_MMAP_THRESHOLD_, set by the caller) to map every large
block on its own, so freed tensors go back to the system between trials.

usage: rlimit_probe.py CAP_BYTES PROFILE_OUT  -> prints the search as JSON"""
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


def main():
    cap, profile_out = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    size = 32
    x, y = models.image_batch(8, size=size, classes=10)
    prof = vt.analyze(model, (x, y), loss_fn=models.image_loss, forward=models.image_forward,
                      optimizer="adamw", name="resnet18-32px")
    prof.save(profile_out)
    data = TensorDataset(*models.image_batch(1024, size=size, classes=10, seed=1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    vt.training_step(model, opt, (x, y), models.image_loss, models.image_forward)  # states exist

    def step(b):
        batch = next(iter(DataLoader(data, batch_size=b, shuffle=True)))
        vt.training_step(model, opt, batch, models.image_loss, models.image_forward)

    resident = prof.parameter_bytes + prof.optimizer_state_bytes + prof.buffers_bytes
    # the prediction only chooses the first trial; the answer comes from real OOMs
    plan = vram.plan(profile=prof, gpu_mem=cap + resident, target=1.0, power_of_two=False,
                     overhead_bytes=0)
    base = vm_data()
    resource.setrlimit(resource.RLIMIT_DATA, (base + cap, resource.RLIM_INFINITY))
    found = vt.find_batch_size(step, predicted=plan.largest_fitting, min_batch_size=1,
                               max_batch_size=1024)
    resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    json.dump({"maximum": found.maximum, "exact": found.exact,
               "trials": [[t.batch_size, t.ok, t.error] for t in found.trials],
               "resident_bytes": resident, "predicted": plan.largest_fitting}, sys.stdout)


if __name__ == "__main__":
    main()
