/* vram estimate: the memory a training or inference job will need. */
#include "cli.h"
#include "model_args.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: vram estimate (--model NAME | --hf-config FILE | --profile FILE)\n"
                 "                     [workload options] [--json]\n"
                 "       vram estimate --list [--json]\n\n"
                 "Estimates one GPU's memory from the model's architecture: parameters,\n"
                 "buffers, gradients, optimizer states, activations, KV cache, overhead.\n"
                 "Exit status: 0 ok, 1 unreadable or malformed file, 2 bad flags or settings.\n\n");
    cli_model_args_help(out);
}

static const char *mode_name(vram_mode_t mode)
{
    return mode == VRAM_MODE_TRAIN ? "train" : mode == VRAM_MODE_INFER ? "infer" : "load";
}

/* The real-GPU lines and the three figures people measure (bytes). */
static json_t *gpu_bytes_json(const vram_estimate_t *e)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "autocast_cache",
                     (json_int_t)e->autocast_cache, "backward_temps",
                     (json_int_t)e->backward_temps, "optimizer_temps",
                     (json_int_t)e->optimizer_temps, "workspaces", (json_int_t)e->workspaces,
                     "allocator_rounding", (json_int_t)e->allocator_rounding, "cuda_context",
                     (json_int_t)e->cuda_context, "allocated_peak",
                     (json_int_t)e->allocated_peak, "reserved", (json_int_t)e->reserved,
                     "nvidia_smi", (json_int_t)e->nvidia_smi);
}

/* Where the peak is and what produced it. */
static void add_setup_json(json_t *o, const cli_model_args_t *a, const vram_estimate_t *e)
{
    const vram_estimate_config_t *c = &a->est;
    const char *phase = c->mode == VRAM_MODE_LOAD    ? "load"
                        : c->mode == VRAM_MODE_INFER ? "forward"
                        : e->peak_in_optimizer_step  ? "optimizer step"
                                                     : "backward";
    json_object_set_new(o, "peak_phase", json_string(phase));
    json_object_set_new(o, "attention", json_string(e->fused_attention ? "fused" : "eager"));
    json_object_set_new(o, "trainable_count", json_integer((json_int_t)e->trainable_count));
    if (c->lora_rank > 0) {
        json_object_set_new(o, "lora",
                            json_pack("{s:I, s:f, s:s}", "rank", (json_int_t)c->lora_rank,
                                      "alpha", c->lora_alpha, "quantize_base",
                                      c->quantize_base == VRAM_QUANT_NF4    ? "nf4"
                                      : c->quantize_base == VRAM_QUANT_INT8 ? "int8"
                                                                            : "none"));
    }
    if (a->gpu_note) json_object_set_new(o, "gpu_note", json_string(a->gpu_note));
}

static json_t *estimate_json(const vram_model_t *m, const cli_model_args_t *a,
                             const vram_estimate_t *e)
{
    const vram_estimate_config_t *c = &a->est;
    json_t *bytes =
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "parameters",
                  (json_int_t)e->parameters, "buffers", (json_int_t)e->buffers, "gradients",
                  (json_int_t)e->gradients, "optimizer_states", (json_int_t)e->optimizer_states,
                  "activations", (json_int_t)e->activations, "kv_cache", (json_int_t)e->kv_cache,
                  "overhead", (json_int_t)e->overhead, "total", (json_int_t)e->total);
    json_t *gpu = gpu_bytes_json(e);
    json_object_update(bytes, gpu);
    json_decref(gpu);
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:i, s:i, s:I, "
        "s:o, s:f}",
        "model", m->name, "family", vram_family_name(m->family), "parameters_count",
        (json_int_t)e->parameters_count, "mode", mode_name(c->mode),
        "batch_size", (json_int_t)c->batch_size, "effective_batch_size",
        (json_int_t)(c->batch_size * a->accumulation_steps), "seq_len", (json_int_t)e->seq_len,
        "image_size", (json_int_t)e->image_size, "precision", vram_precision_name(c->precision),
        "optimizer", vram_optimizer_name(c->optimizer), "checkpointing",
        vram_checkpointing_name(c->checkpointing), "zero_stage", c->zero_stage, "gpus",
        c->gpus > 0 ? c->gpus : 1, "max_new_tokens", (json_int_t)c->max_new_tokens, "bytes", bytes,
        "total_gib", vram_gib(e->total));
    if (o) add_setup_json(o, a, e);
    return o;
}

