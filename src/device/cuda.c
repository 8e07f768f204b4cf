/* The cuda backend: devices and device memory through the CUDA driver API,
 * loaded at run time (VRAM_CUDA_LIBRARY, default libcuda.so.1). Memory calls
 * need a current context, so each device's primary context (the one the CUDA
 * runtime and PyTorch share) is retained on first use, made current around
 * each call and the caller's own current context restored afterwards. CUDA
 * codes are translated to VRAM_E* here, keeping the driver's name and message.
 *
 * The driver API cannot list other processes; `processes` reports this
 * process with the bytes it allocated through this backend. */
#include "core/map.h"
#include "device/backend.h"
#include "device/cuda_api.h"
#include "device/driver_util.h"
#include "core/proc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    CUdevice dev;
    CUcontext ctx;      /* retained primary context, NULL until first needed */
    vram_map_t sizes;   /* live allocations: address -> bytes */
    uint64_t allocated; /* sum of the live allocations' (and mapped chunks') bytes */
    /* Virtual memory: reservations (address -> bytes) and mapped chunks
     * (address -> handle, address -> bytes); granularity 0 until asked. */
    vram_map_t reservations, chunk_handles, chunk_bytes;
    size_t granularity;
} cuda_device_t;

typedef struct {
    void *lib;
    const char *path;
    struct {
        cu_init_fn init;
        cu_driver_get_version_fn driver_version;
        cu_device_get_count_fn device_count;
        cu_device_get_fn device_get;
        cu_device_get_name_fn device_name;
        cu_device_get_uuid_fn device_uuid;
        cu_device_total_mem_fn total_mem;
        cu_device_get_attribute_fn attribute;
        cu_primary_ctx_retain_fn ctx_retain;
        cu_primary_ctx_release_fn ctx_release;
        cu_ctx_set_current_fn ctx_set_current;
        cu_ctx_get_current_fn ctx_get_current;
        cu_mem_get_info_fn mem_get_info;
        cu_mem_alloc_fn mem_alloc;
        cu_mem_free_fn mem_free;
        cu_get_error_text_fn error_name, error_string;
        /* virtual memory management: all or none (see vmm_loaded) */
        cu_mem_get_allocation_granularity_fn mem_granularity;
        cu_mem_address_reserve_fn mem_address_reserve;
        cu_mem_address_free_fn mem_address_free;
        cu_mem_create_fn mem_create;
        cu_mem_release_fn mem_release;
        cu_mem_map_fn mem_map;
        cu_mem_unmap_fn mem_unmap;
        cu_mem_set_access_fn mem_set_access;
    } fn;
    int driver_version;
    int count;
    cuda_device_t *devices;
} cuda_state_t;

/* Names for the codes we meet, for libraries whose cuGetErrorName fails
 * (the toolkit stub answers every call with CUDA_ERROR_STUB_LIBRARY). */
static const char *known_name(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_INVALID_VALUE:
        return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
        return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
        return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY:
        return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE:
        return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT:
        return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_UNKNOWN:
        return "CUDA_ERROR_UNKNOWN";
    default:
        return NULL;
    }
}

/* Writes "CUDA_ERROR_X: driver's message" for r into buf. */
static const char *cuda_message(const cuda_state_t *st, CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    if (st->fn.error_name && st->fn.error_name(r, &name) != CUDA_SUCCESS) name = NULL;
    if (st->fn.error_string && st->fn.error_string(r, &text) != CUDA_SUCCESS) text = NULL;
    if (!name) name = known_name(r);
    if (name && text)
        snprintf(buf, len, "%s: %s", name, text);
    else if (name)
        snprintf(buf, len, "%s (CUDA error %d)", name, r);
    else
        snprintf(buf, len, "CUDA error %d", r);
    return buf;
}

/* The VRAM_E* code for a CUDA failure: transient ones become EAGAIN (the
 * context retries), sticky or configuration errors EDRIVER. INVALID_VALUE too:
 * we check our own arguments first, so the driver refusing them is its fault,
 * not the user's input (EINVAL). */
