/* Allocation traces (format: docs/pool.md, ../shared/traces/README.md):
 * parsed into events whose ids are renumbered as dense slots, so a replay
 * keeps its live pointers in a plain array. Part of vram_pool_tools (not
 * libvram.so): `vram replay`, the benchmarks and the tests. */
#ifndef VRAM_POOL_TOOLS_TRACE_H
#define VRAM_POOL_TOOLS_TRACE_H

#include "vram.h"

typedef struct {
    uint64_t size; /* bytes requested; 0 for a free */
    uint32_t slot; /* dense index < slots, reused after the block is freed */
    bool is_alloc;
} vram_trace_event_t;

typedef struct {
    vram_trace_event_t *events;
    size_t count;
    size_t allocs;
    size_t slots;             /* most blocks live at once */
    uint64_t peak_live_bytes; /* most requested bytes live at once */
    uint64_t max_size;        /* largest single request */
} vram_trace_t;

/* Parses trace text; `origin` (a file name) prefixes messages. EPARSE names
 * "origin:LINE:" and the problem: unknown event, bad number, unknown id (a
 * free of an id that is not live), id already live, missing or extra field.
 * ENOMEM: host memory. *out is untouched on failure. */
int vram_trace_parse(const char *text, size_t len, const char *origin, vram_trace_t *out);
/* Reads and parses a file; EIO names the file when it cannot be read. */
int vram_trace_load(const char *path, vram_trace_t *out);
/* Frees the events; accepts a zeroed trace. */
void vram_trace_release(vram_trace_t *t);

#endif
