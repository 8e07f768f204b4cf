/* vram replay: replays an allocation trace through the pool (and baselines beside it)
 * on a private simulated device and reports latency and fragmentation. */
#include "cli.h"
#include "pool/tools/replay.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram replay TRACE [--strategy S] [--expandable auto|true|false]\n"
                 "                   [--baseline B[,B...]] [--repeat N] [--device-mem SIZE]\n"
                 "                   [--device-cost COSTS] [--limit SIZE] [--json]\n\n"
                 "Replays an allocation trace (\"a <id> <size>\" / \"f <id>\" lines, see\n"
                 "docs/pool.md) through the caching pool on a private simulated GPU and prints\n"
                 "the cost of each request and how much memory the pool reserved.\n\n"
                 "  --strategy S      greedy, balanced (default), consolidated or\n"
                 "                    fragmentation-aware\n"
                 "  --expandable E    the pool's expandable segments: auto (default: on, the\n"
                 "                    simulated GPU has virtual memory), true or false\n"
                 "  --baseline B[,B]  also replay through these allocators, each on its own\n"
                 "                    simulated GPU, and show them beside the pool: device\n"
                 "                    (every request straight to the device, no caching),\n"
                 "                    malloc (the C library), torch (PyTorch's default caching\n"
                 "                    policy), torch-expandable (the same with expandable\n"
                 "                    segments); none (default): the pool alone\n"
                 "  --repeat N        replay N times through the same pool (default 1)\n"
                 "  --device-mem SIZE size of the simulated GPU (default: fits the trace)\n"
                 "  --device-cost alloc=US,free=US,map=US,unmap=US,move=US\n"
                 "                    what a real GPU's calls cost, added to the time per op\n"
                 "                    (default alloc=50,free=14,map=29,unmap=11,move=33;\n"
                 "                    docs/pool.md)\n"
                 "  --limit SIZE      the pool's memory limit (VRAM_POOL_LIMIT; default none;\n"
                 "                    the baselines have none)\n"
                 "  --json            machine-readable output\n"
                 "  -h, --help        this help\n\n"
                 "Exit status: 0 ok, 1 runtime error or malformed trace, 2 usage error.\n");
}

static json_t *latency_json(json_t *o, const char *prefix, const vram_latency_t *l)
{
    char key[64];
    snprintf(key, sizeof key, "%s_p50", prefix);
    json_object_set_new(o, key, json_real(l->p50));
    snprintf(key, sizeof key, "%s_p99", prefix);
    json_object_set_new(o, key, json_real(l->p99));
    snprintf(key, sizeof key, "%s_mean", prefix);
    json_object_set_new(o, key, json_real(l->mean));
    return o;
}

