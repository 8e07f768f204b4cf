/* A context as a device source: the callbacks the scheduler and the watch
 * take, so tests can hand them fake devices instead. */
#include "sched/device_source.h"

static int ctx_count(void *arg)
{
    return vram_ctx_device_count(arg);
}

static int ctx_info(void *arg, int index, vram_device_info_t *out)
{
    return vram_device_info(arg, index, out);
}

static int ctx_procs(void *arg, int index, vram_process_info_t *p, size_t cap, size_t *n)
{
    return vram_device_processes(arg, index, p, cap, n);
}

vram_sched_devices_t vram_ctx_device_source(vram_ctx_t *ctx)
{
    return (vram_sched_devices_t){ctx_count, ctx_info, ctx_procs, ctx};
}
