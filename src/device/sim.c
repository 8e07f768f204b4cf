/* The sim backend: GPUs described by VRAM_SIM whose allocations live in a
 * state file shared by every process using it.
 *
 * The state file is a fixed-size table mapped MAP_SHARED and guarded by
 * flock(): the kernel drops the lock when a holder dies, so a crash never
 * wedges other processes. Each allocation records its owner's pid and start
 * time; a full scan drops the entries of processes that are gone and
 * recomputes the per-device totals, so the table heals itself after a crash
 * at any point. Allocation and free only touch one slot and the totals, and
 * bump the table's generation. Queries answer from what this process saw at
 * its last scan (its view) and scan again only when the generation moved or
 * an owner died (sim_owners.h watches them by pidfd), so a monitor polling
 * every device costs a few system calls per query, not a pass over the
 * table and /proc. A scan also runs when an allocation would otherwise fail.
 * Addresses are real, unique reservations of address space (PROT_NONE,
 * MAP_NORESERVE): never dereferenced, never overlapping, and they cost no
 * memory. */
#include "core/file.h"
#include "core/array.h"
#include "core/map.h"
#include "device/backend.h"
#include "core/proc.h"
#include "device/sim.h"
#include "device/sim_owners.h"
#include "device/sim_spec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_MAGIC   0x314d495352415256ull /* "VRAMSIM1" */
#define SIM_VERSION 2u                    /* 2: the generation */
#define SIM_SLOTS   32768u
#define SLOT_BITS   16 /* the local map packs (bytes << SLOT_BITS | slot) */
_Static_assert(SIM_SLOTS <= (1u << SLOT_BITS), "slot index must fit the packing");

typedef struct {
    int32_t pid; /* 0: free */
    int32_t device;
    uint64_t start_time; /* owner's start time, see vram_proc_start_time */
    uint64_t bytes;
    uint64_t addr;
} sim_slot_t;

/* The file's layout. Every field is read and written under the flock. */
typedef struct {
    uint64_t magic;
    uint32_t version, slot_count;
    uint32_t device_count, live_slots;
    uint64_t spec_hash;
    uint64_t total[VRAM_SIM_MAX_DEVICES];
    uint64_t used[VRAM_SIM_MAX_DEVICES]; /* sum of live slots; rebuilt by scans */
    uint32_t next_free, reserved0;
    uint64_t generation; /* bumped before every change of a slot */
    uint32_t reserved[4];
    sim_slot_t slots[SIM_SLOTS];
} sim_table_t;

/* One process's usage of one device, as of the last scan. */
typedef struct {
    int32_t device;
    pid_t pid;
    uint64_t bytes;
} sim_usage_t;

/* What this process saw at its last scan: per-device totals and usage rows
 * sorted by (device, pid); device d's rows are [first[d], first[d + 1]). */
typedef struct {
    bool valid; /* false before the first scan, after fork(), or out of memory */
    uint64_t generation;
    uint64_t used[VRAM_SIM_MAX_DEVICES];
    sim_usage_t *rows;
    size_t count, cap;
    size_t first[VRAM_SIM_MAX_DEVICES + 1];
} sim_view_t;

typedef struct {
    vram_sim_spec_t spec;
    uint64_t hash;
    char path[PATH_MAX];
    int fd;
    sim_table_t *table;
    pid_t pid; /* owner of the allocations below; changes after fork() */
    uint64_t start_time;
    vram_map_t mine; /* address -> bytes << SLOT_BITS | slot (| SIM_CHUNK) */
    int flaky_left[VRAM_SIM_MAX_DEVICES];
    struct sim_reservation *reservations; /* virtual memory, see "VMM" below */
    sim_owners_t owners;
    sim_view_t view;
} sim_t;

/* Marks a `mine` entry as a chunk mapped into a reservation: its address
 * space belongs to the reservation, so releasing it must not unmap it. */
#define SIM_CHUNK ((uint64_t)1 << 63)

/* ---- state file: path, lock, layout -------------------------------- */

/* A private directory: created 0700, or an existing one we own that nobody
 * else can write (a planted /tmp/vram-<uid> must not capture our state). */
static int private_dir(const char *dir)
{
    int rc = vram_private_dir(dir, true, 0700);
    if (rc != VRAM_EPERM) return rc;
    char why[256];
    snprintf(why, sizeof why, "%s", vram_last_error());
    return vram_fail(VRAM_EPERM, "%s; set VRAM_SIM_STATE", why);
}

