#!/usr/bin/env bash
# Alerts end to end: a sim GPU driven over 90 % with `vram sim alloc` fires the
# WARNING once after its `for` duration, does not flap while the memory stays
# between the clear threshold and the threshold, reaches a loopback webhook
# (after a retry) and an exec hook while another webhook hangs, and resolves
# below the clear threshold with a message of its own. vramd stops within
# seconds although the hanging receiver never answers.
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"

python3 "$(dirname "$0")/webhook_server.py" "$T/hooks" "$T/hook.port" 1 &
wait_for "webhook server" test -s "$T/hook.port"
HOOK_PORT=$(cat "$T/hook.port")
python3 "$(dirname "$0")/hang_server.py" "$T/hang.log" "$T/hang.port" &
wait_for "hanging receiver" test -s "$T/hang.port"
HANG_PORT=$(cat "$T/hang.port")
export VRAM_ALERT_CLUSTER=test-cluster

cat >"$T/rules.yaml" <<YAML
rules:
  - name: memory-high
    metric: memory_used_ratio
    above: 90%
    clear: 85%
    for: 1s
    level: warning
  - name: memory-critical
    metric: memory_used_ratio
    above: 0.97
    for: 1s
    level: critical
  - name: job-over
    metric: job_used_over_reserved_ratio
    above: 1.0
    for: 0.5s
    level: warning
webhooks:
  - http://127.0.0.1:$HANG_PORT/never-answers
  - http://127.0.0.1:$HOOK_PORT/alert
webhook_retries: 3
webhook_timeout: 60s
exec:
  - env | grep ^VRAM_ALERT_ | sort > "$T/exec.\$VRAM_ALERT_STATE"
YAML
check=$("$VRAM" alerts --check "$T/rules.yaml")
grep -q "memory-high: memory_used_ratio above 90% (clear 85%) for 1s -> warning" <<<"$check" \
    || fail "alerts --check did not list the rule: $check"
printf 'rules:\n  - name: free-low\n    metric: memory_free_bytes\n    below: 8GiB\n    clear: 12.5GiB\n    for: 1.5s\n    level: info\n' >"$T/free.yaml"
check=$("$VRAM" alerts --check "$T/free.yaml")
grep -q "free-low: memory_free_bytes below 8GiB (clear 12.5GiB) for 1.5s -> info" <<<"$check" \
    || fail "alerts --check: sizes as people write them: $check"
printf 'rules:\n  - name: x\n    metric: memory_used_ratio\n    above: 1\n    fr: 1s\n' >"$T/bad.yaml"
out=$("$VRAM" alerts --check "$T/bad.yaml" 2>&1) && fail "a bad rules file was accepted"
grep -q "bad.yaml:5: fr: unknown key" <<<"$out" || fail "bad rules message: $out"
pass "rules files are checked, errors name the line and the key"

start_daemon --watch-interval 0.1 --alert-rules "$T/rules.yaml"

