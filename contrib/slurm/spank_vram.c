/* spank_vram: a SPANK plugin that has the node's vramd admit each job step
 * by GPU memory before the step's tasks start (docs/slurm.md).
 *
 * In slurmstepd: user_init opens two pipes; each task, in task_init (as the
 * job's user, before exec), either registers the step (local task 0) and
 * hands the grant to its siblings through the first pipe, or waits for that
 * grant. Task 0 registers its own pid, then forks: the child goes on to exec
 * the user's program, task 0 stays as its supervisor (as `vram run` does),
 * so the program's processes are the vramd job's (their memory counts as
 * the job's), its exit status is reported before the registered pid goes,
 * and vramd still releases the memory if anything kills the supervisor.
 * Task 0 also sends the vramd job id to slurmstepd through the second pipe;
 * the exit hook reports the step's end again, in case nobody else could. */
#include "spank_vram.h"

#include <slurm/spank.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vram.h"

SPANK_PLUGIN(vram, 1) /* the macro ends with its own semicolon */

#ifndef SPANK_VRAM_BIN
#define SPANK_VRAM_BIN "/usr/bin/vram"
#endif

static char *values[SPANK_VRAM_OPT_COUNT_];
static const char *option_names[] = {
#define SPANK_VRAM_NAME_(id, name, arg, has_arg, usage) name,
    SPANK_VRAM_OPTIONS(SPANK_VRAM_NAME_)
#undef SPANK_VRAM_NAME_
};
/* plugstack.conf's socket=, where %n stands for the node's Slurm name and
 * %h for its host name (one shared plugstack.conf for nodes that keep their
 * sockets apart); socket_path is it expanded on the node. */
static const char *socket_template = "/run/vram/vramd.sock";
static char socket_path[512] = "/run/vram/vramd.sock";
static const char *vram_bin = SPANK_VRAM_BIN;
static bool admin_optional;

/* slurmstepd's state, inherited by the tasks it forks. */
static int grant_pipe[2] = {-1, -1}; /* task 0 -> its siblings */
static int id_pipe[2] = {-1, -1};    /* task 0 -> slurmstepd */
static uint32_t local_tasks, forked_tasks;
static int task0_status;

static bool positive_integer(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return end != s && !*end && v > 0 && v <= 1 << 30;
}

/* Checks a value where it is typed (srun, sbatch) and again in slurmstepd. */
static int on_option(int val, const char *optarg, int remote)
{
    (void)remote;
    if (val < 0 || val >= SPANK_VRAM_OPT_COUNT_) return -1;
    const char *v = optarg ? optarg : "1", *bad = NULL;
    uint64_t size;
    double seconds;
    switch (val) {
    case SPANK_VRAM_OPT_MEM:
        if (vram_parse_size(v, &size) != 0 || size == 0 || !strpbrk(v, "BbKkMmGgTt"))
            bad = "a size with a unit, e.g. 60GiB";
        break;
    case SPANK_VRAM_OPT_MIN_BATCH:
    case SPANK_VRAM_OPT_GPUS:
        if (!positive_integer(v)) bad = "a whole number > 0";
        break;
    case SPANK_VRAM_OPT_TIMEOUT:
        if (vram_parse_seconds(v, &seconds) != 0 || seconds < 0) bad = "seconds, e.g. 600 or 10m";
        break;
    }
    if (bad) {
        slurm_error("--%s=%s: expected %s", option_names[val], v, bad);
        return -1;
    }
    free(values[val]);
    values[val] = strdup(v);
    return values[val] ? 0 : -1;
}

struct spank_option spank_options[] = {
#define SPANK_VRAM_ROW_(id, name, arg, has_arg, usage)                                             \
    {name, arg, usage, has_arg, SPANK_VRAM_OPT_##id, on_option},
    SPANK_VRAM_OPTIONS(SPANK_VRAM_ROW_)
#undef SPANK_VRAM_ROW_
        SPANK_OPTIONS_TABLE_END};

static bool active(void)
{
    return values[SPANK_VRAM_OPT_MEM] || values[SPANK_VRAM_OPT_MODEL];
}

/* plugstack.conf arguments: socket=PATH, vram=PATH, optional. */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
    /* sbatch and salloc ignore a static spank_options table (Slurm loads it
     * in every context but the allocator's): register the options there. */
    if (spank_context() == S_CTX_ALLOCATOR)
        for (int i = 0; i < SPANK_VRAM_OPT_COUNT_; i++)
            if (spank_option_register(sp, &spank_options[i]) != ESPANK_SUCCESS) {
                slurm_error("spank_vram: cannot register --%s", spank_options[i].name);
                return -1;
            }
    for (int i = 0; i < ac; i++) {
        if (!strncmp(av[i], "socket=", 7))
            socket_template = av[i] + 7;
        else if (!strncmp(av[i], "vram=", 5))
            vram_bin = av[i] + 5;
        else if (!strcmp(av[i], "optional"))
            admin_optional = true;
        else {
            slurm_error("spank_vram: unknown plugstack.conf argument \"%s\" (socket=PATH, "
                        "vram=PATH, optional)",
                        av[i]);
            return -1;
        }
    }
    return 0;
}

