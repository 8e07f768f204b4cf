/* A fake libnvidia-ml.so.1 for tests: a strict double of the NVML calls vram
 * makes. It refuses what the real library refuses (calls before nvmlInit,
 * unknown handles, a wrong nvmlMemory_v2 version word, too small process
 * buffers) so that the loading code in src/device/nvml.c is exercised against
 * the documented contracts, not against our own assumptions.
 *
 * Knobs (environment, read when nvmlInit brings the reference count from 0 to
 * 1). Lists are comma-separated per device; the last element repeats.
 *   FAKE_NVML_DEVICES=N          device count (default 1; 0 allowed)
 *   FAKE_NVML_NAME=text          device name (default "NVIDIA Fake A100-SXM4-80GB")
 *   FAKE_NVML_MEM_TOTAL=sizes    total memory (default 80G); K/M/G/T binary suffixes
 *   FAKE_NVML_MEM_USED=sizes     used by processes (default: their sum on the device)
 *   FAKE_NVML_MEM_RESERVED=sizes driver reservation (default 512M): v2 reports it
 *                                apart, v1 counts it as used (so tests see which ran)
 *   FAKE_NVML_CC=M.m             compute capability (default 8.0)
 *   FAKE_NVML_UTIL=pcts          GPU utilization (default 37)
 *   FAKE_NVML_TEMP=degrees       temperature (default 45)
 *   FAKE_NVML_POWER_MW=mws       power draw in milliwatts (default 250000)
 *   FAKE_NVML_PROCESSES="pid:bytes[@dev],..."  compute processes (default none)
 *   FAKE_NVML_PROCESS_COUNT=N    N more processes on device 0: pids 100000.., i+1 MiB
 *   FAKE_NVML_PROC_GROW=K        after every process query, K more processes start on
 *                                that device (churn between the count and the fill call)
 *   FAKE_NVML_PROC_UNKNOWN=1     usedGpuMemory = NVML_VALUE_NOT_AVAILABLE for all
 *   FAKE_NVML_V3_STRIDE=24|32    entry size of ..._v3 (drivers differ; default 24)
 *   FAKE_NVML_NO_V2=1|notsup     the _v2/_v3 memory and process calls answer
 *                                FUNCTION_NOT_FOUND (1) or NOT_SUPPORTED (notsup)
 *   FAKE_NVML_FAIL="call[@dev]=code[:times],..."  make `call` return NVML code
 *                                `code` always, or only the first `times` calls
 * Built twice: libnvidia-ml.so.1 (a current driver) and, with FAKE_NVML_V1_ONLY,
 * v1only/libnvidia-ml.so.1, which lacks every _v2/_v3 symbol (an old driver). */
#include "device/nvml_api.h"
#include "fake_common.h"

#include <pthread.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))

enum { MAX_DEVICES = 16, NAME_LEN = 96 };

typedef struct {
    unsigned int pid;
    unsigned long long bytes;
} fake_process_t;

