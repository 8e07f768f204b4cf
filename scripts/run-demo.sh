#!/usr/bin/env bash
# The main job of `make run`: `vram info` on two simulated H100s, with a
# private state file so the demo never touches anybody's simulated GPUs.
# A second process holds 24 GiB on GPU 1 meanwhile, to show that simulated
# allocations are shared between processes.
# Usage: bash scripts/run-demo.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
vram="$build/vram"
[ -x "$vram" ] || { echo "run-demo: $vram not found; build first (make)" >&2; exit 1; }

state_dir=$(mktemp -d)
holder=
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
    rm -rf "$state_dir"
}
trap cleanup EXIT
export VRAM_SIM=2xH100-80GB VRAM_SIM_STATE="$state_dir/sim.state"

echo "\$ vram sim alloc --mem 24GiB --device 1 &"
"$vram" sim alloc --mem 24GiB --device 1 --seconds 60 >"$state_dir/holder.out" &
holder=$!
for _ in $(seq 100); do [ -s "$state_dir/holder.out" ] && break; sleep 0.05; done
cat "$state_dir/holder.out"

echo
echo "\$ VRAM_SIM=$VRAM_SIM vram info"
"$vram" info