static int cuda_code(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return VRAM_ENOMEM;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
        return VRAM_ENODEV;
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
        return VRAM_EBUSY;
    case CUDA_ERROR_NOT_PERMITTED:
        return VRAM_EPERM;
    case CUDA_ERROR_NOT_SUPPORTED:
        return VRAM_ENOTSUP;
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_TIMEOUT:
    case CUDA_ERROR_UNKNOWN:
        return VRAM_EAGAIN;
    default: /* STUB_LIBRARY, SYSTEM_DRIVER_MISMATCH, ECC, ILLEGAL_ADDRESS, INVALID_CONTEXT, ... */
        return VRAM_EDRIVER;
    }
}

/* What cuInit's failures mean and what the user can do: the codes the driver
 * API reports for a machine that cannot run CUDA (cuda.h's descriptions;
 * docs/drivers.md). An old driver is CALL_REQUIRES_NEWER_DRIVER (36) or a
 * missing symbol (open says which); 35 is the runtime API's code, never the
 * driver's. */
static const struct {
    CUresult code;
    int vram_code;
    const char *what; /* "%s": the library's path */
} init_failures[] = {
    {CUDA_ERROR_STUB_LIBRARY, VRAM_EDRIVER,
     "%s is the CUDA toolkit's stub library, not a driver; install the NVIDIA driver or point "
     "VRAM_CUDA_LIBRARY at its libcuda.so.1"},
    {CUDA_ERROR_NO_DEVICE, VRAM_ENODEV, "no NVIDIA GPU: cuInit (%s) reports no device"},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, VRAM_EDRIVER,
     "the NVIDIA driver (%s) is older than vram's calls need; update the driver"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, VRAM_EDRIVER,
     "%s does not match the NVIDIA kernel module that is loaded (a driver upgraded without a "
     "reboot?); reboot, or load the module of the same version"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, VRAM_EDRIVER,
     "%s is a forward-compatibility driver that this GPU does not support; use the system "
     "driver's libcuda.so.1, or hide the GPU with CUDA_VISIBLE_DEVICES"},
    {CUDA_ERROR_SYSTEM_NOT_READY, VRAM_EAGAIN,
     "the system is not ready for CUDA work yet (%s); on NVSwitch machines, is "
     "nvidia-fabricmanager running?"},
};

/* The error for a failed cuInit: the table's explanation, else the driver's. */
static int init_failure(const cuda_state_t *st, CUresult r)
{
    char msg[160], what[384];
    cuda_message(st, r, msg, sizeof msg);
    for (size_t i = 0; i < sizeof init_failures / sizeof init_failures[0]; i++)
        if (init_failures[i].code == r) {
            snprintf(what, sizeof what, init_failures[i].what, st->path);
            return vram_fail(init_failures[i].vram_code, "%s (%s)", what, msg);
        }
    int code = cuda_code(r) == VRAM_EAGAIN ? VRAM_EAGAIN : VRAM_EDRIVER;
    return vram_fail(code, "no usable CUDA driver: cuInit failed: %s", msg);
}

static int cuda_fail(const cuda_state_t *st, CUresult r, const char *call, int index)
{
    char msg[160];
    cuda_message(st, r, msg, sizeof msg);
    if (index >= 0) return vram_fail(cuda_code(r), "%s(device %d): %s", call, index, msg);
    return vram_fail(cuda_code(r), "%s: %s", call, msg);
}

