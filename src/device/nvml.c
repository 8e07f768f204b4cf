/* The nvml backend: device state from NVIDIA's management library, loaded at
 * run time (VRAM_NVML_LIBRARY, default libnvidia-ml.so.1). Read-only: NVML
 * cannot allocate, so alloc/free are NULL. NVML return codes are translated
 * to VRAM_E* here, where they enter, keeping nvmlErrorString's message. */
#include "device/backend.h"
#include "device/driver_util.h"
#include "core/proc.h"
#include "device/nvml_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How often the process query is repeated while processes keep appearing
 * between the "how many?" call and the "fill it" call. */
enum { PROCESS_QUERY_ATTEMPTS = 6 };

typedef struct {
    void *lib;
    const char *path;
    struct {
        nvml_init_fn init;
        nvml_shutdown_fn shutdown;
        nvml_error_string_fn error_string;
        nvml_get_count_fn get_count;
        nvml_get_handle_fn get_handle;
        nvml_get_string_fn get_name, get_uuid;
        nvml_get_memory_fn get_memory;
        nvml_get_memory_v2_fn get_memory_v2;
        nvml_get_cc_fn get_cc;
        nvml_get_utilization_fn get_utilization;
        nvml_get_temperature_fn get_temperature;
        nvml_get_power_fn get_power;
        nvml_get_processes_fn processes_v3, processes_v2, processes_v1;
    } fn;
    bool initialized;
    bool memory_v2_usable; /* cleared when the driver refuses the v2 call */
    unsigned int count;
    nvmlDevice_t *handles; /* fetched lazily; NULL until the first success */
} nvml_state_t;

static const char *nvml_message(const nvml_state_t *st, nvmlReturn_t r)
{
    const char *msg = st->fn.error_string ? st->fn.error_string(r) : NULL;
    return msg && *msg ? msg : "unknown NVML error";
}

/* The VRAM_E* code for an NVML failure. Transient conditions become EAGAIN so
 * the context retries them; a lost GPU or a driver mismatch does not heal by
 * retrying and becomes EDRIVER. So does INVALID_ARGUMENT: our calls are well
 * formed, so it is the driver's fault, not the user's input (EINVAL). */
static int nvml_code(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS:
        return 0;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
    case NVML_ERROR_DEPRECATED:
    case NVML_ERROR_NO_DATA:
        return VRAM_ENOTSUP;
    case NVML_ERROR_NO_PERMISSION:
        return VRAM_EPERM;
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
        return VRAM_ENODEV;
    case NVML_ERROR_MEMORY:
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
        return VRAM_ENOMEM;
    case NVML_ERROR_TIMEOUT:
    case NVML_ERROR_IRQ_ISSUE:
    case NVML_ERROR_IN_USE:
    case NVML_ERROR_NOT_READY:
    case NVML_ERROR_UNKNOWN:
        return VRAM_EAGAIN;
    default: /* DRIVER_NOT_LOADED, GPU_IS_LOST, RESET_REQUIRED, LIB_RM_VERSION_MISMATCH, ... */
        return VRAM_EDRIVER;
    }
}

/* Records "nvmlCall(device N): driver message (NVML error R)" and returns the code. */
static int nvml_fail(const nvml_state_t *st, nvmlReturn_t r, const char *call, int index)
{
    if (index >= 0)
        return vram_fail(nvml_code(r), "%s(device %d): %s (NVML error %d)", call, index,
                         nvml_message(st, r), r);
    return vram_fail(nvml_code(r), "%s: %s (NVML error %d)", call, nvml_message(st, r), r);
}

/* Optional fields (temperature, power, ...): a device that cannot report one
 * leaves it unknown; a transient or fatal failure fails the whole query so
 * that the context retries it or marks the device. */
static bool field_is_unavailable(nvmlReturn_t r)
{
    int code = nvml_code(r);
    return code == VRAM_ENOTSUP || code == VRAM_EPERM || r == NVML_ERROR_INVALID_ARGUMENT;
}