/* "124,439,808" */
static const char *grouped(uint64_t v, char *buf, size_t len)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < len; i++) {
        if (i && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

static void print_row(const char *label, uint64_t bytes, uint64_t total)
{
    printf("  %-18s %10.2f GiB  %5.1f %%\n", label, vram_gib(bytes),
           total ? 100.0 * (double)bytes / (double)total : 0.0);
}

static void cli_print_estimate(const vram_model_t *m, const cli_model_args_t *a,
                               const vram_estimate_t *e)
{
    const vram_estimate_config_t *c = &a->est;
    char buf[32];
    printf("Model        %s (%s, %s parameters)\n", m->name, vram_family_name(m->family),
           grouped(e->parameters_count, buf, sizeof buf));
    printf("Workload     %s, batch %lld",
           c->mode == VRAM_MODE_TRAIN   ? "training"
           : c->mode == VRAM_MODE_INFER ? "inference"
                                        : "weights loaded",
           (long long)c->batch_size);
    if (a->accumulation_steps > 1)
        printf(" x %lld accumulation steps (effective %lld)", (long long)a->accumulation_steps,
               (long long)(c->batch_size * a->accumulation_steps));
    if (e->seq_len) printf(", sequence %lld", (long long)e->seq_len);
    if (e->image_size) printf(", image %lld px", (long long)e->image_size);
    if (c->mode == VRAM_MODE_INFER && c->max_new_tokens)
        printf(", %lld new tokens", (long long)c->max_new_tokens);
    printf("\n             %s", vram_precision_name(c->precision));
    if (c->mode == VRAM_MODE_TRAIN) {
        printf(", %s, checkpointing %s", vram_optimizer_name(c->optimizer),
               vram_checkpointing_name(c->checkpointing));
        if (c->zero_stage) printf(", ZeRO-%d over %d GPUs", c->zero_stage, c->gpus);
        if (c->lora_rank)
            printf("\n             LoRA rank %lld%s, %s trainable parameters",
                   (long long)c->lora_rank,
                   c->quantize_base == VRAM_QUANT_NF4    ? " on an NF4 base (QLoRA)"
                   : c->quantize_base == VRAM_QUANT_INT8 ? " on an int8 base"
                                                         : "",
                   grouped(e->trainable_count, buf, sizeof buf));
    }
    printf(", attention %s", e->fused_attention ? "fused" : "eager");
    if (a->gpu_note) printf("\nGPU          %s", a->gpu_note);
    printf("\n\nMemory per GPU\n");
    print_row("Parameters", e->parameters, e->total);
    print_row("Buffers", e->buffers, e->total);
    print_row("Gradients", e->gradients, e->total);
    print_row("Optimizer states", e->optimizer_states, e->total);
    print_row("Activations", e->activations, e->total);
    print_row("KV cache", e->kv_cache, e->total);
    print_row("Autocast cache", e->autocast_cache, e->total);
    print_row("Backward temps", e->backward_temps, e->total);
    print_row("Optimizer temps", e->optimizer_temps, e->total);
    print_row("cuBLAS workspaces", e->workspaces, e->total);
    print_row("Allocator rounding", e->allocator_rounding, e->total);
    print_row("CUDA context", e->cuda_context, e->total);
    printf("  %-18s %10s\n", "", "----------");
    print_row("Allocated at peak", e->allocated_peak, e->total);
    print_row("Reserved", e->reserved, e->total);
    print_row("nvidia-smi (total)", e->nvidia_smi, e->total);
    if (c->mode == VRAM_MODE_TRAIN)
        printf("\nThe peak is in the %s; not every part above is live then.\n",
               e->peak_in_optimizer_step ? "optimizer step" : "backward pass");
}

static int list_catalog(bool json)
{
    size_t n;
    const char *const *names = vram_model_names(&n);
    json_t *arr = json ? json_array() : NULL;
    if (!json) printf("%-16s %-13s %16s  %s\n", "MODEL", "FAMILY", "PARAMETERS", "DESCRIPTION");
    for (size_t i = 0; i < n; i++) {
        vram_model_t m;
        uint64_t params = 0;
        if (vram_model_find(names[i], &m) || vram_model_param_count(&m, &params, NULL)) continue;
        char buf[32];
        if (json)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:s}", "name", names[i], "family",
                                                 vram_family_name(m.family), "parameters_count",
                                                 (json_int_t)params, "description",
                                                 vram_model_description(names[i])));
        else
            printf("%-16s %-13s %16s  %s\n", names[i], vram_family_name(m.family),
                   grouped(params, buf, sizeof buf), vram_model_description(names[i]));
    }
    if (json) cli_print_json(arr);
    return CLI_OK;
}

int vram_cli_estimate(int argc, char **argv)
{
    cli_model_args_t a;
    cli_model_args_init(&a, "estimate");
    int rc = cli_model_args_parse(&argc, argv, &a);
    if (rc) return rc;
    bool json = false, list = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--list"))
            list = true;
        else if (!strcmp(argv[i], "--gpu-name") && i + 1 < argc)
            i++; /* read by the model flags */
        else if (!strncmp(argv[i], "--gpu-name=", 11))
            continue;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_OK;
        } else
            return cli_usage_error("estimate", "unknown argument \"%s\"", argv[i]);
    }
    if (list) return list_catalog(json);
    vram_model_t model;
    if ((rc = cli_model_args_build(&a, &model))) return rc;
    vram_estimate_t e;
    if (vram_estimate(&model, &a.est, &e))
        return cli_usage_error("estimate", "%s", vram_last_error());
    if (json)
        cli_print_json(estimate_json(&model, &a, &e));
    else
        cli_print_estimate(&model, &a, &e);
    return CLI_OK;
}