static int state_path(const vram_sim_spec_t *spec, char *buf, size_t len)
{
    const char *explicit_path = vram_option_str(VRAM_OPT_SIM_STATE);
    if (*explicit_path) {
        if (strlen(explicit_path) >= len)
            return vram_fail(VRAM_EINVAL, "VRAM_SIM_STATE is too long");
        snprintf(buf, len, "%s", explicit_path);
        return 0;
    }
    char dir[PATH_MAX];
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    /* A stale XDG_RUNTIME_DIR (su, ssh without a session) is common: then /tmp. */
    if (runtime && *runtime && stat(runtime, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s/vram", runtime);
    } else {
        snprintf(dir, sizeof dir, "/tmp/vram-%u", (unsigned)geteuid());
    }
    int rc = private_dir(dir);
    if (rc) return rc;
    if ((size_t)snprintf(buf, len, "%s/sim-%016llx.state", dir,
                         (unsigned long long)vram_sim_spec_hash(spec)) >= len)
        return vram_fail(VRAM_EINVAL, "state file path under %s is too long", dir);
    return 0;
}

/* Re-opens the file in a child after fork(): a shared open file description
 * would share the flock with the parent. The child owns none of the parent's
 * allocations. */
static int ensure_own_fd(sim_t *s)
{
    pid_t pid = getpid();
    if (pid == s->pid) return 0;
    int fd = open(s->path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return vram_fail(VRAM_EIO, "cannot reopen %s: %s", s->path, strerror(errno));
    close(s->fd);
    s->fd = fd;
    s->pid = pid;
    s->start_time = vram_proc_start_time(pid);
    vram_map_clear(&s->mine);
    vram_sim_owners_clear(&s->owners);
    s->view.valid = false;
    return 0;
}

static int lock_table(sim_t *s)
{
    int rc = ensure_own_fd(s);
    if (rc) return rc;
    while (flock(s->fd, LOCK_EX) != 0)
        if (errno != EINTR)
            return vram_fail(VRAM_EIO, "cannot lock %s: %s", s->path, strerror(errno));
    return 0;
}

static void unlock_table(sim_t *s)
{
    flock(s->fd, LOCK_UN);
}

static bool table_matches(const sim_table_t *t, const sim_t *s)
{
    if (t->magic != SIM_MAGIC || t->version != SIM_VERSION || t->slot_count != SIM_SLOTS ||
        t->spec_hash != s->hash || t->device_count != (uint32_t)s->spec.count)
        return false;
    for (int i = 0; i < s->spec.count; i++)
        if (t->total[i] != s->spec.gpus[i].total_bytes) return false;
    return true;
}

static void init_table(sim_table_t *t, const sim_t *s)
{
    uint64_t generation = t->generation + 1; /* other processes' views go stale */
    memset(t, 0, offsetof(sim_table_t, slots));
    t->generation = generation;
    memset(t->slots, 0, sizeof t->slots);
    t->version = SIM_VERSION;
    t->slot_count = SIM_SLOTS;
    t->device_count = (uint32_t)s->spec.count;
    t->spec_hash = s->hash;
    for (int i = 0; i < s->spec.count; i++)
        t->total[i] = s->spec.gpus[i].total_bytes;
    t->magic = SIM_MAGIC;
}

/* ---- scans and the view ------------------------------------------ */

static bool owner_alive(sim_t *s, pid_t pid, uint64_t start)
{
    bool self = pid == s->pid && (start == s->start_time || !s->start_time);
    sim_owner_t *owner = vram_sim_owners_get(&s->owners, pid, start, self);
    if (owner) return owner->alive;
    return self || vram_proc_alive(pid, start);
}

static int by_device_pid(const void *a, const void *b)
{
    const sim_usage_t *x = a, *y = b;
    if (x->device != y->device) return (x->device > y->device) - (x->device < y->device);
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static bool add_usage(sim_view_t *v, const sim_slot_t *slot)
{
    sim_usage_t *last = v->count ? &v->rows[v->count - 1] : NULL;
    if (last && last->device == slot->device && last->pid == slot->pid) {
        last->bytes += slot->bytes; /* a run of one owner's slots: one row */
        return true;
    }
    if (v->count == v->cap) {
        sim_usage_t *bigger = vram_array_grow(v->rows, &v->cap, sizeof *bigger, 64);
        if (!bigger) return false;
        v->rows = bigger;
    }
    v->rows[v->count++] = (sim_usage_t){slot->device, slot->pid, slot->bytes};
    return true;
}

/* Sums the rows per (device, pid) and indexes them by device. */
static void index_view(sim_view_t *v, int devices)
{
    if (v->count > 1) qsort(v->rows, v->count, sizeof *v->rows, by_device_pid);
    size_t n = 0;
    for (size_t i = 0; i < v->count; i++) {
        if (n && v->rows[n - 1].device == v->rows[i].device && v->rows[n - 1].pid == v->rows[i].pid)
            v->rows[n - 1].bytes += v->rows[i].bytes;
        else
            v->rows[n++] = v->rows[i];
    }
    v->count = n;
    size_t r = 0;
    for (int d = 0; d <= devices; d++) {
        while (r < n && v->rows[r].device < d)
            r++;
        v->first[d] = r;
    }
}

/* Drops the slots of dead owners, recomputes the totals and rebuilds this
 * process's view. Under the lock. */
static size_t scan_table(sim_t *s)
{
    sim_table_t *t = s->table;
    sim_view_t *v = &s->view;
    uint64_t used[VRAM_SIM_MAX_DEVICES] = {0};
    uint32_t live = 0;
    size_t reclaimed = 0;
    bool rows_ok = true, last_alive = false;
    pid_t last_pid = 0;
    uint64_t last_start = 0;
    vram_sim_owners_died(&s->owners);
    vram_sim_owners_unmark(&s->owners);
    v->count = 0;
    for (uint32_t i = 0; i < SIM_SLOTS; i++) {
        sim_slot_t *slot = &t->slots[i];
        if (!slot->pid) continue;
        /* Slots of one owner often come in runs: one look-up for the run. */
        if (slot->pid != last_pid || slot->start_time != last_start) {
            last_pid = slot->pid;
            last_start = slot->start_time;
            last_alive = owner_alive(s, slot->pid, slot->start_time);
        }
        if (slot->device < 0 || slot->device >= (int)t->device_count || !last_alive) {
            if (!reclaimed++) t->generation++;
            memset(slot, 0, sizeof *slot);
            continue;
        }
        used[slot->device] += slot->bytes;
        live++;
        rows_ok = rows_ok && add_usage(v, slot);
    }
    vram_sim_owners_sweep(&s->owners);
    memcpy(t->used, used, sizeof used);
    t->live_slots = live;
    memcpy(v->used, used, sizeof used);
    if (rows_ok) index_view(v, s->spec.count);
    v->valid = rows_ok;
    v->generation = t->generation;
    return reclaimed;
}

/* Brings the view up to date: a scan only if the table changed or an owner
 * died since the last one. Under the lock. */
static void refresh_view(sim_t *s)
{
    if (!s->view.valid || s->view.generation != s->table->generation ||
        vram_sim_owners_died(&s->owners))
        scan_table(s);
}

/* ---- failure hooks for tests ------------------------------------- */

static int injected_failure(sim_t *s, int index)
{
    const vram_sim_gpu_t *g = &s->spec.gpus[index];
    if (g->fail == VRAM_SIM_FAIL_ALWAYS)
        return vram_fail(VRAM_EAGAIN, "simulated driver failure on sim device %d (VRAM_SIM @fail)",
                         index);
    if (g->fail == VRAM_SIM_FAIL_FLAKY && s->flaky_left[index] > 0) {
        s->flaky_left[index]--;
        return vram_fail(VRAM_EAGAIN,
                         "simulated transient failure on sim device %d (VRAM_SIM @flaky)", index);
    }
    return 0;
}

static int check_index(const sim_t *s, int index)
{
    if (index < 0 || index >= s->spec.count)
        return vram_fail(VRAM_ENODEV, "no sim device %d (%d simulated GPUs)", index, s->spec.count);
    return 0;
}

/* ---- backend operations ----------------------------------------- */

static void sim_close(void *state);
static void sim_vmm_close(sim_t *s);

static int map_state_file(sim_t *s)
{
    /* Never through a symlink, even for an explicit VRAM_SIM_STATE: a link
     * planted there must not make a root process write elsewhere. */
    s->fd = open(s->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s->fd < 0)
        return vram_fail(VRAM_EIO, "cannot open sim state file %s: %s", s->path, strerror(errno));
    int rc = lock_table(s);
    if (rc) return rc;
    struct stat st;
    if (fstat(s->fd, &st) != 0) {
        unlock_table(s);
        return vram_fail(VRAM_EIO, "cannot stat %s: %s", s->path, strerror(errno));
    }
    bool fresh = st.st_size == 0;
    uint64_t magic = 0;
    if (!fresh &&
        (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
         pread(s->fd, &magic, sizeof magic, 0) != (ssize_t)sizeof magic || magic != SIM_MAGIC)) {
        /* Not ours: never overwrite a file that is not a sim state file. */
        unlock_table(s);
        return vram_fail(VRAM_EPERM,
                         "%s is not a sim state file of this user: refusing to overwrite it "
                         "(set VRAM_SIM_STATE to another file)",
                         s->path);
    }
    if (!fresh && st.st_size != (off_t)sizeof(sim_table_t)) {
        /* Another layout (an older vram): start over rather than misread it. */
        if (ftruncate(s->fd, 0) != 0) rc = vram_fail(VRAM_EIO, "cannot reset %s", s->path);
        fresh = true;
    }
    if (!rc && fresh && ftruncate(s->fd, sizeof(sim_table_t)) != 0)
        rc = vram_fail(VRAM_EIO, "cannot size %s: %s", s->path, strerror(errno));
    if (!rc) {
        void *p = mmap(NULL, sizeof(sim_table_t), PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
        if (p == MAP_FAILED)
            rc = vram_fail(VRAM_EIO, "cannot map %s: %s", s->path, strerror(errno));
        else
            s->table = p;
    }
    if (!rc && !table_matches(s->table, s)) {
        bool in_use = false;
        if (s->table->magic == SIM_MAGIC && s->table->version == SIM_VERSION &&
            s->table->device_count <= VRAM_SIM_MAX_DEVICES) {
            scan_table(s);
            in_use = s->table->live_slots > 0;
        }
        if (in_use)
            rc = vram_fail(VRAM_EBUSY,
                           "sim state file %s holds live allocations of other simulated GPUs; "
                           "set VRAM_SIM_STATE to another file",
                           s->path);
        else
            init_table(s->table, s);
    }
    unlock_table(s);
    return rc;
}

static int sim_open(void **state)
{
    sim_t *s = calloc(1, sizeof *s);
    if (!s) return vram_fail(VRAM_ENOMEM, "out of memory");
    s->fd = -1;
    vram_sim_owners_init(&s->owners);
    const char *text = vram_option_str(VRAM_OPT_SIM);
    int rc = 0;
    if (!*text)
        rc = vram_fail(VRAM_EINVAL, "the sim backend needs VRAM_SIM, e.g. VRAM_SIM=2xH100-80GB");
    if (!rc) rc = vram_sim_spec_parse(text, &s->spec);
    if (!rc) {
        s->hash = vram_sim_spec_hash(&s->spec);
        rc = state_path(&s->spec, s->path, sizeof s->path);
    }
    if (!rc) {
        s->pid = getpid();
        s->start_time = vram_proc_start_time(s->pid);
        for (int i = 0; i < s->spec.count; i++)
            s->flaky_left[i] = s->spec.gpus[i].fail_count;
        rc = map_state_file(s);
    }
    if (rc) {
        sim_close(s);
        return rc;
    }
    *state = s;
    return 0;
}

/* Releases one of our allocations: its slot (if still ours) and its range. */
static void release_mine(sim_t *s, uint64_t addr, uint64_t packed)
{
    uint32_t index = (uint32_t)(packed & ((1u << SLOT_BITS) - 1));
    uint64_t bytes = (packed & ~SIM_CHUNK) >> SLOT_BITS;
    sim_slot_t *slot = &s->table->slots[index];
    if (slot->pid == s->pid && slot->addr == addr) {
        s->table->generation++;
        if (slot->device >= 0 && slot->device < VRAM_SIM_MAX_DEVICES &&
            s->table->used[slot->device] >= slot->bytes)
            s->table->used[slot->device] -= slot->bytes;
        if (s->table->live_slots) s->table->live_slots--;
        memset(slot, 0, sizeof *slot);
    }
    if (!(packed & SIM_CHUNK)) munmap((void *)(uintptr_t)addr, bytes);
}

static void release_each(uint64_t addr, uint64_t packed, void *arg)
{
    release_mine(arg, addr, packed);
}

static void sim_close(void *state)
{
    sim_t *s = state;
    if (!s) return;
    if (s->table) {
        /* Like destroying a CUDA context: what it still holds is freed. After
         * fork() the child holds nothing (ensure_own_fd clears the map). */
        if (s->mine.count && lock_table(s) == 0) {
            vram_map_each(&s->mine, release_each, s);
            unlock_table(s);
        }
        munmap(s->table, sizeof(sim_table_t));
    }
    sim_vmm_close(s);
    vram_map_clear(&s->mine);
    vram_sim_owners_clear(&s->owners);
    free(s->view.rows);
    if (s->fd >= 0) close(s->fd);
    free(s);
}

static int sim_device_count(void *state, int *count)
{
    *count = ((sim_t *)state)->spec.count;
    return 0;
}

static int sim_device_info(void *state, int index, vram_device_info_t *out)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (rc) return rc;
    /* Names first: a failing device is still reported by name. */
    const vram_sim_gpu_t *g = &s->spec.gpus[index];
    snprintf(out->name, sizeof out->name, "%s", g->name);
    snprintf(out->uuid, sizeof out->uuid, "SIM-%016llx-%02d", (unsigned long long)s->hash, index);
    rc = injected_failure(s, index);
    if (!rc) rc = lock_table(s);
    if (rc) return rc;
    refresh_view(s);
    uint64_t used = s->view.used[index];
    unlock_table(s);

    out->total_bytes = g->total_bytes;
    out->used_bytes = used < g->total_bytes ? used : g->total_bytes;
    out->free_bytes = g->total_bytes - out->used_bytes;
    out->cc_major = g->cc_major;
    out->cc_minor = g->cc_minor;
    out->multiprocessors = g->multiprocessors;
    /* A toy thermal model, deterministic so tests can check it: nothing runs
     * on a simulated GPU, but holding memory warms it a little. */
    double load = (double)out->used_bytes / (double)g->total_bytes;
    out->utilization_pct = 0;
    out->temperature_c = 30 + (int)(20 * load + 0.5);
    if (g->power_limit_w > 0) out->power_w = g->power_limit_w * (0.1 + 0.1 * load);
    return 0;
}

static int sim_processes(void *state, int index, vram_process_info_t *procs, size_t cap,
                         size_t *count)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (!rc) rc = injected_failure(s, index);
    if (!rc) rc = lock_table(s);
    if (rc) return rc;
    refresh_view(s);
    unlock_table(s);
    /* The view is this process's own (the context's lock guards it). */
    const sim_view_t *v = &s->view;
    if (!v->valid) return vram_fail(VRAM_ENOMEM, "out of memory");
    size_t n = v->first[index + 1] - v->first[index];
    for (size_t k = 0; k < n && k < cap; k++) {
        const sim_usage_t *u = &v->rows[v->first[index] + k];
        procs[k].pid = u->pid;
        procs[k].used_bytes = u->bytes;
        vram_sim_owners_name(&s->owners, u->pid, procs[k].name, sizeof procs[k].name);
    }
    *count = n;
    return 0;
}

static bool fits(const sim_t *s, int index, size_t size)
{
    const sim_table_t *t = s->table;
    return t->used[index] <= t->total[index] && size <= t->total[index] - t->used[index] &&
           t->live_slots < SIM_SLOTS;
}

/* Claims a free slot for a new allocation; UINT32_MAX when none is free.
 * Under the lock; fits() held. */
static uint32_t claim_slot(sim_t *s, int index, size_t size, uint64_t addr)
{
    sim_table_t *t = s->table;
    uint32_t i = t->next_free % SIM_SLOTS;
    /* Bounded: live_slots may undercount after a crash mid-update. */
    for (uint32_t tries = 0; t->slots[i].pid; tries++) {
        if (tries == SIM_SLOTS) {
            scan_table(s);
            return UINT32_MAX;
        }
        i = (i + 1) % SIM_SLOTS;
    }
    t->generation++;
    t->slots[i] = (sim_slot_t){
        .pid = s->pid, .device = index, .start_time = s->start_time, .bytes = size, .addr = addr};
    t->used[index] += size;
    t->live_slots++;
    t->next_free = (i + 1) % SIM_SLOTS;
    return i;
}

static int sim_alloc(void *state, int index, size_t size, void **ptr)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (!rc) rc = injected_failure(s, index);
    if (rc) return rc;
    if (size == 0) return vram_fail(VRAM_EINVAL, "cannot allocate 0 bytes");
    if (size > s->spec.gpus[index].total_bytes || (uint64_t)size >> (64 - SLOT_BITS)) {
        char want[32], total[32];
        return vram_fail(VRAM_ENOMEM, "sim device %d (%s): %s requested, the device has %s", index,
                         s->spec.gpus[index].name, vram_format_size(size, want, sizeof want),
                         vram_format_size(s->spec.gpus[index].total_bytes, total, sizeof total));
    }
    void *range = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED)
        return vram_fail(VRAM_ENOMEM, "cannot reserve %zu bytes of address space: %s", size,
                         strerror(errno));
    rc = lock_table(s);
    if (rc) {
        munmap(range, size);
        return rc;
    }
    if (!fits(s, index, size)) scan_table(s); /* dead owners may hold the memory */
    if (!fits(s, index, size)) {
        char want[32], have[32];
        uint64_t free_bytes = s->table->total[index] - s->table->used[index];
        bool table_full = s->table->live_slots >= SIM_SLOTS;
        unlock_table(s);
        munmap(range, size);
        if (table_full)
            return vram_fail(VRAM_ENOMEM, "sim state table is full (%u allocations)", SIM_SLOTS);
        return vram_fail(VRAM_ENOMEM, "sim device %d (%s): %s requested, %s free", index,
                         s->spec.gpus[index].name, vram_format_size(size, want, sizeof want),
                         vram_format_size(free_bytes, have, sizeof have));
    }
    uint64_t addr = (uint64_t)(uintptr_t)range;
    uint32_t slot = claim_slot(s, index, size, addr);
    if (slot == UINT32_MAX) {
        unlock_table(s);
        munmap(range, size);
        return vram_fail(VRAM_ENOMEM, "sim state table is full (%u allocations)", SIM_SLOTS);
    }
    if (!vram_map_put(&s->mine, addr, (uint64_t)size << SLOT_BITS | slot)) {
        release_mine(s, addr, (uint64_t)size << SLOT_BITS | slot);
        unlock_table(s);
        return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    unlock_table(s);
    *ptr = range;
    return 0;
}

static int sim_free(void *state, int index, void *ptr)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (!rc) rc = lock_table(s);
    if (rc) return rc;
    uint64_t addr = (uint64_t)(uintptr_t)ptr, packed;
    if (!vram_map_get(&s->mine, addr, &packed)) {
        unlock_table(s);
        return vram_fail(VRAM_EINVAL,
                         "pointer %p was not allocated by this process on sim device %d", ptr,
                         index);
    }
    const sim_slot_t *slot = &s->table->slots[packed & ((1u << SLOT_BITS) - 1)];
    if (slot->pid == s->pid && slot->addr == addr && slot->device != index) {
        int owner = slot->device;
        unlock_table(s);
        return vram_fail(VRAM_EINVAL, "pointer %p belongs to sim device %d, not %d", ptr, owner,
                         index);
    }
    if (packed & SIM_CHUNK) {
        unlock_table(s);
        return vram_fail(VRAM_EINVAL,
                         "pointer %p is a mapped chunk of a reservation on sim device %d: unmap "
                         "it, do not free it",
                         ptr, index);
    }
    vram_map_take(&s->mine, addr, NULL);
    release_mine(s, addr, packed);
    unlock_table(s);
    return 0;
}

