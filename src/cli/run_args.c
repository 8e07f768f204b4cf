/* The options of vram run and vram submit (one table), their checks, and
 * the job request built from them. */
#include "cli/model_args.h"
#include "cli/run.h"
#include "vram_int.h" /* vram_batch_bytes_to_json */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BOTH, RUN_ONLY, SUBMIT_ONLY };

/* X(long name, takes a value, short code, where, help) */
#define RUN_OPTIONS(X)                                                                             \
    X("mem", 1, 'm', BOTH, "SIZE     memory per GPU for the full batch, with a unit (20GiB)")      \
    X("gpus", 1, 'g', BOTH, "N        GPUs needed at once (default 1)")                            \
    X("devices", 1, 'd', BOTH, "LIST     exactly these GPUs, in this order, e.g. 0,1")             \
    X("priority", 1, 'p', BOTH, "P        higher runs first (default 0)")                          \
    X("timeout", 1, 't', BOTH, "S        give up when still queued after S (90, 10m); exit 124")   \
    X("batch-size", 1, 'b', BOTH, "B        the batch COMMAND wants")                              \
    X("min-batch-size", 1, 'B', BOTH, "b        smallest acceptable batch (enables degradation)")  \
    X("mem-at", 1, 'a', BOTH, "B=SIZE   memory per GPU at a smaller batch B (repeat, or B=S,B=S)") \
    X("name", 1, 'n', BOTH, "NAME     job name (default: the program's name)")                     \
    X("quiet", 0, 'q', BOTH, "         only COMMAND's output and errors")                          \
    X("retry-oom", 1, 'r', RUN_ONLY,                                                               \
      "N        on out-of-memory rerun with half the batch, N times")                              \
    X("oom-exit-code", 1, 'o', RUN_ONLY,                                                           \
      "C        with --retry-oom: exit status C also means OOM")                                   \
    X("grace", 1, 'k', RUN_ONLY,                                                                   \
      "S        after SIGTERM to the job, SIGKILL after S (default 10)")                           \
    X("output", 1, 'O', SUBMIT_ONLY, "FILE     COMMAND's stdout (default vram-%j.out; %j = id)")   \
    X("error", 1, 'E', SUBMIT_ONLY, "FILE     COMMAND's stderr (default: with stdout)")            \
    X("parsable", 0, 'P', SUBMIT_ONLY, "         print only the job id")                           \
    X("help", 0, 'h', BOTH, "         this help")

static const struct {
    const char *name;
    int has_arg, code, where;
    const char *help;
} table[] = {
#define RUN_ROW_(n, a, c, w, h) {n, a, c, w, h},
    RUN_OPTIONS(RUN_ROW_)
#undef RUN_ROW_
};
enum { N_OPTIONS = sizeof table / sizeof table[0] };

