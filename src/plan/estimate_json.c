/* The JSON forms of an estimate and of a plan (estimate_json.h). */
#include "plan/estimate_json.h"

static const char *mode_name(vram_mode_t mode)
{
    return mode == VRAM_MODE_TRAIN ? "train" : mode == VRAM_MODE_INFER ? "infer" : "load";
}

/* The breakdown, the real-GPU lines and the three figures people measure. */
static json_t *bytes_json(const vram_estimate_t *e)
{
    json_t *o =
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "parameters",
                  (json_int_t)e->parameters, "buffers", (json_int_t)e->buffers, "gradients",
                  (json_int_t)e->gradients, "optimizer_states", (json_int_t)e->optimizer_states,
                  "activations", (json_int_t)e->activations, "kv_cache", (json_int_t)e->kv_cache,
                  "overhead", (json_int_t)e->overhead, "total", (json_int_t)e->total);
    json_t *gpu = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "autocast_cache",
        (json_int_t)e->autocast_cache, "backward_temps", (json_int_t)e->backward_temps,
        "optimizer_temps", (json_int_t)e->optimizer_temps, "workspaces", (json_int_t)e->workspaces,
        "allocator_rounding", (json_int_t)e->allocator_rounding, "cuda_context",
        (json_int_t)e->cuda_context, "allocated_peak", (json_int_t)e->allocated_peak, "reserved",
        (json_int_t)e->reserved, "nvidia_smi", (json_int_t)e->nvidia_smi);
    json_object_update(o, gpu);
    json_decref(gpu);
    return o;
}

/* The parts live at the peak: they add up to bytes.total. */
static json_t *live_json(const vram_estimate_t *e)
{
    const vram_estimate_live_t *l = &e->live;
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "parameters",
                     (json_int_t)l->parameters, "buffers", (json_int_t)l->buffers, "gradients",
                     (json_int_t)l->gradients, "optimizer_states", (json_int_t)l->optimizer_states,
                     "activations", (json_int_t)l->activations, "kv_cache", (json_int_t)l->kv_cache,
                     "autocast_cache", (json_int_t)l->autocast_cache, "backward_temps",
                     (json_int_t)l->backward_temps, "optimizer_temps",
                     (json_int_t)l->optimizer_temps, "workspaces", (json_int_t)l->workspaces,
                     "allocator_rounding", (json_int_t)l->allocator_rounding, "cuda_context",
                     (json_int_t)l->cuda_context);
}

/* Where the peak is and what produced it. */
static void add_setup(json_t *o, const vram_estimate_config_t *c, const vram_estimate_t *e)
{
    const char *phase = c->mode == VRAM_MODE_LOAD    ? "load"
                        : c->mode == VRAM_MODE_INFER ? "forward"
                        : e->peak_in_optimizer_step  ? "optimizer step"
                                                     : "backward";
    json_object_set_new(o, "peak_phase", json_string(phase));
    json_object_set_new(o, "attention", json_string(e->fused_attention ? "fused" : "eager"));
    json_object_set_new(o, "trainable_count", json_integer((json_int_t)e->trainable_count));
    if (c->mode == VRAM_MODE_TRAIN) {
        json_object_set_new(o, "loss",
                            json_string(c->chunked_loss ? "chunked"
                                        : c->sum_loss   ? "sum"
                                                        : "full"));
        json_object_set_new(o, "compiled_loss", json_boolean(c->compiled_loss));
        json_object_set_new(o, "compiled_layers", json_boolean(e->compiled_layers));
        json_object_set_new(o, "activation_offload", json_boolean(c->activation_offload));
    }
    if (c->lora_rank > 0)
        json_object_set_new(o, "lora",
                            json_pack("{s:I, s:f, s:s}", "rank", (json_int_t)c->lora_rank, "alpha",
                                      c->lora_alpha, "quantize_base",
                                      c->quantize_base == VRAM_QUANT_NF4    ? "nf4"
                                      : c->quantize_base == VRAM_QUANT_INT8 ? "int8"
                                                                            : "none"));
}

