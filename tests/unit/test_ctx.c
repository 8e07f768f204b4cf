/* The device context: auto selection and its reason, retries with backoff,
 * the ERROR state and recovery, DISABLED, selection by score, concurrency. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/ctx_internal.h"
#include "vram.h"

#define GIB (1ull << 30)

/* ---- a scripted backend -------------------------------------------- */

typedef struct {
    int count;
    uint64_t total[4], free_bytes[4];
    int util[4];
    int transient_left[4]; /* next calls answering EAGAIN */
    bool hard_fail[4];     /* calls answer EDRIVER */
    bool hide_used;        /* report total and free only */
    int calls[4];
} script_t;

static script_t script;

static int scripted_failure(int index)
{
    script.calls[index]++;
    if (script.hard_fail[index])
        return vram_fail(VRAM_EDRIVER, "GPU %d has fallen off the bus (scripted)", index);
    if (script.transient_left[index] > 0) {
        script.transient_left[index]--;
        return vram_fail(VRAM_EAGAIN, "GPU %d is busy, try again (scripted)", index);
    }
    return 0;
}

static int t_open(void **state)
{
    *state = &script;
    return 0;
}

static void t_close(void *state)
{
    (void)state;
}

static int t_count(void *state, int *count)
{
    *count = ((script_t *)state)->count;
    return 0;
}

static int t_info(void *state, int index, vram_device_info_t *out)
{
    (void)state;
    int rc = scripted_failure(index);
    if (rc) return rc;
    snprintf(out->name, sizeof out->name, "scripted-%d", index);
    out->total_bytes = script.total[index];
    out->free_bytes = script.free_bytes[index];
    if (!script.hide_used) out->used_bytes = script.total[index] - script.free_bytes[index];
    out->utilization_pct = script.util[index];
    return 0;
}

static int t_processes(void *state, int index, vram_process_info_t *procs, size_t cap,
                       size_t *count)
{
    (void)state;
    int rc = scripted_failure(index);
    if (rc) return rc;
    if (cap) procs[0] = (vram_process_info_t){.pid = 42, .used_bytes = GIB, .name = "trainer"};
    *count = 1;
    return 0;
}

static const vram_backend_ops_t scripted = {
    .name = "cpu", /* any name: backend[] is 8 bytes */
    .open = t_open,
    .close = t_close,
    .device_count = t_count,
    .device_info = t_info,
    .processes = t_processes,
};

static int reset(void **state)
{
    (void)state;
    memset(&script, 0, sizeof script);
    script.count = 3;
    for (int i = 0; i < 3; i++)
        script.total[i] = 80 * GIB;
    script.free_bytes[0] = 10 * GIB;
    script.free_bytes[1] = 50 * GIB;
    script.free_bytes[2] = 30 * GIB;
    vram_option_set(VRAM_OPT_DRIVER_RETRIES, "3");
    return 0;
}

static vram_ctx_t *open_scripted(void)
{
    vram_ctx_t *ctx = NULL;
    assert_int_equal(vram_ctx_open_ops(&scripted, &ctx), 0);
    return ctx;
}

/* ---- retries, ERROR and recovery ------------------------------------- */

static void transient_errors_are_retried(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_scripted();
    script.transient_left[1] = 3; /* exactly the retry budget */
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 1, &d), 0);
    assert_int_equal(script.calls[1], 4);
    assert_int_equal(d.health, VRAM_HEALTH_AVAILABLE);
    assert_string_equal(d.error, "");
    assert_int_equal(d.free_bytes, 50 * GIB);
    vram_ctx_close(ctx);
}

static void persistent_errors_lead_to_error_then_recovery(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_scripted();
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 2, &d), 0); /* learn its name */
    script.calls[2] = 0;
    script.transient_left[2] = 5;
    assert_int_equal(vram_device_info(ctx, 2, &d), 0);
    assert_int_equal(script.calls[2], 4); /* 1 try + 3 retries, then give up */
    assert_int_equal(d.health, VRAM_HEALTH_ERROR);
    assert_non_null(strstr(d.error, "GPU 2 is busy"));
    assert_string_equal(d.name, "scripted-2");
    assert_int_equal(d.total_bytes, VRAM_UNKNOWN_U64);

    /* Selection skips it even though it would have the most room. */
    script.free_bytes[2] = 79 * GIB;
    int chosen = -1;
    script.transient_left[2] = 100;
    assert_int_equal(vram_device_select(ctx, GIB, &chosen), 0);
    assert_int_equal(chosen, 1);

    /* Processes of a failing device: the driver's error, not a crash. */
    size_t n;
    vram_process_info_t procs[2];
    assert_int_equal(vram_device_processes(ctx, 2, procs, 2, &n), VRAM_EDRIVER);
    assert_non_null(strstr(vram_last_error(), "GPU 2 is busy"));

    /* Once the driver answers again, the device is back. */
    script.transient_left[2] = 0;
    assert_int_equal(vram_device_info(ctx, 2, &d), 0);
    assert_int_equal(d.health, VRAM_HEALTH_AVAILABLE);
    assert_string_equal(d.error, "");
    assert_int_equal(vram_device_select(ctx, GIB, &chosen), 0);
    assert_int_equal(chosen, 2);
    vram_ctx_close(ctx);
}

