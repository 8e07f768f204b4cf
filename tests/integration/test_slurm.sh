#!/usr/bin/env bash
# A real one-node Slurm cluster on loopback (munge, slurmctld, slurmd from
# Debian, a generated slurm.conf, 2 GPUs and 8 shards of them as GRES on
# stand-in device nodes) with the spank_vram plugin and a vramd on
# VRAM_SIM=2xH100-80GB:
#   - two 60 GiB jobs on shards of one GPU run one after the other, and so do
#     two 60 GiB steps of one allocation sharing its GPU;
#   - a step asking more than a GPU has fails at once with vram's message;
#   - a model that does not fit at its batch starts at a smaller batch with
#     the matching accumulation in its environment and --vram-report;
#   - scancel of a running step, and kill -9 of its process, free its
#     reservation within 1 s (a job queued behind it starts);
#   - a step without vramd fails clearly, or runs with a warning when asked.
# Needs root (slurmd). When the daemons cannot start, it fails with their logs.
set -euo pipefail
B=${VRAM_BUILD_DIR:?}
VRAM=$B/vram VRAMD=$B/vramd PLUGIN=$B/contrib/slurm/spank_vram.so
passed=0
T=$(mktemp -d /tmp/vram-slurm.XXXXXX)
chmod 755 "$T"
logs() {
    for f in "$T"/log/*.log; do
        [ -e "$f" ] && { echo "--- $f (last 40 lines)"; tail -n 40 "$f"; }
    done
}
fail() { echo "FAIL: $*" >&2; logs >&2; echo "$passed passed, 1 failed"; exit 1; }
ok() { passed=$((passed + 1)); echo "ok: $*"; }

[ "$(id -u)" = 0 ] || fail "needs root: slurmd and slurmstepd run as root"
for p in slurmctld slurmd munged srun salloc scancel scontrol; do
    command -v $p >/dev/null || fail "$p is missing: run \`make deps\` (slurmctld slurmd munge)"
done
[ -e "$PLUGIN" ] || fail "$PLUGIN was not built: is libslurm-dev installed? (make deps)"
# Only srun and slurmstepd may provide what the plugin leaves undefined (a
# module links with undefined symbols; a missing one would fail at run time).
stray=$(ldd -r "$PLUGIN" 2>&1 | sed -n 's/^undefined symbol: \([^[:space:]]*\).*/\1/p' | grep -v -E '^(spank|slurm)_' || true)
[ -z "$stray" ] || fail "spank_vram.so needs symbols nothing provides: $stray (contrib/slurm/CMakeLists.txt lists its sources)"

# --- the cluster --------------------------------------------------------
mkdir -p "$T/log" "$T/state" "$T/spool" "$T/dev"
export SLURM_CONF=$T/slurm.conf
daemons=()
cleanup() {
    scancel --quiet --full --signal=KILL $(squeue -h -o %i 2>/dev/null) 2>/dev/null || true
    local pids=()
    for pidfile in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munged.pid"; do
        [ -s "$pidfile" ] && pids+=("$(cat "$pidfile")")
    done
    [ -n "${vramd_pid:-}" ] && pids+=("$vramd_pid")
    kill "${pids[@]}" 2>/dev/null || true
    # They are not this shell's children (they daemonized): wait for their
    # exit, since slurmctld writes its state into $T as it stops.
    local deadline=$((SECONDS + 20)) pid
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
    done
    rm -rf "$T"
}
trap cleanup EXIT

# Two stand-in GPU device nodes (slurmd wants a character device per GPU;
# these are /dev/null's numbers, nothing opens them).
mknod "$T/dev/nvidia0" c 1 3 && mknod "$T/dev/nvidia1" c 1 3 || fail "mknod: cannot create the stand-in device nodes"
head -c 1024 /dev/urandom >"$T/munge.key" && chmod 600 "$T/munge.key"
munged --force --key-file="$T/munge.key" --socket="$T/munge.sock" --pid-file="$T/munged.pid" \
    --log-file="$T/log/munged.log" --seed-file="$T/munged.seed" || fail "munged did not start"
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cat >"$T/slurm.conf" <<EOF
ClusterName=vramtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=5
GresTypes=gpu,shard
# The node declares more CPUs than a CI machine has, so that jobs wait for
# GPU memory (in vramd), never for CPUs (in Slurm).
SlurmdParameters=config_overrides
PlugStackConfig=$T/plugstack.conf
NodeName=vramnode NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=8 RealMemory=1000 Gres=gpu:2,shard:8 State=UNKNOWN
PartitionName=gpu Nodes=vramnode Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$T/gres.conf" <<EOF
NodeName=vramnode Name=gpu File=$T/dev/nvidia[0-1]
NodeName=vramnode Name=shard Count=8 File=$T/dev/nvidia[0-1]
EOF
# no vram=PATH: --vram-model is estimated by libvram inside the plugin (a
# `vram` program is neither needed nor run; issue 22)
echo "required $PLUGIN socket=$T/vramd.sock vram=/nonexistent/vram" >"$T/plugstack.conf"
slurmctld -f "$T/slurm.conf" || fail "slurmctld did not start"
slurmd -f "$T/slurm.conf" -N vramnode || fail "slurmd did not start"

# vramd on two simulated H100s; it returns once it listens.
export VRAM_SIM=2xH100-80GB VRAM_SIM_STATE=$T/sim.state
# Its socket is open to every uid here (0666) so that a step of another user
# can reach it, as group vram's members reach the system daemon's.
start_vramd() { # returns once it listens
    VRAM_SOCKET=$T/vramd.sock VRAM_DB=$T/vramd.db VRAM_SOCKET_MODE=0666 "$VRAMD" --listen "" 2>>"$T/log/vramd.log" ||
        fail "vramd did not start"
    vramd_pid=$(api GET /v1/health | field 'v["pid"]')
}
stop_vramd() {
    kill "$vramd_pid"
    while kill -0 "$vramd_pid" 2>/dev/null; do sleep 0.05; done # not our child: no `wait`
}
# Reads one line from FIFO into the variables named after it, failing after
# 120 s (the writer may never come: its srun failed). Opened read-write so
# that the open itself never blocks.
read_fifo() {
    local fifo=$1 fd
    shift
    exec {fd}<>"$fifo"
    IFS=' ' read -r -t 120 -u $fd "$@" || fail "nothing came through $fifo within 120 s"
    exec {fd}<&-
}
api() { curl -s --unix-socket "$T/vramd.sock" -X "$1" "http://localhost$2" ${3:+-d "$3"}; }
field() { python3 -c 'import json, sys; v = json.load(sys.stdin); print(eval(sys.argv[1], {}, {"v": v}))' "$1"; }
start_vramd

# The first srun waits until slurmd has registered the node (no polling).
timeout 60 srun true >"$T/first.out" 2>&1 ||
    fail "no job ran within 60 s (are slurmctld and slurmd up?): $(cat "$T/first.out")"
ok "one-node Slurm cluster up (slurmctld :$ctld_port, slurmd :$slurmd_port)"

# --- two 60 GiB steps on one GPU run one after the other -------------------
# A holds its memory until told to go; B must wait in vramd's queue meanwhile
# (its stderr says so: that line is the event), then start once A is done.
# $1: how both are launched (a shard each, or steps of the allocation); $2 a
# one-word name for the case.
serialized() {
    local launch=$1 tag=$2 a_started=$T/$2.a.started a_go=$T/$2.a.go b_started=$T/$2.b.started b_err=$T/$2.b.err
    mkfifo "$a_started" "$a_go" "$b_started" "$b_err"
    eval "$launch" --vram-mem=60GiB bash -c "'echo \$SLURM_JOB_ID.\$SLURM_STEP_ID \$VRAM_JOB_ID \$CUDA_VISIBLE_DEVICES >$a_started; read <$a_go'" \
        >"$T/$tag.a.out" 2>"$T/$tag.a.err" &
    local srun_a=$! srun_b line waiting="" berr step_a job_a gpu_a step_b job_b gpu_b
    read_fifo "$a_started" step_a job_a gpu_a
    eval "$launch" --vram-mem=60GiB bash -c "'echo \$SLURM_JOB_ID.\$SLURM_STEP_ID \$VRAM_JOB_ID \$CUDA_VISIBLE_DEVICES >$b_started'" \
        >"$T/$tag.b.out" 2>"$b_err" &
    srun_b=$!
    exec {berr}<"$b_err"
    while IFS= read -r -t 60 line <&$berr; do
        echo "$line" >>"$T/$tag.b.err.txt"
        case $line in *"waits in vramd's queue"*) waiting=$line; break ;; esac
    done
    [ -n "$waiting" ] || fail "$tag: the second step did not wait in vramd's queue: $(cat "$T/$tag.b.err.txt" 2>/dev/null)"
    [ "$(api GET "/v1/jobs/$job_a" | field 'v["state"]')" = running ] || fail "$tag: the first step's vramd job is not running while the second waits"
    if [ "${3:-}" = restart ]; then # the waiting step rides out a restart of vramd
        stop_vramd
        start_vramd
    fi
    echo go >"$a_go"
    read_fifo "$b_started" step_b job_b gpu_b
    cat <&$berr >>"$T/$tag.b.err.txt" &
    wait $srun_a || fail "$tag: the first step failed: $(cat "$T/$tag.a.err")"
    wait $srun_b || fail "$tag: the second step failed: $(cat "$T/$tag.b.err.txt")"
    exec {berr}<&-
    [ "$gpu_a" = "$gpu_b" ] || fail "$tag: the steps ran on GPU $gpu_a and GPU $gpu_b, not on one GPU"
    api GET "/v1/jobs/$job_a" >"$T/ja.json"
    api GET "/v1/jobs/$job_b" >"$T/jb.json"
    python3 - "$T/ja.json" "$T/jb.json" "slurm-$step_a" "slurm-$step_b" <<'EOF' || fail "$tag: vramd's records of the two steps: $(cat "$T/ja.json" "$T/jb.json")"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["state"] == b["state"] == "done", (a["state"], b["state"])
assert a["devices"] == b["devices"], (a["devices"], b["devices"])
# B was seen queued while A ran; it starts in the step that ends A (the two
# stamps come from one transaction, microseconds apart).
assert b["submitted_at"] < a["ended_at"] <= b["started_at"] + 0.01, (a, b)
assert (a["name"], b["name"]) == (sys.argv[3], sys.argv[4]), (a["name"], b["name"])
# the plugin labels each vramd job with its Slurm ids (label_* in /metrics)
for job, name in ((a, sys.argv[3]), (b, sys.argv[4])):
    jid, sid = name[len("slurm-"):].split(".")
    assert job["labels"] == {"slurm_job_id": jid, "slurm_step_id": sid}, job["labels"]
EOF
    ok "$tag: two --vram-mem=60GiB steps ($step_a, $step_b) on GPU $gpu_a ran one after the other${3:+ across a restart of vramd} (\"$waiting\")"
}
serialized "timeout 120 srun --gres=shard:1" shards

