#!/usr/bin/env bash
# Many real `vram run` clients at once, random sizes (some multi-GPU, some
# degradable), random priorities: every job completes, none dies of OOM on
# the simulated GPUs, and at every sample of /v1/status (every 20 ms) the
# reservations stay within usable memory and the simulated memory in use
# stays within what vramd reserved.
source "$(dirname "$0")/daemon_lib.sh"
start_daemon

seed=${VRAM_TEST_SEED:-$$}
echo "seed $seed (VRAM_TEST_SEED to replay)"
RANDOM=$seed
pids=()
for i in $(seq 1 24); do
    mem=$((5 + RANDOM % 60)); secs=0.$((1 + RANDOM % 4)); prio=$((RANDOM % 3))
    if [ $((RANDOM % 5)) = 0 ]; then
        # a 2-GPU job holding memory on both of its GPUs
        "$VRAM" run --quiet --gpus 2 --mem ${mem}GiB --priority $prio --name "two$i" -- sh -c \
            "for d in \$(echo \$CUDA_VISIBLE_DEVICES | tr , ' '); do '$VRAM' sim alloc --mem ${mem}GiB --device \$d --seconds $secs >/dev/null & done; wait" &
    elif [ $((RANDOM % 3)) = 0 ]; then
        # degradable: mem GiB + 1 GiB per sample at the listed batches, 32 down to 4;
        # holds what it was granted
        "$VRAM" run --quiet --mem $((mem + 32))GiB --batch-size 32 --min-batch-size 4 \
            --mem-at 4=$((mem + 4))GiB,8=$((mem + 8))GiB,16=$((mem + 16))GiB \
            --priority $prio --name "deg$i" -- sh -c \
            "exec '$VRAM' sim alloc --mem \$(($mem + VRAM_BATCH_SIZE))GiB --device \$CUDA_VISIBLE_DEVICES --seconds $secs" >/dev/null &
    else
        "$VRAM" run --quiet --mem ${mem}GiB --priority $prio --name "one$i" -- \
            sh -c "exec '$VRAM' sim alloc --mem ${mem}GiB --device \$CUDA_VISIBLE_DEVICES --seconds $secs" >/dev/null &
    fi
    pids+=($!)
done

# Sample until every client is done (bounded: 60 s).
python3 - "$VRAM_SOCKET" "${pids[@]}" <<'PY'
import json, os, socket, sys, time
sock, pids = sys.argv[1], [int(p) for p in sys.argv[2:]]
def status():
    s = socket.socket(socket.AF_UNIX); s.connect(sock)
    s.sendall(b"GET /v1/status HTTP/1.0\r\nHost: x\r\n\r\n")
    data = b""
    while chunk := s.recv(65536): data += chunk
    s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])
def alive(p):
    try: os.kill(p, 0); return True
    except ProcessLookupError: return False
samples, deadline = 0, time.time() + 60
while any(alive(p) for p in pids) and time.time() < deadline:
    st = status(); samples += 1
    for d in st["devices"]:
        assert d["reserved_bytes"] <= d["usable_bytes"], ("reserved above usable", d)
        assert d["unmanaged_bytes"] == 0, ("job memory outside its reservation", d)
        assert d["used_bytes"] <= d["total_bytes"], d
    time.sleep(0.02)
print(f"ok - {samples} samples: reserved <= usable, no memory outside reservations")
PY
fails=0
for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
[ $fails = 0 ] || fail "$fails vram run clients failed (OOM on the sim or refused)"
j=$(api GET '/v1/jobs?limit=100')
[ "$(field "$j" 'sum(1 for x in d["jobs"] if x["state"]=="done")')" = 24 ] || fail "not all done: $j"
n=$(field "$j" 'sum(1 for x in d["jobs"] if x["degraded"])')
pass "24 concurrent clients, all done, no OOM ($n degraded)"
