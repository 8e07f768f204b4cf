/* A fake libcuda.so.1 for tests: a strict double of the CUDA driver calls vram
 * makes. Like the real driver it refuses calls before cuInit
 * (CUDA_ERROR_NOT_INITIALIZED), memory calls without a current, live context
 * (CUDA_ERROR_INVALID_CONTEXT), freeing an address it did not hand out
 * (CUDA_ERROR_INVALID_VALUE) and allocations beyond free memory
 * (CUDA_ERROR_OUT_OF_MEMORY); releasing a primary context for the last time
 * destroys it and its allocations. Device addresses are not host memory.
 *
 * Knobs (environment, read by cuInit while no context is retained). Lists
 * are comma-separated per device; the last element repeats.
 *   FAKE_CUDA_DEVICES=N        device count (default 1; 0: cuInit answers NO_DEVICE)
 *   FAKE_CUDA_NAME=text        device name (default "NVIDIA Fake H100 80GB HBM3")
 *   FAKE_CUDA_MEM=sizes        total memory (default 16G); K/M/G/T binary suffixes
 *   FAKE_CUDA_USED=sizes       memory other processes hold (default 0)
 *   FAKE_CUDA_CC=M.m           compute capability (default 9.0)
 *   FAKE_CUDA_SMS=counts       multiprocessors (default 132)
 *   FAKE_CUDA_DRIVER_VERSION=N cuDriverGetVersion (default 12040)
 *   FAKE_CUDA_STUB=1           behave like the toolkit's stub libcuda.so: every
 *                              call answers CUDA_ERROR_STUB_LIBRARY (34)
 *   FAKE_CUDA_FAIL="call[@dev]=code[:times],..."  make `call` return CUDA code
 *                              `code` always, or only the first `times` calls
 */
#include "device/cuda_api.h"
#include "fake_common.h"

#include <pthread.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))

enum { MAX_DEVICES = 16, ALIGN = 512 };

typedef struct {
    CUdeviceptr addr;
    size_t bytes;
} fake_alloc_t;

/* A primary context: the handle handed out is its address. */
struct CUctx_st {
    int device;
    int refcount; /* 0: inactive (never retained, or released for the last time) */
};

typedef struct {
    struct CUctx_st ctx;
    unsigned long long total, used_by_others, allocated;
    int sms;
    CUdeviceptr next_addr;
    fake_alloc_t *allocs;
    size_t nallocs, cap;
} fake_device_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool initialized;
static _Thread_local CUcontext current;
static struct {
    int devices;
    char name[96];
    int cc_major, cc_minor;
    int driver_version;
    bool stub;
    fake_rules_t fail;
} cfg;
static fake_device_t devices[MAX_DEVICES];
static bool configured;

static void load_config(void)
{
    long n = fake_env_long("FAKE_CUDA_DEVICES", 1);
    cfg.devices = n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : (int)n;
    const char *name = getenv("FAKE_CUDA_NAME");
    snprintf(cfg.name, sizeof cfg.name, "%s", name ? name : "NVIDIA Fake H100 80GB HBM3");
    cfg.cc_major = 9;
    cfg.cc_minor = 0;
    const char *cc = getenv("FAKE_CUDA_CC");
    if (cc) sscanf(cc, "%d.%d", &cfg.cc_major, &cfg.cc_minor);
    cfg.driver_version = (int)fake_env_long("FAKE_CUDA_DRIVER_VERSION", 12040);
    cfg.stub = fake_env_flag("FAKE_CUDA_STUB");
    fake_rules_parse(&cfg.fail, "FAKE_CUDA_FAIL");
    for (int i = 0; i < MAX_DEVICES; i++) {
        fake_device_t *d = &devices[i];
        free(d->allocs);
        memset(d, 0, sizeof *d);
        d->ctx.device = i;
        d->total = fake_env_size_at("FAKE_CUDA_MEM", i, 16ull << 30);
        d->used_by_others = fake_env_size_at("FAKE_CUDA_USED", i, 0);
        d->sms = (int)fake_env_size_at("FAKE_CUDA_SMS", i, 132);
        /* Distinct, never reused address ranges per device: a stale or
         * foreign address is always recognised as unknown. */
        d->next_addr = 0x7f0000000000ull + ((CUdeviceptr)i << 40);
    }
    configured = true;
}

