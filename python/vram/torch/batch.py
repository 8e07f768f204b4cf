"""Finding the largest batch that really runs, guided by the estimate.

Search: try the prediction (or, when peaks are measured, a little below it);
from a measured peak, the line through the model memory and that peak says
where the capacity is reached; when the line is contradicted, walk 1, 2, 4
away from it; without a line, try the prediction's neighbour, then step 2 %,
4 %, ... away from the prediction; once a success and a failure are known,
bisect only between them. The line is only a guess for the next trial, never
a figure anything reserves: near the capacity activations dominate and the
peak grows about in step with the batch, so a measured point usually
corrects an estimate that is off by a few percent in one trial; where it
does not (the optimizer step as the peak), the trial contradicts the line
and the search walks (docs/python.md)."""
import gc
import logging
from dataclasses import dataclass, field
from typing import List, Optional

from ..errors import OutOfMemoryError
from .oom import is_oom

log = logging.getLogger("vram")


FIRST_STEP = 0.02  # first move away from the prediction: estimates err by a few percent
MEASURED_START = 0.05  # with measured peaks, the first trial is this much below the prediction


class BatchSizeError(OutOfMemoryError):
    """Not even min_batch_size runs."""


@dataclass
class Trial:
    batch_size: int
    ok: bool
    peak_bytes: Optional[int] = None
    error: str = ""


@dataclass
class BatchSearch:
    maximum: int  # largest batch that ran (exact when maximum + 1 failed or is the cap)
    batch_size: int  # maximum less the safety margin, at least min_batch_size
    exact: bool  # maximum + 1 was tried and failed (or maximum == max_batch_size)
    trials: List[Trial] = field(default_factory=list)

    @property
    def count(self):
        return len(self.trials)


def _free_memory(cleanup):
    gc.collect()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass
    if cleanup:
        cleanup()