json_t *vram_estimate_to_json(const vram_model_t *m, const vram_estimate_config_t *c,
                              const vram_estimate_t *e)
{
    int64_t accumulation_steps = c->accumulation_steps > 1 ? c->accumulation_steps : 1;
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:i, s:i, s:I, s:o, s:f}", "model",
        m->name, "family", vram_family_name(m->family), "parameters_count",
        (json_int_t)e->parameters_count, "mode", mode_name(c->mode), "batch_size",
        (json_int_t)c->batch_size, "effective_batch_size",
        (json_int_t)(c->batch_size * accumulation_steps), "seq_len", (json_int_t)e->seq_len,
        "image_size", (json_int_t)e->image_size, "precision", vram_precision_name(c->precision),
        "optimizer", vram_optimizer_name(c->optimizer), "checkpointing",
        vram_checkpointing_name(c->checkpointing), "zero_stage", c->zero_stage, "gpus",
        c->gpus > 0 ? c->gpus : 1, "max_new_tokens", (json_int_t)c->max_new_tokens, "bytes",
        bytes_json(e), "total_gib", vram_gib(e->total));
    if (o) add_setup(o, c, e);
    if (o) json_object_set_new(o, "at_peak", live_json(e));
    if (o && c->zero_stage > 0)
        json_object_set_new(o, "sharding",
                            json_string(c->sharding == VRAM_SHARD_FSDP ? "fsdp" : "deepspeed"));
    /* the modules the estimate describes, when not transformers' */
    if (o && c->framework == VRAM_FRAMEWORK_TORCHTUNE)
        json_object_set_new(o, "framework", json_string("torchtune"));
    /* the generic decoder row for an unknown model_type says what it assumed */
    if (o && m->assumed[0]) json_object_set_new(o, "assumed", json_string(m->assumed));
    return o;
}

json_t *vram_plan_to_json(const vram_model_t *m, const vram_estimate_config_t *est,
                          const vram_plan_config_t *pc, const vram_plan_t *p, const char *gpu_label)
{
    json_t *root = json_pack(
        "{s:s, s:s, s:s, s:{s:s, s:I, s:I, s:I}, s:f, s:I, s:I, s:{s:I, s:I, s:I, s:I}}", "model",
        m->name, "mode", mode_name(est->mode), "precision", vram_precision_name(est->precision),
        "gpu", "name", gpu_label, "total_bytes", (json_int_t)pc->total_bytes, "used_bytes",
        (json_int_t)pc->used_bytes, "free_bytes", (json_int_t)pc->free_bytes, "target", pc->target,
        "budget_bytes", (json_int_t)p->budget_bytes, "model_bytes", (json_int_t)p->model_bytes,
        "recommendations", "maximum", (json_int_t)p->maximum, "recommended",
        (json_int_t)p->recommended, "safe", (json_int_t)p->safe, "largest_fitting",
        (json_int_t)p->max_batch_raw);
    if (!root) return NULL;
    json_object_set_new(root, "shown",
                        json_pack("{s:I, s:I, s:o}", "batch_size", (json_int_t)p->shown_batch,
                                  "total_bytes", (json_int_t)p->shown.total, "at_peak",
                                  live_json(&p->shown)));
    if (pc->batch_size > 0) {
        uint64_t t = p->current.total;
        json_object_set_new(root, "current",
                            json_pack("{s:I, s:b, s:s, s:I, s:I, s:I, s:I}", "batch_size",
                                      (json_int_t)pc->batch_size, "fits", p->fit == VRAM_FIT_YES,
                                      "verdict", vram_fit_name(p->fit), "total_bytes",
                                      (json_int_t)t, "micro_batch_size",
                                      (json_int_t)p->micro_batch_size, "accumulation_steps",
                                      (json_int_t)p->accumulation_steps, "remaining_bytes",
                                      (json_int_t)(pc->free_bytes > t ? pc->free_bytes - t : 0)));
    }
    json_t *sug = json_array();
    for (int i = 0; i < p->nsuggestions; i++) {
        const vram_plan_suggestion_t *s = &p->suggestions[i];
        json_array_append_new(sug, json_pack("{s:s, s:s, s:I, s:b}", "change", s->name,
                                             "description", s->description, "saving_bytes",
                                             (json_int_t)s->saving_bytes, "fits", s->fits));
    }
    json_object_set_new(root, "suggestions", sug);
    return root;
}