/* ---- VMM: reserved ranges backed by mapped chunks ---------------------- */

/* CUDA's contract, simulated: chunks are multiples of the granularity,
 * mapped at granularity-aligned addresses inside a reservation, never over
 * each other; a chunk is unmapped whole; a reservation goes back with
 * nothing mapped. A mapped chunk is device memory in use, in the shared
 * table like an allocation (so other processes see it). Reservations are
 * real address space (PROT_NONE), like allocations, and are this process's
 * alone. */
#define SIM_GRANULARITY ((size_t)2 << 20)

typedef struct sim_reservation {
    uintptr_t base;
    size_t size;
    int device;
    size_t mapped;  /* granules mapped */
    uint8_t *state; /* per granule: 0 unmapped, 1 start of a chunk, 2 inside one */
    struct sim_reservation *next;
} sim_reservation_t;

static int sim_vmm_granularity(void *state, int index, size_t *granularity)
{
    int rc = check_index(state, index);
    if (rc) return rc;
    *granularity = SIM_GRANULARITY;
    return 0;
}

static int sim_vmm_reserve(void *state, int index, size_t size, void **va)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (rc) return rc;
    if (!size || size % SIM_GRANULARITY)
        return vram_fail(VRAM_EINVAL, "sim: reservation of %zu bytes is not a multiple of %zu",
                         size, SIM_GRANULARITY);
    sim_reservation_t *r = calloc(1, sizeof *r);
    uint8_t *granules = r ? calloc(size / SIM_GRANULARITY, 1) : NULL;
    /* Aligned: reserve one granule more and trim. */
    void *range = MAP_FAILED;
    if (granules)
        range = mmap(NULL, size + SIM_GRANULARITY, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) {
        free(granules);
        free(r);
        return vram_fail(VRAM_ENOMEM, "sim: cannot reserve %zu bytes of address space", size);
    }
    uintptr_t base = ((uintptr_t)range + SIM_GRANULARITY - 1) & ~(uintptr_t)(SIM_GRANULARITY - 1);
    if (base > (uintptr_t)range) munmap(range, base - (uintptr_t)range);
    size_t tail = (uintptr_t)range + size + SIM_GRANULARITY - (base + size);
    if (tail) munmap((void *)(base + size), tail);
    r->base = base;
    r->size = size;
    r->device = index;
    r->state = granules;
    r->next = s->reservations;
    s->reservations = r;
    *va = (void *)base;
    return 0;
}