static void hard_errors_are_not_retried(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_scripted();
    script.hard_fail[0] = true;
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0);
    assert_int_equal(script.calls[0], 1);
    assert_int_equal(d.health, VRAM_HEALTH_ERROR);
    assert_non_null(strstr(d.error, "fallen off the bus"));
    vram_ctx_close(ctx);
}

static void backoff_grows_and_is_bounded(void **state)
{
    (void)state;
    vram_option_set(VRAM_OPT_DRIVER_RETRIES, "5");
    vram_ctx_t *ctx = open_scripted();
    script.transient_left[0] = 1000;
    uint64_t t0 = vram_now_ns();
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0);
    uint64_t ms = (vram_now_ns() - t0) / 1000000;
    assert_int_equal(script.calls[0], 6);
    assert_int_equal(d.health, VRAM_HEALTH_ERROR);
    assert_true(ms >= 1 + 2 + 4 + 8 + 16); /* exponential waits happened */
    assert_true(ms < 5000);                /* and are bounded */
    vram_option_set(VRAM_OPT_DRIVER_RETRIES, "0");
    vram_ctx_close(ctx);
    ctx = open_scripted();
    script.calls[0] = 0;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0);
    assert_int_equal(script.calls[0], 1); /* no retries at all */
    vram_ctx_close(ctx);
}

/* ---- health, selection, disabling ------------------------------------ */

static void selection_by_score(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_scripted();
    int chosen = -1;
    assert_int_equal(vram_device_select(ctx, GIB, &chosen), 0);
    assert_int_equal(chosen, 1); /* most free memory */
    /* Need more than device 1 has: nobody fits. */
    assert_int_equal(vram_device_select(ctx, 51 * GIB, &chosen), VRAM_ENODEV);
    assert_non_null(strstr(vram_last_error(), "51.00 GiB"));
    /* A fully utilized device counts for less than a calmer one. */
    script.util[1] = 100;
    assert_int_equal(vram_device_select(ctx, GIB, &chosen), 0);
    assert_int_equal(chosen, 2);
    script.util[1] = 20;
    assert_int_equal(vram_device_select(ctx, GIB, &chosen), 0);
    assert_int_equal(chosen, 1);
    /* Need decides among the rest. */
    assert_int_equal(vram_device_select(ctx, 40 * GIB, &chosen), 0);
    assert_int_equal(chosen, 1);
    /* Ties go to the lowest index. */
    script.util[1] = 0;
    script.free_bytes[0] = script.free_bytes[2] = 50 * GIB;
    assert_int_equal(vram_device_select(ctx, GIB, &chosen), 0);
    assert_int_equal(chosen, 0);
    vram_ctx_close(ctx);
}

static void disabled_devices_are_skipped(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_scripted();
    assert_int_equal(vram_device_set_disabled(ctx, 1, true), 0);
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 1, &d), 0);
    assert_int_equal(d.health, VRAM_HEALTH_DISABLED);
    assert_int_equal(d.free_bytes, 50 * GIB); /* still observed */
    int chosen = -1;
    assert_int_equal(vram_device_select(ctx, GIB, &chosen), 0);
    assert_int_equal(chosen, 2);
    assert_int_equal(vram_device_select(ctx, 40 * GIB, &chosen), VRAM_ENODEV);
    assert_non_null(strstr(vram_last_error(), "DISABLED"));
    assert_int_equal(vram_device_set_disabled(ctx, 1, false), 0);
    assert_int_equal(vram_device_select(ctx, 40 * GIB, &chosen), 0);
    assert_int_equal(chosen, 1);
    assert_int_equal(vram_device_set_disabled(ctx, 3, true), VRAM_ENODEV);
    vram_ctx_close(ctx);
}

