/* The cpu backend: host memory as one device, the graceful fallback when no
 * GPU answers. Allocations are anonymous mappings (page-aligned, like device
 * memory is generously aligned) and are refused when they would exceed the
 * memory the kernel reports as available, rather than inviting the OOM killer. */
#include "core/map.h"
#include "device/backend.h"
#include "core/proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    char name[96];
    vram_map_t mine;    /* address -> bytes */
    uint64_t allocated; /* sum of live allocations of this context */
    uint64_t available; /* MemAvailable, refreshed at most every 50 ms for alloc */
    uint64_t available_at_ns;
} cpu_t;

/* MemTotal and MemAvailable from /proc/meminfo, in bytes. */
static int read_meminfo(uint64_t *total, uint64_t *available)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) return vram_fail(VRAM_EIO, "cannot read /proc/meminfo: %s", strerror(errno));
    char line[256];
    unsigned long long kib;
    bool have_total = false, have_available = false;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1) {
            *total = (uint64_t)kib * 1024;
            have_total = true;
        } else if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            *available = (uint64_t)kib * 1024;
            have_available = true;
        }
    }
    fclose(f);
    if (!have_total || !have_available)
        return vram_fail(VRAM_EIO, "/proc/meminfo lacks MemTotal or MemAvailable");
    return 0;
}

static void read_cpu_name(char *buf, size_t len)
{
    snprintf(buf, len, "CPU (host memory)");
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *colon = strchr(line, ':');
        if (!colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t')
            colon++;
        line[strcspn(line, "\n")] = '\0';
        if (*colon) snprintf(buf, len, "%s", colon);
        break;
    }
    fclose(f);
}

static int cpu_open(void **state)
{
    uint64_t total, available;
    int rc = read_meminfo(&total, &available);
    if (rc) return rc;
    cpu_t *c = calloc(1, sizeof *c);
    if (!c) return vram_fail(VRAM_ENOMEM, "out of memory");
    read_cpu_name(c->name, sizeof c->name);
    *state = c;
    return 0;
}

static void unmap_each(uint64_t addr, uint64_t bytes, void *arg)
{
    (void)arg;
    munmap((void *)(uintptr_t)addr, bytes);
}

static void cpu_close(void *state)
{
    cpu_t *c = state;
    if (!c) return;
    vram_map_each(&c->mine, unmap_each, NULL);
    vram_map_clear(&c->mine);
    free(c);
}

static int cpu_device_count(void *state, int *count)
{
    (void)state;
    *count = 1;
    return 0;
}

static int check_index(int index)
{
    if (index != 0) return vram_fail(VRAM_ENODEV, "no cpu device %d (the host is device 0)", index);
    return 0;
}

static int cpu_device_info(void *state, int index, vram_device_info_t *out)
{
    cpu_t *c = state;
    int rc = check_index(index);
    if (rc) return rc;
    uint64_t total, available;
    rc = read_meminfo(&total, &available);
    if (rc) return rc;
    snprintf(out->name, sizeof out->name, "%s", c->name);
    snprintf(out->uuid, sizeof out->uuid, "CPU-0");
    out->total_bytes = total;
    out->free_bytes = available < total ? available : total;
    out->used_bytes = total - out->free_bytes;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0) out->multiprocessors = (int)cores;
    return 0;
}

/* Reports this process only: other processes' host memory is not "device"
 * memory anybody asked vram for. */
static int cpu_processes(void *state, int index, vram_process_info_t *procs, size_t cap,
                         size_t *count)
{
    (void)state;
    int rc = check_index(index);
    if (rc) return rc;
    FILE *f = fopen("/proc/self/statm", "re");
    unsigned long long size_pages, resident_pages;
    int fields = f ? fscanf(f, "%llu %llu", &size_pages, &resident_pages) : 0;
    if (f) fclose(f);
    if (fields != 2) return vram_fail(VRAM_EIO, "cannot read /proc/self/statm");
    if (cap > 0) {
        procs[0].pid = getpid();
        procs[0].used_bytes = (uint64_t)resident_pages * (uint64_t)sysconf(_SC_PAGESIZE);
        vram_proc_name(procs[0].pid, procs[0].name, sizeof procs[0].name);
    }
    *count = 1;
    return 0;
}

static int cpu_alloc(void *state, int index, size_t size, void **ptr)
{
    cpu_t *c = state;
    int rc = check_index(index);
    if (rc) return rc;
    if (size == 0) return vram_fail(VRAM_EINVAL, "cannot allocate 0 bytes");
    uint64_t now = vram_now_ns();
    if (!c->available_at_ns || now - c->available_at_ns > 50000000u) {
        uint64_t total;
        rc = read_meminfo(&total, &c->available);
        if (rc) return rc;
        c->available_at_ns = now;
    }
    if (size > c->available) {
        char want[32], have[32];
        return vram_fail(VRAM_ENOMEM, "host memory: %s requested, %s available",
                         vram_format_size(size, want, sizeof want),
                         vram_format_size(c->available, have, sizeof have));
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return vram_fail(VRAM_ENOMEM, "cannot map %zu bytes of host memory: %s", size,
                         strerror(errno));
    if (!vram_map_put(&c->mine, (uint64_t)(uintptr_t)p, size)) {
        munmap(p, size);
        return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    c->available -= size;
    c->allocated += size;
    *ptr = p;
    return 0;
}

static int cpu_free(void *state, int index, void *ptr)
{
    cpu_t *c = state;
    int rc = check_index(index);
    if (rc) return rc;
    uint64_t bytes;
    if (!vram_map_take(&c->mine, (uint64_t)(uintptr_t)ptr, &bytes))
        return vram_fail(VRAM_EINVAL, "pointer %p was not allocated on the cpu device", ptr);
    munmap(ptr, bytes);
    c->allocated -= bytes;
    c->available += bytes;
    return 0;
}

const vram_backend_ops_t vram_backend_cpu = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .processes = cpu_processes,
    .alloc = cpu_alloc,
    .free = cpu_free,
};
