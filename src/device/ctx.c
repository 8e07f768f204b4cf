/* vram_ctx_t: picks a backend, serializes calls into it, retries transient
 * driver errors and keeps each device's health.
 *
 * Health: a call that answers EAGAIN is retried with exponential backoff
 * (1 ms, 2 ms, ... at most 64 ms between tries, VRAM_DRIVER_RETRIES retries);
 * when the retries run out, or the driver answers a hard error, the device is
 * in ERROR with the driver's message until a later call succeeds. DISABLED is
 * the operator's switch and wins over everything else. */
#include "device/backend.h"
#include "device/ctx_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BACKOFF_MS 64

/* Per-device state the context keeps between calls (guarded by ctx->lock). */
typedef struct {
    bool disabled;
    bool failing;
    char error[160];
    char name[96], uuid[96]; /* last known, to name a device in ERROR */
} device_state_t;

struct vram_ctx {
    const vram_backend_ops_t *ops;
    void *state;
    pthread_mutex_t lock; /* serializes backend calls and guards devices[] */
    int count;
    int retries;
    char reason[1024];
    device_state_t *devices;
};

const char *vram_health_name(vram_health_t h)
{
    switch (h) {
    case VRAM_HEALTH_AVAILABLE:
        return "AVAILABLE";
    case VRAM_HEALTH_BUSY:
        return "BUSY";
    case VRAM_HEALTH_ERROR:
        return "ERROR";
    case VRAM_HEALTH_DISABLED:
        return "DISABLED";
    }
    return "UNKNOWN";
}

/* ---- opening ----------------------------------------------------- */

static int driver_retries(void)
{
    long long n = 3;
    if (vram_option_int(VRAM_OPT_DRIVER_RETRIES, &n) != 0 || n < 0) n = 3;
    return n > 10 ? 10 : (int)n;
}

/* Opens one backend and counts its devices; a backend without devices fails
 * with ENODEV so that auto moves on. */
static int open_ops(const vram_backend_ops_t *ops, vram_ctx_t **out)
{
    vram_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return vram_fail(VRAM_ENOMEM, "out of memory");
    ctx->ops = ops;
    int rc = ops->open(&ctx->state);
    if (rc) {
        free(ctx);
        /* Only VRAM_SIM is the user's input; a driver that calls an argument
         * invalid while loading is a driver problem, not a usage error. */
        return rc == VRAM_EINVAL && ops != &vram_backend_sim ? VRAM_EDRIVER : rc;
    }
    rc = ops->device_count(ctx->state, &ctx->count);
    if (!rc && ctx->count <= 0)
        rc = vram_fail(VRAM_ENODEV, "the %s backend reports no devices", ops->name);
    if (!rc) {
        ctx->devices = calloc((size_t)ctx->count, sizeof *ctx->devices);
        if (!ctx->devices) rc = vram_fail(VRAM_ENOMEM, "out of memory");
    }
    if (rc) {
        ops->close(ctx->state);
        free(ctx->devices);
        free(ctx);
        return rc;
    }
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->retries = driver_retries();
    *out = ctx;
    return 0;
}

int vram_ctx_open_ops(const vram_backend_ops_t *ops, vram_ctx_t **out)
{
    if (!ops || !out) return vram_fail(VRAM_EINVAL, "vram_ctx_open_ops: NULL argument");
    return open_ops(ops, out);
}

/* "no NVIDIA driver: libcuda.so.1 not found" reads better after the NVML
 * message without repeating its prefix. */
static const char *without_prefix(const char *msg)
{
    static const char prefix[] = "no NVIDIA driver: ";
    return strncmp(msg, prefix, sizeof prefix - 1) ? msg : msg + sizeof prefix - 1;
}

/* auto: a real driver when one answers, else sim when VRAM_SIM is set, else
 * cpu; the reason says why in one line. */