static bool any_context_live(void)
{
    for (int i = 0; i < MAX_DEVICES; i++)
        if (devices[i].ctx.refcount > 0) return true;
    return false;
}

/* Common entry checks: stub mode, initialization, injected failures. */
static CUresult enter(const char *call, int device)
{
    if (cfg.stub) return CUDA_ERROR_STUB_LIBRARY;
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    int code = fake_rules_check(&cfg.fail, call, device);
    return code ? (CUresult)code : CUDA_SUCCESS;
}

static fake_device_t *device_of(CUdevice dev)
{
    return dev >= 0 && dev < cfg.devices ? &devices[dev] : NULL;
}

/* The current context, when it is one of ours and alive. */
static fake_device_t *current_device(void)
{
    for (int i = 0; i < cfg.devices; i++)
        if (current == &devices[i].ctx) return devices[i].ctx.refcount > 0 ? &devices[i] : NULL;
    return NULL;
}

#define LOCKED(expr)                                                                               \
    do {                                                                                           \
        pthread_mutex_lock(&lock);                                                                 \
        CUresult r_ = (expr);                                                                      \
        pthread_mutex_unlock(&lock);                                                               \
        return r_;                                                                                 \
    } while (0)

static CUresult do_init(unsigned int flags)
{
    /* Re-read the knobs whenever nothing depends on the old ones, so a test
     * can reconfigure between opens. */
    if (!configured || !any_context_live()) {
        load_config();
        initialized = false;
    }
    if (cfg.stub) return CUDA_ERROR_STUB_LIBRARY;
    int code = fake_rules_check(&cfg.fail, "cuInit", -1);
    if (code) return code;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (cfg.devices == 0) return CUDA_ERROR_NO_DEVICE;
    initialized = true;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags)
{
    LOCKED(do_init(flags));
}

static CUresult do_driver_version(int *version)
{
    if (!configured) load_config();
    if (cfg.stub) return CUDA_ERROR_STUB_LIBRARY;
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = cfg.driver_version; /* allowed before cuInit */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *version)
{
    LOCKED(do_driver_version(version));
}

static CUresult do_count(int *count)
{
    CUresult r = enter("cuDeviceGetCount", -1);
    if (r) return r;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = cfg.devices;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
    LOCKED(do_count(count));
}

static CUresult do_get(CUdevice *device, int ordinal)
{
    CUresult r = enter("cuDeviceGet", ordinal);
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!device_of(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    LOCKED(do_get(device, ordinal));
}

static CUresult do_name(char *name, int len, CUdevice dev)
{
    CUresult r = enter("cuDeviceGetName", dev);
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!device_of(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", cfg.name); /* the driver truncates */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    LOCKED(do_name(name, len, dev));
}

static CUresult do_uuid(const char *call, CUuuid *uuid, CUdevice dev)
{
    CUresult r = enter(call, dev);
    if (r) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!device_of(dev)) return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid, 0, sizeof *uuid);
    uuid->bytes[0] = (char)0xc0;
    uuid->bytes[1] = (char)0xda;
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    LOCKED(do_uuid("cuDeviceGetUuid", uuid, dev));
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    LOCKED(do_uuid("cuDeviceGetUuid_v2", uuid, dev));
}