static void busy_and_derived_figures(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_scripted();
    script.hide_used = true;
    script.free_bytes[0] = 0;
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0);
    assert_int_equal(d.used_bytes, 80 * GIB); /* derived from total - free */
    assert_int_equal(d.health, VRAM_HEALTH_BUSY);
    script.util[2] = 100;
    assert_int_equal(vram_device_info(ctx, 2, &d), 0);
    assert_int_equal(d.health, VRAM_HEALTH_BUSY);
    /* Out of memory means 1% of the device or less. */
    script.free_bytes[0] = 80 * GIB / 100;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0);
    assert_int_equal(d.health, VRAM_HEALTH_BUSY);
    script.free_bytes[0] = 80 * GIB / 100 + 1;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0);
    assert_int_equal(d.health, VRAM_HEALTH_AVAILABLE);
    assert_int_equal(vram_device_info(ctx, 1, &d), 0);
    assert_int_equal(d.health, VRAM_HEALTH_AVAILABLE);
    assert_int_equal(d.temperature_c, VRAM_UNKNOWN_INT); /* unknown stays unknown */
    assert_true(d.power_w < 0);
    assert_string_equal(vram_health_name(VRAM_HEALTH_BUSY), "BUSY");
    vram_ctx_close(ctx);
}

static void arguments_are_checked(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_scripted();
    vram_device_info_t d;
    void *p;
    size_t n;
    assert_int_equal(vram_device_info(ctx, 3, &d), VRAM_ENODEV);
    assert_non_null(strstr(vram_last_error(), "no device 3"));
    assert_int_equal(vram_device_info(ctx, -1, &d), VRAM_ENODEV);
    assert_int_equal(vram_device_info(NULL, 0, &d), VRAM_EINVAL);
    assert_int_equal(vram_device_processes(ctx, 0, NULL, 4, &n), VRAM_EINVAL);
    assert_int_equal(vram_device_alloc(ctx, 0, 10, &p), VRAM_ENOTSUP); /* no alloc op */
    assert_int_equal(vram_device_free(ctx, 0, NULL), 0);
    assert_int_equal(vram_ctx_device_count(NULL), 0);
    vram_ctx_close(NULL);
    vram_ctx_close(ctx);
}

/* ---- auto selection -------------------------------------------------- */

static void use_missing_drivers(void)
{
    vram_option_set(VRAM_OPT_NVML_LIBRARY, "/nonexistent/libnvidia-ml.so.1");
    vram_option_set(VRAM_OPT_CUDA_LIBRARY, "/nonexistent/libcuda.so.1");
}

static void auto_falls_back_to_sim_then_cpu(void **state)
{
    (void)state;
    use_missing_drivers();
    char dir[] = "/tmp/vram-test-ctx-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sim.state", dir);
    vram_option_set(VRAM_OPT_SIM_STATE, path);
    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB");

    vram_ctx_t *ctx = NULL;
    assert_int_equal(vram_ctx_open_backend("auto", &ctx), 0);
    assert_string_equal(vram_ctx_backend(ctx), "sim");
    const char *why = vram_ctx_reason(ctx);
    assert_non_null(strstr(why, "no NVIDIA driver"));
    assert_non_null(strstr(why, "libnvidia-ml.so.1"));
    assert_non_null(strstr(why, "libcuda.so.1"));
    assert_non_null(strstr(why, "using 2 simulated GPUs from VRAM_SIM"));
    assert_null(strchr(why, '\n'));
    vram_ctx_close(ctx);

    vram_option_set(VRAM_OPT_BACKEND, "auto");
    vram_option_set(VRAM_OPT_SIM, "");
    assert_int_equal(vram_ctx_open(&ctx), 0);
    assert_string_equal(vram_ctx_backend(ctx), "cpu");
    assert_non_null(strstr(vram_ctx_reason(ctx), "VRAM_SIM not set"));
    assert_int_equal(vram_ctx_device_count(ctx), 1);
    vram_ctx_close(ctx);

    /* A bad spec is the user's mistake, not a reason to use the cpu. */
    ctx = NULL;
    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB,H1OO");
    assert_int_equal(vram_ctx_open(&ctx), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "H1OO"));
    assert_null(ctx);

    vram_option_set(VRAM_OPT_SIM, "");
    unlink(path);
    rmdir(dir);
}

