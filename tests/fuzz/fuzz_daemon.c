/* The fake daemon behind the HTTP fuzz targets. */
#include "fuzz.h"
#include "fuzz_daemon.h"

#include <unistd.h>

static int fake_count(void *arg)
{
    (void)arg;
    return 2;
}

static int fake_info(void *arg, int i, vram_device_info_t *out)
{
    (void)arg;
    memset(out, 0, sizeof *out);
    out->index = i;
    snprintf(out->name, sizeof out->name, "fuzz%d", i);
    snprintf(out->backend, sizeof out->backend, "sim");
    out->total_bytes = out->free_bytes = (i ? 24ull : 80ull) << 30;
    out->health = VRAM_HEALTH_AVAILABLE;
    return 0;
}

static double fixed_clock(void)
{
    return 1e9;
}

static const vram_sched_devices_t fake_devices = {fake_count, fake_info, NULL, NULL};

void fuzz_daemon_open(vramd_state_t *st)
{
    if (st->sched) return;
    vram_sched_config_t c;
    memset(&c, 0, sizeof c);
    c.db_path = ":memory:";
    c.devices = &fake_devices;
    snprintf(c.safety_margin, sizeof c.safety_margin, "0.05");
    c.placement = VRAM_PLACE_BEST_FIT;
    c.backfill = true;
    c.clock = fixed_clock;
    FUZZ_CHECK(vram_sched_open(&c, &st->sched) == 0, "cannot open the scheduler");
    st->daemon_uid = getuid();
    snprintf(st->socket_path, sizeof st->socket_path, "/fuzz/vramd.sock");
}

int64_t fuzz_daemon_resident(vramd_state_t *st, int64_t known)
{
    vram_job_t job;
    if (known && vram_sched_job(st->sched, known, &job) == 0 && job.state == VRAM_JOB_RUNNING)
        return known;
    vram_job_request_t big = {.name = "resident", .mem_bytes = 50ull << 30, .gpus = 1};
    big.uid = getuid();
    FUZZ_CHECK(vram_sched_submit(st->sched, &big, &job) == 0, "cannot start a job");
    return job.id;
}
