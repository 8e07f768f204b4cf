/* The watch module on a fake device source and a fake clock: alert lifecycle
 * (against a reference model on random values), rules files, history across
 * a reopen, retention, peaks, the Prometheus text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "vram.h"
#include "watch/watch.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GiB  (1024.0 * 1024 * 1024)
#define NDEV 2

static double fake_now = 1.7e9;
static double used_frac[NDEV];
static vram_health_t health[NDEV];

static double clock_fn(void)
{
    return fake_now;
}
static int dev_count(void *arg)
{
    (void)arg;
    return NDEV;
}
static int dev_info(void *arg, int i, vram_device_info_t *out)
{
    (void)arg;
    memset(out, 0, sizeof *out);
    out->index = i;
    snprintf(out->name, sizeof out->name, "Fake\"GPU\\%d", i); /* needs escaping */
    snprintf(out->uuid, sizeof out->uuid, "GPU-fake-%d", i);
    out->total_bytes = (uint64_t)(80 * GiB);
    out->used_bytes = (uint64_t)(used_frac[i] * 80 * GiB);
    out->free_bytes = out->total_bytes - out->used_bytes;
    out->utilization_pct = 50;
    out->temperature_c = 60;
    out->power_w = 300;
    out->health = health[i];
    return 0;
}
static int dev_procs(void *arg, int i, vram_process_info_t *p, size_t cap, size_t *n)
{
    (void)arg;
    (void)i;
    *n = 1;
    if (cap >= 1) p[0] = (vram_process_info_t){getpid(), (uint64_t)(used_frac[i] * 80 * GiB), "me"};
    return 0;
}
static const vram_sched_devices_t source = {dev_count, dev_info, dev_procs, NULL};

typedef struct {
    pthread_mutex_t lock;
    int fired, resolved;
    vram_alert_t last;
} seen_t;

static void on_alert(void *arg, const vram_alert_t *a)
{
    seen_t *s = arg;
    pthread_mutex_lock(&s->lock);
    if (a->resolved_at > 0)
        s->resolved++;
    else
        s->fired++;
    s->last = *a;
    pthread_mutex_unlock(&s->lock);
}

static char dir[64];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* interval: what the sampler thread (if started) waits, in real seconds,
 * before its second sample; the tests take theirs with the fake clock. */
static vram_watch_t *open_watch(const char *rules, const char *db, double interval)
{
    vram_watch_config_t cfg = {.devices = &source,
                               .db_path = db,
                               .interval_s = interval,
                               .history_s = interval > 3600 ? interval : 3600,
                               .retention_s = 86400,
                               .rules_path = rules,
                               .clock = clock_fn};
    vram_watch_t *w = NULL;
    assert_int_equal(vram_watch_open(&cfg, &w), 0);
    return w;
}

static const char one_rule[] = "rules:\n"
                               "  - name: mem\n"
                               "    metric: memory_used_ratio\n"
                               "    above: 90%\n"
                               "    clear: 0.85\n"
                               "    for: 10s\n"
                               "    level: warning\n";

/* Fires once after `for`, does not flap between the thresholds, resolves
 * below clear; both transitions reach the callback and the store. */
