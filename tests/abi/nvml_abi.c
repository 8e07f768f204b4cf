/* vram's NVML declarations (src/device/nvml_api.h) against NVIDIA's nvml.h
 * (PyPI's nvidia-nvml-dev, installed by `make deps`): every constant, type,
 * struct field and function type vram uses. coverage.sh checks that each
 * name in nvml_api.h and each symbol nvml.c looks up is named here. Also
 * compiled into the fake libnvidia-ml, so the fake does not build when the
 * declarations drift. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* declares the v1 entry points too */
#include <nvml.h>

#include "abi_check.h"

/* NVML 13 deprecates nvmlDeviceGetTemperature (for nvmlDeviceGetTemperatureV);
 * drivers still export it, and its prototype is what is checked here. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "ours_nvml_api.h"
#include "ours_nvml_fns.h"

/* Types. nvmlReturn_t and the sensor type are enums in nvml.h: int-sized. */
SAME_SIZE(nvmlReturn_t);
SAME_SIZE(nvmlDevice_t);
SAME_SIZE(nvmlTemperatureSensors_t);

SAME_SIZE(nvmlMemory_t);
SAME_FIELD(nvmlMemory_t, total);
SAME_FIELD(nvmlMemory_t, free);
SAME_FIELD(nvmlMemory_t, used);

SAME_SIZE(nvmlMemory_v2_t);
SAME_FIELD(nvmlMemory_v2_t, version);
SAME_FIELD(nvmlMemory_v2_t, total);
SAME_FIELD(nvmlMemory_v2_t, reserved);
SAME_FIELD(nvmlMemory_v2_t, free);
SAME_FIELD(nvmlMemory_v2_t, used);

SAME_SIZE(nvmlUtilization_t);
SAME_FIELD(nvmlUtilization_t, gpu);
SAME_FIELD(nvmlUtilization_t, memory);

SAME_SIZE(nvmlProcessInfo_v1_t);
SAME_FIELD(nvmlProcessInfo_v1_t, pid);
SAME_FIELD(nvmlProcessInfo_v1_t, usedGpuMemory);

SAME_SIZE(nvmlProcessInfo_v2_t);
SAME_FIELD(nvmlProcessInfo_v2_t, pid);
SAME_FIELD(nvmlProcessInfo_v2_t, usedGpuMemory);
SAME_FIELD(nvmlProcessInfo_v2_t, gpuInstanceId);
SAME_FIELD(nvmlProcessInfo_v2_t, computeInstanceId);
/* nvml.h's current nvmlProcessInfo_t (what _v3 fills) is the v2 layout. */
_Static_assert(sizeof(nvmlProcessInfo_t) == sizeof(ours_nvmlProcessInfo_v2_t),
               "nvmlProcessInfo_t is no longer the v2 layout");

/* ours_nvmlProcessInfo_v3_t is the longer entry that _v3 wrote on drivers
 * 535.43 to 535.86, a layout nvml.h has only as nvmlProcessDetail_v1_t's
 * first fields; nvml.c tells the two apart by stride. */
_Static_assert(offsetof(ours_nvmlProcessInfo_v3_t, usedGpuCcProtectedMemory) ==
                   offsetof(nvmlProcessDetail_v1_t, usedGpuCcProtectedMemory),
               "nvmlProcessInfo_v3_t differs from nvmlProcessDetail_v1_t's fields");
_Static_assert(offsetof(ours_nvmlProcessInfo_v3_t, computeInstanceId) ==
                   offsetof(nvmlProcessDetail_v1_t, computeInstanceId),
               "nvmlProcessInfo_v3_t differs from nvmlProcessDetail_v1_t's fields");