# 70 GiB + 5 GiB of 80 GiB = 93.75 %: above 90 %, below 97 %
"$VRAM" sim alloc --mem 70GiB --device 0 >/dev/null &
A=$!
"$VRAM" sim alloc --mem 5GiB --device 0 >/dev/null &
B=$!
wait_for "the webhook gets the firing alert" grep -q '"state":"firing"' "$T/hooks"
# the hanging receiver has the same alert and has not been given up on (its
# timeout is 60 s): the healthy webhook did not wait for it
grep -q open "$T/hang.log" || fail "the hanging receiver was not called"
grep -q closed "$T/hang.log" && fail "the healthy webhook waited for the hanging one"
pass "a hanging receiver does not delay another"
# operators' tools see what each thread is (top -H, ps -L)
names=$(cat /proc/"$DAEMON_PID"/task/*/comm | sort | uniq -c)
for t in vramd-sampler vramd-sched vramd-alerts vramd-exec; do
    grep -q " $t\$" <<<"$names" || fail "thread $t missing: $names"
done
grep -q "^ *2 vramd-webhook$" <<<"$names" || fail "one thread per webhook: $names"
pass "threads are named, one per receiver"
wait_for "the exec hook ran" test -s "$T/exec.firing"
a=$(api GET /v1/alerts)
field "$a" '[x["rule"] for x in d["firing"]] == ["memory-high"]' | grep -qx True || fail "firing: $a"
field "$a" 'd["firing"][0]["fired_at"] - d["firing"][0]["pending_since"] >= 1.0' | grep -qx True \
    || fail "fired before its 1 s duration: $a"
field "$a" 'd["firing"][0]["level"] == "warning" and d["firing"][0]["subject"] == "gpu0"' \
    | grep -qx True || fail "level or subject: $a"
[ "$(wc -l <"$T/hooks.attempts")" -ge 2 ] || fail "the webhook's 503 was not retried"
grep -qx "VRAM_ALERT_RULE=memory-high" "$T/exec.firing" || fail "exec env: $(cat "$T/exec.firing")"
grep -qx "VRAM_ALERT_LEVEL=warning" "$T/exec.firing" || fail "exec env level"
grep -q "^VRAM_ALERT_JSON={" "$T/exec.firing" || fail "exec env json"
grep -qx "VRAM_ALERT_THRESHOLD=0.9" "$T/exec.firing" || fail "exec env threshold: $(cat "$T/exec.firing")"
grep -qx "VRAM_ALERT_DEVICE=0" "$T/exec.firing" || fail "exec env device"
grep -q "^VRAM_ALERT_JOB=" "$T/exec.firing" && fail "exec env: VRAM_ALERT_JOB set for a GPU alert"
grep -qx "VRAM_ALERT_HOST=$(hostname)" "$T/exec.firing" || fail "exec env host"
grep -qx "VRAM_ALERT_CLUSTER=test-cluster" "$T/exec.firing" || fail "exec env cluster"
hook=$(grep -m1 '"state":"firing"' "$T/hooks")
field "$hook" "d['host'] == '$(hostname)' and d['cluster'] == 'test-cluster'" | grep -qx True \
    || fail "webhook payload host/cluster: $hook"
grep -q "alert memory-high firing on gpu0: webhook http://127.0.0.1:$HOOK_PORT/alert took 2 attempts" \
    "$T/vramd.log" || fail "attempts not logged: $(grep attempt "$T/vramd.log")"
[ "$(metric 'vram_alerts_firing{level="warning"}')" = 1 ] || fail "metric alerts firing"
pass "WARNING fired after its duration; webhook (after a retry) and exec hook got it"

# 70 GiB = 87.5 %: between clear (85 %) and threshold: stays firing, no new alert
kill -TERM $B; wait $B || true
wait_samples 20
[ "$(grep -c '"state":"firing"' "$T/hooks")" = 1 ] || fail "the alert flapped: $(cat "$T/hooks")"
field "$(api GET /v1/alerts)" 'len(d["firing"]) == 1' | grep -qx True || fail "not firing any more"
pass "no flapping between the clear threshold and the threshold"

kill -TERM $A; wait $A || true
wait_for "the webhook gets the resolution" grep -q '"state":"resolved"' "$T/hooks"
wait_for "the exec hook ran for the resolution" test -s "$T/exec.resolved"
grep -qx "VRAM_ALERT_STATE=resolved" "$T/exec.resolved" || fail "exec resolved env"
grep -qx "VRAM_ALERT_REASON=cleared" "$T/exec.resolved" || fail "exec resolved reason"
resolved=$(grep -m1 '"state":"resolved"' "$T/hooks")
field "$resolved" '"back to" in d["message"] and d["reason"] == "cleared"' | grep -qx True \
    || fail "the resolved message: $resolved"
a=$(api GET /v1/alerts?limit=10)
field "$a" 'd["firing"] == [] and len(d["resolved"]) == 1 and d["resolved"][0]["resolved_at"] > d["resolved"][0]["fired_at"]' \
    | grep -qx True || fail "resolved: $a"
"$VRAM" alerts --all | grep -q "resolved  warning" || fail "vram alerts --all: $("$VRAM" alerts --all)"
"$VRAM" alerts --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["firing"]==[]'
[ "$(grep -c '"state":"firing"' "$T/hooks")" = 1 ] || fail "fired more than once"
pass "resolved below the clear threshold, stored with its timestamps"

# the history of an alert survives a restart; the stop does not wait for the
# receiver that never answers (vramd holds the database lock until it exits)
# and ends within the systemd unit's TimeoutStopSec, past which systemd would
# kill it (the unit and vramd's stop grace must agree)
stop_s=$(sed -n 's/^TimeoutStopSec=\([0-9][0-9]*\)s$/\1/p' "$VRAM_SOURCE_DIR/packaging/vramd.service.in")
[ -n "$stop_s" ] || fail "packaging/vramd.service.in sets no TimeoutStopSec in seconds"
t0=$(date +%s%N)
kill -TERM "$DAEMON_PID"
while kill -0 "$DAEMON_PID" 2>/dev/null && [ $(( $(date +%s%N) - t0 )) -lt $((stop_s * 1000000000)) ]; do
    sleep 0.05
done
if kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -9 "$DAEMON_PID"; fail "vramd still running ${stop_s} s (the unit's TimeoutStopSec) after SIGTERM (a receiver hangs)"
fi
wait "$DAEMON_PID" || true
DAEMON_PID=
echo "vramd stopped $(( ($(date +%s%N) - t0) / 1000000 )) ms after SIGTERM (TimeoutStopSec=${stop_s}s)"
pass "vramd stops within the unit's TimeoutStopSec while a receiver hangs"
start_daemon --watch-interval 0.1 --alert-rules "$T/rules.yaml"
field "$(api GET /v1/alerts?limit=10)" 'len(d["resolved"]) == 1' | grep -qx True || fail "alert lost"
pass "alerts are kept across a restart"

# a job using more than it reserved fires job-over; it resolves when the job ends
"$VRAM" run --mem 2GiB --name greedy -- "$VRAM" sim alloc --mem 3GiB >/dev/null 2>&1 &
RUN=$!
job_over() { field "$(api GET /v1/alerts)" '[x["subject"] for x in d["firing"] if x["rule"] == "job-over"] == ["job 1"]' | grep -qx True; }
wait_for "job-over fires for job 1" job_over
field "$(api GET /v1/alerts)" '[x for x in d["firing"] if x["rule"] == "job-over"][0]["value"] == 1.5' \
    | grep -qx True || fail "job-over value: $(api GET /v1/alerts)"
kill -TERM $RUN; wait $RUN || true
job_over_resolved() { field "$(api GET /v1/alerts?limit=10)" 'd["firing"] == [] and any(x["rule"] == "job-over" for x in d["resolved"])' | grep -qx True; }
wait_for "job-over resolves when the job ends" job_over_resolved
field "$(api GET /v1/alerts?limit=10)" '"the job is no longer running" in [x for x in d["resolved"] if x["rule"] == "job-over"][0]["message"]' \
    | grep -qx True || fail "job-over resolution message: $(api GET /v1/alerts?limit=10)"
pass "a job over its reservation fires, and resolves when the job ends"
