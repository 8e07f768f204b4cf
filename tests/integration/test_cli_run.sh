#!/bin/bash
# vram run against a live vramd with simulated GPUs and real child processes:
# sizes need units, flag contradictions, exit codes, out-of-memory retries
# (only real messages; the batch and accumulation vramd records), signals
# (SIGTERM to the job's group, SIGKILL after --grace, `cancelled`), and a job
# under a pseudo-terminal (isatty, Ctrl-C).
source "$(dirname "$0")/daemon_lib.sh"
start_daemon
cd "$T"

# run_rc VAR CMD...: runs CMD, stores its exit status in VAR (never aborts)
run_rc() { local __v=$1 __rc=0; shift; "$@" || __rc=$?; printf -v "$__v" %s "$__rc"; }
last_job() { api GET '/v1/jobs?limit=1' | python3 -c 'import json,sys; print(max(j["id"] for j in json.load(sys.stdin)["jobs"]))'; }

# ---- sizes typed by people need a unit ------------------------------------
for args in "--mem 20 GB" "--mem 20" "--mem 0.5" "--mem 20GiB --batch-size 8 --mem-at 4=4"; do
    run_rc rc "$VRAM" run $args -- true 2>"$T/err"
    [ "$rc" = 2 ] || fail "vram run $args: exit $rc, expected 2"
    grep -q 'give a unit, e.g. 20GiB' "$T/err" || fail "vram run $args: $(cat "$T/err")"
done
run_rc rc "$VRAM" run --mem "20 GB" -- true 2>"$T/err"
[ "$rc" = 2 ] && grep -q 'give a unit' "$T/err" || fail "\"20 GB\" as one word: $(cat "$T/err")"
run_rc rc "$VRAM" sim alloc --mem 10 --seconds 1 2>"$T/err"
[ "$rc" = 2 ] && grep -q 'give a unit' "$T/err" || fail "sim alloc --mem 10: $(cat "$T/err")"
[ "$(field "$(api GET /v1/jobs)" 'len(d["jobs"])')" = 0 ] || fail "a refused size registered a job"
pass "sizes without a unit are refused (also \"20 GB\"), nothing registered"

# ---- contradictions and irrelevant flags name both --------------------------
check_usage() { # MESSAGE ARGS...
    local msg=$1; shift
    run_rc rc "$VRAM" "$@" 2>"$T/err"
    [ "$rc" = 2 ] || fail "vram $*: exit $rc, expected 2"
    grep -qF -- "$msg" "$T/err" || fail "vram $*: expected \"$msg\", got: $(cat "$T/err")"
}
check_usage '--devices 0,1 names 2 GPU(s) but --gpus asks for 1' run --devices 0,1 --gpus 1 --mem 1GiB -- true
check_usage '--oom-exit-code does nothing without --retry-oom' run --mem 1GiB --oom-exit-code 3 -- true
check_usage '--mem-at gives smaller batches: it needs --batch-size' run --mem 1GiB --mem-at 2=1GiB -- true
check_usage 'batch_bytes[1]: 3221225472 bytes at batch 4, less than' run --mem 8GiB --batch-size 8 --mem-at 2=4GiB,4=3GiB -- true
check_usage '--mem-at 8=...: batch 8 is not below --batch-size 8' run --mem 8GiB --batch-size 8 --mem-at 8=4GiB -- true
check_usage '--mem-at: batch 2 is given twice' run --mem 8GiB --batch-size 8 --mem-at 2=1GiB --mem-at 2=2GiB -- true
check_usage '--mem-at and --model' run --mem-at 2=1GiB --model gpt2 --batch-size 4 -- true
check_usage '--mem and --model' run --mem 1GiB --model gpt2 -- true
check_usage '--output applies to vram submit, not vram run' run --mem 1GiB --output x -- true
check_usage '--retry-oom applies to vram run, not vram submit' submit --mem 1GiB --retry-oom 1 --batch-size 2 -- true
check_usage 'did you mean --mem?' run --mme 1GiB -- true
check_usage 'did you mean --priority?' run --mem 1GiB --prority 3 -- true
pass "contradicting and irrelevant flags are usage errors naming both; did you mean"