static sim_reservation_t **find_reservation(sim_t *s, int index, uintptr_t addr, size_t size)
{
    for (sim_reservation_t **link = &s->reservations; *link; link = &(*link)->next) {
        sim_reservation_t *r = *link;
        if (r->device == index && addr >= r->base && addr - r->base < r->size &&
            size <= r->size - (addr - r->base))
            return link;
    }
    return NULL;
}

static int sim_vmm_unreserve(void *state, int index, void *va, size_t size)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (rc) return rc;
    sim_reservation_t **link = find_reservation(s, index, (uintptr_t)va, size);
    if (!link || (*link)->base != (uintptr_t)va || (*link)->size != size)
        return vram_fail(VRAM_EINVAL, "sim: %p (%zu bytes) is not a reservation on device %d", va,
                         size, index);
    if ((*link)->mapped)
        return vram_fail(VRAM_EINVAL, "sim: reservation %p still has %zu bytes mapped", va,
                         (*link)->mapped * SIM_GRANULARITY);
    sim_reservation_t *r = *link;
    *link = r->next;
    munmap((void *)r->base, r->size);
    free(r->state);
    free(r);
    return 0;
}

/* Checks a chunk against the contract: granularity multiples, inside a
 * reservation, and all granules `want` (unmapped for map; exactly one
 * chunk for unmap). */
