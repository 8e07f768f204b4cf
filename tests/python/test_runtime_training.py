"""A real model trained for a few hundred steps with the batch-size optimizer
and the adaptive iterator on. Memory readings come from a simulated GPU
(VRAM_SIM) that each step allocates against through vram.Pool in proportion
to batch * lq; a second process (`vram sim alloc`) takes memory mid-run. The
run must adapt, finish with no sample lost or repeated, and follow the loss
curve of a run with a fixed micro-batch and gradient accumulation (the same
effective batch of 64)."""
import collections
import os
import signal
import subprocess

import pytest
from conftest import accumulation_reference, use_sim
import torch

import vram
from vram import tune
from vram.torch import runtime

GiB = 1 << 30
EFFECTIVE = 64        # samples per optimizer step in both runs
N = 64 * 200          # 200 optimizer steps
PER_ELEMENT = 3 << 20  # bytes of activations per sample and lq position


def dataset():
    """Stationary sequences: the mean over any crop is (nearly) the same, so
    the lq size changes the cost of a step, not what the model learns."""
    g = torch.Generator().manual_seed(3)
    feats = torch.randn(N, 4, generator=g)
    labels = (feats[:, 0] + 0.5 * feats[:, 1] > 0).long()
    return [(i, feats[i], labels[i]) for i in range(N)]


def batch_tensors(samples, lq):
    g = torch.Generator().manual_seed(samples[0][0])
    x = torch.stack([f for _, f, _ in samples])[:, None, :].expand(-1, lq, -1)
    x = x + 0.01 * torch.randn(x.shape, generator=g)
    return x, torch.stack([y for _, _, y in samples])


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.5)


def loss_of(model, samples, lq):
    x, y = batch_tensors(samples, lq)
    return torch.nn.functional.cross_entropy(model(x.mean(dim=1)), y, reduction="sum")


def reference_losses(data):
    """Fixed micro-batch 16, 4 accumulation steps, lq 32."""
    return accumulation_reference(*model_and_optimizer(), N, EFFECTIVE, 16, lambda m, a, b: (
        loss_of(m, data[a:b], 32) / EFFECTIVE))


@pytest.fixture
def small_gpu(monkeypatch, tmp_path):
    return use_sim(monkeypatch, tmp_path, "1xtrain:24GiB")


def start_neighbour(mem):
    """`vram sim alloc` in another process; returns once it holds the memory
    (it prints one line then)."""
    binary = os.environ.get("VRAM_BIN") or os.path.join(os.environ["VRAM_BUILD_DIR"], "vram")
    p = subprocess.Popen([binary, "sim", "alloc", "--mem", mem], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline(), "vram sim alloc printed nothing"
    return p


def test_training_adapts_without_losing_samples(small_gpu):
    data = dataset()
    model, opt = model_and_optimizer()
    ctl = tune.BatchSizeOptimizer({"target_vram_usage": 0.85, "safety_margin": 0.05,
                                   "adjustment_frequency": 5, "min_batch_size": 4,
                                   "max_batch_size": 64, "min_lq_size": 32,
                                   "max_lq_size": 128, "max_adjustments": 0},
                                  batch=16, lq=32)
    it = runtime.AdaptiveBatchIterator(data, EFFECTIVE, high_mark=0.97, low_mark=0.0,
                                       usage_fn=lambda: usage[0])
    usage = [0.0]
    trained = collections.Counter()
    losses, ooms, neighbour = [], 0, None
    batch, lq = 16, 32
    with vram.Pool(0) as pool:
        weights = pool.alloc(2 * GiB)
        acc, total = 0, 0.0
        opt.zero_grad()
        try:
            while True:
                # micro-batches never straddle an optimizer step: same samples per step
                it.batch_size = min(batch, EFFECTIVE - acc)
                try:
                    samples = next(it)
                except StopIteration:
                    break
                if len(losses) == 25 and neighbour is None:
                    neighbour = start_neighbour("5GiB")
                try:
                    act = pool.alloc(len(samples) * lq * PER_ELEMENT)
                except vram.OutOfMemoryError:
                    ooms += 1
                    it.failed()
                    batch, lq = ctl.on_oom()
                    pool.trim()
                    continue
                info = vram.devices()[0]
                usage[0] = info.used_bytes / info.total_bytes
                loss = loss_of(model, samples, lq) / EFFECTIVE
                loss.backward()
                total += float(loss)
                pool.free(act)
                pool.trim()  # readings follow the current settings
                trained.update(i for i, _, _ in samples)
                acc += len(samples)
                if acc == EFFECTIVE:
                    opt.step()
                    opt.zero_grad()
                    losses.append(total)
                    acc, total = 0, 0.0
                if len(samples) == batch:  # a reading of the setting itself
                    db, dl = ctl.update(usage[0])
                    batch, lq = batch + db, lq + dl
        finally:
            if neighbour:
                neighbour.send_signal(signal.SIGTERM)
                neighbour.wait(timeout=60)
        pool.free(weights)

    st = ctl.stats()
    log = st["adjustments_log"]
    # it adapted: lq grew to its maximum, the batch grew, and the neighbour made it shrink
    assert any(a["new_lq"] == 128 for a in log)
    assert any(a["reason"] == "grow" and a["new_batch"] > a["old_batch"] for a in log)
    assert any(a["reason"] in ("shrink", "oom") and a["new_batch"] < a["old_batch"] for a in log)
    assert ooms <= 1 and st["peak_usage"] <= 1.0
    # no sample lost or repeated
    assert trained == collections.Counter(range(N))
    assert it.stats()["committed"] == N
    # the same loss curve as fixed micro-batches with accumulation
    ref = reference_losses(data)
    assert len(losses) == len(ref) == N // EFFECTIVE
    assert max(abs(a - b) for a, b in zip(losses, ref)) < 0.02
    assert losses[-1] < 0.5 * losses[0]  # and it learned
