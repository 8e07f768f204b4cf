"""vram.integrations with the real libraries (transformers, lightning,
accelerate) on a small random-init GPT-2 of transformers, on the CPU, with
REAL out-of-memory errors: trainer_probe.py runs in a subprocess that
lowers its own RLIMIT_DATA (as rlimit_probe.py does), so PyTorch's CPU
allocator refuses. Each training run is compared with the same run
without a limit: the weights after the steps must agree, so no sample was
lost or trained twice."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MiB = 1 << 20
CAP = 16 * MiB  # a batch of 32 of the probe's GPT-2 needs more; 16 fits
BATCH = 32
CPU_OOM = "can't allocate memory"


def probe(which, cap=CAP, batch=BATCH, socket=None):
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(ROOT, "python"),
               VRAM_SOCKET=socket or os.path.join(HERE, "no-vramd-here.sock"))
    r = subprocess.run([sys.executable, os.path.join(HERE, "trainer_probe.py"), which, str(cap),
                        str(batch)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout), r.stderr


def assert_recovered(d):
    """Real OOMs, a smaller micro-batch afterwards, the same weights."""
    assert d["errors"] and all(CPU_OOM in e for e in d["errors"]), d["errors"]
    assert d["ooms"] == len(d["errors"]) >= 1
    assert d["micro_batch_size"] < BATCH
    assert d["max_diff"] < 1e-5, d["max_diff"]


def test_huggingface_trainer_under_a_real_limit(vramd):
    """attach(trainer): the limit arrives after the first batch of an
    accumulation cycle (2 batches of 32), so the second runs out of memory
    with gradients already accumulated; both run again as micro-batches and
    the weights after 3 optimizer steps equal the unlimited run's. The job
    was reserved with vramd for the estimate, and ended with its peak; every
    log line of the Trainer carries vram's figures."""
    d, err = probe("hf", socket=vramd.socket_path)
    assert_recovered(d)
    assert "earlier batches of this accumulation cycle run again" in err
    assert d["logs"] and all("vram/ooms" in e and "vram/peak_bytes" in e for e in d["logs"])
    assert [e["vram/ooms"] for e in d["logs"]][-1] == d["ooms"]
    assert d["job"] is not None
    job = vramd.job(d["job"])
    assert job.state == "done" and job.mem_bytes == d["estimated"] > 0
    assert job.peak_bytes and job.peak_bytes > 0
    assert all(e["vram/job"] == d["job"] for e in d["logs"])


@pytest.mark.parametrize("trainer", ["hf", "lightning"])
def test_trainer_starts_at_the_granted_batch(vramd, trainer):
    """Neighbours hold all but what a quarter of the batch needs: vramd
    grants the callback's reservation that batch (from the batch table the
    callback sends) and reserves exactly its bytes; the Trainer (Hugging
    Face through attach(), Lightning's VramCallback) runs every batch as
    micro-batches of it from the first step, no OOM, and ends with the
    weights of the run without vram."""
    d, err = probe(trainer + "-granted", socket=vramd.socket_path)
    table = {int(b): v for b, v in d["table"].items()}
    g = d["expected_grant"]
    assert 1 <= g <= BATCH // 4 and table[g] < table[BATCH]
    job = vramd.job(d["job"])
    assert (job.state, job.granted_batch_size, job.batch_size) == ("done", g, BATCH), job
    assert job.reserved_bytes == table[g] and job.mem_bytes == table[BATCH], job
    assert d["ooms"] == 0 and "out of memory" not in err
    assert d["micro_batch_sizes"] and set(d["micro_batch_sizes"]) == {g}, d["micro_batch_sizes"]
    assert d["max_diff"] < 1e-5, d["max_diff"]
    assert "vramd granted batch %d of %d" % (g, BATCH) in err
    assert all(e["vram/micro_batch_size"] == g for e in d["logs"] if "vram/micro_batch_size" in e)


