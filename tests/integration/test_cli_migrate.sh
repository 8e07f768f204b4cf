#!/bin/bash
# A database made before the columns vram submit, the retry cap and the batch
# table added (max_batch_size, spawn, batch_bytes) keeps working: vramd adds
# them when it opens it (and drops the linear figure the table replaced), old
# jobs stay visible, new ones use them.
source "$(dirname "$0")/daemon_lib.sh"
# the old job ended in 2023: kept here (JOB_RETENTION would delete it)
export VRAM_JOB_RETENTION=0
sqlite3 "$VRAM_DB" <<'SQL'
CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, command TEXT NOT NULL,
 uid INTEGER NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL,
 mem_bytes INTEGER NOT NULL, gpus INTEGER NOT NULL, priority INTEGER NOT NULL,
 timeout_s REAL NOT NULL, pinned TEXT NOT NULL, batch_size INTEGER NOT NULL,
 min_batch_size INTEGER NOT NULL, per_sample_bytes INTEGER NOT NULL,
 state TEXT NOT NULL, devices TEXT NOT NULL, reserved_bytes INTEGER NOT NULL,
 granted_batch INTEGER NOT NULL, grad_accum INTEGER NOT NULL,
 submitted_at REAL NOT NULL, started_at REAL NOT NULL, ended_at REAL NOT NULL,
 exit_status INTEGER NOT NULL, error TEXT NOT NULL);
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE events(id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL, at REAL NOT NULL,
 kind TEXT NOT NULL, message TEXT NOT NULL);
INSERT INTO jobs VALUES(1,'old','true',0,0,0,1073741824,1,0,0,'',16,16,0,'done','0',1073741824,16,1,
 1700000000,1700000001,1700000002,0,'');
INSERT INTO events(job_id,at,kind,message) VALUES(1,1700000000,'submitted','queued');
SQL
start_daemon
"$VRAM" jobs 1 | grep -q '^name  *old$' || fail "old job: $("$VRAM" jobs 1)"
[ "$(field "$(api GET /v1/jobs/1)" '(d["state"], d["max_batch_size"])')" = "('done', 0)" ] || fail "old job JSON"
cols=$(sqlite3 "$VRAM_DB" "SELECT group_concat(name) FROM pragma_table_info('jobs') WHERE name IN ('max_batch_size','spawn','batch_bytes','per_sample_bytes')")
[ "$cols" = "max_batch_size,spawn,batch_bytes" ] || fail "columns after migration: $cols"
[ "$(field "$(api GET /v1/jobs/1)" 'd["batch_bytes"]')" = "[]" ] || fail "old job's batch table"
id=$("$VRAM" submit --parsable --mem 1GiB --output "$T/out-%j" -- echo new)
"$VRAM" wait "$id" >/dev/null || fail "new job on a migrated database"
[ "$(cat "$T/out-$id")" = new ] || fail "new job's output"
"$VRAM" run --quiet --mem 1GiB --batch-size 8 --retry-oom 1 -- sh -c '[ "$VRAM_BATCH_SIZE" = 4 ] || { echo cudaErrorMemoryAllocation >&2; exit 1; }' \
    || fail "retry on a migrated database"
stop_daemon
start_daemon # opening a migrated database again changes nothing
[ "$(field "$(api GET /v1/jobs/$((id + 2)))" '(d["granted_batch_size"], d["grad_accum"], d["max_batch_size"])')" = "(4, 2, 4)" ] \
    || fail "retried job after reopening: $(api GET /v1/jobs/$((id + 2)))"
pass "an old database gains the new columns; old jobs shown, submit and retries work, reopening is a no-op"
