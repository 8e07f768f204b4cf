"""Run as a subprocess by test_integrations.py: the trainers' integrations
against REAL out-of-memory errors on the CPU. As in rlimit_probe.py, the
process's data limit (RLIMIT_DATA) is set to what it uses plus CAP bytes
once the model and the trainer exist, so PyTorch's CPU allocator fails
("DefaultCPUAllocator: can't allocate memory") when a batch needs more.
Each run trains a small random-init model of transformers twice from the
same weights: without a limit (the reference) and under the limit with
vram; it prints JSON with both runs' weights' largest difference and what
vram did.

usage: trainer_probe.py hf|lightning|accelerate CAP_BYTES BATCH
(MALLOC_MMAP_THRESHOLD_ set by the caller, as for rlimit_probe.py)"""
import json
import os
import resource
import sys

import torch

import vram  # noqa: F401  (libvram loads before the limit)
from rlimit_probe import vm_data

SEQ, VOCAB = 64, 512


def set_cap(cap):
    """RLIMIT_DATA = what the process uses now + cap (None: no limit)."""
    inf = resource.RLIM_INFINITY
    resource.setrlimit(resource.RLIMIT_DATA, (inf if cap is None else vm_data() + cap, inf))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def samples(n):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    return [{"input_ids": ids[i], "labels": ids[i]} for i in range(n)]


def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def weights_of(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def hf_trainer(batch, out):
    """A Trainer of gpt2() on 8 batches: 3 optimizer steps of 2 accumulated
    batches, plain SGD at a constant rate (weights comparable across runs)."""
    from transformers import Trainer, TrainingArguments
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch,
                             gradient_accumulation_steps=2, max_steps=3, optim="sgd",
                             learning_rate=0.5, lr_scheduler_type="constant",
                             logging_steps=1, save_strategy="no", report_to="none",
                             use_cpu=True, seed=0, dataloader_num_workers=0,
                             disable_tqdm=True)
    return Trainer(model=gpt2(), args=args, train_dataset=samples(8 * batch))


def hf(cap, batch):
    from transformers import TrainerCallback

    from vram.integrations.huggingface import attach

    class Cap(TrainerCallback):
        """The limit arrives after the first batch of an accumulation
        cycle, so the second runs out of memory with gradients already
        accumulated: vram must run the first again in the new split."""
        done = False

        def on_substep_end(self, args, state, control, **kw):
            if not self.done:
                set_cap(cap)
                self.done = True

    def train(with_vram, out):
        trainer = hf_trainer(batch, out)
        model = trainer.model
        cb = None
        if with_vram:
            cb = attach(trainer, memory_bytes=cap)
            trainer.add_callback(Cap())
        trainer.train()
        set_cap(None)
        return weights_of(model), trainer.state.log_history, cb

    ref, _, _ = train(False, "/tmp/vram-probe-ref")
    got, logs, cb = train(True, "/tmp/vram-probe-vram")
    return {"max_diff": max_diff(ref, got), "errors": cb.guard.errors,
            "micro_batch_size": cb.guard.micro_batch_size, "ooms": cb.guard.ooms,
            "predicted": cb.session.predicted_batch, "estimated": cb.session.estimated_bytes,
            "job": cb.session.reservation.job.id if cb.session.reservation.job else None,
            "logs": [{k: v for k, v in e.items() if k.startswith("vram/") or k == "loss"}
                     for e in logs]}


