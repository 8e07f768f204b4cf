/* The watch's tables in vramd's SQLite database (its own connection, WAL):
 * watch_samples (full rate, the last WATCH_HISTORY), watch_minutes (mean and
 * max per minute, WATCH_RETENTION) and watch_alerts (every alert that fired,
 * with its timestamps). */
#include "watch_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    Q_SAMPLE,
    Q_MINUTE,
    Q_EXPIRE_SAMPLES,
    Q_EXPIRE_MINUTES,
    Q_LOAD_SAMPLES,
    Q_LOAD_MINUTES,
    Q_ALERT_INSERT,
    Q_ALERT_RESOLVE,
    Q_ALERTS_FIRING,
    Q_ALERTS_RESOLVED,
    Q_N
};

#define ALERT_COLUMNS                                                                              \
    "id,rule,level,metric,subject,device,job_id,value,threshold,pending_since,fired_at,"           \
    "resolved_at,message"

static const char *const sql_text[Q_N] = {
    [Q_SAMPLE] = "INSERT INTO watch_samples(t,device,job_id,health,used,free,reserved,util,temp,"
                 "power) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)",
    [Q_MINUTE] = "INSERT OR REPLACE INTO watch_minutes(t,device,job_id,n,used_mean,used_max,"
                 "free_mean,reserved_mean,util_mean,util_max,temp_mean,temp_max,power_mean,"
                 "power_max) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)",
    [Q_EXPIRE_SAMPLES] = "DELETE FROM watch_samples WHERE t < ?1",
    [Q_EXPIRE_MINUTES] = "DELETE FROM watch_minutes WHERE t < ?1",
    [Q_LOAD_SAMPLES] = "SELECT t,device,job_id,health,used,free,reserved,util,temp,power "
                       "FROM watch_samples WHERE t >= ?1 ORDER BY t, rowid",
    [Q_LOAD_MINUTES] = "SELECT t,device,job_id,n,used_mean,used_max,free_mean,reserved_mean,"
                       "util_mean,util_max,temp_mean,temp_max,power_mean,power_max "
                       "FROM watch_minutes WHERE device = ?1 AND t >= ?2 AND t < ?3 ORDER BY t",
    [Q_ALERT_INSERT] = "INSERT INTO watch_alerts(rule,level,metric,subject,device,job_id,value,"
                       "threshold,pending_since,fired_at,resolved_at,message) "
                       "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
    [Q_ALERT_RESOLVE] = "UPDATE watch_alerts SET resolved_at=?1, value=?2, message=?4 WHERE id=?3",
    [Q_ALERTS_FIRING] = "SELECT " ALERT_COLUMNS " FROM watch_alerts WHERE resolved_at = 0 "
                        "ORDER BY id DESC",
    [Q_ALERTS_RESOLVED] = "SELECT " ALERT_COLUMNS " FROM watch_alerts WHERE resolved_at > 0 "
                          "ORDER BY id DESC LIMIT ?1",
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS watch_samples(t REAL NOT NULL, device INTEGER NOT NULL,"
    " job_id INTEGER NOT NULL, health INTEGER NOT NULL, used REAL, free REAL, reserved REAL,"
    " util REAL, temp REAL, power REAL);"
    "CREATE INDEX IF NOT EXISTS watch_samples_t ON watch_samples(t);"
    "CREATE TABLE IF NOT EXISTS watch_minutes(t REAL NOT NULL, device INTEGER NOT NULL,"
    " job_id INTEGER NOT NULL, n INTEGER NOT NULL, used_mean REAL, used_max REAL, free_mean REAL,"
    " reserved_mean REAL, util_mean REAL, util_max REAL, temp_mean REAL, temp_max REAL,"
    " power_mean REAL, power_max REAL, PRIMARY KEY(device, job_id, t));"
    "CREATE INDEX IF NOT EXISTS watch_minutes_t ON watch_minutes(t);"
    "CREATE TABLE IF NOT EXISTS watch_alerts(id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " rule TEXT NOT NULL, level TEXT NOT NULL, metric TEXT NOT NULL, subject TEXT NOT NULL,"
    " device INTEGER NOT NULL, job_id INTEGER NOT NULL, value REAL NOT NULL,"
    " threshold REAL NOT NULL, pending_since REAL NOT NULL, fired_at REAL NOT NULL,"
    " resolved_at REAL NOT NULL, message TEXT NOT NULL);";

struct vram_watch_store {
    sqlite3 *db;
    sqlite3_stmt *q[Q_N];
    char path[512];
};

static int db_fail(watch_store_t *st, const char *what)
{
    return vram_fail(VRAM_EIO, "%s: %s: %s", st->path, what, sqlite3_errmsg(st->db));
}

int vram_watch_store_open(const char *path, watch_store_t **out)
{
    *out = NULL;
    watch_store_t *st = calloc(1, sizeof *st);
    if (!st) return vram_fail(VRAM_ENOMEM, "out of memory");
    snprintf(st->path, sizeof st->path, "%s", path);
    int rc = 0;
    char *err = NULL;
    if (sqlite3_open_v2(path, &st->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        rc = vram_fail(VRAM_EIO, "cannot open database %s: %s", path,
                       st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(st->db, 5000);
    if (sqlite3_exec(st->db, schema, NULL, NULL, &err) != SQLITE_OK) {
        rc = vram_fail(VRAM_EIO, "database %s: %s", path, err ? err : "schema failed");
        sqlite3_free(err);
        goto fail;
    }
    for (int i = 0; i < Q_N; i++)
        if (sqlite3_prepare_v2(st->db, sql_text[i], -1, &st->q[i], NULL) != SQLITE_OK) {
            rc = db_fail(st, "prepare");
            goto fail;
        }
    *out = st;
    return 0;
fail:
    vram_watch_store_close(st);
    return rc;
}

void vram_watch_store_close(watch_store_t *st)
{
    if (!st) return;
    for (int i = 0; i < Q_N; i++)
        sqlite3_finalize(st->q[i]);
    sqlite3_close(st->db);
    free(st);
}

/* Binds a figure, NULL when unknown (negative). */
static void bind_figure(sqlite3_stmt *q, int at, double v)
{
    if (v < 0)
        sqlite3_bind_null(q, at);
    else
        sqlite3_bind_double(q, at, v);
}

static double column_figure(sqlite3_stmt *q, int at)
{
    return sqlite3_column_type(q, at) == SQLITE_NULL ? -1 : sqlite3_column_double(q, at);
}

static int step_done(watch_store_t *st, sqlite3_stmt *q, const char *what)
{
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return rc == SQLITE_DONE ? 0 : db_fail(st, what);
}

static int exec(watch_store_t *st, const char *sql)
{
    return sqlite3_exec(st->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : db_fail(st, sql);
}

static void bind_sample(sqlite3_stmt *q, const void *rows, size_t i)
{
    const watch_row_t *r = (const watch_row_t *)rows + i;
    sqlite3_bind_double(q, 1, r->t);
    sqlite3_bind_int(q, 2, r->device);
    sqlite3_bind_int64(q, 3, r->job_id);
    sqlite3_bind_int(q, 4, r->health);
    bind_figure(q, 5, r->used);
    bind_figure(q, 6, r->free);
    bind_figure(q, 7, r->reserved);
    bind_figure(q, 8, r->util);
    bind_figure(q, 9, r->temp);
    bind_figure(q, 10, r->power);
}

/* A minute row holds the means: sums over n. */
static void bind_minute(sqlite3_stmt *q, const void *minutes, size_t i)
{
    const watch_minute_t *a = (const watch_minute_t *)minutes + i;
    double k = a->n ? a->n : 1;
    sqlite3_bind_double(q, 1, a->minute);
    sqlite3_bind_int(q, 2, a->device);
    sqlite3_bind_int64(q, 3, a->job_id);
    sqlite3_bind_int(q, 4, a->n);
    bind_figure(q, 5, a->used_sum / k);
    bind_figure(q, 6, a->used_max);
    bind_figure(q, 7, a->free_sum / k);
    bind_figure(q, 8, a->reserved_sum / k);
    bind_figure(q, 9, a->util_sum / k);
    bind_figure(q, 10, a->util_max);
    bind_figure(q, 11, a->temp_sum / k);
    bind_figure(q, 12, a->temp_max);
    bind_figure(q, 13, a->power_sum / k);
    bind_figure(q, 14, a->power_max);
}

/* Inserts n rows with statement `which` in one transaction: all or none. */
static int insert_batch(watch_store_t *st, int which, const void *rows, size_t n,
                        void (*bind)(sqlite3_stmt *, const void *, size_t), const char *what)
{
    if (n == 0) return 0;
    int rc = exec(st, "BEGIN");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        bind(st->q[which], rows, i);
        rc = step_done(st, st->q[which], what);
    }
    if (rc == 0) return exec(st, "COMMIT");
    (void)exec(st, "ROLLBACK");
    return rc;
}

int vram_watch_store_samples(watch_store_t *st, const watch_row_t *rows, size_t n)
{
    return insert_batch(st, Q_SAMPLE, rows, n, bind_sample, "insert sample");
}

int vram_watch_store_minutes(watch_store_t *st, const watch_minute_t *m, size_t n)
{
    return insert_batch(st, Q_MINUTE, m, n, bind_minute, "insert minute");
}

int vram_watch_store_expire(watch_store_t *st, double samples_before, double minutes_before)
{
    sqlite3_bind_double(st->q[Q_EXPIRE_SAMPLES], 1, samples_before);
    int rc = step_done(st, st->q[Q_EXPIRE_SAMPLES], "expire samples");
    if (rc) return rc;
    sqlite3_bind_double(st->q[Q_EXPIRE_MINUTES], 1, minutes_before);
    return step_done(st, st->q[Q_EXPIRE_MINUTES], "expire minutes");
}

int vram_watch_store_load_samples(watch_store_t *st, double from, vram_watch_row_fn fn, void *arg)
{
    sqlite3_stmt *q = st->q[Q_LOAD_SAMPLES];
    sqlite3_bind_double(q, 1, from);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        watch_row_t r = {
            .t = sqlite3_column_double(q, 0),
            .device = sqlite3_column_int(q, 1),
            .job_id = sqlite3_column_int64(q, 2),
            .health = sqlite3_column_int(q, 3),
            .used = column_figure(q, 4),
            .free = column_figure(q, 5),
            .reserved = column_figure(q, 6),
            .util = column_figure(q, 7),
            .temp = column_figure(q, 8),
            .power = column_figure(q, 9),
        };
        fn(arg, &r);
    }
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? 0 : db_fail(st, "load samples");
}

int vram_watch_store_load_minutes(watch_store_t *st, int device, double from, double to,
                                  vram_watch_minute_fn fn, void *arg)
{
    sqlite3_stmt *q = st->q[Q_LOAD_MINUTES];
    sqlite3_bind_int(q, 1, device);
    sqlite3_bind_double(q, 2, from);
    sqlite3_bind_double(q, 3, to);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        /* The accumulator form: sums are mean * n, maxima as stored. */
        int n = sqlite3_column_int(q, 3);
        double k = n > 0 ? n : 1;
        watch_minute_t m = {
            .minute = sqlite3_column_double(q, 0),
            .device = sqlite3_column_int(q, 1),
            .job_id = sqlite3_column_int64(q, 2),
            .n = n > 0 ? n : 1,
            .used_sum = column_figure(q, 4) * k,
            .used_max = column_figure(q, 5),
            .free_sum = column_figure(q, 6) * k,
            .reserved_sum = column_figure(q, 7) * k,
            .util_sum = column_figure(q, 8) * k,
            .util_max = column_figure(q, 9),
            .temp_sum = column_figure(q, 10) * k,
            .temp_max = column_figure(q, 11),
            .power_sum = column_figure(q, 12) * k,
            .power_max = column_figure(q, 13),
        };
        fn(arg, &m);
    }
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? 0 : db_fail(st, "load minutes");
}

int vram_watch_store_alert_insert(watch_store_t *st, vram_alert_t *a)
{
    sqlite3_stmt *q = st->q[Q_ALERT_INSERT];
    sqlite3_bind_text(q, 1, a->rule, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 2, vram_alert_level_name(a->level), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, a->metric, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 4, a->subject, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(q, 5, a->device);
    sqlite3_bind_int64(q, 6, a->job_id);
    sqlite3_bind_double(q, 7, a->value);
    sqlite3_bind_double(q, 8, a->threshold);
    sqlite3_bind_double(q, 9, a->pending_since);
    sqlite3_bind_double(q, 10, a->fired_at);
    sqlite3_bind_double(q, 11, a->resolved_at);
    sqlite3_bind_text(q, 12, a->message, -1, SQLITE_TRANSIENT);
    int rc = step_done(st, q, "insert alert");
    if (rc == 0) a->id = sqlite3_last_insert_rowid(st->db);
    return rc;
}

int vram_watch_store_alert_resolve(watch_store_t *st, const vram_alert_t *a)
{
    sqlite3_stmt *q = st->q[Q_ALERT_RESOLVE];
    sqlite3_bind_double(q, 1, a->resolved_at);
    sqlite3_bind_double(q, 2, a->value);
    sqlite3_bind_int64(q, 3, a->id);
    sqlite3_bind_text(q, 4, a->message, -1, SQLITE_TRANSIENT);
    return step_done(st, q, "resolve alert");
}

static void column_text(sqlite3_stmt *q, int at, char *buf, size_t len)
{
    const unsigned char *t = sqlite3_column_text(q, at);
    snprintf(buf, len, "%s", t ? (const char *)t : "");
}

int vram_watch_store_alerts(watch_store_t *st, bool firing, int limit, vram_watch_alert_fn fn,
                            void *arg)
{
    sqlite3_stmt *q = st->q[firing ? Q_ALERTS_FIRING : Q_ALERTS_RESOLVED];
    if (!firing) sqlite3_bind_int(q, 1, limit);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        vram_alert_t a;
        memset(&a, 0, sizeof a);
        char level[16];
        a.id = sqlite3_column_int64(q, 0);
        column_text(q, 1, a.rule, sizeof a.rule);
        column_text(q, 2, level, sizeof level);
        int lv = vram_alert_level_parse(level);
        a.level = lv < 0 ? VRAM_ALERT_INFO : (vram_alert_level_t)lv;
        column_text(q, 3, a.metric, sizeof a.metric);
        column_text(q, 4, a.subject, sizeof a.subject);
        a.device = sqlite3_column_int(q, 5);
        a.job_id = sqlite3_column_int64(q, 6);
        a.value = sqlite3_column_double(q, 7);
        a.threshold = sqlite3_column_double(q, 8);
        a.pending_since = sqlite3_column_double(q, 9);
        a.fired_at = sqlite3_column_double(q, 10);
        a.resolved_at = sqlite3_column_double(q, 11);
        column_text(q, 12, a.message, sizeof a.message);
        fn(arg, &a);
    }
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? 0 : db_fail(st, "list alerts");
}
