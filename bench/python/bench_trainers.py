"""Trials and time to the largest batch that trains, for three real models
under a real memory limit, in one run: vram's search against the real
Lightning BatchSizeFinder (power and binsearch) and the real Accelerate
find_executable_batch_size.

Models (random init, CPU, AdamW): a transformers decoder (GPT-2), a
transformers encoder with a classification head (BERT), a torchvision CNN
(ResNet-18, 32 px). Each (model, method) runs in its own process, which
measures the model with vram.torch.analyze(), then lowers its RLIMIT_DATA
to what it uses plus the model's CAP, so PyTorch's CPU allocator really
refuses (oneDNN off: its JIT crashes instead, tests/python/rlimit_probe.py).

Two kinds of trial, each method compared with the others of its kind:
- lightning: one real fit step in Lightning's fit loop, run by Lightning's
  tuner code (steps_per_trial=1 for every finder): BatchSizeFinder power,
  BatchSizeFinder binsearch (margin 0), vram's VramBatchSizeFinder;
- step: one real training step of the bare model: Accelerate's
  find_executable_batch_size (from its default 128, x0.9 per OOM), vram's
  drop-in for it, vram.torch.find_batch_size.
The exact maximum of a kind is vram's search's (maximum + 1 failed).

usage: python bench/python/bench_trainers.py [MODEL...]   (build/ or VRAM_LIBRARY)"""
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MiB = 1 << 20
SEQ = 128
# model -> the memory the batch may use above what the process holds
CAPS = {"gpt2": 512 * MiB, "bert-cls": 256 * MiB, "resnet18": 96 * MiB}
METHODS = {"lightning": ("lightning-power", "lightning-binsearch", "vram-lightning"),
           "step": ("accelerate", "vram-accelerate", "vram")}


def build(name):
    """(model, sample(i), loss_fn(output, batch), forward(model, batch))."""
    import torch
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(vocab_size=2048, n_positions=SEQ, n_embd=128,
                                           n_layer=2, n_head=4))
        ids = torch.randint(0, 2048, (4096, SEQ), generator=g)

        def sample(i):
            return {"input_ids": ids[i], "labels": ids[i]}
        return model, sample, lambda out, b: out.loss, None
    if name == "bert-cls":
        from transformers import BertConfig, BertForSequenceClassification
        model = BertForSequenceClassification(BertConfig(
            vocab_size=2048, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=512, max_position_embeddings=SEQ, num_labels=4))
        ids = torch.randint(0, 2048, (4096, SEQ), generator=g)
        labels = torch.randint(0, 4, (4096,), generator=g)

        def sample(i):
            return {"input_ids": ids[i], "labels": labels[i]}
        return model, sample, lambda out, b: out.loss, None
    if name == "resnet18":
        import torch.nn.functional as F
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        x = torch.randn(4096, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (4096,), generator=g)

        def sample(i):
            return (x[i], y[i])
        return (model, sample, lambda out, b: F.cross_entropy(out, b[1]),
                lambda m, b: m(b[0]))
    raise SystemExit("bench_trainers.py: unknown model %r (%s)" % (name, ", ".join(CAPS)))


class Samples:
    def __init__(self, sample, n=4096):
        self.sample, self.n = sample, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.sample(i)


def vm_data():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData")


