/* The nvml backend against the strict fake libnvidia-ml.so.1 (tests/fakes):
 * reported numbers, the v2 -> v1 memory fallback, the INSUFFICIENT_SIZE
 * protocol with hundreds of processes, unknown process memory, injected
 * failures and their translation. The ops are called directly. */
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
#include "device/nvml_api.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static const vram_backend_ops_t *ops = &vram_backend_nvml;
static char fake_lib[4096], v1only_lib[4096];

static const char *knobs[] = {
    "FAKE_NVML_DEVICES",      "FAKE_NVML_NAME",          "FAKE_NVML_MEM_TOTAL",
    "FAKE_NVML_MEM_USED",     "FAKE_NVML_MEM_RESERVED",  "FAKE_NVML_CC",
    "FAKE_NVML_UTIL",         "FAKE_NVML_TEMP",          "FAKE_NVML_POWER_MW",
    "FAKE_NVML_PROCESSES",    "FAKE_NVML_PROCESS_COUNT", "FAKE_NVML_PROC_GROW",
    "FAKE_NVML_PROC_UNKNOWN", "FAKE_NVML_V3_STRIDE",     "FAKE_NVML_NO_V2",
    "FAKE_NVML_FAIL",
};

/* Every test starts from the fake's defaults and the fake library. */
static int setup(void **state)
{
    (void)state;
    driver_fake_reset(knobs, sizeof knobs / sizeof knobs[0], "VRAM_NVML_LIBRARY", fake_lib);
    return 0;
}

static void reports_configured_numbers(void **state)
{
    (void)state;
    setenv("FAKE_NVML_DEVICES", "2", 1);
    setenv("FAKE_NVML_NAME", "NVIDIA Test GPU", 1);
    setenv("FAKE_NVML_MEM_TOTAL", "80G,40G", 1);
    setenv("FAKE_NVML_MEM_USED", "10G,1G", 1);
    setenv("FAKE_NVML_MEM_RESERVED", "512M", 1);
    setenv("FAKE_NVML_CC", "9.0", 1);
    setenv("FAKE_NVML_UTIL", "37,80", 1);
    setenv("FAKE_NVML_TEMP", "45,71", 1);
    setenv("FAKE_NVML_POWER_MW", "250000,123456", 1);
    void *st = driver_open_ok(ops);
    int count = -1;
    assert_int_equal(ops->device_count(st, &count), 0);
    assert_int_equal(count, 2);

    vram_device_info_t info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 0, &info), 0);
    assert_int_equal(info.index, 0);
    assert_string_equal(info.name, "NVIDIA Test GPU");
    assert_string_equal(info.backend, "nvml");
    assert_string_equal(info.uuid, "GPU-fa4e0000-0000-4000-8000-000000000000");
    assert_int_equal(info.total_bytes, 80 * GiB);
    /* v2 keeps the driver's reservation out of "used". */
    assert_int_equal(info.used_bytes, 10 * GiB);
    assert_int_equal(info.free_bytes, 80 * GiB - 10 * GiB - 512 * MiB);
    assert_int_equal(info.cc_major, 9);
    assert_int_equal(info.cc_minor, 0);
    assert_int_equal(info.multiprocessors, VRAM_UNKNOWN_INT); /* not in NVML */
    assert_int_equal(info.utilization_pct, 37);
    assert_int_equal(info.temperature_c, 45);
    assert_true(info.power_w > 249.999 && info.power_w < 250.001);

    info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 1, &info), 0);
    assert_int_equal(info.index, 1);
    assert_string_equal(info.uuid, "GPU-fa4e0000-0000-4000-8000-000000000001");
    assert_int_equal(info.total_bytes, 40 * GiB);
    assert_int_equal(info.used_bytes, 1 * GiB);
    assert_int_equal(info.utilization_pct, 80);
    assert_int_equal(info.temperature_c, 71);
    assert_true(info.power_w > 123.455 && info.power_w < 123.457);

    assert_int_equal(ops->device_info(st, 2, &info), VRAM_ENODEV);
    assert_non_null(strstr(vram_last_error(), "no device 2"));
    assert_int_equal(ops->device_info(st, -1, &info), VRAM_ENODEV);
    assert_null(ops->alloc);
    assert_null(ops->free);
    ops->close(st);
}

