"""vram in Lightning (lightning 2.x).

    from vram.integrations.lightning import VramCallback, VramBatchSizeFinder
    trainer = L.Trainer(callbacks=[VramCallback()])
    trainer = L.Trainer(callbacks=[VramBatchSizeFinder(memory_bytes="2GiB")])

VramCallback: at the start of fit it measures the module on two samples of
its training set (vram.torch.analyze, through its own training_step), logs
the memory analysis, reserves the estimated memory with vramd when one
answers (with the batch table: when vramd grants a smaller batch, each
step runs as micro-batches of it), and logs vram's figures (vram/*) every
step. Each training step runs through the shared MicroBatchGuard
(common.py): after an
out-of-memory error the batch, and the earlier batches of the
accumulation cycle, run again as 2, 4, ... micro-batches with gradient
accumulation, so every sample is trained exactly once and the optimizer
sees the same gradient. For that the callback does the backward of each
micro-batch itself (through the strategy, so precision plugins and the
on_before/after_backward hooks run) and zeroes the gradients at the start
of each cycle; Lightning's own backward then gets the loss as a leaf and
has nothing left to do. Automatic optimization only; the loss must be a
mean over the batch's samples (it is weighted by each micro-batch's
share); what training_step logs is logged once per micro-batch.

VramBatchSizeFinder: Lightning's BatchSizeFinder whose trials (real fit
steps, run by Lightning's own tuner code) are chosen by
vram.torch.find_batch_size, starting from the planner's prediction instead
of doubling from 2."""
import logging
import os
import uuid

import lightning.pytorch as pl
from lightning.pytorch.callbacks import BatchSizeFinder
from lightning.pytorch.utilities.exceptions import _TunerExitException
from lightning.pytorch.tuner import batch_size_scaling as _scaling
from lightning.pytorch.utilities.memory import garbage_collection_cuda
from lightning.pytorch.utilities.parsing import lightning_getattr, lightning_setattr

from .. import api
from ..torch.analyze import analyze
from ..torch.batch import find_batch_size
from .common import Session, predict

log = logging.getLogger("vram")

ANALYSIS_SAMPLES = 2

# Lightning has no public way to run one trial at a batch size the caller
# chooses: BatchSizeFinder(init_val=...) and Tuner.scale_batch_size run
# Lightning's own search from there (doubling after each success). These
# private helpers of lightning.pytorch.tuner.batch_size_scaling are what
# its own finder runs each trial with (tested with Lightning 2.6).
TUNER_HELPERS = ("__scale_batch_dump_params", "__scale_batch_reset_params",
                 "__scale_batch_restore_params", "_reset_progress", "_reset_dataloaders",
                 "_try_loop_run")


def _tuner_helpers():
    """The private tuner helpers by name; a clear error when this Lightning
    lacks one (a release other than the one the finder is tested with)."""
    missing = [n for n in TUNER_HELPERS if not hasattr(_scaling, n)]
    if missing:
        raise ImportError("vram: VramBatchSizeFinder runs its trials with Lightning's private "
                          "tuner helpers, and Lightning %s lacks %s (tested with 2.6); use "
                          "lightning's BatchSizeFinder(init_val=vram's prediction) or pin "
                          "lightning 2.6" % (pl.__version__, ", ".join(missing)))
    return {n: getattr(_scaling, n) for n in TUNER_HELPERS}


def _loss_of(output):
    return output["loss"] if isinstance(output, dict) else output


def _training_loader(trainer):
    loop = trainer.fit_loop
    loop.setup_data()
    loaders = loop._combined_loader.flattened
    if len(loaders) != 1:
        raise ValueError("vram: one training DataLoader expected, found %d" % len(loaders))
    return loaders[0]


def measure(trainer, module):
    """analyze() of `module` through its own training_step on the first
    samples of its training DataLoader (self.log is silenced meanwhile)."""
    step = getattr(module, "_vram_training_step", module.training_step)
    loader = _training_loader(trainer)
    example = loader.collate_fn([loader.dataset[i] for i in
                                 range(min(ANALYSIS_SAMPLES, len(loader.dataset)))])
    module.log, module.log_dict = (lambda *a, **k: None), (lambda *a, **k: None)
    try:
        dev = module.device
        return analyze(module, example, loss_fn=lambda out, batch: out,
                       forward=lambda m, b: _loss_of(step(b, 0)), name=type(module).__name__,
                       device="cpu" if dev.type == "cpu" else "meta")
    finally:
        del module.log, module.log_dict


def _device_index(module):
    dev = module.device
    return (dev.index or 0) if dev.type == "cuda" else 0


