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
 *   FAKE_CUDA_VMM=0            no virtual memory management (attribute 102 is 0)
 *   FAKE_CUDA_GRANULARITY=size VMM granularity (default 2M)
 *
 * Virtual memory management is strict about the documented contract:
 * reservations, chunk sizes and mapping addresses are multiples of the
 * granularity; a handle is mapped whole (offset 0) at an address inside a
 * reservation that nothing else is mapped over; access is set on exactly a
 * mapped range, and memory is usable (cuMemsetD8_v2) only once it is; a
 * mapping is unmapped whole; cuMemAddressFree refuses a range with mappings,
 * and cuMemRelease a mapped handle (the driver would defer the release; vram
 * always unmaps first, so the fake treats the other order as a bug).
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

/* Virtual memory: a reservation, or a handle (physical memory) and where
 * it is mapped (0: nowhere). */
typedef struct {
    CUdeviceptr addr;
    size_t bytes;
} fake_range_t;

typedef struct {
    CUmemGenericAllocationHandle id; /* 0: slot unused */
    size_t bytes;
    CUdeviceptr mapped_at;
    bool access; /* cuMemSetAccess READWRITE for its device */
} fake_handle_t;

enum { MAX_RESERVATIONS = 64, MAX_HANDLES = 65536 };

typedef struct {
    struct CUctx_st ctx;
    unsigned long long total, used_by_others, allocated;
    int sms;
    CUdeviceptr next_addr;
    fake_alloc_t *allocs;
    size_t nallocs, cap;
    CUdeviceptr next_va;
    fake_range_t reservations[MAX_RESERVATIONS];
    fake_handle_t *handles; /* MAX_HANDLES slots, allocated on first cuMemCreate */
    size_t handles_used;    /* slots below this index were used */
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
    bool vmm;
    unsigned long long granularity;
    fake_rules_t fail;
} cfg;
static CUmemGenericAllocationHandle next_handle = 1;
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
    cfg.vmm = fake_env_long("FAKE_CUDA_VMM", 1) != 0;
    cfg.granularity = fake_env_size_at("FAKE_CUDA_GRANULARITY", 0, 2ull << 20);
    fake_rules_parse(&cfg.fail, "FAKE_CUDA_FAIL");
    for (int i = 0; i < MAX_DEVICES; i++) {
        fake_device_t *d = &devices[i];
        free(d->allocs);
        free(d->handles);
        memset(d, 0, sizeof *d);
        d->ctx.device = i;
        d->total = fake_env_size_at("FAKE_CUDA_MEM", i, 16ull << 30);
        d->used_by_others = fake_env_size_at("FAKE_CUDA_USED", i, 0);
        d->sms = (int)fake_env_size_at("FAKE_CUDA_SMS", i, 132);
        /* Distinct, never reused address ranges per device: a stale or
         * foreign address is always recognised as unknown. */
        d->next_addr = 0x7f0000000000ull + ((CUdeviceptr)i << 40);
        d->next_va = 0x600000000000ull + ((CUdeviceptr)i << 40);
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
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *value = cfg.vmm;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice dev)
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
        free(d->handles);
        d->handles = NULL;
        d->handles_used = 0;
        memset(d->reservations, 0, sizeof d->reservations);
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

/* ---- virtual memory management ------------------------------------------ */

