#!/usr/bin/env bash
# The dashboard in a real browser (headless Chromium through selenium) on a
# live vramd with two GPUs and a failed one, its data over TCP with the token
# (entered in the page's form, then given in the address's fragment):
# figures equal to /v1/status,
# a `vram run` job, a firing alert, a hostile job name; then the page kept
# open VRAM_DASHBOARD_SOAK_S seconds (default 300: five minutes) while jobs start and end on
# both GPUs; screenshots at desktop and phone widths land in the build
# directory (docs/dashboard.png and docs/dashboard-phone.png are copies).
export VRAM_SIM="2xH100-80GB,H100-80GB@fail"
source "$(dirname "$0")/daemon_lib.sh"
source "$(dirname "$0")/watch_lib.sh"
PY=/usr/bin/python3 # Debian's, with python3-selenium
$PY -c 'import selenium' 2>/dev/null || fail "python3-selenium missing"
[ -x /usr/bin/chromedriver ] || fail "chromium-driver missing"

memory_rule "$T/rules.yaml" 90% 0.5s
# TCP serves the dashboard's data to token holders only (docs/daemon.md)
export VRAM_TOKEN=dashboard-token
start_daemon --watch-interval 0.2 --alert-rules "$T/rules.yaml"
TCP=$(tcp_address)
"$VRAM" run --mem 10GiB --devices 0 --name dashjob -- "$VRAM" sim alloc --mem 6GiB >/dev/null 2>&1 &
"$VRAM" sim alloc --mem 73GiB --device 1 >/dev/null &
# a hostile job name: shown as text everywhere, never run as HTML
"$VRAM" run --mem 1GiB --devices 0 --name '<img id=pwn src=x onerror=document.title="pwned">' -- \
    "$VRAM" sim alloc --mem 512MiB >/dev/null 2>&1 &
firing() { field "$(api GET /v1/alerts)" 'len(d["firing"]) == 1' | grep -qx True; }
wait_for "the alert on GPU 1" firing
wait_samples 5 # some history for the charts

size=$(curl -s "http://$TCP/" "http://$TCP/static/dashboard.js" "http://$TCP/static/dashboard.css" \
    "http://$TCP/static/dygraph.min.js" "http://$TCP/static/dygraph.min.css" | wc -c)
echo "dashboard payload: $size bytes"
[ "$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$VRAM_SOCKET" http://x/)" = 404 ] \
    || fail "the dashboard is served on the socket"
grep -rq "https\?://" <(curl -s "http://$TCP/") && fail "the page references another site"
# the page's files are open (code, no data); its data is not, without the token
for path in /v1/status /v1/watch "/v1/history?device=0" /v1/alerts; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$TCP$path")" = 401 ] ||
        fail "TCP $path without the token"
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $VRAM_TOKEN" "http://$TCP$path")" = 200 ] ||
        fail "TCP $path with the token"
done

VRAM_BIN=$VRAM $PY "$(dirname "$0")/watch_dashboard.py" "http://$TCP" "$VRAM_BUILD_DIR" dashjob \
    memory-high "$DAEMON_PID" || fail "dashboard checks"
pass "dashboard in headless Chromium; screenshots in $VRAM_BUILD_DIR/dashboard*.png"
