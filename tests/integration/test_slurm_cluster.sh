#!/usr/bin/env bash
# A real three-node Slurm cluster on one machine (contrib/slurm/vram-testcluster):
# slurmctld, and per node a slurmd and a vramd in the node's own network and
# UTS namespaces, on simulated GPUs of 80, 40 and 24 GiB; Gres=vram (MiB)
# per node; the spank_vram plugin and job_submit.lua turn --vram-mem into
# --gres=vram. 40 batch jobs of mixed sizes, and:
#   - Slurm places each job where its memory is (gres/vram), vramd admits it
#     on a GPU against real free memory (30 GiB held outside Slurm on one
#     GPU of node2 counts), and the GPUs really hold the memory (vram sim
#     alloc inside each job, which fails past a GPU's memory);
#   - no GPU ever had more reserved than it could hold (vramd's records);
#   - jobs shared GPUs where the memory allowed;
#   - a model job too big for its GPU starts at a smaller batch with accumulation;
#   - node3 is killed mid-run (slurmd, vramd, its two jobs) while the others
#     run elsewhere: Slurm requeues its jobs, none is lost, and when node3's
#     vramd comes back the reservations of the dead jobs are gone;
#   - every job completed exactly once, except the one that fails on
#     purpose and the one cancelled while running; every reservation of
#     every node is released at the end (done, failed, cancelled, crashed).
# Skips (exit 77) only where network namespaces cannot be made.
set -euo pipefail
B=${VRAM_BUILD_DIR:?}
S=${VRAM_SOURCE_DIR:?}
VRAM=$B/vram CLUSTER=$S/contrib/slurm/vram-testcluster
passed=0
T=$(mktemp -d /tmp/vram-cluster.XXXXXX)
chmod 755 "$T"
D=$T/cluster
logs() {
    for f in "$D"/log/*.log; do
        [ -e "$f" ] && { echo "--- $f (last 30 lines)"; tail -n 30 "$f"; }
    done
}
fail() { echo "FAIL: $*" >&2; logs >&2; echo "$passed passed, 1 failed"; exit 1; }
ok() { passed=$((passed + 1)); echo "ok: $*"; }
cleanup() {
    [ -n "${outside:-}" ] && kill "$outside" 2>/dev/null
    [ -n "${prom:-}" ] && kill "$prom" 2>/dev/null && wait "$prom" 2>/dev/null
    VRAM_BUILD_DIR=$B "$CLUSTER" down "$D" || true
    rm -rf "$T"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || fail "needs root: slurmd and network namespaces"
# Network namespaces are the one thing that may be impossible here (a
# container without CAP_SYS_ADMIN): skip then, and only then.
probe=vram-probe-$$
if ! ip netns add "$probe" 2>"$T/netns.err"; then
    echo "SKIP: network namespaces cannot be made here: $(cat "$T/netns.err")"
    exit 77
fi
ip netns del "$probe"

VRAM_BUILD_DIR=$B "$CLUSTER" up "$D" node1=2xH100-80GB node2=2xA100-40GB node3=2xgpu24:24GiB >"$T/up.out" 2>&1 ||
    { [ $? = 3 ] && echo "SKIP: $(cat "$T/up.out")" && exit 77; fail "the cluster did not come up: $(cat "$T/up.out")"; }
export SLURM_CONF=$D/slurm.conf
URLS=$(cat "$D/urls")

# One Prometheus scraping every node's vramd (relayed from its loopback).
command -v prometheus >/dev/null || fail "prometheus is missing: run \`make deps\`"
PROM_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
{
    echo "global: {scrape_interval: 1s}"
    echo "scrape_configs: [{job_name: vramd, static_configs: [{targets: [$(echo "$URLS" | sed 's|[a-z0-9]*=http://||g; s|,|, |g')]}]}]"
} >"$T/prometheus.yml"
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/prom" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$T/prometheus.log" 2>&1 &
prom=$!
promql() { # QUERY: prints the first value, or nothing
    curl -s --noproxy '*' "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
        python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null
}
feature() { grep -o "^NodeName=$1 .*" "$D/slurm.conf" | grep -o 'vram_per_gpu_[0-9]*'; }
api() { curl -s --unix-socket "$D/$1/vramd.sock" "http://localhost$2"; }

# Polls a Slurm state until CMD succeeds (slurmctld tells nothing by itself).
wait_for() { # SECONDS WHAT CMD...
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS < deadline)) || fail "$what: not within $limit s"
        sleep 0.2
    done
}
all_idle() { [ "$(sinfo -h -N -o %T | sort -u | paste -sd,)" = idle ]; }
wait_for 60 "three idle nodes" all_idle
gres=$(sinfo -h -N -o "%N=%G" | paste -sd' ')
ok "three nodes in their own namespaces: $gres"

# --- outside use: 30 GiB of node2's GPU 0 held by a process vramd did not admit ---
mkfifo "$T/outside.out"
exec {ofd}<>"$T/outside.out" # kept open: the holder never writes into a closed pipe
"$CLUSTER" run "$D" node2 "$VRAM" sim alloc --mem 30GiB --device 0 >"$T/outside.out" 2>&1 &
outside=$!
read -r -t 60 -u $ofd line || fail "the outside allocation said nothing"
[[ $line == *holding* ]] || fail "the outside allocation said: $line"
# vramd's status may be an observation up to STATUS_CACHE old
sees_outside() { [ "$(api node2 /v1/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["unmanaged_bytes"] >> 30)')" = 30 ]; }
wait_for 30 "node2's vramd seeing 30 GiB used outside on GPU 0" sees_outside

# --- the jobs -------------------------------------------------------------------
# Every start appends a line; a job that completes creates done/ID once
# (noclobber: a second completion of the same job is recorded as a duplicate).
mkdir -p "$T/done" "$T/out"
mkfifo "$T/hold"
cat >"$T/job.sh" <<EOF
#!/bin/bash
# job.sh MEM SECONDS [hold|fail]
set -u
echo "\$SLURM_JOB_ID \$(hostname) \$VRAM_JOB_ID \$CUDA_VISIBLE_DEVICES \${VRAM_BATCH_SIZE:--} \${VRAM_GRAD_ACCUM:--} \${SLURM_RESTART_COUNT:-0}" >>$T/starts
if [ "\${3:-}" = hold ] && [ ! -e $T/crashed ]; then read <$T/hold; fi
env \$(cat $D/\$(hostname)/env) $VRAM sim alloc --mem "\$1" --seconds "\$2" >/dev/null || exit 2
[ "\${3:-}" = fail ] && exit 1
set -o noclobber
{ echo >$T/done/\$SLURM_JOB_ID; } 2>/dev/null || echo \$SLURM_JOB_ID >>$T/duplicates
exit 0
EOF
chmod +x "$T/job.sh"
submit() { # MEM SECONDS [MODE] -- sbatch options
    local mem=$1 secs=$2 mode=${3:-}
    shift 3
    [ "${1:-}" = -- ] && shift
    sbatch --parsable --requeue -o "$T/out/%j.out" $away "$@" "$T/job.sh" "$mem" "$secs" $mode
}
ids=()
# Two jobs that hold node3 until it is killed.
away=
for _ in 1 2; do ids+=("$(submit 8GiB 1 hold -- --vram-mem=10GiB -w node3)"); done
[[ ${ids[0]}${ids[1]} =~ ^[0-9]+$ ]] || fail "the node3 jobs were not submitted; see sbatch's message above"
started_on_node3() { [ "$(cat "$T/starts" 2>/dev/null | grep -c " node3 ")" -ge 2 ]; }
wait_for 60 "the two jobs on node3 started" started_on_node3

# --- the cluster view: every node's GPUs and jobs ------------------------------
export VRAM_TOKEN_FILE=$D/token # jobs over TCP need the nodes' token
"$VRAM" status --cluster "$URLS" >"$T/cluster.txt" || fail "vram status --cluster: $(cat "$T/cluster.txt")"
"$VRAM" status --cluster "$URLS" --json >"$T/cluster.json" || fail "vram status --cluster --json"
python3 - "$T/cluster.json" <<'EOF' || fail "vram status --cluster: $(cat "$T/cluster.json")"
import json, sys
nodes = {n["name"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
assert sorted(nodes) == ["node1", "node2", "node3"], nodes.keys()
assert sum(len(n["status"]["devices"]) for n in nodes.values()) == 6
assert [d["total_bytes"] >> 30 for d in nodes["node3"]["status"]["devices"]] == [24, 24]
assert nodes["node2"]["status"]["devices"][0]["unmanaged_bytes"] == 30 << 30
held = [j for j in nodes["node3"]["jobs"] if j["state"] == "running" and j["labels"].get("slurm_job_id")]
assert len(held) == 2 and all(j["reserved_bytes"] == 10 << 30 for j in held), nodes["node3"]["jobs"]
EOF
cat "$T/cluster.txt"
ok "vram status --cluster shows 3 nodes, 6 GPUs, node2's outside use, node3's two Slurm jobs"
prom_sees_cluster() {
    [ "$(promql 'count(vram_device_memory_total_bytes)')" = 6 ] &&
        [ "$(promql "sum(vram_job_memory_reserved_bytes{instance=\"$(cat "$D/node3/addr"):7878\",label_slurm_job_id!=\"\"})")" = $((20 << 30)) ] &&
        [ "$(promql "vram_device_memory_used_bytes{instance=\"$(cat "$D/node2/addr"):7878\",gpu=\"0\"}")" = $((30 << 30)) ]
}
wait_for 90 "Prometheus scraping 6 GPUs, node3's 20 GiB of Slurm jobs and node2's 30 GiB outside use" prom_sees_cluster
ok "one Prometheus scrapes all three vramds: 6 GPUs, node3's Slurm jobs by label_slurm_job_id, node2's outside use"

# 36 of mixed sizes; 60 GiB ones only fit node1's GPUs, 30 GiB ones not
# node3's (job_submit.lua adds the constraint). They
# run while node3 dies, on the other nodes: a job that ends on a node as it
# dies may be requeued although it completed (Slurm never heard of its end),
# which would show here as a job run twice.
away=--exclude=node3
for _ in $(seq 6); do ids+=("$(submit 55GiB 3 "" -- --vram-mem=60GiB)"); done
for _ in $(seq 10); do ids+=("$(submit 28GiB 2 "" -- --vram-mem=30GiB)"); done
for _ in $(seq 10); do ids+=("$(submit 14GiB 2 "" -- --vram-mem=16GiB)"); done
for _ in $(seq 10); do ids+=("$(submit 9GiB 2 "" -- --vram-mem=10GiB)"); done
# One that fails, and one cancelled while it runs.
failing=$(submit 5GiB 1 fail -- --vram-mem=6GiB)
victim=$(submit 5GiB 600 "" -- --vram-mem=6GiB)
# A model too big for any GPU at its batch: vramd lowers the batch.
model=$(sbatch --parsable --requeue -o "$T/out/%j.out" $away --gres=vram:40960 --constraint="$(feature node1)" \
    --vram-model=gpt2 --vram-estimate-args="--batch-size 64 --seq-len 1024" --vram-min-batch=1 \
    "$T/job.sh" 30GiB 1)
ids+=("$failing" "$victim" "$model")
[ ${#ids[@]} = 41 ] || fail "submitted ${#ids[@]} jobs"
# what job_submit.lua made of --vram-mem: the gres count, and the nodes whose GPUs can hold it
sixty=${ids[2]} thirty=${ids[8]}
scontrol show job "$sixty" >"$T/sixty.job"
grep -q "TresPerNode=gres:vram:61440" "$T/sixty.job" && grep -q "Features=$(feature node1) " "$T/sixty.job" ||
    fail "a --vram-mem=60GiB job: $(grep -E 'TresPerNode|Features' "$T/sixty.job")"
features=$(scontrol show job "$thirty" | grep -o 'Features=[^ ]*')
[ "$features" = "Features=$(feature node1)|$(feature node2)" ] || [ "$features" = "Features=$(feature node2)|$(feature node1)" ] ||
    fail "a --vram-mem=30GiB job: $features"
if sbatch --vram-mem=100GiB --wrap true >"$T/big.out" 2>&1; then fail "a 100 GiB job was accepted: $(cat "$T/big.out")"; fi
grep -q "no node's GPUs can hold 102400 MiB each" "$T/big.out" || fail "the 100 GiB job: $(cat "$T/big.out")"
ok "--vram-mem=60GiB asks gres:vram:61440 on $(feature node1) only, 30GiB on node1 or node2; 100GiB is refused at submit"
for id in "${ids[@]}"; do [[ $id =~ ^[0-9]+$ ]] || fail "a submission failed (job ids: ${ids[*]}); see sbatch's message above"; done

# --- node3 dies mid-run ------------------------------------------------------------
"$CLUSTER" crash "$D" node3
touch "$T/crashed"
node3_down() { [[ $(sinfo -h -n node3 -o %T) == down* ]]; }
wait_for 90 "node3 marked DOWN" node3_down
# Its vramd comes back first: what the dead jobs reserved must be gone.
"$CLUSTER" vramd "$D" node3
api node3 /v1/jobs?limit=1000 >"$T/node3.jobs"
api node3 /v1/status >"$T/node3.status"
python3 - "$T/node3.jobs" "$T/node3.status" <<'EOF' || fail "node3's vramd after the crash: $(cat "$T/node3.jobs" "$T/node3.status")"
import json, sys
jobs, status = (json.load(open(p)) for p in sys.argv[1:])
dead = [j for j in jobs["jobs"] if j["labels"].get("slurm_job_id")]
assert len(dead) >= 2, dead
assert all(j["state"] not in ("running", "queued") for j in dead), [(j["id"], j["state"]) for j in dead]
assert all(d["reserved_bytes"] == 0 for d in status["devices"]), status["devices"]
EOF
ok "node3 killed (slurmd, vramd, 2+ jobs): DOWN in Slurm; its vramd restarted with none of the dead jobs' reservations"
"$CLUSTER" slurmd "$D" node3

# The cancelled job, once it runs.
victim_running() { grep -q "^$victim " "$T/starts" 2>/dev/null; }
wait_for 120 "job $victim started" victim_running
scancel "$victim"

none_left() { [ -z "$(squeue -h -o %i)" ]; }
wait_for 170 "all jobs ended" none_left
ok "41 jobs ran to their end"

# --- what happened -------------------------------------------------------------
for n in node1 node2 node3; do
    api $n /v1/jobs?limit=1000 >"$T/$n.jobs"
    api $n /v1/status >"$T/$n.status"
done
python3 - "$T" "$failing" "$victim" "$model" "${ids[@]}" <<'EOF' || fail "the checks above"
import json, math, os, sys
T, failing, victim, model, *ids = sys.argv[1:]
nodes = ["node1", "node2", "node3"]
status = {n: json.load(open(f"{T}/{n}.status")) for n in nodes}
jobs = {n: json.load(open(f"{T}/{n}.jobs"))["jobs"] for n in nodes}

# every reservation released, on every node, however its job ended
for n in nodes:
    for d in status[n]["devices"]:
        assert d["reserved_bytes"] == 0, (n, d)
    left = [(j["id"], j["state"]) for j in jobs[n] if j["state"] in ("running", "queued")]
    assert not left, (n, left)

# every job completed exactly once, the failing and the cancelled one never
done = set(os.listdir(f"{T}/done"))
expected = set(ids) - {failing, victim}
assert done == expected, ("missing", expected - done, "extra", done - expected)
assert not os.path.exists(f"{T}/duplicates"), open(f"{T}/duplicates").read()
starts = [line.split() for line in open(f"{T}/starts")]
requeued = {s[0] for s in starts if s[6] != "0"}
assert requeued, "no job was requeued after node3 died"
print(f"requeued after the crash and completed: {sorted(requeued, key=int)}")

# vramd's end states: failed (exit 1), cancelled (scancel)
def slurm_records(jid):
    return [(n, j) for n in nodes for j in jobs[n] if j["labels"].get("slurm_job_id") == jid]
assert any(j["state"] == "failed" for _, j in slurm_records(failing)), slurm_records(failing)
assert all(j["state"] != "done" for _, j in slurm_records(victim)), slurm_records(victim)

# no GPU ever reserved beyond what it holds (total - margin - outside use)
shared = 0
for n in nodes:
    usable = {d["index"]: d["total_bytes"] - d["safety_margin_bytes"] for d in status[n]["devices"]}
    if n == "node2":
        usable[0] -= 30 << 30  # held outside Slurm the whole time
    runs = [j for j in jobs[n] if j.get("started_at")]
    for dev in usable:
        on = [j for j in runs if dev in j["devices"]]
        # A job admitted as another ends is stamped in the same transaction,
        # its start up to a few ms before the other's end: ends count 10 ms early.
        edges = sorted([(j["started_at"], j["reserved_bytes"]) for j in on] +
                       [(j["ended_at"] - 0.01, -j["reserved_bytes"]) for j in on], key=lambda e: (e[0], e[1]))
        level = peak = 0
        for _, delta in edges:
            level += delta
            peak = max(peak, level)
        assert peak <= usable[dev], (n, dev, peak, usable[dev])
        for a in on:
            for b in on:
                if a["id"] < b["id"] and a["started_at"] < b["ended_at"] - 0.01 and b["started_at"] < a["ended_at"] - 0.01:
                    shared += 1
assert shared > 0, "no two jobs ever shared a GPU"
print(f"pairs of jobs that shared a GPU: {shared}")

# node placement: 60 GiB only on node1; nothing on node2's GPU 0 beyond the 8 GiB left
for n in nodes:
    for j in jobs[n]:
        if j["state"] == "done" and j["mem_bytes"] >= 60 << 30:
            assert n == "node1", (n, j)
        if n == "node2" and 0 in j["devices"]:
            assert j["reserved_bytes"] <= 8 << 30, j

# the model: a smaller batch with accumulation
row = [s for s in starts if s[0] == model][-1]
batch, accum = int(row[4]), int(row[5])
assert 1 <= batch < 64 and accum == math.ceil(64 / batch), row
print(f"gpt2 batch 64 ran at batch {batch} x {accum} on {row[1]}")
EOF
ok "every job completed once (requeued ones included), failing/cancelled ones released, no GPU over its memory, GPUs shared, 60 GiB jobs on node1 only, outside use respected, the model lowered its batch"
echo "$passed passed, 0 failed"
