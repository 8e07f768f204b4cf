"""What `import vram` and one estimate add to a fresh Python process: the
shared objects it maps and the resident memory (bench/RESULTS.md, "libvram.so
before and after the library split"). Run from the source tree:

    VRAM_BACKEND=cpu VRAM_LIBRARY=build/libvram.so python3 bench/python/import_footprint.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def snapshot():
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if ".so" in line.split()[-1]}
    with open("/proc/self/status") as f:
        rss_kib = int(next(line.split()[1] for line in f if line.startswith("VmRSS")))
    return libs, rss_kib


libs0, rss0 = snapshot()
import vram  # noqa: E402

vram.estimate("gpt2")
libs1, rss1 = snapshot()
new = sorted(os.path.basename(p) for p in libs1 - libs0)
print("library: %s" % vram.library_path)
print("shared objects mapped by import vram + estimate: %d, RSS +%d KiB" % (len(new), rss1 - rss0))
print("  " + " ".join(new))
