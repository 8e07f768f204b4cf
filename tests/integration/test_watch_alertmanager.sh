#!/usr/bin/env bash
# vramd's alerts in a real Prometheus Alertmanager (Debian's
# prometheus-alertmanager, API v2): two GPUs over 90 % fire the same rule;
# Alertmanager receives both alerts with vramd's labels (host, cluster, gpu),
# groups them into one notification to its own webhook receiver, and sends
# the resolution when vramd resolves them.
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"
AM=/usr/bin/prometheus-alertmanager
[ -x $AM ] || fail "prometheus-alertmanager missing (Makefile DEPS)"

python3 "$(dirname "$0")/webhook_server.py" "$T/notes" "$T/hook.port" 0 &
wait_for "webhook server" test -s "$T/hook.port"
AM_PORT=$(free_port)
cat >"$T/am.yml" <<YAML
route:
  receiver: hook
  group_by: [alertname, cluster]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:$(cat "$T/hook.port")/am
        send_resolved: true
YAML
$AM --config.file="$T/am.yml" --storage.path="$T/am" --web.listen-address="127.0.0.1:$AM_PORT" \
    --cluster.listen-address= >"$T/am.log" 2>&1 &
am_ready() { curl -sf "http://127.0.0.1:$AM_PORT/-/ready"; }
wait_for "Alertmanager ready" am_ready

memory_rule "$T/rules.yaml" 90% 0.3s 85%
VRAM_ALERT_ALERTMANAGER="http://127.0.0.1:$AM_PORT/" VRAM_ALERT_CLUSTER=lab \
    start_daemon --watch-interval 0.1 --alert-rules "$T/rules.yaml"
TCP=$(tcp_address)

"$VRAM" sim alloc --mem 75GiB --device 0 >/dev/null &
A=$!
"$VRAM" sim alloc --mem 76GiB --device 1 >/dev/null &
B=$!
am_alerts() { curl -s "http://127.0.0.1:$AM_PORT/api/v2/alerts?active=true"; }
two_in_am() { field "$(am_alerts)" 'sorted(a["labels"].get("gpu") for a in d) == ["0", "1"]' | grep -qx True; }
wait_for "Alertmanager holds both alerts" two_in_am
a=$(am_alerts)
field "$a" "all(x['labels']['alertname'] == 'memory-high' and x['labels']['severity'] == 'warning' and x['labels']['host'] == '$(hostname)' and x['labels']['cluster'] == 'lab' and x['generatorURL'] == 'http://$TCP/' for x in d)" \
    | grep -qx True || fail "labels in Alertmanager: $a"
field "$a" "all('> 90%' in x['annotations']['summary'] and x['annotations']['threshold'] == '90%' for x in d)" \
    | grep -qx True || fail "annotations in Alertmanager: $a"
pass "Alertmanager received both alerts with vramd's labels and annotations"

# grouped: one notification carrying both firing alerts
grouped() { python3 -c '
import json, sys
for line in filter(str.strip, open(sys.argv[1])):
    n = json.loads(line)
    if n["status"] == "firing" and len([a for a in n["alerts"] if a["status"] == "firing"]) == 2:
        sys.exit(0)
sys.exit(1)' "$T/notes"; }
wait_for "one notification with both alerts" grouped
pass "Alertmanager grouped the two alerts into one notification"

kill -TERM $A; wait $A || true
one_resolved() { python3 -c '
import json, sys
for line in filter(str.strip, open(sys.argv[1])):
    n = json.loads(line)
    st = {a["labels"]["gpu"]: a for a in n["alerts"]}
    if st.get("0", {}).get("status") == "resolved" and st.get("1", {}).get("status") == "firing":
        assert "back to" in st["0"]["annotations"]["summary"], st["0"]
        assert st["0"]["annotations"]["resolution"] == "cleared", st["0"]
        sys.exit(0)
sys.exit(1)' "$T/notes"; }
wait_for "the resolution of GPU 0 reaches the receiver" one_resolved
kill -TERM $B; wait $B || true
all_resolved() { grep . "$T/notes" | tail -n1 | python3 -c 'import json,sys; n=json.load(sys.stdin); sys.exit(n["status"] != "resolved")'; }
wait_for "the group resolves" all_resolved
field "$(am_alerts)" 'd == []' | grep -qx True || fail "Alertmanager still holds active alerts: $(am_alerts)"
pass "vramd's resolutions end the alerts in Alertmanager, which sends them resolved"