/* sbatch/salloc/srun: the memory the job asks for goes with the job to
 * slurmctld as VRAM_GRES_MIB (per node: MiB per GPU times GPUs) and
 * VRAM_GPU_MIB (per GPU), where job_submit.lua turns them into
 * --gres=vram:N and a constraint to nodes whose GPUs can each hold the job,
 * so that Slurm places it where the memory is (docs/slurm.md). */
static int tell_slurmctld(spank_t sp)
{
    spank_context_t ctx = spank_context();
    uint64_t mem;
    if ((ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR) || !values[SPANK_VRAM_OPT_MEM] ||
        vram_parse_size(values[SPANK_VRAM_OPT_MEM], &mem) != 0)
        return 0;
    long long gpus = values[SPANK_VRAM_OPT_GPUS] ? atoll(values[SPANK_VRAM_OPT_GPUS]) : 1;
    unsigned long long per_gpu = (mem + (1u << 20) - 1) >> 20;
    char mib[32], gpu_mib[32];
    snprintf(mib, sizeof mib, "%llu", per_gpu * (unsigned long long)gpus);
    snprintf(gpu_mib, sizeof gpu_mib, "%llu", per_gpu);
    if (spank_job_control_setenv(sp, "VRAM_GRES_MIB", mib, 1) != ESPANK_SUCCESS ||
        spank_job_control_setenv(sp, "VRAM_GPU_MIB", gpu_mib, 1) != ESPANK_SUCCESS)
        slurm_debug("spank_vram: cannot pass VRAM_GRES_MIB/VRAM_GPU_MIB to slurmctld");
    return 0;
}

/* Contradictions are refused by srun/sbatch before anything is queued. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)sp, (void)ac, (void)av;
    if (values[SPANK_VRAM_OPT_MEM] && values[SPANK_VRAM_OPT_MODEL]) {
        slurm_error("--vram-mem and --vram-model: give one (the model's estimate is the memory)");
        return -1;
    }
    static const spank_vram_opt_t need_model[] = {SPANK_VRAM_OPT_ESTIMATE_ARGS,
                                                  SPANK_VRAM_OPT_MIN_BATCH};
    for (size_t i = 0; i < sizeof need_model / sizeof need_model[0]; i++)
        if (values[need_model[i]] && !values[SPANK_VRAM_OPT_MODEL]) {
            slurm_error("--%s needs --vram-model", option_names[need_model[i]]);
            return -1;
        }
    for (int i = 0; i < SPANK_VRAM_OPT_COUNT_; i++)
        if (values[i] && !active()) {
            slurm_error("--%s needs --vram-mem or --vram-model", option_names[i]);
            return -1;
        }
    return tell_slurmctld(sp);
}

/* Expands %n (SLURMD_NODENAME), %h (host name) and %% in socket_template. */
static int expand_socket(spank_t sp)
{
    char node[256] = "", host[256] = "";
    if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof node) != ESPANK_SUCCESS)
        snprintf(node, sizeof node, "%s",
                 getenv("SLURMD_NODENAME") ? getenv("SLURMD_NODENAME") : "");
    if (gethostname(host, sizeof host) != 0) host[0] = 0;
    host[sizeof host - 1] = 0;
    size_t at = 0;
    for (const char *p = socket_template; *p && at + 1 < sizeof socket_path; p++) {
        const char *put = NULL;
        if (p[0] == '%' && (p[1] == 'n' || p[1] == 'h' || p[1] == '%')) {
            put = p[1] == 'n' ? node : p[1] == 'h' ? host : "%";
            if (!*put) {
                slurm_error("spank_vram: socket=%s: the node's %s is unknown", socket_template,
                            p[1] == 'n' ? "Slurm name (SLURMD_NODENAME)" : "host name");
                return -1;
            }
            p++;
        }
        at += (size_t)snprintf(socket_path + at, sizeof socket_path - at, "%.*s",
                               put ? (int)strlen(put) : 1, put ? put : p);
    }
    if (at + 1 >= sizeof socket_path) {
        slurm_error("spank_vram: socket=%s is too long once expanded", socket_template);
        return -1;
    }
    return 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!spank_remote(sp) || !active()) return 0;
    if (expand_socket(sp) != 0) return -1;
    if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks) != ESPANK_SUCCESS) local_tasks = 1;
    if (pipe2(grant_pipe, O_CLOEXEC) != 0 || pipe2(id_pipe, O_CLOEXEC) != 0) {
        slurm_error("spank_vram: pipe: %s", strerror(errno));
        return -1;
    }
    fcntl(id_pipe[0], F_SETFL, O_NONBLOCK);
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* Once every task is forked, only the tasks hold the grant pipe's write end:
 * if task 0 dies before writing, its siblings read end-of-file. */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!spank_remote(sp) || !active()) return 0;
    if (++forked_tasks >= local_tasks) {
        close_fd(&grant_pipe[1]);
        close_fd(&id_pipe[1]);
    }
    return 0;
}