# ---- devices keep their order; exit codes ------------------------------------
out=$("$VRAM" run --quiet --mem 1GiB --devices 1,0 -- sh -c 'echo $CUDA_VISIBLE_DEVICES')
[ "$out" = "1,0" ] || fail "--devices 1,0 gave CUDA_VISIBLE_DEVICES=$out"
run_rc rc "$VRAM" run --quiet --mem 1GiB -- sh -c 'exit 7'
[ "$rc" = 7 ] || fail "COMMAND's status 7 came back as $rc"
[ "$(job_state "$(last_job)")" = failed ] || fail "exit 7 not recorded failed"
# queue timeout: GPU 0 is held by a job that waits for a file
"$VRAM" run --quiet --mem 70GiB --devices 0 -- sh -c "touch $T/held; while [ ! -e $T/release ]; do sleep 0.05; done" &
HOLDER=$!
for _ in $(seq 200); do [ -e "$T/held" ] && break; sleep 0.05; done
[ -e "$T/held" ] || fail "holder job did not start"
run_rc rc "$VRAM" run --quiet --mem 70GiB --devices 0 --timeout 0.3 -- true 2>"$T/err"
[ "$rc" = 124 ] || fail "queue timeout exited $rc, expected 124: $(cat "$T/err")"
[ "$(job_state "$(last_job)")" = timeout ] || fail "timeout not recorded"
touch "$T/release"; wait "$HOLDER"
pass "devices in the given order; COMMAND's status; 124 for a queue timeout"

# ---- memory from the estimator: vramd gets the full estimate at each
# smaller batch it may grant (issue 22: a per-sample figure charged gpt2's
# batch 1 2.3 GiB less than its estimate)
"$VRAM" run --quiet --model gpt2 --batch-size 16 --min-batch-size 1 -- true ||
    fail "vram run --model gpt2 failed"
