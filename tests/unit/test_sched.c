/* The scheduler: admission, queue order, placement, degradation, timeouts,
 * permissions, pid release, store reload (also after a crash), and a
 * randomized run against a reference model of the ledger. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vram.h"
#include "sched/sched.h"

#define GiB (1024ull * 1024 * 1024)

/* ---- fake devices and clock -------------------------------------------- */

static struct {
    int n;
    uint64_t total[4];
    uint64_t outside[4]; /* memory used by processes vramd does not manage */
} fake;

static int fake_count(void *arg)
{
    (void)arg;
    return fake.n;
}
static int fake_info(void *arg, int i, vram_device_info_t *out)
{
    (void)arg;
    snprintf(out->name, sizeof out->name, "fake%d", i);
    out->total_bytes = fake.total[i];
    out->used_bytes = fake.outside[i];
    out->free_bytes = fake.total[i] - fake.outside[i];
    out->health = VRAM_HEALTH_AVAILABLE;
    return 0;
}
static const vram_sched_devices_t fake_devices = {fake_count, fake_info, NULL, NULL};

/* One process on device 0 using fake_proc_bytes (for the usage watch). */
static pid_t fake_proc_pid;
static uint64_t fake_proc_bytes;
static int fake_procs(void *arg, int i, vram_process_info_t *p, size_t cap, size_t *n)
{
    (void)arg;
    *n = 0;
    if (i != 0 || !fake_proc_pid || cap < 1) return 0;
    p[0].pid = fake_proc_pid;
    p[0].used_bytes = fake_proc_bytes;
    *n = 1;
    return 0;
}
static const vram_sched_devices_t fake_devices_with_procs = {fake_count, fake_info, fake_procs,
                                                             NULL};

static double fake_now = 1000.0;
static double fake_clock(void)
{
    return fake_now;
}

static char db_dir[256];

static vram_sched_config_t config(int ndev, uint64_t gib_each)
{
    fake.n = ndev;
    for (int i = 0; i < ndev; i++) {
        fake.total[i] = gib_each * GiB;
        fake.outside[i] = 0;
    }
    vram_sched_config_t c;
    memset(&c, 0, sizeof c);
    c.devices = &fake_devices;
    snprintf(c.safety_margin, sizeof c.safety_margin, "0");
    c.placement = VRAM_PLACE_BEST_FIT;
    c.backfill = false;
    c.clock = fake_clock;
    c.db_path = ":memory:";
    return c;
}

/* config() with a database file `name` in the test's directory (path holds it). */
static vram_sched_config_t file_config(int ndev, uint64_t gib_each, const char *name,
                                       char path[512])
{
    snprintf(path, 512, "%s/%s", db_dir, name);
    vram_sched_config_t c = config(ndev, gib_each);
    c.db_path = path;
    return c;
}

static vram_job_request_t req_of(const char *name, uint64_t gib, int gpus, int prio)
{
    vram_job_request_t r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "%s", name);
    r.uid = 1000;
    r.mem_bytes = gib * GiB;
    r.gpus = gpus;
    r.priority = prio;
    r.timeout_s = -1;
    return r;
}

static vram_job_t submit(vram_sched_t *s, const char *name, uint64_t gib, int gpus, int prio)
{
    vram_job_request_t r = req_of(name, gib, gpus, prio);
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    return j;
}

static vram_job_state_t state_of(vram_sched_t *s, int64_t id)
{
    vram_job_t j;
    assert_int_equal(vram_sched_job(s, id, &j), 0);
    return j.state;
}

/* ---- scenarios ---------------------------------------------------------------- */

static void admits_what_fits_and_queues_the_rest(void **st)
{
    (void)st;
    vram_sched_config_t c = config(2, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 50, 1, 0), b = submit(s, "b", 50, 1, 0);
    vram_job_t q = submit(s, "c", 50, 1, 0);
    assert_int_equal(a.state, VRAM_JOB_RUNNING);
    assert_int_equal(b.state, VRAM_JOB_RUNNING);
    assert_int_not_equal(a.devices[0], b.devices[0]);
    assert_int_equal(q.state, VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_check(s), 0);
    /* release: the queued job starts in the same call, on the freed device */
    assert_int_equal(vram_sched_finish(s, a.id, 1000, 0, NULL), 0);
    vram_job_t now;
    assert_int_equal(vram_sched_job(s, q.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_RUNNING);
    assert_int_equal(now.devices[0], a.devices[0]);
    assert_int_equal(state_of(s, a.id), VRAM_JOB_DONE);
    /* a failing exit status ends FAILED with the text */
    assert_int_equal(vram_sched_finish(s, b.id, 1000, 3, NULL), 0);
    assert_int_equal(vram_sched_job(s, b.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_FAILED);
    assert_int_equal(now.exit_status, 3);
    assert_string_equal(now.error, "exit status 3");
    /* ended jobs cannot be finished twice */
    assert_int_equal(vram_sched_finish(s, b.id, 1000, 0, NULL), VRAM_ESTATE);
    assert_int_equal(vram_sched_cancel(s, 999, 0), VRAM_ENOENT);
    vram_sched_close(s);
}

/* After vram_sched_shutdown nothing starts, whatever frees up: the queued job
 * stays queued (the daemon used to admit jobs while it exited). */
static void shutdown_admits_nothing(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 50, 1, 0), q = submit(s, "q", 50, 1, 0);
    assert_int_equal(q.state, VRAM_JOB_QUEUED);
    vram_sched_shutdown(s);
    assert_int_equal(vram_sched_finish(s, a.id, 1000, 0, NULL), 0);
    assert_true(vram_sched_tick(s) >= 0);
    assert_int_equal(state_of(s, q.id), VRAM_JOB_QUEUED);
    vram_job_t late = submit(s, "late", 10, 1, 0);
    assert_int_equal(late.state, VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_check(s), 0);
    vram_sched_close(s);
}

static void priority_then_arrival(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t big = submit(s, "big", 80, 1, 0);
    vram_job_t low1 = submit(s, "low1", 40, 1, 0), low2 = submit(s, "low2", 40, 1, 0);
    vram_job_t high = submit(s, "high", 40, 1, 5);
    assert_int_equal(big.state, VRAM_JOB_RUNNING);
    char *js = vram_sched_job_json(s, high.id);
    assert_non_null(strstr(js, "\"queue_position\":1"));
    free(js);
    js = vram_sched_job_json(s, low2.id);
    assert_non_null(strstr(js, "\"queue_position\":3"));
    free(js);
    assert_int_equal(vram_sched_finish(s, big.id, 1000, 0, NULL), 0);
    /* 80 GiB free: the high-priority job, then the earliest low one */
    assert_int_equal(state_of(s, high.id), VRAM_JOB_RUNNING);
    assert_int_equal(state_of(s, low1.id), VRAM_JOB_RUNNING);
    assert_int_equal(state_of(s, low2.id), VRAM_JOB_QUEUED);
    vram_sched_close(s);
}

static void backfill_lets_small_jobs_pass(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.backfill = true;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    submit(s, "a", 50, 1, 0);
    vram_job_t head = submit(s, "head", 60, 1, 0), small = submit(s, "small", 20, 1, 0);
    assert_int_equal(head.state, VRAM_JOB_QUEUED);
    assert_int_equal(small.state, VRAM_JOB_RUNNING);
    vram_sched_close(s);
    /* without backfill the head blocks it */
    c.backfill = false;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    submit(s, "a", 50, 1, 0);
    head = submit(s, "head", 60, 1, 0);
    small = submit(s, "small", 20, 1, 0);
    assert_int_equal(small.state, VRAM_JOB_QUEUED);
    vram_sched_close(s);
}

static void multi_gpu_all_or_nothing(void **st)
{
    (void)st;
    vram_sched_config_t c = config(3, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 60, 1, 0);
    vram_job_t b = submit(s, "b", 60, 1, 0);
    vram_job_t two = submit(s, "two", 40, 2, 0);
    assert_int_equal(two.state, VRAM_JOB_QUEUED); /* only one device has 40 free */
    assert_int_equal(vram_sched_finish(s, a.id, 1000, 0, NULL), 0);
    vram_job_t t;
    assert_int_equal(vram_sched_job(s, two.id, &t), 0);
    assert_int_equal(t.state, VRAM_JOB_RUNNING);
    assert_int_equal(t.ndevices, 2);
    assert_int_not_equal(t.devices[0], t.devices[1]);
    assert_true(t.devices[0] != b.devices[0] && t.devices[1] != b.devices[0]);
    assert_int_equal(vram_sched_check(s), 0);
    vram_sched_close(s);
}

static void placement_policies_and_pinning(void **st)
{
    (void)st;
    vram_sched_config_t c = config(2, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 30, 1, 0);
    vram_job_t b = submit(s, "b", 10, 1, 0);
    assert_int_equal(b.devices[0], a.devices[0]); /* best fit packs */
    vram_job_request_t r = req_of("pinned", 10, 0, 0);
    r.npinned = 1;
    r.pinned[0] = 1 - a.devices[0];
    vram_job_t p;
    assert_int_equal(vram_sched_submit(s, &r, &p), 0);
    assert_int_equal(p.devices[0], 1 - a.devices[0]);
    assert_int_equal(p.req.gpus, 1);
    r.pinned[0] = 7;
    assert_int_equal(vram_sched_submit(s, &r, &p), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "devices"));
    vram_sched_close(s);

    c.placement = VRAM_PLACE_LEAST_LOADED;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    a = submit(s, "a", 30, 1, 0);
    b = submit(s, "b", 10, 1, 0);
    assert_int_not_equal(b.devices[0], a.devices[0]); /* least loaded spreads */
    vram_sched_close(s);
}