static void test_lifecycle(void **state)
{
    (void)state;
    char rules[128], db[128];
    snprintf(rules, sizeof rules, "%s/rules.yaml", dir);
    snprintf(db, sizeof db, "%s/life.db", dir);
    write_file(rules, one_rule);
    used_frac[0] = used_frac[1] = 0.5;
    vram_watch_t *w = open_watch(rules, db, 1000);
    seen_t seen = {.lock = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(vram_watch_on_alert(w, on_alert, &seen), 0);
    assert_int_equal(vram_watch_start(w), 0);
    used_frac[0] = 0.95;
    for (int i = 0; i < 10; i++, fake_now += 1)
        assert_int_equal(vram_watch_sample(w), 0);
    char *j = vram_watch_alerts_json(w, 10);
    assert_non_null(strstr(j, "\"pending\":[{"));
    assert_non_null(strstr(j, "\"firing\":[]"));
    free(j);
    double values[] = {0.95, 0.92, 0.88, 0.86, 0.91, 0.87};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++, fake_now += 1) {
        used_frac[0] = values[i];
        assert_int_equal(vram_watch_sample(w), 0);
    }
    assert_int_equal(vram_watch_flush(w, 5000), 0);
    assert_int_equal(seen.fired, 1);
    assert_int_equal(seen.resolved, 0);
    assert_string_equal(seen.last.subject, "gpu0");
    assert_int_equal(seen.last.level, VRAM_ALERT_WARNING);
    used_frac[0] = 0.80;
    assert_int_equal(vram_watch_sample(w), 0);
    assert_int_equal(vram_watch_flush(w, 5000), 0);
    assert_int_equal(seen.resolved, 1);
    assert_true(seen.last.resolved_at > seen.last.fired_at);
    assert_true(seen.last.fired_at - seen.last.pending_since >= 10);
    /* the resolution says why, with the value then, in people's numbers */
    assert_string_equal(seen.last.reason, "cleared");
    assert_non_null(
        strstr(seen.last.message, "memory_used_ratio back to 80% (clears at or below 85%)"));
    j = vram_watch_alerts_json(w, 10);
    json_t *o = json_loads(j, 0, NULL);
    free(j);
    assert_int_equal(json_array_size(json_object_get(o, "resolved")), 1);
    assert_int_equal(json_array_size(json_object_get(o, "firing")), 0);
    json_decref(o);
    vram_watch_close(w);
}

/* Reference model of one rule on one subject: transitions on random values. */
static void test_random_against_model(void **state)
{
    (void)state;
    char rules[128];
    snprintf(rules, sizeof rules, "%s/rules-r.yaml", dir);
    write_file(rules, one_rule);
    srand(42);
    for (int round = 0; round < 20; round++) {
        vram_watch_t *w = open_watch(rules, NULL, 1000);
        seen_t seen = {.lock = PTHREAD_MUTEX_INITIALIZER};
        vram_watch_on_alert(w, on_alert, &seen);
        assert_int_equal(vram_watch_start(w), 0);
        used_frac[0] = used_frac[1] = 0;
        int fired = 0, resolved = 0;
        bool firing = false;
        double since = -1;
        for (int i = 0; i < 300; i++, fake_now += 1) {
            double v = (double)(rand() % 1000) / 1000;
            used_frac[0] = v;
            /* what the device will report, rounded as it is */
            double seen_v = (double)(uint64_t)(v * 80 * GiB) / (80 * GiB);
            if (firing) {
                if (seen_v <= 0.85) {
                    firing = false;
                    resolved++;
                }
            } else if (seen_v > 0.90) {
                if (since < 0) since = fake_now;
                if (fake_now - since >= 10) {
                    firing = true;
                    fired++;
                    since = -1;
                }
            } else {
                since = -1;
            }
            if (firing) since = -1;
            assert_int_equal(vram_watch_sample(w), 0);
        }
        assert_int_equal(vram_watch_flush(w, 5000), 0);
        pthread_mutex_lock(&seen.lock);
        assert_int_equal(seen.fired, fired);
        assert_int_equal(seen.resolved, resolved);
        pthread_mutex_unlock(&seen.lock);
        vram_watch_close(w);
    }
}

static void expect_rules_error(const char *text, const char *needle)
{
    char path[128];
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    write_file(path, text);
    assert_int_equal(vram_watch_check_rules(path, NULL), VRAM_EPARSE);
    if (!strstr(vram_last_error(), needle))
        fail_msg("error \"%s\" lacks \"%s\"", vram_last_error(), needle);
}

