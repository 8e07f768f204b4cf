"""What `import vram` brings into a training process: libvram.so maps
neither SQLite nor libcurl (vramd's core is not in it), and libyaml only once
a YAML config is read (src/tune/batchopt_config.c loads it then). Each check
runs in a fresh interpreter, so nothing the test runner imported counts."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import vram
from vram import tune

def mapped():
    with open("/proc/self/maps") as f:
        names = {line.split()[-1].rsplit("/", 1)[-1] for line in f if "/" in line}
    return sorted(n for n in names if n.startswith(("libsqlite3", "libcurl", "libyaml")))

vram.estimate("gpt2")
before = mapped()
opt = tune.BatchSizeOptimizer.from_yaml_text(
    "training_automations:\n  DynamicBatchSizeOptimizer:\n    max_batch_size: 32\n", batch=4)
print("|".join([",".join(before), ",".join(mapped()), str(opt.config["max_batch"])]))
"""


def test_import_maps_no_daemon_libraries_and_yaml_on_demand():
    env = dict(os.environ, VRAM_BACKEND="cpu")
    out = subprocess.run([sys.executable, "-c", PROBE, os.path.join(ROOT, "python")], env=env,
                         check=True, capture_output=True, text=True).stdout.strip().split("|")
    before, after, max_batch = out
    assert before == "", "import vram mapped %s" % before
    assert after.startswith("libyaml-0.so"), "reading a YAML config mapped %s" % after
    assert "libsqlite3" not in after and "libcurl" not in after
    assert max_batch == "32"


NO_YAML = r"""
import sys
sys.path.insert(0, sys.argv[1])
import vram
from vram import tune

print(vram.estimate("gpt2").total > 0)
print(tune.BatchSizeOptimizer(batch=4).config["max_batch"] > 0)  # defaults: no YAML read
for make in (lambda: tune.BatchSizeOptimizer.from_yaml_text("x: 1\n", batch=4),
             lambda: tune.BatchSizeOptimizer({"max_batch_size": 32}, batch=4)):
    try:
        make()
        print("read")
    except vram.LibraryNotFoundError as e:
        print(e)
"""


def test_a_machine_without_libyaml():
    """libyaml hidden (tests/fakes/hide_libyaml.c through LD_PRELOAD): the
    process imports vram and estimates; only reading a config, as YAML text
    or as a dict (the same key table), fails, with ENOLIB naming libyaml."""
    build = os.environ.get("VRAM_BUILD_DIR") or os.path.join(ROOT, "build")
    shim = os.path.join(os.environ.get("VRAM_FAKES_DIR") or os.path.join(build, "tests", "fakes"),
                        "hide_libyaml.so")
    assert os.path.exists(shim), shim
    env = dict(os.environ, VRAM_BACKEND="cpu", LD_PRELOAD=shim)
    out = subprocess.run([sys.executable, "-c", NO_YAML, os.path.join(ROOT, "python")], env=env,
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert out[:2] == ["True", "True"], out
    for line, origin in zip(out[2:], ("<config>", "config dict")):
        assert line.startswith(origin + ": reading YAML needs libyaml (libyaml-0.so.2)"), out
    assert len(out) == 4, out