/* What a handle points to: handles are &devices[i], anything else is refused. */
struct nvmlDevice_st {
    int index;
    unsigned long long total, used, reserved;
    unsigned int util, temp, power_mw;
    fake_process_t *procs;
    unsigned int nprocs, procs_cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static struct {
    unsigned int devices;
    char name[NAME_LEN];
    int cc_major, cc_minor;
    bool proc_unknown;
    unsigned int proc_grow;
    size_t v3_stride;
    int no_v2; /* 0, or the code the _v2/_v3 calls answer */
    fake_rules_t fail;
} cfg;
static struct nvmlDevice_st devices[MAX_DEVICES];
static unsigned int next_pid = 100000;

static void add_process(struct nvmlDevice_st *d, unsigned int pid, unsigned long long bytes)
{
    if (d->nprocs == d->procs_cap) {
        unsigned int cap = d->procs_cap ? d->procs_cap * 2 : 16;
        fake_process_t *p = realloc(d->procs, cap * sizeof *p);
        if (!p) abort();
        d->procs = p;
        d->procs_cap = cap;
    }
    d->procs[d->nprocs].pid = pid;
    d->procs[d->nprocs].bytes = bytes;
    d->nprocs++;
}

static void load_config(void)
{
    long n = fake_env_long("FAKE_NVML_DEVICES", 1);
    cfg.devices = n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : (unsigned)n;
    const char *name = getenv("FAKE_NVML_NAME");
    snprintf(cfg.name, sizeof cfg.name, "%s", name ? name : "NVIDIA Fake A100-SXM4-80GB");
    const char *cc = getenv("FAKE_NVML_CC");
    cfg.cc_major = 8;
    cfg.cc_minor = 0;
    if (cc) sscanf(cc, "%d.%d", &cfg.cc_major, &cfg.cc_minor);
    cfg.proc_unknown = fake_env_flag("FAKE_NVML_PROC_UNKNOWN");
    cfg.proc_grow = (unsigned)fake_env_long("FAKE_NVML_PROC_GROW", 0);
    cfg.v3_stride = fake_env_long("FAKE_NVML_V3_STRIDE", 24) == 32 ? 32 : 24;
    const char *no_v2 = getenv("FAKE_NVML_NO_V2");
    cfg.no_v2 = !no_v2 || !*no_v2 || !strcmp(no_v2, "0") ? 0
                : !strcmp(no_v2, "notsup")               ? NVML_ERROR_NOT_SUPPORTED
                                                         : NVML_ERROR_FUNCTION_NOT_FOUND;
    fake_rules_parse(&cfg.fail, "FAKE_NVML_FAIL");

    for (int i = 0; i < MAX_DEVICES; i++) {
        struct nvmlDevice_st *d = &devices[i];
        free(d->procs);
        memset(d, 0, sizeof *d);
        d->index = i;
        d->total = fake_env_size_at("FAKE_NVML_MEM_TOTAL", i, 80ull << 30);
        d->reserved = fake_env_size_at("FAKE_NVML_MEM_RESERVED", i, 512ull << 20);
        d->util = (unsigned)fake_env_size_at("FAKE_NVML_UTIL", i, 37);
        d->temp = (unsigned)fake_env_size_at("FAKE_NVML_TEMP", i, 45);
        d->power_mw = (unsigned)fake_env_size_at("FAKE_NVML_POWER_MW", i, 250000);
    }
    const char *s = getenv("FAKE_NVML_PROCESSES");
    while (s && *s) {
        unsigned int pid = 0, dev = 0;
        char bytes[64] = "";
        size_t len = strcspn(s, ",");
        char item[128];
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), s);
        s += len + (s[len] == ',');
        char *at = strchr(item, '@');
        if (at) {
            *at = '\0';
            dev = (unsigned)atoi(at + 1);
        }
        if (sscanf(item, "%u:%63s", &pid, bytes) == 2 && dev < MAX_DEVICES)
            add_process(&devices[dev], pid, fake_parse_size(bytes));
    }
    long extra = fake_env_long("FAKE_NVML_PROCESS_COUNT", 0);
    next_pid = 100000;
    for (long i = 0; i < extra; i++)
        add_process(&devices[0], next_pid++, (unsigned long long)(i + 1) << 20);
    for (int i = 0; i < MAX_DEVICES; i++) {
        unsigned long long sum = 0;
        for (unsigned k = 0; k < devices[i].nprocs; k++)
            sum += devices[i].procs[k].bytes;
        devices[i].used = fake_env_size_at("FAKE_NVML_MEM_USED", i, sum);
    }
}

/* Resolves a handle, or answers why not; also applies FAKE_NVML_FAIL. */
static nvmlReturn_t enter(const char *call, nvmlDevice_t handle, struct nvmlDevice_st **out)
{
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    int index = -1;
    if (out) {
        for (unsigned int i = 0; i < cfg.devices && index < 0; i++)
            if (handle == &devices[i]) index = (int)i;
        if (index < 0) return NVML_ERROR_INVALID_ARGUMENT;
        *out = handle;
    }
    int code = fake_rules_check(&cfg.fail, call, index);
    return code ? (nvmlReturn_t)code : NVML_SUCCESS;
}

#define LOCKED(expr)                                                                               \
    do {                                                                                           \
        pthread_mutex_lock(&lock);                                                                 \
        nvmlReturn_t r_ = (expr);                                                                  \
        pthread_mutex_unlock(&lock);                                                               \
        return r_;                                                                                 \
    } while (0)

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN:
        return "Unknown Error";
    default:
        return "Unknown Error";
    }
}