def one(name, method):
    """One (model, method) in this process: JSON on stdout."""
    import torch
    from torch.utils.data import DataLoader, default_collate

    import vram.torch as vt
    from vram.integrations.common import predict
    from vram.torch.analyze import call_model
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    # NNPACK's convolution workspace fails with its own "posix_memalign
    # failed" RuntimeError that no finder takes for out of memory; without
    # it the convolutions allocate through PyTorch's CPU allocator
    torch.backends.nnpack.set_flags(False)
    model, sample, loss_fn, forward = build(name)
    data = Samples(sample)
    prof = vt.analyze(model, default_collate([sample(0), sample(1)]), loss_fn=loss_fn,
                      forward=forward, optimizer="adamw", name=name)
    resident = prof.parameter_bytes + prof.gradient_bytes + prof.optimizer_state_bytes
    memory = CAPS[name] + resident
    predicted = predict(prof, memory, host=True)
    calls = []
    out = {"model": name, "method": method, "predicted": predicted}

    if method in METHODS["step"]:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(b):
            calls.append(b)
            batch = default_collate([sample(i) for i in range(b)])
            vt.training_step(model, opt, batch, loss_fn, forward)
            return b
        step(2)  # the optimizer's states exist before the limit, as in a run
        calls.clear()
        cap()
        t0 = time.monotonic()
        if method == "accelerate":
            from accelerate.utils import find_executable_batch_size
            found = find_executable_batch_size(step)()
        elif method == "vram-accelerate":
            from vram.integrations.accelerate import find_executable_batch_size
            found = find_executable_batch_size(step, profile=prof, memory_bytes=memory)()
        else:
            s = vt.find_batch_size(step, predicted=predicted, max_batch_size=4096)
            found, out["exact"] = s.maximum, s.exact
        out["seconds"] = time.monotonic() - t0
    else:
        import lightning.pytorch as pl
        from lightning.pytorch.callbacks import BatchSizeFinder

        from vram.integrations.lightning import VramBatchSizeFinder

        class Lit(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.model, self.batch_size = model, 2

            def training_step(self, b, batch_idx):
                calls.append(len(b[1]) if isinstance(b, (list, tuple)) else len(b["labels"]))
                return loss_fn((forward or call_model)(self.model, b), b)

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-4)

            def train_dataloader(self):
                return DataLoader(data, batch_size=self.batch_size)

        if method == "vram-lightning":
            finder = VramBatchSizeFinder(memory_bytes=memory, profile=prof, max_val=4096)
        else:
            finder = BatchSizeFinder(mode=method.split("-")[1], steps_per_trial=1,
                                     max_val=4096, margin=0.0)
        finder._early_exit = True  # the Tuner's way: stop after the search
        module = Lit()
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False,
                             callbacks=[finder], enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir="/tmp/vram-bench-trainers-%d" % os.getpid())
        cap()
        t0 = time.monotonic()
        trainer.fit(module)
        out["seconds"] = time.monotonic() - t0
        found = finder.optimal_batch_size
        if method == "vram-lightning":
            out["exact"] = finder.search.exact
    out.update(found=found, trials=len(calls), tried=calls)
    return out


def cap():
    resource.setrlimit(resource.RLIMIT_DATA, (vm_data() + CAPS[sys.argv[2]],
                                              resource.RLIM_INFINITY))


def run_one(name, method):
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.setdefault("VRAM_LIBRARY", os.path.join(ROOT, "build", "libvram.so"))
    r = subprocess.run([sys.executable, __file__, "--one", name, method], capture_output=True,
                       text=True, env=env)
    if r.returncode != 0:
        return {"model": name, "method": method, "error": r.stderr.strip().splitlines()[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(models):
    t0 = time.time()
    print("load average %.2f %.2f %.2f; caps: %s" % (os.getloadavg() + (", ".join(
        "%s %d MiB" % (m, CAPS[m] // MiB) for m in models),)))
    print("\n%-9s %-9s %-20s %7s %7s %9s %6s  %s" % (
        "model", "kind", "method", "trials", "seconds", "batch", "exact", "trials (batch: ok/OOM)"))
    rows = []
    for name in models:
        for kind, methods in METHODS.items():
            res = [run_one(name, m) for m in methods]
            exact = next((r["found"] for r in res if r.get("exact")), None)
            for r in res:
                if "error" in r:
                    print("%-9s %-9s %-20s failed: %s" % (name, kind, r["method"], r["error"]))
                    continue
                r["kind"], r["maximum"] = kind, exact
                rows.append(r)
                print("%-9s %-9s %-20s %7d %7.1f %9d %6s  %s" % (
                    name, kind, r["method"], r["trials"], r["seconds"], r["found"],
                    "yes" if r["found"] == exact else "no", " ".join(map(str, r["tried"]))))
            print("%-9s %-9s %-20s predicted %d, exact maximum %s" % (
                name, kind, "", res[0].get("predicted", 0), exact))
    print("\nper method: trials (total), seconds (total), runs that reached the exact maximum")
    for kind, methods in METHODS.items():
        for m in methods:
            rs = [r for r in rows if r["method"] == m]
            print("  %-20s %4d %8.1f  %d/%d" % (m, sum(r["trials"] for r in rs),
                                                 sum(r["seconds"] for r in rs),
                                                 sum(r["found"] == r["maximum"] for r in rs),
                                                 len(rs)))
    print("total %.0f s" % (time.time() - t0))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        sys.path.insert(0, os.path.join(ROOT, "python"))
        out, sys.stdout = sys.stdout, sys.stderr  # the trainers print; stdout is the JSON
        result = one(sys.argv[2], sys.argv[3])
        print(json.dumps(result), file=out)
    else:
        main(sys.argv[1:] or list(CAPS))