static void degrades_batch_with_accumulation(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    submit(s, "big", 60, 1, 0);
    vram_job_request_t r = req_of("train", 40, 1, 0);
    r.batch_size = 64;
    r.min_batch_size = 8;
    /* the memory at each smaller batch, not a line through two of them */
    const vram_batch_bytes_t table[] = {
        {8, 6 * GiB}, {16, 9 * GiB}, {22, 19 * GiB}, {32, 21 * GiB}, {64, 40 * GiB}};
    memcpy(r.batch_bytes, table, sizeof table);
    r.nbatch_bytes = 5;
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    /* 20 GiB free: 22 is the largest listed batch that fits; 3 steps */
    assert_int_equal(j.state, VRAM_JOB_RUNNING);
    assert_int_equal(j.granted_batch, 22);
    assert_int_equal(j.grad_accum, 3);
    assert_int_equal(j.reserved_bytes, 19 * GiB);
    assert_int_equal(vram_sched_check(s), 0);
    /* nothing left for batch 16 (9 GiB in 1 GiB): it waits */
    r.min_batch_size = 16;
    memmove(r.batch_bytes, r.batch_bytes + 1, 4 * sizeof table[0]);
    r.nbatch_bytes = 4;
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_check(s), 0);
    vram_sched_close(s);
    /* the helper alone */
    uint32_t acc = 0;
    uint64_t bytes = 0;
    assert_int_equal(vram_job_degrade(&r, 100 * GiB, &acc, &bytes), 64);
    assert_int_equal(acc, 1);
    assert_int_equal(bytes, 40 * GiB);
    assert_int_equal(vram_job_degrade(&r, 1 * GiB, &acc, &bytes), 0);
}

/* r alone on one 128 GiB device with `free` bytes free: granted batch and
 * accum, reserving exactly `reserved`. */
static void grants_with_free(const vram_job_request_t *r, uint64_t free, uint32_t batch,
                             uint32_t accum, uint64_t reserved)
{
    vram_sched_config_t c = config(1, 128);
    fake.outside[0] = fake.total[0] - free;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, r, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_RUNNING);
    assert_int_equal(j.granted_batch, batch);
    assert_int_equal(j.grad_accum, accum);
    assert_int_equal(j.reserved_bytes, reserved);
    assert_int_equal(vram_sched_check(s), 0);
    vram_sched_close(s);
}

/* resnet50 at batch 1024: the peak at small batches is the optimizer step,
 * so its memory is not linear in the batch. vramd grants the batch whose
 * full estimate fits and reserves exactly that estimate. */
static void degrades_to_the_estimate_at_the_batch(void **st)
{
    (void)st;
    vram_model_t m;
    assert_int_equal(vram_model_find("resnet50", &m), 0);
    vram_estimate_config_t e;
    vram_estimate_config_init(&e);
    e.batch_size = 1024;
    vram_job_request_t r = req_of("resnet", 0, 1, 0);
    assert_int_equal(
        vram_estimate_batch_table(&m, &e, 1, r.batch_bytes, VRAM_JOB_MAX_BATCHES, &r.nbatch_bytes),
        0);
    r.batch_size = 1024;
    r.min_batch_size = 1;
    r.mem_bytes = r.batch_bytes[r.nbatch_bytes - 1].bytes;
    uint64_t at512, at2, at1;
    assert_int_equal(vram_estimate_at_batch(&m, &e, 512, &at512), 0);
    assert_int_equal(vram_estimate_at_batch(&m, &e, 2, &at2), 0);
    assert_int_equal(vram_estimate_at_batch(&m, &e, 1, &at1), 0);
    /* a line through batches 1 and 1024 misses batch 2 (the optimizer step
     * dominates there: batch 2 costs almost what batch 1 does) */
    uint64_t line = (r.mem_bytes - at1) / 1023;
    assert_true(r.mem_bytes - 1022 * line > at2 + (at2 - at1) * 4);

    grants_with_free(&r, at512 + (r.mem_bytes - at512) / 2, 512, 2, at512);
    /* room for batch 2's estimate but not for the line's figure there */
    grants_with_free(&r, at2 + (r.mem_bytes - 1022 * line - at2) / 2, 2, 512, at2);
    /* the table survives a restart (the store) */
    char path[512];
    vram_sched_config_t c = file_config(1, 128, "table.db", path);
    vram_sched_t *s;
    vram_job_t j;
    fake.outside[0] = fake.total[0] - (at512 + (r.mem_bytes - at512) / 2);
    assert_int_equal(vram_sched_open(&c, &s), 0);
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(j.granted_batch, 512);
    vram_sched_close(s);
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t back;
    assert_int_equal(vram_sched_job(s, j.id, &back), 0);
    assert_int_equal(back.req.nbatch_bytes, r.nbatch_bytes);
    for (int i = 0; i < r.nbatch_bytes; i++) {
        assert_int_equal(back.req.batch_bytes[i].batch, r.batch_bytes[i].batch);
        assert_int_equal(back.req.batch_bytes[i].bytes, r.batch_bytes[i].bytes);
    }
    assert_int_equal(back.reserved_bytes, at512);
    assert_int_equal(vram_sched_check(s), 0);
    vram_sched_close(s);
}

