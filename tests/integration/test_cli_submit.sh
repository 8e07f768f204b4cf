#!/bin/bash
# vram submit / wait / attach against a live vramd (sim GPUs, real processes):
# the id at once, output files, the submitting directory and environment
# whitelist, a job that outlives the submitting shell, the submitting uid
# (vramd as root starts it as that user; a non-root vramd refuses others).
source "$(dirname "$0")/daemon_lib.sh"
chmod 711 "$T"
start_daemon --socket-mode 0666
mkdir -m 777 "$T/work"
cd "$T/work"
run_rc() { local __v=$1 __rc=0; shift; "$@" || __rc=$?; printf -v "$__v" %s "$__rc"; }

# ---- --parsable, output file, environment, directory ------------------------
export PYTHONPATH=/some/where SECRET_TOKEN=do-not-pass LC_ALL=C
id=$("$VRAM" submit --parsable --mem 2GiB -- sh -c 'echo "dev=$CUDA_VISIBLE_DEVICES job=$VRAM_JOB_ID"; pwd; echo "pp=$PYTHONPATH secret=${SECRET_TOKEN:-none} lc=$LC_ALL"; echo to-stderr >&2; exit 3')
[[ "$id" =~ ^[0-9]+$ ]] || fail "--parsable printed \"$id\""
run_rc rc "$VRAM" wait "$id" >"$T/wait.out"
[ "$rc" = 3 ] || fail "vram wait: exit $rc, expected the job's 3"
grep -qx "job $id failed: exit status 3" "$T/wait.out" || fail "wait said $(cat "$T/wait.out")"
out=$(cat "vram-$id.out")
grep -qx "dev=0 job=$id" <<<"$out" || fail "output: $out"
grep -qx "$T/work" <<<"$out" || fail "not run in the submitting directory: $out"
grep -qx "pp=/some/where secret=none lc=C" <<<"$out" || fail "environment whitelist: $out"
grep -qx "to-stderr" <<<"$out" || fail "stderr not with stdout: $out"
pass "submit --parsable, vram wait's status, output file, directory, environment whitelist"

# ---- --output/--error with %j, attach follows until the end ----------------
id=$("$VRAM" submit --parsable --mem 1GiB --output "o-%j.txt" --error "$T/work/e-%j.txt" -- \
    sh -c 'echo one; while [ ! -e go ]; do sleep 0.05; done; echo two; echo bad >&2')
"$VRAM" attach "$id" >"$T/attach.out" 2>"$T/attach.err" &
ATT=$!
for _ in $(seq 200); do grep -q one "$T/attach.out" 2>/dev/null && break; sleep 0.05; done
grep -qx one "$T/attach.out" || fail "attach did not show the first line"
touch go
run_rc rc wait "$ATT"
[ "$rc" = 0 ] || fail "attach exited $rc"
[ "$(cat "$T/attach.out")" = "$(printf 'one\ntwo')" ] || fail "attach stdout: $(cat "$T/attach.out")"
[ "$(cat "$T/attach.err")" = bad ] || fail "attach stderr: $(cat "$T/attach.err")"
[ "$(cat "o-$id.txt")" = "$(printf 'one\ntwo')" ] && [ "$(cat "e-$id.txt")" = bad ] || fail "output files"
rm -f go
pass "--output/--error with %j; vram attach follows stdout and stderr until the end"

