/* The durable store: SQLite in WAL mode. A jobs table (one row per job, its
 * whole state) and an events table (what happened, when). Callers group every
 * state change of one operation in one transaction, so a crash leaves either
 * the old or the new state, never half of it. */
#include "sched_internal.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    ST_INSERT,
    ST_UPDATE,
    ST_EVENT,
    ST_GET,
    ST_ACTIVE,
    ST_ENDED,
    ST_EVENTS,
    ST_SPAWN,
    ST_SET_PID,
    ST_PRUNE_EVENTS,
    ST_PRUNE_JOBS,
    ST_N
};

/* The columns row_to_job reads, by name: a migrated database has its added
 * columns in the order it got them, not in the order of the schema below. */
#define JOB_COLUMNS                                                                                \
    "id,name,command,uid,pid,pid_start,mem_bytes,gpus,priority,timeout_s,pinned,batch_size,"       \
    "min_batch_size,batch_bytes,state,devices,reserved_bytes,granted_batch,grad_accum,"            \
    "submitted_at,started_at,ended_at,exit_status,error,max_batch_size,spawn,peak_bytes,labels,"   \
    "end_reason,retry_batch"

static const char *const sql_text[ST_N] = {
    [ST_INSERT] =
        "INSERT INTO jobs(name,command,uid,pid,pid_start,mem_bytes,gpus,priority,"
        "timeout_s,pinned,batch_size,min_batch_size,batch_bytes,state,devices,"
        "reserved_bytes,granted_batch,grad_accum,submitted_at,started_at,ended_at,"
        "exit_status,error,max_batch_size,spawn,peak_bytes,labels,end_reason,retry_batch) "
        "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,"
        "?22,?23,?25,?26,?27,?28,?29,?30)",
    [ST_UPDATE] = "UPDATE jobs SET state=?14,devices=?15,reserved_bytes=?16,granted_batch=?17,"
                  "grad_accum=?18,started_at=?20,ended_at=?21,exit_status=?22,error=?23,"
                  "peak_bytes=?27,end_reason=?29,retry_batch=?30 "
                  "WHERE id=?24",
    [ST_EVENT] = "INSERT INTO events(job_id,at,kind,message) VALUES(?1,?2,?3,?4)",
    [ST_GET] = "SELECT " JOB_COLUMNS " FROM jobs WHERE id=?1",
    [ST_ACTIVE] = "SELECT " JOB_COLUMNS " FROM jobs WHERE state IN ('queued','running') "
                  "ORDER BY id",
    [ST_ENDED] = "SELECT " JOB_COLUMNS " FROM jobs WHERE state NOT IN ('queued','running') "
                 "ORDER BY id DESC LIMIT ?1",
    [ST_EVENTS] = "SELECT at, kind, message FROM events WHERE job_id=?1 ORDER BY id",
    [ST_SPAWN] = "SELECT spawn FROM jobs WHERE id=?1",
    [ST_SET_PID] = "UPDATE jobs SET pid=?2, pid_start=?3 WHERE id=?1",
    /* the oldest ended jobs first, by the ended_at index */
    [ST_PRUNE_EVENTS] = "DELETE FROM events WHERE job_id IN (SELECT id FROM jobs WHERE "
                        "ended_at > 0 AND ended_at < ?1 AND state NOT IN ('queued','running') "
                        "ORDER BY ended_at LIMIT ?2)",
    [ST_PRUNE_JOBS] = "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE ended_at > 0 AND "
                      "ended_at < ?1 AND state NOT IN ('queued','running') ORDER BY ended_at "
                      "LIMIT ?2)",
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS jobs("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, command TEXT NOT NULL,"
    " uid INTEGER NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL,"
    " mem_bytes INTEGER NOT NULL, gpus INTEGER NOT NULL, priority INTEGER NOT NULL,"
    " timeout_s REAL NOT NULL, pinned TEXT NOT NULL, batch_size INTEGER NOT NULL,"
    " min_batch_size INTEGER NOT NULL, batch_bytes TEXT NOT NULL DEFAULT '',"
    " state TEXT NOT NULL, devices TEXT NOT NULL, reserved_bytes INTEGER NOT NULL,"
    " granted_batch INTEGER NOT NULL, grad_accum INTEGER NOT NULL,"
    " submitted_at REAL NOT NULL, started_at REAL NOT NULL, ended_at REAL NOT NULL,"
    " exit_status INTEGER NOT NULL, error TEXT NOT NULL,"
    " max_batch_size INTEGER NOT NULL DEFAULT 0, spawn TEXT NOT NULL DEFAULT '',"
    " peak_bytes INTEGER, labels TEXT NOT NULL DEFAULT '{}',"
    " end_reason TEXT NOT NULL DEFAULT 'exit', retry_batch INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);"
    "CREATE INDEX IF NOT EXISTS jobs_ended ON jobs(ended_at);"
    "CREATE TABLE IF NOT EXISTS events("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL, at REAL NOT NULL,"
    " kind TEXT NOT NULL, message TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS events_job ON events(job_id);";

struct vram_store {
    sqlite3 *db;
    sqlite3 *ckpt; /* second connection for checkpoints outside the scheduler lock */
    sqlite3_stmt *st[ST_N];
    char path[512];
};

static int db_fail(vram_store_t *st, const char *what)
{
    return vram_fail(VRAM_EIO, "%s: %s: %s", st->path, what, sqlite3_errmsg(st->db));
}

/* Columns added after the first release: a database made before them gets
 * them (with their defaults) when opened, so old databases keep working. */
static const struct {
    const char *name, *decl;
} added_columns[] = {
    {"max_batch_size", "INTEGER NOT NULL DEFAULT 0"},
    {"spawn", "TEXT NOT NULL DEFAULT ''"},
    {"peak_bytes", "INTEGER"}, /* NULL: never reported */
    {"labels", "TEXT NOT NULL DEFAULT '{}'"},
    {"end_reason", "TEXT NOT NULL DEFAULT 'exit'"},
    {"retry_batch", "INTEGER NOT NULL DEFAULT 0"},
    {"batch_bytes", "TEXT NOT NULL DEFAULT ''"},
};

/* Columns a release stopped writing, dropped when a database that has them
 * is opened (their NOT NULL would refuse every insert). per_sample_bytes was
 * the linear degradation figure batch_bytes replaced: jobs queued with it
 * start at their full batch. */
static const char *const dropped_columns[] = {"per_sample_bytes"};

static int has_column(vram_store_t *st, const char *name, int *have)
{
    char sql[160];
    sqlite3_stmt *q;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_table_info('jobs') WHERE name='%s'",
             name);
    if (sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK) return db_fail(st, sql);
    *have = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : -1;
    sqlite3_finalize(q);
    return *have < 0 ? db_fail(st, sql) : 0;
}

static int migrate(vram_store_t *st)
{
    char sql[160];
    int have, rc;
    for (size_t i = 0; i < sizeof added_columns / sizeof added_columns[0]; i++) {
        if ((rc = has_column(st, added_columns[i].name, &have)) != 0) return rc;
        if (have) continue;
        snprintf(sql, sizeof sql, "ALTER TABLE jobs ADD COLUMN %s %s", added_columns[i].name,
                 added_columns[i].decl);
        if (sqlite3_exec(st->db, sql, NULL, NULL, NULL) != SQLITE_OK) return db_fail(st, sql);
    }
    for (size_t i = 0; i < sizeof dropped_columns / sizeof dropped_columns[0]; i++) {
        if ((rc = has_column(st, dropped_columns[i], &have)) != 0) return rc;
        if (!have) continue;
        snprintf(sql, sizeof sql, "ALTER TABLE jobs DROP COLUMN %s", dropped_columns[i]);
        if (sqlite3_exec(st->db, sql, NULL, NULL, NULL) != SQLITE_OK) return db_fail(st, sql);
    }
    return 0;
}

int vram_store_open(const char *path, vram_store_t **out)
{
    *out = NULL;
    vram_store_t *st = calloc(1, sizeof *st);
    if (!st) return vram_fail(VRAM_ENOMEM, "out of memory");
    snprintf(st->path, sizeof st->path, "%s", path);
    int rc = sqlite3_open_v2(
        path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        rc = vram_fail(VRAM_EIO, "cannot open database %s: %s", path,
                       st->db ? sqlite3_errmsg(st->db) : "out of memory");
        vram_store_close(st);
        return rc;
    }
    sqlite3_busy_timeout(st->db, 5000);
    char *err = NULL;
    /* Checkpoints (which fsync) run from vram_store_checkpoint, off the lock;
     * the automatic one stays as a backstop for callers that never call it. */
    sqlite3_wal_autocheckpoint(st->db, 20000);
    if (sqlite3_exec(st->db, schema, NULL, NULL, &err) != SQLITE_OK) {
        rc = vram_fail(VRAM_EIO, "database %s: %s", path, err ? err : "schema failed");
        sqlite3_free(err);
        vram_store_close(st);
        return rc;
    }
    if ((rc = migrate(st)) != 0) {
        vram_store_close(st);
        return rc;
    }
    for (int i = 0; i < ST_N; i++)
        if (sqlite3_prepare_v2(st->db, sql_text[i], -1, &st->st[i], NULL) != SQLITE_OK) {
            rc = db_fail(st, "prepare");
            vram_store_close(st);
            return rc;
        }
    *out = st;
    return 0;
}

int vram_store_checkpoint(vram_store_t *st)
{
    if (!strcmp(st->path, ":memory:")) return 0;
    if (!st->ckpt) {
        if (sqlite3_open_v2(st->path, &st->ckpt, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                            NULL) != SQLITE_OK) {
            sqlite3_close(st->ckpt);
            st->ckpt = NULL;
            return vram_fail(VRAM_EIO, "%s: cannot open for checkpoints", st->path);
        }
        sqlite3_busy_timeout(st->ckpt, 100);
    }
    int rc = sqlite3_wal_checkpoint_v2(st->ckpt, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return rc == SQLITE_OK || rc == SQLITE_BUSY
               ? 0
               : vram_fail(VRAM_EIO, "%s: checkpoint: %s", st->path, sqlite3_errmsg(st->ckpt));
}

void vram_store_close(vram_store_t *st)
{
    if (!st) return;
    sqlite3_close(st->ckpt);
    for (int i = 0; i < ST_N; i++)
        sqlite3_finalize(st->st[i]);
    sqlite3_close(st->db);
    free(st);
}

static int exec(vram_store_t *st, const char *sql)
{
    return sqlite3_exec(st->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : db_fail(st, sql);
}

int vram_store_begin(vram_store_t *st)
{
    return exec(st, "BEGIN IMMEDIATE");
}
int vram_store_commit(vram_store_t *st)
{
    return exec(st, "COMMIT");
}
void vram_store_rollback(vram_store_t *st)
{
    if (!sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

static void int_list(char *buf, size_t len, const int *v, int n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? ",%d" : "%d", v[i]);
}

static int parse_list(const char *text, int *v, int cap)
{
    int n = 0;
    while (text && *text && n < cap) {
        char *end;
        long x = strtol(text, &end, 10);
        if (end == text) break;
        v[n++] = (int)x;
        text = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* batch_bytes as "batch:bytes,batch:bytes" (the table is at most
 * VRAM_JOB_MAX_BATCHES entries of two integers). */
static void batch_bytes_text(char *buf, size_t len, const vram_job_request_t *r)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < r->nbatch_bytes && at < len; i++)
        at +=
            (size_t)snprintf(buf + at, len - at, "%s%u:%llu", i ? "," : "", r->batch_bytes[i].batch,
                             (unsigned long long)r->batch_bytes[i].bytes);
}

/* The table read back; one that does not parse or check (a database edited
 * by hand) is dropped: the job then keeps its full batch. */
static void batch_bytes_load(const char *text, vram_job_request_t *r)
{
    r->nbatch_bytes = 0;
    while (*text && r->nbatch_bytes < VRAM_JOB_MAX_BATCHES) {
        char *end;
        unsigned long long batch = strtoull(text, &end, 10), bytes;
        if (end == text || *end != ':' || batch > UINT32_MAX) break;
        text = end + 1;
        bytes = strtoull(text, &end, 10);
        if (end == text) break;
        r->batch_bytes[r->nbatch_bytes++] = (vram_batch_bytes_t){(uint32_t)batch, bytes};
        text = *end == ',' ? end + 1 : end;
    }
    if (*text || vram_job_batch_bytes_check(r) != 0) r->nbatch_bytes = 0;
}

/* The columns a job's state changes: the parameters ?14-?23 and ?27, which
 * both the insert and the update use. */
static void bind_state(sqlite3_stmt *q, const vram_job_t *j)
{
    char devices[128];
    int_list(devices, sizeof devices, j->devices, j->ndevices);
    sqlite3_bind_text(q, 14, vram_job_state_name(j->state), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 15, devices, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 16, (sqlite3_int64)j->reserved_bytes);
    sqlite3_bind_int64(q, 17, j->granted_batch);
    sqlite3_bind_int64(q, 18, j->grad_accum);
    sqlite3_bind_double(q, 19, j->submitted_at);
    sqlite3_bind_double(q, 20, j->started_at);
    sqlite3_bind_double(q, 21, j->ended_at);
    sqlite3_bind_int(q, 22, j->exit_status);
    sqlite3_bind_text(q, 23, j->error, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 29, vram_end_reason_name(j->end_reason), -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 30, j->retry_batch);
    if (j->has_peak)
        sqlite3_bind_int64(q, 27, (sqlite3_int64)j->peak_bytes);
    else
        sqlite3_bind_null(q, 27);
}

/* Every column, for the insert: the request never changes afterwards. */
static int bind_job(sqlite3_stmt *q, const vram_job_t *j, uint64_t pid_start)
{
    char pinned[128];
    int_list(pinned, sizeof pinned, j->req.pinned, j->req.npinned);
    const vram_job_request_t *r = &j->req;
    sqlite3_bind_text(q, 1, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 2, r->command, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)r->uid);
    sqlite3_bind_int64(q, 4, (sqlite3_int64)r->pid);
    sqlite3_bind_int64(q, 5, (sqlite3_int64)pid_start);
    sqlite3_bind_int64(q, 6, (sqlite3_int64)r->mem_bytes);
    sqlite3_bind_int(q, 7, r->gpus);
    sqlite3_bind_int(q, 8, r->priority);
    sqlite3_bind_double(q, 9, r->timeout_s);
    sqlite3_bind_text(q, 10, pinned, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 11, r->batch_size);
    sqlite3_bind_int64(q, 12, r->min_batch_size);
    char table[VRAM_JOB_MAX_BATCHES * 32];
    batch_bytes_text(table, sizeof table, r);
    sqlite3_bind_text(q, 13, table, -1, SQLITE_TRANSIENT);
    bind_state(q, j);
    sqlite3_bind_int64(q, 25, r->max_batch_size);
    sqlite3_bind_text(q, 26, r->spawn ? r->spawn : "", -1, SQLITE_TRANSIENT);
    char *labels = vram_labels_dump(r);
    if (!labels) {
        sqlite3_clear_bindings(q);
        return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    sqlite3_bind_text(q, 28, labels, -1, free);
    return 0;
}

static int step_done(vram_store_t *st, sqlite3_stmt *q, const char *what)
{
    int rc = sqlite3_step(q);
    int ret = rc == SQLITE_DONE ? 0 : db_fail(st, what);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return ret;
}

int vram_store_insert_job(vram_store_t *st, vram_job_t *job, uint64_t pid_start)
{
    sqlite3_stmt *q = st->st[ST_INSERT];
    int rc = bind_job(q, job, pid_start);
    if (rc == 0) rc = step_done(st, q, "insert job");
    if (rc == 0) job->id = sqlite3_last_insert_rowid(st->db);
    return rc;
}

int vram_store_update_job(vram_store_t *st, const vram_job_t *job)
{
    sqlite3_stmt *q = st->st[ST_UPDATE];
    bind_state(q, job);
    sqlite3_bind_int64(q, 24, job->id);
    return step_done(st, q, "update job");
}

int vram_store_event(vram_store_t *st, int64_t job_id, double at, const char *kind,
                     const char *message)
{
    sqlite3_stmt *q = st->st[ST_EVENT];
    sqlite3_bind_int64(q, 1, job_id);
    sqlite3_bind_double(q, 2, at);
    sqlite3_bind_text(q, 3, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, message ? message : "", -1, SQLITE_TRANSIENT);
    return step_done(st, q, "insert event");
}

static const char *col_text(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? (const char *)t : "";
}

/* Column order follows JOB_COLUMNS. */
static void row_to_job(sqlite3_stmt *q, vram_job_t *j, uint64_t *pid_start)
{
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(q, 0);
    snprintf(j->req.name, sizeof j->req.name, "%s", col_text(q, 1));
    snprintf(j->req.command, sizeof j->req.command, "%s", col_text(q, 2));
    j->req.uid = (uid_t)sqlite3_column_int64(q, 3);
    j->req.pid = (pid_t)sqlite3_column_int64(q, 4);
    if (pid_start) *pid_start = (uint64_t)sqlite3_column_int64(q, 5);
    j->req.mem_bytes = (uint64_t)sqlite3_column_int64(q, 6);
    j->req.gpus = sqlite3_column_int(q, 7);
    j->req.priority = sqlite3_column_int(q, 8);
    j->req.timeout_s = sqlite3_column_double(q, 9);
    j->req.npinned = parse_list(col_text(q, 10), j->req.pinned, VRAM_SCHED_MAX_GPUS);
    j->req.batch_size = (uint32_t)sqlite3_column_int64(q, 11);
    j->req.min_batch_size = (uint32_t)sqlite3_column_int64(q, 12);
    /* column 13, batch_bytes, once the fields it is checked against are read */
    int state = vram_job_state_parse(col_text(q, 14));
    j->state = state < 0 ? VRAM_JOB_FAILED : (vram_job_state_t)state;
    j->ndevices = parse_list(col_text(q, 15), j->devices, VRAM_SCHED_MAX_GPUS);
    j->reserved_bytes = (uint64_t)sqlite3_column_int64(q, 16);
    j->granted_batch = (uint32_t)sqlite3_column_int64(q, 17);
    j->grad_accum = (uint32_t)sqlite3_column_int64(q, 18);
    j->submitted_at = sqlite3_column_double(q, 19);
    j->started_at = sqlite3_column_double(q, 20);
    j->ended_at = sqlite3_column_double(q, 21);
    j->exit_status = sqlite3_column_int(q, 22);
    snprintf(j->error, sizeof j->error, "%s", col_text(q, 23));
    j->req.max_batch_size = (uint32_t)sqlite3_column_int64(q, 24);
    /* column 25 is spawn (read on its own by vram_store_get_spawn) */
    j->has_spawn = sqlite3_column_bytes(q, 25) > 0;
    j->has_peak = sqlite3_column_type(q, 26) != SQLITE_NULL;
    j->peak_bytes = (uint64_t)sqlite3_column_int64(q, 26);
    vram_labels_load(col_text(q, 27), &j->req);
    int end = vram_end_reason_parse(col_text(q, 28));
    j->end_reason = end < 0 ? VRAM_END_EXIT : (vram_end_reason_t)end;
    j->retry_batch = (uint32_t)sqlite3_column_int64(q, 29);
    batch_bytes_load(col_text(q, 13), &j->req);
}

static int for_rows(vram_store_t *st, sqlite3_stmt *q, vram_store_job_fn fn, void *arg)
{
    int rc = 0, s;
    while ((s = sqlite3_step(q)) == SQLITE_ROW) {
        vram_job_t j;
        uint64_t ps = 0;
        row_to_job(q, &j, &ps);
        if ((rc = fn(arg, &j, ps)) != 0) break;
    }
    if (rc == 0 && s != SQLITE_DONE) rc = db_fail(st, "read jobs");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

int vram_store_load_active(vram_store_t *st, vram_store_job_fn fn, void *arg)
{
    return for_rows(st, st->st[ST_ACTIVE], fn, arg);
}

int vram_store_list_ended(vram_store_t *st, int limit, vram_store_job_fn fn, void *arg)
{
    sqlite3_bind_int(st->st[ST_ENDED], 1, limit);
    return for_rows(st, st->st[ST_ENDED], fn, arg);
}

int vram_store_get_job(vram_store_t *st, int64_t id, vram_job_t *out)
{
    sqlite3_stmt *q = st->st[ST_GET];
    sqlite3_bind_int64(q, 1, id);
    int s = sqlite3_step(q), rc = 0;
    if (s == SQLITE_ROW)
        row_to_job(q, out, NULL);
    else if (s == SQLITE_DONE)
        rc = vram_fail(VRAM_ENOENT, "no job %lld", (long long)id);
    else
        rc = db_fail(st, "read job");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

int vram_store_list_events(vram_store_t *st, int64_t job_id, vram_store_event_fn fn, void *arg)
{
    sqlite3_stmt *q = st->st[ST_EVENTS];
    sqlite3_bind_int64(q, 1, job_id);
    int s, rc = 0;
    while ((s = sqlite3_step(q)) == SQLITE_ROW)
        fn(arg, sqlite3_column_double(q, 0), col_text(q, 1), col_text(q, 2));
    if (s != SQLITE_DONE) rc = db_fail(st, "read events");
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

int vram_store_get_spawn(vram_store_t *st, int64_t id, char **spec)
{
    sqlite3_stmt *q = st->st[ST_SPAWN];
    sqlite3_bind_int64(q, 1, id);
    int s = sqlite3_step(q), rc = 0;
    *spec = NULL;
    if (s == SQLITE_ROW) {
        const char *t = col_text(q, 0);
        if (*t && !(*spec = strdup(t))) rc = vram_fail(VRAM_ENOMEM, "out of memory");
    } else if (s == SQLITE_DONE) {
        rc = vram_fail(VRAM_ENOENT, "no job %lld", (long long)id);
    } else {
        rc = db_fail(st, "read spawn");
    }
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc;
}

int vram_store_set_pid(vram_store_t *st, int64_t id, pid_t pid, uint64_t pid_start)
{
    sqlite3_stmt *q = st->st[ST_SET_PID];
    sqlite3_bind_int64(q, 1, id);
    sqlite3_bind_int64(q, 2, pid);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)pid_start);
    return step_done(st, q, "set pid");
}

int vram_store_prune(vram_store_t *st, double before, int batch)
{
    sqlite3_stmt *ev = st->st[ST_PRUNE_EVENTS], *jobs = st->st[ST_PRUNE_JOBS];
    sqlite3_bind_double(ev, 1, before);
    sqlite3_bind_int(ev, 2, batch);
    int rc = step_done(st, ev, "prune events");
    if (rc) return rc;
    sqlite3_bind_double(jobs, 1, before);
    sqlite3_bind_int(jobs, 2, batch);
    if ((rc = step_done(st, jobs, "prune jobs"))) return rc;
    return sqlite3_changes(st->db);
}
