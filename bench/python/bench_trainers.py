"""Trials and time to the largest batch that trains, for three real models
under a real memory limit, in one run: vram's search against the real
Lightning BatchSizeFinder (power and binsearch) and the real Accelerate
find_executable_batch_size.

Models (random init, CPU, AdamW): a transformers decoder (GPT-2), a
transformers encoder with a classification head (BERT), a torchvision CNN
(ResNet-18, 32 px). Each (model, method) runs in its own process, which
measures the model with vram.torch.analyze(), then lowers its RLIMIT_DATA
to what it uses (the model and AdamW's states, made before) plus the
model's CAP, so PyTorch's CPU allocator really
refuses (oneDNN off: its JIT crashes instead, tests/python/rlimit_probe.py).

Two kinds of trial, each method compared with the others of its kind:
- lightning: one real fit step in Lightning's fit loop, run by Lightning's
  tuner code (steps_per_trial=1 for every finder): BatchSizeFinder power,
  BatchSizeFinder binsearch (margin 0), vram's VramBatchSizeFinder;
- step: one real training step of the bare model: Accelerate's
  find_executable_batch_size (from its default 128, x0.9 per OOM), vram's
  drop-in for it, vram.torch.find_batch_size.
"proven": the batch found is the maximum of that run (batch + 1 failed in
the same run); each run is its own process, and what a process holds moves
the boundary by a sample now and then.

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
    # what the process may use: what it holds at the limit (the weights and
    # AdamW's states) plus the cap, in which the gradients must fit too
    memory = CAPS[name] + prof.parameter_bytes + prof.optimizer_state_bytes
    predicted = predict(prof, memory, host=True)
    calls = []
    out = {"model": name, "method": method, "predicted": predicted}

    # the optimizer's states exist before the limit, as in a run that has
    # stepped once; the gradients do not (set_to_none after each step)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)

    if method in METHODS["step"]:
        def step(b):
            calls.append([b, False])
            batch = default_collate([sample(i) for i in range(b)])
            vt.training_step(model, opt, batch, loss_fn, forward)
            calls[-1][1] = True
            return b
        cap(CAPS[name])
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
                calls.append([len(b[1]) if isinstance(b, (list, tuple)) else len(b["labels"]),
                              False])
                return loss_fn((forward or call_model)(self.model, b), b)

            def on_train_batch_end(self, outputs, b, batch_idx):
                calls[-1][1] = True  # forward, backward and the optimizer step ran

            def configure_optimizers(self):
                return opt  # self.model's parameters, states made above

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
        # Lightning's tuner saves a checkpoint before the trials and loads it
        # after them, in host memory: the limit holds for the trials only
        save, restore = trainer.save_checkpoint, trainer._checkpoint_connector.restore

        def save_then_cap(*args, **kwargs):
            save(*args, **kwargs)
            cap(CAPS[name])

        def uncap_then_restore(*args, **kwargs):
            cap(None)
            return restore(*args, **kwargs)
        trainer.save_checkpoint = save_then_cap
        trainer._checkpoint_connector.restore = uncap_then_restore
        t0 = time.monotonic()
        trainer.fit(module)
        out["seconds"] = time.monotonic() - t0
        found = finder.optimal_batch_size
        if method == "vram-lightning":
            out["exact"] = finder.search.exact
    # proven: found + 1 failed in this run (each run is its own process, and
    # what a process holds moves the boundary by a sample now and then)
    out.update(found=found, trials=len(calls), tried=calls,
               proven=[found + 1, False] in calls or found == 4096)
    return out


def cap(nbytes):
    """RLIMIT_DATA: what the process uses now plus nbytes (None: no limit)."""
    from rlimit_probe import vm_data
    inf = resource.RLIM_INFINITY
    resource.setrlimit(resource.RLIMIT_DATA, (inf if nbytes is None else vm_data() + nbytes, inf))


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
    print("\n%-9s %-9s %-19s %6s %7s %6s %6s  %s" % (
        "model", "kind", "method", "trials", "seconds", "batch", "proven",
        "trials in order (+ ran, - out of memory)"))
    rows = []
    for name in models:
        for kind, methods in METHODS.items():
            for m in methods:
                r = run_one(name, m)
                if "error" in r:
                    print("%-9s %-9s %-19s failed: %s" % (name, kind, m, r["error"]))
                    continue
                r["kind"] = kind
                rows.append(r)
                print("%-9s %-9s %-19s %6d %7.1f %6d %6s  %s" % (
                    name, kind, m, r["trials"], r["seconds"], r["found"],
                    "yes" if r["proven"] else "no",
                    " ".join("%d%s" % (b, "+" if ok else "-") for b, ok in r["tried"])),
                    flush=True)
            print("%-9s %-9s predicted %d" % (name, kind, rows[-1]["predicted"]), flush=True)
    print("\nper method, all models: trials, seconds, runs whose batch is proven the maximum")
    for kind, methods in METHODS.items():
        for m in methods:
            rs = [r for r in rows if r["method"] == m]
            print("  %-19s %4d %8.1f  %d/%d" % (m, sum(r["trials"] for r in rs),
                                                 sum(r["seconds"] for r in rs),
                                                 sum(r["proven"] for r in rs), len(rs)))
    print("total %.0f s" % (time.time() - t0))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "python")]
        out, sys.stdout = sys.stdout, sys.stderr  # the trainers print; stdout is the JSON
        result = one(sys.argv[2], sys.argv[3])
        print(json.dumps(result), file=out)
    else:
        main(sys.argv[1:] or list(CAPS))
