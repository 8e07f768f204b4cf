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