def leave_room_for_a_quarter(profile, batch):
    """Neighbour jobs (this process's, released when it ends) hold all of
    every GPU but the bytes the batch table of `profile` (the table the
    callbacks send) gives at the largest batch <= batch/4. Returns the
    table, that batch and the neighbours' job ids."""
    import vram
    from vram.integrations.common import estimate_settings

    table = vram.batch_table(batch_size=batch, min_batch_size=1,
                             **estimate_settings(profile, "cpu"))
    granted = max(b for b in table if b <= batch // 4)
    client = vram.Client()
    fillers = []
    for d in client.status()["devices"]:
        free = d["usable_bytes"] - d["reserved_bytes"]
        fillers.append(client.submit(mem_bytes=free - table[granted], devices=[d["index"]],
                                     name="neighbour", pid=os.getpid()).id)
    return table, granted, fillers


def hf_granted(cap, batch):
    """attach(trainer) when vramd can grant only a quarter of the batch:
    other jobs hold all but the batch table's bytes at batch/4 (the table
    the callback sends, computed here from the same measurement). The
    callback's reservation must be granted that batch and every batch must
    run as micro-batches of it from the first step, without an OOM, and give
    the weights of the run without vram. No memory limit here (cap unused)."""
    from transformers import TrainerCallback

    from vram.integrations.huggingface import attach, measure

    seen = {}

    class Neighbours(TrainerCallback):
        """Before vram's callback: measures the model as it does."""
        def on_train_begin(self, args, state, control, model=None, train_dataloader=None,
                           **kw):
            seen["table"], seen["granted"], seen["fillers"] = leave_room_for_a_quarter(
                measure(model, train_dataloader), batch)

    class Steps(TrainerCallback):
        micro = []

        def on_step_end(self, args, state, control, **kw):
            self.micro.append(cb.guard.micro_batch_size)

    ref = hf_trainer(batch, "/tmp/vram-probe-ref")
    ref.train()
    trainer = hf_trainer(batch, "/tmp/vram-probe-granted")
    trainer.add_callback(Neighbours())
    cb = attach(trainer, wait_timeout=5)  # granted at once, or the test fails
    trainer.add_callback(Steps())
    trainer.train()
    job = cb.session.reservation.job
    return {"max_diff": max_diff(weights_of(ref.model), weights_of(trainer.model)),
            "table": seen["table"], "expected_grant": seen["granted"],
            "job": job.id if job else None, "ooms": cb.guard.ooms,
            "micro_batch_sizes": Steps.micro, "fillers": seen["fillers"],
            "logs": [{k: v for k, v in e.items() if k.startswith("vram/")}
                     for e in trainer.state.log_history]}


def lightning_trainer(callbacks):
    """A Lightning Trainer of 3 optimizer steps of 2 accumulated batches on
    the CPU, nothing but the fit (as hf_trainer)."""
    import lightning.pytorch as pl
    return pl.Trainer(accelerator="cpu", devices=1, max_steps=3, accumulate_grad_batches=2,
                      logger=False, callbacks=callbacks, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0)


def lightning(cap, batch):
    import lightning.pytorch as pl

    from vram.integrations.lightning import VramCallback

    class Cap(pl.Callback):
        """After the first batch of the first accumulation cycle (as in hf())."""
        def on_train_batch_end(self, trainer, module, outputs, b, batch_idx):
            if batch_idx == 0:
                set_cap(cap)

    LitLM = _lit_module()

    def train(with_vram):
        module = LitLM(batch)
        cbs = [VramCallback(memory_bytes=cap), Cap()] if with_vram else []
        trainer = lightning_trainer(cbs)
        trainer.fit(module)
        set_cap(None)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        return weights_of(module.model), metrics, cbs[0] if cbs else None

    ref, _, _ = train(False)
    got, metrics, cb = train(True)
    return {"max_diff": max_diff(ref, got), "errors": cb.guard.errors,
            "micro_batch_size": cb.guard.micro_batch_size, "ooms": cb.guard.ooms,
            "predicted": cb.session.predicted_batch, "job": cb.session.reservation.job.id
            if cb.session.reservation.job else None, "metrics": metrics}


def lightning_granted(cap, batch):
    """VramCallback in a Lightning fit when vramd can grant only a quarter
    of the batch (as hf_granted: a callback before it measures the module
    as VramCallback does and lets neighbours hold the rest)."""
    import lightning.pytorch as pl

    from vram.integrations.lightning import VramCallback, measure

    LitLM = _lit_module()
    seen = {}

    class Neighbours(pl.Callback):
        def on_fit_start(self, trainer, module):
            seen["table"], seen["granted"], seen["fillers"] = leave_room_for_a_quarter(
                measure(trainer, module), batch)

    class Steps(pl.Callback):
        micro = []

        def on_train_batch_end(self, trainer, module, outputs, b, batch_idx):
            self.micro.append(cb.guard.micro_batch_size)

    def fit(callbacks):
        module = LitLM(batch)
        lightning_trainer(callbacks).fit(module)
        return weights_of(module.model)

    ref = fit([])
    cb = VramCallback(wait_timeout=5)  # granted at once, or the test fails
    got = fit([Neighbours(), cb, Steps()])
    job = cb.session.reservation.job
    return {"max_diff": max_diff(ref, got), "table": seen["table"],
            "expected_grant": seen["granted"], "job": job.id if job else None,
            "ooms": cb.guard.ooms, "micro_batch_sizes": Steps.micro, "fillers": seen["fillers"],
            "logs": []}


def _lit_module():
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    class LitLM(pl.LightningModule):
        """GPT-2 (gpt2()) with its batch size where Lightning's tuner looks."""
        def __init__(self, batch_size):
            super().__init__()
            self.model, self.batch_size = gpt2(), batch_size

        def training_step(self, b, batch_idx):
            loss = self.model(**b).loss
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

        def train_dataloader(self):
            return DataLoader(samples(8 * max(8, self.batch_size)), batch_size=self.batch_size)
    return LitLM


def lightning_finder(cap, batch):
    """VramBatchSizeFinder under the limit: trials, the batch it sets."""
    import lightning.pytorch as pl

    from vram.integrations.lightning import VramBatchSizeFinder

    import vram.torch as vt
    module = _lit_module()(batch)
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    data = samples(2)
    example = {k: torch.stack([d[k] for d in data]) for k in data[0]}
    # measured before the limit: the profiler cannot start its threads under it
    prof = vt.analyze(module.model, example, loss_fn=lambda out, _: out.loss, optimizer="sgd")
    finder = VramBatchSizeFinder(memory_bytes=cap + 2 * params, max_val=4096, profile=prof,
                                 margin=0.1)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False,
                         callbacks=[finder], enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir="/tmp/vram-probe-lightning")
    set_cap(cap)
    trainer.fit(module)
    set_cap(None)
    s = finder.search
    return {"maximum": s.maximum, "exact": s.exact, "set": module.batch_size,
            "predicted": finder.predicted,
            "trials": [[t.batch_size, t.ok, t.error] for t in s.trials]}