static void test_rules_errors(void **state)
{
    (void)state;
    expect_rules_error("rules:\n  - name: a\n    metric: memory_used_ratio\n    abve: 0.9\n",
                       "bad.yaml:4: abve: unknown key");
    expect_rules_error("rules:\n  - name: a\n    metric: nope\n    above: 1\n",
                       "bad.yaml:3: metric: unknown metric \"nope\"");
    expect_rules_error("rules:\n  - name: a\n    metric: memory_used_ratio\n    above: 0.9\n"
                       "    for: soon\n",
                       "bad.yaml:5: for: expected a duration");
    expect_rules_error("rules:\n  - name: a\n    metric: memory_used_ratio\n    above: 0.9\n"
                       "    clear: 0.95\n",
                       "bad.yaml:5: clear: must be on the safe side");
    expect_rules_error("rules:\n  - name: a\n    metric: memory_used_ratio\n    above: 0.9\n"
                       "    level: loud\n",
                       "bad.yaml:5: level: expected info");
    expect_rules_error("rules: [\n", "bad.yaml:2");
    expect_rules_error("webhooks: [ftp://x]\nrules: []\n", "webhooks: \"ftp://x\" is not");
    char *text = NULL;
    assert_int_equal(vram_watch_check_rules(NULL, &text), 0);
    assert_non_null(strstr(text, "gpu-memory-high: memory_used_ratio above 90% (clear 85%)"));
    assert_non_null(strstr(text, "gpu-memory-critical"));
    assert_non_null(strstr(text, "job-over-reservation"));
    assert_non_null(strstr(text, "gpu-error: device_error above 0.5"));
    free(text);
    /* numbers as people write them: 8GiB, not 8.58993e+09 */
    char path[128];
    snprintf(path, sizeof path, "%s/free.yaml", dir);
    write_file(path, "rules:\n  - name: free-low\n    metric: memory_free_bytes\n"
                     "    below: 8GiB\n    clear: 12.5GiB\n    for: 1.5s\n");
    assert_int_equal(vram_watch_check_rules(path, &text), 0);
    assert_non_null(
        strstr(text, "free-low: memory_free_bytes below 8GiB (clear 12.5GiB) for 1.5s"));
    free(text);
}

static long long count_rows(const char *db, const char *table)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    long long n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(h);
    return n;
}

static size_t history_points(vram_watch_t *w, double from, double to, double step,
                             const char *resolution)
{
    char *j = vram_watch_history_json(w, 0, from, to, step);
    assert_non_null(j);
    json_t *o = json_loads(j, 0, NULL);
    free(j);
    assert_string_equal(json_string_value(json_object_get(o, "resolution")), resolution);
    size_t n = json_array_size(json_object_get(o, "points"));
    json_decref(o);
    return n;
}

/* History survives a close and reopen; minutes are kept; retention deletes. */
static void test_history_persists(void **state)
{
    (void)state;
    char db[128];
    snprintf(db, sizeof db, "%s/hist.db", dir);
    fake_now = 1.8e9; /* a whole minute */
    double start = fake_now;
    used_frac[0] = 0.3;
    vram_watch_t *w = open_watch("", db, 1);
    for (int i = 0; i < 180; i++, fake_now += 1)
        assert_int_equal(vram_watch_sample(w), 0);
    assert_int_equal(history_points(w, start, fake_now, 1, "sample"), 180);
    assert_null(vram_watch_history_json(w, 5, start, fake_now, 1));
    assert_null(vram_watch_history_json(w, 0, fake_now, start, 1));
    assert_null(vram_watch_history_json(w, 0, start, fake_now, 0.001));
    vram_watch_close(w);
    assert_true(count_rows(db, "watch_samples") >= 360);
    assert_true(count_rows(db, "watch_minutes") >= 6);

    w = open_watch("", db, 1); /* a restart */
    assert_int_equal(history_points(w, start, fake_now, 1, "sample"), 180);
    /* older than the ring: the minutes */
    fake_now += 2 * 3600;
    assert_int_equal(history_points(w, start, start + 180, 60, "minute"), 3);
    vram_watch_close(w);

    /* retention: a day later the expiry (run by the next flush) deletes all */
    fake_now += 2 * 86400;
    w = open_watch("", db, 1);
    assert_int_equal(vram_watch_sample(w), 0);
    vram_watch_close(w);
    assert_int_equal(count_rows(db, "watch_minutes"), 2); /* only the new minute */
    assert_int_equal(count_rows(db, "watch_samples"), 2);
}