/* v1 reports used = total - free (reservation included): the tests can tell
 * which call answered. */
static void check_v1_numbers(void *st)
{
    vram_device_info_t info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 0, &info), 0);
    assert_int_equal(info.total_bytes, 24 * GiB);
    assert_int_equal(info.used_bytes, 3 * GiB + 256 * MiB);
    assert_int_equal(info.free_bytes, 24 * GiB - 3 * GiB - 256 * MiB);
    /* The second query goes straight to v1 and agrees. */
    vram_device_info_t again = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 0, &again), 0);
    assert_int_equal(again.used_bytes, info.used_bytes);
}

static void memory_falls_back_to_v1(void **state)
{
    (void)state;
    setenv("FAKE_NVML_MEM_TOTAL", "24G", 1);
    setenv("FAKE_NVML_MEM_USED", "3G", 1);
    setenv("FAKE_NVML_MEM_RESERVED", "256M", 1);
    static const char *modes[] = {"1", "notsup"};
    for (size_t i = 0; i < 2; i++) {
        setenv("FAKE_NVML_NO_V2", modes[i], 1);
        void *st = driver_open_ok(ops);
        check_v1_numbers(st);
        ops->close(st);
    }
    /* An old driver without the _v2 symbols at all. */
    unsetenv("FAKE_NVML_NO_V2");
    setenv("VRAM_NVML_LIBRARY", v1only_lib, 1);
    void *st = driver_open_ok(ops);
    check_v1_numbers(st);
    ops->close(st);
}

/* Checks the synthetic processes of FAKE_NVML_PROCESS_COUNT: pid 100000+i
 * using (i+1) MiB, read with capacity `cap`. */
static void check_synthetic_processes(void *st, size_t n, size_t cap)
{
    vram_process_info_t *procs = calloc(cap ? cap : 1, sizeof *procs);
    assert_non_null(procs);
    size_t count = 12345;
    int rc = ops->processes(st, 0, procs, cap, &count);
    if (rc) fail_msg("processes: %s: %s", vram_err_name(rc), vram_last_error());
    assert_int_equal(count, n);
    for (size_t i = 0; i < n && i < cap; i++) {
        assert_int_equal(procs[i].pid, 100000 + (pid_t)i);
        assert_int_equal(procs[i].used_bytes, (i + 1) * MiB);
    }
    free(procs);
}

static void many_processes_through_every_api(void **state)
{
    (void)state;
    setenv("FAKE_NVML_PROCESS_COUNT", "300", 1);
    const struct {
        const char *lib, *no_v2, *stride;
    } variants[] = {
        {fake_lib, NULL, "24"},     /* _v3, today's layout */
        {fake_lib, NULL, "32"},     /* _v3 on 535.43-535.86 */
        {fake_lib, "1", NULL},      /* _v3/_v2 missing in the driver: v1 */
        {fake_lib, "notsup", NULL}, /* _v3/_v2 refused for this device: v1 */
        {v1only_lib, NULL, NULL},   /* old driver: v1 symbol only */
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        setenv("VRAM_NVML_LIBRARY", variants[v].lib, 1);
        if (variants[v].no_v2)
            setenv("FAKE_NVML_NO_V2", variants[v].no_v2, 1);
        else
            unsetenv("FAKE_NVML_NO_V2");
        if (variants[v].stride)
            setenv("FAKE_NVML_V3_STRIDE", variants[v].stride, 1);
        else
            unsetenv("FAKE_NVML_V3_STRIDE");
        void *st = driver_open_ok(ops);
        check_synthetic_processes(st, 300, 300);
        check_synthetic_processes(st, 300, 10); /* count is the total, 10 written */
        check_synthetic_processes(st, 300, 0);
        check_synthetic_processes(st, 300, 400);
        ops->close(st);
    }
}

