#!/usr/bin/env bash
# A full disk under vramd (its database on a 2 MiB tmpfs, filled up, with a
# reader pinning the WAL so that every write needs new space): rolled-back
# work is never logged, the error is reported once (not every tick), a dead
# job's reservation is released in memory meanwhile, and its end is recorded
# once the disk has room again.
source "$(dirname "$0")/daemon_lib.sh"
if [ "$(id -u)" != 0 ]; then echo "skip: needs root to mount a small tmpfs"; exit 0; fi
mkdir "$T/disk"
if ! mount -t tmpfs -o size=2m,mode=0700 tmpfs "$T/disk" 2>/dev/null; then
    echo "skip: cannot mount a tmpfs here"; exit 0
fi
unmount_disk() { umount -l "$T/disk" 2>/dev/null || true; }
CLEANUP_HOOK=unmount_disk
export VRAM_DB=$T/disk/vramd.db VRAM_SAFETY_MARGIN=0
start_daemon

sleep 600 &
S=$!
j=$(api POST /v1/jobs '{"mem_bytes":"10GiB","name":"victim","pid":'$S'}')
id=$(field "$j" 'd["id"]')
[ "$(field "$j" 'd["state"]')" = running ] || fail "victim: $j"

# Pin the WAL (an open read transaction), then fill the disk.
mkfifo "$T/reader"
sqlite3 "$VRAM_DB" <"$T/reader" >/dev/null 2>&1 &
READER=$!
exec 7>"$T/reader"
echo "BEGIN; SELECT count(*) FROM jobs;" >&7
dd if=/dev/zero of="$T/disk/fill" bs=16k >/dev/null 2>&1 || true
ok=0; failed=0
for i in $(seq 1 30); do
    api POST /v1/jobs '{"mem_bytes":"1GiB","name":"full'$i'"}' >/dev/null
    case $(status) in 201) ok=$((ok + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
[ $failed -gt 0 ] || fail "the disk never filled up"
logged=$(grep -c '"full[0-9]*" (uid 0) admitted' "$T/vramd.log" || true)
[ "$logged" = "$ok" ] || fail "$logged admissions logged for $ok committed ($failed rolled back)"
pass "full disk: $failed submissions refused, only the $ok committed ones logged"

# The victim's process dies while the disk is full: its 10 GiB are free in
# memory (status) although the store cannot record the end yet.
kill -9 "$S"; wait "$S" 2>/dev/null || true
for _ in $(seq 300); do
    [ "$(field "$(api GET /v1/status)" 'd["devices"][0]["reserved_bytes"] + d["devices"][1]["reserved_bytes"]')" = $((ok * GiB)) ] && break
    sleep 0.1
done
[ "$(field "$(api GET /v1/status)" 'd["devices"][0]["reserved_bytes"] + d["devices"][1]["reserved_bytes"]')" = $((ok * GiB)) ] \
    || fail "the dead job's reservation is still counted: $(api GET /v1/status)"
[ "$(job_state "$id")" = running ] || fail "the end was recorded on a full disk?"
n=$(grep -c "scheduler: .*reported once a minute" "$T/vramd.log" || true)
[ "$n" = 1 ] || fail "the disk error was logged $n times (want once a minute)"
pass "dead job released in memory while the disk is full; error logged once"

# Room again: the next tick records the end.
echo "COMMIT;" >&7; exec 7>&-; wait "$READER" || true
rm -f "$T/disk/fill"
wait_state "$id" failed
grep -q "scheduler: recovered after" "$T/vramd.log" || fail "no recovery line"
stop_daemon
unmount_disk
pass "once the disk has room, the end is recorded (failed) and the recovery logged"
