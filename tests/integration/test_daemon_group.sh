#!/usr/bin/env bash
# The socket of a root vramd belongs to SOCKET_GROUP with mode 0660: a user
# outside the group is told to ask for the group (never "vramd is not
# running"), a member submits. A throwaway group stands in for "vram"; the
# packaging's unit, tmpfiles and sysusers files must agree on /run/vram.
source "$(dirname "$0")/daemon_lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null || ! command -v groupadd >/dev/null; then
    echo "skip: needs root, setpriv and groupadd to act as a member and a non-member of a group"
    exit 0
fi

# What the service installs: /run/vram 0750 root:vram, the socket in it, the
# daemon running with group vram, the group created by sysusers.
P=$VRAM_SOURCE_DIR/packaging
grep -qx 'd /run/vram      0750 root vram -' "$P/tmpfiles.conf" || fail "tmpfiles: /run/vram not 0750 root:vram"
grep -qx 'g vram -' "$P/sysusers.conf" || fail "sysusers: no group vram"
for line in Group=vram RuntimeDirectory=vram RuntimeDirectoryMode=0750 \
    'Environment=VRAM_SOCKET=/run/vram/vramd.sock VRAM_DB=/var/lib/vram/vramd.db'; do
    grep -qxF "$line" "$P/vramd.service.in" || fail "vramd.service lacks $line"
done
! grep -Eq '^[[:space:]]*(SOCKET_MODE|SOCKET_GROUP)' "$P/vramd.conf" || fail "vramd.conf overrides the socket's mode or group"
[ "$("$VRAMD" --help 2>&1 | grep -c 'SOCKET_GROUP')" -ge 1 ] || fail "vramd --help does not list SOCKET_GROUP"
pass "packaging: /run/vram 0750 root:vram (tmpfiles and unit), group vram (sysusers), socket in it"

G=vramt$$
groupadd "$G" || fail "groupadd $G"
remove_group() { groupdel "$G"; }
CLEANUP_HOOK=remove_group
GID=$(getent group "$G" | cut -d: -f3)

# A runtime directory like /run/vram, and no socket mode or group given: the
# defaults (0660, SOCKET_GROUP) must make it right.
chmod 755 "$T"
install -d -m 0750 -g "$G" "$T/run"
export VRAM_SOCKET=$T/run/vramd.sock VRAM_SOCKET_GROUP=$G
start_daemon
[ "$(stat -c '%a %G %U' "$VRAM_SOCKET")" = "660 $G root" ] || fail "socket: $(stat -c '%a %G %U' "$VRAM_SOCKET")"
pass "root vramd creates its socket 0660 root:$G"

outsider() { setpriv --reuid=65534 --regid=65534 --clear-groups env VRAM_SOCKET="$VRAM_SOCKET" "$@"; }
member() { setpriv --reuid=65534 --regid=65534 --groups="$GID" env VRAM_SOCKET="$VRAM_SOCKET" "$@"; }
want="permission denied on $VRAM_SOCKET: ask the administrator to add you to group $G"
set +e; out=$(outsider "$VRAM" jobs 2>&1); rc=$?; set -e
[ $rc != 0 ] || fail "a non-member listed the jobs: $out"
grep -qF "$want" <<<"$out" || fail "non-member (directory closed to it): $out"
grep -q "not running" <<<"$out" && fail "non-member told vramd is not running: $out"
# the directory open to all, the socket itself closed
chmod 755 "$T/run"
set +e; out=$(outsider "$VRAM" run --mem 1GiB -- true 2>&1); rc=$?; set -e
[ $rc != 0 ] || fail "a non-member ran a job: $out"
grep -qF "$want" <<<"$out" || fail "non-member (socket closed to it): $out"
chmod 750 "$T/run"
pass "a non-member is told to ask for group $G, through a closed directory or a closed socket"

out=$(member "$VRAM" run --quiet --mem 1GiB --name member -- true 2>&1) || fail "member's run: $out"
j=$(api GET '/v1/jobs?limit=10')
[ "$(field "$j" '[x["owner_uid"] for x in d["jobs"] if x["name"] == "member"][0]')" = 65534 ] || fail "member's job: $j"
[ "$(field "$j" '[x["state"] for x in d["jobs"] if x["name"] == "member"][0]')" = done ] || fail "member's job: $j"
pass "a member of $G runs a job through the socket (owner uid 65534, done)"

stop_daemon
set +e; out=$(VRAM_SOCKET_GROUP=nosuchgroup$$ "$VRAMD" --foreground 2>&1); rc=$?; set -e
[ $rc = 2 ] || fail "vramd with a missing SOCKET_GROUP exited $rc: $out"
grep -q "VRAM_SOCKET_GROUP: no group named \"nosuchgroup$$\"" <<<"$out" || fail "message: $out"
pass "a SOCKET_GROUP that does not exist stops vramd at start with a message"