static int open_auto(vram_ctx_t **out)
{
    vram_ctx_t *ctx;
    char nvml_why[256], cuda_why[256], drivers[520];
    if (open_ops(&vram_backend_nvml, &ctx) == 0) {
        snprintf(ctx->reason, sizeof ctx->reason, "NVIDIA driver answered: %d GPU%s through NVML",
                 ctx->count, ctx->count == 1 ? "" : "s");
        *out = ctx;
        return 0;
    }
    snprintf(nvml_why, sizeof nvml_why, "%s", vram_last_error());
    if (open_ops(&vram_backend_cuda, &ctx) == 0) {
        snprintf(ctx->reason, sizeof ctx->reason, "NVML unavailable (%s); %d GPU%s through CUDA",
                 nvml_why, ctx->count, ctx->count == 1 ? "" : "s");
        *out = ctx;
        return 0;
    }
    snprintf(cuda_why, sizeof cuda_why, "%s", vram_last_error());
    if (!strcmp(without_prefix(nvml_why), without_prefix(cuda_why)))
        snprintf(drivers, sizeof drivers, "%s", nvml_why);
    else
        snprintf(drivers, sizeof drivers, "%s; %s", nvml_why, without_prefix(cuda_why));

    int rc;
    if (*vram_option_str(VRAM_OPT_SIM)) {
        /* The user asked for simulated GPUs: a bad spec is an error, not a
         * reason to fall back silently. */
        rc = open_ops(&vram_backend_sim, &ctx);
        if (rc) return rc;
        snprintf(ctx->reason, sizeof ctx->reason, "%s; using %d simulated GPU%s from VRAM_SIM",
                 drivers, ctx->count, ctx->count == 1 ? "" : "s");
    } else {
        rc = open_ops(&vram_backend_cpu, &ctx);
        if (rc) return rc;
        snprintf(ctx->reason, sizeof ctx->reason,
                 "%s; VRAM_SIM not set; using host memory (cpu backend)", drivers);
    }
    *out = ctx;
    return 0;
}

int vram_ctx_open_backend(const char *backend, vram_ctx_t **out)
{
    if (!out) return vram_fail(VRAM_EINVAL, "vram_ctx_open_backend: NULL out");
    if (!backend) return vram_fail(VRAM_EINVAL, "vram_ctx_open_backend: NULL backend");
    static const vram_backend_ops_t *const named[] = {&vram_backend_nvml, &vram_backend_cuda,
                                                      &vram_backend_sim, &vram_backend_cpu};
    if (!strcmp(backend, "auto") || !*backend) return open_auto(out); /* VRAM_BACKEND= */
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(backend, named[i]->name)) return open_ops(named[i], out);
    return vram_fail(VRAM_EINVAL,
                     "unknown device backend \"%s\" (VRAM_BACKEND: use auto, nvml, cuda, sim or "
                     "cpu)",
                     backend);
}

int vram_ctx_open(vram_ctx_t **out)
{
    return vram_ctx_open_backend(vram_option_str(VRAM_OPT_BACKEND), out);
}

void vram_ctx_close(vram_ctx_t *ctx)
{
    if (!ctx) return;
    ctx->ops->close(ctx->state);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx->devices);
    free(ctx);
}

const char *vram_ctx_backend(const vram_ctx_t *ctx)
{
    return ctx ? ctx->ops->name : "";
}

const char *vram_ctx_reason(const vram_ctx_t *ctx)
{
    return ctx ? ctx->reason : "";
}

int vram_ctx_device_count(const vram_ctx_t *ctx)
{
    return ctx ? ctx->count : 0;
}

/* ---- calls with retries and health -------------------------------- */

/* One backend call; `arg` carries its parameters and results. */
typedef int (*backend_call_fn)(vram_ctx_t *ctx, int index, void *arg);

/* Errors that say the device (or its driver) is failing, as opposed to the
 * caller's mistake (EINVAL), a full device (ENOMEM) or a missing feature
 * (ENOTSUP). The index was checked before the call, so ENODEV from the
 * backend means the GPU went away. */
static bool device_failure(int rc)
{
    return rc == VRAM_EAGAIN || rc == VRAM_EDRIVER || rc == VRAM_EIO || rc == VRAM_ENODEV ||
           rc == VRAM_EPERM || rc == VRAM_EBUSY;
}

