"""The adaptive runtime from Python (vram.tune, vram.torch.runtime) with
real PyTorch on the CPU: the optimizer's YAML and decisions, the iterator's
no-loss/no-repeat guarantee across failures, oom_guard's micro-batches giving
the same gradient (also against a vram.Pool on a simulated GPU), the
checkpoint error, and the swap cache with both tiers on the CPU."""
import collections
import random

import pytest
import torch

import vram
from vram import tune
from vram.torch import runtime

YAML = """
training_automations:
  enabled: true
  DynamicBatchSizeOptimizer:
    enabled: true
    target_vram_usage: 0.85
    safety_margin: 0.05
    adjustment_frequency: 20
    min_batch_size: 2
    max_batch_size: 64
    min_lq_size: 32
    max_lq_size: 256
    vram_history_size: 50
"""


def test_optimizer_from_yaml_converges():
    opt = tune.BatchSizeOptimizer.from_yaml_text(YAML, batch=4, lq=64)
    batch, lq = 4, 64
    for _ in range(400):
        usage = 0.2 + 0.025 * batch * lq / 256
        db, dl = opt.update(usage)
        batch, lq = batch + db, lq + dl
    st = opt.stats()
    assert (batch, lq) == (st["batch"], st["lq"])
    usage = 0.2 + 0.025 * batch * lq / 256
    # near the aim (0.84): 25 x 256 would leave a sample's worth unused
    assert 0.83 <= usage <= 0.85
    # lq first: at its cap, or a little of it traded for one more sample
    assert lq == 256 or (lq >= 240 and 0.2 + 0.025 * (batch - 1) < usage)
    assert st["adjustments"] <= 3
    assert [a["reason"] for a in st["adjustments_log"]] == ["grow"] * st["adjustments"]
    assert opt.on_oom() == (batch // 2, lq - lq // 4)


def test_optimizer_errors_name_the_key():
    with pytest.raises(vram.ParseError, match=r"<config>:10: max_batch_size"):
        tune.BatchSizeOptimizer.from_yaml_text(YAML.replace("64", "1"))
    with pytest.raises(ValueError, match="max_batchsize"):
        tune.BatchSizeOptimizer({"max_batchsize": 8})


def test_dict_and_yaml_configs_share_libvram_reader():
    """A dict goes through the same reader as the YAML (one key table, in
    libvram): every key either accepts is accepted by both, with the same
    ranges, and text values cannot smuggle in keys."""
    d = {"target_vram_usage": 0.8, "safety_margin": 0.04, "adjustment_frequency": 7,
         "min_batch_size": 3, "max_batch_size": 40, "min_lq_size": 16, "max_lq_size": 64,
         "vram_history_size": 9, "max_adjustments": 11, "oom_cooldown_windows": 5,
         "enabled": True}
    text = YAML.split("    enabled: true\n    target")[0] + "    " + "\n    ".join(
        "%s: %s" % (k, str(v).lower()) for k, v in d.items()) + "\n"
    from_dict = tune.BatchSizeOptimizer(d, batch=4, lq=16).config
    from_yaml = tune.BatchSizeOptimizer.from_yaml_text(text, batch=4, lq=16).config
    assert from_dict == from_yaml and from_yaml["oom_cooldown_windows"] == 5
    with pytest.raises(vram.ParseError, match="oom_cooldown_windows"):
        tune.BatchSizeOptimizer({"oom_cooldown_windows": 0})  # range checked like the file
    with pytest.raises(vram.ParseError, match="target_vram_usage"):
        tune.BatchSizeOptimizer({"target_vram_usage": 1.5})
    with pytest.raises(vram.InvalidArgumentError, match="max_batch_size"):
        tune.BatchSizeOptimizer({"max_batch_size": "8\n    min_batch_size: 1"})


def run_iterator(it, fail_prob, rng):
    trained = collections.Counter()
    for samples in it:
        if rng.random() < fail_prob:
            it.failed()
        else:
            trained.update(samples)
    return trained


@pytest.mark.parametrize("trace", ["steady", "bursts", "random", "low"])
def test_iterator_never_drops_or_repeats(trace):
    rng = random.Random(trace)
    t = [0]

    def usage():
        t[0] += 1
        return {"steady": 0.9, "bursts": 0.95 if t[0] % 8 < 4 else 0.1,
                "random": rng.random(), "low": 0.2}[trace]

    data = list(range(1000))
    it = runtime.AdaptiveBatchIterator(data, 32, usage_fn=usage)
    trained = run_iterator(it, 0.2, rng)
    assert trained == collections.Counter(data)  # the multiset equals the dataset
    st = it.stats()
    assert st["committed"] == 1000 and st["pending"] == 0
    it.policy.check()
    if trace == "steady":
        assert it.batch_size == 1  # halved down to min_batch
    # an iterable of unknown length: a generator
    it = runtime.AdaptiveBatchIterator((x * 2 for x in range(333)), 16, usage_fn=usage)
    assert run_iterator(it, 0.2, rng) == collections.Counter(x * 2 for x in range(333))


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def data(n=16):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def reference_grads(batch):
    model = make_model()
    x, y = batch
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_oom_guard_micro_batches_give_the_same_gradient():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the grads stay inspectable
    seen = collections.Counter()

    @runtime.oom_guard(optimizer=opt)
    def step(batch):
        x, y = batch
        if len(x) > 5:  # this "device" holds 5 samples of activations
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        seen.update(y.tolist() and [tuple(r) for r in x.tolist()])
        return torch.nn.functional.cross_entropy(model(x), y)

    batch = data(16)
    step(batch)
    for got, want in zip([p.grad for p in model.parameters()], reference_grads(batch)):
        assert torch.allclose(got, want, atol=1e-6)
    assert sorted(seen) == sorted(tuple(r) for r in batch[0].tolist())  # each sample once
    st = step.chain.stats()
    assert st["strategies"]["micro-batch"]["attempts"] == 2  # 16 -> 2x8 -> 4x4
    assert st["strategies"]["micro-batch"]["recovered"] == 1
    assert step.chain.begin_step(16) == 4  # the next step starts split
    step.chain.end_step()


def test_oom_guard_offloads_activations_with_save_on_cpu(monkeypatch):
    """The default offload step: the retry's forward runs under PyTorch's
    save_on_cpu, so the activations autograd saves go to host memory (counted
    here by wrapping its pack hook); the gradient is unchanged."""
    packed = []

    class Counting(torch.autograd.graph.save_on_cpu):
        def __init__(self, pin_memory=False):
            super().__init__(pin_memory)
            pack = self.pack_hook
            self.pack_hook = lambda t: (packed.append(tuple(t.shape)), pack(t))[1]

    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", Counting)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    @runtime.oom_guard(optimizer=opt, order=("offload", "checkpoint"))
    def step(batch):
        x, y = batch
        before = len(packed)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if len(packed) == before:  # activations still on the "device": it is full
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return loss

    batch = data(16)
    step(batch)
    assert step.activation_offload.on and packed  # save_on_cpu really packed tensors
    for got, want in zip([p.grad for p in model.parameters()], reference_grads(batch)):
        assert torch.allclose(got, want, atol=1e-6)
    st = step.chain.stats()["strategies"]["offload"]
    assert st["attempts"] == 1 and st["recovered"] == 1
    n = len(packed)
    step(batch)  # stays on: no second OOM
    assert len(packed) > n and step.chain.stats()["strategies"]["offload"]["attempts"] == 1

    @runtime.oom_guard(optimizer=opt, offload=None)
    def plain(batch):
        return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])

    assert plain.activation_offload is None
    plain(data(4))


