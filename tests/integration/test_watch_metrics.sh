#!/usr/bin/env bash
# /metrics for Prometheus: promtool accepts it, a real Prometheus on loopback
# scrapes a vramd on sim GPUs and finds the used bytes a `vram sim alloc`
# changed; job series carry id, name and user (escaped) but no command line.
# Also: history survives a vramd restart; peaks and their reset.
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"
command -v promtool >/dev/null || fail "promtool missing (apt-get install prometheus)"

start_daemon --watch-interval 0.2
TCP=$(tcp_address)

# a job with a name that needs escaping, using 8 GiB of its 10 GiB on GPU 0
"$VRAM" run --mem 10GiB --name 'tr"ain\er' -- "$VRAM" sim alloc --mem 8GiB >/dev/null 2>&1 &
job_used() { [ "$(metric 'vram_job_memory_used_bytes{job_id="1",job_name="tr\"ain\\er",user="'"$(id -un)"'",gpu="0",uuid="'"$(gpu_uuid 0)"'"}')" = $((8 * GiB)) ]; }
wait_for "the job's usage in /metrics" job_used
[ "$(metric 'vram_jobs{state="running"}')" = 1 ] || fail "running jobs"
[ "$(metric vram_job_admissions_total)" = 1 ] || fail "admissions counter"
curl -s "http://$TCP/metrics" >"$T/tcp.prom"
curl -s --unix-socket "$VRAM_SOCKET" http://x/metrics >"$T/unix.prom"
promtool check metrics <"$T/tcp.prom" || fail "promtool rejected /metrics (TCP)"
promtool check metrics <"$T/unix.prom" || fail "promtool rejected /metrics (socket)"
grep -q 'vram_job_memory_reserved_bytes{job_id="1",job_name="tr\\"ain\\\\er"' "$T/tcp.prom" || fail "job labels"
grep -q "sim alloc" "$T/tcp.prom" && fail "a command line leaked into /metrics"
ctype=$(curl -s -o /dev/null -w '%{content_type}' "http://$TCP/metrics")
[[ $ctype == text/plain* ]] || fail "content type $ctype"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$TCP/metrics")" = 405 ] || fail "POST /metrics"
pass "promtool accepts /metrics on TCP and the socket; job labels escaped, no command lines"