void run_say(const run_opts_t *o, const char *fmt, ...)
{
    if (o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vram %s: ", o->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void usage(const char *cmd, FILE *out)
{
    bool submit = !strcmp(cmd, "submit");
    if (submit)
        fprintf(out,
                "usage: vram submit --mem SIZE [options] -- COMMAND [ARGS...]\n\n"
                "Queues COMMAND and prints its job id at once. When vramd admits it, vramd\n"
                "starts COMMAND as you, in this directory, with this shell's PATH, LANG, LC_*,\n"
                "PYTHONPATH, ... (docs/cli.md), CUDA_VISIBLE_DEVICES and VRAM_* set, stdin\n"
                "/dev/null and stdout/stderr in files. `vram wait ID`, `vram attach ID`.\n\n");
    else
        fprintf(out,
                "usage: vram run --mem SIZE [options] -- COMMAND [ARGS...]\n\n"
                "Registers with vramd, waits in its queue until the memory is reserved, then runs\n"
                "COMMAND on this terminal with CUDA_VISIBLE_DEVICES, VRAM_JOB_ID, VRAM_BATCH_SIZE\n"
                "and VRAM_GRAD_ACCUM set, and returns COMMAND's exit status (124: queue timeout,\n"
                "130/143: interrupted, 1: vram error, 2: usage).\n\n");
    for (int i = 0; i < N_OPTIONS; i++)
        if (table[i].where == BOTH || table[i].where == (submit ? SUBMIT_ONLY : RUN_ONLY))
            fprintf(out, "  --%-15s %s\n", table[i].name, table[i].help);
    fprintf(out,
            "\nInstead of --mem, the memory may come from the estimator (`vram estimate` flags;\n"
            "full estimates at the batch size and at each smaller batch vramd may grant).\n\n"
            "Examples:\n"
            "  vram %s --mem 20GiB -- python train.py\n"
            "  vram %s --mem 8GiB --gpus 2 --timeout 10m -- python train.py\n"
            "  vram %s --model gpt2 --precision amp-bf16 --batch-size 8 --min-batch-size 2 -- "
            "python train.py\n",
            cmd, cmd, cmd);
    if (submit)
        fprintf(out,
                "  id=$(vram submit --parsable --mem 4GiB --output run-%%j.log -- ./train.sh)\n"
                "  vram attach $id\n"
                "  vram wait $id\n");
    else
        fprintf(out,
                "  vram run --mem 40GiB --batch-size 64 --mem-at 32=22GiB,16=13GiB --retry-oom 2 "
                "-- python train.py\n");
    fputc('\n', out);
    cli_model_args_help(out);
}

/* o->table and o->mem from the estimator: full estimates at the batch and
 * at the smaller batches worth granting down to `lo`. */
static int estimate_memory(run_opts_t *o, const cli_model_args_t *ma, uint32_t lo)
{
    vram_model_t model;
    int rc = cli_model_args_build(ma, &model);
    if (rc) return rc;
    if (vram_estimate_batch_table(&model, &ma->est, lo, o->table, VRAM_JOB_MAX_BATCHES, &o->ntable))
        return cli_usage_error(ma->cmd, "%s", vram_last_error());
    o->mem = o->table[o->ntable - 1].bytes;
    return 0;
}

/* --mem-at B=SIZE[,B=SIZE...]: entries of o->table, kept in batch order. */
static int parse_mem_at(run_opts_t *o, const char *arg)
{
    const char *cmd = o->cmd;
    for (const char *t = arg; *t;) {
        char piece[64], *eq;
        size_t len = strcspn(t, ",");
        snprintf(piece, sizeof piece, "%.*s", (int)(len < 63 ? len : 63), t);
        t += len + (t[len] == ',');
        long long b;
        uint64_t bytes;
        if (!(eq = strchr(piece, '=')))
            return cli_usage_error(cmd, "--mem-at \"%s\": give BATCH=SIZE, e.g. 16=12GiB", piece);
        *eq = 0;
        int rc = cli_parse_int(cmd, "--mem-at", piece, 1, 1LL << 30, &b);
        if (!rc) rc = cli_parse_size(cmd, "--mem-at", eq + 1, &bytes);
        if (rc) return rc;
        if (o->ntable >= VRAM_JOB_MAX_BATCHES - 1)
            return cli_usage_error(cmd, "--mem-at: at most %d batches", VRAM_JOB_MAX_BATCHES - 1);
        int at = o->ntable;
        while (at > 0 && o->table[at - 1].batch > (uint32_t)b)
            at--;
        if (at > 0 && o->table[at - 1].batch == (uint32_t)b)
            return cli_usage_error(cmd, "--mem-at: batch %lld is given twice", b);
        memmove(o->table + at + 1, o->table + at, (size_t)(o->ntable - at) * sizeof *o->table);
        o->table[at] = (vram_batch_bytes_t){(uint32_t)b, bytes};
        o->ntable++;
    }
    return 0;
}

static int parse_count(const char *cmd, const char *opt, const char *text, uint32_t *out)
{
    char flag[64];
    long long v;
    snprintf(flag, sizeof flag, "--%s", opt);
    int rc = cli_parse_int(cmd, flag, text, 0, 1LL << 30, &v);
    if (!rc) *out = (uint32_t)v;
    return rc;
}

typedef struct {
    bool given[128]; /* by short code */
    const char *devices;
    int ndevices;
    uint32_t gpus;
} seen_t;

static int one_option(run_opts_t *o, seen_t *seen, int c, const char *name, char *arg)
{
    const char *cmd = o->cmd;
    uint32_t n = 0;
    int rc = 0;
    switch (c) {
    case 'm':
        rc = cli_parse_size(cmd, "--mem", arg, &o->mem);
        if (!rc && o->mem == 0) rc = cli_usage_error(cmd, "--mem: must be more than 0");
        break;
    case 'a':
        rc = parse_mem_at(o, arg);
        break;
    case 'g':
        if (!(rc = parse_count(cmd, name, arg, &seen->gpus)))
            json_object_set_new(o->request, "gpus", json_integer(seen->gpus));
        break;
    case 'd': {
        json_t *list = json_array();
        seen->devices = arg;
        for (const char *t = arg; !rc && *t;) {
            char piece[16];
            size_t len = strcspn(t, ",");
            snprintf(piece, sizeof piece, "%.*s", (int)(len < 15 ? len : 15), t);
            if (!(rc = parse_count(cmd, name, piece, &n)))
                json_array_append_new(list, json_integer(n));
            t += len + (t[len] == ',');
        }
        seen->ndevices = (int)json_array_size(list);
        json_object_set_new(o->request, "devices", list);
        break;
    }
    case 'p': {
        long long p = 0;
        rc = cli_parse_int(cmd, "--priority", arg, -1000000, 1000000, &p);
        json_object_set_new(o->request, "priority", json_integer(p));
        break;
    }
    case 't': {
        double t;
        if (vram_parse_seconds(arg, &t) != 0)
            rc = cli_usage_error(cmd, "--timeout: %s", vram_last_error());
        else
            json_object_set_new(o->request, "timeout_s", json_real(t));
        break;
    }
    case 'b':
        rc = parse_count(cmd, name, arg, &o->batch);
        break;
    case 'B':
        rc = parse_count(cmd, name, arg, &o->min_batch);
        break;
    case 'r':
        if (!(rc = parse_count(cmd, name, arg, &n))) o->retry_oom = (int)n;
        break;
    case 'o':
        if (!(rc = parse_count(cmd, name, arg, &n)) && (n == 0 || n > 255))
            rc = cli_usage_error(cmd, "--oom-exit-code: %u is not an exit status (1-255)", n);
        o->oom_exit_code = (int)n;
        break;
    case 'k':
        if (vram_parse_seconds(arg, &o->grace_s) != 0)
            rc = cli_usage_error(cmd, "--grace: %s", vram_last_error());
        break;
    case 'n':
        json_object_set_new(o->request, "name", json_stringn(arg, strnlen(arg, 63)));
        break;
    case 'q':
        o->quiet = true;
        break;
    case 'O':
        o->output = arg;
        break;
    case 'E':
        o->error = arg;
        break;
    case 'P':
        o->parsable = true;
        break;
    }
    if (c > 0 && c < 128) seen->given[c] = true;
    return rc;
}

/* Flags that contradict each other or do nothing here: errors naming both. */
static int check_combination(run_opts_t *o, const seen_t *seen, bool gpus_flag)
{
    const char *cmd = o->cmd;
    if (seen->devices && gpus_flag && seen->gpus != (uint32_t)seen->ndevices)
        return cli_usage_error(cmd, "--devices %s names %d GPU(s) but --gpus asks for %u",
                               seen->devices, seen->ndevices, seen->gpus);
    if (o->min_batch && !o->batch)
        return cli_usage_error(cmd, "--min-batch-size needs --batch-size");
    if (o->min_batch > o->batch)
        return cli_usage_error(cmd, "--min-batch-size %u is larger than --batch-size %u",
                               o->min_batch, o->batch);
    if (seen->given['a'] && !o->batch)
        return cli_usage_error(cmd, "--mem-at gives smaller batches: it needs --batch-size");
    if (seen->given['o'] && !o->retry_oom)
        return cli_usage_error(cmd, "--oom-exit-code does nothing without --retry-oom");
    if (o->retry_oom && !o->batch)
        return cli_usage_error(cmd, "--retry-oom halves the batch: it needs --batch-size");
    if (o->parsable && o->quiet)
        return cli_usage_error(cmd, "--parsable already prints only the id: drop --quiet");
    return 0;
}

static int parse_options(run_opts_t *o, int argc, char **argv, seen_t *seen)
{
    struct option longopts[N_OPTIONS + 1];
    char shorts[3 * N_OPTIONS + 4] = "+:";
    size_t at = 2;
    for (int i = 0; i < N_OPTIONS; i++) {
        longopts[i] = (struct option){table[i].name, table[i].has_arg, NULL, table[i].code};
        shorts[at++] = (char)table[i].code;
        if (table[i].has_arg) shorts[at++] = ':';
    }
    longopts[N_OPTIONS] = (struct option){NULL, 0, NULL, 0};
    shorts[at] = 0;
    bool submit = !strcmp(o->cmd, "submit");
    int c, idx;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, shorts, longopts, &idx)) != -1) {
        if (c == 'h') {
            usage(o->cmd, stdout);
            return -1;
        }
        if (c == ':')
            return cli_usage_error(o->cmd, "option \"%s\" needs a value", argv[optind - 1]);
        if (c == '?') return cli_unknown_option(o->cmd, argv[optind - 1], longopts);
        for (int i = 0; i < N_OPTIONS; i++)
            if (table[i].code == c && table[i].where == (submit ? RUN_ONLY : SUBMIT_ONLY))
                return cli_usage_error(o->cmd, "--%s applies to vram %s, not vram %s",
                                       table[i].name, submit ? "run" : "submit", o->cmd);
        const char *name = "";
        for (int i = 0; i < N_OPTIONS; i++)
            if (table[i].code == c) name = table[i].name;
        int rc = one_option(o, seen, c, name, optarg);
        if (rc) return rc;
    }
    if (optind < argc && !strcmp(argv[optind], "--")) optind++;
    if (optind >= argc)
        return cli_usage_error(o->cmd, "COMMAND is missing: vram %s --mem 10GiB -- python train.py",
                               o->cmd);
    o->command = argv + optind;
    return 0;
}

