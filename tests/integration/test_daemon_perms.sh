#!/usr/bin/env bash
# Permissions decided by Unix-socket peer credentials: another uid cannot
# cancel or finish a job; the owner and root can.
source "$(dirname "$0")/daemon_lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    echo "skip: needs root and setpriv to act as another uid"
    exit 0
fi
start_daemon --socket-mode 0666
chmod 755 "$T"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env VRAM_SOCKET="$VRAM_SOCKET" "$@"; }

id=$(field "$(api POST /v1/jobs '{"name":"roots","mem_bytes":"1GiB"}')" 'd["id"]')
set +e; out=$(as_nobody "$VRAM" cancel "$id" 2>&1); rc=$?; set -e
[ $rc = 1 ] || fail "nobody's cancel exited $rc: $out"
grep -q "belongs to uid 0" <<<"$out" || fail "message: $out"
code=$(as_nobody curl -s -o /dev/null -w '%{http_code}' --unix-socket "$VRAM_SOCKET" -X POST http://x/v1/jobs/$id/finish)
[ "$code" = 403 ] || fail "nobody's finish: $code"
[ "$(job_state "$id")" = running ] || fail "job changed"
pass "another uid cannot cancel or finish root's job (403)"

j=$(as_nobody curl -s --unix-socket "$VRAM_SOCKET" -X POST -d '{"name":"mine","mem_bytes":"1GiB"}' http://x/v1/jobs)
nid=$(field "$j" 'd["id"]')
[ "$(field "$j" 'd["owner_uid"]')" = 65534 ] || fail "owner from peer credentials: $j"
as_nobody "$VRAM" cancel "$nid" >/dev/null || fail "owner cannot cancel"
"$VRAM" cancel "$id" >/dev/null || fail "root cannot cancel"
pass "owners cancel their own jobs (owner uid from SO_PEERCRED); root cancels any"
