/* The backend table: the only code that talks to drivers sits behind it. */
#ifndef VRAM_DEVICE_BACKEND_H
#define VRAM_DEVICE_BACKEND_H

#include "vram.h"

/* One backend. `open` loads its library or state and returns its private
 * state; on failure it returns ENOLIB (library absent), EDRIVER (driver
 * refused, e.g. CUDA_ERROR_STUB_LIBRARY) or EINVAL (bad VRAM_SIM spec) with a
 * one-line message in vram_last_error(). Query calls return EAGAIN for
 * transient driver errors (the context retries them with backoff) and fill only
 * what they know, leaving the VRAM_UNKNOWN_* values set by the caller. `alloc`
 * and `free` are NULL where the backend cannot allocate (nvml).
 * Calls on one state are serialized by the context's lock. */
typedef struct vram_backend_ops {
    const char *name;
    int (*open)(void **state);
    void (*close)(void *state);
    int (*device_count)(void *state, int *count);
    int (*device_info)(void *state, int index, vram_device_info_t *out);
    int (*processes)(void *state, int index, vram_process_info_t *procs, size_t cap, size_t *count);
    int (*alloc)(void *state, int index, size_t size, void **ptr);
    int (*free)(void *state, int index, void *ptr);
    /* Virtual memory (CUDA's VMM API), NULL where the backend has none (cpu,
     * nvml, a driver without it). See vram_device_vmm_* in vram.h for the
     * contract; the context checks NULL arguments, the backend the rest. */
    int (*vmm_granularity)(void *state, int index, size_t *granularity);
    int (*vmm_reserve)(void *state, int index, size_t size, void **va);
    int (*vmm_unreserve)(void *state, int index, void *va, size_t size);
    int (*vmm_map)(void *state, int index, void *addr, size_t size);
    int (*vmm_unmap)(void *state, int index, void *addr, size_t size);
    int (*vmm_move)(void *state, int index, void *from, void *to, size_t size);
} vram_backend_ops_t;

/* Resets *out to "nothing known yet" for device `index` of `backend`: the
 * VRAM_UNKNOWN_* values a backend's device_info leaves where it cannot tell,
 * health AVAILABLE. */
void vram_device_info_init(vram_device_info_t *out, int index, const char *backend);

extern const vram_backend_ops_t vram_backend_nvml;
extern const vram_backend_ops_t vram_backend_cuda;
extern const vram_backend_ops_t vram_backend_sim;
extern const vram_backend_ops_t vram_backend_cpu;

#endif