static sim_reservation_t *chunk_reservation(sim_t *s, int index, uintptr_t addr, size_t size,
                                            bool mapping)
{
    if (!size || size % SIM_GRANULARITY || addr % SIM_GRANULARITY) {
        vram_fail(VRAM_EINVAL, "sim: chunk %#zx (%zu bytes) is not granularity-aligned (%zu)",
                  (size_t)addr, size, SIM_GRANULARITY);
        return NULL;
    }
    sim_reservation_t **link = find_reservation(s, index, addr, size);
    if (!link) {
        vram_fail(VRAM_EINVAL, "sim: chunk %#zx (%zu bytes) is outside every reservation",
                  (size_t)addr, size);
        return NULL;
    }
    sim_reservation_t *r = *link;
    size_t first = (addr - r->base) / SIM_GRANULARITY, n = size / SIM_GRANULARITY;
    for (size_t g = first; g < first + n; g++) {
        uint8_t want = mapping ? 0 : g == first ? 1 : 2;
        if (r->state[g] != want) {
            vram_fail(VRAM_EINVAL, "sim: chunk %#zx (%zu bytes) %s", (size_t)addr, size,
                      mapping ? "overlaps a mapped chunk" : "is not one mapped chunk");
            return NULL;
        }
    }
    if (!mapping && first + n < r->size / SIM_GRANULARITY && r->state[first + n] == 2) {
        vram_fail(VRAM_EINVAL, "sim: chunk %#zx (%zu bytes) is part of a larger chunk",
                  (size_t)addr, size);
        return NULL;
    }
    return r;
}