static void backoff(int attempt)
{
    long ms = 1L << (attempt < 6 ? attempt : 6);
    if (ms > MAX_BACKOFF_MS) ms = MAX_BACKOFF_MS;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Runs a call under the lock; EAGAIN is retried with the lock released
 * during the backoff so other threads keep going. Records the outcome in the
 * device's health. */
static int call_device(vram_ctx_t *ctx, int index, backend_call_fn fn, void *arg)
{
    device_state_t *dev = &ctx->devices[index];
    for (int attempt = 0;; attempt++) {
        pthread_mutex_lock(&ctx->lock);
        int rc = fn(ctx, index, arg);
        if (rc == 0) {
            dev->failing = false;
            dev->error[0] = '\0';
        } else if (rc == VRAM_EAGAIN && attempt < ctx->retries) {
            pthread_mutex_unlock(&ctx->lock);
            backoff(attempt);
            continue;
        } else if (device_failure(rc)) {
            dev->failing = true;
            snprintf(dev->error, sizeof dev->error, "%s",
                     *vram_last_error() ? vram_last_error() : vram_strerror(rc));
            if (rc == VRAM_EAGAIN)
                rc = vram_fail(VRAM_EDRIVER, "device %d kept failing after %d retries: %s", index,
                               ctx->retries, dev->error);
        }
        pthread_mutex_unlock(&ctx->lock);
        return rc;
    }
}

static int check_device(const vram_ctx_t *ctx, int index)
{
    if (!ctx) return vram_fail(VRAM_EINVAL, "NULL device context");
    if (index < 0 || index >= ctx->count)
        return vram_fail(VRAM_ENODEV, "no device %d (%d device%s: 0-%d)", index, ctx->count,
                         ctx->count == 1 ? "" : "s", ctx->count - 1);
    return 0;
}

static int info_call(vram_ctx_t *ctx, int index, void *arg)
{
    return ctx->ops->device_info(ctx->state, index, arg);
}

void vram_device_info_init(vram_device_info_t *out, int index, const char *backend)
{
    memset(out, 0, sizeof *out);
    out->index = index;
    snprintf(out->backend, sizeof out->backend, "%s", backend);
    out->total_bytes = out->used_bytes = out->free_bytes = VRAM_UNKNOWN_U64;
    out->cc_major = out->cc_minor = VRAM_UNKNOWN_INT;
    out->multiprocessors = out->utilization_pct = out->temperature_c = VRAM_UNKNOWN_INT;
    out->power_w = -1;
    out->health = VRAM_HEALTH_AVAILABLE;
}

/* Fully utilized, or (almost) no memory left: usable, but a poor choice. */
static bool saturated(const vram_device_info_t *d)
{
    if (d->utilization_pct >= 100) return true;
    return d->total_bytes != VRAM_UNKNOWN_U64 && d->free_bytes != VRAM_UNKNOWN_U64 &&
           d->free_bytes <= d->total_bytes / 100;
}

int vram_device_info(vram_ctx_t *ctx, int index, vram_device_info_t *out)
{
    int rc = check_device(ctx, index);
    if (rc) return rc;
    if (!out) return vram_fail(VRAM_EINVAL, "vram_device_info: NULL out");
    vram_device_info_t fresh;
    vram_device_info_init(&fresh, index, ctx->ops->name);
    rc = call_device(ctx, index, info_call, &fresh);
    device_state_t *dev = &ctx->devices[index];
    pthread_mutex_lock(&ctx->lock);
    if (rc == 0) {
        /* Backends may know two of the three memory figures. */
        if (fresh.total_bytes != VRAM_UNKNOWN_U64) {
            if (fresh.free_bytes == VRAM_UNKNOWN_U64 && fresh.used_bytes <= fresh.total_bytes)
                fresh.free_bytes = fresh.total_bytes - fresh.used_bytes;
            if (fresh.used_bytes == VRAM_UNKNOWN_U64 && fresh.free_bytes <= fresh.total_bytes)
                fresh.used_bytes = fresh.total_bytes - fresh.free_bytes;
        }
        snprintf(dev->name, sizeof dev->name, "%s", fresh.name);
        snprintf(dev->uuid, sizeof dev->uuid, "%s", fresh.uuid);
        fresh.health = saturated(&fresh) ? VRAM_HEALTH_BUSY : VRAM_HEALTH_AVAILABLE;
    } else if (device_failure(rc) && dev->failing) {
        /* Report the failing device rather than fail the listing, with the
         * names the backend managed to read before failing, or last time. */
        char name[sizeof fresh.name], uuid[sizeof fresh.uuid];
        snprintf(name, sizeof name, "%s", *fresh.name ? fresh.name : dev->name);
        snprintf(uuid, sizeof uuid, "%s", *fresh.uuid ? fresh.uuid : dev->uuid);
        vram_device_info_init(&fresh, index, ctx->ops->name);
        snprintf(fresh.name, sizeof fresh.name, "%s", name);
        snprintf(fresh.uuid, sizeof fresh.uuid, "%s", uuid);
        snprintf(fresh.error, sizeof fresh.error, "%s", dev->error);
        fresh.health = VRAM_HEALTH_ERROR;
        rc = 0;
    }
    if (rc == 0 && dev->disabled) fresh.health = VRAM_HEALTH_DISABLED;
    pthread_mutex_unlock(&ctx->lock);
    if (rc == 0) *out = fresh;
    return rc;
}

typedef struct {
    vram_process_info_t *procs;
    size_t cap;
    size_t *count;
} processes_args_t;

static int processes_call(vram_ctx_t *ctx, int index, void *arg)
{
    processes_args_t *a = arg;
    return ctx->ops->processes(ctx->state, index, a->procs, a->cap, a->count);
}

int vram_device_processes(vram_ctx_t *ctx, int index, vram_process_info_t *procs, size_t cap,
                          size_t *count)
{
    int rc = check_device(ctx, index);
    if (rc) return rc;
    if (!count || (cap && !procs))
        return vram_fail(VRAM_EINVAL, "vram_device_processes: NULL argument");
    if (!ctx->ops->processes)
        return vram_fail(VRAM_ENOTSUP, "the %s backend cannot list processes", ctx->ops->name);
    size_t n = 0;
    processes_args_t args = {procs, cap, &n};
    rc = call_device(ctx, index, processes_call, &args);
    if (rc == 0) *count = n;
    return rc;
}

typedef struct {
    size_t size;
    void *ptr;
} memory_args_t;

static int alloc_call(vram_ctx_t *ctx, int index, void *arg)
{
    memory_args_t *a = arg;
    return ctx->ops->alloc(ctx->state, index, a->size, &a->ptr);
}

static int free_call(vram_ctx_t *ctx, int index, void *arg)
{
    memory_args_t *a = arg;
    return ctx->ops->free(ctx->state, index, a->ptr);
}

int vram_device_alloc(vram_ctx_t *ctx, int index, size_t size, void **ptr)
{
    int rc = check_device(ctx, index);
    if (rc) return rc;
    if (!ptr) return vram_fail(VRAM_EINVAL, "vram_device_alloc: NULL ptr");
    if (!ctx->ops->alloc)
        return vram_fail(VRAM_ENOTSUP,
                         "the %s backend cannot allocate device memory (use VRAM_BACKEND=cuda)",
                         ctx->ops->name);
    pthread_mutex_lock(&ctx->lock);
    bool disabled = ctx->devices[index].disabled;
    pthread_mutex_unlock(&ctx->lock);
    if (disabled) return vram_fail(VRAM_ESTATE, "device %d is disabled", index);
    memory_args_t args = {size, NULL};
    rc = call_device(ctx, index, alloc_call, &args);
    if (rc == 0) *ptr = args.ptr;
    return rc;
}

int vram_device_free(vram_ctx_t *ctx, int index, void *ptr)
{
    int rc = check_device(ctx, index);
    if (rc) return rc;
    if (!ptr) return 0; /* like free(NULL) */
    if (!ctx->ops->free)
        return vram_fail(VRAM_ENOTSUP, "the %s backend cannot free device memory", ctx->ops->name);
    memory_args_t args = {0, ptr};
    return call_device(ctx, index, free_call, &args);
}

/* ---- virtual device memory (vram_device_vmm_*) ------------------------ */

typedef enum { VMM_GRANULARITY, VMM_RESERVE, VMM_UNRESERVE, VMM_MAP, VMM_UNMAP, VMM_MOVE } vmm_op_t;

typedef struct {
    vmm_op_t op;
    size_t size;
    void *addr;
    void *to; /* VMM_MOVE */
} vmm_args_t;

static int vmm_call(vram_ctx_t *ctx, int index, void *arg)
{
    vmm_args_t *a = arg;
    const vram_backend_ops_t *o = ctx->ops;
    switch (a->op) {
    case VMM_GRANULARITY:
        return o->vmm_granularity(ctx->state, index, &a->size);
    case VMM_RESERVE:
        return o->vmm_reserve(ctx->state, index, a->size, &a->addr);
    case VMM_UNRESERVE:
        return o->vmm_unreserve(ctx->state, index, a->addr, a->size);
    case VMM_MAP:
        return o->vmm_map(ctx->state, index, a->addr, a->size);
    case VMM_UNMAP:
        return o->vmm_unmap(ctx->state, index, a->addr, a->size);
    case VMM_MOVE:
        return o->vmm_move(ctx->state, index, a->addr, a->to, a->size);
    }
    return VRAM_EINVAL;
}

static int vmm(vram_ctx_t *ctx, int index, vmm_args_t *a, const char *name)
{
    int rc = check_device(ctx, index);
    if (rc) return rc;
    /* A backend has all six or none. */
    if (!ctx->ops->vmm_granularity)
        return vram_fail(VRAM_ENOTSUP, "%s: the %s backend has no virtual memory management", name,
                         ctx->ops->name);
    if (a->op == VMM_MAP) {
        pthread_mutex_lock(&ctx->lock);
        bool disabled = ctx->devices[index].disabled;
        pthread_mutex_unlock(&ctx->lock);
        if (disabled) return vram_fail(VRAM_ESTATE, "device %d is disabled", index);
    }
    return call_device(ctx, index, vmm_call, a);
}

int vram_device_vmm_granularity(vram_ctx_t *ctx, int index, size_t *granularity)
{
    if (!granularity) return vram_fail(VRAM_EINVAL, "vram_device_vmm_granularity: NULL argument");
    vmm_args_t a = {VMM_GRANULARITY, 0, NULL, NULL};
    int rc = vmm(ctx, index, &a, "vram_device_vmm_granularity");
    if (!rc) *granularity = a.size;
    return rc;
}

int vram_device_vmm_reserve(vram_ctx_t *ctx, int index, size_t size, void **va)
{
    if (!va) return vram_fail(VRAM_EINVAL, "vram_device_vmm_reserve: NULL argument");
    vmm_args_t a = {VMM_RESERVE, size, NULL, NULL};
    int rc = vmm(ctx, index, &a, "vram_device_vmm_reserve");
    if (!rc) *va = a.addr;
    return rc;
}

int vram_device_vmm_unreserve(vram_ctx_t *ctx, int index, void *va, size_t size)
{
    vmm_args_t a = {VMM_UNRESERVE, size, va, NULL};
    return vmm(ctx, index, &a, "vram_device_vmm_unreserve");
}

int vram_device_vmm_map(vram_ctx_t *ctx, int index, void *addr, size_t size)
{
    vmm_args_t a = {VMM_MAP, size, addr, NULL};
    return vmm(ctx, index, &a, "vram_device_vmm_map");
}

int vram_device_vmm_unmap(vram_ctx_t *ctx, int index, void *addr, size_t size)
{
    vmm_args_t a = {VMM_UNMAP, size, addr, NULL};
    return vmm(ctx, index, &a, "vram_device_vmm_unmap");
}

int vram_device_vmm_move(vram_ctx_t *ctx, int index, void *from, void *to, size_t size)
{
    vmm_args_t a = {VMM_MOVE, size, from, to};
    return vmm(ctx, index, &a, "vram_device_vmm_move");
}

int vram_device_set_disabled(vram_ctx_t *ctx, int index, bool disabled)
{
    int rc = check_device(ctx, index);
    if (rc) return rc;
    pthread_mutex_lock(&ctx->lock);
    ctx->devices[index].disabled = disabled;
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

/* Higher is better: free memory, discounted by utilization (a fully busy
 * device counts half) and by BUSY health (another half). */
static double device_score(const vram_device_info_t *d)
{
    double score = (double)d->free_bytes;
    if (d->utilization_pct > 0)
        score *= 1.0 - (d->utilization_pct > 100 ? 100 : d->utilization_pct) / 200.0;
    if (d->health == VRAM_HEALTH_BUSY) score *= 0.5;
    return score;
}

int vram_device_select(vram_ctx_t *ctx, uint64_t need, int *index)
{
    if (!ctx || !index) return vram_fail(VRAM_EINVAL, "vram_device_select: NULL argument");
    int best = -1;
    double best_score = -1;
    char why[400] = "";
    size_t used = 0;
    for (int i = 0; i < ctx->count; i++) {
        vram_device_info_t d;
        int rc = vram_device_info(ctx, i, &d);
        char note[64] = "";
        if (rc)
            snprintf(note, sizeof note, "%s", vram_err_name(rc));
        else if (d.health == VRAM_HEALTH_ERROR || d.health == VRAM_HEALTH_DISABLED)
            snprintf(note, sizeof note, "%s", vram_health_name(d.health));
        else if (d.free_bytes == VRAM_UNKNOWN_U64)
            snprintf(note, sizeof note, "free memory unknown");
        else if (d.free_bytes < need) {
            char have[32];
            snprintf(note, sizeof note, "%s free",
                     vram_format_size(d.free_bytes, have, sizeof have));
        }
        if (*note) {
            if (used < sizeof why)
                used += (size_t)snprintf(why + used, sizeof why - used, "%s%d: %s",
                                         used ? "; " : "", i, note);
            continue;
        }
        double score = device_score(&d);
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    if (best < 0) {
        char want[32];
        return vram_fail(VRAM_ENODEV, "no healthy device has %s free (%s)",
                         vram_format_size(need, want, sizeof want), why);
    }
    *index = best;
    return 0;
}