def _refined(successes, capacity, intercept):
    """Batch predicted from measured peaks: memory = base + slope * batch,
    through the planner's intercept (model memory) and the largest success,
    else through the smallest and the largest success. The long baseline
    keeps the allocator's rounding steps from tilting the line."""
    if capacity is None:
        return None
    pts = sorted((b, m) for b, m in successes if m is not None)
    if not pts:
        return None
    b1, m1 = pts[-1]
    if intercept is not None:
        b0, m0 = 0, intercept
    else:
        b0, m0 = pts[0]
    if b1 == b0 or m1 <= m0:
        return None
    slope = (m1 - m0) / (b1 - b0)
    return int((capacity - (m1 - slope * b1)) // slope)


def find_batch_size(step_fn, predicted=None, min_batch_size=1, max_batch_size=1 << 16,
                    safety_margin=0.0, memory_fn=None, capacity=None, intercept=None,
                    cleanup=None, logger=None):
    """Largest batch b in [min_batch_size, max_batch_size] for which
    step_fn(b) runs without an out-of-memory error (vram.torch.is_oom; any
    other error propagates).

    predicted: the first batch to try (e.g. vram.plan(...).largest_fitting);
    without one the search starts at min_batch_size and doubles.
    memory_fn(reset=False): peak bytes of the last trial (e.g. a pool's
    peak); called with reset=True before each trial. With
    capacity (bytes) and intercept (the planner's model_bytes), refines the
    prediction from measured successes. Memory is freed between trials
    (gc, torch.cuda.empty_cache, cleanup()). One log line per trial.
    Returns BatchSearch(maximum, batch_size = maximum * (1 - safety_margin),
    trials). Raises BatchSizeError when min_batch_size itself fails."""
    logger = logger or log
    if min_batch_size < 1 or max_batch_size < min_batch_size:
        raise ValueError("vram: need 1 <= min_batch_size <= max_batch_size")
    if not 0 <= safety_margin < 1:
        raise ValueError("vram: safety_margin must be in [0, 1)")
    lo, hi = 0, max_batch_size + 1  # largest success, smallest failure
    trials, successes, tried = [], [], {}
    # relative steps away from the prediction, doubled at each step in the
    # same direction (a gallop); without a prediction, doubling the batch
    down, up = FIRST_STEP, FIRST_STEP if predicted else 1.0
    trust_guess, guessed, walk = True, False, 0
    b = predicted if predicted else min_batch_size
    if predicted and memory_fn is not None and capacity is not None:
        # peaks will be measured: start a little below the prediction, where
        # the step most likely runs, and let its peak place the next trial
        b = max(min_batch_size, int(predicted * (1 - MEASURED_START)))
    while True:
        b = max(min_batch_size, min(max_batch_size, int(b)))
        if memory_fn is not None:
            memory_fn(reset=True)
        try:
            step_fn(b)
            ok, err = True, ""
        except Exception as e:  # noqa: BLE001 (only OOMs are caught; the rest re-raised)
            if not is_oom(e):
                raise
            ok, err = False, str(e).splitlines()[0][:200]
            del e
        peak = memory_fn() if (memory_fn is not None and ok) else None
        _free_memory(cleanup)
        trials.append(Trial(b, ok, peak, err))
        tried[b] = ok
        logger.info("vram: batch-size trial %d: batch %d %s%s", len(trials), b,
                    "ran" if ok else "out of memory",
                    " (peak %d bytes)" % peak if peak is not None else "")
        if guessed and ok == (b > guess):  # the line said the opposite: it is off
            trust_guess = False  # by a little; walk away from it 1, 2, 4, ...
            walk = 1 if ok else -1
        if ok:
            lo = max(lo, b)
            successes.append((b, peak))
        else:
            hi = min(hi, b)
            if b == min_batch_size:
                raise BatchSizeError("vram: even the minimum batch size %d does not fit in "
                                     "memory (%s); lower min_batch_size, use gradient "
                                     "accumulation or free memory" % (min_batch_size, err))
        if hi - lo <= 1:
            break
        guess = _refined(successes, capacity, intercept) if trust_guess else None
        guessed = guess is not None and lo <= guess <= hi
        if guessed:  # inside the interval; at an end, the neighbour inside it
            b = min(max(guess, lo + 1), hi - 1)
        elif walk and ok == (walk > 0):  # after a wrong guess, on the same side
            b = min(max(lo + walk if ok else hi + walk, lo + 1), hi - 1)
            walk *= 2
        elif lo == 0 and len(trials) == 1 and hi == predicted:
            b = hi - 1  # the prediction failed: its neighbour first, as upwards
        elif lo == 0:  # only failures: step down from the smallest
            b = min(hi - 1, int(hi * (1 - down)))
            down = min(0.5, 2 * down)
        elif hi > max_batch_size:  # only successes: step up
            b = lo + max(1, int(lo * up)) if len(trials) > 1 or lo != predicted else lo + 1
            up = up if len(trials) == 1 else min(1.0, 2 * up)
        else:
            b = (lo + hi) // 2
        if b in tried:
            b = (lo + hi) // 2
    maximum = lo
    batch = max(min_batch_size, int(maximum * (1 - safety_margin))) if maximum else 0
    exact = maximum == max_batch_size or tried.get(maximum + 1) is False
    logger.info("vram: largest batch %d (%s) after %d trials; using %d", maximum,
                "exact" if exact else "not proven", len(trials), batch)
    return BatchSearch(maximum=maximum, batch_size=batch, exact=exact, trials=trials)


def probe_batch(samples, batch_size, length=len):
    """A batch for probing memory from variable-length samples: the longest
    sample (by `length`) repeated batch_size times, so the size found holds
    for every batch of the data set."""
    import torch
    longest = max(samples, key=length)
    return torch.stack([longest] * batch_size)


def to_device(batch, dev):
    """The batch's tensors moved to `dev` (inside tuples, lists, dicts)."""
    if hasattr(batch, "to"):
        return batch.to(dev)
    if isinstance(batch, dict):
        return {k: to_device(v, dev) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, dev) for v in batch)
    return batch