# what a fleet needs: free for admission equal to vram status' (a job
# admitted and memory used outside vramd on GPU 1 make it differ from
# total - reserved), a uuid on every device series, the job's peak, the
# process, vramd's own process_* and its build
"$VRAM" sim alloc --mem 30GiB --device 1 >/dev/null &
OUTSIDE=$!
adm_matches() {
    local st; st=$(api GET /v1/status)
    for g in 0 1; do
        [ "$(metric "vram_device_memory_free_for_admission_bytes{gpu=\"$g\",name=\"H100-80GB\",uuid=\"$(gpu_uuid $g)\"}")" \
            = "$(field "$st" "d['devices'][$g]['free_for_admission_bytes']")" ] || return 1
    done
    # 30 GiB outside vramd on GPU 1: admission has at most 50 of 80 GiB left
    [ "$(field "$st" "d['devices'][1]['free_for_admission_bytes'] <= 50 * $GiB")" = True ]
}
wait_for "free for admission in /metrics equal to /v1/status" adm_matches
curl -s "http://$TCP/metrics" >"$T/fleet.prom"
promtool check metrics <"$T/fleet.prom" || fail "promtool rejected /metrics"
grep '^vram_device_' "$T/fleet.prom" | grep -v 'uuid="SIM-' && fail "a device series without its uuid"
grep -q '^vram_device_health{gpu="0",name="H100-80GB",uuid="SIM-.*",state="available"} 1$' "$T/fleet.prom" \
    || fail "vram_device_health without name and uuid"
grep -q "^vram_job_memory_peak_bytes{job_id=\"1\",job_name=\"tr\\\\\"ain\\\\\\\\er\",user=\"$(id -un)\"} $((8 * GiB))\$" "$T/fleet.prom" \
    || fail "job peak: $(grep peak "$T/fleet.prom")"
grep -q "^vram_process_memory_used_bytes{gpu=\"1\",uuid=\"$(gpu_uuid 1)\",pid=\"$OUTSIDE\",process=\"vram\",user=\"$(id -un)\"} $((30 * GiB))\$" "$T/fleet.prom" \
    || fail "process series: $(grep vram_process "$T/fleet.prom")"
for m in process_cpu_seconds_total process_resident_memory_bytes process_open_fds process_max_fds \
    process_start_time_seconds process_threads; do
    grep -q "^$m [0-9]" "$T/fleet.prom" || fail "$m missing"
done
grep -q '^vram_build_info{version="[0-9.]*",build=".*",api="[0-9]*"} 1$' "$T/fleet.prom" || fail "build info"
kill -TERM $OUTSIDE; wait $OUTSIDE || true
gpu1_empty() { [ "$(metric "vram_device_memory_used_bytes{gpu=\"1\",name=\"H100-80GB\",uuid=\"$(gpu_uuid 1)\"}")" = 0 ]; }
wait_for "GPU 1 empty" gpu1_empty
api POST /v1/peaks/reset '{"device": 1}' >/dev/null # the peak checks below start from here
pass "free for admission as vram status has it, uuid on every device series, job peak, processes, process_*, build info"

# a job's own labels (the Slurm plugin's ids, a value that needs escaping)
# become label_<key> on its series; promtool still accepts the text
sleep 600 &
HOLDER=$!
body='{"mem_bytes":"1GiB","pid":'$HOLDER',"name":"labelled","devices":[1],"labels":{"slurm_job_id":"123","slurm_step_id":"0","note":"a\"b\\c"}}'
LJOB=$(field "$(api POST /v1/jobs "$body")" "d['id']")
[ "$(status)" = 201 ] || fail "labelled job: $(status) $(cat "$T/body")"
field "$(api GET /v1/jobs/$LJOB)" "d['labels'] == {'note': 'a\"b\\\\c', 'slurm_job_id': '123', 'slurm_step_id': '0'}" \
    | grep -qx True || fail "labels in the job JSON: $(cat "$T/body")"
labelled='vram_job_memory_reserved_bytes{job_id="'$LJOB'",job_name="labelled",user="'"$(id -un)"'",gpu="1",uuid="'"$(gpu_uuid 1)"'",label_note="a\"b\\c",label_slurm_job_id="123",label_slurm_step_id="0"}'
labels_shown() { [ "$(metric "$labelled")" = "$GiB" ]; }
wait_for "the job's labels in /metrics" labels_shown
curl -s "http://$TCP/metrics" >"$T/labels.prom"
promtool check metrics <"$T/labels.prom" || fail "promtool rejected /metrics with job labels"
for bad in '{"A":"x"}' '{"k":1}' '{"k":"a\nb"}' '["x"]'; do
    api POST /v1/jobs '{"mem_bytes":"1GiB","labels":'"$bad"'}' >/dev/null
    case "$(status)" in 400 | 422) ;; *) fail "labels $bad: $(status)" ;; esac
    grep -q labels "$T/body" || fail "labels $bad: the error does not name the field: $(cat "$T/body")"
done
api DELETE /v1/jobs/$LJOB >/dev/null # vramd sends the holder SIGTERM
wait $HOLDER || true
pass "job labels in the job JSON and as label_<key> on its series; bad labels refused"

# OOM ends and OOM retries are separate counters, both through the real
# `vram run --retry-oom` reporting to vramd
oom0=$(metric vram_job_oom_total); retries0=$(metric vram_job_oom_retries_total)
[ -n "$oom0" ] && [ -n "$retries0" ] || fail "OOM counters missing from /metrics"
oom_cmd='echo "CUDA out of memory. Tried to allocate 2 GiB$1" >&2; exit 1'
# batch 8 -> 4 -> 2: three attempts end OOM, two of them are retried
"$VRAM" run --mem 8GiB --devices 1 --batch-size 8 --retry-oom 2 -- sh -c "$oom_cmd" sh "" 2>"$T/oom.err" \
    && fail "an OOM run succeeded"
grep -c 'retrying with batch' "$T/oom.err" | grep -qx 2 || fail "expected two retries: $(cat "$T/oom.err")"
[ "$(metric vram_job_oom_total)" = $((oom0 + 3)) ] || fail "OOM ends: $(metric vram_job_oom_total), was $oom0"
[ "$(metric vram_job_oom_retries_total)" = $((retries0 + 2)) ] || fail "OOM retries: $(metric vram_job_oom_retries_total), was $retries0"
# an OOM end that is not retried (half the batch is below --min-batch-size)
"$VRAM" run --quiet --mem 8GiB --devices 1 --batch-size 2 --min-batch-size 2 --retry-oom 3 -- sh -c "$oom_cmd" sh "" 2>/dev/null \
    && fail "an OOM run succeeded"
[ "$(metric vram_job_oom_total)" = $((oom0 + 4)) ] || fail "unretried OOM end"
[ "$(metric vram_job_oom_retries_total)" = $((retries0 + 2)) ] || fail "an unretried OOM end counted as a retry"
# a long message is cut in the job's error, the retry note is not
long=$(printf ' %.0sxxxxxxxxxx' $(seq 30))
"$VRAM" run --quiet --mem 8GiB --devices 1 --batch-size 8 --retry-oom 1 -- sh -c "$oom_cmd" sh "$long" 2>/dev/null \
    && fail "an OOM run succeeded"
retried=$(( $(field "$(api GET '/v1/jobs?limit=1')" 'max(j["id"] for j in d["jobs"])') - 1 ))
field "$(api GET /v1/jobs/$retried)" 'd["error"]' | grep -q '^out of memory: CUDA out of memory.*; retrying with batch 4$' \
    || fail "retried job's error: $(api GET /v1/jobs/$retried)"
[ "$(metric vram_job_oom_retries_total)" = $((retries0 + 3)) ] || fail "long message: retry not counted"
pass "OOM ends and OOM retries counted apart (vram run --retry-oom through vramd)"

# a real Prometheus scraping vramd
PROM_PORT=$(free_port)
cat >"$T/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: vramd
    static_configs:
      - targets: ['$TCP']
YAML
promtool check config "$T/prometheus.yml" >/dev/null || fail "prometheus config"
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/prom" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$T/prometheus.log" 2>&1 &
"$VRAM" sim alloc --mem 12GiB --device 1 >/dev/null &
ALLOC=$!
prom_sees() {
    curl -s "http://127.0.0.1:$PROM_PORT/api/v1/query" \
        --data-urlencode 'query=vram_device_memory_used_bytes{gpu="1"}' |
        python3 -c "import json,sys; r=json.load(sys.stdin)['data']['result']; sys.exit(0 if r and float(r[0]['value'][1]) == $((12 * GiB)) else 1)"
}
wait_for "Prometheus to scrape 12 GiB used on GPU 1" prom_sees || { cat "$T/prometheus.log"; exit 1; }
pass "a real Prometheus scraped the used bytes vram sim alloc changed"

# peaks
field "$(api GET /v1/peaks)" "d['devices'][1]['peak_used_bytes'] == 12 * $GiB" | grep -qx True || fail "peak"
kill -TERM $ALLOC; wait $ALLOC || true
free_again() { [ "$(metric "vram_device_memory_used_bytes{gpu=\"1\",name=\"H100-80GB\",uuid=\"$(gpu_uuid 1)\"}")" = 0 ]; }
wait_for "GPU 1 free again" free_again
"$VRAM" peaks | grep -q "^1 *12.00" || fail "vram peaks: $("$VRAM" peaks)"
# the exited process keeps its peak and its name; processes largest first
out=$("$VRAM" peaks)
grep -qE "^1 +$ALLOC +12\.00  exited +vram" <<<"$out" || fail "exited process in vram peaks: $out"
awk '/^GPU +PID/ { p = 1; next } p && NF { print $3 }' <<<"$out" | sort -rnc || fail "not sorted: $out"
awk '/^JOB +PEAK/ { p = 1; next } /^$/ { p = 0 } p { print $2 }' <<<"$out" | sort -rnc \
    || fail "jobs not sorted: $out"
"$VRAM" peaks --reset -i 1 >/dev/null || fail "peaks --reset"
field "$(api GET /v1/peaks)" "d['devices'][1]['peak_used_bytes'] == 0 and d['devices'][0]['peak_used_bytes'] == 8 * $GiB" \
    | grep -qx True || fail "reset of GPU 1 only: $(api GET /v1/peaks)"
api POST /v1/peaks/reset '{"device": "x"}' >/dev/null; [ "$(status)" = 400 ] || fail "bad reset body"
curl -s -o /dev/null -w '%{http_code}' -X POST "http://$TCP/v1/peaks/reset" | grep -qx 403 || fail "TCP reset allowed"
pass "peaks per device, process and job; reset of one device"

# history survives a restart (the samples are in vramd's database)
"$VRAM" history -i 1 --since 10m --json >"$T/h1.json"
python3 -c "import json; d=json.load(open('$T/h1.json')); assert any(p[1] == 12 * $GiB for p in d['points']), d" \
    || fail "history lacks the 12 GiB"
stop_daemon
start_daemon --watch-interval 0.2
"$VRAM" history -i 1 --since 10m --json >"$T/h2.json"
python3 -c "import json; d=json.load(open('$T/h2.json')); assert any(p[1] == 12 * $GiB for p in d['points']), d" \
    || fail "history lost at the restart"
"$VRAM" history -i 1 --since 10m | grep -q "sample resolution" || fail "vram history table"
api GET '/v1/history?device=9' >/dev/null; [ "$(status)" = 404 ] || fail "unknown device: $(status)"
api GET '/v1/history?device=0&from=10&to=5' >/dev/null; [ "$(status)" = 400 ] || fail "bad range"
api GET '/v1/history?step=abc' >/dev/null; [ "$(status)" = 400 ] || fail "bad step"
pass "history survives a restart; bad queries are refused"