def test_oom_guard_checkpoints_and_says_how_to_resume(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "ckpt.pt"

    def save():
        torch.save(model.state_dict(), path)
        return str(path)

    @runtime.oom_guard(optimizer=opt, checkpoint=save, max_splits=1)
    def step(batch):
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")

    with pytest.raises(vram.OutOfMemoryError, match="resume") as e:
        step(data(8))
    assert str(path) in str(e.value) and path.exists()
    assert step.chain.stats()["failures"] == 1
    with pytest.raises(ValueError):  # not an OOM: passes through untouched

        @runtime.oom_guard(optimizer=opt)
        def bad(batch):
            raise ValueError("shape mismatch")

        bad(data(4))


def test_oom_guard_against_a_pool_on_a_simulated_gpu(sim):
    """The step allocates its activations from a vram.Pool on a simulated
    80 GB GPU in proportion to the micro-batch; the pool's refusal is the OOM."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with vram.Pool(0) as pool:
        weights = pool.alloc(40 << 30)  # held through the run

        @runtime.oom_guard(optimizer=opt, pool=pool)
        def step(batch):
            x, y = batch
            p = pool.alloc(len(x) * (3 << 30))  # 3 GiB a sample: 16 do not fit beside 40 GiB
            try:
                return torch.nn.functional.cross_entropy(model(x), y)
            finally:
                pool.free(p)

        batch = data(16)
        step(batch)
        for got, want in zip([p.grad for p in model.parameters()], reference_grads(batch)):
            assert torch.allclose(got, want, atol=1e-6)
        st = step.chain.stats()
        assert st["strategies"]["micro-batch"]["recovered"] == 1
        assert st["pool_calls"] >= 1  # the pool asked the chain before refusing
        pool.free(weights)


def test_swap_cache_with_both_tiers_on_the_cpu():
    mb = 1 << 20
    cache = runtime.SwapCache(gpu_budget=3 * mb, host_budget=2 * mb, device="cpu")
    loads = collections.Counter()

    def loader(name):
        def load():
            loads[name] += 1
            return torch.full((mb // 4,), float(ord(name)))  # 1 MiB of float32
        return load

    for name in "abc":
        assert cache.get(name, loader(name))[0] == ord(name)
    assert [cache.tier(n) for n in "abc"] == ["gpu"] * 3
    cache.get("d", loader("d"))  # a (least recent) moves to the host
    assert cache.tier("a") == "host" and cache.tier("d") == "gpu"
    cache.get("e", loader("e"))
    cache.get("f", loader("f"))  # host holds 2 MiB: a is dropped
    assert cache.tier("a") is None
    assert cache.get("a", loader("a"))[0] == ord("a") and loads["a"] == 2  # reloaded
    assert cache.get("f", loader("f"))[0] == ord("f") and loads["f"] == 1  # a GPU hit
    st = cache.stats()
    assert st["gpu_bytes"] <= 3 * mb and st["host_bytes"] <= 2 * mb
    assert st["hits_gpu"] == 1 and st["misses"] == 7 and st["evictions_host"] >= 1
    assert st["bytes_to_host"] >= 3 * mb
    cache.lru.check()