static void load_symbols(nvml_state_t *st)
{
    void *lib = st->lib;
    VRAM_DRIVER_LOAD(lib, st->fn.init, "nvmlInit_v2");
    if (!st->fn.init) VRAM_DRIVER_LOAD(lib, st->fn.init, "nvmlInit");
    VRAM_DRIVER_LOAD(lib, st->fn.shutdown, "nvmlShutdown");
    VRAM_DRIVER_LOAD(lib, st->fn.error_string, "nvmlErrorString");
    VRAM_DRIVER_LOAD(lib, st->fn.get_count, "nvmlDeviceGetCount_v2");
    if (!st->fn.get_count) VRAM_DRIVER_LOAD(lib, st->fn.get_count, "nvmlDeviceGetCount");
    VRAM_DRIVER_LOAD(lib, st->fn.get_handle, "nvmlDeviceGetHandleByIndex_v2");
    if (!st->fn.get_handle) VRAM_DRIVER_LOAD(lib, st->fn.get_handle, "nvmlDeviceGetHandleByIndex");
    VRAM_DRIVER_LOAD(lib, st->fn.get_name, "nvmlDeviceGetName");
    VRAM_DRIVER_LOAD(lib, st->fn.get_uuid, "nvmlDeviceGetUUID");
    VRAM_DRIVER_LOAD(lib, st->fn.get_memory, "nvmlDeviceGetMemoryInfo");
    VRAM_DRIVER_LOAD(lib, st->fn.get_memory_v2, "nvmlDeviceGetMemoryInfo_v2");
    VRAM_DRIVER_LOAD(lib, st->fn.get_cc, "nvmlDeviceGetCudaComputeCapability");
    VRAM_DRIVER_LOAD(lib, st->fn.get_utilization, "nvmlDeviceGetUtilizationRates");
    VRAM_DRIVER_LOAD(lib, st->fn.get_temperature, "nvmlDeviceGetTemperature");
    VRAM_DRIVER_LOAD(lib, st->fn.get_power, "nvmlDeviceGetPowerUsage");
    VRAM_DRIVER_LOAD(lib, st->fn.processes_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
    VRAM_DRIVER_LOAD(lib, st->fn.processes_v2, "nvmlDeviceGetComputeRunningProcesses_v2");
    VRAM_DRIVER_LOAD(lib, st->fn.processes_v1, "nvmlDeviceGetComputeRunningProcesses");
    st->memory_v2_usable = st->fn.get_memory_v2 != NULL;
}

static void nvml_close(void *state)
{
    nvml_state_t *st = state;
    if (!st) return;
    if (st->initialized && st->fn.shutdown) st->fn.shutdown();
    vram_driver_dlclose(st->lib);
    free(st->handles);
    free(st);
}

/* What the user can do about nvmlInit's failures that mean the machine
 * cannot run the driver (nvml.h's descriptions; docs/drivers.md). */
static const char *init_advice(nvmlReturn_t r)
{
    switch (r) {
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "; the NVIDIA kernel module is not loaded (modprobe nvidia, or install the driver)";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "; libnvidia-ml does not match the NVIDIA kernel module that is loaded (a driver "
               "upgraded without a reboot?): reboot, or load the module of the same version";
    case NVML_ERROR_NO_PERMISSION:
        return "; this user may not open the GPU device files (/dev/nvidia*)";
    default:
        return "";
    }
}

static int nvml_open(void **state)
{
    *state = NULL;
    nvml_state_t *st = calloc(1, sizeof *st);
    if (!st) return vram_fail(VRAM_ENOMEM, "nvml: out of memory");
    st->path = vram_option_str(VRAM_OPT_NVML_LIBRARY);
    int rc = vram_driver_dlopen(st->path, &st->lib);
    if (rc) {
        free(st);
        return rc;
    }
    load_symbols(st);
    const char *missing = !st->fn.init         ? "nvmlInit_v2"
                          : !st->fn.shutdown   ? "nvmlShutdown"
                          : !st->fn.get_count  ? "nvmlDeviceGetCount_v2"
                          : !st->fn.get_handle ? "nvmlDeviceGetHandleByIndex_v2"
                          : !st->fn.get_name   ? "nvmlDeviceGetName"
                          : !(st->fn.get_memory || st->fn.get_memory_v2) ? "nvmlDeviceGetMemoryInfo"
                                                                         : NULL;
    if (missing) {
        rc = vram_fail(VRAM_EDRIVER, "%s is not a usable NVML library: it lacks %s", st->path,
                       missing);
        nvml_close(st);
        return rc;
    }
    nvmlReturn_t r = st->fn.init();
    if (r != NVML_SUCCESS) {
        /* Whatever the reason, a driver that will not initialize is not one
         * we can use: auto falls back, a named backend reports it. */
        rc = vram_fail(nvml_code(r) == VRAM_EAGAIN ? VRAM_EAGAIN : VRAM_EDRIVER,
                       "no NVIDIA driver: nvmlInit_v2 failed: %s (NVML error %d)%s",
                       nvml_message(st, r), r, init_advice(r));
        nvml_close(st);
        return rc;
    }
    st->initialized = true;
    r = st->fn.get_count(&st->count);
    if (r != NVML_SUCCESS) {
        rc = nvml_fail(st, r, "nvmlDeviceGetCount_v2", -1);
        nvml_close(st);
        return rc;
    }
    if (st->count == 0) {
        nvml_close(st);
        return vram_fail(VRAM_ENODEV, "no NVIDIA GPU: the NVML driver reports 0 devices");
    }
    st->handles = calloc(st->count, sizeof *st->handles);
    if (!st->handles) {
        nvml_close(st);
        return vram_fail(VRAM_ENOMEM, "nvml: out of memory");
    }
    *state = st;
    return 0;
}

static int nvml_device_count(void *state, int *count)
{
    const nvml_state_t *st = state;
    *count = (int)st->count;
    return 0;
}

static int handle_of(nvml_state_t *st, int index, nvmlDevice_t *out)
{
    if (index < 0 || (unsigned)index >= st->count)
        return vram_fail(VRAM_ENODEV, "nvml: no device %d (the driver reports %u)", index,
                         st->count);
    if (!st->handles[index]) {
        nvmlReturn_t r = st->fn.get_handle((unsigned)index, &st->handles[index]);
        if (r != NVML_SUCCESS) {
            st->handles[index] = NULL;
            return nvml_fail(st, r, "nvmlDeviceGetHandleByIndex_v2", index);
        }
    }
    *out = st->handles[index];
    return 0;
}

/* Total/used/free: the v2 call when the driver has and accepts it (it keeps
 * driver-reserved memory out of "used"), else v1 (used = total - free). */
static int read_memory(nvml_state_t *st, nvmlDevice_t dev, int index, vram_device_info_t *out)
{
    if (st->memory_v2_usable) {
        nvmlMemory_v2_t m2;
        memset(&m2, 0, sizeof m2);
        m2.version = NVML_MEMORY_V2_VERSION;
        nvmlReturn_t r = st->fn.get_memory_v2(dev, &m2);
        if (r == NVML_SUCCESS) {
            out->total_bytes = m2.total;
            out->used_bytes = m2.used;
            out->free_bytes = m2.free;
            return 0;
        }
        if (nvml_code(r) != VRAM_ENOTSUP || !st->fn.get_memory)
            return nvml_fail(st, r, "nvmlDeviceGetMemoryInfo_v2", index);
        st->memory_v2_usable = false; /* this driver refuses v2: use v1 from now on */
    }
    if (!st->fn.get_memory)
        return vram_fail(VRAM_ENOTSUP, "nvml: %s has no nvmlDeviceGetMemoryInfo", st->path);
    nvmlMemory_t m;
    memset(&m, 0, sizeof m);
    nvmlReturn_t r = st->fn.get_memory(dev, &m);
    if (r != NVML_SUCCESS) return nvml_fail(st, r, "nvmlDeviceGetMemoryInfo", index);
    out->total_bytes = m.total;
    out->used_bytes = m.used;
    out->free_bytes = m.free;
    return 0;
}

/* Reads the optional fields; returns non-zero only for failures that are
 * about the device's health rather than about a missing feature. */
static int read_optional(nvml_state_t *st, nvmlDevice_t dev, int index, vram_device_info_t *out)
{
    nvmlReturn_t r;
    if (st->fn.get_uuid) {
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
        r = st->fn.get_uuid(dev, uuid, sizeof uuid);
        if (r == NVML_SUCCESS)
            snprintf(out->uuid, sizeof out->uuid, "%s", uuid);
        else if (!field_is_unavailable(r))
            return nvml_fail(st, r, "nvmlDeviceGetUUID", index);
    }
    if (st->fn.get_cc) {
        int major = 0, minor = 0;
        r = st->fn.get_cc(dev, &major, &minor);
        if (r == NVML_SUCCESS) {
            out->cc_major = major;
            out->cc_minor = minor;
        } else if (!field_is_unavailable(r)) {
            return nvml_fail(st, r, "nvmlDeviceGetCudaComputeCapability", index);
        }
    }
    if (st->fn.get_utilization) {
        nvmlUtilization_t u = {0, 0};
        r = st->fn.get_utilization(dev, &u);
        if (r == NVML_SUCCESS)
            out->utilization_pct = (int)u.gpu;
        else if (!field_is_unavailable(r))
            return nvml_fail(st, r, "nvmlDeviceGetUtilizationRates", index);
    }
    if (st->fn.get_temperature) {
        unsigned int t = 0;
        r = st->fn.get_temperature(dev, NVML_TEMPERATURE_GPU, &t);
        if (r == NVML_SUCCESS)
            out->temperature_c = (int)t;
        else if (!field_is_unavailable(r))
            return nvml_fail(st, r, "nvmlDeviceGetTemperature", index);
    }
    if (st->fn.get_power) {
        unsigned int mw = 0;
        r = st->fn.get_power(dev, &mw);
        if (r == NVML_SUCCESS)
            out->power_w = mw / 1000.0;
        else if (!field_is_unavailable(r))
            return nvml_fail(st, r, "nvmlDeviceGetPowerUsage", index);
    }
    return 0;
}

static int nvml_device_info(void *state, int index, vram_device_info_t *out)
{
    nvml_state_t *st = state;
    nvmlDevice_t dev;
    int rc = handle_of(st, index, &dev);
    if (rc) return rc;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
    nvmlReturn_t r = st->fn.get_name(dev, name, sizeof name);
    if (r != NVML_SUCCESS) return nvml_fail(st, r, "nvmlDeviceGetName", index);
    vram_device_info_t info = *out; /* filled on a copy: a failure leaves *out as it was */
    info.index = index;
    snprintf(info.name, sizeof info.name, "%s", name);
    snprintf(info.backend, sizeof info.backend, "nvml");
    rc = read_memory(st, dev, index, &info);
    if (!rc) rc = read_optional(st, dev, index, &info);
    if (rc) return rc;
    *out = info;
    return 0;
}

/* One way of asking for the process list: the function and its entry size. */
typedef struct {
    nvml_get_processes_fn fn;
    const char *name;
    size_t stride;  /* bytes per entry, or 0 when it must be measured (v3) */
    size_t reserve; /* bytes per entry the buffer reserves */
} process_api_t;

/* The stride of the v3 call depends on the driver release (24 or 32 bytes,
 * see nvml_api.h). The buffer is prefilled with a marker and the driver's
 * writes are measured: n entries that end beyond n*24 bytes are 32 long. */
enum { STRIDE_MARKER = 0xA5 };

static size_t measured_stride(const unsigned char *buf, size_t bytes, unsigned n)
{
    size_t end = bytes;
    while (end > 0 && buf[end - 1] == STRIDE_MARKER)
        end--;
    return end > (size_t)n * sizeof(nvmlProcessInfo_v2_t) ? sizeof(nvmlProcessInfo_v3_t)
                                                          : sizeof(nvmlProcessInfo_v2_t);
}

/* Copies n entries of `stride` bytes into at most `cap` vram entries. */
static void copy_processes(const unsigned char *buf, size_t stride, unsigned n,
                           vram_process_info_t *procs, size_t cap)
{
    for (unsigned i = 0; i < n && i < cap; i++) {
        const unsigned char *entry = buf + (size_t)i * stride;
        unsigned int pid;
        unsigned long long used;
        memcpy(&pid, entry + offsetof(nvmlProcessInfo_v1_t, pid), sizeof pid);
        memcpy(&used, entry + offsetof(nvmlProcessInfo_v1_t, usedGpuMemory), sizeof used);
        procs[i].pid = (pid_t)pid;
        procs[i].used_bytes = used == NVML_VALUE_NOT_AVAILABLE ? VRAM_UNKNOWN_U64 : used;
        vram_proc_name(procs[i].pid, procs[i].name, sizeof procs[i].name);
    }
}

/* The INSUFFICIENT_SIZE protocol: ask with an empty buffer, which answers
 * the count; allocate that many plus slack (processes start meanwhile) and ask
 * again; repeat a bounded number of times. Returns NVML codes through *nr. */
static int query_processes(nvml_state_t *st, const process_api_t *api, nvmlDevice_t dev, int index,
                           vram_process_info_t *procs, size_t cap, size_t *count, nvmlReturn_t *nr)
{
    unsigned int slots = 0;
    for (int attempt = 0; attempt < PROCESS_QUERY_ATTEMPTS; attempt++) {
        size_t bytes = (size_t)slots * api->reserve;
        unsigned char *buf = NULL;
        if (slots) {
            buf = malloc(bytes);
            if (!buf) return vram_fail(VRAM_ENOMEM, "nvml: out of memory for %u processes", slots);
            memset(buf, STRIDE_MARKER, bytes);
        }
        unsigned int n = slots;
        nvmlReturn_t r = api->fn(dev, &n, buf);
        *nr = r;
        if (r == NVML_SUCCESS) {
            if (n > slots) n = slots; /* never trust a count beyond the buffer */
            size_t stride = api->stride ? api->stride : measured_stride(buf, bytes, n);
            if (buf) copy_processes(buf, stride, n, procs, cap);
            free(buf);
            *count = n;
            return 0;
        }
        free(buf);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE) return nvml_fail(st, r, api->name, index);
        unsigned int need = n > slots ? n : slots * 2;
        slots = need + need / 8 + 8;
    }
    return vram_fail(VRAM_EAGAIN,
                     "%s(device %d): the process list kept growing over %d attempts; try again",
                     api->name, index, PROCESS_QUERY_ATTEMPTS);
}

