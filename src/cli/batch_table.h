/* The batch table of a job request (POST /v1/jobs "batch_bytes"): the
 * memory at each batch the job accepts, for vram run, vram submit and the
 * Slurm plugin. */
#ifndef VRAM_CLI_BATCH_TABLE_H
#define VRAM_CLI_BATCH_TABLE_H

#include "vram.h"

#include <jansson.h>

/* [{"batch": B, "bytes": N}, ...] of t[0..n); NULL when out of memory. */
json_t *cli_batch_bytes_json(const vram_batch_bytes_t *t, int n);

#endif
