/* vram's CUDA driver declarations (src/device/cuda_api.h) against NVIDIA's
 * cuda.h: every constant, type, struct field and function type vram uses.
 * coverage.sh checks that each name in cuda_api.h and each symbol cuda.c
 * looks up is named here. Also compiled into the fake libcuda, so the fake
 * does not build when the declarations drift. */
/* Declares each entry point's earlier versions too, under their own names
 * (cuDeviceGetUuid beside cuDeviceGetUuid_v2), as libcuda exports them. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "abi_check.h"
#include "ours_cuda_api.h"
#include "ours_cuda_fns.h"

/* Types. CUresult and the enum types are enums in cuda.h: int-sized. */
SAME_SIZE(CUresult);
SAME_SIZE(CUdevice);
SAME_SIZE(CUdeviceptr);
SAME_SIZE(CUcontext);
SAME_SIZE(CUdevice_attribute);
SAME_SIZE(CUmemAllocationGranularity_flags);
SAME_SIZE(CUmemGenericAllocationHandle);

SAME_SIZE(CUuuid);
SAME_FIELD(CUuuid, bytes);

SAME_SIZE(CUmemLocation);
SAME_FIELD(CUmemLocation, type);
SAME_FIELD(CUmemLocation, id);

SAME_SIZE(CUmemAllocationProp);
SAME_FIELD(CUmemAllocationProp, type);
SAME_FIELD(CUmemAllocationProp, requestedHandleTypes);
SAME_FIELD(CUmemAllocationProp, location);
SAME_FIELD(CUmemAllocationProp, win32HandleMetaData);
SAME_FIELD(CUmemAllocationProp, allocFlags);
SAME_FIELD(CUmemAllocationProp, allocFlags.compressionType);
SAME_FIELD(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable);
SAME_FIELD(CUmemAllocationProp, allocFlags.usage);
SAME_FIELD(CUmemAllocationProp, allocFlags.reserved);

SAME_SIZE(CUmemAccessDesc);
SAME_FIELD(CUmemAccessDesc, location);
SAME_FIELD(CUmemAccessDesc, flags);

/* Result codes. */
SAME_VALUE(CUDA_SUCCESS);
SAME_VALUE(CUDA_ERROR_INVALID_VALUE);
SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY);
SAME_VALUE(CUDA_ERROR_NOT_INITIALIZED);
SAME_VALUE(CUDA_ERROR_DEINITIALIZED);
SAME_VALUE(CUDA_ERROR_STUB_LIBRARY);
SAME_VALUE(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER);
SAME_VALUE(CUDA_ERROR_DEVICE_UNAVAILABLE);
SAME_VALUE(CUDA_ERROR_NO_DEVICE);
SAME_VALUE(CUDA_ERROR_INVALID_DEVICE);
SAME_VALUE(CUDA_ERROR_INVALID_CONTEXT);
SAME_VALUE(CUDA_ERROR_ECC_UNCORRECTABLE);
SAME_VALUE(CUDA_ERROR_OPERATING_SYSTEM);
SAME_VALUE(CUDA_ERROR_NOT_FOUND);
SAME_VALUE(CUDA_ERROR_ILLEGAL_ADDRESS);
SAME_VALUE(CUDA_ERROR_LAUNCH_TIMEOUT);
SAME_VALUE(CUDA_ERROR_CONTEXT_IS_DESTROYED);
SAME_VALUE(CUDA_ERROR_LAUNCH_FAILED);
SAME_VALUE(CUDA_ERROR_NOT_PERMITTED);
SAME_VALUE(CUDA_ERROR_NOT_SUPPORTED);
SAME_VALUE(CUDA_ERROR_SYSTEM_NOT_READY);
SAME_VALUE(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
SAME_VALUE(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE);
SAME_VALUE(CUDA_ERROR_TIMEOUT);
SAME_VALUE(CUDA_ERROR_UNKNOWN);

/* Attributes and virtual-memory constants. */
SAME_VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
SAME_VALUE(CU_MEM_ALLOCATION_TYPE_PINNED);
SAME_VALUE(CU_MEM_HANDLE_TYPE_NONE);
SAME_VALUE(CU_MEM_LOCATION_TYPE_DEVICE);
SAME_VALUE(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SAME_VALUE(CU_MEM_ALLOC_GRANULARITY_MINIMUM);

/* Each function type against the symbol src/device/cuda.c looks up. */
SAME_PROTOTYPE(cu_init_fn, cuInit);
SAME_PROTOTYPE(cu_driver_get_version_fn, cuDriverGetVersion);
SAME_PROTOTYPE(cu_device_get_count_fn, cuDeviceGetCount);
SAME_PROTOTYPE(cu_device_get_fn, cuDeviceGet);
SAME_PROTOTYPE(cu_device_get_name_fn, cuDeviceGetName);
SAME_PROTOTYPE(cu_device_get_uuid_fn, cuDeviceGetUuid_v2);
SAME_PROTOTYPE(cu_device_get_uuid_fn, cuDeviceGetUuid); /* drivers before CUDA 11.4 */
SAME_PROTOTYPE(cu_device_total_mem_fn, cuDeviceTotalMem_v2);
SAME_PROTOTYPE(cu_device_get_attribute_fn, cuDeviceGetAttribute);
SAME_PROTOTYPE(cu_primary_ctx_retain_fn, cuDevicePrimaryCtxRetain);
SAME_PROTOTYPE(cu_primary_ctx_release_fn, cuDevicePrimaryCtxRelease_v2);
SAME_PROTOTYPE(cu_primary_ctx_release_fn, cuDevicePrimaryCtxRelease); /* before CUDA 11.0 */
SAME_PROTOTYPE(cu_ctx_set_current_fn, cuCtxSetCurrent);
SAME_PROTOTYPE(cu_ctx_get_current_fn, cuCtxGetCurrent);
SAME_PROTOTYPE(cu_mem_get_info_fn, cuMemGetInfo_v2);
SAME_PROTOTYPE(cu_mem_alloc_fn, cuMemAlloc_v2);
SAME_PROTOTYPE(cu_mem_free_fn, cuMemFree_v2);
SAME_PROTOTYPE(cu_mem_get_allocation_granularity_fn, cuMemGetAllocationGranularity);
SAME_PROTOTYPE(cu_mem_address_reserve_fn, cuMemAddressReserve);
SAME_PROTOTYPE(cu_mem_address_free_fn, cuMemAddressFree);
SAME_PROTOTYPE(cu_mem_create_fn, cuMemCreate);
SAME_PROTOTYPE(cu_mem_release_fn, cuMemRelease);
SAME_PROTOTYPE(cu_mem_map_fn, cuMemMap);
SAME_PROTOTYPE(cu_mem_unmap_fn, cuMemUnmap);
SAME_PROTOTYPE(cu_mem_set_access_fn, cuMemSetAccess);
SAME_PROTOTYPE(cu_get_error_text_fn, cuGetErrorName);
SAME_PROTOTYPE(cu_get_error_text_fn, cuGetErrorString);