static void mark_chunk(sim_reservation_t *r, uintptr_t addr, size_t size, bool mapped)
{
    size_t first = (addr - r->base) / SIM_GRANULARITY, n = size / SIM_GRANULARITY;
    for (size_t g = first; g < first + n; g++)
        r->state[g] = mapped ? (g == first ? 1 : 2) : 0;
    r->mapped = mapped ? r->mapped + n : r->mapped - n;
}

static int sim_vmm_map(void *state, int index, void *addr, size_t size)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (!rc) rc = injected_failure(s, index);
    if (rc) return rc;
    sim_reservation_t *r = chunk_reservation(s, index, (uintptr_t)addr, size, true);
    if (!r) return VRAM_EINVAL;
    rc = lock_table(s);
    if (rc) return rc;
    if (!fits(s, index, size)) scan_table(s);
    uint32_t slot = fits(s, index, size) ? claim_slot(s, index, size, (uintptr_t)addr) : UINT32_MAX;
    if (slot == UINT32_MAX) {
        char want[32];
        unlock_table(s);
        return vram_fail(VRAM_ENOMEM, "sim device %d (%s): cannot map %s", index,
                         s->spec.gpus[index].name, vram_format_size(size, want, sizeof want));
    }
    uint64_t packed = (uint64_t)size << SLOT_BITS | slot | SIM_CHUNK;
    if (!vram_map_put(&s->mine, (uintptr_t)addr, packed)) {
        release_mine(s, (uintptr_t)addr, packed);
        unlock_table(s);
        return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    unlock_table(s);
    mark_chunk(r, (uintptr_t)addr, size, true);
    return 0;
}