/* "0,1" -> {0, 1}; returns the count. */
static int parse_list(const char *text, char entries[][64], int cap)
{
    int n = 0;
    const char *p = text;
    while (*p && n < cap) {
        size_t len = strcspn(p, ",");
        snprintf(entries[n++], 64, "%.*s", (int)(len < 63 ? len : 63), p);
        p += len + (p[len] == ',');
    }
    return n;
}

static void describe_step(spank_t sp, spank_vram_step_t *step)
{
    memset(step, 0, sizeof *step);
    for (int i = 0; i < SPANK_VRAM_OPT_COUNT_; i++)
        step->opt[i] = values[i];
    if (admin_optional) step->opt[SPANK_VRAM_OPT_OPTIONAL] = "1";
    step->socket = socket_path;
    step->vram_bin = vram_bin;
    step->pid = (int)getpid();
    spank_get_item(sp, S_JOB_ID, &step->slurm_job_id);
    spank_get_item(sp, S_JOB_STEPID, &step->slurm_step_id);
    snprintf(step->name, sizeof step->name, "slurm-%u.%u", step->slurm_job_id, step->slurm_step_id);
    int argc = 0;
    char **argv = NULL;
    size_t at = 0;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS)
        for (int i = 0; i < argc && at < sizeof step->command; i++)
            at += (size_t)snprintf(step->command + at, sizeof step->command - at, "%s%s",
                                   i ? " " : "", argv[i]);
    /* SLURM_STEP_GPUS are the GPUs' own indices (vramd's); CUDA_VISIBLE_DEVICES
     * may be renumbered when Slurm constrains devices. */
    char gpus[512] = "", cvd[512] = "", ids[64][64];
    if (spank_getenv(sp, "SLURM_STEP_GPUS", gpus, sizeof gpus) != ESPANK_SUCCESS)
        spank_getenv(sp, "CUDA_VISIBLE_DEVICES", gpus, sizeof gpus);
    if (spank_getenv(sp, "CUDA_VISIBLE_DEVICES", cvd, sizeof cvd) != ESPANK_SUCCESS)
        snprintf(cvd, sizeof cvd, "%s", gpus);
    step->nstep_gpus = parse_list(gpus, ids, 64);
    int ncvd = parse_list(cvd, step->step_cvd, 64);
    for (int i = 0; i < step->nstep_gpus; i++) {
        step->step_gpus[i] = atoi(ids[i]);
        if (i >= ncvd) snprintf(step->step_cvd[i], 64, "%s", ids[i]);
    }
}

static void export_grant(spank_t sp, const spank_vram_grant_t *g)
{
    if (!g->admitted) return;
    char text[32];
    spank_setenv(sp, "CUDA_VISIBLE_DEVICES", g->cuda_visible_devices, 1);
    snprintf(text, sizeof text, "%lld", g->job_id);
    spank_setenv(sp, "VRAM_JOB_ID", text, 1);
    if (g->batch_size > 0) {
        snprintf(text, sizeof text, "%lld", g->batch_size);
        spank_setenv(sp, "VRAM_BATCH_SIZE", text, 1);
        snprintf(text, sizeof text, "%lld", g->grad_accum);
        spank_setenv(sp, "VRAM_GRAD_ACCUM", text, 1);
    }
}