static CUresult do_total(size_t *bytes, CUdevice dev)
{
    CUresult r = enter("cuDeviceTotalMem_v2", dev);
    if (r) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!device_of(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = devices[dev].total;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    LOCKED(do_total(bytes, dev));
}

static CUresult do_attribute(int *value, int attribute, CUdevice dev)
{
    CUresult r = enter("cuDeviceGetAttribute", dev);
    if (r) return r;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (!device_of(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *value = devices[dev].sms;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = cfg.cc_major;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = cfg.cc_minor;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice dev)
{
    LOCKED(do_attribute(value, attribute, dev));
}

static CUresult do_retain(CUcontext *ctx, CUdevice dev)
{
    CUresult r = enter("cuDevicePrimaryCtxRetain", dev);
    if (r) return r;
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    fake_device_t *d = device_of(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    d->ctx.refcount++;
    *ctx = &d->ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    LOCKED(do_retain(ctx, dev));
}

static CUresult do_release(const char *call, CUdevice dev)
{
    CUresult r = enter(call, dev);
    if (r) return r;
    fake_device_t *d = device_of(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    if (d->ctx.refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--d->ctx.refcount == 0) {
        /* The last release destroys the context and everything in it. */
        free(d->allocs);
        d->allocs = NULL;
        d->nallocs = d->cap = 0;
        d->allocated = 0;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    LOCKED(do_release("cuDevicePrimaryCtxRelease", dev));
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    LOCKED(do_release("cuDevicePrimaryCtxRelease_v2", dev));
}

static CUresult do_set_current(CUcontext ctx)
{
    CUresult r = enter("cuCtxSetCurrent", ctx ? ctx->device : -1);
    if (r) return r;
    if (ctx) {
        bool ours = false;
        for (int i = 0; i < cfg.devices; i++)
            ours |= ctx == &devices[i].ctx;
        if (!ours) return CUDA_ERROR_INVALID_CONTEXT;
    }
    current = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    LOCKED(do_set_current(ctx));
}

static CUresult do_get_current(CUcontext *ctx)
{
    CUresult r = enter("cuCtxGetCurrent", -1);
    if (r) return r;
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    LOCKED(do_get_current(ctx));
}

static unsigned long long free_of(const fake_device_t *d)
{
    unsigned long long taken = d->used_by_others + d->allocated;
    return taken < d->total ? d->total - taken : 0;
}

static CUresult do_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    fake_device_t *d = current_device();
    CUresult r = enter("cuMemGetInfo_v2", d ? d->ctx.device : -1);
    if (r) return r;
    if (!d) return CUDA_ERROR_INVALID_CONTEXT;
    if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
    *free_bytes = free_of(d);
    *total_bytes = d->total;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    LOCKED(do_mem_info(free_bytes, total_bytes));
}

static CUresult do_alloc(CUdeviceptr *ptr, size_t bytes)
{
    fake_device_t *d = current_device();
    CUresult r = enter("cuMemAlloc_v2", d ? d->ctx.device : -1);
    if (r) return r;
    if (!d) return CUDA_ERROR_INVALID_CONTEXT;
    if (!ptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (bytes > free_of(d)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (d->nallocs == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        fake_alloc_t *a = realloc(d->allocs, cap * sizeof *a);
        if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
        d->allocs = a;
        d->cap = cap;
    }
    d->allocs[d->nallocs].addr = d->next_addr;
    d->allocs[d->nallocs].bytes = bytes;
    d->nallocs++;
    d->allocated += bytes;
    *ptr = d->next_addr;
    d->next_addr += (bytes + ALIGN - 1) / ALIGN * ALIGN;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes)
{
    LOCKED(do_alloc(ptr, bytes));
}

static CUresult do_free(CUdeviceptr ptr)
{
    fake_device_t *d = current_device();
    CUresult r = enter("cuMemFree_v2", d ? d->ctx.device : -1);
    if (r) return r;
    if (!d) return CUDA_ERROR_INVALID_CONTEXT;
    /* Unified addressing: any live context may free any device's memory. */
    for (int i = 0; i < cfg.devices; i++) {
        fake_device_t *owner = &devices[i];
        for (size_t k = 0; k < owner->nallocs; k++) {
            if (owner->allocs[k].addr != ptr) continue;
            owner->allocated -= owner->allocs[k].bytes;
            owner->allocs[k] = owner->allocs[--owner->nallocs];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    LOCKED(do_free(ptr));
}

static const char *const error_names[][2] = {
    {"CUDA_SUCCESS", "no error"},
    {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
};

static CUresult describe(CUresult error, const char **out, int which)
{
    if (cfg.stub) return CUDA_ERROR_STUB_LIBRARY;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = NULL;
    if (error >= 0 && error < (int)(sizeof error_names / sizeof error_names[0])) {
        *out = error_names[error][which];
        return CUDA_SUCCESS;
    }
    static const struct {
        CUresult code;
        const char *name, *text;
    } more[] = {
        {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
        {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
        {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
        {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
        {CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE",
         "uncorrectable ECC error encountered"},
        {CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "timeout occurred"},
        {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        if (more[i].code == error) {
            *out = which ? more[i].text : more[i].name;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **name)
{
    LOCKED(describe(error, name, 0));
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **text)
{
    LOCKED(describe(error, text, 1));
}
