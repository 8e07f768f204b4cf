/* The few CUDA driver API declarations vram uses, written from NVIDIA's
 * documented ABI so that no cuda.h is needed at build time. libcuda.so.1 is
 * loaded with dlopen; the versioned entry points (_v2) are looked up by their
 * exported names. Shared with the fake libcuda.so.1 in tests/fakes/.
 *
 * Names are NVIDIA's, including those of the enum types a call takes, so
 * that tests/abi/ can check every declaration here against cuda.h: values,
 * layouts, and each function type against the real prototype of the symbol
 * looked up. A name added here must be checked in tests/abi/cuda_abi.c too
 * (the test says which are not). */
#ifndef VRAM_DEVICE_CUDA_API_H
#define VRAM_DEVICE_CUDA_API_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;                   /* an ordinal */
typedef unsigned long long CUdeviceptr; /* a device address (64-bit) */
typedef struct CUctx_st *CUcontext;

typedef struct {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_STUB_LIBRARY = 34,               /* the toolkit's link-time stub, not a driver */
    CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36, /* the driver API's "driver too old" */
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46,         /* e.g. exclusive-process mode, taken */
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_ECC_UNCORRECTABLE = 214,
    CUDA_ERROR_OPERATING_SYSTEM = 304,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_TIMEOUT = 702,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_SYSTEM_NOT_READY = 802,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,         /* libcuda and the kernel module differ */
    CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804, /* forward-compat libcuda, GPU not covered */
    CUDA_ERROR_TIMEOUT = 909,
    CUDA_ERROR_UNKNOWN = 999,
};

/* Enum types of NVIDIA's prototypes: int-sized, as the C ABI passes them. */
typedef int CUdevice_attribute;
typedef int CUmemAllocationGranularity_flags;

/* cuDeviceGetAttribute attributes we read. */
enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
};

/* Virtual memory management (CUDA 10.2+; the driver API reference's "Virtual
 * Memory Management" section): types and the values vram passes. */
typedef unsigned long long CUmemGenericAllocationHandle;

enum {
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_HANDLE_TYPE_NONE = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
};

typedef struct {
    int type; /* CUmemLocationType */
    int id;   /* the device ordinal */
} CUmemLocation;

typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    CUmemLocation location;
    int flags; /* CUmemAccess_flags */
} CUmemAccessDesc;

typedef CUresult (*cu_init_fn)(unsigned int flags);
typedef CUresult (*cu_driver_get_version_fn)(int *version);
typedef CUresult (*cu_device_get_count_fn)(int *count);
typedef CUresult (*cu_device_get_fn)(CUdevice *device, int ordinal);
typedef CUresult (*cu_device_get_name_fn)(char *name, int len, CUdevice device);
typedef CUresult (*cu_device_get_uuid_fn)(CUuuid *uuid, CUdevice device);
typedef CUresult (*cu_device_total_mem_fn)(size_t *bytes, CUdevice device);
typedef CUresult (*cu_device_get_attribute_fn)(int *value, CUdevice_attribute attribute,
                                               CUdevice device);
typedef CUresult (*cu_primary_ctx_retain_fn)(CUcontext *ctx, CUdevice device);
typedef CUresult (*cu_primary_ctx_release_fn)(CUdevice device);
typedef CUresult (*cu_ctx_set_current_fn)(CUcontext ctx);
typedef CUresult (*cu_ctx_get_current_fn)(CUcontext *ctx);
typedef CUresult (*cu_mem_get_info_fn)(size_t *free_bytes, size_t *total_bytes);
typedef CUresult (*cu_mem_alloc_fn)(CUdeviceptr *ptr, size_t bytes);
typedef CUresult (*cu_mem_free_fn)(CUdeviceptr ptr);
typedef CUresult (*cu_get_error_text_fn)(CUresult error, const char **text);
typedef CUresult (*cu_mem_get_allocation_granularity_fn)(size_t *granularity,
                                                         const CUmemAllocationProp *prop,
                                                         CUmemAllocationGranularity_flags option);
typedef CUresult (*cu_mem_address_reserve_fn)(CUdeviceptr *ptr, size_t size, size_t alignment,
                                              CUdeviceptr addr, unsigned long long flags);
typedef CUresult (*cu_mem_address_free_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*cu_mem_create_fn)(CUmemGenericAllocationHandle *handle, size_t size,
                                     const CUmemAllocationProp *prop, unsigned long long flags);
typedef CUresult (*cu_mem_release_fn)(CUmemGenericAllocationHandle handle);
typedef CUresult (*cu_mem_map_fn)(CUdeviceptr ptr, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (*cu_mem_unmap_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*cu_mem_set_access_fn)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                         size_t count);

#endif
