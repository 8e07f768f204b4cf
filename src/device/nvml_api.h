/* The few NVML declarations vram uses, written from NVIDIA's documented ABI so
 * that no nvml.h (no CUDA toolkit) is needed at build time. The library is
 * loaded with dlopen and every function is looked up by name; these types must
 * match the driver's layout byte for byte (the static asserts below pin them).
 * Shared with the fake libnvidia-ml.so.1 in tests/fakes/. Names are NVIDIA's,
 * so tests/abi/nvml_abi.c checks each against nvml.h (values, layouts, and
 * each function type against the real prototype of the symbol looked up). */
#ifndef VRAM_DEVICE_NVML_API_H
#define VRAM_DEVICE_NVML_API_H

#include <stddef.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999,
};

/* An opaque device handle owned by the library. */
typedef struct nvmlDevice_st *nvmlDevice_t;

/* Process memory the driver cannot account (e.g. without permission). */
#define NVML_VALUE_NOT_AVAILABLE ((unsigned long long)-1)

#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_TEMPERATURE_GPU            0

/* Enum type of nvmlDeviceGetTemperature's sensor argument: int-sized. */
typedef int nvmlTemperatureSensors_t;

/* nvmlDeviceGetMemoryInfo (v1): used = total - free, driver reservations included. */
typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* nvmlDeviceGetMemoryInfo_v2: `reserved` (driver/firmware) is split out of
 * `used`. The caller sets `version` to the struct version word. */
typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

/* NVML's versioned-struct word: the struct size in the low bits, the version
 * in the top byte. For nvmlMemory_v2_t that is 0x02000028. */
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))
#define NVML_MEMORY_V2_VERSION         NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    unsigned int gpu;    /* percent of time a kernel ran in the last sample period */
    unsigned int memory; /* percent of time device memory was read or written */
} nvmlUtilization_t;

/* Per-process entries. Every layout starts with pid (offset 0) and
 * usedGpuMemory (offset 8); they differ in what follows, hence in stride. */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t; /* nvmlDeviceGetComputeRunningProcesses */

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t; /* ..._v2, and ..._v3 on most drivers */

/* ..._v3 on drivers 535.43 to 535.86 only: same call, longer entries (NVIDIA
 * changed the layout without a version bump and changed it back later). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_v3_t;

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(NVML_MEMORY_V2_VERSION == 0x02000028u, "nvmlMemory_v2 version word");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t layout");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t layout");
_Static_assert(sizeof(nvmlProcessInfo_v3_t) == 32, "nvmlProcessInfo_v3_t layout");
_Static_assert(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8, "usedGpuMemory offset");

/* Signatures of the functions we look up. */
typedef nvmlReturn_t (*nvml_init_fn)(void);
typedef nvmlReturn_t (*nvml_shutdown_fn)(void);
typedef const char *(*nvml_error_string_fn)(nvmlReturn_t result);
typedef nvmlReturn_t (*nvml_get_count_fn)(unsigned int *count);
typedef nvmlReturn_t (*nvml_get_handle_fn)(unsigned int index, nvmlDevice_t *device);
typedef nvmlReturn_t (*nvml_get_string_fn)(nvmlDevice_t device, char *buf, unsigned int length);
typedef nvmlReturn_t (*nvml_get_memory_fn)(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t (*nvml_get_memory_v2_fn)(nvmlDevice_t device, nvmlMemory_v2_t *memory);
typedef nvmlReturn_t (*nvml_get_cc_fn)(nvmlDevice_t device, int *major, int *minor);
typedef nvmlReturn_t (*nvml_get_utilization_fn)(nvmlDevice_t device, nvmlUtilization_t *util);
typedef nvmlReturn_t (*nvml_get_temperature_fn)(nvmlDevice_t device,
                                                nvmlTemperatureSensors_t sensor,
                                                unsigned int *temp);
typedef nvmlReturn_t (*nvml_get_power_fn)(nvmlDevice_t device, unsigned int *milliwatts);
/* The process calls take an array of entries whose layout depends on the
 * version (see above); `infos` is untyped here for that reason. */
typedef nvmlReturn_t (*nvml_get_processes_fn)(nvmlDevice_t device, unsigned int *infoCount,
                                              void *infos);

#endif