static void load_symbols(cuda_state_t *st)
{
    void *lib = st->lib;
    VRAM_DRIVER_LOAD(lib, st->fn.init, "cuInit");
    VRAM_DRIVER_LOAD(lib, st->fn.driver_version, "cuDriverGetVersion");
    VRAM_DRIVER_LOAD(lib, st->fn.device_count, "cuDeviceGetCount");
    VRAM_DRIVER_LOAD(lib, st->fn.device_get, "cuDeviceGet");
    VRAM_DRIVER_LOAD(lib, st->fn.device_name, "cuDeviceGetName");
    VRAM_DRIVER_LOAD(lib, st->fn.device_uuid, "cuDeviceGetUuid_v2");
    if (!st->fn.device_uuid) VRAM_DRIVER_LOAD(lib, st->fn.device_uuid, "cuDeviceGetUuid");
    VRAM_DRIVER_LOAD(lib, st->fn.total_mem, "cuDeviceTotalMem_v2");
    VRAM_DRIVER_LOAD(lib, st->fn.attribute, "cuDeviceGetAttribute");
    VRAM_DRIVER_LOAD(lib, st->fn.ctx_retain, "cuDevicePrimaryCtxRetain");
    VRAM_DRIVER_LOAD(lib, st->fn.ctx_release, "cuDevicePrimaryCtxRelease_v2");
    if (!st->fn.ctx_release) VRAM_DRIVER_LOAD(lib, st->fn.ctx_release, "cuDevicePrimaryCtxRelease");
    VRAM_DRIVER_LOAD(lib, st->fn.ctx_set_current, "cuCtxSetCurrent");
    VRAM_DRIVER_LOAD(lib, st->fn.ctx_get_current, "cuCtxGetCurrent");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_get_info, "cuMemGetInfo_v2");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_alloc, "cuMemAlloc_v2");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_free, "cuMemFree_v2");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_granularity, "cuMemGetAllocationGranularity");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_address_reserve, "cuMemAddressReserve");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_address_free, "cuMemAddressFree");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_create, "cuMemCreate");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_release, "cuMemRelease");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_map, "cuMemMap");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_unmap, "cuMemUnmap");
    VRAM_DRIVER_LOAD(lib, st->fn.mem_set_access, "cuMemSetAccess");
    VRAM_DRIVER_LOAD(lib, st->fn.error_name, "cuGetErrorName");
    VRAM_DRIVER_LOAD(lib, st->fn.error_string, "cuGetErrorString");
}

static const char *first_missing(const cuda_state_t *st)
{
    const struct {
        bool present;
        const char *name;
    } required[] = {
        {st->fn.init != NULL, "cuInit"},
        {st->fn.device_count != NULL, "cuDeviceGetCount"},
        {st->fn.device_get != NULL, "cuDeviceGet"},
        {st->fn.device_name != NULL, "cuDeviceGetName"},
        {st->fn.total_mem != NULL, "cuDeviceTotalMem_v2"},
        {st->fn.attribute != NULL, "cuDeviceGetAttribute"},
        {st->fn.ctx_retain != NULL, "cuDevicePrimaryCtxRetain"},
        {st->fn.ctx_release != NULL, "cuDevicePrimaryCtxRelease_v2"},
        {st->fn.ctx_set_current != NULL, "cuCtxSetCurrent"},
        {st->fn.ctx_get_current != NULL, "cuCtxGetCurrent"},
        {st->fn.mem_get_info != NULL, "cuMemGetInfo_v2"},
        {st->fn.mem_alloc != NULL, "cuMemAlloc_v2"},
        {st->fn.mem_free != NULL, "cuMemFree_v2"},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!required[i].present) return required[i].name;
    return NULL;
}

/* Makes device `index`'s primary context current on this thread (retaining
 * it the first time); *prev receives what was current, for restore_ctx. */