def test_session_inside_vram_run_splits_to_its_granted_batch(vramd, monkeypatch, caplog):
    """Inside `vram run` (VRAM_JOB_ID, VRAM_BATCH_SIZE set to the granted
    batch 8 of 32) the callbacks' session reserves nothing more and runs
    each batch of 32 as 4 micro-batches of 8; a session that cannot split
    the steps says the trainer's batch exceeds the grant."""
    import torch

    import vram
    from vram.integrations.common import Session
    from vram.torch.analyze import analyze

    job = vramd.submit(mem_bytes="1GiB", batch_size=32, pid=os.getpid())
    monkeypatch.setenv("VRAM_JOB_ID", str(job.id))
    monkeypatch.setenv("VRAM_BATCH_SIZE", "8")
    monkeypatch.setenv("VRAM_GRAD_ACCUM", "4")
    model = torch.nn.Linear(4, 2)
    profile = analyze(model, torch.randn(2, 4), loss_fn=lambda out, _: out.sum(), device="cpu")
    for split, parts in ((True, 4), (False, 1)):
        session = Session(lambda: None, memory_bytes="1GiB", client=vram.Client())
        caplog.clear()
        session.start(model, profile, 32, "cpu", split=split)
        assert session.reservation.job is None and session.reservation.granted_batch_size == 8
        assert session.guard.chain.begin_step(32) == parts
        session.guard.chain.end_step()
        said = "vramd granted batch 8 but the trainer runs 32" in caplog.text
        assert said is not split, caplog.text
        session.finish()
    assert [j.id for j in vramd.jobs()] == [job.id]


def test_lightning_callback_under_a_real_limit():
    """VramCallback in a real Lightning fit (accumulate_grad_batches=2, the
    limit after the first batch): the same recovery and weights as the
    unlimited fit; no vramd, so nothing reserved; the figures logged."""
    d, _ = probe("lightning")
    assert_recovered(d)
    assert d["job"] is None
    assert d["metrics"]["vram/ooms"] == d["ooms"]
    assert d["metrics"]["vram/micro_batch_size"] == d["micro_batch_size"]


def test_lightning_batch_size_finder_starts_at_the_prediction():
    """VramBatchSizeFinder through Lightning's tuner: the first trial is the
    planner's prediction, the maximum is exact (maximum + 1 failed with the
    allocator's error), found in fewer trials than Lightning's binsearch
    would take, and the size set is the maximum less the margin."""
    d, _ = probe("lightning-finder")
    trials = d["trials"]
    assert trials[0][0] == d["predicted"] > 0
    assert d["exact"] and [d["maximum"] + 1, False] in [t[:2] for t in trials]
    assert all(CPU_OOM in t[2] for t in trials if not t[1])
    assert d["set"] == int(d["maximum"] * 0.9)
    # fewer trials than Lightning's binsearch needs for the same maximum
    assert len(trials) < lightning_binsearch_trials(d["maximum"]), trials


def lightning_binsearch_trials(maximum, start=2):
    """Trials of Lightning 2.6's BatchSizeFinder(mode="binsearch") when
    every batch up to `maximum` runs: double from `start` to the first
    failure, then bisect until the bounds touch (its _run_binsearch_scaling)."""
    low, high, b, n = 1, None, start, 0
    while True:
        n += 1
        if b <= maximum:
            low = b
            if high is not None and high - low <= 1:
                return n
            b = (low + high) // 2 if high is not None else 2 * b
        else:
            high = b
            b = (low + high) // 2
            if high - low <= 1:
                return n


def test_accelerate_drop_in_starts_at_the_prediction():
    """The drop-in runs the function first at vram's prediction and returns
    its result; Accelerate's own, from 64, steps down by 10 % through real
    OOMs. Both answers ran; vram's took fewer calls."""
    d, _ = probe("accelerate", batch=64)
    assert d["vram"] == d["vram_tried"][-1] > 0
    assert d["accelerate"] == d["accelerate_tried"][-1] > 0
    assert len(d["vram_tried"]) < len(d["accelerate_tried"]), d
    # what the drop-in returns ran; it is not below 80 % of what Accelerate found
    assert d["vram"] >= 0.8 * d["accelerate"], d


