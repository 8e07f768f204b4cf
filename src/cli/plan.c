/* vram plan: which batch size fits a GPU, and what to change when none does. */
#include "cli.h"
#include "vram_int.h"
#include "cli/daemon_client.h"
#include "model_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram plan (--model NAME | --hf-config FILE | --profile FILE)\n"
                 "                 (--gpu N | --gpu-mem SIZE | --gpu-name NAME)\n"
                 "                 [--target F] [--no-power-of-two] [workload options] [--json]\n\n"
                 "Recommends batch sizes for a GPU: maximum (largest estimate within --target of\n"
                 "the free memory, default 0.70), recommended (60%% of it), safe (40%%), rounded\n"
                 "down to powers of two. With --batch-size B, judges B and, when it does not fit,\n"
                 "gives the micro-batch and gradient-accumulation steps that keep B.\n\n"
                 "Target GPU:\n"
                 "  --gpu N            device N (real or VRAM_SIM), using its free memory\n"
                 "  --gpu-mem SIZE     a GPU with SIZE of memory, all free (e.g. 24GiB)\n"
                 "  --gpu-name NAME    a GPU from the table (e.g. A100-80GB; --gpu-name list)\n"
                 "  --target F         fraction of free memory to plan for (default 0.70)\n"
                 "  --no-power-of-two  do not round recommendations to powers of two\n\n");
    cli_model_args_help(out);
}

static int list_gpus(void)
{
    size_t n;
    const vram_gpu_model_t *g = vram_gpu_models(&n);
    for (size_t i = 0; i < n; i++)
        printf("%-16s %8.0f GiB\n", g[i].name, vram_gib(g[i].total_bytes));
    return CLI_OK;
}

/* Fills total/used/free from --gpu, --gpu-mem or --gpu-name. */
/* What vramd has promised to jobs on GPU `idx` is not free for a new one,
 * even before those jobs allocate it: when vramd answers, plan with the
 * smaller of the driver's free memory and vramd's free-for-admission, and
 * say so in the label. Silent when vramd is not running. */
static void subtract_vramd(long idx, vram_plan_config_t *pc, char *label, size_t len)
{
    long status = 0;
    json_t *reply = NULL, *d;
    size_t i;
    if (cli_daemon_call("GET", "/v1/status", NULL, &status, &reply) || status != 200) goto out;
    json_array_foreach(json_object_get(reply, "devices"), i, d)
    {
        if (json_integer_value(json_object_get(d, "index")) != idx) continue;
        json_t *adm = json_object_get(d, "free_for_admission_bytes");
        json_t *res = json_object_get(d, "reserved_bytes");
        if (!json_is_integer(adm) || json_integer_value(adm) < 0) break;
        uint64_t admit = (uint64_t)json_integer_value(adm);
        if (admit < pc->free_bytes) pc->free_bytes = admit;
        size_t used = strlen(label);
        snprintf(label + used, len - used, "; vramd reserves %.2f GiB, %.2f GiB free for admission",
                 json_is_integer(res) ? vram_gib((uint64_t)json_integer_value(res)) : 0.0,
                 vram_gib(admit));
        break;
    }
out:
    json_decref(reply);
}