/* Checks the buckets of one history query against the samples it covers:
 * each point starts at from + k * step and holds the mean and the max of
 * used bytes of the samples in [start, start + step). */
static void expect_buckets(vram_watch_t *w, const double *t, const uint64_t *used, int n,
                           double from, double to, double step, const char *resolution)
{
    char *j = vram_watch_history_json(w, 0, from, to, step);
    assert_non_null(j);
    json_t *o = json_loads(j, 0, NULL);
    free(j);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "resolution")), resolution);
    json_t *points = json_object_get(o, "points");
    size_t k = 0;
    for (double b = from; b < to; b += step) {
        double sum = 0, max = -1;
        int count = 0;
        for (int i = 0; i < n; i++)
            if (t[i] >= b && t[i] < b + step && t[i] < to) {
                sum += (double)used[i];
                max = (double)used[i] > max ? (double)used[i] : max;
                count++;
            }
        if (!count) continue; /* empty buckets are left out */
        json_t *p = json_array_get(points, k++);
        assert_non_null(p);
        assert_true(fabs(json_number_value(json_array_get(p, 0)) - b) < 1e-6);
        double mean = json_number_value(json_array_get(p, 1));
        if (fabs(mean - sum / count) >= 1)
            fail_msg("bucket at +%g (step %g): mean %.1f, want %.1f", b - from, step, mean,
                     sum / count);
        assert_true(json_number_value(json_array_get(p, 2)) == max);
    }
    assert_int_equal(json_array_size(points), k);
    json_decref(o);
}

/* from/to/step over the full-rate ring and over the minutes, aligned or
 * not, against the samples taken (a varying load). */
static void test_history_buckets(void **state)
{
    (void)state;
    char db[128];
    snprintf(db, sizeof db, "%s/buckets.db", dir);
    enum { N = 240 };
    double t[N];
    uint64_t used[N];
    fake_now = 1.812e9; /* a whole minute */
    double start = fake_now;
    vram_watch_t *w = open_watch("", db, 1);
    for (int i = 0; i < N; i++, fake_now += 1) {
        used_frac[0] = (double)((i * 7) % 11) / 20;
        t[i] = fake_now;
        used[i] = (uint64_t)(used_frac[0] * 80 * GiB);
        assert_int_equal(vram_watch_sample(w), 0);
    }
    expect_buckets(w, t, used, N, start, start + N, 1, "sample");
    expect_buckets(w, t, used, N, start, start + N, 10, "sample");
    expect_buckets(w, t, used, N, start + 5, start + 101, 7, "sample");
    vram_watch_close(w);
    /* two hours on, past the ring: the per-minute rows */
    fake_now += 2 * 3600;
    w = open_watch("", db, 1);
    expect_buckets(w, t, used, N, start, start + N, 60, "minute");
    expect_buckets(w, t, used, N, start, start + N, 120, "minute");
    vram_watch_close(w);
}

static long long minute_n(const char *db, double minute, int device)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT n FROM watch_minutes WHERE t = ?1 AND device = ?2 "
                                        "AND job_id = 0",
                                        -1, &q, NULL),
                     SQLITE_OK);
    sqlite3_bind_double(q, 1, minute);
    sqlite3_bind_int(q, 2, device);
    long long n = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    sqlite3_close(h);
    return n;
}

