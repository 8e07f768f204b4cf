#!/usr/bin/env bash
# Alerts end to end: a sim GPU driven over 90 % with `vram sim alloc` fires the
# WARNING once after its `for` duration, does not flap while the memory stays
# between the clear threshold and the threshold, reaches a loopback webhook
# (after a retry) and an exec hook, and resolves below the clear threshold.
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"

python3 "$(dirname "$0")/webhook_server.py" "$T/hooks" "$T/hook.port" 1 &
wait_for "webhook server" test -s "$T/hook.port"
HOOK_PORT=$(cat "$T/hook.port")

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
  - http://127.0.0.1:$HOOK_PORT/alert
webhook_retries: 3
exec:
  - env | grep ^VRAM_ALERT_ | sort > "$T/exec.\$VRAM_ALERT_STATE"
YAML
"$VRAM" alerts --check "$T/rules.yaml" | grep -q "memory-high: memory_used_ratio above 0.9 (clear 0.85) for 1s -> warning" \
    || fail "alerts --check did not list the rule"
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
a=$(api GET /v1/alerts?limit=10)
field "$a" 'd["firing"] == [] and len(d["resolved"]) == 1 and d["resolved"][0]["resolved_at"] > d["resolved"][0]["fired_at"]' \
    | grep -qx True || fail "resolved: $a"
"$VRAM" alerts --all | grep -q "resolved  warning" || fail "vram alerts --all: $("$VRAM" alerts --all)"
"$VRAM" alerts --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["firing"]==[]'
[ "$(grep -c '"state":"firing"' "$T/hooks")" = 1 ] || fail "fired more than once"
pass "resolved below the clear threshold, stored with its timestamps"

# the history of an alert survives a restart
stop_daemon
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
pass "a job over its reservation fires, and resolves when the job ends"