static int target_device(const char *gpu, const char *mem, const char *name, bool json,
                         vram_plan_config_t *pc, char *label, size_t len)
{
    int given = (gpu != NULL) + (mem != NULL) + (name != NULL);
    if (given != 1)
        return cli_usage_error("plan", "give exactly one of --gpu N, --gpu-mem SIZE, --gpu-name "
                                       "NAME");
    if (mem) {
        if (cli_parse_size("plan", "--gpu-mem", mem, &pc->total_bytes)) return CLI_USAGE;
        if (!pc->total_bytes) return cli_usage_error("plan", "--gpu-mem must be positive");
        pc->free_bytes = pc->total_bytes;
        snprintf(label, len, "%s GPU", mem);
        return 0;
    }
    if (name) {
        const char *note = NULL;
        const vram_gpu_model_t *g = vram_gpu_model_resolve(name, &note);
        if (!g) {
            vram_gpu_model_unknown(name);
            return cli_usage_error("plan", "%s", vram_last_error());
        }
        pc->total_bytes = pc->free_bytes = g->total_bytes;
        snprintf(label, len, "%s%s%s", g->name, note ? "; " : "", note ? note : "");
        return 0;
    }
    char *end;
    errno = 0;
    long idx = strtol(gpu, &end, 10);
    if (errno || end == gpu || *end || idx < 0)
        return cli_usage_error("plan", "--gpu \"%s\" is not a device index", gpu);
    vram_ctx_t *ctx;
    int rc = cli_open_ctx("plan", json, &ctx);
    if (rc) return rc;
    vram_device_info_t info;
    rc = vram_device_info(ctx, (int)idx, &info);
    if (rc) {
        int count = vram_ctx_device_count(ctx);
        vram_ctx_close(ctx);
        if (rc == VRAM_ENODEV || rc == VRAM_EINVAL)
            return cli_usage_error("plan", "no GPU %ld (%d device%s): %s", idx, count,
                                   count == 1 ? "" : "s", vram_last_error());
        return cli_runtime_error("plan", "GPU %ld: %s", idx, vram_last_error());
    }
    vram_ctx_close(ctx);
    if (info.total_bytes == VRAM_UNKNOWN_U64 || info.free_bytes == VRAM_UNKNOWN_U64)
        return cli_runtime_error("plan", "GPU %ld does not report its memory", idx);
    pc->total_bytes = info.total_bytes;
    pc->free_bytes = info.free_bytes;
    pc->used_bytes =
        info.used_bytes != VRAM_UNKNOWN_U64 ? info.used_bytes : info.total_bytes - info.free_bytes;
    snprintf(label, len, "GPU %ld: %s (%s)", idx, info.name, info.backend);
    subtract_vramd(idx, pc, label, len);
    return 0;
}

static void line(const char *label, uint64_t bytes)
{
    printf("  %-26s %10.2f GiB\n", label, vram_gib(bytes));
}

static void plan_text(const vram_model_t *m, const cli_model_args_t *a,
                      const vram_plan_config_t *pc, const vram_plan_t *p, const char *label)
{
    /* the full estimate at the shown batch: the same figure as the verdict */
    int64_t shown = p->shown_batch;
    const vram_estimate_t *e = &p->shown;
    const vram_estimate_live_t *l = &e->live;
    uint64_t total = e->total;
    printf("Memory analysis: %s, %s, %s on %s\n\n", m->name,
           a->est.mode == VRAM_MODE_TRAIN ? "training" : "inference",
           vram_precision_name(a->est.precision), label);
    printf("GPU memory\n");
    line("Total", pc->total_bytes);
    line("Used", pc->used_bytes);
    line("Free", pc->free_bytes);
    printf("  %-26s %10.2f GiB  (%.0f%% of free)\n", "Budget", vram_gib(p->budget_bytes),
           100 * pc->target);
    printf("\nEstimated usage at batch %lld (at the peak: %s)\n", (long long)shown,
           a->est.mode != VRAM_MODE_TRAIN ? "forward"
           : e->peak_in_optimizer_step    ? "optimizer step"
                                          : "backward");
    line("Weights, gradients, states",
         l->parameters + l->buffers + l->gradients + l->optimizer_states + l->autocast_cache);
    line("Activations, KV, temps",
         l->activations + l->kv_cache + l->backward_temps + l->optimizer_temps);
    line("CUDA context, workspaces", l->cuda_context + l->workspaces + l->allocator_rounding);
    line("Total", total);
    if (pc->free_bytes >= total)
        line("Remaining", pc->free_bytes - total);
    else
        printf("  %-26s %10.2f GiB short\n", "Remaining", vram_gib(total - pc->free_bytes));
    printf("\nBatch size recommendations%s\n", pc->power_of_two ? " (powers of two)" : "");
    if (p->max_batch_raw == 0) {
        printf("  Not even batch 1 fits in %.2f GiB.\n", vram_gib(p->budget_bytes));
    } else {
        /* the budget named in the row: the device itself holds more */
        char maximum[48];
        snprintf(maximum, sizeof maximum, "Maximum within the %g%% budget", 100 * pc->target);
        printf("  %-32s %8lld   (largest batch within it: %lld)\n", maximum, (long long)p->maximum,
               (long long)p->max_batch_raw);
        printf("  %-32s %8lld\n", "Recommended", (long long)p->recommended);
        printf("  %-32s %8lld\n", "Safe", (long long)p->safe);
    }
    if (pc->batch_size > 0) {
        printf("\nBatch %lld: %s (%.2f GiB)\n", (long long)pc->batch_size, vram_fit_name(p->fit),
               vram_gib(p->current.total));
        if (p->fit != VRAM_FIT_YES && p->micro_batch_size > 0)
            printf("  Use micro-batch %lld with %lld gradient-accumulation steps (effective "
                   "batch %lld).\n",
                   (long long)p->micro_batch_size, (long long)p->accumulation_steps,
                   (long long)pc->batch_size);
    }
    if (p->nsuggestions) {
        printf("\nWhat would help\n");
        for (int i = 0; i < p->nsuggestions; i++)
            printf("  %-20s saves %8.2f GiB%s  %s\n", p->suggestions[i].name,
                   vram_gib(p->suggestions[i].saving_bytes),
                   p->suggestions[i].fits ? " (fits)" : "        ", p->suggestions[i].description);
    }
}