static void named_backends(void **state)
{
    (void)state;
    use_missing_drivers();
    vram_ctx_t *ctx = NULL;
    assert_int_equal(vram_ctx_open_backend("gpu", &ctx), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "\"gpu\""));
    assert_int_equal(vram_ctx_open_backend("nvml", &ctx), VRAM_ENOLIB);
    assert_non_null(strstr(vram_last_error(), "libnvidia-ml.so.1"));
    assert_int_equal(vram_ctx_open_backend("cuda", &ctx), VRAM_ENOLIB);
    assert_null(ctx);
    assert_int_equal(vram_ctx_open_backend("cpu", &ctx), 0);
    assert_string_equal(vram_ctx_reason(ctx), "");
    vram_ctx_close(ctx);
    vram_option_set(VRAM_OPT_BACKEND, "sim");
    vram_option_set(VRAM_OPT_SIM, "");
    assert_int_equal(vram_ctx_open(&ctx), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "VRAM_SIM"));
    vram_option_set(VRAM_OPT_BACKEND, "auto");
}

/* ---- concurrency ----------------------------------------------------- */

typedef struct {
    vram_ctx_t *ctx;
    int failures;
} worker_t;

static void *hammer(void *arg)
{
    worker_t *w = arg;
    for (int i = 0; i < 300; i++) {
        void *p;
        int dev = i % 2;
        if (vram_device_alloc(w->ctx, dev, 1 << 20, &p) != 0 ||
            vram_device_free(w->ctx, dev, p) != 0)
            w->failures++;
        if (i % 50 == 0) {
            vram_device_info_t d;
            if (vram_device_info(w->ctx, dev, &d) != 0 || d.used_bytes > 4u << 20) w->failures++;
        }
    }
    return NULL;
}

static void threads_share_a_context(void **state)
{
    (void)state;
    char dir[] = "/tmp/vram-test-ctx-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sim.state", dir);
    vram_option_set(VRAM_OPT_SIM_STATE, path);
    vram_option_set(VRAM_OPT_SIM, "2xmygpu:1GiB");
    vram_ctx_t *ctx;
    assert_int_equal(vram_ctx_open_backend("sim", &ctx), 0);
    pthread_t threads[4];
    worker_t workers[4];
    for (int i = 0; i < 4; i++) {
        workers[i] = (worker_t){ctx, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, hammer, &workers[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(workers[i].failures, 0);
    }
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0);
    assert_int_equal(d.used_bytes, 0);
    vram_ctx_close(ctx);
    vram_option_set(VRAM_OPT_SIM, "");
    unlink(path);
    rmdir(dir);
}

static void sim_failure_hooks_drive_health(void **state)
{
    (void)state;
    char dir[] = "/tmp/vram-test-ctx-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sim.state", dir);
    vram_option_set(VRAM_OPT_SIM_STATE, path);
    vram_option_set(VRAM_OPT_SIM, "H100-80GB@flaky=5,A100-40GB@fail,T4-16GB");
    vram_ctx_t *ctx;
    assert_int_equal(vram_ctx_open_backend("sim", &ctx), 0);
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 0, &d), 0); /* 4 tries fail */
    assert_int_equal(d.health, VRAM_HEALTH_ERROR);
    assert_non_null(strstr(d.error, "simulated transient failure"));
    assert_int_equal(vram_device_info(ctx, 0, &d), 0); /* 1 more failure, then ok */
    assert_int_equal(d.health, VRAM_HEALTH_AVAILABLE);
    assert_int_equal(vram_device_info(ctx, 1, &d), 0);
    assert_int_equal(d.health, VRAM_HEALTH_ERROR);
    void *p;
    assert_int_equal(vram_device_alloc(ctx, 1, GIB, &p), VRAM_EDRIVER);
    int chosen;
    assert_int_equal(vram_device_select(ctx, 20 * GIB, &chosen), 0);
    assert_int_equal(chosen, 0);
    assert_int_equal(vram_device_select(ctx, 90 * GIB, &chosen), VRAM_ENODEV);
    vram_ctx_close(ctx);
    vram_option_set(VRAM_OPT_SIM, "");
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(transient_errors_are_retried, reset),
        cmocka_unit_test_setup(persistent_errors_lead_to_error_then_recovery, reset),
        cmocka_unit_test_setup(hard_errors_are_not_retried, reset),
        cmocka_unit_test_setup(backoff_grows_and_is_bounded, reset),
        cmocka_unit_test_setup(selection_by_score, reset),
        cmocka_unit_test_setup(disabled_devices_are_skipped, reset),
        cmocka_unit_test_setup(busy_and_derived_figures, reset),
        cmocka_unit_test_setup(arguments_are_checked, reset),
        cmocka_unit_test_setup(auto_falls_back_to_sim_then_cpu, reset),
        cmocka_unit_test_setup(named_backends, reset),
        cmocka_unit_test_setup(threads_share_a_context, reset),
        cmocka_unit_test_setup(sim_failure_hooks_drive_health, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
