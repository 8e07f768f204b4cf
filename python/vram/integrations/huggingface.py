"""vram in the Hugging Face Trainer (transformers 5.x).

    from vram.integrations.huggingface import attach
    attach(trainer)          # the one line, before trainer.train()

attach() adds a VramCallback to the trainer and routes its training_step
through the shared MicroBatchGuard (common.py). At the start of training
the callback measures the model on two samples of the training set
(vram.torch.analyze), logs the memory analysis, reserves the estimated
memory with vramd when one answers (with the batch table: when vramd
grants a smaller batch, each batch runs as micro-batches of it), and adds
vram's figures (vram/*) to every log the Trainer writes. When a batch runs out of memory it is run
again as 2, 4, ... micro-batches with gradient accumulation (the earlier
batches of the accumulation cycle too), so every sample is trained exactly
once and the optimizer sees the same gradient. The DataLoader's batch,
the effective batch, the learning-rate schedule and the step count do not
change.

VramCallback alone (TrainerCallback(callbacks=[VramCallback()])) does the
analysis, the reservation and the figures, not the OOM recovery: a
callback cannot catch an error inside the Trainer's step."""
import logging

from transformers import TrainerCallback

from ..torch.analyze import analyze
from .common import Session

log = logging.getLogger("vram")

ANALYSIS_SAMPLES = 2  # samples of the training set the model is measured on


def _hf_loss(output, batch):
    loss = output["loss"] if isinstance(output, dict) else output[0]
    if loss is None:
        raise ValueError("vram: the model returned no loss; give the batches labels")
    return loss


def measure(model, train_dataloader):
    """analyze() of `model` on the first samples of its training DataLoader
    (on the meta device when the model is on a GPU)."""
    dataset, collate = train_dataloader.dataset, train_dataloader.collate_fn
    example = collate([dataset[i] for i in range(min(ANALYSIS_SAMPLES, len(dataset)))])
    dev = next(model.parameters()).device
    return analyze(model, example, loss_fn=_hf_loss, name=type(model).__name__,
                   device="cpu" if dev.type == "cpu" else "meta")


class VramCallback(TrainerCallback):
    """vram's view of a Trainer's run (see the module's docstring).

    memory_bytes: the memory the run may use, model included (default: the
    free memory of the vram device the model is on); analysis=False skips
    the measurement (and the prediction and reservation with it);
    reserve=False never asks vramd; client: a vram.Client (default: vramd's
    socket); wait_timeout: how long to wait while vramd queues the job
    (None: as long as it takes); max_splits: how often a batch may be
    halved after out-of-memory errors. self.session (common.Session) holds
    the guard, the analysis and the reservation; self.figures() what is
    logged."""

    def __init__(self, trainer=None, memory_bytes=None, analysis=True, reserve=True,
                 client=None, wait_timeout=None, max_splits=3, logger=None):
        self.trainer = trainer
        self.analysis, self.reserve = analysis, reserve
        self.session = Session(self._zero_grad, memory_bytes, client, wait_timeout, max_splits,
                               logger)
        self.guard = self.session.guard
        self._model = None

    def _zero_grad(self):
        if self._model is not None:
            self._model.zero_grad(set_to_none=True)

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        self._model = model
        self.session.device = args.device
        if self.analysis and model is not None and train_dataloader is not None:
            dev = next(model.parameters()).device
            # alone (no attach) the callback cannot split the Trainer's steps
            self.session.start(model, measure(model, train_dataloader),
                               args.per_device_train_batch_size, dev,
                               reserve=self.reserve, name=args.run_name or "hf-trainer",
                               split=self.trainer is not None)

    def on_step_end(self, args, state, control, **kwargs):
        self.guard.end_cycle()  # the optimizer stepped

    def on_epoch_end(self, args, state, control, **kwargs):
        self.guard.end_cycle()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.trainer is None and logs is not None:  # attach() adds them before logging
            logs.update(self.figures())

    def on_train_end(self, args, state, control, **kwargs):
        self.session.finish()

    def figures(self):
        return self.session.figures()


def attach(trainer, **options):
    """Adds a VramCallback(trainer, **options) to `trainer`, runs its
    training steps through the callback's MicroBatchGuard and adds vram's
    figures to its logs. Returns the callback."""
    cb = VramCallback(trainer, **options)
    trainer.add_callback(cb)
    step, compute_loss, log_fn = trainer.training_step, trainer.compute_loss, trainer.log
    weight = [None]

    def training_step(model, inputs, num_items_in_batch=None):
        cb._model = model
        scaled = getattr(trainer, "loss_is_scaled_for_ga", None)
        if scaled is None:  # the Trainer's own rule: the loss is already a share of the batch
            scaled = (trainer.model_accepts_loss_kwargs and num_items_in_batch is not None) or \
                trainer.compute_loss_func is not None

        def piece(part, share):
            weight[0] = None if scaled or share == 1 else share
            try:
                return step(model, part, num_items_in_batch)
            finally:
                weight[0] = None
        return cb.guard.run(inputs, piece)

    def weighted_loss(model, inputs, return_outputs=False, num_items_in_batch=None):
        out = compute_loss(model, inputs, return_outputs=return_outputs,
                           num_items_in_batch=num_items_in_batch)
        w = weight[0]
        if w is None:
            return out
        return (out[0] * w,) + tuple(out[1:]) if return_outputs else out * w

    def log_with_figures(logs, *args, **kwargs):
        return log_fn({**logs, **cb.figures()}, *args, **kwargs)

    trainer.training_step, trainer.compute_loss, trainer.log = (training_step, weighted_loss,
                                                                log_with_figures)
    return cb


__all__ = ["VramCallback", "attach", "measure"]