job=$(api GET "/v1/jobs/$(last_job)")
python3 - "$VRAM" "$job" <<'PY' || fail "batch table: $job"
import json, subprocess, sys
vram, job = sys.argv[1], json.loads(sys.argv[2])
def est(b):
    out = subprocess.run([vram, "estimate", "--model", "gpt2", "--batch-size", str(b), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["bytes"]["total"]
table = job["batch_bytes"]
# every batch worth granting: ceil(16/k), each at its full estimate
assert [e["batch"] for e in table] == [1, 2, 3, 4, 6, 8, 16], table
assert job["mem_bytes"] == est(16) == table[-1]["bytes"], job
for e in table:
    assert e["bytes"] == est(e["batch"]), (e, est(e["batch"]))
PY
pass "vram run --model: vramd gets the full estimate at each batch down to the minimum"

# ---- out of memory: only the real messages, each one -------------------------
msgs=("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
      "torch.OutOfMemoryError: boom"
      "RuntimeError: CUDA error: out of memory"
      "CUDA_ERROR_OUT_OF_MEMORY"
      "cudaErrorMemoryAllocation"
      "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED"
      "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)")
for m in "${msgs[@]}"; do
    run_rc rc "$VRAM" run --mem 8GiB --batch-size 8 --retry-oom 1 -- \
        sh -c 'echo "$1" >&2; echo "$VRAM_BATCH_SIZE x $VRAM_GRAD_ACCUM" >>'"$T/batches"'; exit 1' sh "$m" 2>"$T/err"
    [ "$rc" = 1 ] || fail "OOM run exited $rc"
    grep -q 'retrying with batch 4' "$T/err" || fail "\"$m\" did not trigger a retry: $(cat "$T/err")"
done
[ "$(sort -u "$T/batches")" = "$(printf '4 x 2\n8 x 1')" ] || fail "batches seen: $(sort -u "$T/batches")"
id=$(last_job); j=$(api GET /v1/jobs/$id)
[ "$(field "$j" '(d["granted_batch_size"], d["grad_accum"], d["batch_size"], d["max_batch_size"])')" = "(4, 2, 8, 4)" ] \
    || fail "retried job recorded $j"
field "$j" 'd["error"]' | grep -q '^out of memory: ' || fail "OOM not in the error: $j"
"$VRAM" jobs --format '%i %b' | grep -qx "$id 4x2" || fail "vram jobs does not show 4x2: $("$VRAM" jobs --format '%i %b')"
for m in "avoid out of memory fragmentation" "ModuleNotFoundError: No module named torch" "out of memory"; do
    run_rc rc "$VRAM" run --mem 8GiB --batch-size 8 --retry-oom 3 -- sh -c 'echo "$1" >&2; exit 1' sh "$m" 2>"$T/err"
    [ "$rc" = 1 ] || fail "exit $rc"
    ! grep -q retrying "$T/err" || fail "\"$m\" triggered a retry"
    field "$(api GET /v1/jobs/$(last_job))" 'd["error"]' | grep -q 'out of memory' && fail "\"$m\" recorded as OOM"
done
# --oom-exit-code: a wrapper's own status
run_rc rc "$VRAM" run --mem 8GiB --batch-size 8 --retry-oom 1 --oom-exit-code 42 -- sh -c 'exit 42' 2>"$T/err"
[ "$rc" = 42 ] && grep -q 'retrying with batch 4' "$T/err" || fail "--oom-exit-code: rc $rc $(cat "$T/err")"
# a retry reserves what --mem-at says for its batch
run_rc rc "$VRAM" run --mem 10GiB --mem-at 4=7GiB --batch-size 8 --retry-oom 1 -- \
    sh -c 'echo "CUDA out of memory. Tried to allocate 1 GiB" >&2; exit 1' 2>"$T/err"
[ "$rc" = 1 ] && grep -q 'retrying with batch 4' "$T/err" || fail "table retry: rc $rc $(cat "$T/err")"
[ "$(field "$(api GET /v1/jobs/$(last_job))" 'd["reserved_bytes"]')" = $((7 * GiB)) ] || fail "retry reserved $(api GET /v1/jobs/$(last_job))"
pass "OOM retries on each real message and --oom-exit-code, never on look-alikes; vramd records 4x2"

# ---- SIGTERM: forwarded to the job's group, grace, cancelled -----------------
"$VRAM" run --quiet --mem 1GiB -- sh -c "trap 'echo term >$T/term; exit 0' TERM; sleep 300 & echo \$! >$T/grandchild; touch $T/ready; wait" &
RUN=$!
for _ in $(seq 200); do [ -e "$T/ready" ] && break; sleep 0.05; done
[ -e "$T/ready" ] || fail "job did not start"
id=$(last_job); gc=$(cat "$T/grandchild")
kill -TERM "$RUN"
run_rc rc wait "$RUN"
[ "$rc" = 143 ] || fail "SIGTERM: vram run exited $rc, expected 143"
[ "$(cat "$T/term")" = term ] || fail "COMMAND did not get SIGTERM"
for _ in $(seq 100); do kill -0 "$gc" 2>/dev/null || break; sleep 0.05; done
! kill -0 "$gc" 2>/dev/null || fail "the job's grandchild $gc survived (group not signalled)"
[ "$(job_state "$id")" = cancelled ] || fail "SIGTERM recorded $(job_state "$id")"
rm -f "$T/ready"
"$VRAM" run --quiet --mem 1GiB --grace 0.3 -- sh -c "trap '' TERM; touch $T/ready; while :; do sleep 0.05; done" &
RUN=$!
for _ in $(seq 200); do [ -e "$T/ready" ] && break; sleep 0.05; done
kill -TERM "$RUN"
run_rc rc wait "$RUN"
[ "$rc" = 143 ] || fail "SIGKILL after grace: exit $rc"
[ "$(job_state "$(last_job)")" = cancelled ] || fail "grace: recorded $(job_state "$(last_job)")"
pass "SIGTERM reaches the job's process group, SIGKILL after --grace, exit 143, recorded cancelled"

# ---- a cancel through vramd stops COMMAND -------------------------------------
rm -f "$T/ready"
"$VRAM" run --quiet --mem 1GiB -- sh -c "touch $T/ready; exec sleep 300" &
RUN=$!
for _ in $(seq 200); do [ -e "$T/ready" ] && break; sleep 0.05; done
"$VRAM" cancel "$(last_job)" >/dev/null
run_rc rc wait "$RUN"
[ "$rc" = 143 ] || fail "cancelled job: vram run exited $rc"
pass "vram cancel of a running job stops COMMAND (143)"

# ---- under a pseudo-terminal: isatty, the copy of stderr, Ctrl-C ---------------
cat >"$T/under_pty.py" <<'PY'
import os, pty, select, signal, sys
def run(argv, key_after=None):
    """Runs argv on a new pseudo-terminal; sends key_after[1] once key_after[0] shows."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    out, sent = b"", False
    while True:
        # a hang is a failure with its transcript, not a test timeout
        if not select.select([fd], [], [], 120)[0]:
            os.killpg(pid, signal.SIGKILL)
            raise AssertionError(f"no output for 120 s from {argv}: {out!r}")
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        out += data
        if key_after and not sent and key_after[0] in out:
            os.write(fd, key_after[1]); sent = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
vram, tmp, py = sys.argv[1], sys.argv[2], sys.executable
probe = "import os,sys; print('tty', os.isatty(0), os.isatty(1), os.isatty(2)); sys.stderr.write('err is tty %s\\n' % os.isatty(2))"
for extra in ([], ["--batch-size", "2", "--retry-oom", "1"]):
    rc, out = run([vram, "run", "--mem", "1GiB"] + extra + ["--", py, "-c", probe])
    assert rc == 0, (rc, out)
    assert "tty True True True" in out and "err is tty True" in out, out
rc, out = run([vram, "run", "--mem", "1GiB", "--batch-size", "2", "--retry-oom", "1", "--",
               py, "-c", "import sys; sys.stderr.write('torch.cuda.OutOfMemoryError: x\\n'); sys.exit(1)"])
assert rc == 1 and "retrying with batch 1" in out, (rc, out)
rc, out = run([vram, "run", "--mem", "1GiB", "--", py, "-c",
               "import time; print('ready', flush=True); time.sleep(300)"], (b"ready", b"\x03"))
assert rc == 130, (rc, out)
print("pty ok")
# Ctrl-Z under a job-control shell: vram run stops with COMMAND, `fg` resumes both
script = ("set -m\n"
          # (COMMAND does not fork: a shell that vforks while ^Z arrives cannot stop)
          f"{vram} run --quiet --mem 1GiB -- {py} -c 'import os,time\nprint(\"ready\",flush=True)\n"
          f"while not os.path.exists(\"{tmp}/go-z\"): time.sleep(0.05)\nprint(\"finished\")'\n"
          "echo \"first rc=$?\"\n"
          f"touch {tmp}/go-z\n"
          "fg >/dev/null\n"
          "echo \"fg rc=$?\"\n")
rc, out = run(["/bin/bash", "--norc", "-c", script], (b"ready", b"\x1a"))
assert "first rc=148" in out and "finished" in out and "fg rc=0" in out, out
print("ctrl-z ok")
# in the background, COMMAND reading the terminal stops (SIGTTIN) and vram run
# with it; `fg` gives both the terminal
script = ("set -m\n"
          f"{vram} run --quiet --mem 1GiB -- {py} -c 'print(\"got\", input(), flush=True)' &\n"
          "until jobs -l | grep -q Stopped; do sleep 0.05; done; echo before-fg\n"
          "fg >/dev/null\n"
          "echo \"fg rc=$?\"\n")
rc, out = run(["/bin/bash", "--norc", "-c", script], (b"before-fg", b"hello\n"))
assert "got hello" in out and "fg rc=0" in out, out
print("background ok")
PY
python3 "$T/under_pty.py" "$VRAM" "$T" >"$T/pty.out" || { cat "$T/pty.out"; fail "pty checks failed"; }
grep -qx 'pty ok' "$T/pty.out" && grep -qx 'ctrl-z ok' "$T/pty.out" && grep -qx 'background ok' "$T/pty.out" \
    || fail "pty checks: $(cat "$T/pty.out")"
[ "$(job_state "$(( $(last_job) - 1 ))")" = done ] || fail "job stopped and resumed: $(job_state "$(( $(last_job) - 1 ))")"
ctrl_c_job=$(( $(last_job) - 2 ))
[ "$(job_state "$ctrl_c_job")" = cancelled ] || fail "Ctrl-C recorded $(job_state "$ctrl_c_job")"
pass "under a pty: isatty(0,1,2) true with and without --retry-oom; OOM seen through the pty; Ctrl-C: 130, cancelled"
pass "Ctrl-Z stops vram run with COMMAND (the shell gets the terminal back), fg resumes both; same for a background read"
check_ledger