/* A restart in the middle of a minute: the minute goes on from its samples. */
static void test_minute_across_restart(void **state)
{
    (void)state;
    char db[128];
    snprintf(db, sizeof db, "%s/minute.db", dir);
    fake_now = 1.89e9; /* a whole minute */
    double minute = fake_now;
    for (int run = 0; run < 2; run++) {
        vram_watch_t *w = open_watch("", db, 1);
        for (int i = 0; i < 30; i++, fake_now += 1)
            assert_int_equal(vram_watch_sample(w), 0);
        vram_watch_close(w);
        assert_int_equal(minute_n(db, minute, 0), 30 * (run + 1));
    }
}

static void test_peaks_and_metrics(void **state)
{
    (void)state;
    used_frac[0] = 0.6;
    used_frac[1] = 0.1;
    health[1] = VRAM_HEALTH_ERROR;
    vram_watch_t *w = open_watch("", NULL, 1);
    assert_int_equal(vram_watch_sample(w), 0);
    used_frac[0] = 0.2;
    fake_now += 1;
    assert_int_equal(vram_watch_sample(w), 0);
    char *j = vram_watch_peaks_json(w);
    json_t *o = json_loads(j, 0, NULL);
    free(j);
    json_t *d0 = json_array_get(json_object_get(o, "devices"), 0);
    assert_int_equal(json_integer_value(json_object_get(d0, "peak_used_bytes")),
                     (json_int_t)(uint64_t)(0.6 * 80 * GiB));
    /* gpu1 is in ERROR: its processes are not asked for */
    assert_int_equal(json_array_size(json_object_get(o, "processes")), 1);
    json_decref(o);
    assert_int_equal(vram_watch_reset_peaks(w, 0, 0), 0);
    assert_int_equal(vram_watch_reset_peaks(w, 7, 0), VRAM_ENODEV);
    assert_int_equal(vram_watch_reset_peaks(w, -1, 99), VRAM_ENOENT);
    fake_now += 1;
    assert_int_equal(vram_watch_sample(w), 0);
    char *m = vram_watch_metrics_text(w);
    assert_non_null(m);
    char expect[200];
    snprintf(
        expect, sizeof expect,
        "vram_device_memory_peak_bytes{gpu=\"0\",name=\"Fake\\\"GPU\\\\0\",uuid=\"GPU-fake-0\"} "
        "%llu\n",
        (unsigned long long)(uint64_t)(0.2 * 80 * GiB));
    if (!strstr(m, expect)) fail_msg("missing %s in\n%s", expect, m);
    assert_non_null(strstr(m, "vram_device_health{gpu=\"1\",name=\"Fake\\\"GPU\\\\1\",uuid=\"GPU-"
                              "fake-1\",state=\"error\"} 1\n"));
    /* without a scheduler there is no admission figure: no series, not 0 */
    assert_null(strstr(m, "vram_device_memory_free_for_admission_bytes{"));
    assert_non_null(strstr(m, "vram_build_info{version=\"" VRAM_VERSION_STRING "\""));
    assert_non_null(strstr(m, "\nprocess_cpu_seconds_total "));
    assert_non_null(strstr(m, "\nprocess_open_fds "));
    assert_non_null(
        strstr(m, "\nvram_process_memory_used_bytes{gpu=\"0\",uuid=\"GPU-fake-0\",pid=\""));
    assert_non_null(strstr(m, "# TYPE vram_job_admissions_total counter\n"));
    assert_non_null(strstr(m, "vram_alerts_firing{level=\"error\"} 1\n")); /* gpu-error, for 0 */
    free(m);
    health[1] = VRAM_HEALTH_AVAILABLE;
    vram_watch_close(w);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/vram-watch-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lifecycle),         cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_rules_errors),      cmocka_unit_test(test_history_persists),
        cmocka_unit_test(test_history_buckets),   cmocka_unit_test(test_minute_across_restart),
        cmocka_unit_test(test_peaks_and_metrics),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) rc = 1;
    return rc;
}