static void processes_per_device_with_names(void **state)
{
    (void)state;
    char spec[128];
    snprintf(spec, sizeof spec, "%ld:1G,4242:2G@1,4243:512M@1", (long)getpid());
    setenv("FAKE_NVML_DEVICES", "2", 1);
    setenv("FAKE_NVML_PROCESSES", spec, 1);
    void *st = driver_open_ok(ops);
    vram_process_info_t procs[4];
    size_t count = 0;
    assert_int_equal(ops->processes(st, 0, procs, 4, &count), 0);
    assert_int_equal(count, 1);
    assert_int_equal(procs[0].pid, getpid());
    assert_int_equal(procs[0].used_bytes, GiB);
    char comm[64] = "";
    FILE *f = fopen("/proc/self/comm", "r");
    assert_non_null(f);
    assert_non_null(fgets(comm, sizeof comm, f));
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    assert_string_equal(procs[0].name, comm);

    assert_int_equal(ops->processes(st, 1, procs, 4, &count), 0);
    assert_int_equal(count, 2);
    assert_int_equal(procs[0].pid, 4242);
    assert_int_equal(procs[0].used_bytes, 2 * GiB);
    assert_int_equal(procs[1].pid, 4243);
    assert_int_equal(procs[1].used_bytes, 512 * MiB);

    /* Device used memory defaults to the processes' sum. */
    vram_device_info_t info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 1, &info), 0);
    assert_int_equal(info.used_bytes, 2 * GiB + 512 * MiB);
    assert_int_equal(ops->processes(st, 5, procs, 4, &count), VRAM_ENODEV);
    ops->close(st);
}

static void no_processes_is_an_empty_list(void **state)
{
    (void)state;
    void *st = driver_open_ok(ops);
    size_t count = 99;
    assert_int_equal(ops->processes(st, 0, NULL, 0, &count), 0);
    assert_int_equal(count, 0);
    ops->close(st);
}

static void processes_refused_everywhere_is_enotsup(void **state)
{
    (void)state;
    setenv("FAKE_NVML_PROCESSES", "777:1G", 1);
    setenv("FAKE_NVML_FAIL",
           "nvmlDeviceGetComputeRunningProcesses_v3=3,nvmlDeviceGetComputeRunningProcesses_v2=3,"
           "nvmlDeviceGetComputeRunningProcesses=3",
           1);
    void *st = driver_open_ok(ops);
    vram_process_info_t procs[2];
    size_t count = 5;
    assert_int_equal(ops->processes(st, 0, procs, 2, &count), VRAM_ENOTSUP);
    assert_int_equal(count, 0);
    assert_non_null(strstr(vram_last_error(), "nvmlDeviceGetComputeRunningProcesses(device 0)"));
    /* Only the v3 call refuses: v2 answers. */
    ops->close(st);
    setenv("FAKE_NVML_FAIL", "nvmlDeviceGetComputeRunningProcesses_v3=3", 1);
    st = driver_open_ok(ops);
    assert_int_equal(ops->processes(st, 0, procs, 2, &count), 0);
    assert_int_equal(count, 1);
    assert_int_equal(procs[0].used_bytes, GiB);
    ops->close(st);
}

static void unknown_process_memory_is_unknown(void **state)
{
    (void)state;
    setenv("FAKE_NVML_PROCESSES", "777:1G,778:2G", 1);
    setenv("FAKE_NVML_PROC_UNKNOWN", "1", 1);
    for (int lib = 0; lib < 2; lib++) {
        setenv("VRAM_NVML_LIBRARY", lib ? v1only_lib : fake_lib, 1);
        void *st = driver_open_ok(ops);
        vram_process_info_t procs[4];
        size_t count = 0;
        assert_int_equal(ops->processes(st, 0, procs, 4, &count), 0);
        assert_int_equal(count, 2);
        assert_int_equal(procs[0].pid, 777);
        assert_true(procs[0].used_bytes == VRAM_UNKNOWN_U64);
        assert_true(procs[1].used_bytes == VRAM_UNKNOWN_U64);
        ops->close(st);
    }
}

static void process_churn_is_retried_then_bounded(void **state)
{
    (void)state;
    setenv("FAKE_NVML_PROCESS_COUNT", "300", 1);
    /* A few processes start between the count and the fill call: the slack
     * absorbs them and the answer includes them. */
    setenv("FAKE_NVML_PROC_GROW", "5", 1);
    void *st = driver_open_ok(ops);
    vram_process_info_t procs[512];
    size_t count = 0;
    assert_int_equal(ops->processes(st, 0, procs, 512, &count), 0);
    assert_true(count >= 300 && count <= 320);
    ops->close(st);

    /* Thousands start every time: the loop gives up, transiently. */
    setenv("FAKE_NVML_PROC_GROW", "5000", 1);
    st = driver_open_ok(ops);
    count = 7;
    assert_int_equal(ops->processes(st, 0, procs, 512, &count), VRAM_EAGAIN);
    assert_non_null(strstr(vram_last_error(), "kept growing"));
    assert_int_equal(count, 0);
    ops->close(st);
}