int vram_cli_plan(int argc, char **argv)
{
    cli_model_args_t a;
    cli_model_args_init(&a, "plan");
    int rc = cli_model_args_parse(&argc, argv, &a);
    if (rc) return rc;
    const char *gpu = NULL, *mem = NULL, *name = NULL;
    bool json = false;
    vram_plan_config_t pc;
    vram_plan_config_init(&pc);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char **dst = !strcmp(arg, "--gpu")        ? &gpu
                           : !strcmp(arg, "--gpu-mem")  ? &mem
                           : !strcmp(arg, "--gpu-name") ? &name
                                                        : NULL;
        if (dst || !strcmp(arg, "--target")) {
            if (i + 1 >= argc) return cli_usage_error("plan", "%s needs a value", arg);
            if (dst) {
                *dst = argv[++i];
                continue;
            }
            char *end;
            errno = 0;
            pc.target = strtod(argv[++i], &end);
            if (errno || *end || !(pc.target > 0 && pc.target <= 1))
                return cli_usage_error("plan", "--target \"%s\" is not a fraction in (0, 1]",
                                       argv[i]);
        } else if (!strcmp(arg, "--no-power-of-two")) {
            pc.power_of_two = false;
        } else if (!strcmp(arg, "--json")) {
            json = true;
        } else if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return CLI_OK;
        } else {
            return cli_usage_error("plan", "unknown argument \"%s\"", arg);
        }
    }
    if (name && !strcmp(name, "list")) return list_gpus();
    vram_model_t model;
    if ((rc = cli_model_args_build(&a, &model))) return rc;
    /* validate the workload before touching a device */
    vram_estimate_t probe;
    if (vram_estimate(&model, &a.est, &probe))
        return cli_usage_error("plan", "%s", vram_last_error());
    char label[320];
    if ((rc = target_device(gpu, mem, name, json, &pc, label, sizeof label))) return rc;
    pc.batch_size = a.batch_given ? a.est.batch_size : 0;
    vram_plan_t p;
    if (vram_plan(&model, &a.est, &pc, &p)) return cli_usage_error("plan", "%s", vram_last_error());
    if (json)
        cli_print_json(vram_plan_to_json(&model, &a.est, &pc, &p, label));
    else
        plan_text(&model, &a, &pc, &p, label);
    return CLI_OK;
}
