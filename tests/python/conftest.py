"""Fixtures of the Python package's tests: the package from the source tree,
the build's libvram (VRAM_LIBRARY, set by tests/integration/test_python.sh),
simulated GPUs with a private state file, and a real vramd."""
import json
import os
import select
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
BUILD = os.environ.get("VRAM_BUILD_DIR") or os.path.join(ROOT, "build")
os.environ.setdefault("VRAM_LIBRARY", os.path.join(BUILD, "libvram.so"))

try:  # modest CPU use on a shared 2-core CI machine
    import torch
    torch.set_num_threads(1)
except ImportError:
    pass


def use_sim(monkeypatch, tmp_path, spec):
    """Simulated GPUs `spec` (VRAM_SIM), state in this test's temp dir."""
    monkeypatch.setenv("VRAM_BACKEND", "sim")
    monkeypatch.setenv("VRAM_SIM", spec)
    monkeypatch.setenv("VRAM_SIM_STATE", str(tmp_path / "sim.state"))
    return tmp_path


@pytest.fixture
def sim(monkeypatch, tmp_path):
    """Two simulated H100-80GB."""
    return use_sim(monkeypatch, tmp_path, "2xH100-80GB")


@pytest.fixture
def no_gpu(monkeypatch):
    """No driver, no VRAM_SIM: the CPU backend."""
    monkeypatch.delenv("VRAM_SIM", raising=False)
    monkeypatch.setenv("VRAM_BACKEND", "auto")
    monkeypatch.setenv("VRAM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
    monkeypatch.setenv("VRAM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")


def accumulation_reference(model, opt, n, effective, micro, micro_loss):
    """Loss per optimizer step of a run with fixed micro-batches of `micro`
    samples and gradient accumulation to `effective` samples a step, over
    samples 0..n-1; micro_loss(model, start, end) is a micro-batch's loss,
    already weighted by its share of the step."""
    losses = []
    for s in range(0, n, effective):
        opt.zero_grad()
        total = 0.0
        for m in range(s, s + effective, micro):
            loss = micro_loss(model, m, m + micro)
            loss.backward()
            total += float(loss.detach())
        opt.step()
        losses.append(total)
    return losses


def cli(*args, env=None):
    """Runs the vram binary; its JSON output."""
    binary = os.environ.get("VRAM_BIN") or os.path.join(BUILD, "vram")
    out = subprocess.run([binary] + list(args), check=True, capture_output=True, text=True,
                         env=env)
    return json.loads(out.stdout)


@pytest.fixture
def vramd(sim, monkeypatch):
    """A real vramd on a private socket and database (sim GPUs). vramd
    forks into the background once it listens, so when the first process
    exits the socket answers; it is stopped by pid (from /v1/health) and
    waited for through a pidfd."""
    sock = str(sim / "vramd.sock")
    monkeypatch.setenv("VRAM_SOCKET", sock)
    monkeypatch.setenv("VRAM_DB", str(sim / "vramd.db"))
    monkeypatch.setenv("VRAM_LISTEN", "")
    log = open(sim / "vramd.log", "w")
    rc = subprocess.call([os.path.join(BUILD, "vramd")], stdout=log, stderr=log)
    assert rc == 0, open(sim / "vramd.log").read()
    import vram
    client = vram.Client(sock)
    pid = client.health()["pid"]
    fd = os.pidfd_open(pid)
    yield client
    os.kill(pid, signal.SIGTERM)
    assert select.select([fd], [], [], 30)[0], "vramd did not stop within 30 s"
    os.close(fd)
    log.close()
