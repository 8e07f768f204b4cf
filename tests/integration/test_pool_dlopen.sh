#!/usr/bin/env bash
# The PyTorch entry points as PyTorch reaches them: dlopen libvram.so and look
# the two symbols up by name (here through Python's ctypes), on a private
# simulated GPU. (No GPU and no CUDA build of PyTorch here: the real
# CUDAPluggableAllocator path is not exercised; see docs/pool.md.)
set -euo pipefail
: "${VRAM_BUILD_DIR:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VRAM_BACKEND=sim VRAM_SIM=1xtorchgpu:1GiB VRAM_SIM_STATE=$tmp/sim.state
export VRAM_POOL_TRACE=$tmp/pool-%d.trace
python3 - "$VRAM_BUILD_DIR/libvram.so" "${VRAM_BIN:?}" <<'PY'
import ctypes, json, subprocess, sys
lib = ctypes.CDLL(sys.argv[1])
malloc = lib.vram_torch_malloc
malloc.restype = ctypes.c_void_p
malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
free = lib.vram_torch_free
free.restype = None
free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.vram_torch_pool.restype = ctypes.c_void_p
lib.vram_torch_pool.argtypes = [ctypes.c_int]
lib.vram_pool_snapshot_json.restype = ctypes.c_void_p
lib.vram_pool_snapshot_json.argtypes = [ctypes.c_void_p]
libc = ctypes.CDLL(None)
libc.free.argtypes = [ctypes.c_void_p]

def snapshot():
    raw = lib.vram_pool_snapshot_json(lib.vram_torch_pool(0))
    text = ctypes.string_at(raw).decode()
    libc.free(raw)
    return json.loads(text)

stream = ctypes.c_void_p(0x1234)
ptrs = [(malloc(n, 0, stream), n) for n in (4096, 3 << 20, 64 << 20)]
assert all(p for p, _ in ptrs), ptrs
assert len({p for p, _ in ptrs}) == 3
s = snapshot()
assert s["stats"]["allocation.all.current"] == 3, s["stats"]
assert s["stats"]["requested_bytes.all.current"] == 4096 + (3 << 20) + (64 << 20)
assert all(seg["stream"] == 0x1234 for seg in s["segments"])
assert malloc(2 << 30, 0, stream) is None          # larger than the GPU: NULL, no crash
for p, n in ptrs:
    free(p, n, 0, stream)
free(ptrs[0][0], 4096, 0, stream)                   # twice: counted, ignored
s = snapshot()
assert s["stats"]["allocation.all.current"] == 0
assert s["stats"]["num_invalid_frees"] == 1
assert s["stats"]["num_ooms"] == 1

def device_used():  # what `vram info` (another process) sees
    out = subprocess.run([sys.argv[2], "info", "--json"], check=True, capture_output=True)
    return json.loads(out.stdout)["devices"][0]["used_bytes"]

reserved = s["stats"]["reserved_bytes.all.current"]
assert reserved > 0 and device_used() == reserved, (reserved, device_used())
released = ctypes.c_uint64()
lib.vram_pool_trim.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
assert lib.vram_pool_trim(lib.vram_torch_pool(0), ctypes.byref(released)) == 0
assert released.value == reserved and device_used() == 0
print("ctypes: 3 allocations, frees, snapshot, trim seen by vram info ok")
PY
# VRAM_POOL_TRACE recorded the requests (device 0 → pool-0.trace).
grep -q '^a 1 4096$' "$tmp/pool-0.trace" && grep -q '^f 3$' "$tmp/pool-0.trace"
"${VRAM_BIN:?}" replay "$tmp/pool-0.trace" --json >/dev/null
echo "1 passed, 0 failed"
