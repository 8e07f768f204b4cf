"""vram in the Hugging Face Trainer (transformers 5.x).

    from vram.integrations.huggingface import attach
    attach(trainer)          # the one line, before trainer.train()

attach() adds a VramCallback to the trainer and routes its training_step
through the shared MicroBatchGuard (common.py). At the start of training
the callback measures the model on two samples of the training set
(vram.torch.analyze), logs the memory analysis, reserves the estimated
memory with vramd when one answers, and adds vram's figures (vram/*) to
every log the Trainer writes. When a batch runs out of memory it is run
again as 2, 4, ... micro-batches with gradient accumulation (the earlier
batches of the accumulation cycle too), so every sample is trained exactly
once and the optimizer sees the same gradient. The DataLoader's batch,
the effective batch, the learning-rate schedule and the step count do not
change.

VramCallback alone (TrainerCallback(callbacks=[VramCallback()])) does the
analysis, the reservation and the figures, not the OOM recovery: a
callback cannot catch an error inside the Trainer's step."""
import io
import logging

from transformers import TrainerCallback

from ..torch.analyze import analyze
from ..torch.report import print_memory_analysis
from .common import MicroBatchGuard, Reservation, estimate_bytes, peak_bytes, predict

log = logging.getLogger("vram")

ANALYSIS_SAMPLES = 2  # samples of the training set the model is measured on


def _hf_loss(output, batch):
    loss = output["loss"] if isinstance(output, dict) else output[0]
    if loss is None:
        raise ValueError("vram: the model returned no loss; give the batches labels")
    return loss


class VramCallback(TrainerCallback):
    """vram's view of a Trainer's run (see the module's docstring).

    memory_bytes: the memory the run may use (default: the free memory of
    the vram device the model is on); analysis=False skips the measurement
    (and the prediction and reservation with it); reserve=False never asks
    vramd; client: a vram.Client (default: vramd's socket); wait_timeout:
    how long to wait while vramd queues the job (None: as long as it takes).
    max_splits: how often a batch may be halved after out-of-memory errors.
    Figures: self.figures() (also in the Trainer's logs)."""

    def __init__(self, trainer=None, memory_bytes=None, analysis=True, reserve=True,
                 client=None, wait_timeout=None, max_splits=3, logger=None):
        self.trainer = trainer
        self.memory_bytes = memory_bytes
        self.analysis = analysis
        self.reserve = reserve
        self.logger = logger or log
        self.reservation = Reservation(client=client, wait_timeout=wait_timeout,
                                       logger=self.logger)
        self.guard = MicroBatchGuard(self._zero_grad, max_splits=max_splits, logger=self.logger)
        self.profile = None
        self.predicted_batch = None
        self.estimated_bytes = None
        self.device = None
        self._model = None

    def _zero_grad(self):
        if self._model is not None:
            self._model.zero_grad(set_to_none=True)

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        self._model = model
        self.device = args.device
        batch_size = args.per_device_train_batch_size
        if self.analysis and model is not None and train_dataloader is not None:
            self._analyze(model, train_dataloader, batch_size)
        if self.reserve and self.estimated_bytes:
            self.reservation.reserve(self.estimated_bytes, name=args.run_name or "hf-trainer",
                                     batch_size=batch_size)

    def _analyze(self, model, loader, batch_size):
        dataset, collate = loader.dataset, loader.collate_fn
        example = collate([dataset[i] for i in range(min(ANALYSIS_SAMPLES, len(dataset)))])
        dev = next(model.parameters()).device
        self.profile = analyze(model, example, loss_fn=_hf_loss, name=type(model).__name__,
                               device="cpu" if dev.type == "cpu" else "meta")
        index = (dev.index or 0) if dev.type == "cuda" else 0
        out = io.StringIO()
        target = {"gpu_memory_gb": self.memory_bytes / (1 << 30)} if self.memory_bytes else {
            "device": index}
        print_memory_analysis(model, batch_size, profile=self.profile, file=out,
                              optimizer=self.profile.optimizer, **target)
        for line in out.getvalue().rstrip().splitlines():
            self.logger.info("vram: %s", line)
        self.predicted_batch = predict(self.profile, self.memory_bytes, index,
                                              host=dev.type == "cpu")
        self.estimated_bytes = estimate_bytes(self.profile, batch_size, dev)
        self.logger.info("vram: per-device batch %d, estimated %d bytes; the largest batch "
                         "predicted to fit is %d", batch_size, self.estimated_bytes,
                         self.predicted_batch)

    def on_step_end(self, args, state, control, **kwargs):
        self.guard.end_cycle()  # the optimizer stepped

    def on_epoch_end(self, args, state, control, **kwargs):
        self.guard.end_cycle()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.trainer is None and logs is not None:  # attach() adds them before logging
            logs.update(self.figures())

    def on_train_end(self, args, state, control, **kwargs):
        self.reservation.release(peak_bytes(self.device))

    def figures(self):
        out = {"vram/peak_bytes": peak_bytes(self.device)}
        if self.estimated_bytes:
            out["vram/estimated_bytes"] = self.estimated_bytes
            out["vram/predicted_batch"] = self.predicted_batch
        out.update(self.guard.figures())
        out.update(self.reservation.figures())
        return out


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


__all__ = ["VramCallback", "attach"]
