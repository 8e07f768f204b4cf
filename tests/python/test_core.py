"""The core package: loader, errors, devices, estimate/plan against the CLI,
Pool on simulated GPUs, Client and job() against a real vramd, profile()."""
import io
import json
import os
import signal
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD, ROOT, cli

import vram

GiB = 1 << 30


# ---- loading ---------------------------------------------------------------

def _import_in(pkg_parent, env):
    code = "import vram; print(vram.library_path)"
    return subprocess.run([sys.executable, "-c", code], cwd=pkg_parent, env=env,
                          capture_output=True, text=True)


def test_library_lookup_order(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("VRAM_LIBRARY", "VRAM_BUILD_DIR")}
    copy = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "python", "vram"), copy / "vram")
    # 1. VRAM_LIBRARY wins
    r = _import_in(copy, dict(env, VRAM_LIBRARY=os.path.join(BUILD, "libvram.so")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(BUILD, "libvram.so")
    # a VRAM_LIBRARY that does not exist is an error naming it
    r = _import_in(copy, dict(env, VRAM_LIBRARY=str(tmp_path / "nope.so")))
    assert r.returncode != 0 and "VRAM_LIBRARY=%s does not exist" % (tmp_path / "nope.so") \
        in r.stderr
    # 2. next to the package
    shutil.copy(os.path.join(BUILD, "libvram.so"), copy / "vram" / "libvram.so")
    r = _import_in(copy, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(copy / "vram" / "libvram.so")
    os.remove(copy / "vram" / "libvram.so")
    # 3. build tree: VRAM_BUILD_DIR
    r = _import_in(copy, dict(env, VRAM_BUILD_DIR=BUILD))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(BUILD, "libvram.so")
    # 4. nothing: a clear ImportError naming what was tried (unless the
    # system loader has an installed libvram)
    r = _import_in(copy, env)
    if r.returncode == 0:
        assert "libvram" in r.stdout  # found through the system loader
    else:
        assert "ImportError: vram: libvram not found; tried VRAM_LIBRARY (unset)" in r.stderr
        assert str(copy / "vram" / "libvram.so") in r.stderr
        assert "system loader" not in r.stderr or "libvram.so.0" in r.stderr



# ---- ctypes mirrors against C's layout ---------------------------------------

def test_every_ctypes_mirror_is_checked_against_c():
    """Each ctypes.Structure of the package was compared with libvram's
    vram_layout_json at import (a mirror nobody checks is how libvram once
    wrote past a vram_pool_config_t that lacked a new field)."""
    import ctypes
    import importlib
    import pkgutil
    mirrors = []
    for info in pkgutil.walk_packages(vram.__path__, "vram."):
        mod = importlib.import_module(info.name)
        mirrors += [c for c in vars(mod).values() if isinstance(c, type)
                    and issubclass(c, ctypes.Structure) and c.__module__ == mod.__name__]
    assert len(mirrors) >= 13
    unchecked = [c.__qualname__ for c in mirrors if c not in vram._lib.checked_mirrors]
    assert unchecked == []


def test_a_stale_mirror_is_refused_with_its_differences():
    import ctypes

    class Stale(ctypes.Structure):  # vram_pool_config_t before "expandable"
        _fields_ = [("strategy", ctypes.c_int), ("limit_bytes", ctypes.c_uint64),
                    ("limit_fraction", ctypes.c_double), ("trace_path", ctypes.c_char_p)]

    class Retyped(ctypes.Structure):
        _fields_ = [("key", ctypes.c_uint64), ("size", ctypes.c_uint32),
                    ("from_", ctypes.c_int), ("to", ctypes.c_int)]

    with pytest.raises(ImportError) as e:
        vram._lib.check_layouts({Stale: "vram_pool_config_t"})
    assert "Stale of vram_pool_config_t" in str(e.value)
    assert "field expandable is missing" in str(e.value) and "size 32, C has 40" in str(e.value)
    with pytest.raises(ImportError, match="field size at offset 8 size 4, C has offset 8 size 8"):
        vram._lib.check_layouts({Retyped: "vram_swap_move_t"})
    with pytest.raises(ImportError, match="does not describe vram_nothing_t"):
        vram._lib.check_layouts({Stale: "vram_nothing_t"})
    assert Stale not in vram._lib.checked_mirrors

# ---- errors ----------------------------------------------------------------

def test_errors_carry_c_name_and_message():
    with pytest.raises(vram.NotFoundError) as e:
        vram.estimate("gtp2")
    assert e.value.code_name == "VRAM_ENOENT" and e.value.code == -10
    assert 'unknown model "gtp2"' in e.value.message and "gpt2" in e.value.message
    assert isinstance(e.value, vram.Error) and isinstance(e.value, LookupError)
    with pytest.raises(vram.InvalidArgumentError) as e:
        vram.estimate("gpt2", batch_size=0)
    assert e.value.code_name == "VRAM_EINVAL" and 'batch_size "0"' in e.value.message
    with pytest.raises(vram.InvalidArgumentError, match='unknown "precision"|precision'):
        vram.estimate("gpt2", precision="fp8")
    with pytest.raises(vram.ParseError, match="missing field \"activation_bytes_per_sample\""):
        vram.estimate(profile={"parameters": 10})
    with pytest.raises(vram.IOError) as e:
        vram.estimate(hf_config="/nonexistent/config.json")
    assert e.value.code_name == "VRAM_EIO" and "/nonexistent/config.json" in str(e.value)


# ---- devices ---------------------------------------------------------------

def test_devices_on_sim(sim):
    devs = vram.devices()
    assert [d.index for d in devs] == [0, 1]
    d = devs[0]
    assert d.backend == "sim" and d.name == "H100-80GB" and d.total_bytes == 80 * GiB
    assert d.used_bytes + d.free_bytes == d.total_bytes and d.health == "AVAILABLE"
    assert d.compute_capability == "9.0" and d.is_gpu
    # same as `vram info --json`
    info = cli("info", "--json")
    assert [x["uuid"] for x in info["devices"]] == [x.uuid for x in devs]
    out = io.StringIO()
    vram.print_gpu_info(file=out)
    text = out.getvalue()
    assert text.startswith("2 GPUs (sim backend)")
    assert "[1] H100-80GB: 80.00 GiB total" in text


def test_devices_without_gpu(no_gpu):
    devs = vram.devices()
    assert len(devs) == 1 and devs[0].backend == "cpu" and not devs[0].is_gpu
    out = io.StringIO()
    vram.print_gpu_info(file=out)
    assert out.getvalue().startswith("No GPU available (cpu backend")
    assert "PyTorch work runs on the CPU" in out.getvalue()


def test_bad_sim_spec_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_BACKEND", "sim")
    monkeypatch.setenv("VRAM_SIM", "2xH100-80GB,bogus:xyz")
    monkeypatch.setenv("VRAM_SIM_STATE", str(tmp_path / "s"))
    with pytest.raises(vram.InvalidArgumentError, match="bogus"):
        vram.devices()


# ---- estimate and plan: the same answers as the CLI ------------------------

@pytest.mark.parametrize("model,kw,flags", [
    ("gpt2", dict(batch_size=8, seq_len=512), ["--batch-size", "8", "--seq-len", "512"]),
    ("resnet50", dict(batch_size=64, precision="amp-bf16", optimizer="sgd"),
     ["--batch-size", "64", "--precision", "amp-bf16", "--optimizer", "sgd"]),
    ("llama2-7b", dict(mode="infer", max_new_tokens=256, precision="int8"),
     ["--mode", "infer", "--max-new-tokens", "256", "--precision", "int8"]),
])
def test_estimate_matches_cli(model, kw, flags):
    e = vram.estimate(model, **kw)
    ref = cli("estimate", "--model", model, "--json", *flags)
    assert e.raw["bytes"] == ref["bytes"]
    assert e.total == ref["bytes"]["total"] and e.parameters_count == ref["parameters_count"]
    # the breakdown's identities (docs/estimation.md): nvidia-smi = reserved +
    # context, reserved = allocated peak + rounding; not every part is live at
    # the peak, so the parts together are at least the total
    assert e.total == e.nvidia_smi == e.reserved + e.cuda_context
    assert e.reserved == e.allocated_peak + e.allocator_rounding
    parts = (e.parameters + e.buffers + e.gradients + e.optimizer_states + e.activations +
             e.kv_cache + e.overhead)
    assert parts >= e.total


def test_plan_matches_cli_and_judges_batch():
    p = vram.plan("bert-base", gpu_name="A100-40GB", batch_size=512, seq_len=512)
    ref = cli("plan", "--model", "bert-base", "--gpu-name", "A100-40GB", "--batch-size", "512",
              "--seq-len", "512", "--json")
    assert (p.maximum, p.recommended, p.safe, p.largest_fitting) == tuple(
        ref["recommendations"][k] for k in ("maximum", "recommended", "safe", "largest_fitting"))
    assert p.verdict == ref["current"]["verdict"] == "will not fit" and p.fits is False
    assert p.micro_batch_size * p.accumulation_steps >= 512
    at = lambda b: vram.estimate("bert-base", batch_size=b, seq_len=512).total  # noqa: E731
    assert at(p.largest_fitting) <= p.budget_bytes < at(p.largest_fitting + 1)
    assert [s.change for s in p.suggestions] == [s["change"] for s in ref["suggestions"]]


def test_plan_on_a_sim_device(sim):
    p = vram.plan("gpt2", gpu=1, target=0.5, power_of_two=False)
    assert p.total_bytes == 80 * GiB and "GPU 1: H100-80GB (sim)" == p.gpu
    assert p.maximum == p.largest_fitting  # no rounding
    with pytest.raises(vram.NoDeviceError):
        vram.plan("gpt2", gpu=7)
    with pytest.raises(vram.InvalidArgumentError, match="exactly one of"):
        vram.plan("gpt2", gpu=0, gpu_mem="8GiB")


# ---- Pool ------------------------------------------------------------------

def test_pool_on_sim_allocates_counts_and_refuses(sim):
    with vram.Pool(0, limit="1GiB", strategy="balanced") as pool:
        a = pool.alloc(300 << 20)
        b = pool.alloc(200 << 20)
        s = pool.stats()
        assert s.allocated_bytes == 500 << 20 and s.active_allocations == 2
        assert s.reserved_bytes >= s.allocated_bytes and s.limit_bytes == GiB
        # the sim device sees the pool's segments
        assert vram.devices()[0].used_bytes >= s.reserved_bytes
        with pytest.raises(vram.OutOfMemoryError) as e:
            pool.alloc(700 << 20)
        assert e.value.code_name == "VRAM_ENOMEM" and "pool limit" in e.value.message
        assert isinstance(e.value, MemoryError)
        assert pool.stats().num_ooms == 1
        pool.free(a)
        pool.free(b)
        assert pool.stats().allocated_bytes == 0
        reserved = pool.stats().reserved_bytes
        assert pool.trim() == reserved and pool.stats().reserved_bytes == 0
        with pytest.raises(vram.InvalidArgumentError):
            pool.free(a)  # double free
    with pytest.raises(vram.InvalidArgumentError, match="strategy|greedy"):
        vram.Pool(0, strategy="fastest")


def test_pool_fills_the_sim_device(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_BACKEND", "sim")
    monkeypatch.setenv("VRAM_SIM", "gpu:1GiB")
    monkeypatch.setenv("VRAM_SIM_STATE", str(tmp_path / "s"))
    with vram.Pool(0) as pool:
        ptrs = []
        with pytest.raises(vram.OutOfMemoryError, match="device free memory"):
            while True:
                ptrs.append(pool.alloc(100 << 20))
        assert 8 <= len(ptrs) <= 10


# ---- size arguments --------------------------------------------------------

@pytest.mark.parametrize("call,name,why", [
    (lambda: vram.Pool(0, limit=1.5), "limit", "neither a fraction"),
    (lambda: vram.Pool(0, limit=True), "limit", "not a size"),
    (lambda: vram.Pool(0, limit=-1), "limit", "negative"),
    (lambda: vram.Pool(0, limit="1.5 parsecs"), "limit", "unknown unit"),
    (lambda: vram.Pool(0, limit=1 << 64), "limit", "too large"),
    (lambda: vram.Pool(0).alloc(-5), "size", "negative"),
    (lambda: vram.Pool(0).alloc(2.5), "size", "whole number of bytes"),
    (lambda: vram.Pool(0).set_limit([1]), "limit", "not a size"),
    (lambda: vram.tune.SwapLRU(-1), "gpu_budget", "negative"),
    (lambda: vram.tune.SwapLRU(1 << 20, "-2MiB"), "host_budget", "negative"),
    (lambda: vram.plan("gpt2", gpu_mem="-8GiB"), "gpu_mem", "negative"),
    (lambda: vram.plan("gpt2", gpu_mem=float("inf")), "gpu_mem", "whole number"),
    (lambda: vram.estimate("gpt2", overhead_bytes="lots"), "overhead_bytes", "number"),
    (lambda: vram.Context().select(None), "need_bytes", "not a size"),
])
def test_size_arguments_are_refused_naming_the_argument(sim, call, name, why):
    with pytest.raises(vram.InvalidArgumentError) as e:
        call()
    assert e.value.message.startswith(name + ": ") and why in e.value.message
    assert isinstance(e.value, ValueError)


def test_size_arguments_accept_ints_and_units(sim):
    assert vram.parse_size("1.5GiB", "x") == 3 << 29 and vram.parse_size(2e9, "x") == 2 * 10**9
    with vram.Pool(0, limit=0.5) as pool:  # a float in (0, 1] is a fraction of the device
        assert pool.stats().limit_bytes == 40 * GiB
        ptr = pool.alloc("1GiB")  # the one parser: units work everywhere
        assert pool.stats().allocated_bytes == GiB
        pool.free(ptr)
        pool.set_limit("2GiB")
        assert pool.stats().limit_bytes == 2 * GiB
    assert vram.plan("gpt2", gpu_mem="24GiB").total_bytes == 24 * GiB


# ---- profile() -------------------------------------------------------------

def test_profile_counts_times_and_pool_memory(sim, tmp_path):
    vram.reset_profile()
    with vram.Pool(0) as pool:
        @vram.profile("alloc64", pool=pool)
        def grab():
            return pool.alloc(64 << 20)

        for _ in range(5):
            grab()
        for _ in range(3):
            with vram.profile("noop", pool=pool):
                pass
    st = vram.profile_stats()
    assert st["alloc64"]["count"] == 5 and st["noop"]["count"] == 3
    assert st["alloc64"]["memory_delta_bytes"]["mean"] == 64 << 20
    assert st["alloc64"]["memory_delta_bytes"]["max"] == 64 << 20
    assert st["noop"]["memory_delta_bytes"]["max"] == 0
    t = st["alloc64"]["seconds"]
    assert 0 <= t["min"] <= t["p50"] <= t["p99"] <= t["max"] and t["mean"] > 0
    assert st["alloc64"]["memory_source"] == "vram_pool"
    path = tmp_path / "prof.json"
    vram.dump_profile(str(path))
    assert json.loads(path.read_text())["alloc64"]["count"] == 5
    out = io.StringIO()
    vram.print_profile(file=out)
    assert "alloc64" in out.getvalue() and "noop" in out.getvalue()


def test_profile_rss_on_cpu():
    vram.reset_profile()
    with vram.profile("buffer"):
        blob = b"\x01" * (64 << 20)  # written pages: RSS grows by 64 MiB
    st = vram.profile_stats()["buffer"]
    assert st["memory_source"] in ("rss", "torch_cuda")
    if st["memory_source"] == "rss":
        assert st["memory_delta_bytes"]["max"] >= 60 << 20
    del blob


# ---- Client and job() against a real vramd -------------------------------

def test_client_submit_wait_cancel(vramd):
    c = vramd
    assert c.health()["status"] == "ok"
    # the job's process: a child in a group of its own (cancel signals it)
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    a = c.submit(mem_bytes="60GiB", name="a", pid=child.pid)
    assert a.state == "running" and a.reserved_bytes == 60 * GiB
    b = c.submit(mem_bytes=70 * GiB, name="b", devices=[a.devices[0]], timeout_s=0)
    assert b.state == "queued" and b.queue_position == 1
    assert [j.id for j in c.jobs() if j.active] == [a.id, b.id]
    with pytest.raises(vram.TimeoutError):
        c.wait(b.id, timeout=0)
    c.cancel(a.id)  # frees the device: b starts, and a's process is told to stop
    assert c.wait(b.id, timeout=30).state == "running"
    assert c.job(a.id).state == "cancelled"
    assert child.wait(timeout=60) == -signal.SIGTERM  # vramd ended the job's process group
    done = c.finish(b.id, exit_status=0)
    assert done.state == "done" and c.wait(b.id, until="ended").state == "done"
    kinds = [e["kind"] for e in c.events(b.id)]
    assert kinds[0] == "submitted" and "admitted" in kinds
    with pytest.raises(vram.InvalidArgumentError, match="mem_bytes: "):
        c.submit(mem_bytes=-1)  # the package's size parser refuses it first
    with pytest.raises(vram.DaemonError) as e:  # and vramd, for clients that do not
        c.request("POST", "/v1/jobs", {"mem_bytes": -1})
    assert e.value.status == 422 or e.value.status == 400
    with pytest.raises(vram.DaemonError) as e:
        c.cancel(a.id)
    assert e.value.status == 409
    assert "devices" in c.status()


def test_default_socket_follows_vram_endpoint(tmp_path, monkeypatch):
    """One order for every client, libvram's vram_endpoint (as vramd listens
    and the CLI looks): VRAM_SOCKET, else the socket of the user's own vramd
    when it exists, else the system socket."""
    monkeypatch.setenv("VRAM_SOCKET", str(tmp_path / "x.sock"))
    assert vram.default_socket_path() == str(tmp_path / "x.sock")
    monkeypatch.delenv("VRAM_SOCKET")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    if os.geteuid() == 0:
        assert vram.default_socket_path() == "/run/vram/vramd.sock"
        return
    own = tmp_path / "vram" / "vramd.sock"
    own.parent.mkdir()
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(own))
    try:
        assert vram.default_socket_path() == str(own)
    finally:
        s.close()
    own.unlink()
    if not os.path.exists("/run/vram/vramd.sock"):  # neither: the user's own, to name it
        assert vram.default_socket_path() == str(own)
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    if not os.path.exists("/run/vram/vramd.sock"):
        assert vram.default_socket_path() == "/tmp/vram-%d/vramd.sock" % os.geteuid()


def test_client_without_daemon(tmp_path):
    with pytest.raises(vram.ConnectionError, match=str(tmp_path / "none.sock")):
        vram.Client(str(tmp_path / "none.sock")).health()


def test_job_from_environment_renews_lease(vramd, monkeypatch):
    j0 = vram.job()
    assert not j0.managed and j0.batch_size is None and j0.accumulation_steps == 1
    job = vramd.submit(mem_bytes="1GiB", batch_size=32, min_batch_size=8,
                       batch_bytes={16: "600MiB", 8: "400MiB"})
    assert [(e["batch"], e["bytes"]) for e in vramd.request("GET", "/v1/jobs/%d" % job.id)[
        "batch_bytes"]] == [(8, 400 << 20), (16, 600 << 20)]
    monkeypatch.setenv("VRAM_JOB_ID", str(job.id))
    monkeypatch.setenv("VRAM_BATCH_SIZE", "16")
    monkeypatch.setenv("VRAM_GRAD_ACCUM", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with vram.job(client=vramd, renew_interval=3600) as j:
        assert j.managed and (j.id, j.batch_size, j.accumulation_steps) == (job.id, 16, 2)
        assert j.devices == ["1"]
        j.renew()
        assert j.renewals == 1
        j.record_peak(123)
        assert vramd.job(job.id).peak_bytes is None
    assert j.peak_bytes == 123
    # stop() reported it; vramd keeps the largest report
    assert vramd.job(job.id).peak_bytes == 123
    assert vramd.report_peak(job.id, 100).peak_bytes == 123
    assert vramd.report_peak(job.id, 4096).raw["peak_bytes"] == 4096
    with pytest.raises(vram.DaemonError) as e:
        vramd.report_peak(job.id, 1 << 61)
    assert e.value.status == 422 and "peak_bytes" in str(e.value)
    monkeypatch.setenv("VRAM_BATCH_SIZE", "x")
    with pytest.raises(ValueError, match="VRAM_BATCH_SIZE"):
        vram.job()


def test_batch_table_is_the_clis_and_degrades_in_vramd(vramd, tmp_path):
    """vram.batch_table() is libvram's table: the one `vram submit --model
    ... --min-batch-size` sends vramd. Client.submit(estimate=) sends it,
    and vramd, with less memory free than the full batch needs, starts the
    job at a smaller batch of the table, reserving exactly its entry."""
    work = dict(model="gpt2", seq_len=1024, batch_size=32, precision="amp-bf16")
    table = vram.batch_table(**work, min_batch_size=4)
    assert list(table) == sorted(table) and min(table) == 4 and max(table) == 32
    assert table[32] == vram.estimate(**work).total
    assert vram.plan(model="gpt2", seq_len=1024, precision="amp-bf16",
                     gpu_mem="80GiB").batch_table(32, 4) == table
    binary = os.environ.get("VRAM_BIN") or os.path.join(BUILD, "vram")
    out = subprocess.run([binary, "submit", "--parsable", "--model", "gpt2", "--seq-len", "1024",
                          "--batch-size", "32", "--precision", "amp-bf16", "--min-batch-size", "4",
                          "--", "true"], check=True, capture_output=True, text=True,
                         cwd=str(tmp_path))  # the job's output file goes there
    sent = vramd.request("GET", "/v1/jobs/%d" % int(out.stdout.split(";")[0]))
    assert {e["batch"]: e["bytes"] for e in sent["batch_bytes"]} == table
    assert sent["mem_bytes"] == table[32] and sent["min_batch_size"] == 4
    vramd.wait(sent["id"], until="ended", timeout=60)
    # both GPUs filled so that the full batch does not fit, a smaller one does
    total = vram.devices()[0].total_bytes
    middle = sorted(table)[len(table) // 2]
    filler = vramd.submit(mem_bytes=total - (table[middle] + table[32]) // 2, gpus=2)
    assert filler.state == "running"
    with pytest.raises(ValueError, match="both give the memory"):
        vramd.submit(mem_bytes="1GiB", estimate=work)
    job = vramd.submit(estimate=work, min_batch_size=4, timeout_s=0)
    assert job.state == "running", job
    assert 4 <= job.granted_batch_size < 32 and job.granted_batch_size in table
    assert job.reserved_bytes == table[job.granted_batch_size]
    got = vramd.request("GET", "/v1/jobs/%d" % job.id)
    assert {e["batch"]: e["bytes"] for e in got["batch_bytes"]} == table
    # the integrations' Reservation, asked the same way, on the other GPU
    from vram.integrations.common import Reservation
    r = Reservation(client=vramd)
    rj = r.reserve(estimate=work, min_batch_size=4, name="reservation")
    assert rj.state == "running" and rj.devices != job.devices
    assert rj.granted_batch_size < 32 and rj.reserved_bytes == table[rj.granted_batch_size]
    r.release(1 << 30)
    assert vramd.job(rj.id).state == "done"
    # without min_batch_size the batch is fixed (no table): the full batch
    # is over what vramd ever grants on an 80 GB GPU
    with pytest.raises(vram.DaemonError, match="never fit") as e:
        vramd.submit(estimate=work, timeout_s=0)
    assert e.value.status == 422


def test_pip_install_offline(tmp_path):
    """`pip install ./python` with the interpreter's pip, no network (the
    in-tree backend needs nothing; test_python_install.sh covers the rest)."""
    pip = [sys.executable, "-m", "pip"]
    if subprocess.call(pip + ["--version"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL):
        pytest.skip("pip is not installed for %s" % sys.executable)
    target, src = tmp_path / "site", tmp_path / "src"
    # a copy, away from the tree's build/: the wheel takes VRAM_LIBRARY's library
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run(pip + ["install", "--no-index", "--no-build-isolation", "--no-deps",
                              "--target", str(target), str(src)],
                       capture_output=True, text=True,
                       env=dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "vram" / "torch" / "analyze.py").exists()
    assert (target / "vram" / "libvram.so").exists()
    code = textwrap.dedent("""
        import vram, sys
        assert vram.__file__.startswith(sys.argv[1]), vram.__file__
        print(vram.estimate("gpt2").total)
    """)
    r = subprocess.run([sys.executable, "-c", code, str(target)], cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=str(target)), capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == vram.estimate("gpt2").total
