/* Parsing of VRAM_SIM, the description of the simulated GPUs (internal). */
#ifndef VRAM_DEVICE_SIM_SPEC_H
#define VRAM_DEVICE_SIM_SPEC_H

#include "vram.h"

#define VRAM_SIM_MAX_DEVICES 64

/* How a simulated device misbehaves, so tests can exercise retries and ERROR. */
typedef enum {
    VRAM_SIM_FAIL_NONE,  /* answers every call */
    VRAM_SIM_FAIL_FLAKY, /* the first `fail_count` calls of each context answer EAGAIN */
    VRAM_SIM_FAIL_ALWAYS /* every query answers EAGAIN: the context puts it in ERROR */
} vram_sim_fail_t;

typedef struct {
    char name[64];        /* model name from the table, or the user's NAME in NAME:SIZE */
    uint64_t total_bytes; /* > 0 */
    int cc_major, cc_minor, multiprocessors; /* VRAM_UNKNOWN_INT for custom models */
    double power_limit_w;                    /* < 0 for custom models */
    vram_sim_fail_t fail;
    int fail_count; /* for VRAM_SIM_FAIL_FLAKY */
} vram_sim_gpu_t;

typedef struct {
    int count; /* 1..VRAM_SIM_MAX_DEVICES */
    vram_sim_gpu_t gpus[VRAM_SIM_MAX_DEVICES];
} vram_sim_spec_t;

/* Parses a spec: ITEM[,ITEM...], ITEM = [Nx]MODEL[@FAIL], MODEL = a name from
 * the GPU model table ("H100-80GB", case-insensitive) or NAME:SIZE
 * ("mygpu:24GiB"); FAIL = "fail" or "flaky=N" (test hooks). Spaces around
 * tokens are ignored. EINVAL names the bad token; *out is untouched then. */
int vram_sim_spec_parse(const char *text, vram_sim_spec_t *out);

/* FNV-1a hash of the device list (names and sizes, not failure hooks): two
 * spellings of the same GPUs ("2xH100-80GB", "h100-80gb,H100-80GB") agree. */
uint64_t vram_sim_spec_hash(const vram_sim_spec_t *spec);

#endif