# An allocation of one GPU: its steps all share that GPU (--overlap).
timeout 60 salloc --gres=gpu:1 --no-shell >"$T/salloc.out" 2>&1 ||
    fail "salloc did not get an allocation within 60 s: $(cat "$T/salloc.out")"
J=$(sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p' "$T/salloc.out")
[ -n "$J" ] || fail "salloc said: $(cat "$T/salloc.out")"
step() { timeout 120 srun --jobid="$J" --overlap "$@"; }
serialized "step" steps restart

# --- more than a GPU has: refused at once, with vram's message --------------
if step --vram-mem=100GiB true >"$T/big.out" 2>"$T/big.err"; then
    fail "a 100 GiB step on an 80 GiB GPU ran"
fi
grep -qE "vram: vramd refused step $J\.[0-9]+: .*can never fit" "$T/big.err" || fail "the refused step said: $(cat "$T/big.err")"
queued=$(api GET /v1/jobs | field 'sum(j["state"] == "queued" for j in v["jobs"])')
[ "$queued" = 0 ] || fail "the refused step left a queued job"
ok "a 100 GiB step fails at once: $(grep -o 'vramd refused.*' "$T/big.err")"

# --- a model that does not fit at its batch: smaller batch + accumulation -------
full=$("$VRAM" estimate --model gpt2 --batch-size 64 --json | field 'v["bytes"]["total"]')
python3 -c "import sys; sys.exit(0 if $full > 80 * 2**30 else 1)" || fail "gpt2 at batch 64 fits an H100; pick a bigger case"
step --vram-model=gpt2 --vram-estimate-args="--batch-size 64 --seq-len 1024" --vram-min-batch=1 \
    --vram-report="$T/report.json" bash -c 'echo $VRAM_BATCH_SIZE $VRAM_GRAD_ACCUM $VRAM_JOB_ID' \
    >"$T/model.out" 2>"$T/model.err" || fail "the model step failed: $(cat "$T/model.err")"
read -r batch accum job_m <"$T/model.out"
api GET "/v1/jobs/$job_m" >"$T/jm.json"
at=$("$VRAM" estimate --model gpt2 --batch-size "$batch" --seq-len 1024 --json | field 'v["bytes"]["total"]')
python3 - "$batch" "$accum" "$T/jm.json" "$T/report.json" "$at" <<'EOF' || fail "batch $batch x $accum; job $(cat "$T/jm.json"); report $(cat "$T/report.json")"
import json, math, sys
batch, accum = int(sys.argv[1]), int(sys.argv[2])
job, report = json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
assert 1 <= batch < 64 and accum == math.ceil(64 / batch), (batch, accum)
assert job["degraded"] and job["granted_batch_size"] == batch and job["grad_accum"] == accum, job
assert report["granted_batch_size"] == batch and report["grad_accum"] == accum, report
assert report["batch_size"] == 64 and report["reserved_bytes"] == job["reserved_bytes"], report
assert report["vram_job_id"] == job["id"], report
# the reservation is the full estimate at the granted batch, from the step's table
assert job["reserved_bytes"] == int(sys.argv[5]), (job["reserved_bytes"], sys.argv[5])
assert {"batch": batch, "bytes": int(sys.argv[5])} in job["batch_bytes"], job["batch_bytes"]
EOF
ok "gpt2 at batch 64 ($((full >> 30)) GiB) starts with VRAM_BATCH_SIZE=$batch VRAM_GRAD_ACCUM=$accum; $(grep -o 'admitted.*' "$T/model.err")"

# --- a step of two tasks is one reservation, granted to both tasks -------------
step -n 2 --overcommit --vram-mem=10GiB bash -c 'echo $SLURM_LOCALID $VRAM_JOB_ID $CUDA_VISIBLE_DEVICES $SLURM_STEP_ID' \
    >"$T/two.out" 2>"$T/two.err" || fail "the two-task step failed: $(cat "$T/two.err")"
python3 - "$T/two.out" <<'EOF' || fail "the two tasks printed: $(cat "$T/two.out")"
import sys
rows = sorted(line.split() for line in open(sys.argv[1]))
assert [r[0] for r in rows] == ["0", "1"], rows
assert rows[0][1:] == rows[1][1:] and rows[0][1].isdigit(), rows
EOF
read -r _ job_two _ two_step < <(head -1 "$T/two.out")
two_jobs=$(api GET "/v1/jobs?limit=1000" | field "sum(j['name'] == 'slurm-$J.$two_step' for j in v['jobs'])")
[ "$two_jobs" = 1 ] || fail "the two-task step made $two_jobs vramd jobs"
ok "a two-task step holds one reservation (vramd job $job_two), both tasks see it"

# --- a step registers as its job's user -----------------------------------------
nobody_uid=$(id -u nobody)
timeout 120 srun --uid=nobody --chdir=/tmp --gres=gpu:1 --vram-mem=1GiB bash -c 'echo $(id -u) $VRAM_JOB_ID' \
    >"$T/user.out" 2>"$T/user.err" || fail "a step of user nobody failed: $(cat "$T/user.err")"
read -r task_uid job_user <"$T/user.out"
owner=$(api GET "/v1/jobs/$job_user" | field 'v["owner_uid"]')
[ "$task_uid" = "$nobody_uid" ] && [ "$owner" = "$nobody_uid" ] ||
    fail "a step of nobody ($nobody_uid) ran as $task_uid and its vramd job belongs to $owner"
ok "a step of user nobody is registered as uid $owner (vramd job $job_user)"

# --- scancel and kill -9 of a running step free its reservation within 1 s ----
# A job queued behind the step on the same GPU starts as soon as the memory is
# free: its ?wait= long poll returning is the event, timed from the kill.
release_latency() { # $1: how to end the step (a command run with $step_id, $task_pid)
    local started=$T/started.$RANDOM
    mkfifo "$started"
    step --vram-mem=60GiB bash -c "echo \$SLURM_STEP_ID \$\$ \$VRAM_JOB_ID \$CUDA_VISIBLE_DEVICES >$started; exec sleep 600" \
        >/dev/null 2>"$T/victim.err" &
    local srun_pid=$! step_id task_pid job dev
    read_fifo "$started" step_id task_pid job dev
    local probe
    probe=$(api POST /v1/jobs "{\"mem_bytes\": \"60GiB\", \"devices\": [$dev], \"name\": \"probe\"}" | field 'v["id"]')
    [ "$(api GET "/v1/jobs/$probe" | field 'v["state"]')" = queued ] || fail "the probe job is not queued behind step $J.$step_id"
    local t0 t1
    t0=$(date +%s.%N)
    eval "$1"
    api GET "/v1/jobs/$probe?wait=10" >"$T/probe.json"
    t1=$(date +%s.%N)
    [ "$(field 'v["state"]' <"$T/probe.json")" = running ] || fail "after \"$1\" the probe job is $(cat "$T/probe.json")"
    ! wait "$srun_pid" || fail "srun of the ended step exited 0"
    api DELETE "/v1/jobs/$probe" >/dev/null
    api GET "/v1/jobs/$job" | field 'v["state"]' >"$T/victim.state"
    python3 -c "print('%.3f' % ($t1 - $t0))"
}
latency=$(release_latency 'scancel "$J.$step_id"')
python3 -c "import sys; sys.exit(0 if $latency < 1.0 else 1)" || fail "scancel: the reservation was freed after $latency s"
ok "scancel of a running step frees its 60 GiB in ${latency} s (vramd job $(cat "$T/victim.state"))"
latency=$(release_latency 'kill -9 "$task_pid"')
python3 -c "import sys; sys.exit(0 if $latency < 1.0 else 1)" || fail "kill -9: the reservation was freed after $latency s"
ok "kill -9 of a step's process frees its 60 GiB in ${latency} s (vramd job $(cat "$T/victim.state"))"

# --- a signal the program handles (checkpoint) does not release the memory ------
mkfifo "$T/u.started" "$T/u.got" "$T/u.go"
step --vram-mem=60GiB bash -c "trap 'echo usr1 >$T/u.got' USR1; echo \$SLURM_STEP_ID \$VRAM_JOB_ID >$T/u.started; read <$T/u.go" \
    >/dev/null 2>"$T/u.err" &
srun_u=$!
read_fifo "$T/u.started" step_u job_u
scancel --signal=USR1 "$J.$step_u"
read_fifo "$T/u.got" got
state_u=$(api GET "/v1/jobs/$job_u" | field 'v["state"]')
[ "$state_u" = running ] || fail "after SIGUSR1, which the program handled, its vramd job is $state_u"
echo go >"$T/u.go"
wait "$srun_u" || fail "the step that handled SIGUSR1 failed: $(cat "$T/u.err")"
state_u=$(api GET "/v1/jobs/$job_u" | field 'v["state"]')
[ "$state_u" = done ] || fail "the step that handled SIGUSR1 ended, its vramd job is $state_u"
ok "scancel --signal=USR1 (handled by the program) keeps the reservation until the program ends (done)"

# --- scancel of a step still waiting in vramd's queue drops its queued job -------
mkfifo "$T/h.started" "$T/h.go" "$T/w.err"
step --vram-mem=60GiB bash -c "echo \$SLURM_STEP_ID \$VRAM_JOB_ID >$T/h.started; read <$T/h.go" >/dev/null 2>&1 &
srun_h=$!
read_fifo "$T/h.started" _ job_h
step --vram-mem=60GiB touch "$T/w.ran" >/dev/null 2>"$T/w.err" &
srun_w=$!
exec {werr}<"$T/w.err"
IFS= read -r -t 60 line <&$werr || fail "the waiting step said nothing"
[[ $line =~ step\ $J\.([0-9]+)\ waits.*vramd\ job\ ([0-9]+) ]] || fail "the waiting step said: $line"
step_w=${BASH_REMATCH[1]} job_w=${BASH_REMATCH[2]}
scancel "$J.$step_w"
state_w=$(api GET "/v1/jobs/$job_w?wait=10" | field 'v["state"]')
[ "$state_w" != queued ] || fail "vramd job $job_w of the cancelled waiting step is still queued after 10 s"
! wait "$srun_w" || fail "srun of the cancelled waiting step exited 0"
[ ! -e "$T/w.ran" ] || fail "the cancelled waiting step ran its program"
exec {werr}<&-
ok "scancel of a waiting step ends its queued vramd job ($state_w) and runs nothing"
# --vram-timeout: vramd gives up on the queued job; the step fails with why.
if step --vram-mem=60GiB --vram-timeout=1s touch "$T/t.ran" >/dev/null 2>"$T/t.err"; then
    fail "a step that timed out in the queue ran"
fi
[ ! -e "$T/t.ran" ] || fail "the timed-out step ran its program"
grep -q "ended timeout: GPU memory timeout after 1 s" "$T/t.err" || fail "the timed-out step said: $(cat "$T/t.err")"
echo go >"$T/h.go"
wait "$srun_h" || fail "the holding step failed"
ok "--vram-timeout=1s: $(grep -o 'step .*ended timeout.*' "$T/t.err")"

# --- without vramd: a clear failure, or a warning with --vram-optional ---------
stop_vramd
if step --vram-mem=1GiB true 2>"$T/down.err"; then fail "a step ran without vramd"; fi
grep -q "vramd is not running at $T/vramd.sock" "$T/down.err" || fail "without vramd the step said: $(cat "$T/down.err")"
out=$(step --vram-mem=1GiB --vram-optional bash -c 'echo ran ${VRAM_JOB_ID:-without-a-job}' 2>"$T/opt.err") ||
    fail "--vram-optional did not run the step: $(cat "$T/opt.err")"
[ "$out" = "ran without-a-job" ] || fail "--vram-optional step printed \"$out\""
grep -q "WITHOUT a memory reservation" "$T/opt.err" || fail "--vram-optional gave no warning: $(cat "$T/opt.err")"
ok "without vramd a step fails (\"$(grep -o 'vramd is not running[^;]*' "$T/down.err")\"); --vram-optional runs it with a warning"

# --- bad options are refused by srun before anything runs ----------------------
if step --vram-mem=60 true 2>"$T/bad.err"; then fail "--vram-mem=60 was accepted"; fi
grep -q -- "--vram-mem=60: expected a size with a unit" "$T/bad.err" || fail "--vram-mem=60 said: $(cat "$T/bad.err")"
if step --vram-mem=1GiB --vram-model=gpt2 true 2>"$T/bad.err"; then fail "--vram-mem with --vram-model was accepted"; fi
grep -q -- "--vram-mem and --vram-model" "$T/bad.err" || fail "--vram-mem with --vram-model said: $(cat "$T/bad.err")"
ok "srun refuses --vram-mem=60 (no unit) and --vram-mem with --vram-model"

echo "$passed passed, 0 failed"
