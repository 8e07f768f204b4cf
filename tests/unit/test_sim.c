/* The sim backend: shared state between contexts and processes, capacity,
 * reclaim of dead owners, unique addresses, the state file's place and mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/sim.h"
#include "vram.h"

#define GIB (1ull << 30)

static char dir[256];
static char state_path[300];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/vram-test-sim-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(state_path, sizeof state_path, "%s/sim.state", dir);
    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB");
    vram_option_set(VRAM_OPT_SIM_STATE, state_path);
    return 0;
}

/* Removes the temp dir and everything in it (one level of subdirectories). */
static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[600];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (unlink(sub) != 0) remove_tree(sub);
    }
    closedir(d);
    rmdir(path);
}

static pid_t stray_kids[64];       /* children a failed test leaves behind */
static struct rlimit saved_nofile; /* what a failed test may leave lowered */

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof stray_kids / sizeof *stray_kids; i++)
        if (stray_kids[i] > 0) {
            kill(stray_kids[i], SIGKILL);
            waitpid(stray_kids[i], NULL, 0);
            stray_kids[i] = 0;
        }
    if (saved_nofile.rlim_cur) setrlimit(RLIMIT_NOFILE, &saved_nofile);
    remove_tree(dir);
    return 0;
}

static vram_ctx_t *open_sim(void)
{
    vram_ctx_t *ctx = NULL;
    int rc = vram_ctx_open_backend("sim", &ctx);
    if (rc) fail_msg("open sim: %s", vram_last_error());
    return ctx;
}

static uint64_t used_on(vram_ctx_t *ctx, int index)
{
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, index, &d), 0);
    assert_int_equal(d.used_bytes + d.free_bytes, d.total_bytes);
    return d.used_bytes;
}

static void reports_the_model(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_sim();
    assert_string_equal(vram_ctx_backend(ctx), "sim");
    assert_string_equal(vram_ctx_reason(ctx), ""); /* named, not auto */
    assert_int_equal(vram_ctx_device_count(ctx), 2);
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 1, &d), 0);
    assert_int_equal(d.index, 1);
    assert_string_equal(d.name, "H100-80GB");
    assert_string_equal(d.backend, "sim");
    assert_int_equal(d.total_bytes, 80 * GIB);
    assert_int_equal(d.used_bytes, 0);
    assert_int_equal(d.cc_major, 9);
    assert_int_equal(d.multiprocessors, 132);
    assert_int_equal(d.utilization_pct, 0);
    assert_true(d.temperature_c > 0 && d.power_w > 0);
    assert_int_equal(d.health, VRAM_HEALTH_AVAILABLE);
    assert_string_equal(d.error, "");
    assert_int_equal(vram_device_info(ctx, 2, &d), VRAM_ENODEV);
    vram_ctx_close(ctx);
}