static nvmlReturn_t do_init(void)
{
    int code = 0;
    if (init_count == 0) {
        load_config();
        code = fake_rules_check(&cfg.fail, "nvmlInit_v2", -1);
    }
    if (code) return code;
    init_count++;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    LOCKED(do_init());
}

EXPORT nvmlReturn_t nvmlInit(void)
{
    LOCKED(do_init());
}

static nvmlReturn_t do_shutdown(void)
{
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (--init_count == 0)
        for (int i = 0; i < MAX_DEVICES; i++) {
            free(devices[i].procs);
            devices[i].procs = NULL;
            devices[i].nprocs = devices[i].procs_cap = 0;
        }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    LOCKED(do_shutdown());
}

static nvmlReturn_t do_count(const char *call, unsigned int *count)
{
    nvmlReturn_t r = enter(call, NULL, NULL);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = cfg.devices;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    LOCKED(do_count("nvmlDeviceGetCount_v2", count));
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    LOCKED(do_count("nvmlDeviceGetCount", count));
}

static nvmlReturn_t do_handle(const char *call, unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t r = enter(call, NULL, NULL);
    if (r) return r;
    if (!device || index >= cfg.devices) return NVML_ERROR_INVALID_ARGUMENT;
    int code = fake_rules_check(&cfg.fail, call, (int)index);
    if (code) return code;
    *device = &devices[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    LOCKED(do_handle("nvmlDeviceGetHandleByIndex_v2", index, device));
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    LOCKED(do_handle("nvmlDeviceGetHandleByIndex", index, device));
}

static nvmlReturn_t copy_string(const char *text, char *buf, unsigned int length)
{
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t do_name(nvmlDevice_t device, char *name, unsigned int length)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetName", device, &d);
    return r ? r : copy_string(cfg.name, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    LOCKED(do_name(device, name, length));
}

static nvmlReturn_t do_uuid(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetUUID", device, &d);
    if (r) return r;
    char text[64];
    snprintf(text, sizeof text, "GPU-fa4e0000-0000-4000-8000-%012x", (unsigned)d->index);
    return copy_string(text, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    LOCKED(do_uuid(device, uuid, length));
}

static nvmlReturn_t do_memory(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetMemoryInfo", device, &d);
    if (r) return r;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = d->used + d->reserved;
    memory->total = d->total;
    memory->used = used < d->total ? used : d->total;
    memory->free = d->total - memory->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    LOCKED(do_memory(device, memory));
}

#ifndef FAKE_NVML_V1_ONLY
static nvmlReturn_t do_memory_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetMemoryInfo_v2", device, &d);
    if (r) return r;
    if (cfg.no_v2) return cfg.no_v2;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    /* The literal, not a sizeof: the fake must not share a mistake with the
     * header it checks. */
    if (memory->version != 0x02000028u) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long taken = d->used + d->reserved;
    memory->total = d->total;
    memory->reserved = d->reserved;
    memory->used = d->used;
    memory->free = taken < d->total ? d->total - taken : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    LOCKED(do_memory_v2(device, memory));
}
#endif

static nvmlReturn_t do_cc(nvmlDevice_t device, int *major, int *minor)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetCudaComputeCapability", device, &d);
    if (r) return r;
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = cfg.cc_major;
    *minor = cfg.cc_minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    LOCKED(do_cc(device, major, minor));
}

static nvmlReturn_t do_util(nvmlDevice_t device, nvmlUtilization_t *util)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetUtilizationRates", device, &d);
    if (r) return r;
    if (!util) return NVML_ERROR_INVALID_ARGUMENT;
    util->gpu = d->util;
    util->memory = d->util / 2;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util)
{
    LOCKED(do_util(device, util));
}

static nvmlReturn_t do_temp(nvmlDevice_t device, int sensor, unsigned int *temp)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetTemperature", device, &d);
    if (r) return r;
    if (!temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temp;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                             unsigned int *temp)
{
    LOCKED(do_temp(device, sensor, temp));
}

static nvmlReturn_t do_power(nvmlDevice_t device, unsigned int *mw)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter("nvmlDeviceGetPowerUsage", device, &d);
    if (r) return r;
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    *mw = d->power_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *mw)
{
    LOCKED(do_power(device, mw));
}

