/* The cuda backend against the strict fake libcuda.so.1 (tests/fakes) and,
 * when installed, the CUDA toolkit's real stub library: reported numbers, the
 * alloc/free contract (current context, restored afterwards), OOM, injected
 * failures, stub and no-device fallbacks. The ops are called directly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/backend.h"
#include "unit/driver_fake.h"
#include "device/cuda_api.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static const vram_backend_ops_t *ops = &vram_backend_cuda;
static char fake_lib[4096];
static const char *real_stub = "/usr/local/cuda/lib64/stubs/libcuda.so";

static const char *knobs[] = {
    "FAKE_CUDA_DEVICES", "FAKE_CUDA_NAME",        "FAKE_CUDA_MEM",
    "FAKE_CUDA_USED",    "FAKE_CUDA_CC",          "FAKE_CUDA_SMS",
    "FAKE_CUDA_STUB",    "FAKE_CUDA_FAIL",        "FAKE_CUDA_DRIVER_VERSION",
    "FAKE_CUDA_VMM",     "FAKE_CUDA_GRANULARITY",
};

static int setup(void **state)
{
    (void)state;
    driver_fake_reset(knobs, sizeof knobs / sizeof knobs[0], "VRAM_CUDA_LIBRARY", fake_lib);
    return 0;
}

static uint64_t free_bytes(void *st, int index)
{
    vram_device_info_t info = driver_unknown_info(ops);
    int rc = ops->device_info(st, index, &info);
    if (rc) fail_msg("device_info: %s: %s", vram_err_name(rc), vram_last_error());
    return info.free_bytes;
}

/* The fake, opened a second time: dlopen returns the same loaded instance, so
 * the test sees the driver state the backend works on. */
typedef struct {
    void *lib;
    cu_ctx_get_current_fn get_current;
    cu_ctx_set_current_fn set_current;
    cu_init_fn init;
    cu_device_get_count_fn count;
    cu_mem_alloc_fn alloc;
    cu_mem_free_fn mem_free;
    cu_mem_get_info_fn mem_info;
    cu_primary_ctx_retain_fn retain;
    cu_primary_ctx_release_fn release;
} direct_t;