/* Memory from --mem or from the estimator's flags, never both. */
static int memory_source(run_opts_t *o, const cli_model_args_t *ma)
{
    if (ma->has_model) {
        if (o->mem || o->ntable)
            return cli_usage_error(o->cmd,
                                   "--%s and --model (or --hf-config/--profile) both "
                                   "give the memory: keep one",
                                   o->mem ? "mem" : "mem-at");
        if (!o->batch) o->batch = (uint32_t)ma->est.batch_size;
        /* down to --min-batch-size; a retry may go down to 1 without it */
        uint32_t lo = o->min_batch ? o->min_batch : o->retry_oom ? 1 : o->batch;
        int rc = estimate_memory(o, ma, lo >= 1 && lo <= o->batch ? lo : o->batch);
        if (rc) return rc;
        char size[32];
        run_say(o, "estimated %s per GPU at batch %u", vram_format_size(o->mem, size, sizeof size),
                o->batch);
    }
    if (!o->mem)
        return cli_usage_error(o->cmd, "how much memory? give --mem SIZE (per GPU, e.g. 20GiB) or "
                                       "a model (--model NAME, see vram estimate)");
    return 0;
}

/* --mem-at's table completed with --mem at the batch and checked as vramd
 * will; its smallest batch is the least the job accepts unless
 * --min-batch-size says otherwise. */
