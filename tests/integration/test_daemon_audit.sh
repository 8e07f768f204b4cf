#!/usr/bin/env bash
# Findings of the hostile-user audit of vramd (issue 24), each shown against
# a live daemon: why a job waits, supervising the jobs vramd starts, how a
# job ended, safe output files, job names, secrets in /v1/config, escaping of
# daemon strings, the token in a config file, retention of ended jobs.
export VRAM_SIM=1xH100-80GB
source "$(dirname "$0")/daemon_lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    echo "skip: needs root and setpriv to act as another uid"
    exit 0
fi
export VRAM_SAFETY_MARGIN=0
# uid 65534 is the user under test (root is exempt from quotas and sees every
# secret); it works in $T/u.
chmod 755 "$T"
mkdir "$T/u" && chown 65534:65534 "$T/u"
cd "$T/u"
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# jobs vramd started outlive it: a failing check must not leave them behind
# (they are uid 65534's processes working in $T/u)
release_jobs() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(stat -c %u "$p" 2>/dev/null)" = 65534 ] && [ "$(readlink "$p/cwd" 2>/dev/null)" = "$T/u" ] &&
            kill -9 "${p#/proc/}" 2>/dev/null
    done
    true
}
CLEANUP_HOOK=release_jobs
user_vram() { as_user "$VRAM" "$@"; }

# ---- why a job waits: a quota-held job says so in `vram jobs` ----------------
VRAM_MAX_RUNNING_PER_USER=1 start_daemon --socket-mode 0666
hold=$(user_vram submit --parsable --mem 8GiB --name holder -- sh -c 'while [ ! -e go ]; do sleep 0.05; done')
wait_state "$hold" running
held=$(user_vram submit --parsable --mem 8GiB --name held -- true)
[ "$(job_state "$held")" = queued ] || fail "the second job of the uid should wait"
j=$(api GET "/v1/jobs/$held")
[ "$(field "$j" 'd["reason_code"]')" = user_running_limit ] || fail "reason code: $j"
table=$(user_vram jobs)
grep -q "held .*MAX_RUNNING_PER_USER" <<<"$table" || fail "vram jobs shows no quota reason: $table"
! grep -q "held .*fits now" <<<"$table" || fail "a quota-held job shows 'fits now': $table"
touch go
wait_state "$held" done
pass "a job held by MAX_RUNNING_PER_USER says so (reason_code, vram jobs), then starts"
stop_daemon

# ---- supervising started jobs ---------------------------------------------------
export VRAM_KILL_GRACE=1
start_daemon --socket-mode 0666
# cancel: SIGTERM to the whole group, SIGKILL after the grace even though the
# group's leader (the monitor, once sh is gone) has exited by then
id=$(user_vram submit --parsable --mem 1GiB -- sh -c '(trap "" TERM; exec sleep 300) & echo $! >child.pid; wait')
wait_line "$T/u/child.pid" ""
wait_state "$id" running
child=$(cat "$T/u/child.pid")
kill -0 "$child" || fail "the child did not start"
as_user "$VRAM" cancel "$id" >/dev/null
wait_state "$id" cancelled
timeout 60 tail --pid="$child" -f /dev/null || fail "a child that ignores SIGTERM survived cancel"
pass "cancel SIGKILLs a child that ignores SIGTERM after the grace, though its group's leader is gone"

# finish of a job vramd started is refused: the command would run on outside
# its uid's running quota and its memory
id=$(user_vram submit --parsable --mem 1GiB -- sh -c 'echo $$ >pid2; while [ ! -e go2 ]; do sleep 0.05; done')
wait_line "$T/u/pid2" ""
wait_state "$id" running
b=$(as_user curl -s -w ' %{http_code}' --unix-socket "$VRAM_SOCKET" -X POST \
    -H 'Content-Type: application/json' --data '{"exit_status":0}' "http://x/v1/jobs/$id/finish")
[ "${b##* }" = 409 ] && grep -q "started by vramd" <<<"$b" || fail "finish of a started job: $b"
[ "$(job_state "$id")" = running ] && kill -0 "$(cat "$T/u/pid2")" || fail "the job stopped"
touch "$T/u/go2"
wait_state "$id" done
pass "finish of a job vramd started is refused (409); vramd records its end (done)"