static int sim_vmm_unmap(void *state, int index, void *addr, size_t size)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (rc) return rc;
    sim_reservation_t *r = chunk_reservation(s, index, (uintptr_t)addr, size, false);
    if (!r) return VRAM_EINVAL;
    rc = lock_table(s);
    if (rc) return rc;
    uint64_t packed;
    if (vram_map_take(&s->mine, (uintptr_t)addr, &packed)) release_mine(s, (uintptr_t)addr, packed);
    unlock_table(s);
    mark_chunk(r, (uintptr_t)addr, size, false);
    return 0;
}

/* The slot and the memory stay; only where they are mapped changes. */
static int sim_vmm_move(void *state, int index, void *from, void *to, size_t size)
{
    sim_t *s = state;
    int rc = check_index(s, index);
    if (rc) return rc;
    sim_reservation_t *src = chunk_reservation(s, index, (uintptr_t)from, size, false);
    sim_reservation_t *dst = src ? chunk_reservation(s, index, (uintptr_t)to, size, true) : NULL;
    if (!dst) return VRAM_EINVAL;
    if (!vram_map_reserve(&s->mine, 1)) return vram_fail(VRAM_ENOMEM, "out of memory");
    rc = lock_table(s);
    if (rc) return rc;
    uint64_t packed;
    /* As in unmap: a chunk whose slot is no longer ours has nothing to carry. */
    if (vram_map_take(&s->mine, (uintptr_t)from, &packed)) {
        sim_slot_t *slot = &s->table->slots[packed & ((1u << SLOT_BITS) - 1)];
        if (slot->pid == s->pid && slot->addr == (uintptr_t)from) {
            s->table->generation++;
            slot->addr = (uintptr_t)to;
        }
        vram_map_put(&s->mine, (uintptr_t)to, packed); /* room reserved */
    }
    unlock_table(s);
    mark_chunk(src, (uintptr_t)from, size, false);
    mark_chunk(dst, (uintptr_t)to, size, true);
    return 0;
}