static json_t *run_json(const char *path, const vram_replay_config_t *cfg, uint64_t device_mem,
                        const vram_replay_result_t *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "trace", json_string(path));
    json_object_set_new(o, "baseline", json_string(vram_replay_mode_name(cfg->mode)));
    json_object_set_new(o, "strategy",
                        cfg->mode == VRAM_REPLAY_POOL
                            ? json_string(vram_pool_strategy_name(cfg->strategy))
                            : json_null());
    json_object_set_new(o, "expandable",
                        cfg->mode == VRAM_REPLAY_POOL
                            ? json_boolean(cfg->expandable != VRAM_POOL_EXPANDABLE_OFF)
                            : json_null());
    json_object_set_new(o, "repeat", json_integer(cfg->repeat));
    json_object_set_new(o, "limit_bytes",
                        cfg->mode == VRAM_REPLAY_POOL && cfg->limit_bytes
                            ? json_integer((json_int_t)cfg->limit_bytes)
                            : json_null());
    json_object_set_new(o, "device_mem_bytes", json_integer((json_int_t)device_mem));
    json_object_set_new(o, "ops", json_integer((json_int_t)r->ops));
    latency_json(o, "ns_per_op", &r->all);
    latency_json(o, "alloc_ns", &r->alloc);
    latency_json(o, "free_ns", &r->free);
    latency_json(o, "pair_ns", &r->pair);
    json_object_set_new(o, "peak_requested_bytes",
                        json_integer((json_int_t)r->peak_requested_bytes));
    json_object_set_new(o, "peak_reserved_bytes", json_integer((json_int_t)r->peak_reserved_bytes));
    json_object_set_new(o, "fragmentation_ratio", json_real(r->fragmentation_ratio));
    json_object_set_new(o, "peak_touched_bytes", json_integer((json_int_t)r->peak_touched_bytes));
    json_object_set_new(o, "pass_touched_bytes", json_integer((json_int_t)r->pass_touched_bytes));
    json_object_set_new(o, "device_allocs", json_integer((json_int_t)r->device_allocs));
    json_object_set_new(o, "device_frees", json_integer((json_int_t)r->device_frees));
    json_object_set_new(o, "device_maps", json_integer((json_int_t)r->device_maps));
    json_object_set_new(o, "device_unmaps", json_integer((json_int_t)r->device_unmaps));
    json_object_set_new(o, "device_moves", json_integer((json_int_t)r->device_moves));
    json_object_set_new(o, "first_pass_device_calls",
                        json_integer((json_int_t)r->first_pass_device_calls));
    json_object_set_new(o, "second_pass_device_calls",
                        r->second_pass_device_calls == UINT64_MAX
                            ? json_null()
                            : json_integer((json_int_t)r->second_pass_device_calls));
    json_object_set_new(o, "later_pass_device_calls_max",
                        r->later_pass_device_calls_max == UINT64_MAX
                            ? json_null()
                            : json_integer((json_int_t)r->later_pass_device_calls_max));
    json_object_set_new(o, "device_cost_us",
                        json_pack("{s:f,s:f,s:f,s:f,s:f}", "alloc", cfg->cost.alloc_us, "free",
                                  cfg->cost.free_us, "map", cfg->cost.map_us, "unmap",
                                  cfg->cost.unmap_us, "move", cfg->cost.move_us));
    json_object_set_new(o, "device_cost_ns", json_real(r->device_cost_ns));
    json_object_set_new(o, "ns_per_op_with_device_cost", json_real(r->ns_per_op_with_cost));
    json_object_set_new(o, "ooms", json_integer((json_int_t)r->ooms));
    json_object_set_new(o, "timer_overhead_ns", json_real(r->timer_overhead_ns));
    json_object_set_new(o, "batch_ns_per_op_p50", json_real(r->batch_p50));
    json_object_set_new(o, "batch_ns_per_op_mean", json_real(r->batch_mean));
    json_object_set_new(o, "batch_ns_per_op_with_device_cost", json_real(r->batch_with_cost));
    return o;
}

/* One run: its object, as always. The pool with baselines: {"trace", "runs":
 * [the pool's, each baseline's]}. */
static void print_json(const char *path, const vram_replay_config_t *cfgs, int n,
                       uint64_t device_mem, const vram_replay_result_t *results)
{
    if (n == 1) {
        cli_print_json(run_json(path, &cfgs[0], device_mem, &results[0]));
        return;
    }
    json_t *runs = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(runs, run_json(path, &cfgs[i], device_mem, &results[i]));
    cli_print_json(json_pack("{s:s,s:o}", "trace", path, "runs", runs));
}

static const char *allocator_name(const vram_replay_config_t *cfg, char *buf, size_t size)
{
    if (cfg->mode != VRAM_REPLAY_POOL) return vram_replay_mode_name(cfg->mode);
    snprintf(buf, size, "pool %s", vram_pool_strategy_name(cfg->strategy));
    return buf;
}

/* The pool and its baselines in columns, after the pool's own table. */
static void print_side_by_side(const vram_replay_config_t *cfgs, int n,
                               const vram_replay_result_t *rs)
{
    char buf[64];
    printf("\n%-30s", "side by side");
    for (int i = 0; i < n; i++)
        printf(" %16s", allocator_name(&cfgs[i], buf, sizeof buf));
    printf("\n");
#define ROW(label, fmt, expr)                                                                      \
    do {                                                                                           \
        printf("%-30s", label);                                                                    \
        for (int i = 0; i < n; i++) {                                                              \
            const vram_replay_result_t *r = &rs[i];                                                \
            printf(" %16" fmt, expr);                                                              \
        }                                                                                          \
        printf("\n");                                                                              \
    } while (0)
    ROW("ns per op p50", ".0f", r->all.p50);
    ROW("ns per op p99", ".0f", r->all.p99);
    ROW("ns per op, batch p50", ".1f", r->batch_p50);
    ROW("ns per op with device costs", ".1f", r->ns_per_op_with_cost);
    ROW("batch, device costs", ".1f", r->batch_with_cost);
    ROW("peak reserved", "s", vram_format_size(r->peak_reserved_bytes, buf, sizeof buf));
    ROW("fragmentation ratio", ".3f", r->fragmentation_ratio);
    ROW("device calls, first pass", "llu", (unsigned long long)r->first_pass_device_calls);
    ROW("device calls, second pass", "s",
        r->second_pass_device_calls == UINT64_MAX
            ? "-"
            : (snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->second_pass_device_calls),
               buf));
    ROW("OOMs", "llu", (unsigned long long)r->ooms);