static void queued_jobs_time_out(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.job_timeout_s = 30;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    submit(s, "big", 70, 1, 0);
    vram_job_request_t r = req_of("short", 20, 1, 0);
    r.timeout_s = 5;
    vram_job_t a, b;
    assert_int_equal(vram_sched_submit(s, &r, &a), 0);
    b = submit(s, "default", 20, 1, 0); /* VRAM_JOB_TIMEOUT */
    fake_now += 6;
    assert_true(vram_sched_tick(s) >= 1);
    vram_job_t now;
    assert_int_equal(vram_sched_job(s, a.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_TIMEOUT);
    assert_string_equal(now.error, "GPU memory timeout after 5 s");
    assert_int_equal(state_of(s, b.id), VRAM_JOB_QUEUED);
    fake_now += 30;
    vram_sched_tick(s);
    assert_int_equal(vram_sched_job(s, b.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_TIMEOUT);
    assert_string_equal(now.error, "GPU memory timeout after 30 s");
    vram_sched_close(s);
}

static void limits_and_validation(void **st)
{
    (void)st;
    vram_sched_config_t c = config(2, 80);
    snprintf(c.safety_margin, sizeof c.safety_margin, "0.25");
    c.max_concurrent_jobs = 1;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_request_t r = req_of("huge", 61, 1, 0); /* 80 - 20 margin = 60 */
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "mem_bytes"));
    r = req_of("many", 1, 3, 0);
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "gpus"));
    r = req_of("zero", 0, 1, 0);
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EINVAL);
    r = req_of("batch", 1, 1, 0);
    r.batch_size = 4;
    r.min_batch_size = 8;
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "min_batch_size"));
    /* one job per device, whatever memory is left */
    vram_job_t a = submit(s, "a", 1, 1, 0), b = submit(s, "b", 1, 1, 0);
    vram_job_t x = submit(s, "c", 1, 1, 0);
    assert_int_equal(a.state, VRAM_JOB_RUNNING);
    assert_int_equal(b.state, VRAM_JOB_RUNNING);
    assert_int_equal(x.state, VRAM_JOB_QUEUED);
    /* memory used outside vramd lowers what is usable */
    vram_sched_finish(s, a.id, 1000, 0, NULL);
    vram_sched_finish(s, b.id, 1000, 0, NULL);
    vram_sched_finish(s, x.id, 1000, 0, NULL);
    fake.outside[0] = fake.outside[1] = 50 * GiB;
    vram_job_t y = submit(s, "y", 20, 1, 0);
    assert_int_equal(y.state, VRAM_JOB_QUEUED); /* 80 - 20 - 50 = 10 usable */
    fake.outside[1] = 0;
    vram_sched_tick(s);
    assert_int_equal(vram_sched_job(s, y.id, &y), 0);
    assert_int_equal(y.state, VRAM_JOB_RUNNING);
    assert_int_equal(y.devices[0], 1);
    char *status = vram_sched_status_json(s);
    assert_non_null(strstr(status, "\"unmanaged_bytes\":53687091200"));
    free(status);
    vram_sched_close(s);
}

static void only_owner_or_root_cancels(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 10, 1, 0);
    assert_int_equal(vram_sched_cancel(s, a.id, 2000), VRAM_EPERM);
    assert_int_equal(state_of(s, a.id), VRAM_JOB_RUNNING);
    assert_int_equal(vram_sched_finish(s, a.id, 2000, 0, NULL), VRAM_EPERM);
    assert_int_equal(vram_sched_cancel(s, a.id, 1000), 0);
    assert_int_equal(state_of(s, a.id), VRAM_JOB_CANCELLED);
    vram_job_t b = submit(s, "b", 10, 1, 0);
    assert_int_equal(vram_sched_cancel(s, b.id, 0), 0); /* root */
    vram_sched_close(s);
}

/* A real child process: its death releases the job and admits the next. */
static void process_exit_releases(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.clock = NULL;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    vram_job_request_t r = req_of("child", 60, 1, 0);
    r.pid = child;
    r.uid = getuid(); /* a job's pid must be its owner's */
    vram_job_t a, b;
    assert_int_equal(vram_sched_submit(s, &r, &a), 0);
    assert_int_equal(a.state, VRAM_JOB_RUNNING);
    b = submit(s, "next", 60, 1, 0);
    assert_int_equal(b.state, VRAM_JOB_QUEUED);
    vram_sched_run_once(s, 0);
    assert_int_equal(state_of(s, a.id), VRAM_JOB_RUNNING);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    uint64_t t0 = vram_now_ns();
    for (int i = 0; i < 50 && state_of(s, b.id) != VRAM_JOB_RUNNING; i++)
        vram_sched_run_once(s, 100);
    assert_true(vram_now_ns() - t0 < 1000000000ull);
    vram_job_t now;
    assert_int_equal(vram_sched_job(s, a.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_FAILED);
    assert_non_null(strstr(now.error, "exited"));
    assert_int_equal(state_of(s, b.id), VRAM_JOB_RUNNING);
    /* a dead pid is refused at submission */
    r.pid = child;
    r.uid = getuid(); /* a job's pid must be its owner's */
    assert_int_equal(vram_sched_submit(s, &r, &a), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "pid"));
    vram_sched_close(s);
}

