/* Test helper for the driver backends' tests (nvml, cuda) against the strict
 * fake libraries of tests/fakes, whose directory ctest passes in
 * VRAM_FAKES_DIR. Header-only; each test includes it once. */
#ifndef VRAM_TEST_DRIVER_FAKE_H
#define VRAM_TEST_DRIVER_FAKE_H

#include "device/backend.h"

#include <stdio.h>
#include <stdlib.h>

/* out = VRAM_FAKES_DIR/file; false (with a message) outside ctest. */
static inline bool driver_fake_path(char *out, size_t len, const char *file)
{
    const char *dir = getenv("VRAM_FAKES_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "VRAM_FAKES_DIR is not set (run through ctest)\n");
        return false;
    }
    snprintf(out, len, "%s/%s", dir, file);
    return true;
}

/* Every test starts from the fake's defaults (its knobs unset) and with the
 * backend pointed at library `lib` through the environment variable
 * `lib_var`. */
static inline void driver_fake_reset(const char *const *knobs, size_t nknobs, const char *lib_var,
                                     const char *lib)
{
    for (size_t i = 0; i < nknobs; i++)
        unsetenv(knobs[i]);
    setenv(lib_var, lib, 1);
    vram_clear_error();
}

/* A device info with nothing known yet, as the context hands it to a backend. */
static inline vram_device_info_t driver_unknown_info(const vram_backend_ops_t *ops)
{
    vram_device_info_t info;
    vram_device_info_init(&info, 0, ops->name);
    return info;
}

/* Opens the backend or fails the test with the error. */
static inline void *driver_open_ok(const vram_backend_ops_t *ops)
{
    void *st = NULL;
    int rc = ops->open(&st);
    if (rc) fail_msg("%s open: %s: %s", ops->name, vram_err_name(rc), vram_last_error());
    assert_non_null(st);
    return st;
}

#endif