static direct_t direct_open(void)
{
    direct_t d;
    memset(&d, 0, sizeof d);
    d.lib = dlopen(fake_lib, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(d.lib);
    void *p;
#define SYM(var, name) (p = dlsym(d.lib, name), assert_non_null(p), memcpy(&d.var, &p, sizeof p))
    SYM(get_current, "cuCtxGetCurrent");
    SYM(set_current, "cuCtxSetCurrent");
    SYM(init, "cuInit");
    SYM(count, "cuDeviceGetCount");
    SYM(alloc, "cuMemAlloc_v2");
    SYM(mem_free, "cuMemFree_v2");
    SYM(mem_info, "cuMemGetInfo_v2");
    SYM(retain, "cuDevicePrimaryCtxRetain");
    SYM(release, "cuDevicePrimaryCtxRelease_v2");
#undef SYM
    return d;
}

/* The fake must refuse what the driver refuses, or the tests prove nothing. */
static void fake_is_strict(void **state)
{
    (void)state;
    direct_t d = direct_open();
    int n = -1;
    assert_int_equal(d.count(&n), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(d.init(0), CUDA_SUCCESS);
    assert_int_equal(d.count(&n), CUDA_SUCCESS);
    assert_int_equal(n, 1);
    CUdeviceptr ptr = 0;
    size_t fr = 0, total = 0;
    assert_int_equal(d.set_current(NULL), CUDA_SUCCESS);
    assert_int_equal(d.alloc(&ptr, 1024), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(d.mem_info(&fr, &total), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext ctx = NULL;
    assert_int_equal(d.retain(&ctx, 0), CUDA_SUCCESS);
    assert_int_equal(d.set_current(ctx), CUDA_SUCCESS);
    assert_int_equal(d.alloc(&ptr, 1024), CUDA_SUCCESS);
    assert_int_equal(d.mem_free(ptr + 8), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(d.mem_free(ptr), CUDA_SUCCESS);
    assert_int_equal(d.mem_free(ptr), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(d.alloc(&ptr, 17 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(d.alloc(&ptr, 0), CUDA_ERROR_INVALID_VALUE);
    /* The last release destroys the context: using it is refused. */
    assert_int_equal(d.alloc(&ptr, 1024), CUDA_SUCCESS);
    assert_int_equal(d.release(0), CUDA_SUCCESS);
    assert_int_equal(d.alloc(&ptr, 1024), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(d.release(0), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(d.set_current(NULL), CUDA_SUCCESS);
    dlclose(d.lib);
}

static void reports_configured_numbers(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_DEVICES", "2", 1);
    setenv("FAKE_CUDA_NAME", "NVIDIA Test H100", 1);
    setenv("FAKE_CUDA_MEM", "16G,24G", 1);
    setenv("FAKE_CUDA_USED", "1G,3G", 1);
    setenv("FAKE_CUDA_CC", "8.6", 1);
    setenv("FAKE_CUDA_SMS", "84,28", 1);
    void *st = driver_open_ok(ops);
    int count = 0;
    assert_int_equal(ops->device_count(st, &count), 0);
    assert_int_equal(count, 2);
    for (int i = 0; i < 2; i++) {
        vram_device_info_t info = driver_unknown_info(ops);
        assert_int_equal(ops->device_info(st, i, &info), 0);
        assert_int_equal(info.index, i);
        assert_string_equal(info.name, "NVIDIA Test H100");
        assert_string_equal(info.backend, "cuda");
        assert_string_equal(info.uuid, i ? "GPU-c0da0000-0000-0000-0000-000000000001"
                                         : "GPU-c0da0000-0000-0000-0000-000000000000");
        assert_int_equal(info.total_bytes, i ? 24 * GiB : 16 * GiB);
        assert_int_equal(info.used_bytes, i ? 3 * GiB : 1 * GiB);
        assert_int_equal(info.free_bytes, i ? 21 * GiB : 15 * GiB);
        assert_int_equal(info.cc_major, 8);
        assert_int_equal(info.cc_minor, 6);
        assert_int_equal(info.multiprocessors, i ? 28 : 84);
        /* The driver API has no utilization, temperature or power. */
        assert_int_equal(info.utilization_pct, VRAM_UNKNOWN_INT);
        assert_int_equal(info.temperature_c, VRAM_UNKNOWN_INT);
        assert_true(info.power_w < 0);
    }
    vram_device_info_t info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 2, &info), VRAM_ENODEV);
    ops->close(st);
}

static void alloc_free_contract(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_MEM", "8G", 1);
    void *st = driver_open_ok(ops);
    direct_t d = direct_open();
    CUcontext before = (CUcontext)1;
    assert_int_equal(d.get_current(&before), CUDA_SUCCESS);
    assert_null(before);

    void *a = NULL, *b = NULL;
    assert_int_equal(ops->alloc(st, 0, GiB, &a), 0);
    assert_non_null(a);
    assert_int_equal(ops->alloc(st, 0, 512 * MiB, &b), 0);
    assert_true(a != b);
    assert_int_equal(free_bytes(st, 0), 8 * GiB - GiB - 512 * MiB);

    /* The caller's (empty) current context is restored after every call. */
    CUcontext after = (CUcontext)1;
    assert_int_equal(d.get_current(&after), CUDA_SUCCESS);
    assert_null(after);

    vram_process_info_t procs[2];
    size_t count = 0;
    assert_int_equal(ops->processes(st, 0, procs, 2, &count), 0);
    assert_int_equal(count, 1);
    assert_int_equal(procs[0].pid, getpid());
    assert_int_equal(procs[0].used_bytes, GiB + 512 * MiB);

    assert_int_equal(ops->free(st, 0, a), 0);
    assert_int_equal(free_bytes(st, 0), 8 * GiB - 512 * MiB);
    assert_int_equal(ops->free(st, 0, a), VRAM_EINVAL); /* twice */
    assert_non_null(strstr(vram_last_error(), "was not allocated"));
    assert_int_equal(ops->free(st, 0, (char *)b + 16), VRAM_EINVAL);
    assert_int_equal(ops->free(st, 0, NULL), 0);
    assert_int_equal(ops->free(st, 0, b), 0);
    assert_int_equal(free_bytes(st, 0), 8 * GiB);
    assert_int_equal(ops->processes(st, 0, procs, 2, &count), 0);
    assert_int_equal(count, 0);

    assert_int_equal(ops->alloc(st, 0, 0, &a), VRAM_EINVAL);
    assert_int_equal(ops->alloc(st, 1, GiB, &a), VRAM_ENODEV);
    ops->close(st);
    dlclose(d.lib);
}

static void caller_context_is_restored(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_DEVICES", "2", 1);
    void *st = driver_open_ok(ops);
    direct_t d = direct_open();
    /* The caller works on device 1; vram allocates on device 0. */
    CUcontext mine = NULL;
    assert_int_equal(d.retain(&mine, 1), CUDA_SUCCESS);
    assert_int_equal(d.set_current(mine), CUDA_SUCCESS);
    void *p = NULL;
    assert_int_equal(ops->alloc(st, 0, 64 * MiB, &p), 0);
    CUcontext now = NULL;
    assert_int_equal(d.get_current(&now), CUDA_SUCCESS);
    assert_ptr_equal(now, mine);
    size_t fr = 0, total = 0;
    assert_int_equal(d.mem_info(&fr, &total), CUDA_SUCCESS);
    assert_int_equal(fr, total); /* device 1 untouched */
    assert_int_equal(free_bytes(st, 0), 16 * GiB - 64 * MiB);
    assert_int_equal(ops->free(st, 0, p), 0);
    assert_int_equal(d.set_current(NULL), CUDA_SUCCESS);
    assert_int_equal(d.release(1), CUDA_SUCCESS);
    ops->close(st);
    dlclose(d.lib);
}

/* Like PyTorch: the caller holds device 0's primary context and has it
 * current. vram shares it and, on close, neither unsets nor destroys it. */
static void shared_primary_context_survives_close(void **state)
{
    (void)state;
    void *st = driver_open_ok(ops);
    direct_t d = direct_open();
    CUcontext mine = NULL;
    assert_int_equal(d.retain(&mine, 0), CUDA_SUCCESS);
    assert_int_equal(d.set_current(mine), CUDA_SUCCESS);
    void *p = NULL;
    assert_int_equal(ops->alloc(st, 0, 128 * MiB, &p), 0);
    CUdeviceptr own = 0;
    assert_int_equal(d.alloc(&own, 64 * MiB), CUDA_SUCCESS);
    ops->close(st);
    CUcontext now = NULL;
    assert_int_equal(d.get_current(&now), CUDA_SUCCESS);
    assert_ptr_equal(now, mine);
    size_t fr = 0, total = 0;
    assert_int_equal(d.mem_info(&fr, &total), CUDA_SUCCESS); /* still alive */
    assert_int_equal(total - fr, 64 * MiB); /* vram's leftover was freed, ours kept */
    assert_int_equal(d.mem_free(own), CUDA_SUCCESS);
    assert_int_equal(d.set_current(NULL), CUDA_SUCCESS);
    assert_int_equal(d.release(0), CUDA_SUCCESS);
    dlclose(d.lib);
}

static void close_frees_what_is_left(void **state)
{
    (void)state;
    void *keeper = driver_open_ok(ops); /* holds the primary context alive meanwhile */
    uint64_t initial = free_bytes(keeper, 0);
    void *st = driver_open_ok(ops);
    void *p = NULL;
    assert_int_equal(ops->alloc(st, 0, 2 * GiB, &p), 0);
    assert_int_equal(free_bytes(keeper, 0), initial - 2 * GiB);
    ops->close(st); /* without freeing */
    assert_int_equal(free_bytes(keeper, 0), initial);
    ops->close(keeper);
}

static void out_of_memory_is_enomem(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_MEM", "4G", 1);
    setenv("FAKE_CUDA_USED", "1G", 1);
    void *st = driver_open_ok(ops);
    void *p = (void *)1;
    assert_int_equal(ops->alloc(st, 0, 3 * GiB + 1, &p), VRAM_ENOMEM);
    assert_null(p);
    assert_non_null(strstr(vram_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
    assert_non_null(strstr(vram_last_error(), "device 0"));
    assert_int_equal(ops->alloc(st, 0, 3 * GiB, &p), 0);
    assert_int_equal(free_bytes(st, 0), 0);
    assert_int_equal(ops->free(st, 0, p), 0);
    ops->close(st);
}

static void injected_failures_are_translated(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_FAIL", "cuMemGetInfo_v2=909:1,cuMemAlloc_v2=214", 1);
    void *st = driver_open_ok(ops);
    vram_device_info_t info = driver_unknown_info(ops), before = info;
    assert_int_equal(ops->device_info(st, 0, &info), VRAM_EAGAIN);
    assert_non_null(strstr(vram_last_error(), "cuMemGetInfo_v2(device 0): CUDA_ERROR_TIMEOUT"));
    assert_memory_equal(&info, &before, sizeof info);
    assert_int_equal(ops->device_info(st, 0, &info), 0); /* transient: healed */
    assert_int_equal(info.total_bytes, 16 * GiB);
    void *p = NULL;
    assert_int_equal(ops->alloc(st, 0, MiB, &p), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "CUDA_ERROR_ECC_UNCORRECTABLE"));
    ops->close(st);

    setenv("FAKE_CUDA_FAIL", "cuDevicePrimaryCtxRetain=999", 1);
    st = driver_open_ok(ops);
    assert_int_equal(ops->device_info(st, 0, &info), VRAM_EAGAIN);
    assert_non_null(strstr(vram_last_error(), "cuDevicePrimaryCtxRetain"));
    ops->close(st);

    void *none = NULL;
    setenv("FAKE_CUDA_FAIL", "cuInit=999", 1);
    assert_int_equal(ops->open(&none), VRAM_EAGAIN);
    assert_non_null(strstr(vram_last_error(), "cuInit failed: CUDA_ERROR_UNKNOWN"));
    setenv("FAKE_CUDA_FAIL", "cuInit=803", 1); /* libcuda and kernel module differ */
    assert_int_equal(ops->open(&none), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "does not match the NVIDIA kernel module"));
    assert_non_null(strstr(vram_last_error(), "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"));
    setenv("FAKE_CUDA_FAIL", "cuInit=802", 1); /* not ready: worth retrying */
    assert_int_equal(ops->open(&none), VRAM_EAGAIN);
    setenv("FAKE_CUDA_FAIL", "cuInit=716", 1); /* a code neither side names */
    assert_int_equal(ops->open(&none), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "CUDA error 716"));
    assert_null(none);
}

static void stub_and_missing_driver_fail_cleanly(void **state)
{
    (void)state;
    void *st = (void *)1;
    setenv("FAKE_CUDA_STUB", "1", 1);
    assert_int_equal(ops->open(&st), VRAM_EDRIVER);
    assert_null(st);
    assert_non_null(strstr(vram_last_error(), "is the CUDA toolkit's stub library, not a driver"));
    unsetenv("FAKE_CUDA_STUB");

    setenv("FAKE_CUDA_DEVICES", "0", 1);
    assert_int_equal(ops->open(&st), VRAM_ENODEV);
    assert_non_null(strstr(vram_last_error(), "CUDA_ERROR_NO_DEVICE"));

    setenv("VRAM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    assert_int_equal(ops->open(&st), VRAM_ENOLIB);
    assert_string_equal(vram_last_error(), "no NVIDIA driver: /nonexistent/libcuda.so.1 not found");
}

static void real_toolkit_stub_fails_cleanly(void **state)
{
    (void)state;
    if (access(real_stub, R_OK) != 0) {
        print_message("skipped: %s is not installed\n", real_stub);
        skip();
    }
    setenv("VRAM_CUDA_LIBRARY", real_stub, 1);
    void *st = (void *)1;
    assert_int_equal(ops->open(&st), VRAM_EDRIVER);
    assert_null(st);
    assert_non_null(strstr(vram_last_error(), "stub library"));
    assert_non_null(strstr(vram_last_error(), real_stub));
}

/* Randomized: allocations and frees against a reference model of the
 * device's free memory and this process's live allocations. */
/* ---- virtual memory management ----------------------------------------- */

typedef struct {
    cu_mem_address_reserve_fn reserve;
    cu_mem_address_free_fn address_free;
    cu_mem_create_fn create;
    cu_mem_release_fn release;
    cu_mem_map_fn map;
    cu_mem_unmap_fn unmap;
    cu_mem_set_access_fn set_access;
    CUresult (*memset8)(CUdeviceptr dst, unsigned char value, size_t n);
} direct_vmm_t;

static direct_vmm_t direct_vmm(void *lib)
{
    direct_vmm_t v;
    void *p;
#define SYM(var, name) (p = dlsym(lib, name), assert_non_null(p), memcpy(&v.var, &p, sizeof p))
    SYM(reserve, "cuMemAddressReserve");
    SYM(address_free, "cuMemAddressFree");
    SYM(create, "cuMemCreate");
    SYM(release, "cuMemRelease");
    SYM(map, "cuMemMap");
    SYM(unmap, "cuMemUnmap");
    SYM(set_access, "cuMemSetAccess");
    SYM(memset8, "cuMemsetD8_v2");
#undef SYM
    return v;
}

/* The fake refuses every break of the VMM contract vram relies on. */
static void vmm_fake_is_strict(void **state)
{
    (void)state;
    direct_t d = direct_open();
    direct_vmm_t v = direct_vmm(d.lib);
    assert_int_equal(d.init(0), CUDA_SUCCESS);
    CUcontext ctx = NULL;
    assert_int_equal(d.retain(&ctx, 0), CUDA_SUCCESS);
    assert_int_equal(d.set_current(ctx), CUDA_SUCCESS);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUdeviceptr va = 0;
    assert_int_equal(v.reserve(&va, 3 * MiB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE); /* not 2 MiB */
    assert_int_equal(v.reserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    assert_int_equal(v.create(&h, MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(v.create(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    assert_int_equal(v.create(&h2, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    assert_int_equal(v.map(va + 4096, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* unaligned */
    assert_int_equal(v.map(va + 8 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* outside */
    assert_int_equal(v.map(va, 4 * MiB, 0, h, 0),
                     CUDA_ERROR_INVALID_VALUE); /* not the handle's size */
    assert_int_equal(v.map(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    assert_int_equal(v.map(va, 2 * MiB, 0, h2, 0), CUDA_ERROR_INVALID_VALUE); /* over a mapping */
    assert_int_equal(v.memset8(va, 0, 64), CUDA_ERROR_ILLEGAL_ADDRESS);       /* no access yet */
    assert_int_equal(v.set_access(va, 2 * MiB, &rw, 1), CUDA_SUCCESS);
    assert_int_equal(v.memset8(va, 0, 64), CUDA_SUCCESS);
    assert_int_equal(v.memset8(va + 2 * MiB, 0, 64), CUDA_ERROR_ILLEGAL_ADDRESS); /* unmapped */
    /* A handle is mapped at one place at a time: unmapped first, then mapped
     * elsewhere, where access must be set again before use. */
    assert_int_equal(v.map(va + 4 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(v.unmap(va, 2 * MiB), CUDA_SUCCESS);
    assert_int_equal(v.map(va + 4 * MiB, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    assert_int_equal(v.memset8(va + 4 * MiB, 0, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(v.memset8(va, 0, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(v.unmap(va + 4 * MiB, 2 * MiB), CUDA_SUCCESS);
    assert_int_equal(v.map(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    assert_int_equal(v.set_access(va, 2 * MiB, &rw, 1), CUDA_SUCCESS);
    assert_int_equal(v.release(h), CUDA_ERROR_INVALID_VALUE);                /* still mapped */
    assert_int_equal(v.address_free(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE); /* has a mapping */
    assert_int_equal(v.unmap(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE);        /* not the mapping */
    assert_int_equal(v.unmap(va, 2 * MiB), CUDA_SUCCESS);
    assert_int_equal(v.memset8(va, 0, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(v.release(h), CUDA_SUCCESS);
    assert_int_equal(v.release(h2), CUDA_SUCCESS);
    assert_int_equal(v.release(h2), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(v.address_free(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE); /* not its size */
    assert_int_equal(v.address_free(va, 8 * MiB), CUDA_SUCCESS);
    assert_int_equal(d.release(0), CUDA_SUCCESS);
    assert_int_equal(d.set_current(NULL), CUDA_SUCCESS);
    dlclose(d.lib);
}

/* Through the backend: the granularity from the driver; map makes memory
 * usable (access set) and counted; unmap and unreserve give it back; a
 * contract violation is EINVAL before the driver sees it; what is left at
 * close is unmapped, released and unreserved. */
static void vmm_contract(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_MEM", "8G", 1);
    void *st = driver_open_ok(ops);
    direct_t d = direct_open();
    direct_vmm_t v = direct_vmm(d.lib);
    size_t g = 0;
    assert_int_equal(ops->vmm_granularity(st, 0, &g), 0);
    assert_int_equal(g, 2 * MiB);
    void *va = NULL;
    assert_int_equal(ops->vmm_reserve(st, 0, 64 * MiB, &va), 0);
    assert_int_equal((uintptr_t)va % g, 0);
    assert_int_equal(ops->vmm_map(st, 0, va, 4 * MiB), 0);
    assert_int_equal(ops->vmm_map(st, 0, (char *)va + 4 * MiB, 2 * MiB), 0);
    assert_int_equal(free_bytes(st, 0), 8 * GiB - 6 * MiB);
    vram_process_info_t procs[1];
    size_t count = 0;
    assert_int_equal(ops->processes(st, 0, procs, 1, &count), 0);
    assert_int_equal(procs[0].used_bytes, 6 * MiB);
    /* Usable from the device: the backend set access (in the primary context). */
    CUcontext ctx = NULL;
    assert_int_equal(d.retain(&ctx, 0), CUDA_SUCCESS);
    assert_int_equal(d.set_current(ctx), CUDA_SUCCESS);
    assert_int_equal(v.memset8((CUdeviceptr)(uintptr_t)va + 5 * MiB, 0, 4096), CUDA_SUCCESS);
    assert_int_equal(d.set_current(NULL), CUDA_SUCCESS);
    assert_int_equal(d.release(0), CUDA_SUCCESS);

    assert_int_equal(ops->vmm_map(st, 0, (char *)va + 4096, 2 * MiB), VRAM_EINVAL);
    assert_int_equal(ops->vmm_map(st, 0, va, 3 * MiB), VRAM_EINVAL);
    assert_int_equal(ops->vmm_map(st, 0, va, 2 * MiB),
                     VRAM_EDRIVER); /* over a mapping: the driver */
    assert_int_equal(ops->vmm_unmap(st, 0, va, 2 * MiB), VRAM_EINVAL); /* half a chunk */
    assert_int_equal(ops->vmm_unreserve(st, 0, va, 32 * MiB), VRAM_EINVAL);
    assert_int_equal(ops->vmm_unmap(st, 0, va, 4 * MiB), 0);
    assert_int_equal(free_bytes(st, 0), 8 * GiB - 2 * MiB);
    assert_int_equal(ops->vmm_reserve(st, 0, 3 * MiB, &va), VRAM_EINVAL);
    ops->close(st); /* with a chunk still mapped and a reservation held */
    st = driver_open_ok(ops);
    assert_int_equal(free_bytes(st, 0), 8 * GiB);
    ops->close(st);
    dlclose(d.lib);
}

/* Moving a chunk through the backend: the same handle unmapped, mapped at
 * the new place and given access there (usable at once; the old place is
 * an illegal address), device memory in use unchanged; a source that is
 * not one chunk, or a destination outside the reservations or over a
 * mapping, is EINVAL before the driver sees it. */
static void vmm_move_on_the_driver(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_MEM", "8G", 1);
    void *st = driver_open_ok(ops);
    direct_t d = direct_open();
    direct_vmm_t v = direct_vmm(d.lib);
    char *va = NULL;
    assert_int_equal(ops->vmm_reserve(st, 0, 64 * MiB, (void **)&va), 0);
    assert_int_equal(ops->vmm_map(st, 0, va, 4 * MiB), 0);
    assert_int_equal(ops->vmm_map(st, 0, va + 16 * MiB, 2 * MiB), 0);
    assert_int_equal(free_bytes(st, 0), 8 * GiB - 6 * MiB);
    assert_int_equal(ops->vmm_move(st, 0, va, va + 8 * MiB, 4 * MiB), 0);
    assert_int_equal(free_bytes(st, 0), 8 * GiB - 6 * MiB);
    CUcontext ctx = NULL;
    assert_int_equal(d.retain(&ctx, 0), CUDA_SUCCESS);
    assert_int_equal(d.set_current(ctx), CUDA_SUCCESS);
    CUdeviceptr base = (CUdeviceptr)(uintptr_t)va;
    assert_int_equal(v.memset8(base + 8 * MiB, 0, 4 * MiB), CUDA_SUCCESS);
    assert_int_equal(v.memset8(base, 0, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(d.set_current(NULL), CUDA_SUCCESS);
    assert_int_equal(d.release(0), CUDA_SUCCESS);
    assert_int_equal(ops->vmm_move(st, 0, va, va + 32 * MiB, 4 * MiB), VRAM_EINVAL); /* gone */
    assert_int_equal(ops->vmm_move(st, 0, va + 8 * MiB, va + 32 * MiB, 2 * MiB),
                     VRAM_EINVAL); /* part of the chunk */
    assert_int_equal(ops->vmm_move(st, 0, va + 8 * MiB, va + 14 * MiB, 4 * MiB),
                     VRAM_EINVAL); /* over a mapping */
    assert_int_equal(ops->vmm_move(st, 0, va + 8 * MiB, va + 62 * MiB, 4 * MiB),
                     VRAM_EINVAL); /* past the reservation */
    assert_int_equal(ops->vmm_move(st, 0, va + 8 * MiB, va + 33 * MiB, 4 * MiB),
                     VRAM_EINVAL); /* misaligned */
    assert_int_equal(ops->vmm_unmap(st, 0, va, 4 * MiB), VRAM_EINVAL);
    assert_int_equal(ops->vmm_unmap(st, 0, va + 8 * MiB, 4 * MiB), 0);
    assert_int_equal(free_bytes(st, 0), 8 * GiB - 2 * MiB);
    /* A moved chunk still mapped at close is unmapped and released there. */
    assert_int_equal(ops->vmm_move(st, 0, va + 16 * MiB, va, 2 * MiB), 0);
    ops->close(st);
    st = driver_open_ok(ops);
    assert_int_equal(free_bytes(st, 0), 8 * GiB);
    ops->close(st);
    dlclose(d.lib);
}

/* A driver without VMM: ENOTSUP, and a pool on it keeps segments. */
static void vmm_unsupported(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_VMM", "0", 1);
    void *st = driver_open_ok(ops);
    size_t g = 0;
    assert_int_equal(ops->vmm_granularity(st, 0, &g), VRAM_ENOTSUP);
    void *va;
    assert_int_equal(ops->vmm_reserve(st, 0, 64 * MiB, &va), VRAM_ENOTSUP);
    ops->close(st);
}

/* The whole chain: a pool with expandable segments on the cuda backend
 * over the fake driver, which checks every call. */
static void pool_expandable_on_cuda(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_MEM", "1G", 1);
    vram_ctx_t *ctx;
    assert_int_equal(vram_option_set(VRAM_OPT_CUDA_LIBRARY, fake_lib), 0);
    assert_int_equal(vram_ctx_open_backend("cuda", &ctx), 0);
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED,
                              .expandable = VRAM_POOL_EXPANDABLE_AUTO};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(ctx, 0, &cfg, &pool), 0);
    void *p[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(vram_pool_alloc(pool, (size_t)(i + 1) * 3 * MiB + 100, NULL, &p[i]), 0);
    vram_pool_stats_t s;
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_true(s.num_device_map > 0);
    assert_int_equal(s.num_device_alloc, 0);
    for (int i = 0; i < 8; i += 2)
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
    /* More than the device has: the chain unmaps the cached end, then fails. */
    void *big;
    assert_int_equal(vram_pool_alloc(pool, 1000 * MiB, NULL, &big), VRAM_ENOMEM);
    for (int i = 1; i < 8; i += 2)
        assert_int_equal(vram_pool_free(pool, p[i]), 0);
    assert_int_equal(vram_pool_trim(pool, NULL), 0);
    assert_int_equal(vram_pool_stats(pool, &s), 0);
    assert_int_equal(s.reserved_bytes[VRAM_POOL_STAT_ALL].current, 0);
    assert_int_equal(s.num_device_map, s.num_device_unmap);
    vram_device_info_t info;
    assert_int_equal(vram_device_info(ctx, 0, &info), 0);
    assert_int_equal(info.free_bytes, GiB);
    vram_pool_destroy(pool);
    vram_ctx_close(ctx);
}

static void randomized_against_model(void **state)
{
    (void)state;
    setenv("FAKE_CUDA_MEM", "6G", 1);
    setenv("FAKE_CUDA_USED", "700M", 1);
    void *st = driver_open_ok(ops);
    enum { MAX_LIVE = 64 };
    void *live[MAX_LIVE];
    uint64_t sizes[MAX_LIVE];
    size_t nlive = 0;
    uint64_t model_free = 6 * GiB - 700 * MiB, model_used_by_us = 0;
    unsigned seed = 77u;
    for (int op = 0; op < 400; op++) {
        if (nlive < MAX_LIVE && (nlive == 0 || rand_r(&seed) % 3 != 0)) {
            uint64_t size = 1 + (uint64_t)rand_r(&seed) % (1536 * MiB);
            void *p = NULL;
            int rc = ops->alloc(st, 0, size, &p);
            if (size > model_free) {
                assert_int_equal(rc, VRAM_ENOMEM);
                assert_null(p);
            } else {
                assert_int_equal(rc, 0);
                for (size_t k = 0; k < nlive; k++)
                    assert_true(live[k] != p);
                live[nlive] = p;
                sizes[nlive++] = size;
                model_free -= size;
                model_used_by_us += size;
            }
        } else {
            size_t k = (size_t)rand_r(&seed) % nlive;
            assert_int_equal(ops->free(st, 0, live[k]), 0);
            model_free += sizes[k];
            model_used_by_us -= sizes[k];
            live[k] = live[--nlive];
            sizes[k] = sizes[nlive];
        }
        if (op % 20 == 0) {
            assert_int_equal(free_bytes(st, 0), model_free);
            vram_process_info_t me;
            size_t count = 0;
            assert_int_equal(ops->processes(st, 0, &me, 1, &count), 0);
            assert_int_equal(count, nlive ? 1 : 0);
            if (nlive) assert_int_equal(me.used_bytes, model_used_by_us);
        }
    }
    while (nlive)
        assert_int_equal(ops->free(st, 0, live[--nlive]), 0);
    assert_int_equal(free_bytes(st, 0), 6 * GiB - 700 * MiB);
    ops->close(st);
}

int main(void)
{
    if (!driver_fake_path(fake_lib, sizeof fake_lib, "libcuda.so.1")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(fake_is_strict, setup),
        cmocka_unit_test_setup(reports_configured_numbers, setup),
        cmocka_unit_test_setup(alloc_free_contract, setup),
        cmocka_unit_test_setup(caller_context_is_restored, setup),
        cmocka_unit_test_setup(shared_primary_context_survives_close, setup),
        cmocka_unit_test_setup(close_frees_what_is_left, setup),
        cmocka_unit_test_setup(out_of_memory_is_enomem, setup),
        cmocka_unit_test_setup(injected_failures_are_translated, setup),
        cmocka_unit_test_setup(stub_and_missing_driver_fail_cleanly, setup),
        cmocka_unit_test_setup(real_toolkit_stub_fails_cleanly, setup),
        cmocka_unit_test_setup(randomized_against_model, setup),
        cmocka_unit_test_setup(vmm_fake_is_strict, setup),
        cmocka_unit_test_setup(vmm_contract, setup),
        cmocka_unit_test_setup(vmm_move_on_the_driver, setup),
        cmocka_unit_test_setup(vmm_unsupported, setup),
        cmocka_unit_test_setup(pool_expandable_on_cuda, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