static int mem_at_table(run_opts_t *o)
{
    uint32_t largest = o->table[o->ntable - 1].batch;
    if (largest >= o->batch)
        return cli_usage_error(o->cmd, "--mem-at %u=...: batch %u is not below --batch-size %u",
                               largest, largest, o->batch);
    o->table[o->ntable++] = (vram_batch_bytes_t){o->batch, o->mem};
    if (!o->min_batch) o->min_batch = o->table[0].batch;
    vram_job_request_t r = {.mem_bytes = o->mem,
                            .batch_size = o->batch,
                            .min_batch_size = o->min_batch,
                            .nbatch_bytes = o->ntable};
    memcpy(r.batch_bytes, o->table, (size_t)o->ntable * sizeof *o->table);
    if (vram_job_batch_bytes_check(&r) != 0)
        return cli_usage_error(o->cmd, "--mem-at: %s", vram_last_error());
    return 0;
}

static void describe_command(run_opts_t *o)
{
    char cmdline[512] = "";
    size_t at = 0;
    for (char **a = o->command; *a && at < sizeof cmdline; a++)
        at +=
            (size_t)snprintf(cmdline + at, sizeof cmdline - at, a == o->command ? "%s" : " %s", *a);
    /* The default name is the program's (every user sees names, on TCP too;
     * the command line, which may hold a password, only its owner and root). */
    if (!json_object_get(o->request, "name")) {
        const char *slash = strrchr(o->command[0], '/');
        const char *prog = slash && slash[1] ? slash + 1 : o->command[0];
        json_object_set_new(o->request, "name", json_stringn(prog, strnlen(prog, 63)));
    }
    json_object_set_new(o->request, "command", json_string(cmdline));
    json_object_set_new(o->request, "mem_bytes", json_integer((json_int_t)o->mem));
}