class VramCallback(pl.Callback):
    """vram's view of a Lightning fit (see the module's docstring).
    memory_bytes: the memory the run may use, model included (default: the
    free memory of the vram device the module is on); batch_arg_name: where
    the batch size is (module, hparams or datamodule; for the analysis
    only); the other options as in the Hugging Face VramCallback.
    self.session (common.Session) holds the guard, the analysis and the
    reservation; self.figures() what is logged."""

    def __init__(self, memory_bytes=None, analysis=True, reserve=True, client=None,
                 wait_timeout=None, max_splits=3, batch_arg_name="batch_size", logger=None):
        self.analysis, self.reserve = analysis, reserve
        self.batch_arg_name = batch_arg_name
        self.session = Session(self._zero_grad, memory_bytes, client, wait_timeout, max_splits,
                               logger)
        self.guard, self.logger = self.session.guard, self.session.logger
        self._module = None

    def _zero_grad(self):
        self._module.zero_grad(set_to_none=True)

    def setup(self, trainer, pl_module, stage):
        if stage != "fit" or self._module is not None:
            return
        if not pl_module.automatic_optimization:
            self.logger.warning("vram: manual optimization does its own backward; the "
                                "micro-batch recovery is off")
            return
        self._module = pl_module
        step = pl_module._vram_training_step = pl_module.training_step

        def training_step(batch, batch_idx, *args, **kwargs):
            acc = trainer.accumulate_grad_batches
            if batch_idx % acc == 0:  # a new accumulation cycle; Lightning's zero_grad is off
                self._zero_grad()
                self.guard.end_cycle()
            optimizer = trainer.optimizers[0] if trainer.optimizers else None

            def piece(part, share):
                loss = _loss_of(step(part, batch_idx, *args, **kwargs)) * (share / acc)
                trainer.strategy.backward(loss, optimizer)
                return loss.detach() * acc

            total = self.guard.run(batch, piece)
            # Lightning's backward of a leaf: the gradients are already there
            return total.detach().requires_grad_()

        pl_module.training_step = training_step
        pl_module.optimizer_zero_grad = lambda *a, **k: None

    def teardown(self, trainer, pl_module, stage):
        if stage == "fit" and self._module is not None:
            del pl_module.training_step, pl_module.optimizer_zero_grad
            del pl_module._vram_training_step
            self._module = None

    def on_fit_start(self, trainer, pl_module):
        self.session.device = pl_module.device
        if not self.analysis:
            return
        try:
            batch_size = int(lightning_getattr(pl_module, self.batch_arg_name))
        except AttributeError:
            batch_size = _training_loader(trainer).batch_size or 1
        # the guard runs the steps only where setup() wrapped them
        self.session.start(pl_module, measure(trainer, pl_module), batch_size, pl_module.device,
                           reserve=self.reserve, name=type(pl_module).__name__,
                           split=self._module is pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        pl_module.log_dict({k: float(v) for k, v in self.figures().items()}, on_step=True,
                           on_epoch=False, batch_size=1)

    def on_fit_end(self, trainer, pl_module):
        self.session.finish()

    def figures(self):
        return self.session.figures()


class VramBatchSizeFinder(BatchSizeFinder):
    """Lightning's BatchSizeFinder (same arguments; mode is ignored) whose
    trials are chosen by vram.torch.find_batch_size from the planner's
    prediction for memory_bytes (the memory the run may use, model
    included; default: the free memory of the module's vram device) and
    `profile` (vram.torch.analyze(); default: measured through the
    module's training_step at the start of fit). The
    found batch, less `margin`, is set where batch_arg_name says; the search
    is in self.search (a vram.torch.BatchSearch), the size in
    self.optimal_batch_size."""

    def __init__(self, memory_bytes=None, steps_per_trial=1, max_val=8192, margin=0.0,
                 batch_arg_name="batch_size", min_val=1, profile=None, logger=None, **kwargs):
        kwargs.setdefault("mode", "binsearch")
        super().__init__(steps_per_trial=steps_per_trial, max_val=max_val, margin=margin,
                         batch_arg_name=batch_arg_name, **kwargs)
        self.memory_bytes = api.parse_size(memory_bytes) if memory_bytes else None
        self.min_val = min_val
        self.logger = logger or log
        self.profile = profile  # measured at the start of fit when not given
        self.search = self.predicted = None

    def scale_batch_size(self, trainer, pl_module):
        self.profile = self.profile or measure(trainer, pl_module)
        self.predicted = predict(self.profile, self.memory_bytes, _device_index(pl_module),
                                    host=pl_module.device.type == "cpu")
        self.logger.info("vram: the planner predicts batch %d", self.predicted)
        # Lightning's tuner code around the trials: a checkpoint, its
        # parameters saved and reset, the dataloaders rebuilt per size
        # a VramCallback's micro-batches would hide the OOMs: plain steps here
        hidden = {k: pl_module.__dict__.pop(k) for k in ("training_step", "optimizer_zero_grad")
                  if k in pl_module.__dict__}
        helpers = _tuner_helpers()
        ckpt = os.path.join(trainer.default_root_dir, ".vram_batch_size_%s.ckpt" % uuid.uuid4())
        trainer.save_checkpoint(ckpt)
        params = helpers["__scale_batch_dump_params"](trainer)
        helpers["__scale_batch_reset_params"](trainer, self._steps_per_trial)
        if trainer.progress_bar_callback:
            trainer.progress_bar_callback.disable()

        def trial(b):
            helpers["_reset_progress"](trainer)
            lightning_setattr(pl_module, self._batch_arg_name, b)
            helpers["_reset_dataloaders"](trainer)
            helpers["_try_loop_run"](trainer, params)

        try:
            self.search = find_batch_size(trial, predicted=self.predicted or self.min_val,
                                          min_batch_size=self.min_val,
                                          max_batch_size=self._max_val,
                                          safety_margin=self._margin,
                                          cleanup=garbage_collection_cuda, logger=self.logger)
            size = self.search.batch_size
        finally:
            helpers["__scale_batch_restore_params"](trainer, params)
            if trainer.progress_bar_callback:
                trainer.progress_bar_callback.enable()
            trainer._checkpoint_connector.restore(ckpt)
            trainer.strategy.remove_checkpoint(ckpt)
            pl_module.__dict__.update(hidden)
        lightning_setattr(pl_module, self._batch_arg_name, size)
        helpers["_reset_dataloaders"](trainer)
        self.optimal_batch_size = size
        if self._early_exit:  # set by Lightning's Tuner: stop after the search
            raise _TunerExitException()