static void injected_failures_are_translated(void **state)
{
    (void)state;
    static const struct {
        const char *fail;
        int rc;
        const char *words;
    } cases[] = {
        {"nvmlDeviceGetTemperature=10", VRAM_EAGAIN, "nvmlDeviceGetTemperature(device 0): Timeout"},
        {"nvmlDeviceGetMemoryInfo_v2=999", VRAM_EAGAIN, "Unknown Error (NVML error 999)"},
        {"nvmlDeviceGetMemoryInfo_v2=15", VRAM_EDRIVER, "GPU is lost"},
        {"nvmlDeviceGetName=15", VRAM_EDRIVER, "nvmlDeviceGetName(device 0)"},
        {"nvmlDeviceGetHandleByIndex_v2=28", VRAM_ENODEV, "nvmlDeviceGetHandleByIndex_v2"},
        {"nvmlDeviceGetPowerUsage=15", VRAM_EDRIVER, "nvmlDeviceGetPowerUsage"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("FAKE_NVML_FAIL", cases[i].fail, 1);
        void *st = driver_open_ok(ops);
        vram_device_info_t info = driver_unknown_info(ops), before = info;
        int rc = ops->device_info(st, 0, &info);
        if (rc != cases[i].rc)
            fail_msg("%s: got %s (%s)", cases[i].fail, vram_err_name(rc), vram_last_error());
        if (!strstr(vram_last_error(), cases[i].words))
            fail_msg("%s: message \"%s\" lacks \"%s\"", cases[i].fail, vram_last_error(),
                     cases[i].words);
        /* A failed query leaves the caller's struct as it was. */
        assert_memory_equal(&info, &before, sizeof info);
        ops->close(st);
    }
}

static void transient_failures_heal_on_retry(void **state)
{
    (void)state;
    setenv("FAKE_NVML_FAIL",
           "nvmlDeviceGetTemperature=10:2,nvmlDeviceGetComputeRunningProcesses_v3=10:1", 1);
    setenv("FAKE_NVML_PROCESSES", "1000:1G", 1);
    void *st = driver_open_ok(ops);
    vram_device_info_t info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 0, &info), VRAM_EAGAIN);
    assert_int_equal(ops->device_info(st, 0, &info), VRAM_EAGAIN);
    assert_int_equal(ops->device_info(st, 0, &info), 0);
    assert_int_equal(info.temperature_c, 45);
    vram_process_info_t procs[2];
    size_t count = 0;
    assert_int_equal(ops->processes(st, 0, procs, 2, &count), VRAM_EAGAIN);
    assert_int_equal(ops->processes(st, 0, procs, 2, &count), 0);
    assert_int_equal(count, 1);
    ops->close(st);
}

static void missing_features_stay_unknown(void **state)
{
    (void)state;
    /* NOT_SUPPORTED and NO_PERMISSION are facts about the device, not errors. */
    setenv("FAKE_NVML_FAIL",
           "nvmlDeviceGetTemperature=3,nvmlDeviceGetPowerUsage=4,nvmlDeviceGetUUID=3,"
           "nvmlDeviceGetUtilizationRates=3,nvmlDeviceGetCudaComputeCapability=3",
           1);
    void *st = driver_open_ok(ops);
    vram_device_info_t info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 0, &info), 0);
    assert_int_equal(info.temperature_c, VRAM_UNKNOWN_INT);
    assert_int_equal(info.utilization_pct, VRAM_UNKNOWN_INT);
    assert_int_equal(info.cc_major, VRAM_UNKNOWN_INT);
    assert_true(info.power_w < 0);
    assert_string_equal(info.uuid, "");
    assert_int_equal(info.total_bytes, 80 * GiB);
    ops->close(st);
}

