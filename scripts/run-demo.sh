#!/usr/bin/env bash
# The main job of `make run`: vramd on two simulated H100-80GB GPUs and a few
# `vram run` jobs holding simulated memory: two start at once, one waits in
# the queue, one starts at once with a smaller batch (degraded), one with a
# higher priority overtakes the waiting one. Everything lives in a private
# temp dir (socket, database, sim state). Ends by itself in ~15 s, or on
# Ctrl-C, cleanly.
# Usage: bash scripts/run-demo.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
vram="$build/vram"
vramd="$build/vramd"
for b in "$vram" "$vramd"; do
    [ -x "$b" ] || { echo "run-demo: $b not found; build first (make)" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/vram-demo-XXXXXX)
daemon=
jobs_pids=()
cleanup() {
    trap - EXIT INT TERM
    for p in "${jobs_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'echo; echo "run-demo: interrupted; stopping the jobs and vramd"; exit 130' INT TERM

export VRAM_BACKEND=sim VRAM_SIM=2xH100-80GB VRAM_SIM_STATE="$dir/sim.state"
export VRAM_SOCKET="$dir/vramd.sock" VRAM_DB="$dir/vramd.db"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "vramd on $VRAM_SIM (safety margin 5%: 76 GiB of each GPU can be reserved)"
"$vramd" --foreground --listen 127.0.0.1:0 2>"$dir/vramd.log" &
daemon=$!
for _ in $(seq 100); do "$vram" status >/dev/null 2>&1 && break; sleep 0.05; done
tcp=$(curl -s --unix-socket "$VRAM_SOCKET" http://localhost/v1/health |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tcp"])')
echo "API: unix:$VRAM_SOCKET  and  http://$tcp (read-only without a token)"
echo "     try: curl -s http://$tcp/v1/status"

# job NAME SECONDS SIZE_EXPR [vram run options]: holds SIZE_EXPR GiB (a shell
# expression, may use $VRAM_BATCH_SIZE) on its first GPU for SECONDS.
job() {
    local name=$1 secs=$2 size=$3
    shift 3
    echo "\$ vram run --name $name $* -- vram sim alloc ..."
    ( "$vram" run --name "$name" "$@" -- sh -c \
        "exec '$vram' sim alloc --mem \$(($size))GiB --device \${CUDA_VISIBLE_DEVICES%%,*} --seconds $secs" 2>&1 |
        sed -u "s/^/    [$name] /" ) &
    jobs_pids+=($!)
    sleep 0.3
}

step "Two training jobs of 60 GiB: one per GPU"
job train-a 6 60 --mem 60GiB
job train-b 6 60 --mem 60GiB
step "A 50 GiB job: no GPU has 50 GiB left, it waits in the queue"
job train-c 3 50 --mem 50GiB
step "A fine-tuning job asking 40 GiB for batch 32, 1 GiB per sample, batch >= 4 accepted"
echo "   (16 GiB left per GPU: it starts now with batch 8 x 4 accumulation steps)"
job finetune-d 4 "8 + VRAM_BATCH_SIZE" --mem 40GiB --batch-size 32 --min-batch-size 4 --per-sample-mem 1GiB
step "A priority-5 evaluation of 70 GiB: queued ahead of train-c"
job eval-e 3 70 --mem 70GiB --priority 5
sleep 0.5

step "vram status"
"$vram" status
step "vram jobs"
"$vram" jobs

step "Waiting: when train-a/train-b end, eval-e (priority) and then train-c start"
for p in "${jobs_pids[@]}"; do wait "$p" || true; done
jobs_pids=()

step "All done: vram jobs"
"$vram" jobs
step "What vramd logged"
sed 's/^/    /' "$dir/vramd.log"
echo
echo "(state was kept in a temp SQLite database and removed; a real vramd keeps it in"
echo " \$XDG_STATE_HOME/vram/vramd.db and listens on \$XDG_RUNTIME_DIR/vram/vramd.sock)"