# ---- survives the submitting shell, in its own session -----------------------
bash -c "\"$VRAM\" submit --parsable --mem 1GiB -- python3 -c 'import os,time
while not os.path.exists(\"go\"): time.sleep(0.05)
print(\"survived\", os.getsid(0) != $$, os.getppid() != 1 or True)' >$T/id; exit 0"
id=$(cat "$T/id")
[ "$(job_state "$id")" = running ] || fail "detached job is $(job_state "$id")"
touch go
run_rc rc "$VRAM" wait "$id" >/dev/null
[ "$rc" = 0 ] || fail "detached job ended $rc: $(cat "vram-$id.out")"
grep -q "^survived True" "vram-$id.out" || fail "detached job: $(cat "vram-$id.out")"
pass "a submitted job outlives the shell that submitted it, in a session of its own"

# ---- vram wait for a queued job, then several; cancelled and timeout codes ----
holder=$("$VRAM" submit --parsable --mem 70GiB --devices 0 -- sh -c 'while [ ! -e go2 ]; do sleep 0.05; done')
queued=$("$VRAM" submit --parsable --mem 70GiB --devices 0 -- true)
[ "$(job_state "$queued")" = queued ] || fail "second job should queue"
timeout_id=$("$VRAM" submit --parsable --mem 70GiB --devices 0 --timeout 0.2 -- true)
run_rc rc "$VRAM" wait --quiet "$timeout_id"
[ "$rc" = 124 ] || fail "wait on a timed-out job: $rc"
touch go2
run_rc rc "$VRAM" wait "$holder" "$queued" >"$T/wait.out"
[ "$rc" = 0 ] && [ "$(wc -l <"$T/wait.out")" = 2 ] || fail "wait for two: rc $rc $(cat "$T/wait.out")"
c=$("$VRAM" submit --parsable --mem 1GiB -- sleep 300)
"$VRAM" cancel "$c" >/dev/null
run_rc rc "$VRAM" wait --quiet "$c"
[ "$rc" = 143 ] || fail "wait on a cancelled job: $rc"
pass "vram wait: queued then done, several ids, 124 for a queue timeout, 143 for cancelled"

# ---- the submitting uid ---------------------------------------------------------
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
id=$(as_nobody "$VRAM" submit --parsable --mem 1GiB -- sh -c 'id -u; id -g')
run_rc rc as_nobody "$VRAM" wait "$id" >/dev/null
[ "$rc" = 0 ] || fail "nobody's job: $rc"
[ "$(cat "vram-$id.out")" = "$(printf '65534\n65534')" ] || fail "ran as $(cat "vram-$id.out")"
[ "$(stat -c %u "vram-$id.out")" = 65534 ] || fail "output file owned by $(stat -c %u "vram-$id.out")"
run_rc rc as_nobody "$VRAM" cancel "$("$VRAM" submit --parsable --mem 1GiB -- sleep 300)" 2>"$T/err"
[ "$rc" = 1 ] && grep -q 'only its owner or root' "$T/err" || fail "nobody cancelled root's job: $(cat "$T/err")"
"$VRAM" cancel --user root --state running >/dev/null
# TCP never starts commands (no uid the kernel vouches for)
addr=$(tcp_address)
curl -s -o "$T/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary '{"mem_bytes": 1024, "spawn": {"argv": ["true"], "cwd": "/", "output": "/tmp/x"}}' \
    "http://$addr/v1/jobs" >"$T/code" || true
[ "$(cat "$T/code")" = 403 ] || fail "TCP submit answered $(cat "$T/code")"
# a vramd that is not root starts jobs only for its own uid
install -d -o 65534 -g 65534 -m 755 "$T/user" # a vramd's directories are its own
VRAM_SOCKET=$T/user/s.sock VRAM_DB=$T/user/db VRAM_SIM_STATE=$T/user/sim.state \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$VRAMD" --foreground --socket-mode 0666 >"$T/user/log" 2>&1 &
UD=$!
for _ in $(seq 1200); do [ -S "$T/user/s.sock" ] && break; sleep 0.05; done
run_rc rc env VRAM_SOCKET="$T/user/s.sock" "$VRAM" submit --mem 1GiB -- true 2>"$T/err"
[ "$rc" = 1 ] && grep -q 'vramd runs as uid 65534 and can start jobs only for that uid' "$T/err" \
    || fail "non-root vramd and another uid: rc $rc $(cat "$T/err")"
id=$(VRAM_SOCKET=$T/user/s.sock as_nobody "$VRAM" submit --parsable --mem 1GiB --output "$T/user/out-%j" -- id -u)
run_rc rc env VRAM_SOCKET="$T/user/s.sock" "$VRAM" wait "$id" >"$T/wait.out"
[ "$rc" = 0 ] && [ "$(cat "$T/user/out-$id")" = 65534 ] || fail "own job under a user vramd: $rc $(cat "$T/wait.out")"
kill -TERM "$UD"; wait "$UD" || true
pass "jobs run as the submitting uid (root vramd); others refused: TCP, a user vramd for another uid"
check_ledger

# ---- a queued submitted job outlives a vramd restart and starts after it -------------
holder=$("$VRAM" submit --parsable --mem 70GiB --devices 0 -- sh -c 'touch held2; while [ ! -e go4 ]; do sleep 0.05; done; echo holder-done')
later=$("$VRAM" submit --parsable --mem 70GiB --devices 0 --output "$T/work/later-%j" -- echo later-ran)
for _ in $(seq 200); do [ -e held2 ] && break; sleep 0.05; done
[ "$(job_state "$later")" = queued ] || fail "second job should be queued"
stop_daemon
start_daemon --socket-mode 0666
[ "$(job_state "$later")" = queued ] && [ "$(job_state "$holder")" = running ] || fail "states after restart"
touch go4   # the holder ends under a vramd that did not start it
run_rc rc "$VRAM" wait "$later" >/dev/null
[ "$rc" = 0 ] && [ "$(cat "$T/work/later-$later")" = later-ran ] || fail "queued job after restart: $rc"
# its monitor wrote its exit status for whichever vramd sees it end (issue 24)
run_rc rc "$VRAM" wait "$holder" >/dev/null
h=$(api GET "/v1/jobs/$holder")
[ "$rc" = 0 ] && [ "$(field "$h" 'd["state"], d["exit_status"]')" = "done 0" ] \
    || fail "holder after restart: rc $rc $h"
grep -qx holder-done "vram-$holder.out" || fail "holder's command did not finish"
pass "a queued submitted job survives a vramd restart and is started after it; a running one runs on and keeps its exit status 0"

# ---- with LEASE set, vramd renews its own jobs ---------------------------------------
stop_daemon
start_daemon --socket-mode 0666 --lease 1
id=$("$VRAM" submit --parsable --mem 1GiB -- sh -c 'touch leased; while [ ! -e go3 ]; do sleep 0.05; done')
for _ in $(seq 200); do [ -e leased ] && break; sleep 0.05; done
end=$(( $(date +%s) + 3 ))
while [ "$(date +%s)" -lt "$end" ]; do
    [ "$(job_state "$id")" = running ] || fail "submitted job under LEASE=1 became $(job_state "$id")"
    sleep 0.2
done
touch go3
run_rc rc "$VRAM" wait "$id" >/dev/null
[ "$rc" = 0 ] || fail "leased submitted job ended $rc"
pass "with LEASE=1 a submitted job outlives several lease periods (vramd renews it) and ends done"