static void one_failing_device_does_not_affect_others(void **state)
{
    (void)state;
    setenv("FAKE_NVML_DEVICES", "3", 1);
    setenv("FAKE_NVML_FAIL", "nvmlDeviceGetMemoryInfo_v2@1=15", 1);
    void *st = driver_open_ok(ops);
    vram_device_info_t info = driver_unknown_info(ops);
    assert_int_equal(ops->device_info(st, 0, &info), 0);
    assert_int_equal(ops->device_info(st, 1, &info), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "(device 1)"));
    assert_int_equal(ops->device_info(st, 2, &info), 0);
    assert_int_equal(info.index, 2);
    ops->close(st);
}

static void open_failures_are_clear(void **state)
{
    (void)state;
    void *st = (void *)1;
    setenv("VRAM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_int_equal(ops->open(&st), VRAM_ENOLIB);
    assert_null(st);
    assert_string_equal(vram_last_error(),
                        "no NVIDIA driver: /nonexistent/libnvidia-ml.so.1 not found");

    setenv("VRAM_NVML_LIBRARY", fake_lib, 1);
    setenv("FAKE_NVML_FAIL", "nvmlInit_v2=9", 1);
    assert_int_equal(ops->open(&st), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "Driver Not Loaded"));

    setenv("FAKE_NVML_FAIL", "nvmlDeviceGetCount_v2=15", 1);
    assert_int_equal(ops->open(&st), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "nvmlDeviceGetCount_v2"));

    unsetenv("FAKE_NVML_FAIL");
    setenv("FAKE_NVML_DEVICES", "0", 1);
    assert_int_equal(ops->open(&st), VRAM_ENODEV);
    assert_non_null(strstr(vram_last_error(), "0 devices"));

    /* A library that is not NVML at all (the fake CUDA driver). */
    char cuda[4096];
    assert_true(driver_fake_path(cuda, sizeof cuda, "libcuda.so.1"));
    setenv("VRAM_NVML_LIBRARY", cuda, 1);
    assert_int_equal(ops->open(&st), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "lacks nvmlInit_v2"));
    assert_null(st);
}

/* The fake itself must refuse what NVML refuses, or the tests above prove
 * nothing. Called directly, bypassing the backend. */
