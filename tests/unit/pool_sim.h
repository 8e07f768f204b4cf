/* Test helper: a private simulated GPU (own state file in a temp dir) for the
 * pool tests. Header-only; each test includes it once. */
#ifndef VRAM_TEST_POOL_SIM_H
#define VRAM_TEST_POOL_SIM_H

#include "vram.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char dir[256];
    char state[300];
    vram_ctx_t *ctx;
} pool_sim_t;

/* spec e.g. "1xtest:1GiB". Returns 0 or the error of vram_ctx_open_backend. */
static inline int pool_sim_open(pool_sim_t *sim, const char *spec)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(sim->dir, sizeof sim->dir, "%s/vram-pooltest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(sim->dir)) return VRAM_EIO;
    snprintf(sim->state, sizeof sim->state, "%s/sim.state", sim->dir);
    int rc = vram_option_set(VRAM_OPT_SIM, spec);
    if (!rc) rc = vram_option_set(VRAM_OPT_SIM_STATE, sim->state);
    if (!rc) rc = vram_option_set(VRAM_OPT_BACKEND, "sim");
    if (!rc) rc = vram_ctx_open_backend("sim", &sim->ctx);
    return rc;
}

/* Bytes the simulated device has handed out (to every context). */
static inline uint64_t pool_sim_used(vram_ctx_t *ctx)
{
    vram_device_info_t info;
    if (vram_device_info(ctx, 0, &info)) return UINT64_MAX;
    return info.used_bytes;
}

static inline void pool_sim_close(pool_sim_t *sim)
{
    vram_ctx_close(sim->ctx);
    sim->ctx = NULL;
    unlink(sim->state);
    rmdir(sim->dir);
}

#endif