# the output file: created by the job's user, 0600, never through a planted
# link or into a file another user made
mkdir -m 1777 "$T/shared"
echo precious >"$T/u/precious" && chown 65534:65534 "$T/u/precious"
ln -s "$T/u/precious" "$T/shared/out.txt"
id=$(user_vram submit --parsable --mem 1GiB --output "$T/shared/out.txt" -- echo overwritten)
wait_state "$id" failed
[ "$(cat "$T/u/precious")" = precious ] || fail "the job wrote through a planted symlink"
grep -q "exists" <<<"$(field "$(api GET /v1/jobs/$id)" 'd["error"]')" || fail "no reason: $(api GET /v1/jobs/$id)"
install -m 0666 /dev/null "$T/shared/planted.txt"
id=$(user_vram submit --parsable --mem 1GiB --output "$T/shared/planted.txt" -- echo secret)
wait_state "$id" failed
[ ! -s "$T/shared/planted.txt" ] || fail "the job wrote into another user's file"
id=$(user_vram submit --parsable --mem 1GiB --output "$T/shared/mine-%j.txt" -- echo mine)
wait_state "$id" done
[ "$(stat -c '%U %a' "$T/shared/mine-$id.txt")" = "nobody 600" ] || fail "output: $(stat -c '%U %a' "$T/shared/mine-$id.txt")"
# the user's own earlier output is rewritten (a rerun, job ids that started over)
id2=$(user_vram submit --parsable --mem 1GiB --output "$T/shared/mine-$id.txt" -- echo again)
wait_state "$id2" done
[ "$(cat "$T/shared/mine-$id.txt")" = again ] || fail "own output not rewritten: $(cat "$T/shared/mine-$id.txt")"
# but not a second name (hard link) of another of the user's files
ln "$T/u/precious" "$T/shared/hard.txt"
id=$(user_vram submit --parsable --mem 1GiB --output "$T/shared/hard.txt" -- echo overwritten)
wait_state "$id" failed
[ "$(cat "$T/u/precious")" = precious ] || fail "the job wrote through a hard link"
pass "output files: a planted symlink, hard link or another user's file is refused; a new one is the user's, 0600; the user's own is rewritten"
stop_daemon
unset VRAM_KILL_GRACE

# ---- how a job ended: fields of the finish request, not words ---------------------
start_daemon --socket-mode 0666
metric() { api GET /metrics | awk -v m="$1" '$1 == m {print $2}'; }
a=$(field "$(api POST /v1/jobs '{"mem_bytes":"1GiB"}')" 'd["id"]')
api POST "/v1/jobs/$a/finish" '{"exit_status":1,"error":"out of memory; retrying with batch 4"}' >/dev/null
[ "$(status)" = 200 ] || fail "finish: $(status)"
[ "$(metric vram_job_oom_total)" = 0 ] || fail "words in the error text counted as an OOM"
b=$(field "$(api POST /v1/jobs '{"mem_bytes":"1GiB"}')" 'd["id"]')
j=$(api POST "/v1/jobs/$b/finish" '{"exit_status":1,"error":"CUDA error","reason":"oom","retry_batch":4}')
[ "$(field "$j" 'd["end_reason"], d["retry_batch"]')" = "oom 4" ] || fail "end fields: $j"
[ "$(metric vram_job_oom_total)" = 1 ] && [ "$(metric vram_job_oom_retries_total)" = 1 ] \
    || fail "oom counters: $(api GET /metrics | grep oom)"
api POST "/v1/jobs/$b/finish" '{"reason":"tired"}' >/dev/null; [ "$(status)" = 422 ] || fail "bad reason: $(status)"
stop_daemon
start_daemon --socket-mode 0666
[ "$(field "$(api GET /v1/jobs/$b)" 'd["end_reason"]')" = oom ] || fail "end_reason not stored"
pass "an OOM end is the finish request's reason/retry_batch fields (stored, counted), not its words"
stop_daemon