/* Entry checks of a call that needs a current, live context: *d is its device. */
static CUresult enter_current(const char *call, fake_device_t **d)
{
    *d = current_device();
    CUresult r = enter(call, *d ? (*d)->ctx.device : -1);
    if (r) return r;
    return *d ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static bool granular(unsigned long long n)
{
    return n && n % cfg.granularity == 0;
}

/* The device a CUmemAllocationProp / CUmemAccessDesc names, or NULL. */
static fake_device_t *device_at(const CUmemLocation *loc)
{
    return loc->type == CU_MEM_LOCATION_TYPE_DEVICE ? device_of(loc->id) : NULL;
}

static CUresult do_granularity(size_t *granularity, const CUmemAllocationProp *prop, int option)
{
    CUresult r = enter("cuMemGetAllocationGranularity", prop ? prop->location.id : -1);
    if (r) return r;
    if (!granularity || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        !device_at(&prop->location) || (option != 0 && option != 1))
        return CUDA_ERROR_INVALID_VALUE;
    if (!cfg.vmm) return CUDA_ERROR_NOT_SUPPORTED;
    *granularity = cfg.granularity;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    LOCKED(do_granularity(granularity, prop, option));
}

static CUresult do_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                           unsigned long long flags)
{
    fake_device_t *d;
    CUresult r = enter_current("cuMemAddressReserve", &d);
    if (r) return r;
    if (!cfg.vmm) return CUDA_ERROR_NOT_SUPPORTED;
    if (!ptr || !granular(size) || flags || (alignment && alignment % cfg.granularity))
        return CUDA_ERROR_INVALID_VALUE;
    (void)addr; /* a hint */
    for (int i = 0; i < MAX_RESERVATIONS; i++) {
        if (d->reservations[i].bytes) continue;
        CUdeviceptr a =
            alignment ? (d->next_va + alignment - 1) / alignment * alignment : d->next_va;
        d->reservations[i] = (fake_range_t){a, size};
        d->next_va = a + size + cfg.granularity; /* never reused, never adjacent */
        *ptr = a;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags)
{
    LOCKED(do_reserve(ptr, size, alignment, addr, flags));
}

/* The reservation holding [addr, addr + size) of a live context's device. */
static fake_range_t *reservation_of(fake_device_t *d, CUdeviceptr addr, size_t size)
{
    for (int i = 0; d && i < MAX_RESERVATIONS; i++) {
        fake_range_t *res = &d->reservations[i];
        if (res->bytes && addr >= res->addr && addr - res->addr < res->bytes &&
            size <= res->bytes - (addr - res->addr))
            return res;
    }
    return NULL;
}

static bool overlaps_mapping(const fake_device_t *d, CUdeviceptr addr, size_t size)
{
    for (size_t i = 0; d->handles && i < d->handles_used; i++) {
        const fake_handle_t *h = &d->handles[i];
        if (h->id && h->mapped_at && h->mapped_at < addr + size && addr < h->mapped_at + h->bytes)
            return true;
    }
    return false;
}

static CUresult do_address_free(CUdeviceptr ptr, size_t size)
{
    fake_device_t *d;
    CUresult r = enter_current("cuMemAddressFree", &d);
    if (r) return r;
    fake_range_t *res = reservation_of(d, ptr, size);
    if (!res || res->addr != ptr || res->bytes != size || overlaps_mapping(d, ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    res->bytes = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    LOCKED(do_address_free(ptr, size));
}

static fake_handle_t *handle_of(fake_device_t **owner, CUmemGenericAllocationHandle id)
{
    for (int k = 0; id && k < cfg.devices; k++)
        for (size_t i = 0; devices[k].handles && i < devices[k].handles_used; i++)
            if (devices[k].handles[i].id == id) {
                *owner = &devices[k];
                return &devices[k].handles[i];
            }
    return NULL;
}

static CUresult do_create(CUmemGenericAllocationHandle *handle, size_t size,
                          const CUmemAllocationProp *prop, unsigned long long flags)
{
    fake_device_t *cur;
    CUresult r = enter_current("cuMemCreate", &cur);
    if (r) return r;
    if (!cfg.vmm) return CUDA_ERROR_NOT_SUPPORTED;
    fake_device_t *d = prop ? device_at(&prop->location) : NULL;
    if (!handle || !d || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !granular(size) || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (size > free_of(d)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!d->handles && !(d->handles = calloc(MAX_HANDLES, sizeof *d->handles)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < MAX_HANDLES; i++) {
        if (d->handles[i].id) continue;
        d->handles[i] = (fake_handle_t){next_handle++, size, 0, false};
        if (i >= d->handles_used) d->handles_used = i + 1;
        d->allocated += size;
        *handle = d->handles[i].id;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    LOCKED(do_create(handle, size, prop, flags));
}

static CUresult do_release_handle(CUmemGenericAllocationHandle id)
{
    fake_device_t *cur;
    CUresult r = enter_current("cuMemRelease", &cur);
    if (r) return r;
    fake_device_t *d = NULL;
    fake_handle_t *h = handle_of(&d, id);
    if (!h || h->mapped_at) return CUDA_ERROR_INVALID_VALUE; /* unknown, or still mapped */
    d->allocated -= h->bytes;
    memset(h, 0, sizeof *h);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    LOCKED(do_release_handle(handle));
}

static CUresult do_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle id,
                       unsigned long long flags)
{
    fake_device_t *cur;
    CUresult r = enter_current("cuMemMap", &cur);
    if (r) return r;
    fake_device_t *d = NULL;
    fake_handle_t *h = handle_of(&d, id);
    if (!h || h->mapped_at || offset || flags || size != h->bytes || ptr % cfg.granularity ||
        !reservation_of(cur, ptr, size) || overlaps_mapping(cur, ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    h->mapped_at = ptr;
    h->access = false;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    LOCKED(do_map(ptr, size, offset, handle, flags));
}

/* The handle of the current device mapped exactly at [ptr, ptr + size). */
static fake_handle_t *mapping_at(fake_device_t *d, CUdeviceptr ptr, size_t size)
{
    for (size_t i = 0; d->handles && i < d->handles_used; i++)
        if (d->handles[i].id && d->handles[i].mapped_at == ptr && d->handles[i].bytes == size)
            return &d->handles[i];
    return NULL;
}

static CUresult do_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                              size_t count)
{
    fake_device_t *d;
    CUresult r = enter_current("cuMemSetAccess", &d);
    if (r) return r;
    fake_handle_t *h = mapping_at(d, ptr, size);
    if (!h || !desc || count != 1 || device_at(&desc->location) != d ||
        desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    h->access = true;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count)
{
    LOCKED(do_set_access(ptr, size, desc, count));
}

static CUresult do_unmap(CUdeviceptr ptr, size_t size)
{
    fake_device_t *d;
    CUresult r = enter_current("cuMemUnmap", &d);
    if (r) return r;
    fake_handle_t *h = mapping_at(d, ptr, size);
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    h->mapped_at = 0;
    h->access = false;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    LOCKED(do_unmap(ptr, size));
}

/* A use of device memory: an allocation, or mapped memory with access set;
 * anything else is an illegal address, as a kernel touching it would be. */
static CUresult do_memset(CUdeviceptr dst, unsigned char value, size_t n)
{
    (void)value;
    fake_device_t *d;
    CUresult r = enter_current("cuMemsetD8_v2", &d);
    if (r) return r;
    for (size_t k = 0; k < d->nallocs; k++)
        if (dst >= d->allocs[k].addr && dst + n <= d->allocs[k].addr + d->allocs[k].bytes)
            return CUDA_SUCCESS;
    for (size_t i = 0; d->handles && i < d->handles_used; i++) {
        const fake_handle_t *h = &d->handles[i];
        if (h->id && h->mapped_at && dst >= h->mapped_at && dst + n <= h->mapped_at + h->bytes)
            return h->access ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    return CUDA_ERROR_ILLEGAL_ADDRESS;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    LOCKED(do_memset(dst, value, n));
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
        {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
         "API call requires a newer driver"},
        {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
        {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
         "system has unsupported display driver / cuda driver combination"},
        {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
         "forward compatibility was attempted on non supported HW"},
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

/* Each export has the type vram calls it through (cuda_api.h), which
 * tests/abi/ checks against NVIDIA's cuda.h: a fake that drifted from the
 * declarations does not build. */
#define EXPORTED_AS(symbol, fn_type)                                                               \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&symbol), fn_type), #symbol)
EXPORTED_AS(cuInit, cu_init_fn);
EXPORTED_AS(cuDriverGetVersion, cu_driver_get_version_fn);
EXPORTED_AS(cuDeviceGetCount, cu_device_get_count_fn);
EXPORTED_AS(cuDeviceGet, cu_device_get_fn);
EXPORTED_AS(cuDeviceGetName, cu_device_get_name_fn);
EXPORTED_AS(cuDeviceGetUuid, cu_device_get_uuid_fn);
EXPORTED_AS(cuDeviceGetUuid_v2, cu_device_get_uuid_fn);
EXPORTED_AS(cuDeviceTotalMem_v2, cu_device_total_mem_fn);
EXPORTED_AS(cuDeviceGetAttribute, cu_device_get_attribute_fn);
EXPORTED_AS(cuDevicePrimaryCtxRetain, cu_primary_ctx_retain_fn);
EXPORTED_AS(cuDevicePrimaryCtxRelease, cu_primary_ctx_release_fn);
EXPORTED_AS(cuDevicePrimaryCtxRelease_v2, cu_primary_ctx_release_fn);
EXPORTED_AS(cuCtxSetCurrent, cu_ctx_set_current_fn);
EXPORTED_AS(cuCtxGetCurrent, cu_ctx_get_current_fn);
EXPORTED_AS(cuMemGetInfo_v2, cu_mem_get_info_fn);
EXPORTED_AS(cuMemAlloc_v2, cu_mem_alloc_fn);
EXPORTED_AS(cuMemFree_v2, cu_mem_free_fn);
EXPORTED_AS(cuMemGetAllocationGranularity, cu_mem_get_allocation_granularity_fn);
EXPORTED_AS(cuMemAddressReserve, cu_mem_address_reserve_fn);
EXPORTED_AS(cuMemAddressFree, cu_mem_address_free_fn);
EXPORTED_AS(cuMemCreate, cu_mem_create_fn);
EXPORTED_AS(cuMemRelease, cu_mem_release_fn);
EXPORTED_AS(cuMemMap, cu_mem_map_fn);
EXPORTED_AS(cuMemUnmap, cu_mem_unmap_fn);
EXPORTED_AS(cuMemSetAccess, cu_mem_set_access_fn);
EXPORTED_AS(cuGetErrorName, cu_get_error_text_fn);
EXPORTED_AS(cuGetErrorString, cu_get_error_text_fn);