/* At close the chunks went back with the other allocations (release_each). */
static void sim_vmm_close(sim_t *s)
{
    for (sim_reservation_t *r = s->reservations, *next; r; r = next) {
        next = r->next;
        munmap((void *)r->base, r->size);
        free(r->state);
        free(r);
    }
    s->reservations = NULL;
}

const vram_backend_ops_t vram_backend_sim = {
    .name = "sim",
    .open = sim_open,
    .close = sim_close,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .processes = sim_processes,
    .alloc = sim_alloc,
    .free = sim_free,
    .vmm_granularity = sim_vmm_granularity,
    .vmm_reserve = sim_vmm_reserve,
    .vmm_unreserve = sim_vmm_unreserve,
    .vmm_map = sim_vmm_map,
    .vmm_unmap = sim_vmm_unmap,
    .vmm_move = sim_vmm_move,
};

/* ---- helpers for `vram sim` --------------------------------------- */

int vram_sim_state_path(char *buf, size_t len)
{
    vram_sim_spec_t *spec = malloc(sizeof *spec);
    if (!spec) return vram_fail(VRAM_ENOMEM, "out of memory");
    int rc = vram_sim_spec_parse(vram_option_str(VRAM_OPT_SIM), spec);
    if (!rc) rc = state_path(spec, buf, len);
    free(spec);
    return rc;
}

int vram_sim_free_all(size_t *freed)
{
    void *state;
    int rc = sim_open(&state);
    if (rc) return rc;
    sim_t *s = state;
    rc = lock_table(s);
    if (!rc) {
        size_t n = 0;
        for (uint32_t i = 0; i < SIM_SLOTS; i++)
            if (s->table->slots[i].pid) n++;
        s->table->generation++;
        memset(s->table->slots, 0, sizeof s->table->slots);
        memset(s->table->used, 0, sizeof s->table->used);
        s->table->live_slots = 0;
        unlock_table(s);
        *freed = n;
    }
    sim_close(s);
    return rc;
}