static void fake_is_strict(void **state)
{
    (void)state;
    void *lib = dlopen(fake_lib, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    nvml_init_fn init;
    nvml_shutdown_fn shutdown;
    nvml_get_count_fn count_fn;
    nvml_get_handle_fn handle_fn;
    nvml_get_memory_v2_fn mem_v2;
    nvml_get_processes_fn procs_fn;
    void *p;
#define SYM(var, name) (p = dlsym(lib, name), assert_non_null(p), memcpy(&var, &p, sizeof p))
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(count_fn, "nvmlDeviceGetCount_v2");
    SYM(handle_fn, "nvmlDeviceGetHandleByIndex_v2");
    SYM(mem_v2, "nvmlDeviceGetMemoryInfo_v2");
    SYM(procs_fn, "nvmlDeviceGetComputeRunningProcesses_v2");
#undef SYM
    unsigned int n = 0;
    assert_int_equal(count_fn(&n), NVML_ERROR_UNINITIALIZED);
    setenv("FAKE_NVML_PROCESSES", "1:1G,2:1G,3:1G", 1);
    assert_int_equal(init(), NVML_SUCCESS);
    nvmlDevice_t dev = NULL;
    assert_int_equal(handle_fn(0, &dev), NVML_SUCCESS);
    assert_int_equal(handle_fn(1, &dev), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(handle_fn(0, &dev), NVML_SUCCESS);

    nvmlMemory_v2_t m;
    memset(&m, 0, sizeof m);
    m.version = 2; /* the classic mistake: the version number, not the word */
    assert_int_equal(mem_v2(dev, &m), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    m.version = 0x02000028;
    assert_int_equal(mem_v2(dev, &m), NVML_SUCCESS);
    assert_int_equal(mem_v2((nvmlDevice_t)&m, &m), NVML_ERROR_INVALID_ARGUMENT);

    nvmlProcessInfo_v2_t infos[3];
    unsigned int want = 0;
    assert_int_equal(procs_fn(dev, &want, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(want, 3);
    want = 2;
    assert_int_equal(procs_fn(dev, &want, infos), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(want, 3);
    assert_int_equal(procs_fn(dev, &want, infos), NVML_SUCCESS);
    assert_int_equal(infos[2].pid, 3);
    assert_int_equal(shutdown(), NVML_SUCCESS);
    assert_int_equal(mem_v2(dev, &m), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(shutdown(), NVML_ERROR_UNINITIALIZED);
    dlclose(lib);
}

/* Randomized: configured numbers and process lists of random sizes read
 * back exactly through every API variant, for random capacities. */
static void randomized_against_configuration(void **state)
{
    (void)state;
    unsigned seed = 20261122u;
    for (int round = 0; round < 24; round++) {
        setup(NULL);
        int devices = 1 + (int)(rand_r(&seed) % 4);
        unsigned long long total[4], used[4];
        char tot[128] = "", use[128] = "", num[4] = "";
        for (int d = 0; d < devices; d++) {
            total[d] = (8 + rand_r(&seed) % 120) * GiB;
            used[d] = (rand_r(&seed) % 8000) * MiB;
            snprintf(tot + strlen(tot), sizeof tot - strlen(tot), "%s%lluM", d ? "," : "",
                     total[d] / MiB);
            snprintf(use + strlen(use), sizeof use - strlen(use), "%s%lluM", d ? "," : "",
                     used[d] / MiB);
        }
        size_t nprocs = rand_r(&seed) % 400;
        char nproc_text[16];
        snprintf(num, sizeof num, "%d", devices);
        snprintf(nproc_text, sizeof nproc_text, "%zu", nprocs);
        setenv("FAKE_NVML_DEVICES", num, 1);
        setenv("FAKE_NVML_MEM_TOTAL", tot, 1);
        setenv("FAKE_NVML_MEM_USED", use, 1);
        setenv("FAKE_NVML_MEM_RESERVED", "0", 1);
        setenv("FAKE_NVML_PROCESS_COUNT", nproc_text, 1);
        int variant = rand_r(&seed) % 4;
        if (variant == 1) setenv("FAKE_NVML_V3_STRIDE", "32", 1);
        if (variant == 2) setenv("FAKE_NVML_NO_V2", "1", 1);
        if (variant == 3) setenv("VRAM_NVML_LIBRARY", v1only_lib, 1);
        void *st = driver_open_ok(ops);
        int count = 0;
        assert_int_equal(ops->device_count(st, &count), 0);
        assert_int_equal(count, devices);
        for (int d = 0; d < devices; d++) {
            vram_device_info_t info = driver_unknown_info(ops);
            assert_int_equal(ops->device_info(st, d, &info), 0);
            assert_int_equal(info.total_bytes, total[d]);
            assert_int_equal(info.used_bytes, used[d] < total[d] ? used[d] : total[d]);
            assert_int_equal(info.free_bytes, total[d] - info.used_bytes);
        }
        check_synthetic_processes(st, nprocs, rand_r(&seed) % 450);
        ops->close(st);
    }
}

int main(void)
{
    if (!driver_fake_path(fake_lib, sizeof fake_lib, "libnvidia-ml.so.1") ||
        !driver_fake_path(v1only_lib, sizeof v1only_lib, "v1only/libnvidia-ml.so.1"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(fake_is_strict, setup),
        cmocka_unit_test_setup(reports_configured_numbers, setup),
        cmocka_unit_test_setup(memory_falls_back_to_v1, setup),
        cmocka_unit_test_setup(many_processes_through_every_api, setup),
        cmocka_unit_test_setup(processes_per_device_with_names, setup),
        cmocka_unit_test_setup(no_processes_is_an_empty_list, setup),
        cmocka_unit_test_setup(processes_refused_everywhere_is_enotsup, setup),
        cmocka_unit_test_setup(unknown_process_memory_is_unknown, setup),
        cmocka_unit_test_setup(process_churn_is_retried_then_bounded, setup),
        cmocka_unit_test_setup(injected_failures_are_translated, setup),
        cmocka_unit_test_setup(transient_failures_heal_on_retry, setup),
        cmocka_unit_test_setup(missing_features_stay_unknown, setup),
        cmocka_unit_test_setup(one_failing_device_does_not_affect_others, setup),
        cmocka_unit_test_setup(open_failures_are_clear, setup),
        cmocka_unit_test_setup(randomized_against_configuration, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