# ---- names, secrets -----------------------------------------------------------------
export VRAM_ALERT_WEBHOOK='http://alice:pw123@127.0.0.1:9/hook' VRAM_ALERT_EXEC='notify --key=k3y'
start_daemon --socket-mode 0666
tcp=$(tcp_address)
id=$(user_vram submit --parsable --mem 1GiB -- sh -c 'echo ok --password=hunter2')
wait_state "$id" done
[ "$(field "$(api GET /v1/jobs/$id)" 'd["name"]')" = sh ] || fail "default name: $(api GET /v1/jobs/$id)"
for path in /metrics /v1/watch "/v1/history?device=0"; do
    ! curl -s "http://$tcp$path" | grep -q hunter2 || fail "the command line reached TCP $path"
done
pass "the default job name is the program's (sh), so no command line reaches other users"

c=$(as_user curl -s --unix-socket "$VRAM_SOCKET" http://x/v1/config)
! grep -q 'pw123\|k3y' <<<"$c" || fail "secrets shown to uid 65534: $c"
[ "$(field "$c" 'd["options"]["ALERT_WEBHOOK"], d["options"]["ALERT_EXEC"]')" = "(set) (set)" ] \
    || fail "masked values: $c"
! curl -s "http://$tcp/v1/config" | grep -q 'pw123\|k3y' || fail "secrets shown on TCP"
grep -q pw123 <<<"$(api GET /v1/config)" || fail "root does not see the webhook"
pass "/v1/config masks webhook URLs and exec commands for everyone but root"
stop_daemon
unset VRAM_ALERT_WEBHOOK VRAM_ALERT_EXEC

# a config file that holds the TCP token must not be readable by others
printf 'TOKEN=%s\n' s3cret >"$T/vramd.conf"
chmod 644 "$T/vramd.conf"
run_rc() { local __v=$1 __rc=0; shift; "$@" || __rc=$?; printf -v "$__v" %s "$__rc"; }
run_rc rc timeout 60 "$VRAMD" --foreground --config "$T/vramd.conf" >"$T/conf.out" 2>&1
[ "$rc" != 0 ] && grep -q "chmod 600" "$T/conf.out" || fail "a readable token file was accepted: $rc $(cat "$T/conf.out")"
pass "vramd refuses a --config holding TOKEN= that others can read"

# ---- daemon strings reach terminals escaped: a name that an older vramd
# stored with an escape sequence (names are checked at decode now) ----------------
export VRAM_WATCH_INTERVAL=0.1
start_daemon --socket-mode 0666
hold=$(user_vram submit --parsable --mem 75GiB -- sh -c 'while [ ! -e go5 ]; do sleep 0.05; done')
wait_state "$hold" running
id=$(user_vram submit --parsable --mem 10GiB -- sh -c 'while [ ! -e go6 ]; do sleep 0.05; done')
[ "$(job_state "$id")" = queued ] || fail "the second job should wait"
stop_daemon
python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.execute("UPDATE jobs SET name=? WHERE id=?", ("evil\x1b[2Jname", int(sys.argv[2]))); db.commit()' "$VRAM_DB" "$id"
printf 'rules:\n  - name: queue-wait\n    metric: queue_wait_seconds\n    above: 0\n    for: 0.2s\n    level: warning\n' >"$T/rules.yaml"
VRAM_ALERT_RULES=$T/rules.yaml start_daemon --socket-mode 0666
out=
for _ in $(seq 600); do # the watch evaluates the rule within a few intervals
    out=$(user_vram alerts 2>&1)
    grep -q "^firing .*job $id" <<<"$out" && break
    sleep 0.1
done
grep -q 'evil\\x1b\[2Jname' <<<"$out" || fail "vram alerts: no escaped name: $out"
! grep -q $'\033' <<<"$out" || fail "a raw ESC reached the terminal through vram alerts: $out"
touch "$T/u/go5"
wait_state "$id" running
out=
for _ in $(seq 600); do # the watch samples the job within a few intervals
    out=$(user_vram history --since 60 2>&1)
    grep -q "^job $id " <<<"$out" && break
    sleep 0.1
done
grep -q 'evil\\x1b\[2Jname' <<<"$out" || fail "vram history: no escaped name: $out"
out+=$(user_vram jobs 2>&1)
! grep -q $'\033' <<<"$out" || fail "a raw ESC from the daemon reached the terminal: $out"
touch "$T/u/go6"
wait_state "$id" done
pass "vram alerts, vram history and vram jobs print a stored name with an escape sequence escaped"
stop_daemon
