#!/bin/bash
# vram jobs and vram cancel against a live vramd: user names, times, pending
# reasons, the over-reservation marker, order by id, one job with its event
# log, --user/--state/--format/--json, escaping of client strings, cancel of
# several ids and by --user/--state.
export VRAM_SIM=1xH100-80GB
source "$(dirname "$0")/daemon_lib.sh"
export VRAM_SAFETY_MARGIN=0
start_daemon
cd "$T"
run_rc() { local __v=$1 __rc=0; shift; "$@" || __rc=$?; printf -v "$__v" %s "$__rc"; }
me=$(id -un)

# a running job that holds 64 GiB, one that ended, one queued behind it
hold=$("$VRAM" submit --parsable --mem 64GiB --name holder -- sh -c 'while [ ! -e go ]; do sleep 0.05; done')
"$VRAM" run --quiet --mem 1GiB --name quick -- true
# a name must be printable text (every user's terminal shows it); a command
# line, shown to its owner, may hold anything and is escaped when printed
run_rc rc "$VRAM" submit --parsable --mem 50GiB --name "$(printf 'evil\033[2Jname')" -- true 2>"$T/err"
[ "$rc" != 0 ] && grep -q "control character" "$T/err" || fail "a name with ESC was accepted: $rc $(cat "$T/err")"
queued=$("$VRAM" submit --parsable --mem 50GiB --name evilname -- echo "$(printf 'evil\033[2Jarg')")
[ "$(job_state "$queued")" = queued ] || fail "job should queue"

table=$("$VRAM" jobs)
head -1 <<<"$table" | grep -q '^ *ID  USER .*STATE .*NAME .*GPUS .*MEM/GPU .*BATCH .*SUBMITTED .*STARTED .*ELAPSED .*DEVICES .*REASON$' \
    || fail "header: $(head -1 <<<"$table")"
[ "$(tail -n +2 <<<"$table" | awk '{print $1}' | tr '\n' ' ')" = "1 2 3 " ] || fail "not sorted by id: $table"
grep -q "^ *$hold  $me .*running .*holder" <<<"$table" || fail "user name or state: $table"
grep -q "waiting for 50.00 GiB on 1 GPU; GPU 0 has 16.00 GiB free for admission" <<<"$table" \
    || fail "pending reason: $table"
commands=$("$VRAM" jobs --format '%i %c')
grep -q 'evil\\x1b\[2Jarg' <<<"$commands" || fail "escape sequence not escaped: $commands"
! grep -q $'\033' <<<"$table$commands" || fail "raw ESC reached the terminal"
pass "table: user names, sorted by id, pending reason, escaped names"

[ "$("$VRAM" jobs --state queued --noheader --format '%i')" = "$queued" ] || fail "--state queued"
[ "$("$VRAM" jobs --state running,done --noheader --format '%i %t' | tr '\n' ,)" = "1 running,2 done," ] || fail "--state running,done"
[ "$("$VRAM" jobs --user "$me" --noheader --format '%i' | wc -l)" = 3 ] || fail "--user $me"
[ "$("$VRAM" jobs --user 4242 --noheader --format '%i' | wc -l)" = 0 ] || fail "--user 4242"
run_rc rc "$VRAM" jobs --state runing 2>"$T/err"
[ "$rc" = 2 ] && grep -q 'did you mean running?' "$T/err" || fail "--state typo: $(cat "$T/err")"
run_rc rc "$VRAM" jobs --format '%i %Q' 2>"$T/err"
[ "$rc" = 2 ] || fail "--format with an unknown field: $rc"
run_rc rc "$VRAM" jobs --all --limit 3 2>"$T/err"
[ "$rc" = 2 ] && grep -q -- '--all and --limit contradict' "$T/err" || fail "--all --limit"
run_rc rc "$VRAM" jobs 3 --state queued 2>"$T/err"
[ "$rc" = 2 ] || fail "ID with --state"
fmt=$("$VRAM" jobs --format '%.4i|%u|%V|%M|%b' --state done --noheader)
[[ "$fmt" =~ ^"   2|$me|"[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"|0:0"[0-9]"|-"$ ]] || fail "--format: $fmt"
[ "$("$VRAM" jobs --json --state queued | field "$(cat)" '[j["id"] for j in d["jobs"]]')" = "[$queued]" ] || fail "--json"
pass "--state, --user, --format (squeue-like widths), --json; typos and contradictions refused"

detail=$("$VRAM" jobs "$hold")
grep -q "^user  *$me$" <<<"$detail" && grep -q '^state  *running$' <<<"$detail" || fail "detail: $detail"
grep -q '^events:$' <<<"$detail" && grep -q 'submitted  *queued' <<<"$detail" \
    && grep -q 'admitted  *admitted on 1 GPU' <<<"$detail" && grep -q 'started  *started by vramd as process' <<<"$detail" \
    || fail "event log: $detail"
pass "vram jobs ID: details and the event log"

# over-reservation: a job that allocates more than it reserved gets '!'
"$VRAM" run --quiet --mem 1GiB --name over -- "$VRAM" sim alloc --mem 4GiB --seconds 300 >/dev/null &
for _ in $(seq 100); do
    over=$(field "$(api GET /v1/jobs)" '[j["id"] for j in d["jobs"] if j["name"] == "over"]')
    [ "$over" != "[]" ] && break; sleep 0.05
done
over=${over//[^0-9]/}
for _ in $(seq 100); do
    [ "$(field "$(api GET /v1/jobs/$over)" 'd.get("over_reservation")')" = True ] && break; sleep 0.1
done
"$VRAM" jobs --format '%i %m %r' --noheader | grep -q "^$over 1.00 GiB! uses 4.00 GiB, above its reservation$" \
    || fail "over-reservation marker: $("$VRAM" jobs --format '%i %m %r')"
pass "over-reservation marked with '!' and explained"

# cancel: several ids, then everything queued of a user
a=$("$VRAM" submit --parsable --mem 50GiB -- true)
b=$("$VRAM" submit --parsable --mem 50GiB -- true)
out=$("$VRAM" cancel "$a" "$b")
[ "$out" = "$(printf 'job %s cancelled\njob %s cancelled' "$a" "$b")" ] || fail "cancel A B: $out"
out=$("$VRAM" cancel --user "$me" --state queued)
[ "$out" = "job $queued cancelled" ] || fail "cancel --user --state queued: $out"
[ "$(job_state "$hold")" = running ] || fail "the running job was cancelled too"
run_rc rc "$VRAM" cancel --state done 2>"$T/err"
[ "$rc" = 2 ] || fail "--state done accepted"
run_rc rc "$VRAM" cancel 2>"$T/err"
[ "$rc" = 2 ] || fail "cancel without ids"
"$VRAM" cancel "$over" "$hold" >/dev/null
pass "vram cancel ID ID, --user U --state queued (running jobs untouched)"
check_ledger