#undef ROW
}

static void print_table(const char *path, const vram_replay_config_t *cfg, uint64_t device_mem,
                        const vram_replay_result_t *r)
{
    char a[32], b[32], c[32];
    printf("trace      %s\n", path);
    if (cfg->mode == VRAM_REPLAY_POOL)
        printf("allocator  pool, strategy %s, %s\n", vram_pool_strategy_name(cfg->strategy),
               cfg->expandable == VRAM_POOL_EXPANDABLE_OFF ? "segments" : "expandable segments");
    else
        printf("allocator  baseline %s\n", vram_replay_mode_name(cfg->mode));
    printf("device     simulated, %s; %d pass%s\n", vram_format_size(device_mem, a, sizeof a),
           cfg->repeat, cfg->repeat == 1 ? "" : "es");
    printf("ops        %llu\n\n", (unsigned long long)r->ops);
    printf("%-10s %10s %10s %10s %10s\n", "ns", "p50", "p99", "mean", "count");
    const struct {
        const char *name;
        const vram_latency_t *l;
    } rows[] = {{"per op", &r->all}, {"alloc", &r->alloc}, {"free", &r->free}, {"pair", &r->pair}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("%-10s %10.0f %10.0f %10.1f %10llu\n", rows[i].name, rows[i].l->p50, rows[i].l->p99,
               rows[i].l->mean, (unsigned long long)rows[i].l->count);
    printf("(every figure includes the clock's own cost, about %.0f ns)\n", r->timer_overhead_ns);
    printf("batch      %10.1f %10s %10.1f   (runs of %d events timed whole: no clock cost)\n\n",
           r->batch_p50, "-", r->batch_mean, VRAM_REPLAY_BATCH_EVENTS);
    printf("peak requested      %s\n", vram_format_size(r->peak_requested_bytes, b, sizeof b));
    printf("peak reserved       %s\n", vram_format_size(r->peak_reserved_bytes, c, sizeof c));
    printf("fragmentation ratio %.3f (peak reserved / peak requested)\n", r->fragmentation_ratio);
    if (r->peak_requested_bytes)
        printf("granule floors      %.3f at one moment, %.3f over a pass (2 MiB granules live "
               "requests overlap / peak requested)\n",
               r->floor_ratio, r->steady_floor_ratio);
    printf("device allocs/frees %llu / %llu\n", (unsigned long long)r->device_allocs,
           (unsigned long long)r->device_frees);
    if (r->device_maps || r->device_unmaps)
        printf("device maps/unmaps  %llu / %llu\n", (unsigned long long)r->device_maps,
               (unsigned long long)r->device_unmaps);
    if (r->device_moves) printf("device moves        %llu\n", (unsigned long long)r->device_moves);
    printf("device calls        %llu in the first pass",
           (unsigned long long)r->first_pass_device_calls);
    if (r->second_pass_device_calls != UINT64_MAX)
        printf(", %llu in the second", (unsigned long long)r->second_pass_device_calls);
    if (cfg->repeat > 2)
        printf(", at most %llu in a later one", (unsigned long long)r->later_pass_device_calls_max);
    printf("\nwith device costs   %.1f ns per op (alloc %g us, free %g us, map %g us, unmap %g "
           "us, move %g us per call)\n",
           r->ns_per_op_with_cost, cfg->cost.alloc_us, cfg->cost.free_us, cfg->cost.map_us,
           cfg->cost.unmap_us, cfg->cost.move_us);
    printf("batch, device costs %.1f ns per op (the batch p50 plus the calls' cost per op)\n",
           r->batch_with_cost);
    printf("OOMs                %llu\n", (unsigned long long)r->ooms);
}

/* "device,torch": each a baseline once; "none" alone: no baseline. */
static int parse_baselines(const char *text, vram_replay_mode_t *out, int *n)
{
    *n = 0;
    if (!strcmp(text, "none")) return 0;
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        char name[32];
        vram_replay_mode_t mode;
        if (len == 0 || len >= sizeof name)
            return cli_usage_error("replay", "--baseline \"%s\": an empty or overlong name", text);
        memcpy(name, p, len);
        name[len] = 0;
        if (vram_replay_mode_parse(name, &mode) || mode == VRAM_REPLAY_POOL)
            return cli_usage_error("replay",
                                   "--baseline: \"%s\" is not a baseline: use device, malloc, "
                                   "torch or torch-expandable (comma-separated)",
                                   name);
        for (int i = 0; i < *n; i++)
            if (out[i] == mode)
                return cli_usage_error("replay", "--baseline: \"%s\" named twice", name);
        out[(*n)++] = mode;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

int vram_cli_replay(int argc, char **argv)
{
    static const struct option longopts[] = {{"strategy", required_argument, NULL, 's'},
                                             {"baseline", required_argument, NULL, 'b'},
                                             {"expandable", required_argument, NULL, 'e'},
                                             {"repeat", required_argument, NULL, 'r'},
                                             {"device-mem", required_argument, NULL, 'm'},
                                             {"device-cost", required_argument, NULL, 'c'},
                                             {"limit", required_argument, NULL, 'l'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    vram_replay_config_t cfg = {.mode = VRAM_REPLAY_POOL,
                                .strategy = VRAM_POOL_BALANCED,
                                .repeat = 1,
                                .cost = VRAM_DEVICE_COST_DEFAULT};
    uint64_t device_mem = 0;
    vram_replay_mode_t baselines[VRAM_REPLAY_MODE_COUNT_];
    int nbaselines = 0;
    bool json = false;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            if (vram_pool_strategy_parse(optarg, &cfg.strategy))
                return cli_usage_error("replay", "--strategy: %s", vram_last_error());
            break;
        case 'b':
            if (parse_baselines(optarg, baselines, &nbaselines)) return CLI_USAGE;
            break;
        case 'e':
            if (vram_pool_expandable_parse(optarg, &cfg.expandable))
                return cli_usage_error("replay", "--expandable: %s", vram_last_error());
            break;
        case 'c':
            if (vram_device_cost_parse(optarg, &cfg.cost))
                return cli_usage_error("replay", "--device-cost: %s", vram_last_error());
            break;
        case 'r': {
            long long n;
            if (cli_parse_int("replay", "--repeat", optarg, 1, 1000000, &n)) return CLI_USAGE;
            cfg.repeat = (int)n;
            break;
        }
        case 'm':
            if (cli_parse_size("replay", "--device-mem", optarg, &device_mem)) return CLI_USAGE;
            if (device_mem == 0) return cli_usage_error("replay", "--device-mem must be positive");
            break;
        case 'l':
            if (cli_parse_size("replay", "--limit", optarg, &cfg.limit_bytes)) return CLI_USAGE;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return CLI_OK;
        default:
            return cli_usage_error("replay", "unknown option");
        }
    }
    if (optind != argc - 1)
        return cli_usage_error("replay", "expected one TRACE file, got %d", argc - optind);
    const char *path = argv[optind];

    vram_trace_t trace;
    if (vram_trace_load(path, &trace)) return cli_runtime_error("replay", "%s", vram_last_error());
    if (!device_mem) device_mem = vram_replay_device_size(&trace);

    /* the pool, then each baseline, each on a fresh simulated GPU */
    vram_replay_config_t cfgs[1 + VRAM_REPLAY_MODE_COUNT_];
    vram_replay_result_t results[1 + VRAM_REPLAY_MODE_COUNT_];
    int n = 1 + nbaselines;
    for (int i = 0; i < n; i++) {
        cfgs[i] = cfg;
        if (i) cfgs[i].mode = baselines[i - 1];
        vram_replay_device_t dev;
        int rc = vram_replay_device_open(device_mem, &dev);
        if (rc) {
            vram_trace_release(&trace);
            return cli_runtime_error("replay", "cannot set up the simulated device: %s",
                                     vram_last_error());
        }
        cfgs[i].ctx = dev.ctx;
        cfgs[i].device = 0;
        rc = vram_replay_run(&trace, &cfgs[i], &results[i]);
        vram_replay_device_close(&dev);
        if (rc) {
            vram_trace_release(&trace);
            return cli_runtime_error("replay", "%s", vram_last_error());
        }
    }
    vram_trace_release(&trace);
    if (json) {
        print_json(path, cfgs, n, device_mem, results);
    } else {
        print_table(path, &cfgs[0], device_mem, &results[0]);
        if (n > 1) print_side_by_side(cfgs, n, results);
    }
    return CLI_OK;
}