/* A queued job whose client died is dropped instead of being admitted later. */
static void dead_queued_clients_are_dropped(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t big = submit(s, "big", 70, 1, 0);
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    vram_job_request_t r = req_of("waiting", 20, 1, 0);
    r.pid = child;
    r.uid = getuid(); /* a job's pid must be its owner's */
    vram_job_t q;
    assert_int_equal(vram_sched_submit(s, &r, &q), 0);
    assert_int_equal(q.state, VRAM_JOB_QUEUED);
    vram_sched_tick(s);
    assert_int_equal(state_of(s, q.id), VRAM_JOB_QUEUED);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    vram_sched_tick(s);
    vram_job_t now;
    assert_int_equal(vram_sched_job(s, q.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_FAILED);
    assert_non_null(strstr(now.error, "exited while the job was queued"));
    assert_int_equal(now.ndevices, 0);
    assert_int_equal(vram_sched_finish(s, big.id, 1000, 0, NULL), 0);
    vram_sched_close(s);
}

/* Reload: alive running jobs keep their place, dead ones fail with a reason,
 * queued ones keep their order; the first open runs in a child that dies
 * without closing anything (a crash). */
static void reload_after_crash(void **st)
{
    (void)st;
    char path[512];
    vram_sched_config_t c = file_config(1, 80, "crash.db", path);
    c.clock = NULL;
    pid_t alive = fork();
    if (alive == 0) {
        pause();
        _exit(0);
    }
    pid_t doomed = fork();
    if (doomed == 0) {
        pause();
        _exit(0);
    }
    pid_t daemon = fork();
    if (daemon == 0) {
        vram_sched_t *s;
        if (vram_sched_open(&c, &s)) _exit(10);
        vram_job_request_t r = req_of("alive", 30, 1, 0);
        vram_job_t j;
        r.pid = alive;
        r.uid = getuid(); /* a job's pid must be its owner's */
        if (vram_sched_submit(s, &r, &j) || j.state != VRAM_JOB_RUNNING) _exit(11);
        r = req_of("doomed", 30, 1, 0);
        r.pid = doomed;
        r.uid = getuid(); /* a job's pid must be its owner's */
        if (vram_sched_submit(s, &r, &j) || j.state != VRAM_JOB_RUNNING) _exit(12);
        const char *names[] = {"q1", "q2", "q3"};
        for (int i = 0; i < 3; i++) {
            r = req_of(names[i], 30, 1, 0);
            if (vram_sched_submit(s, &r, &j) || j.state != VRAM_JOB_QUEUED) _exit(13);
        }
        _exit(0); /* no close: a crash */
    }
    int status;
    assert_int_equal(waitpid(daemon, &status, 0), daemon);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    kill(doomed, SIGKILL);
    waitpid(doomed, NULL, 0);

    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t j;
    assert_int_equal(vram_sched_job(s, 1, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_RUNNING);
    assert_int_equal(j.req.pid, alive);
    assert_int_equal(vram_sched_job(s, 2, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_FAILED);
    assert_non_null(strstr(j.error, "while vramd was down"));
    /* the freed 30 GiB goes to the first queued job, in order */
    assert_int_equal(state_of(s, 3), VRAM_JOB_RUNNING);
    assert_int_equal(state_of(s, 4), VRAM_JOB_QUEUED);
    assert_int_equal(state_of(s, 5), VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_check(s), 0);
    vram_sched_close(s);
    /* a clean reopen changes nothing */
    assert_int_equal(vram_sched_open(&c, &s), 0);
    assert_int_equal(state_of(s, 1), VRAM_JOB_RUNNING);
    assert_int_equal(state_of(s, 3), VRAM_JOB_RUNNING);
    assert_int_equal(state_of(s, 4), VRAM_JOB_QUEUED);
    char *jobs = vram_sched_jobs_json(s, 10);
    assert_non_null(strstr(jobs, "\"name\":\"doomed\""));
    free(jobs);
    vram_sched_close(s);
    kill(alive, SIGKILL);
    waitpid(alive, NULL, 0);
    assert_int_equal(vram_sched_open(&c, &s), 0);
    assert_int_equal(state_of(s, 1), VRAM_JOB_FAILED);
    assert_int_equal(state_of(s, 4), VRAM_JOB_RUNNING);
    vram_sched_close(s);
}

static void leases_expire_unless_renewed(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.lease_s = 10;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 50, 1, 0), b = submit(s, "b", 50, 1, 0);
    assert_int_equal(b.state, VRAM_JOB_QUEUED);
    fake_now += 8;
    assert_int_equal(vram_sched_renew(s, a.id, 1000), 0);
    assert_int_equal(vram_sched_renew(s, b.id, 1000), VRAM_ESTATE); /* not running */
    fake_now += 8; /* 16 s after start, 8 after the renewal */
    vram_sched_tick(s);
    assert_int_equal(state_of(s, a.id), VRAM_JOB_RUNNING);
    fake_now += 3;
    vram_sched_tick(s);
    vram_job_t now;
    assert_int_equal(vram_sched_job(s, a.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_FAILED);
    assert_non_null(strstr(now.error, "lease of 10 s expired"));
    assert_int_equal(state_of(s, b.id), VRAM_JOB_RUNNING);
    vram_sched_close(s);
}

/* The usage watch: a job's process tree using more than its reservation is
 * flagged, and what it uses within its reservation is not outside use. */
static void usage_watch_flags_overuse(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.devices = &fake_devices_with_procs;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    fake_proc_pid = child;
    fake_proc_bytes = 20 * GiB;
    fake.outside[0] = 20 * GiB; /* the device sees the child's 20 GiB */
    vram_job_request_t r = req_of("watched", 30, 1, 0);
    r.pid = getpid(); /* the child is in this job's process tree */
    r.uid = getuid(); /* a job's pid must be its owner's */
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_RUNNING);
    fake_now += 2;
    vram_sched_tick(s);
    char *js = vram_sched_job_json(s, j.id);
    assert_non_null(strstr(js, "\"used_bytes\":21474836480"));
    assert_non_null(strstr(js, "\"over_reservation\":false"));
    free(js);
    char *status = vram_sched_status_json(s);
    assert_non_null(strstr(status, "\"unmanaged_bytes\":0")); /* covered by the reservation */
    free(status);
    fake_proc_bytes = fake.outside[0] = 35 * GiB;
    fake_now += 2;
    vram_sched_tick(s);
    js = vram_sched_job_json(s, j.id);
    assert_non_null(strstr(js, "\"over_reservation\":true"));
    free(js);
    status = vram_sched_status_json(s);
    assert_non_null(strstr(status, "\"unmanaged_bytes\":5368709120")); /* the excess */
    free(status);
    assert_int_equal(vram_sched_check(s), 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    fake_proc_pid = 0;
    vram_sched_close(s);
}

static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* A transaction that fails midway (here: a trigger refusing an event row)
 * leaves the store unchanged, and the scheduler's memory follows the store. */
static void failed_transactions_change_nothing(void **st)
{
    (void)st;
    char path[512];
    vram_sched_config_t c = file_config(1, 80, "inject.db", path);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    exec_sql(path, "CREATE TRIGGER refuse_admit BEFORE INSERT ON events WHEN NEW.kind='admitted'"
                   " BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
    vram_job_request_t r = req_of("a", 30, 1, 0);
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EIO);
    assert_non_null(strstr(vram_last_error(), "injected failure"));
    char *status = vram_sched_status_json(s);
    assert_non_null(
        strstr(status, "\"active_jobs\":0,\"pending_jobs\":0,\"total_reserved_bytes\":0"));
    free(status);
    exec_sql(path, "DROP TRIGGER refuse_admit;"
                   "CREATE TRIGGER refuse_finish BEFORE INSERT ON events WHEN NEW.kind='finished'"
                   " BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_RUNNING);
    vram_job_t q = submit(s, "q", 60, 1, 0);
    assert_int_equal(q.state, VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_finish(s, j.id, 1000, 0, NULL), VRAM_EIO);
    /* still running with its reservation; the queued job did not start */
    assert_int_equal(state_of(s, j.id), VRAM_JOB_RUNNING);
    assert_int_equal(state_of(s, q.id), VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_check(s), 0);
    exec_sql(path, "DROP TRIGGER refuse_finish;");
    assert_int_equal(vram_sched_finish(s, j.id, 1000, 0, NULL), 0);
    assert_int_equal(state_of(s, q.id), VRAM_JOB_RUNNING);
    vram_sched_close(s);
}

/* Writes exit file `status` of job id in dir, as a monitor does. */
static void write_exit(const char *dir, int64_t id, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%lld", dir, (long long)id);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static bool exit_file_exists(const char *dir, int64_t id)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%lld", dir, (long long)id);
    return access(path, F_OK) == 0;
}

/* A started job's exit status goes into the store before its exit file is
 * removed: when the transaction that records it fails (as a crash between
 * the two would), the file stays and the status is recorded at the next
 * pass, not lost as "its monitor recorded no exit status". At start, an exit
 * file of a job the store already has ended (a crash after the commit) is
 * removed and changes nothing. */
static void exit_status_is_committed_before_its_file_goes(void **st)
{
    (void)st;
    char path[512], exits[600];
    vram_sched_config_t c = file_config(1, 80, "exits.db", path);
    snprintf(exits, sizeof exits, "%s/exits", db_dir);
    assert_int_equal(mkdir(exits, 0700), 0);
    c.exit_dir = exits;
    c.clock = NULL;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_request_t r = req_of("started", 10, 1, 0);
    r.uid = getuid();
    r.spawn = "{\"argv\":[\"true\"],\"cwd\":\"/\"}";
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_RUNNING);
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    assert_int_equal(vram_sched_attach_pid(s, j.id, child), 0);
    write_exit(exits, j.id, "3\n");
    exec_sql(path, "CREATE TRIGGER refuse_finish BEFORE INSERT ON events WHEN NEW.kind='finished'"
                   " BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* each pass sees the process gone and fails to record its end */
    for (int i = 0; i < 3; i++)
        vram_sched_run_once(s, 0);
    assert_int_equal(state_of(s, j.id), VRAM_JOB_RUNNING);
    assert_true(exit_file_exists(exits, j.id));
    exec_sql(path, "DROP TRIGGER refuse_finish;");
    for (int i = 0; i < 50 && state_of(s, j.id) == VRAM_JOB_RUNNING; i++)
        vram_sched_run_once(s, 100);
    vram_job_t now;
    assert_int_equal(vram_sched_job(s, j.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_FAILED);
    assert_int_equal(now.exit_status, 3);
    assert_false(exit_file_exists(exits, j.id));
    vram_sched_close(s);
    /* a crash after the commit, before the removal: the file is back */
    write_exit(exits, j.id, "0\n");
    assert_int_equal(vram_sched_open(&c, &s), 0);
    assert_false(exit_file_exists(exits, j.id));
    assert_int_equal(vram_sched_job(s, j.id, &now), 0);
    assert_int_equal(now.state, VRAM_JOB_FAILED);
    assert_int_equal(now.exit_status, 3);
    vram_sched_close(s);
}

/* A job keeps the largest peak it reported, across a restart; a database
 * made before the peak_bytes column gets it (NULL: never reported). */
static void peak_reports_keep_the_maximum(void **st)
{
    (void)st;
    char path[512];
    vram_sched_config_t c = file_config(1, 80, "peak.db", path);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 50, 1, 0), b = submit(s, "b", 50, 1, 0);
    assert_int_equal(b.state, VRAM_JOB_QUEUED);
    char *js = vram_sched_job_json(s, a.id);
    assert_non_null(strstr(js, "\"peak_bytes\":null"));
    free(js);
    assert_int_equal(vram_sched_report_peak(s, a.id, 1000, 5 * GiB), 0);
    assert_int_equal(vram_sched_report_peak(s, a.id, 0, 3 * GiB), 0); /* root; smaller */
    assert_int_equal(vram_sched_report_peak(s, a.id, 2000, 9 * GiB), VRAM_EPERM);
    assert_int_equal(vram_sched_report_peak(s, b.id, 1000, GiB), VRAM_ESTATE); /* queued */
    assert_int_equal(vram_sched_report_peak(s, 999, 1000, GiB), VRAM_ENOENT);
    vram_job_t now;
    assert_int_equal(vram_sched_job(s, a.id, &now), 0);
    assert_true(now.has_peak);
    assert_int_equal(now.peak_bytes, 5 * GiB);
    assert_int_equal(vram_sched_report_peak(s, a.id, 1000, 7 * GiB), 0);
    vram_sched_close(s);
    assert_int_equal(vram_sched_open(&c, &s), 0); /* reloaded from the store */
    assert_int_equal(vram_sched_job(s, a.id, &now), 0);
    assert_int_equal(now.peak_bytes, 7 * GiB);
    assert_int_equal(vram_sched_finish(s, a.id, 1000, 0, NULL), 0);
    js = vram_sched_job_json(s, a.id); /* ended: read back from the store */
    assert_non_null(strstr(js, "\"peak_bytes\":7516192768"));
    free(js);
    assert_int_equal(vram_sched_report_peak(s, a.id, 1000, 8 * GiB), VRAM_ESTATE);
    vram_sched_close(s);
    /* an older database: no peak_bytes column */
    exec_sql(path, "ALTER TABLE jobs DROP COLUMN peak_bytes;");
    assert_int_equal(vram_sched_open(&c, &s), 0);
    js = vram_sched_job_json(s, a.id);
    assert_non_null(strstr(js, "\"peak_bytes\":null"));
    free(js);
    assert_int_equal(vram_sched_report_peak(s, b.id, 1000, GiB), 0);
    assert_int_equal(vram_sched_job(s, b.id, &now), 0);
    assert_int_equal(now.peak_bytes, GiB);
    vram_sched_close(s);
}

/* The daemon's threads at once: submitters/finishers, readers, the ticker. */
typedef struct {
    vram_sched_t *s;
    int failures;
    _Atomic int *stop;
} worker_t;

static void *submitter(void *arg)
{
    worker_t *w = arg;
    for (int i = 0; i < 150; i++) {
        vram_job_request_t r = req_of("t", 1 + (uint64_t)(i % 7) * 9, 1 + (i % 5 == 0), i % 3);
        vram_job_t j;
        if (vram_sched_submit(w->s, &r, &j) != 0) {
            w->failures++;
            continue;
        }
        vram_job_t now = j;
        for (int k = 0; k < 200 && now.state == VRAM_JOB_QUEUED; k++)
            if (vram_sched_wait(w->s, j.id, 50, &now) != 0) w->failures++;
        if (now.state == VRAM_JOB_RUNNING && vram_sched_finish(w->s, j.id, 1000, 0, NULL) != 0)
            w->failures++;
        if (now.state == VRAM_JOB_QUEUED && vram_sched_cancel(w->s, j.id, 1000) != 0) w->failures++;
    }
    return NULL;
}

static void *reader(void *arg)
{
    worker_t *w = arg;
    while (!*w->stop) {
        free(vram_sched_status_json(w->s));
        free(vram_sched_jobs_json(w->s, 10));
        if (vram_sched_check(w->s) != 0) w->failures++;
    }
    return NULL;
}

static void *ticker(void *arg)
{
    worker_t *w = arg;
    while (!*w->stop)
        if (vram_sched_run_once(w->s, 5) < 0) w->failures++;
    return NULL;
}

static void concurrent_clients(void **st)
{
    (void)st;
    char path[512];
    vram_sched_config_t c = file_config(2, 80, "threads.db", path);
    c.clock = NULL;
    c.backfill = true;
    c.probe_interval_s = 0.05;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    _Atomic int stop = 0;
    worker_t w[6];
    pthread_t th[6];
    for (int i = 0; i < 6; i++) {
        w[i] = (worker_t){s, 0, &stop};
        pthread_create(&th[i], NULL, i < 4 ? submitter : i == 4 ? reader : ticker, &w[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    stop = 1;
    pthread_join(th[4], NULL);
    pthread_join(th[5], NULL);
    for (int i = 0; i < 6; i++)
        assert_int_equal(w[i].failures, 0);
    char *status = vram_sched_status_json(s);
    assert_non_null(strstr(status, "\"active_jobs\":0,\"pending_jobs\":0"));
    free(status);
    vram_sched_close(s);
}

/* ---- randomized run against a reference model ---------------------------------- */

typedef struct {
    int64_t id;
    uint64_t mem; /* reserved per GPU once running; asked (at batch) before */
    int gpus, prio;
    int state; /* 0 queued, 1 running, 2 ended */
    int dev[4];
    /* degradable jobs: the memory at smaller batches (any monotone shape) */
    uint32_t batch, granted;
    uint64_t full;
    vram_batch_bytes_t table[6];
    int ntable;
} ref_job_t;

static ref_job_t ref[4000];
static int nref, ndegraded; /* running jobs seen at a smaller batch */

static uint64_t ref_free(int d)
{
    uint64_t used = 0;
    for (int i = 0; i < nref; i++)
        if (ref[i].state == 1)
            for (int k = 0; k < ref[i].gpus; k++)
                if (ref[i].dev[k] == d) used += ref[i].mem;
    return fake.total[d] - used;
}

/* Reference admission (no backfill, best fit): the queue in (priority desc,
 * id asc) order; a job that cannot get its GPUs blocks the rest. */
static void ref_admit(void)
{
    for (;;) {
        int best = -1;
        for (int i = 0; i < nref; i++)
            if (ref[i].state == 0 && (best < 0 || ref[i].prio > ref[best].prio ||
                                      (ref[i].prio == ref[best].prio && ref[i].id < ref[best].id)))
                best = i;
        if (best < 0) return;
        ref_job_t *j = &ref[best];
        /* the gpus-th largest free amount bounds every chosen GPU */
        uint64_t frees[4];
        for (int d = 0; d < fake.n; d++)
            frees[d] = ref_free(d);
        for (int a = 0; a < fake.n; a++)
            for (int b = a + 1; b < fake.n; b++)
                if (frees[b] > frees[a]) {
                    uint64_t t = frees[a];
                    frees[a] = frees[b];
                    frees[b] = t;
                }
        uint64_t bound = j->gpus <= fake.n ? frees[j->gpus - 1] : 0;
        /* among the batches that fit: fewest accumulation steps, then the
         * least memory */
        j->mem = j->full;
        j->granted = j->batch;
        uint32_t best_acc = j->full <= bound ? 1 : 0;
        for (int i = 0; i < j->ntable && best_acc != 1; i++) {
            uint32_t acc = (j->batch + j->table[i].batch - 1) / j->table[i].batch;
            if (j->table[i].bytes <= bound &&
                (!best_acc || acc < best_acc || (acc == best_acc && j->table[i].bytes < j->mem))) {
                best_acc = acc;
                j->mem = j->table[i].bytes;
                j->granted = j->table[i].batch;
            }
        }
        if (!best_acc) return;
        /* take the fitting devices with the least free memory */
        bool used[4] = {false};
        for (int k = 0; k < j->gpus; k++) {
            int pick = -1;
            for (int d = 0; d < fake.n; d++)
                if (!used[d] && ref_free(d) >= j->mem && (pick < 0 || ref_free(d) < ref_free(pick)))
                    pick = d;
            used[pick] = true;
            j->dev[k] = pick;
        }
        j->state = 1;
    }
}

static void compare(vram_sched_t *s)
{
    assert_int_equal(vram_sched_check(s), 0);
    for (int i = 0; i < nref; i++) {
        vram_job_t j;
        assert_int_equal(vram_sched_job(s, ref[i].id, &j), 0);
        int st = j.state == VRAM_JOB_QUEUED ? 0 : j.state == VRAM_JOB_RUNNING ? 1 : 2;
        if (st != ref[i].state)
            fail_msg("job %lld: state %s, reference %d", (long long)ref[i].id,
                     vram_job_state_name(j.state), ref[i].state);
        if (st == 1) {
            /* same device set as the reference (free amounts tie-break by index) */
            int mask = 0, rmask = 0;
            for (int k = 0; k < j.ndevices; k++)
                mask |= 1 << j.devices[k];
            for (int k = 0; k < ref[i].gpus; k++)
                rmask |= 1 << ref[i].dev[k];
            assert_int_equal(j.ndevices, ref[i].gpus);
            if (mask != rmask)
                fail_msg("job %lld on devices %x, reference %x", (long long)ref[i].id, mask, rmask);
            assert_int_equal(j.reserved_bytes, ref[i].mem);
            assert_int_equal(j.granted_batch, ref[i].granted);
            ndegraded += j.granted_batch < j.req.batch_size;
            /* what it holds is an entry of its own table, or its full ask */
            bool listed = j.reserved_bytes == j.req.mem_bytes;
            for (int k = 0; k < j.req.nbatch_bytes; k++)
                listed |= j.req.batch_bytes[k].batch == j.granted_batch &&
                          j.req.batch_bytes[k].bytes == j.reserved_bytes;
            assert_true(listed);
        }
    }
}

static void randomized_against_reference(void **st)
{
    (void)st;
    char path[512];
    unsigned seed = (unsigned)getpid();
    const char *env = getenv("VRAM_TEST_SEED");
    if (env) seed = (unsigned)strtoul(env, NULL, 10);
    printf("seed %u (VRAM_TEST_SEED to replay)\n", seed);
    srand(seed);
    vram_sched_config_t c = file_config(3, 16, "random.db", path);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    nref = ndegraded = 0;
    for (int step = 0; step < 1500; step++) {
        int op = rand() % 10;
        if (op < 5 && nref < (int)(sizeof ref / sizeof ref[0])) {
            ref_job_t *r = &ref[nref];
            memset(r, 0, sizeof *r);
            r->mem = (uint64_t)(1 + rand() % 16) * GiB;
            r->gpus = 1 + (rand() % 6 == 0) + (rand() % 12 == 0);
            r->prio = rand() % 3;
            vram_job_request_t q = req_of("r", 0, r->gpus, r->prio);
            q.mem_bytes = r->full = r->mem;
            r->batch = r->granted = 0;
            if (rand() % 2) {
                /* a table of random monotone steps (not a line) below batch 64 */
                r->batch = r->granted = q.batch_size = 64;
                uint64_t bytes = (uint64_t)(1 + rand() % 4) * (GiB / 4);
                for (uint32_t b = 1 + (uint32_t)(rand() % 8);
                     b < 64 && r->ntable < 6 && bytes <= r->full;
                     b += 1 + (uint32_t)(rand() % 16)) {
                    r->table[r->ntable++] = (vram_batch_bytes_t){b, bytes};
                    bytes += (uint64_t)(rand() % 8) * (GiB / 2);
                }
                memcpy(q.batch_bytes, r->table, sizeof r->table);
                q.nbatch_bytes = r->ntable;
            }
            vram_job_t j;
            assert_int_equal(vram_sched_submit(s, &q, &j), 0);
            r->id = j.id;
            nref++;
            ref_admit();
        } else if (op < 9) {
            /* finish or cancel a random active job */
            int live[4000], n = 0;
            for (int i = 0; i < nref; i++)
                if (ref[i].state != 2) live[n++] = i;
            if (!n) continue;
            ref_job_t *r = &ref[live[rand() % n]];
            if (rand() % 2)
                assert_int_equal(vram_sched_cancel(s, r->id, 1000), 0);
            else
                assert_int_equal(vram_sched_finish(s, r->id, 1000, rand() % 2, NULL), 0);
            r->state = 2;
            ref_admit();
        } else {
            /* restart the scheduler: nothing lost, nothing admitted twice */
            vram_sched_close(s);
            assert_int_equal(vram_sched_open(&c, &s), 0);
        }
        compare(s);
    }
    vram_sched_close(s);
    /* the tables were exercised, not only the full batches */
    printf("%d checks of a running job at a smaller batch\n", ndegraded);
    assert_true(ndegraded > 0);
}

static int setup(void **st)
{
    (void)st;
    snprintf(db_dir, sizeof db_dir, "/tmp/vram-test-sched-XXXXXX");
    return mkdtemp(db_dir) ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", db_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- issue 9: quotas, pid ownership, waits, queue positions, events ------ */

static void per_uid_quotas(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.max_queued_per_uid = 2;
    c.max_running_per_uid = 1;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a, b, q1, q2, other, root;
    vram_job_request_t r = req_of("a", 10, 1, 0);
    assert_int_equal(vram_sched_submit(s, &r, &a), 0);
    assert_int_equal(a.state, VRAM_JOB_RUNNING);
    /* memory is free, but uid 1000 runs its quota: the next ones wait */
    assert_int_equal(vram_sched_submit(s, &r, &q1), 0);
    assert_int_equal(q1.state, VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_submit(s, &r, &q2), 0);
    assert_int_equal(vram_sched_submit(s, &r, &b), VRAM_EBUSY);
    assert_non_null(strstr(vram_last_error(), "MAX_QUEUED_PER_USER"));
    /* another uid is neither counted nor held back; root is exempt */
    vram_job_request_t o = req_of("o", 10, 1, 0);
    o.uid = 2000;
    assert_int_equal(vram_sched_submit(s, &o, &other), 0);
    assert_int_equal(other.state, VRAM_JOB_RUNNING);
    vram_job_request_t rr = req_of("root", 10, 1, 0);
    rr.uid = 0;
    assert_int_equal(vram_sched_submit(s, &rr, &root), 0);
    assert_int_equal(vram_sched_submit(s, &rr, &root), 0);
    assert_int_equal(vram_sched_check(s), 0);
    /* a's end lets exactly one of uid 1000's queued jobs start */
    assert_int_equal(vram_sched_finish(s, a.id, 1000, 0, NULL), 0);
    assert_int_equal(vram_sched_job(s, q1.id, &b), 0);
    assert_int_equal(b.state, VRAM_JOB_RUNNING);
    assert_int_equal(vram_sched_job(s, q2.id, &b), 0);
    assert_int_equal(b.state, VRAM_JOB_QUEUED);
    assert_int_equal(vram_sched_check(s), 0);
    vram_sched_close(s);
}

/* Why a job waits (Slurm's Reason): every admission pass records it, and the
 * job's JSON shows it. A job held by its uid's running quota or by
 * MAX_CONCURRENT_JOBS says so instead of "fits now". */
static void expect_reason(vram_sched_t *s, int64_t id, const char *code, const char *words)
{
    char *text = vram_sched_job_json_for(s, id, 0), want[80];
    assert_non_null(text);
    snprintf(want, sizeof want, "\"reason_code\":\"%s\"", code);
    if (!strstr(text, want) || !strstr(text, words)) fail_msg("job %lld: %s", (long long)id, text);
    free(text);
}

static void every_pass_records_why_a_job_waits(void **st)
{
    (void)st;
    vram_sched_config_t c = config(2, 80);
    c.max_running_per_uid = 1;
    c.max_concurrent_jobs = 1;
    c.backfill = true;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t a = submit(s, "a", 10, 1, 0), q = submit(s, "q", 10, 1, 0);
    assert_int_equal(a.state, VRAM_JOB_RUNNING);
    assert_int_equal(q.state, VRAM_JOB_QUEUED);
    expect_reason(s, q.id, "user_running_limit", "MAX_RUNNING_PER_USER");
    vram_job_request_t r = req_of("b", 10, 1, 0);
    r.uid = 2000;
    vram_job_t b, other;
    assert_int_equal(vram_sched_submit(s, &r, &b), 0);
    assert_int_equal(b.state, VRAM_JOB_RUNNING);
    r.uid = 3000;
    assert_int_equal(vram_sched_submit(s, &r, &other), 0);
    expect_reason(s, other.id, "device_job_limit", "MAX_CONCURRENT_JOBS");
    /* b's end: the next pass admits uid 3000 and records q's reason again */
    assert_int_equal(vram_sched_finish(s, b.id, 2000, 0, NULL), 0);
    assert_int_equal(state_of(s, other.id), VRAM_JOB_RUNNING);
    expect_reason(s, q.id, "user_running_limit", "runs 1 job");
    vram_sched_close(s);

    c = config(1, 80);
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t big = submit(s, "big", 70, 1, 0), mid = submit(s, "mid", 20, 1, 0),
               small = submit(s, "small", 5, 1, 0);
    assert_int_equal(big.state, VRAM_JOB_RUNNING);
    expect_reason(s, mid.id, "memory", "waiting for 20.00 GiB");
    char behind[40];
    snprintf(behind, sizeof behind, "behind job %lld", (long long)mid.id);
    expect_reason(s, small.id, "priority", behind);
    vram_sched_close(s);
}

/* Ended jobs and their events leave the store after JOB_RETENTION, oldest
 * first; active and recently ended jobs stay. */
static void ended_jobs_are_pruned_after_the_retention(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.job_retention_s = 3600;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t old = submit(s, "old", 10, 1, 0), running = submit(s, "running", 10, 1, 0);
    assert_int_equal(vram_sched_finish(s, old.id, 1000, 0, NULL), 0);
    fake_now += 3000;
    vram_job_t recent = submit(s, "recent", 10, 1, 0);
    assert_int_equal(vram_sched_finish(s, recent.id, 1000, 1, "boom"), 0);
    fake_now += 700; /* old ended 3700 s ago, recent 700 s ago */
    assert_true(vram_sched_tick(s) >= 0);
    vram_job_t j;
    assert_int_equal(vram_sched_job(s, old.id, &j), VRAM_ENOENT);
    assert_null(vram_sched_events_json(s, old.id));
    assert_int_equal(vram_sched_job(s, recent.id, &j), 0);
    assert_int_equal(j.state, VRAM_JOB_FAILED);
    char *ev = vram_sched_events_json(s, recent.id);
    assert_non_null(ev);
    assert_non_null(strstr(ev, "boom"));
    free(ev);
    assert_int_equal(state_of(s, running.id), VRAM_JOB_RUNNING);
    vram_sched_close(s);
}

static void pid_must_be_the_callers(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_t j;
    vram_job_request_t r = req_of("init", 1, 1, 0);
    r.uid = 0; /* even root may not tie a job to init or a kernel thread */
    r.pid = 1;
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EINVAL);
    r.pid = 2; /* kthreadd */
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "kernel thread"));
    /* another uid's process (ours, when the test does not run as 4242) */
    r = req_of("foreign", 1, 1, 0);
    r.uid = getuid() == 4242 ? 4243 : 4242;
    r.pid = getpid();
    assert_int_equal(vram_sched_submit(s, &r, &j), VRAM_EPERM);
    assert_non_null(strstr(vram_last_error(), "belongs to uid"));
    r.uid = getuid();
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    vram_sched_close(s);
}

typedef struct {
    vram_sched_t *s;
    int64_t id;
    int from;
    vram_job_t got;
    int rc;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    w->rc = vram_sched_wait_change(w->s, w->id, w->from, 20000, &w->got);
    return NULL;
}

static void waits_for_a_change(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    /* a job not yet submitted: the wait ends when it is */
    waiter_t w = {s, 1, VRAM_JOB_MISSING, {0}, -99};
    pthread_t t;
    pthread_create(&t, NULL, wait_thread, &w);
    vram_job_request_t r = req_of("a", 10, 1, 0);
    vram_job_t a;
    assert_int_equal(vram_sched_submit(s, &r, &a), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.got.id, 1);
    /* a running job: the wait ends when it finishes */
    w = (waiter_t){s, 1, VRAM_JOB_RUNNING, {0}, -99};
    pthread_create(&t, NULL, wait_thread, &w);
    assert_int_equal(vram_sched_finish(s, 1, 1000, 0, NULL), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.got.state, VRAM_JOB_DONE);
    /* no wait at all when the state already differs; an unknown id times out */
    vram_job_t got;
    assert_int_equal(vram_sched_wait_change(s, 1, VRAM_JOB_RUNNING, 20000, &got), 0);
    assert_int_equal(vram_sched_wait_change(s, 99, VRAM_JOB_MISSING, 10, &got), VRAM_ENOENT);
    vram_sched_close(s);
}

static void queue_positions_follow_the_order(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.backfill = true;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    vram_job_request_t big = req_of("big", 80, 1, 0);
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &big, &j), 0); /* holds the device */
    int prios[] = {0, 5, 0, 9, 5, -1};
    for (int i = 0; i < 6; i++) {
        vram_job_request_t r = req_of("q", 50, 1, prios[i]);
        assert_int_equal(vram_sched_submit(s, &r, &j), 0);
        assert_int_equal(vram_sched_check(s), 0);
    }
    /* ids 2..7 with priorities 0 5 0 9 5 -1: order 5(9) 3(5) 6(5) 2(0) 4(0) 7(-1) */
    int64_t order[] = {5, 3, 6, 2, 4, 7};
    for (int i = 0; i < 6; i++) {
        char *js = vram_sched_job_json(s, order[i]);
        char want[64];
        snprintf(want, sizeof want, "\"queue_position\":%d", i + 1);
        assert_non_null(strstr(js, want));
        free(js);
    }
    assert_int_equal(vram_sched_cancel(s, 3, 0), 0);
    assert_int_equal(vram_sched_check(s), 0);
    char *js = vram_sched_job_json(s, 6);
    assert_non_null(strstr(js, "\"queue_position\":2"));
    free(js);
    vram_sched_close(s);
}

static int told;
static char told_kinds[256];
static void count_event(void *arg, const vram_job_t *job, const char *kind, const char *message)
{
    (void)arg;
    (void)job;
    (void)message;
    told++;
    strncat(told_kinds, kind, sizeof told_kinds - strlen(told_kinds) - 2);
    strcat(told_kinds, ",");
}

static void events_are_told_after_commit_only(void **st)
{
    (void)st;
    char path[512];
    vram_sched_config_t c = file_config(1, 80, "events.db", path);
    c.on_event = count_event;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    told = 0;
    told_kinds[0] = 0;
    vram_job_request_t r = req_of("a", 10, 1, 0);
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(told, 1);
    assert_string_equal(told_kinds, "admitted,");
    /* a transaction that fails (the database is read-only now) tells nothing */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    assert_int_not_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(told, 1);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    assert_int_equal(vram_sched_cancel(s, 1, 1000), 0);
    assert_string_equal(told_kinds, "admitted,cancelled,");
    vram_sched_close(s);
}

static void cancel_terminates_then_kills(void **st)
{
    (void)st;
    vram_sched_config_t c = config(1, 80);
    c.clock = NULL;
    c.kill_grace_s = 0.2;
    vram_sched_t *s;
    assert_int_equal(vram_sched_open(&c, &s), 0);
    /* a job process that ignores SIGTERM, in a process group of its own */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        setpgid(0, 0);
        signal(SIGTERM, SIG_IGN);
        ssize_t w = write(ready[1], "r", 1);
        (void)w;
        for (;;)
            pause();
    }
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    vram_job_request_t r = req_of("stubborn", 10, 1, 0);
    r.pid = child;
    r.uid = getuid();
    vram_job_t j;
    assert_int_equal(vram_sched_submit(s, &r, &j), 0);
    assert_int_equal(vram_sched_cancel(s, j.id, 0), 0);
    /* SIGTERM is ignored; the ticks after the grace send SIGKILL */
    int status = 0;
    for (int i = 0; i < 200 && waitpid(child, &status, WNOHANG) == 0; i++)
        vram_sched_run_once(s, 50);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    close(ready[0]);
    close(ready[1]);
    vram_sched_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(admits_what_fits_and_queues_the_rest),
        cmocka_unit_test(shutdown_admits_nothing),
        cmocka_unit_test(priority_then_arrival),
        cmocka_unit_test(backfill_lets_small_jobs_pass),
        cmocka_unit_test(multi_gpu_all_or_nothing),
        cmocka_unit_test(placement_policies_and_pinning),
        cmocka_unit_test(degrades_batch_with_accumulation),
        cmocka_unit_test(queued_jobs_time_out),
        cmocka_unit_test(limits_and_validation),
        cmocka_unit_test(only_owner_or_root_cancels),
        cmocka_unit_test(process_exit_releases),
        cmocka_unit_test(dead_queued_clients_are_dropped),
        cmocka_unit_test(reload_after_crash),
        cmocka_unit_test(leases_expire_unless_renewed),
        cmocka_unit_test(peak_reports_keep_the_maximum),
        cmocka_unit_test(usage_watch_flags_overuse),
        cmocka_unit_test(failed_transactions_change_nothing),
        cmocka_unit_test(exit_status_is_committed_before_its_file_goes),
        cmocka_unit_test(concurrent_clients),
        cmocka_unit_test(randomized_against_reference),
        cmocka_unit_test(degrades_to_the_estimate_at_the_batch),
        cmocka_unit_test(per_uid_quotas),
        cmocka_unit_test(pid_must_be_the_callers),
        cmocka_unit_test(waits_for_a_change),
        cmocka_unit_test(queue_positions_follow_the_order),
        cmocka_unit_test(events_are_told_after_commit_only),
        cmocka_unit_test(cancel_terminates_then_kills),
        cmocka_unit_test(every_pass_records_why_a_job_waits),
        cmocka_unit_test(ended_jobs_are_pruned_after_the_retention),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
