/* An LD_PRELOAD recorder of PyTorch's CPU tensor allocations, in the trace
 * format of docs/pool.md ("a <id> <size>" / "f <id>").
 *
 * PyTorch's CPU allocator (c10::alloc_cpu) takes tensor storage from
 * posix_memalign and gives it back with free; the Python interpreter and
 * most libraries use malloc. So the recorder wraps posix_memalign and free:
 * between vram_record_start(path) and vram_record_stop() (called by the
 * workload through ctypes) every posix_memalign is written as an
 * allocation of the requested size and every free of such a pointer as its
 * free. Blocks live at start are not recorded, nor are their frees; blocks
 * live at stop stay live in the trace (the format allows that).
 *
 * Run the workload with one thread (torch.set_num_threads(1)): then the
 * trace is in program order. The table below is a fixed open-addressing
 * map (pointer -> id) in static memory: the hooks must not allocate.
 *
 * Build: cc -O2 -shared -fPIC -o vram_record.so vram_record.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS (1u << 20) /* live recorded blocks at most: plenty for a CPU workload */

static int (*real_memalign)(void **, size_t, size_t);
static void (*real_free)(void *);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static __thread int inside; /* the recorder's own stdio calls are not recorded */
static uint64_t next_id = 1;
static struct {
    uintptr_t ptr; /* 0: empty; 1: deleted */
    uint64_t id;
} table[SLOTS];

static size_t slot_of(uintptr_t p)
{
    return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull >> 44) & (SLOTS - 1);
}

static void put(uintptr_t p, uint64_t id)
{
    size_t i = slot_of(p);
    while (table[i].ptr > 1)
        i = (i + 1) & (SLOTS - 1);
    table[i].ptr = p;
    table[i].id = id;
}

static uint64_t take(uintptr_t p)
{
    for (size_t i = slot_of(p); table[i].ptr; i = (i + 1) & (SLOTS - 1)) {
        if (table[i].ptr == p) {
            table[i].ptr = 1;
            return table[i].id;
        }
    }
    return 0;
}

static void resolve(void)
{
    if (!real_memalign)
        real_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    if (!real_free) real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
}

int posix_memalign(void **ptr, size_t alignment, size_t size)
{
    resolve();
    int rc = real_memalign(ptr, alignment, size);
    if (rc || !out || inside) return rc;
    pthread_mutex_lock(&lock);
    inside = 1;
    if (out) {
        uint64_t id = next_id++;
        put((uintptr_t)*ptr, id);
        fprintf(out, "a %llu %zu\n", (unsigned long long)id, size);
    }
    inside = 0;
    pthread_mutex_unlock(&lock);
    return rc;
}

void free(void *ptr)
{
    resolve();
    if (ptr && out && !inside) {
        pthread_mutex_lock(&lock);
        inside = 1;
        uint64_t id = out ? take((uintptr_t)ptr) : 0;
        if (id) fprintf(out, "f %llu\n", (unsigned long long)id);
        inside = 0;
        pthread_mutex_unlock(&lock);
    }
    real_free(ptr);
}

/* Starts recording into `path` (truncated) under a comment line `title`. */
int vram_record_start(const char *path, const char *title)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    setvbuf(f, NULL, _IOFBF, 1 << 16);
    fprintf(f, "# %s\n", title);
    pthread_mutex_lock(&lock);
    /* A new trace: ids from 1, and blocks of an earlier one are not its. */
    for (size_t i = 0; i < SLOTS; i++)
        table[i].ptr = 0;
    next_id = 1;
    out = f;
    pthread_mutex_unlock(&lock);
    return 0;
}

void vram_record_stop(void)
{
    pthread_mutex_lock(&lock);
    FILE *f = out;
    out = NULL;
    pthread_mutex_unlock(&lock);
    if (f) fclose(f);
}