struct finish {
    long long job_id;
    int status;
};

static void *report_finish(void *arg)
{
    const struct finish *f = arg;
    spank_vram_finish(socket_path, f->job_id, f->status);
    return NULL;
}

/* Task 0's life after admission: waits for the user's program, reports its
 * end to vramd and ends the same way, so Slurm sees the program's status. */
static void supervise(pid_t program, long long job_id) __attribute__((noreturn));
static void supervise(pid_t program, long long job_id)
{
    /* Only the program may hold Slurm's descriptors (its exec is awaited). */
    close_range(3, ~0U, 0);
    /* Slurm signals the whole step (process group or cgroup), so whatever it
     * sends (scancel, --signal=USR1@60 for checkpoints) reaches the program;
     * the supervisor must outlive the program to report it, and must not
     * release the memory while the program still runs. SIGKILL ends both. */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGCHLD && sig != SIGCONT && sig != SIGSEGV && sig != SIGBUS && sig != SIGFPE &&
            sig != SIGILL && sig != SIGTRAP && sig != SIGSYS && sig != SIGABRT)
            signal(sig, SIG_IGN); /* KILL and STOP refuse it */
    int status = 0;
    while (waitpid(program, &status, 0) < 0 && errno == EINTR) {
    }
    /* The report goes out on a new thread: the HTTP client keeps one
     * connection per thread, and this thread's died with the descriptors. */
    struct finish f = {job_id, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
    pthread_t reporter;
    if (pthread_create(&reporter, NULL, report_finish, &f) == 0) pthread_join(reporter, NULL);
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        raise(WTERMSIG(status));
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!spank_remote(sp) || !active()) return 0;
    int task = 0;
    spank_get_item(sp, S_TASK_ID, &task);
    close_fd(&id_pipe[0]);
    spank_vram_grant_t g;
    if (task != 0) { /* wait for task 0's grant */
        close_fd(&grant_pipe[1]);
        close_fd(&id_pipe[1]);
        ssize_t n;
        while ((n = read(grant_pipe[0], &g, sizeof g)) < 0 && errno == EINTR) {
        }
        close_fd(&grant_pipe[0]);
        if (n != (ssize_t)sizeof g || g.job_id < 0) return -1; /* task 0 said why */
        export_grant(sp, &g);
        return 0;
    }
    close_fd(&grant_pipe[0]);
    spank_vram_step_t step;
    describe_step(sp, &step);
    int rc = spank_vram_admit(&step, &g);
    if (rc != 0) g.job_id = -1;
    for (uint32_t i = 1; i < local_tasks; i++)
        if (write(grant_pipe[1], &g, sizeof g) != (ssize_t)sizeof g) break;
    if (rc == 0 && g.admitted && write(id_pipe[1], &g.job_id, sizeof g.job_id) < 0)
        slurm_debug("spank_vram: cannot pass the job id to slurmstepd: %s", strerror(errno));
    close_fd(&grant_pipe[1]);
    close_fd(&id_pipe[1]);
    if (rc != 0) return -1;
    export_grant(sp, &g);
    if (!g.admitted) return 0;
    pid_t program = fork();
    if (program < 0) {
        fprintf(stderr, "vram: fork: %s\n", strerror(errno));
        return -1;
    }
    if (program > 0) supervise(program, g.job_id);
    return 0; /* the program: Slurm execs it */
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    int task = -1, status = 0;
    if (!spank_remote(sp) || !active()) return 0;
    if (spank_get_item(sp, S_TASK_ID, &task) != ESPANK_SUCCESS || task != 0) return 0;
    if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) == ESPANK_SUCCESS)
        task0_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return 0;
}

/* The step is over, however it ended: release the reservation now rather
 * than when vramd notices task 0's end. */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!spank_remote(sp) || !active() || id_pipe[0] < 0) return 0;
    long long job_id = 0;
    if (read(id_pipe[0], &job_id, sizeof job_id) == (ssize_t)sizeof job_id && job_id > 0)
        spank_vram_finish(socket_path, job_id, task0_status);
    close_fd(&id_pipe[0]);
    return 0;
}