static int nvml_processes(void *state, int index, vram_process_info_t *procs, size_t cap,
                          size_t *count)
{
    nvml_state_t *st = state;
    *count = 0;
    nvmlDevice_t dev;
    int rc = handle_of(st, index, &dev);
    if (rc) return rc;
    /* Newest first; an entry point the driver lacks or refuses is skipped
     * (and forgotten, so the next query goes straight to the one that works). */
    struct {
        nvml_get_processes_fn *fn;
        process_api_t api;
    } apis[] = {
        {&st->fn.processes_v3,
         {st->fn.processes_v3, "nvmlDeviceGetComputeRunningProcesses_v3", 0,
          sizeof(nvmlProcessInfo_v3_t)}},
        {&st->fn.processes_v2,
         {st->fn.processes_v2, "nvmlDeviceGetComputeRunningProcesses_v2",
          sizeof(nvmlProcessInfo_v2_t), sizeof(nvmlProcessInfo_v2_t)}},
        {&st->fn.processes_v1,
         {st->fn.processes_v1, "nvmlDeviceGetComputeRunningProcesses", sizeof(nvmlProcessInfo_v1_t),
          sizeof(nvmlProcessInfo_v1_t)}},
    };
    rc = VRAM_ENOTSUP;
    bool tried = false;
    for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++) {
        if (!apis[i].api.fn) continue;
        nvmlReturn_t r = NVML_SUCCESS;
        tried = true;
        rc = query_processes(st, &apis[i].api, dev, index, procs, cap, count, &r);
        if (rc == 0) return 0;
        if (r == NVML_ERROR_FUNCTION_NOT_FOUND || r == NVML_ERROR_ARGUMENT_VERSION_MISMATCH) {
            *apis[i].fn = NULL; /* this driver lacks it: never again */
            continue;
        }
        /* NOT_SUPPORTED may be about this device only: try older calls but
         * keep this one for the next device. */
        if (r == NVML_ERROR_NOT_SUPPORTED) continue;
        return rc;
    }
    if (!tried)
        return vram_fail(VRAM_ENOTSUP, "nvml: %s cannot list the processes of device %d", st->path,
                         index);
    return rc; /* the last refusal, with its message */
}

const vram_backend_ops_t vram_backend_nvml = {
    .name = "nvml",
    .open = nvml_open,
    .close = nvml_close,
    .device_count = nvml_device_count,
    .device_info = nvml_device_info,
    .processes = nvml_processes,
    .alloc = NULL,
    .free = NULL,
};