static void contexts_share_allocations(void **state)
{
    (void)state;
    vram_ctx_t *a = open_sim(), *b = open_sim();
    void *p, *q;
    assert_int_equal(vram_device_alloc(a, 0, 10 * GIB, &p), 0);
    assert_int_equal(vram_device_alloc(b, 0, 3 * GIB, &q), 0);
    assert_int_equal(used_on(a, 0), 13 * GIB);
    assert_int_equal(used_on(b, 0), 13 * GIB);
    assert_int_equal(used_on(b, 1), 0);

    /* Both contexts are this process: one row with the sum. */
    vram_process_info_t procs[4];
    size_t n = 99;
    assert_int_equal(vram_device_processes(b, 0, procs, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(procs[0].pid, getpid());
    assert_int_equal(procs[0].used_bytes, 13 * GIB);
    assert_int_equal(vram_device_processes(b, 1, procs, 4, &n), 0);
    assert_int_equal(n, 0);

    /* A context frees only what it allocated. */
    assert_int_equal(vram_device_free(b, 0, p), VRAM_EINVAL);
    assert_int_equal(vram_device_free(a, 0, p), 0);
    assert_int_equal(used_on(b, 0), 3 * GIB);
    /* Closing a context releases what it still holds. */
    vram_ctx_close(b);
    assert_int_equal(used_on(a, 0), 0);
    vram_ctx_close(a);
}

/* A mapped chunk moved to another place of a reservation keeps its memory:
 * the device's use, as every context sees it, does not change; the old
 * place is unmapped, the new one holds the chunk (unmapped there, or
 * released with the context). Anything but a whole chunk moved to
 * reserved, unmapped granules of the same device is EINVAL. */
static void vmm_move_keeps_the_memory(void **state)
{
    (void)state;
    const size_t MiB = (size_t)1 << 20;
    vram_ctx_t *a = open_sim(), *b = open_sim();
    char *va = NULL, *other = NULL;
    assert_int_equal(vram_device_vmm_reserve(a, 0, 64 * MiB, (void **)&va), 0);
    assert_int_equal(vram_device_vmm_reserve(a, 1, 64 * MiB, (void **)&other), 0);
    assert_int_equal(vram_device_vmm_map(a, 0, va, 4 * MiB), 0);
    assert_int_equal(vram_device_vmm_map(a, 0, va + 16 * MiB, 2 * MiB), 0);
    assert_int_equal(used_on(b, 0), 6 * MiB);
    assert_int_equal(vram_device_vmm_move(a, 0, va, va + 8 * MiB, 4 * MiB), 0);
    assert_int_equal(used_on(b, 0), 6 * MiB);
    vram_process_info_t procs[2];
    size_t n = 0;
    assert_int_equal(vram_device_processes(b, 0, procs, 2, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(procs[0].used_bytes, 6 * MiB);
    /* The old place holds nothing now. */
    assert_int_equal(vram_device_vmm_unmap(a, 0, va, 4 * MiB), VRAM_EINVAL);
    assert_int_equal(vram_device_vmm_move(a, 0, va, va + 32 * MiB, 4 * MiB), VRAM_EINVAL);
    /* Over a mapping, part of a chunk, misaligned, past the reservation,
     * to another device's reservation: refused, nothing changed. */
    assert_int_equal(vram_device_vmm_move(a, 0, va + 8 * MiB, va + 14 * MiB, 4 * MiB), VRAM_EINVAL);
    assert_int_equal(vram_device_vmm_move(a, 0, va + 8 * MiB, va + 32 * MiB, 2 * MiB), VRAM_EINVAL);
    assert_int_equal(vram_device_vmm_move(a, 0, va + 8 * MiB, va + 33 * MiB, 4 * MiB), VRAM_EINVAL);
    assert_int_equal(vram_device_vmm_move(a, 0, va + 8 * MiB, va + 62 * MiB, 4 * MiB), VRAM_EINVAL);
    assert_int_equal(vram_device_vmm_move(a, 0, va + 8 * MiB, other, 4 * MiB), VRAM_EINVAL);
    assert_int_equal(vram_device_vmm_move(b, 0, va + 8 * MiB, va + 32 * MiB, 4 * MiB),
                     VRAM_EINVAL); /* another context's reservation */
    assert_int_equal(used_on(b, 0), 6 * MiB);
    /* Moved again, then unmapped where it is. */
    assert_int_equal(vram_device_vmm_move(a, 0, va + 8 * MiB, va + 40 * MiB, 4 * MiB), 0);
    assert_int_equal(vram_device_vmm_unmap(a, 0, va + 8 * MiB, 4 * MiB), VRAM_EINVAL);
    assert_int_equal(vram_device_vmm_unmap(a, 0, va + 40 * MiB, 4 * MiB), 0);
    assert_int_equal(used_on(b, 0), 2 * MiB);
    /* A moved chunk still mapped goes back with its context. */
    assert_int_equal(vram_device_vmm_move(a, 0, va + 16 * MiB, va, 2 * MiB), 0);
    assert_int_equal(vram_device_vmm_unreserve(a, 0, va, 64 * MiB), VRAM_EINVAL); /* mapped */
    vram_ctx_close(a);
    assert_int_equal(used_on(b, 0), 0);
    vram_ctx_close(b);
}

static void full_device_is_enomem(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_sim();
    void *p, *q, *r;
    assert_int_equal(vram_device_alloc(ctx, 1, 80 * GIB, &p), 0);
    vram_device_info_t d;
    assert_int_equal(vram_device_info(ctx, 1, &d), 0);
    assert_int_equal(d.free_bytes, 0);
    assert_int_equal(d.health, VRAM_HEALTH_BUSY);
    assert_int_equal(vram_device_alloc(ctx, 1, 1, &q), VRAM_ENOMEM);
    assert_non_null(strstr(vram_last_error(), "sim device 1"));
    /* The other device is untouched. */
    assert_int_equal(vram_device_alloc(ctx, 0, 80 * GIB, &q), 0);
    assert_int_equal(vram_device_free(ctx, 1, p), 0);
    assert_int_equal(vram_device_alloc(ctx, 1, 40 * GIB, &p), 0);
    assert_int_equal(vram_device_alloc(ctx, 1, 40 * GIB + 1, &r), VRAM_ENOMEM);
    assert_int_equal(vram_device_alloc(ctx, 1, 40 * GIB, &r), 0);
    assert_int_equal(vram_device_alloc(ctx, 1, 0, &r), VRAM_EINVAL);
    assert_int_equal(vram_device_free(ctx, 1, q), VRAM_EINVAL); /* q lives on device 0 */
    vram_ctx_close(ctx);
}

/* A child allocates and dies without freeing; its memory comes back. */
static void dead_owner_is_reclaimed(void **state)
{
    (void)state;
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        vram_ctx_t *ctx;
        void *p;
        char c = 'x';
        if (vram_ctx_open_backend("sim", &ctx) || vram_device_alloc(ctx, 1, 5 * GIB, &p)) c = 'e';
        if (write(ready[1], &c, 1) != 1) _exit(2);
        if (read(go[0], &c, 1) < 0) _exit(2);
        _exit(0); /* no free, no close: like a crash */
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(c, 'x');
    vram_ctx_t *ctx = open_sim();
    assert_int_equal(used_on(ctx, 1), 5 * GIB);
    vram_process_info_t procs[4];
    size_t n;
    assert_int_equal(vram_device_processes(ctx, 1, procs, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(procs[0].pid, child);
    assert_int_equal(procs[0].used_bytes, 5 * GIB);

    assert_int_equal(write(go[1], "x", 1), 1);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(used_on(ctx, 1), 0);
    assert_int_equal(vram_device_processes(ctx, 1, procs, 4, &n), 0);
    assert_int_equal(n, 0);
    /* The whole device is available again, without any process freeing. */
    void *p;
    assert_int_equal(vram_device_alloc(ctx, 1, 80 * GIB, &p), 0);
    vram_ctx_close(ctx);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
}

/* A child that allocates through a context inherited over fork() owns that
 * allocation (its own pid), and the parent's allocations stay the parent's. */
static void forked_child_with_inherited_context(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_sim();
    void *mine;
    assert_int_equal(vram_device_alloc(ctx, 0, 2 * GIB, &mine), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        void *p;
        int rc = vram_device_alloc(ctx, 0, 7 * GIB, &p);
        /* The parent's pointer is not the child's to free. */
        int rc2 = vram_device_free(ctx, 0, mine);
        _exit(rc == 0 && rc2 == VRAM_EINVAL ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(used_on(ctx, 0), 2 * GIB);
    assert_int_equal(vram_device_free(ctx, 0, mine), 0);
    assert_int_equal(used_on(ctx, 0), 0);
    vram_ctx_close(ctx);
}

typedef struct {
    uintptr_t addr;
    size_t size;
    int device;
} live_t;

static int by_addr(const void *a, const void *b)
{
    uintptr_t x = ((const live_t *)a)->addr, y = ((const live_t *)b)->addr;
    return (x > y) - (x < y);
}

/* Random allocations and frees against a reference model: the totals agree
 * and live ranges never overlap. */
static void random_allocations_match_model(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_sim();
    enum { CAP = 512 };
    live_t live[CAP], sorted[CAP];
    size_t n = 0;
    uint64_t model_used[2] = {0, 0};
    srand(12345);
    for (int step = 0; step < 3000; step++) {
        bool do_alloc = n == 0 || (n < CAP && rand() % 100 < 55);
        if (do_alloc) {
            int dev = rand() % 2;
            size_t size = (size_t)1 << (rand() % 34); /* 1 B .. 8 GiB */
            size += (size_t)(rand() % 4096);
            void *p;
            int rc = vram_device_alloc(ctx, dev, size, &p);
            if (model_used[dev] + size > 80 * GIB) {
                assert_int_equal(rc, VRAM_ENOMEM);
                continue;
            }
            assert_int_equal(rc, 0);
            live[n++] = (live_t){(uintptr_t)p, size, dev};
            model_used[dev] += size;
        } else {
            size_t k = (size_t)rand() % n;
            assert_int_equal(vram_device_free(ctx, live[k].device, (void *)live[k].addr), 0);
            model_used[live[k].device] -= live[k].size;
            live[k] = live[--n];
        }
        if (step % 100 == 0 || step == 2999) {
            assert_int_equal(used_on(ctx, 0), model_used[0]);
            assert_int_equal(used_on(ctx, 1), model_used[1]);
            memcpy(sorted, live, n * sizeof *live);
            qsort(sorted, n, sizeof *sorted, by_addr);
            for (size_t i = 1; i < n; i++)
                assert_true(sorted[i - 1].addr + sorted[i - 1].size <= sorted[i].addr);
        }
    }
    vram_ctx_close(ctx);
    vram_ctx_t *other = open_sim();
    assert_int_equal(used_on(other, 0), 0);
    assert_int_equal(used_on(other, 1), 0);
    vram_ctx_close(other);
}

static void default_state_file_is_private(void **state)
{
    (void)state;
    char runtime[300];
    snprintf(runtime, sizeof runtime, "%s/run", dir);
    assert_int_equal(mkdir(runtime, 0700), 0);
    char *saved = getenv("XDG_RUNTIME_DIR") ? strdup(getenv("XDG_RUNTIME_DIR")) : NULL;
    setenv("XDG_RUNTIME_DIR", runtime, 1);
    vram_option_set(VRAM_OPT_SIM_STATE, "");
    vram_ctx_t *ctx = open_sim();

    char sub[320];
    snprintf(sub, sizeof sub, "%s/vram", runtime);
    struct stat st;
    assert_int_equal(stat(sub, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    DIR *d = opendir(sub);
    assert_non_null(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        files++;
        assert_true(!strncmp(e->d_name, "sim-", 4) && strstr(e->d_name, ".state"));
        char file[600];
        snprintf(file, sizeof file, "%s/%s", sub, e->d_name);
        assert_int_equal(stat(file, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
    }
    closedir(d);
    assert_int_equal(files, 1);
    vram_ctx_close(ctx);

    /* A different spec gets a different file. */
    vram_option_set(VRAM_OPT_SIM, "A100-40GB");
    ctx = open_sim();
    vram_ctx_close(ctx);
    d = opendir(sub);
    files = 0;
    while ((e = readdir(d)))
        files += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(files, 2);

    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB");
    vram_option_set(VRAM_OPT_SIM_STATE, state_path);
    if (saved) {
        setenv("XDG_RUNTIME_DIR", saved, 1);
        free(saved);
    } else {
        unsetenv("XDG_RUNTIME_DIR");
    }
}

/* An explicit state file shared by two different specs: reused when idle,
 * refused while the other spec's allocations are live. */
static void state_file_of_another_spec(void **state)
{
    (void)state;
    vram_ctx_t *a = open_sim();
    void *p;
    assert_int_equal(vram_device_alloc(a, 0, GIB, &p), 0);
    vram_option_set(VRAM_OPT_SIM, "A100-40GB");
    vram_ctx_t *b = NULL;
    assert_int_equal(vram_ctx_open_backend("sim", &b), VRAM_EBUSY);
    assert_non_null(strstr(vram_last_error(), "VRAM_SIM_STATE"));
    assert_null(b);
    assert_int_equal(vram_device_free(a, 0, p), 0);
    b = open_sim();
    assert_int_equal(vram_ctx_device_count(b), 1);
    assert_int_equal(used_on(b, 0), 0);
    vram_ctx_close(b);
    vram_ctx_close(a);
    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB");
}

/* free-all drops everybody's allocations; their owners' frees still work. */
static void free_all_drops_everything(void **state)
{
    (void)state;
    vram_ctx_t *a = open_sim(), *b = open_sim();
    void *p, *q, *r;
    assert_int_equal(vram_device_alloc(a, 0, GIB, &p), 0);
    assert_int_equal(vram_device_alloc(b, 1, 2 * GIB, &q), 0);
    size_t freed = 0;
    assert_int_equal(vram_sim_free_all(&freed), 0);
    assert_int_equal(freed, 2);
    assert_int_equal(used_on(a, 0), 0);
    assert_int_equal(used_on(a, 1), 0);
    assert_int_equal(vram_device_alloc(b, 0, 3 * GIB, &r), 0);
    assert_int_equal(vram_device_free(a, 0, p), 0);
    assert_int_equal(vram_device_free(b, 1, q), 0);
    assert_int_equal(used_on(a, 0), 3 * GIB); /* r is untouched */
    char path[512];
    assert_int_equal(vram_sim_state_path(path, sizeof path), 0);
    assert_string_equal(path, state_path);
    vram_ctx_close(a);
    vram_ctx_close(b);
    vram_ctx_t *c = open_sim();
    assert_int_equal(used_on(c, 0), 0);
    vram_ctx_close(c);
}

/* More allocations than the state table has slots: ENOMEM, not a hang, and a
 * free makes room again. */
static void full_table_is_enomem(void **state)
{
    (void)state;
    vram_option_set(VRAM_OPT_SIM, "mygpu:1GiB");
    vram_ctx_t *ctx = open_sim();
    size_t cap = 1 << 16, n = 0;
    void **ptrs = malloc(cap * sizeof *ptrs);
    assert_non_null(ptrs);
    int rc;
    while ((rc = vram_device_alloc(ctx, 0, 4096, &ptrs[n])) == 0 && n + 1 < cap)
        n++;
    assert_int_equal(rc, VRAM_ENOMEM);
    assert_non_null(strstr(vram_last_error(), "table is full"));
    assert_true(n >= 1000);
    assert_int_equal(used_on(ctx, 0), (uint64_t)n * 4096);
    assert_int_equal(vram_device_free(ctx, 0, ptrs[n / 2]), 0);
    assert_int_equal(vram_device_alloc(ctx, 0, 4096, &ptrs[n / 2]), 0);
    vram_ctx_close(ctx); /* releases all n */
    free(ptrs);
    ctx = open_sim();
    assert_int_equal(used_on(ctx, 0), 0);
    vram_ctx_close(ctx);
    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB");
}

/* ---- owners dying while a long-lived context watches ------------------- */

enum { KIDS = 40 }; /* at most the length of stray_kids */

typedef struct {
    pid_t pid;
    int device;
    uint64_t bytes;
    bool holding; /* alive, or a zombie that must not count */
} kid_t;

/* Forks KIDS children that each hold some memory under their own name and
 * wait to be killed; returns once all of them hold it. */
static void spawn_kids(kid_t *kids)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    for (int i = 0; i < KIDS; i++) {
        kids[i] = (kid_t){0, i % 2, (uint64_t)(i + 1) << 20, true};
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char name[16], c = 'x';
            snprintf(name, sizeof name, "simkid-%d", i);
            prctl(PR_SET_NAME, name);
            vram_ctx_t *ctx;
            void *p;
            if (vram_ctx_open_backend("sim", &ctx) ||
                vram_device_alloc(ctx, kids[i].device, kids[i].bytes, &p))
                c = 'e';
            if (write(ready[1], &c, 1) != 1) _exit(2);
            for (;;)
                pause();
        }
        kids[i].pid = stray_kids[i] = pid;
    }
    for (int i = 0; i < KIDS; i++) {
        char c;
        assert_int_equal(read(ready[0], &c, 1), 1);
        assert_int_equal(c, 'x');
    }
    close(ready[0]);
    close(ready[1]);
}

/* The context's answers equal the model: totals and per-process rows. */
static void check_against_kids(vram_ctx_t *ctx, const kid_t *kids)
{
    for (int d = 0; d < 2; d++) {
        uint64_t want = 0;
        size_t holders = 0;
        for (int i = 0; i < KIDS; i++)
            if (kids[i].holding && kids[i].device == d) {
                want += kids[i].bytes;
                holders++;
            }
        assert_int_equal(used_on(ctx, d), want);
        vram_process_info_t procs[KIDS];
        size_t n = 0;
        assert_int_equal(vram_device_processes(ctx, d, procs, KIDS, &n), 0);
        assert_int_equal(n, holders);
        for (size_t k = 0; k < n; k++) {
            if (k) assert_true(procs[k - 1].pid < procs[k].pid);
            int i = 0;
            while (i < KIDS && kids[i].pid != procs[k].pid)
                i++;
            assert_true(i < KIDS && kids[i].holding);
            assert_int_equal(procs[k].used_bytes, kids[i].bytes);
            char name[16];
            snprintf(name, sizeof name, "simkid-%d", i);
            assert_string_equal(procs[k].name, name);
        }
    }
}

/* Kills the children in a random order, each left a zombie for one check
 * (it holds no memory: it has exited) and then reaped, checking the totals
 * and process lists of one long-lived context against the model after each
 * step. The context answers from its view between changes, so this is what
 * catches a stale one. */
static void owners_die_while_watched(unsigned seed)
{
    kid_t kids[KIDS];
    spawn_kids(kids);
    vram_ctx_t *ctx = open_sim();
    check_against_kids(ctx, kids);
    check_against_kids(ctx, kids); /* from the view: nothing changed */
    int order[KIDS];
    for (int i = 0; i < KIDS; i++)
        order[i] = i;
    srand(seed);
    for (int i = KIDS - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int k = 0; k < KIDS; k++) {
        kid_t *kid = &kids[order[k]];
        assert_int_equal(kill(kid->pid, SIGKILL), 0);
        siginfo_t info;
        /* Exited, not reaped: a zombie. */
        assert_int_equal(waitid(P_PID, (id_t)kid->pid, &info, WEXITED | WNOWAIT), 0);
        kid->holding = false;
        check_against_kids(ctx, kids);
        assert_int_equal(waitpid(kid->pid, NULL, 0), kid->pid);
        stray_kids[order[k]] = 0;
        check_against_kids(ctx, kids);
    }
    vram_ctx_close(ctx);
}

static void dying_owners_match_model(void **state)
{
    (void)state;
    owners_die_while_watched(1);
}

/* Few descriptors allowed: most owners are checked through /proc instead of
 * a pidfd, with the same answers. */
static void dying_owners_match_model_without_pidfds(void **state)
{
    (void)state;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved_nofile), 0);
    struct rlimit few = saved_nofile;
    few.rlim_cur = 32; /* a budget of 8 pidfds for 40 owners */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &few), 0);
    owners_die_while_watched(2); /* teardown restores the limit */
}

/* Another process's allocation and free are seen by a context that already
 * answered (the table's generation moved), while that process lives. */
static void other_process_changes_are_seen(void **state)
{
    (void)state;
    vram_ctx_t *ctx = open_sim();
    assert_int_equal(used_on(ctx, 0), 0);
    int step[2], done[2];
    assert_int_equal(pipe(step), 0);
    assert_int_equal(pipe(done), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        vram_ctx_t *c;
        void *p;
        char x = 'x';
        if (vram_ctx_open_backend("sim", &c) || vram_device_alloc(c, 0, 3 * GIB, &p)) x = 'e';
        if (write(done[1], &x, 1) != 1 || read(step[0], &x, 1) != 1) _exit(2);
        x = vram_device_free(c, 0, p) ? 'e' : 'x';
        if (write(done[1], &x, 1) != 1 || read(step[0], &x, 1) != 1) _exit(2);
        _exit(0);
    }
    stray_kids[0] = child;
    char c;
    assert_int_equal(read(done[0], &c, 1), 1);
    assert_int_equal(c, 'x');
    assert_int_equal(used_on(ctx, 0), 3 * GIB);
    assert_int_equal(write(step[1], "x", 1), 1);
    assert_int_equal(read(done[0], &c, 1), 1);
    assert_int_equal(c, 'x');
    assert_int_equal(used_on(ctx, 0), 0); /* freed, the child still alive */
    assert_int_equal(write(step[1], "x", 1), 1);
    assert_int_equal(waitpid(child, NULL, 0), child);
    stray_kids[0] = 0;
    close(step[0]);
    close(step[1]);
    close(done[0]);
    close(done[1]);
    vram_ctx_close(ctx);
}

static void bad_spec_and_missing_spec(void **state)
{
    (void)state;
    vram_ctx_t *ctx = NULL;
    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB,nope");
    assert_int_equal(vram_ctx_open_backend("sim", &ctx), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "nope"));
    vram_option_set(VRAM_OPT_SIM, "");
    assert_int_equal(vram_ctx_open_backend("sim", &ctx), VRAM_EINVAL);
    assert_non_null(strstr(vram_last_error(), "VRAM_SIM"));
    assert_null(ctx);
    vram_option_set(VRAM_OPT_SIM, "2xH100-80GB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(reports_the_model, setup, teardown),
        cmocka_unit_test_setup_teardown(contexts_share_allocations, setup, teardown),
        cmocka_unit_test_setup_teardown(vmm_move_keeps_the_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(full_device_is_enomem, setup, teardown),
        cmocka_unit_test_setup_teardown(dead_owner_is_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(forked_child_with_inherited_context, setup, teardown),
        cmocka_unit_test_setup_teardown(random_allocations_match_model, setup, teardown),
        cmocka_unit_test_setup_teardown(default_state_file_is_private, setup, teardown),
        cmocka_unit_test_setup_teardown(state_file_of_another_spec, setup, teardown),
        cmocka_unit_test_setup_teardown(free_all_drops_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(full_table_is_enomem, setup, teardown),
        cmocka_unit_test_setup_teardown(dying_owners_match_model, setup, teardown),
        cmocka_unit_test_setup_teardown(dying_owners_match_model_without_pidfds, setup, teardown),
        cmocka_unit_test_setup_teardown(other_process_changes_are_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_spec_and_missing_spec, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