int run_parse(const char *cmd, int argc, char **argv, run_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->grace_s = 10;
    o->oom_exit_code = -1;
    o->request = json_object();
    /* The estimator's flags (also --batch-size and --gpus) come out of the
     * options before "--"; COMMAND's own arguments are never touched. */
    int split = 1;
    bool gpus_flag = false;
    while (split < argc && strcmp(argv[split], "--")) {
        if (!strncmp(argv[split], "--gpus", 6)) gpus_flag = true;
        split++;
    }
    o->argv_copy = calloc((size_t)argc + 1, sizeof *o->argv_copy);
    if (!o->argv_copy || !o->request) return cli_runtime_error(cmd, "out of memory");
    memcpy(o->argv_copy, argv, (size_t)split * sizeof *argv);
    int nopts = split;
    cli_model_args_t ma;
    cli_model_args_init(&ma, cmd);
    int rc = cli_model_args_parse(&nopts, o->argv_copy, &ma);
    if (rc) return rc;
    for (int i = split; i < argc; i++)
        o->argv_copy[nopts + i - split] = argv[i];
    int n = nopts + argc - split;
    o->argv_copy[n] = NULL;
    seen_t seen = {0};
    if (ma.batch_given) o->batch = (uint32_t)ma.est.batch_size;
    if (gpus_flag) {
        seen.gpus = (uint32_t)ma.est.gpus;
        json_object_set_new(o->request, "gpus", json_integer(ma.est.gpus));
    }
    if ((rc = parse_options(o, n, o->argv_copy, &seen))) return rc;
    if ((rc = memory_source(o, &ma))) return rc;
    if ((rc = check_combination(o, &seen, gpus_flag || seen.given['g']))) return rc;
    if (seen.given['a'] && (rc = mem_at_table(o))) return rc;
    describe_command(o);
    return 0;
}

void run_opts_free(run_opts_t *o)
{
    json_decref(o->request);
    free(o->argv_copy);
    memset(o, 0, sizeof *o);
}

json_t *run_request(const run_opts_t *o, uint32_t cap)
{
    json_t *req = json_deep_copy(o->request);
    if (!req || !o->batch) return req;
    /* The daemon may lower the batch to the table's batches down to the
     * minimum; without a table the batch (or a retry's cap) is fixed. A
     * retry caps the micro-batch and keeps batch_size, so vramd records the
     * accumulation it implies. */
    uint32_t top = cap ? cap : o->batch;
    uint32_t min = o->min_batch ? o->min_batch : o->batch;
    if (!o->ntable || min > top) min = top;
    int first = 0;
    while (first < o->ntable && o->table[first].batch < min)
        first++;
    json_object_set_new(req, "batch_size", json_integer(o->batch));
    json_object_set_new(req, "min_batch_size", json_integer(min));
    if (first < o->ntable - 1)
        json_object_set_new(req, "batch_bytes",
                            vram_batch_bytes_to_json(o->table + first, o->ntable - first));
    if (cap) json_object_set_new(req, "max_batch_size", json_integer(cap));
    return req;
}

uint32_t run_batch_at_most(const run_opts_t *o, uint32_t b)
{
    if (!o->ntable) return b;
    for (int i = o->ntable - 1; i >= 0; i--)
        if (o->table[i].batch <= b) return o->table[i].batch;
    return 0;
}