/* The INSUFFICIENT_SIZE protocol, as documented: with *infoCount too small
 * (0 to ask), answer the needed count in *infoCount; else fill and set
 * *infoCount to what was written. `stride` is the entry size of the version. */
static nvmlReturn_t do_processes(const char *call, bool versioned, nvmlDevice_t device,
                                 unsigned int *count, void *infos, size_t stride)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter(call, device, &d);
    if (r) return r;
    if (versioned && cfg.no_v2) return cfg.no_v2;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = d->nprocs;
    if (*count < n) {
        *count = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    } else if (n > 0 && !infos) {
        r = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        unsigned char *out = infos;
        for (unsigned int i = 0; i < n; i++) {
            nvmlProcessInfo_v3_t e;
            memset(&e, 0, sizeof e);
            e.pid = d->procs[i].pid;
            e.usedGpuMemory = cfg.proc_unknown ? NVML_VALUE_NOT_AVAILABLE : d->procs[i].bytes;
            e.gpuInstanceId = e.computeInstanceId = 0xFFFFFFFFu; /* not in MIG mode */
            memcpy(out + (size_t)i * stride, &e, stride);
        }
        *count = n;
    }
    for (unsigned int k = 0; k < cfg.proc_grow; k++)
        add_process(d, next_pid++, 1ull << 20);
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count,
                                                         nvmlProcessInfo_v1_t *infos)
{
    LOCKED(do_processes("nvmlDeviceGetComputeRunningProcesses", false, device, count, infos,
                        sizeof(nvmlProcessInfo_v1_t)));
}

#ifndef FAKE_NVML_V1_ONLY
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_v2_t *infos)
{
    LOCKED(do_processes("nvmlDeviceGetComputeRunningProcesses_v2", true, device, count, infos,
                        sizeof(nvmlProcessInfo_v2_t)));
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *count, void *infos)
{
    LOCKED(do_processes("nvmlDeviceGetComputeRunningProcesses_v3", true, device, count, infos,
                        cfg.v3_stride));
}
#endif

/* Each export has the type vram calls it through (nvml_api.h), which
 * tests/abi/ checks against NVIDIA's nvml.h: a fake that drifted from the
 * declarations does not build. The process calls' entries are typed per
 * version here and untyped in nvml_get_processes_fn. */
#define EXPORTED_AS(symbol, fn_type)                                                               \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&symbol), fn_type), #symbol)
EXPORTED_AS(nvmlInit_v2, nvml_init_fn);
EXPORTED_AS(nvmlInit, nvml_init_fn);
EXPORTED_AS(nvmlShutdown, nvml_shutdown_fn);
EXPORTED_AS(nvmlErrorString, nvml_error_string_fn);
EXPORTED_AS(nvmlDeviceGetCount, nvml_get_count_fn);
EXPORTED_AS(nvmlDeviceGetHandleByIndex, nvml_get_handle_fn);
EXPORTED_AS(nvmlDeviceGetName, nvml_get_string_fn);
EXPORTED_AS(nvmlDeviceGetUUID, nvml_get_string_fn);
EXPORTED_AS(nvmlDeviceGetMemoryInfo, nvml_get_memory_fn);
EXPORTED_AS(nvmlDeviceGetCudaComputeCapability, nvml_get_cc_fn);
EXPORTED_AS(nvmlDeviceGetUtilizationRates, nvml_get_utilization_fn);
EXPORTED_AS(nvmlDeviceGetTemperature, nvml_get_temperature_fn);
EXPORTED_AS(nvmlDeviceGetPowerUsage, nvml_get_power_fn);
EXPORTED_AS(nvmlDeviceGetComputeRunningProcesses,
            nvmlReturn_t (*)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *));
#ifndef FAKE_NVML_V1_ONLY
EXPORTED_AS(nvmlDeviceGetCount_v2, nvml_get_count_fn);
EXPORTED_AS(nvmlDeviceGetHandleByIndex_v2, nvml_get_handle_fn);
EXPORTED_AS(nvmlDeviceGetMemoryInfo_v2, nvml_get_memory_v2_fn);
EXPORTED_AS(nvmlDeviceGetComputeRunningProcesses_v2,
            nvmlReturn_t (*)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *));
EXPORTED_AS(nvmlDeviceGetComputeRunningProcesses_v3, nvml_get_processes_fn);
#endif