/* Result codes. */
SAME_VALUE(NVML_SUCCESS);
SAME_VALUE(NVML_ERROR_UNINITIALIZED);
SAME_VALUE(NVML_ERROR_INVALID_ARGUMENT);
SAME_VALUE(NVML_ERROR_NOT_SUPPORTED);
SAME_VALUE(NVML_ERROR_NO_PERMISSION);
SAME_VALUE(NVML_ERROR_ALREADY_INITIALIZED);
SAME_VALUE(NVML_ERROR_NOT_FOUND);
SAME_VALUE(NVML_ERROR_INSUFFICIENT_SIZE);
SAME_VALUE(NVML_ERROR_INSUFFICIENT_POWER);
SAME_VALUE(NVML_ERROR_DRIVER_NOT_LOADED);
SAME_VALUE(NVML_ERROR_TIMEOUT);
SAME_VALUE(NVML_ERROR_IRQ_ISSUE);
SAME_VALUE(NVML_ERROR_LIBRARY_NOT_FOUND);
SAME_VALUE(NVML_ERROR_FUNCTION_NOT_FOUND);
SAME_VALUE(NVML_ERROR_CORRUPTED_INFOROM);
SAME_VALUE(NVML_ERROR_GPU_IS_LOST);
SAME_VALUE(NVML_ERROR_RESET_REQUIRED);
SAME_VALUE(NVML_ERROR_OPERATING_SYSTEM);
SAME_VALUE(NVML_ERROR_LIB_RM_VERSION_MISMATCH);
SAME_VALUE(NVML_ERROR_IN_USE);
SAME_VALUE(NVML_ERROR_MEMORY);
SAME_VALUE(NVML_ERROR_NO_DATA);
SAME_VALUE(NVML_ERROR_INSUFFICIENT_RESOURCES);
SAME_VALUE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
SAME_VALUE(NVML_ERROR_DEPRECATED);
SAME_VALUE(NVML_ERROR_NOT_READY);
SAME_VALUE(NVML_ERROR_GPU_NOT_FOUND);
SAME_VALUE(NVML_ERROR_INVALID_STATE);
SAME_VALUE(NVML_ERROR_UNKNOWN);

/* Other constants. NVML_VALUE_NOT_AVAILABLE is (-1) in nvml.h, read from
 * unsigned long long fields: compare as such. */
_Static_assert(ours_NVML_VALUE_NOT_AVAILABLE == (unsigned long long)NVML_VALUE_NOT_AVAILABLE,
               "NVML_VALUE_NOT_AVAILABLE differs from NVIDIA's");
SAME_VALUE(NVML_DEVICE_NAME_V2_BUFFER_SIZE);
SAME_VALUE(NVML_DEVICE_UUID_V2_BUFFER_SIZE);
SAME_VALUE(NVML_TEMPERATURE_GPU);
_Static_assert(ours_NVML_MEMORY_V2_VERSION == nvmlMemory_v2, "nvmlMemory_v2 version word");
_Static_assert(ours_NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2) ==
                   NVML_STRUCT_VERSION(Memory, 2),
               "NVML_STRUCT_VERSION differs from NVIDIA's");

/* Each function type against the symbol src/device/nvml.c looks up. */
SAME_PROTOTYPE(nvml_init_fn, nvmlInit_v2);
SAME_PROTOTYPE(nvml_init_fn, nvmlInit);
SAME_PROTOTYPE(nvml_shutdown_fn, nvmlShutdown);
SAME_PROTOTYPE(nvml_error_string_fn, nvmlErrorString);
SAME_PROTOTYPE(nvml_get_count_fn, nvmlDeviceGetCount_v2);
SAME_PROTOTYPE(nvml_get_count_fn, nvmlDeviceGetCount);
SAME_PROTOTYPE(nvml_get_handle_fn, nvmlDeviceGetHandleByIndex_v2);
SAME_PROTOTYPE(nvml_get_handle_fn, nvmlDeviceGetHandleByIndex);
SAME_PROTOTYPE(nvml_get_string_fn, nvmlDeviceGetName);
SAME_PROTOTYPE(nvml_get_string_fn, nvmlDeviceGetUUID);
SAME_PROTOTYPE(nvml_get_memory_fn, nvmlDeviceGetMemoryInfo);
SAME_PROTOTYPE(nvml_get_memory_v2_fn, nvmlDeviceGetMemoryInfo_v2);
SAME_PROTOTYPE(nvml_get_cc_fn, nvmlDeviceGetCudaComputeCapability);
SAME_PROTOTYPE(nvml_get_utilization_fn, nvmlDeviceGetUtilizationRates);
SAME_PROTOTYPE(nvml_get_temperature_fn, nvmlDeviceGetTemperature);
SAME_PROTOTYPE(nvml_get_power_fn, nvmlDeviceGetPowerUsage);

/* The process calls take entries of a version-dependent layout, so vram's
 * type has `void *infos`: check the rest of the prototype, and that the
 * real entry type of each version is the layout nvml.c reads it with. */
#define SAME_PROCESSES_CALL(symbol, entry)                                                         \
    _Static_assert(                                                                                \
        __builtin_types_compatible_p(nvmlReturn_t(*)(nvmlDevice_t, unsigned int *, entry *),       \
                                     __typeof__(&symbol)) &&                                       \
            __builtin_types_compatible_p(proto_nvml_get_processes_fn,                              \
                                         nvmlReturn_t(*)(nvmlDevice_t, unsigned int *, void *)),   \
        #symbol " differs from nvml_get_processes_fn with " #entry " entries")
SAME_PROCESSES_CALL(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t);
SAME_PROCESSES_CALL(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t);
SAME_PROCESSES_CALL(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t);