static int enter_ctx(cuda_state_t *st, int index, CUcontext *prev)
{
    cuda_device_t *d = &st->devices[index];
    CUresult r;
    if (!d->ctx) {
        CUcontext ctx = NULL;
        r = st->fn.ctx_retain(&ctx, d->dev);
        if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuDevicePrimaryCtxRetain", index);
        d->ctx = ctx;
    }
    *prev = NULL;
    r = st->fn.ctx_get_current(prev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuCtxGetCurrent", index);
    if (*prev != d->ctx) {
        r = st->fn.ctx_set_current(d->ctx);
        if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuCtxSetCurrent", index);
    }
    return 0;
}

static void leave_ctx(cuda_state_t *st, int index, CUcontext prev)
{
    if (prev != st->devices[index].ctx) st->fn.ctx_set_current(prev);
}

static void free_one(uint64_t addr, uint64_t bytes, void *arg)
{
    (void)bytes;
    cuda_state_t *st = arg;
    st->fn.mem_free((CUdeviceptr)addr);
}

static void cuda_vmm_close(cuda_state_t *st, cuda_device_t *d);

static void cuda_close(void *state)
{
    cuda_state_t *st = state;
    if (!st) return;
    for (int i = 0; st->devices && i < st->count; i++) {
        cuda_device_t *d = &st->devices[i];
        if (d->ctx) {
            /* Allocations left behind are freed: the primary context may outlive
             * us (the CUDA runtime shares it), and with it the memory. */
            CUcontext prev = NULL;
            if ((d->sizes.count || d->reservations.count) && enter_ctx(st, i, &prev) == 0) {
                vram_map_each(&d->sizes, free_one, st);
                cuda_vmm_close(st, d);
                leave_ctx(st, i, prev);
            }
            /* The thread's current context is left alone even when it is
             * this primary context: then the caller (or the CUDA runtime)
             * made it current, and it still holds its own reference. */
            st->fn.ctx_release(d->dev);
        }
        vram_map_clear(&d->sizes);
        vram_map_clear(&d->reservations);
        vram_map_clear(&d->chunk_handles);
        vram_map_clear(&d->chunk_bytes);
    }
    free(st->devices);
    vram_driver_dlclose(st->lib);
    free(st);
}

static int fail_open(cuda_state_t *st, int rc)
{
    cuda_close(st);
    return rc;
}

static int cuda_open(void **state)
{
    *state = NULL;
    cuda_state_t *st = calloc(1, sizeof *st);
    if (!st) return vram_fail(VRAM_ENOMEM, "cuda: out of memory");
    st->path = vram_option_str(VRAM_OPT_CUDA_LIBRARY);
    int rc = vram_driver_dlopen(st->path, &st->lib);
    if (rc) {
        free(st);
        return rc;
    }
    load_symbols(st);
    const char *missing = first_missing(st);
    if (missing)
        return fail_open(st, vram_fail(VRAM_EDRIVER, "%s is not a usable CUDA driver: it lacks %s",
                                       st->path, missing));
    CUresult r = st->fn.init(0);
    if (r != CUDA_SUCCESS) return fail_open(st, init_failure(st, r));
    if (st->fn.driver_version) st->fn.driver_version(&st->driver_version);
    r = st->fn.device_count(&st->count);
    if (r != CUDA_SUCCESS) return fail_open(st, cuda_fail(st, r, "cuDeviceGetCount", -1));
    if (st->count <= 0) {
        st->count = 0;
        return fail_open(st, vram_fail(VRAM_ENODEV, "no NVIDIA GPU: the CUDA driver reports 0 "
                                                    "devices"));
    }
    st->devices = calloc((size_t)st->count, sizeof *st->devices);
    if (!st->devices) return fail_open(st, vram_fail(VRAM_ENOMEM, "cuda: out of memory"));
    for (int i = 0; i < st->count; i++) {
        r = st->fn.device_get(&st->devices[i].dev, i);
        if (r != CUDA_SUCCESS) return fail_open(st, cuda_fail(st, r, "cuDeviceGet", i));
    }
    *state = st;
    return 0;
}

static int cuda_device_count(void *state, int *count)
{
    const cuda_state_t *st = state;
    *count = st->count;
    return 0;
}

static int check_index(const cuda_state_t *st, int index)
{
    if (index < 0 || index >= st->count)
        return vram_fail(VRAM_ENODEV, "cuda: no device %d (the driver reports %d)", index,
                         st->count);
    return 0;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it. */
static void format_uuid(const CUuuid *u, char *buf, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

static int read_attribute(cuda_state_t *st, int index, int attribute, int *out)
{
    int value = 0;
    CUresult r = st->fn.attribute(&value, attribute, st->devices[index].dev);
    if (r == CUDA_SUCCESS) {
        *out = value;
        return 0;
    }
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED)
        return 0; /* an attribute this driver does not know: stays unknown */
    return cuda_fail(st, r, "cuDeviceGetAttribute", index);
}

static int cuda_device_info(void *state, int index, vram_device_info_t *out)
{
    cuda_state_t *st = state;
    int rc = check_index(st, index);
    if (rc) return rc;
    CUdevice dev = st->devices[index].dev;
    vram_device_info_t info = *out; /* filled on a copy: a failure leaves *out as it was */
    info.index = index;
    snprintf(info.backend, sizeof info.backend, "cuda");
    char name[sizeof info.name] = "";
    CUresult r = st->fn.device_name(name, (int)sizeof name, dev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuDeviceGetName", index);
    snprintf(info.name, sizeof info.name, "%s", name);
    if (st->fn.device_uuid) {
        CUuuid uuid;
        memset(&uuid, 0, sizeof uuid);
        if (st->fn.device_uuid(&uuid, dev) == CUDA_SUCCESS)
            format_uuid(&uuid, info.uuid, sizeof info.uuid);
    }
    if ((rc = read_attribute(st, index, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                             &info.cc_major)) ||
        (rc = read_attribute(st, index, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                             &info.cc_minor)) ||
        (rc = read_attribute(st, index, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                             &info.multiprocessors)))
        return rc;

    size_t total_bytes = 0;
    r = st->fn.total_mem(&total_bytes, dev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuDeviceTotalMem_v2", index);

    /* Free memory needs a current context (the total does not). */
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    size_t free_bytes = 0, ctx_total = 0;
    r = st->fn.mem_get_info(&free_bytes, &ctx_total);
    leave_ctx(st, index, prev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuMemGetInfo_v2", index);
    if (free_bytes > total_bytes) free_bytes = total_bytes;
    info.total_bytes = total_bytes;
    info.free_bytes = free_bytes;
    info.used_bytes = total_bytes >= free_bytes ? total_bytes - free_bytes : 0;
    *out = info;
    return 0;
}

static int cuda_processes(void *state, int index, vram_process_info_t *procs, size_t cap,
                          size_t *count)
{
    cuda_state_t *st = state;
    *count = 0;
    int rc = check_index(st, index);
    if (rc) return rc;
    const cuda_device_t *d = &st->devices[index];
    if (!d->allocated) return 0;
    if (cap > 0) {
        procs[0].pid = getpid();
        procs[0].used_bytes = d->allocated;
        vram_proc_name(procs[0].pid, procs[0].name, sizeof procs[0].name);
    }
    *count = 1;
    return 0;
}

static int cuda_alloc(void *state, int index, size_t size, void **ptr)
{
    cuda_state_t *st = state;
    *ptr = NULL;
    int rc = check_index(st, index);
    if (rc) return rc;
    if (size == 0) return vram_fail(VRAM_EINVAL, "cuda: allocation of 0 bytes on device %d", index);
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    CUdeviceptr addr = 0;
    CUresult r = st->fn.mem_alloc(&addr, size);
    if (r == CUDA_SUCCESS && !vram_map_put(&st->devices[index].sizes, addr, size)) {
        st->fn.mem_free(addr); /* cannot track it, so do not hand it out */
        leave_ctx(st, index, prev);
        return vram_fail(VRAM_ENOMEM, "cuda: out of host memory tracking an allocation");
    }
    leave_ctx(st, index, prev);
    if (r != CUDA_SUCCESS) {
        char what[64], msg[160];
        snprintf(what, sizeof what, "cuMemAlloc_v2(%zu bytes)", size);
        cuda_message(st, r, msg, sizeof msg);
        return vram_fail(cuda_code(r), "%s on device %d: %s", what, index, msg);
    }
    st->devices[index].allocated += size;
    *ptr = (void *)(uintptr_t)addr;
    return 0;
}

static int cuda_free(void *state, int index, void *ptr)
{
    cuda_state_t *st = state;
    int rc = check_index(st, index);
    if (rc) return rc;
    if (!ptr) return 0;
    cuda_device_t *d = &st->devices[index];
    uint64_t addr = (uint64_t)(uintptr_t)ptr, bytes = 0;
    if (!vram_map_get(&d->sizes, addr, &bytes))
        return vram_fail(VRAM_EINVAL, "cuda: %p was not allocated on device %d by this context",
                         ptr, index);
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    CUresult r = st->fn.mem_free((CUdeviceptr)addr);
    leave_ctx(st, index, prev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuMemFree_v2", index);
    vram_map_take(&d->sizes, addr, NULL);
    d->allocated -= bytes;
    return 0;
}

/* ---- virtual memory (VMM): reservations backed by mapped chunks ------- */

/* Each chunk is one cuMemCreate'd handle mapped at one address and made
 * readable and writable by its device (cuMemSetAccess, without which the
 * device may not touch it); unmapping releases the handle too, and a
 * reservation goes back only with nothing mapped: the order the driver API
 * reference prescribes. Arguments are checked here against what we reserved
 * and mapped, so a contract violation is EINVAL, not a driver error. */

static bool vmm_loaded(const cuda_state_t *st)
{
    return st->fn.mem_granularity && st->fn.mem_address_reserve && st->fn.mem_address_free &&
           st->fn.mem_create && st->fn.mem_release && st->fn.mem_map && st->fn.mem_unmap &&
           st->fn.mem_set_access;
}

static CUmemAllocationProp device_prop(const cuda_device_t *d)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = d->dev;
    return prop;
}

static int cuda_vmm_granularity(void *state, int index, size_t *granularity)
{
    cuda_state_t *st = state;
    int rc = check_index(st, index);
    if (rc) return rc;
    cuda_device_t *d = &st->devices[index];
    if (d->granularity) {
        *granularity = d->granularity;
        return 0;
    }
    int supported = 0;
    if (vmm_loaded(st)) {
        rc = read_attribute(st, index, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                            &supported);
        if (rc) return rc;
    }
    if (!supported)
        return vram_fail(VRAM_ENOTSUP,
                         "cuda: device %d (driver %s) has no virtual memory management", index,
                         st->path);
    CUmemAllocationProp prop = device_prop(d);
    size_t g = 0;
    CUresult r = st->fn.mem_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuMemGetAllocationGranularity", index);
    if (!g || (g & (g - 1)))
        return vram_fail(VRAM_EDRIVER, "cuda: device %d reports granularity %zu", index, g);
    d->granularity = g;
    *granularity = g;
    return 0;
}

/* The granularity, and whether size (and addr) are multiples of it. */
static int check_granules(cuda_state_t *st, int index, uint64_t addr, size_t size, const char *what)
{
    size_t g;
    int rc = cuda_vmm_granularity(st, index, &g);
    if (rc) return rc;
    if (!size || size % g || addr % g)
        return vram_fail(VRAM_EINVAL,
                         "cuda: %s of %zu bytes at %#llx is not a multiple of the granularity "
                         "(%zu) on device %d",
                         what, size, (unsigned long long)addr, g, index);
    return 0;
}

static int cuda_vmm_reserve(void *state, int index, size_t size, void **va)
{
    cuda_state_t *st = state;
    int rc = check_granules(st, index, 0, size, "a reservation");
    if (rc) return rc;
    cuda_device_t *d = &st->devices[index];
    if (!vram_map_reserve(&d->reservations, 1))
        return vram_fail(VRAM_ENOMEM, "cuda: out of host memory tracking a reservation");
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    CUdeviceptr addr = 0;
    CUresult r = st->fn.mem_address_reserve(&addr, size, d->granularity, 0, 0);
    leave_ctx(st, index, prev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuMemAddressReserve", index);
    vram_map_put(&d->reservations, addr, size);
    *va = (void *)(uintptr_t)addr;
    return 0;
}

static int cuda_vmm_unreserve(void *state, int index, void *va, size_t size)
{
    cuda_state_t *st = state;
    int rc = check_index(st, index);
    if (rc) return rc;
    cuda_device_t *d = &st->devices[index];
    uint64_t addr = (uint64_t)(uintptr_t)va, bytes = 0;
    if (!vram_map_get(&d->reservations, addr, &bytes) || bytes != size)
        return vram_fail(VRAM_EINVAL, "cuda: %p (%zu bytes) is not a reservation on device %d", va,
                         size, index);
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    CUresult r = st->fn.mem_address_free(addr, size);
    leave_ctx(st, index, prev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuMemAddressFree", index);
    vram_map_take(&d->reservations, addr, NULL);
    return 0;
}

/* Maps `handle` at [addr, addr + size) and makes it readable and writable
 * by the device (the contract requires access before any use); nothing
 * stays mapped on failure, and *call names the call that failed. */
static CUresult map_with_access(cuda_state_t *st, const cuda_device_t *d, uint64_t addr,
                                size_t size, CUmemGenericAllocationHandle handle, const char **call)
{
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, d->dev},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    *call = "cuMemMap";
    CUresult r = st->fn.mem_map(addr, size, 0, handle, 0);
    if (r != CUDA_SUCCESS) return r;
    *call = "cuMemSetAccess";
    r = st->fn.mem_set_access(addr, size, &access, 1);
    if (r != CUDA_SUCCESS) st->fn.mem_unmap(addr, size);
    return r;
}

/* The error of a VMM call on a chunk of `size` bytes, with the driver's
 * message and `what_then` after it. */
static int chunk_fail(const cuda_state_t *st, CUresult r, const char *call, size_t size, int index,
                      const char *what_then)
{
    char msg[160];
    cuda_message(st, r, msg, sizeof msg);
    return vram_fail(cuda_code(r), "%s(%zu bytes) on device %d: %s%s", call, size, index, msg,
                     what_then);
}

static int cuda_vmm_map(void *state, int index, void *ptr, size_t size)
{
    cuda_state_t *st = state;
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    int rc = check_granules(st, index, addr, size, "a mapping");
    if (rc) return rc;
    cuda_device_t *d = &st->devices[index];
    if (!vram_map_reserve(&d->chunk_handles, 1) || !vram_map_reserve(&d->chunk_bytes, 1))
        return vram_fail(VRAM_ENOMEM, "cuda: out of host memory tracking a mapping");
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    CUmemAllocationProp prop = device_prop(d);
    CUmemGenericAllocationHandle handle = 0;
    const char *call = "cuMemCreate";
    CUresult r = st->fn.mem_create(&handle, size, &prop, 0);
    if (r == CUDA_SUCCESS) {
        r = map_with_access(st, d, addr, size, handle, &call);
        if (r != CUDA_SUCCESS) st->fn.mem_release(handle);
    }
    leave_ctx(st, index, prev);
    if (r != CUDA_SUCCESS) return chunk_fail(st, r, call, size, index, "");
    vram_map_put(&d->chunk_handles, addr, handle);
    vram_map_put(&d->chunk_bytes, addr, size);
    d->allocated += size;
    return 0;
}

static int cuda_vmm_unmap(void *state, int index, void *ptr, size_t size)
{
    cuda_state_t *st = state;
    int rc = check_index(st, index);
    if (rc) return rc;
    cuda_device_t *d = &st->devices[index];
    uint64_t addr = (uint64_t)(uintptr_t)ptr, bytes = 0, handle = 0;
    if (!vram_map_get(&d->chunk_bytes, addr, &bytes) || bytes != size)
        return vram_fail(VRAM_EINVAL, "cuda: %p (%zu bytes) is not a mapped chunk on device %d",
                         ptr, size, index);
    vram_map_get(&d->chunk_handles, addr, &handle);
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    CUresult r = st->fn.mem_unmap(addr, size);
    if (r == CUDA_SUCCESS) r = st->fn.mem_release(handle);
    leave_ctx(st, index, prev);
    if (r != CUDA_SUCCESS) return cuda_fail(st, r, "cuMemUnmap", index);
    vram_map_take(&d->chunk_handles, addr, NULL);
    vram_map_take(&d->chunk_bytes, addr, NULL);
    d->allocated -= size;
    return 0;
}

/* Whether [lo, hi) lies inside one reservation, and whether a chunk
 * overlaps it. */
typedef struct {
    uint64_t lo, hi;
    bool reserved, overlaps;
} range_probe_t;

static void probe_reservation(uint64_t addr, uint64_t bytes, void *arg)
{
    range_probe_t *p = arg;
    p->reserved |= p->lo >= addr && p->hi <= addr + bytes;
}

static void probe_chunk(uint64_t addr, uint64_t bytes, void *arg)
{
    range_probe_t *p = arg;
    p->overlaps |= addr < p->hi && p->lo < addr + bytes;
}

/* The chunk's handle is unmapped at `from`, mapped at `to` and given
 * access there; it is never released. A failure after the unmap maps it
 * back at `from`; if even that fails the handle is released and the
 * chunk is gone (counted so). */
static int cuda_vmm_move(void *state, int index, void *from, void *to, size_t size)
{
    cuda_state_t *st = state;
    uint64_t src = (uint64_t)(uintptr_t)from, dst = (uint64_t)(uintptr_t)to, bytes = 0, handle = 0;
    int rc = check_granules(st, index, dst, size, "a move");
    if (rc) return rc;
    cuda_device_t *d = &st->devices[index];
    range_probe_t probe = {dst, dst + size, false, false};
    vram_map_each(&d->reservations, probe_reservation, &probe);
    vram_map_each(&d->chunk_bytes, probe_chunk, &probe);
    if (!vram_map_get(&d->chunk_bytes, src, &bytes) || bytes != size || !probe.reserved ||
        probe.overlaps)
        return vram_fail(VRAM_EINVAL,
                         "cuda: cannot move %zu bytes from %p to %p on device %d: the source must "
                         "be one mapped chunk, the destination reserved and not mapped",
                         size, from, to, index);
    if (!vram_map_reserve(&d->chunk_handles, 1) || !vram_map_reserve(&d->chunk_bytes, 1))
        return vram_fail(VRAM_ENOMEM, "cuda: out of host memory tracking a mapping");
    vram_map_get(&d->chunk_handles, src, &handle);
    CUcontext prev;
    rc = enter_ctx(st, index, &prev);
    if (rc) return rc;
    const char *call = "cuMemUnmap", *again;
    uint64_t at = src; /* where the handle is mapped in the end; 0: nowhere */
    CUresult r = st->fn.mem_unmap(src, size);
    if (r == CUDA_SUCCESS) {
        r = map_with_access(st, d, dst, size, handle, &call);
        if (r == CUDA_SUCCESS) {
            at = dst;
        } else if (map_with_access(st, d, src, size, handle, &again) != CUDA_SUCCESS) {
            st->fn.mem_release(handle);
            at = 0;
        }
    }
    leave_ctx(st, index, prev);
    if (at != src) {
        vram_map_take(&d->chunk_handles, src, NULL);
        vram_map_take(&d->chunk_bytes, src, NULL);
    }
    if (at == dst) {
        vram_map_put(&d->chunk_handles, dst, handle); /* room reserved */
        vram_map_put(&d->chunk_bytes, dst, size);
        return 0;
    }
    if (!at) d->allocated -= size;
    return chunk_fail(st, r, call, size, index,
                      at ? " (moving a chunk; it stays where it was)"
                         : " (moving a chunk; it could not be mapped back and was released)");
}

static void unmap_one(uint64_t addr, uint64_t bytes, void *arg)
{
    void **args = arg;
    cuda_state_t *st = args[0];
    cuda_device_t *d = args[1];
    uint64_t handle = 0;
    vram_map_get(&d->chunk_handles, addr, &handle);
    st->fn.mem_unmap(addr, bytes);
    st->fn.mem_release(handle);
}

static void unreserve_one(uint64_t addr, uint64_t bytes, void *arg)
{
    cuda_state_t *st = arg;
    st->fn.mem_address_free(addr, bytes);
}

/* At close, within the device's context: chunks, then reservations. */
static void cuda_vmm_close(cuda_state_t *st, cuda_device_t *d)
{
    if (!vmm_loaded(st)) return;
    void *args[2] = {st, d};
    vram_map_each(&d->chunk_bytes, unmap_one, args);
    vram_map_each(&d->reservations, unreserve_one, st);
}

const vram_backend_ops_t vram_backend_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .device_count = cuda_device_count,
    .device_info = cuda_device_info,
    .processes = cuda_processes,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .vmm_granularity = cuda_vmm_granularity,
    .vmm_reserve = cuda_vmm_reserve,
    .vmm_unreserve = cuda_vmm_unreserve,
    .vmm_map = cuda_vmm_map,
    .vmm_unmap = cuda_vmm_unmap,
    .vmm_move = cuda_vmm_move,
};
