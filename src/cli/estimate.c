/* vram estimate: the memory a training or inference job will need. */
#include "cli.h"
#include "model_args.h"
#include "vram_int.h"

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

static json_t *estimate_json(const vram_model_t *m, const cli_model_args_t *a,
                             const vram_estimate_t *e)
{
    json_t *o = vram_estimate_to_json(m, &a->est, e);
    if (o && a->gpu_note) json_object_set_new(o, "gpu_note", json_string(a->gpu_note));
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
    if (m->assumed[0]) printf("Assumed      %s\n", m->assumed);
    printf("Workload     %s, batch %lld",
           c->mode == VRAM_MODE_TRAIN   ? "training"
           : c->mode == VRAM_MODE_INFER ? "inference"
                                        : "weights loaded",
           (long long)c->batch_size);
    if (c->accumulation_steps > 1)
        printf(" x %lld accumulation steps (effective %lld)", (long long)c->accumulation_steps,
               (long long)(c->batch_size * c->accumulation_steps));
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
    if (c->framework == VRAM_FRAMEWORK_TORCHTUNE)
        printf(
            "\n             torchtune's modules (k and v expanded to every head, fp32 RMSNorm)%s",
            c->mode == VRAM_MODE_TRAIN && c->optim_impl == VRAM_OPTIM_AUTO &&
                    vram_optim_impl_of(c) == VRAM_OPTIM_FUSED
                ? ",\n             optimizer step fused (torchtune's configs)"
                : "");
    if (c->mode == VRAM_MODE_TRAIN && c->compiled_loss)
        printf("\n             torch.compile: %s",
               e->compiled_layers ? "loss and layers (inductor's partitioner)"
                                  : "loss; layers counted eager (layout not modelled)");
    if (a->gpu_note) printf("\nGPU          %s", a->gpu_note);
    const char *phase = c->mode == VRAM_MODE_LOAD    ? "after loading"
                        : c->mode == VRAM_MODE_INFER ? "forward pass"
                        : e->peak_in_optimizer_step  ? "optimizer step"
                                                     : "backward pass";
    printf("\n\nMemory per GPU at the peak (%s)\n", phase);
    const vram_estimate_live_t *l = &e->live;
    const struct {
        const char *label;
        uint64_t live, largest;
    } parts[] = {
        {"Parameters", l->parameters, e->parameters},
        {"Buffers", l->buffers, e->buffers},
        {"Gradients", l->gradients, e->gradients},
        {"Optimizer states", l->optimizer_states, e->optimizer_states},
        {"Activations", l->activations, e->activations},
        {"KV cache", l->kv_cache, e->kv_cache},
        {"Autocast cache", l->autocast_cache, e->autocast_cache},
        {"Backward temps", l->backward_temps, e->backward_temps},
        {"Optimizer temps", l->optimizer_temps, e->optimizer_temps},
        {"cuBLAS workspaces", l->workspaces, e->workspaces},
        {"Allocator rounding", l->allocator_rounding, e->allocator_rounding},
        {"CUDA context", l->cuda_context, e->cuda_context},
    };
    size_t nparts = sizeof parts / sizeof parts[0];
    for (size_t i = 0; i < nparts; i++)
        print_row(parts[i].label, parts[i].live, e->total);
    printf("  %-18s %10s\n", "", "----------");
    print_row("nvidia-smi (total)", e->nvidia_smi, e->total);
    printf("Included in the total:\n");
    print_row("Allocated at peak", e->allocated_peak, e->total);
    print_row("Reserved", e->reserved, e->total);
    bool header = false;
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].largest <= parts[i].live) continue;
        if (!header) printf("\nLarger at another moment of the step (not live at the peak):\n");
        header = true;
        printf("  %-18s %10.2f GiB\n", parts[i].label, vram_gib(parts[i].largest));
    }
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