# ---- in process: the edges (the OOM is injected here, the rest is real) ----

def _injected_oom():
    return RuntimeError("DefaultCPUAllocator: can't allocate memory: injected")


def test_guard_gives_up_with_a_message_and_no_gradients():
    """A batch that does not fit even as 2**max_splits micro-batches: the
    chain's message (vram.OutOfMemoryError), one error per attempt, and
    no partial gradient left behind."""
    import torch

    import vram
    from vram.integrations.common import MicroBatchGuard

    model = torch.nn.Linear(4, 1)
    guard = MicroBatchGuard(lambda: model.zero_grad(set_to_none=True), max_splits=2)
    sizes = []

    def piece(x, share):
        sizes.append(len(x))
        model(x).pow(2).mean().mul(share).backward()  # a gradient exists, then the OOM
        raise _injected_oom()

    with pytest.raises(vram.OutOfMemoryError, match="even as 4 micro-batches of 2"):
        guard.run(torch.randn(8, 4), piece)
    assert sizes == [8, 4, 2] and len(guard.errors) == 3 and guard.ooms == 3
    assert all(p.grad is None for p in model.parameters())


def test_guard_matches_the_whole_batch_gradient():
    """Micro-batches of 3 (after an OOM at 6 and more) give the gradient of
    the whole batch of 6, with the batch before it in the cycle run again."""
    import torch

    from vram.integrations.common import MicroBatchGuard

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    a, b = torch.randn(6, 4), torch.randn(6, 4)
    model.zero_grad()
    (model(a).pow(2).mean() / 2 + model(b).pow(2).mean() / 2).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    guard = MicroBatchGuard(lambda: model.zero_grad(set_to_none=True))
    seen = []

    def piece(x, share):
        seen.append(len(x))
        if len(x) > 3 and len(seen) > 1:  # the limit arrives during the second batch
            raise _injected_oom()
        loss = model(x).pow(2).mean() * share / 2
        loss.backward()
        return loss.detach()

    guard.run(a, piece)
    guard.run(b, piece)
    assert seen == [6, 6, 3, 3, 3, 3] and guard.micro_batch_size == 3
    for p, g in zip(model.parameters(), want):
        assert torch.allclose(p.grad, g, atol=1e-6)


def test_accelerate_drop_in_edges():
    """No way to predict: a clear error; even min_batch_size failing:
    BatchSizeError; starting_batch_size wins over the prediction."""
    import vram.torch as vt
    from vram.integrations.accelerate import find_executable_batch_size

    with pytest.raises(ValueError, match="starting_batch_size=, profile= or model="):
        find_executable_batch_size(lambda b: b)()

    def never(b):
        raise _injected_oom()
    with pytest.raises(vt.BatchSizeError, match="minimum batch size 1"):
        find_executable_batch_size(never, starting_batch_size=4)()
    fn = find_executable_batch_size(lambda b, x: (b, x), starting_batch_size=7)
    assert fn("x") == (7, "x") and fn.batch_size == 7 and fn.trials == 1


def test_lightning_finder_names_missing_private_helpers(monkeypatch):
    """The finder's trials use Lightning's private tuner helpers (no public
    API runs one trial at a chosen size): a Lightning without one gets an
    ImportError naming it and the public fallback, not an AttributeError
    in the middle of fit."""
    from lightning.pytorch.tuner import batch_size_scaling

    from vram.integrations import lightning as vl
    assert set(vl._tuner_helpers()) == set(vl.TUNER_HELPERS)
    monkeypatch.delattr(batch_size_scaling, "_try_loop_run")
    with pytest.raises(ImportError, match="lacks _try_loop_run.*init_val"):
        vl._tuner_helpers()
