"""A drop-in for Accelerate's find_executable_batch_size that starts from
vram's prediction instead of 128, and after an out-of-memory error steps
down by 2 %, 4 %, 8 %, ... (vram.torch.find_batch_size) instead of 10 %.

    from vram.integrations.accelerate import find_executable_batch_size

    @find_executable_batch_size(profile=vt.analyze(model, example), memory_bytes="20GiB")
    def train(batch_size, model, optimizer):
        ...
    train(model, optimizer)

As Accelerate's, it returns what the function returns at the first batch
size that runs (the function is usually the whole training), so that batch
is the largest that ran among those tried, not a proven maximum: for the
exact maximum, search with vram.torch.find_batch_size on one step first."""
import functools
import logging

import torch

from .. import api
from ..torch.analyze import analyze
from ..torch.batch import find_batch_size
from .common import predict

log = logging.getLogger("vram")


class _Ran(Exception):
    """The function returned: the search stops at its first success."""


def find_executable_batch_size(function=None, starting_batch_size=None,
                               reduce_batch_size_fn=None, *, profile=None, model=None,
                               example_batch=None, loss_fn=None, forward=None,
                               optimizer="adamw", memory_bytes=None, device=0,
                               host=None, min_batch_size=1, logger=None):
    """Calls function(batch_size, *args, **kwargs) from the first batch size
    on, lower after each out-of-memory error (vram.torch.is_oom; other
    errors propagate), and returns its result. The first batch size:
    starting_batch_size, else the planner's largest batch for `profile`
    (or analyze(model, example_batch, loss_fn, optimizer, forward=...)) on
    memory_bytes of memory (the model included) or on vram device
    `device`; host (default: no CUDA here) predicts for the CPU's memory
    (common.predict). reduce_batch_size_fn(): Accelerate's hook, the next size
    after an error. Raises vram.torch.BatchSizeError when min_batch_size
    fails. The wrapper's .batch_size and .trials say what happened."""
    if function is None:
        return functools.partial(
            find_executable_batch_size, starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn, profile=profile, model=model,
            example_batch=example_batch, loss_fn=loss_fn, forward=forward, optimizer=optimizer,
            memory_bytes=memory_bytes, device=device, host=host, min_batch_size=min_batch_size,
            logger=logger)
    logger = logger or log

    def first_batch():
        if starting_batch_size:
            return int(starting_batch_size)
        prof = profile
        if prof is None:
            if model is None or example_batch is None:
                raise ValueError("vram: find_executable_batch_size needs starting_batch_size=, "
                                 "profile= or model= with example_batch=")
            prof = analyze(model, example_batch, loss_fn=loss_fn, optimizer=optimizer,
                           forward=forward)
        mem = api.parse_size(memory_bytes) if memory_bytes else None
        on_host = host if host is not None else not torch.cuda.is_available()
        predicted = predict(prof, mem, device, host=on_host)
        logger.info("vram: the planner predicts batch %d", predicted)
        return max(min_batch_size, predicted)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        result, tried = {}, []
        start = first_batch()

        def trial(b):
            if reduce_batch_size_fn is not None and tried:
                b = int(reduce_batch_size_fn())
            tried.append(b)
            result["value"] = function(b, *args, **kwargs)
            raise _Ran()

        try:
            find_batch_size(trial, predicted=start, min_batch_size=min_batch_size,
                            max_batch_size=start, logger=logger)
        except _Ran:
            wrapper.batch_size, wrapper.trials = tried[-1], len(tried)
            return result["value"]
        finally:
            wrapper.trials = len(tried)
        raise AssertionError("unreachable: find_batch_size returns only after a success")

    wrapper.batch_size, wrapper.trials = None, 0
    return wrapper