def training_step(model, optimizer, batch, loss_fn, forward=None):
    """One real training step (forward, loss, backward, optimizer step)."""
    from .analyze import call_model
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn((forward or call_model)(model, batch), batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def auto_select_batch_size(model, device="cpu", start_batch=None, example_batch=None,
                           loss_fn=None, optimizer="adamw", min_batch_size=1,
                           max_batch_size=4096, safety_margin=0.1, profile=None,
                           memory_cap=None, samples=None, forward=None, logger=None):
    """The largest batch for training `model` on `device` with real steps.

    The first trial is the planner's prediction from `profile` (measured
    with analyze() from example_batch when not given) on the vram device of
    the same index, or on memory_cap bytes; start_batch overrides it. Off
    CUDA the prediction is vram.plan(host=True): host memory, judged by the
    estimate's allocated peak (no caching allocator, no CUDA context). On the
    CPU, memory_cap is enforced: a trial whose tensors (the model's and all
    the step makes, live at once) exceed it counts as out of memory.
    samples: variable-length samples, probed at the longest (probe_batch).
    forward and loss_fn as in analyze().
    The model's weights are restored afterwards. Returns a BatchSearch."""
    import torch

    from .. import api
    from .analyze import analyze, default_loss, make_optimizer, resize_batch

    if samples is not None:
        def example(b):
            return probe_batch(samples, b)
    else:
        example = example_batch
    if example is None:
        raise ValueError("vram.torch.auto_select_batch_size: give example_batch= or samples=")
    loss_fn = loss_fn or default_loss
    dev = torch.device(device)
    memory_fn = capacity = None
    if dev.type == "cuda":  # measured peaks (what the device gave) refine the prediction
        def memory_fn(reset=False):
            if reset:
                torch.cuda.reset_peak_memory_stats(dev)
            return torch.cuda.max_memory_reserved(dev)
        capacity = torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev)
    cap = api.parse_size(memory_cap, "memory_cap") if memory_cap is not None else None
    capacity = cap if cap else capacity
    counted = None
    if dev.type != "cuda" and cap:
        # no device allocator to ask: the cap is enforced on what the step
        # holds at once, the model's tensors plus every tensor the step makes
        # (activations, gradients, optimizer states) until it dies
        resident = sum(t.numel() * t.element_size() for t in
                       list(model.parameters()) + list(model.buffers()))
        last_peak = [None]

        def memory_fn(reset=False):
            if reset:
                last_peak[0] = None
            return last_peak[0]

        def counted(run, b):
            from .meta import LiveBytes
            mode = LiveBytes()
            with mode:
                run(b)
            last_peak[0] = resident + mode.peak
            if last_peak[0] > cap:
                raise OutOfMemoryError("memory_cap: batch %d held %d bytes at once, over the cap "
                                       "of %d" % (b, last_peak[0], cap))
    predicted, intercept = start_batch, None
    if predicted is None:
        prof = profile or analyze(model, example, loss_fn=loss_fn, optimizer=optimizer,
                                  forward=forward)
        # the CUDA context is outside the capacity measured above: no overhead
        target = {"gpu_mem": capacity} if capacity else {"gpu": dev.index or 0}
        # host memory has no caching allocator nor CUDA context: each batch
        # is judged by the estimate's allocated peak (vram_plan_host)
        host = True if dev.type != "cuda" else None
        plan = api.plan(profile=prof, target=1.0, power_of_two=False, optimizer=prof.optimizer,
                        overhead_bytes=0, host=host, **target)
        predicted, intercept = plan.largest_fitting or min_batch_size, plan.model_bytes
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.to(dev).train()

    def run(b):
        batch = resize_batch(example, b)
        batch = to_device(batch, dev)
        opt = make_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
        try:
            training_step(model, opt, batch, loss_fn, forward)
        finally:
            del opt, batch

    def step(b):
        return counted(run, b) if counted else run(b)

    try:
        return find_batch_size(step, predicted=predicted, min_batch_size=min_batch_size,
                               max_batch_size=max_batch_size, safety_margin=safety_margin,
                               memory_fn=memory_fn, capacity=capacity, intercept=intercept,
                               logger=logger)
    finally:
        model.load_state_dict(weights)