def accelerate(cap, batch):
    """vram's drop-in and Accelerate's own, each on one real training step."""
    from accelerate.utils import find_executable_batch_size as accelerate_find

    from vram.integrations.accelerate import find_executable_batch_size
    import vram.torch as vt

    model = gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = samples(1024)

    def step(b):
        ids = torch.stack([data[i]["input_ids"] for i in range(b)])
        vt.training_step(model, opt, {"input_ids": ids, "labels": ids},
                         lambda out, _: out.loss)
        return b

    example = {"input_ids": torch.stack([data[0]["input_ids"]] * 2)}
    example["labels"] = example["input_ids"]
    prof = vt.analyze(model, example, loss_fn=lambda out, _: out.loss, optimizer="sgd")
    resident = prof.parameter_bytes + prof.gradient_bytes
    step(1)  # gradients exist
    calls = {"vram": [], "accelerate": []}

    def counted(name):
        def run(b):
            calls[name].append(b)
            return step(b)
        return run

    set_cap(cap)
    ours = find_executable_batch_size(counted("vram"), profile=prof,
                                      memory_bytes=cap + resident)()
    theirs = accelerate_find(counted("accelerate"), starting_batch_size=batch)()
    set_cap(None)
    return {"vram": ours, "vram_tried": calls["vram"], "accelerate": theirs,
            "accelerate_tried": calls["accelerate"]}


def main():
    which, cap, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False  # rlimit_probe.py says why
    run = {"hf": hf, "hf-granted": hf_granted, "lightning": lightning,
           "lightning-granted": lightning_granted, "lightning-finder": lightning_finder,
           "accelerate": accelerate}.get(which)
    if run is None:
        raise SystemExit("trainer_probe.py: unknown integration %r" % which)
    out, sys.stdout = sys.stdout, sys.stderr  # the trainers print; stdout is the JSON
    result = run(cap, batch)
    json.dump(result, out)


if __name__ == "__main__":
    main()
