/* What every model a parser accepts must survive: the estimator and the
 * planner either answer consistently or refuse with a message (shared by the
 * HF config and profile targets). */
#ifndef VRAM_FUZZ_MODEL_CHECK_H
#define VRAM_FUZZ_MODEL_CHECK_H

#include "fuzz.h"

#include <jansson.h>

/* The largest integer among the top-level values of a JSON object whose key
 * contains `key_part` ("" = any key; 0 when the text is not an object): the
 * filter of the known unbounded-field issues. */
static inline json_int_t fuzz_json_max_integer(const char *text, const char *key_part)
{
    json_t *root = json_loads(text, 0, NULL);
    json_int_t max = 0;
    const char *key;
    json_t *v;
    if (json_is_object(root)) {
        json_object_foreach(root, key, v)
        {
            if (json_is_integer(v) && json_integer_value(v) > max && strstr(key, key_part))
                max = json_integer_value(v);
        }
    }
    json_decref(root);
    return max;
}

/* Field by field (struct padding may differ between two copies). */
static inline bool fuzz_models_equal(const vram_model_t *a, const vram_model_t *b)
{
#define SAME(f) (a->f == b->f)
    return !strcmp(a->name, b->name) && SAME(family) && SAME(variant) && SAME(vocab_size) &&
           SAME(hidden_size) && SAME(num_layers) && SAME(num_heads) && SAME(num_kv_heads) &&
           SAME(head_dim) && SAME(intermediate_size) && SAME(max_positions) &&
           SAME(position_offset) && SAME(type_vocab_size) && SAME(num_decoder_layers) &&
           SAME(relative_buckets) && SAME(embed_size) && SAME(tied_embeddings) && SAME(gated_mlp) &&
           SAME(has_pooler) && SAME(image_size) && SAME(patch_size) && SAME(num_channels) &&
           SAME(num_classes) && SAME(default_seq_len) && SAME(profile_parameters) &&
           SAME(profile_buffers_bytes) && SAME(profile_act_per_sample) && SAME(profile_act_fixed) &&
           SAME(profile_dtype_bytes) && SAME(head) && SAME(num_labels) && SAME(embed_proj_dim) &&
           SAME(num_experts) && SAME(experts_per_token) && SAME(expert_intermediate) &&
           SAME(shared_intermediate) && SAME(qkv_bias) && SAME(mlp_bias) && SAME(lm_head_bias) &&
           SAME(softmax_upcast) && SAME(no_final_norm) && SAME(post_norm) && SAME(sdpa_default) &&
           SAME(score_clamp) && SAME(num_mel_bins) && SAME(max_source_positions) &&
           SAME(conv_layers) && SAME(conv_bias) && SAME(conv_group_norm) && SAME(pos_conv_kernel) &&
           SAME(pos_conv_groups) && !memcmp(a->conv_dim, b->conv_dim, sizeof a->conv_dim) &&
           !memcmp(a->conv_kernel, b->conv_kernel, sizeof a->conv_kernel) &&
           !memcmp(a->conv_stride, b->conv_stride, sizeof a->conv_stride);
#undef SAME
}

/* One estimate's invariants; false when it was refused (with a message). */
static inline bool fuzz_estimate_adds_up(const vram_model_t *m, const vram_estimate_config_t *cfg,
                                         vram_estimate_t *out)
{
    vram_estimate_t e;
    vram_clear_error();
    int rc = vram_estimate(m, cfg, &e);
    if (rc != 0) {
        FUZZ_CHECK(rc == VRAM_EINVAL, "vram_estimate of \"%s\" returned %d", m->name, rc);
        FUZZ_CHECK_FAILED_WITH_MESSAGE(rc, "vram_estimate");
        return false;
    }
    /* what nvidia-smi shows = the allocator's reservation + the context;
     * the reservation = the allocated peak + rounding; overhead = the
     * real-GPU lines; the peak holds at least the weights */
    FUZZ_CHECK(e.total == e.nvidia_smi && e.nvidia_smi == e.reserved + e.cuda_context &&
                   e.reserved == e.allocated_peak + e.allocator_rounding,
               "estimate of \"%s\": total %llu, reserved %llu, peak %llu do not add up", m->name,
               (unsigned long long)e.total, (unsigned long long)e.reserved,
               (unsigned long long)e.allocated_peak);
    FUZZ_CHECK(e.overhead == e.autocast_cache + e.backward_temps + e.optimizer_temps +
                                 e.workspaces + e.allocator_rounding + e.cuda_context,
               "estimate of \"%s\": overhead is not the sum of its lines", m->name);
    FUZZ_CHECK(e.total >= e.parameters && e.allocated_peak >= e.parameters &&
                   e.total >= e.allocated_peak,
               "estimate of \"%s\": a component exceeds the total (overflow?)", m->name);
    *out = e;
    return true;
}

static inline void fuzz_check_estimate(const vram_model_t *m, vram_mode_t mode)
{
    vram_estimate_config_t cfg;
    vram_estimate_config_init(&cfg);
    cfg.mode = mode;
    vram_estimate_t e;
    if (mode == VRAM_MODE_TRAIN) {
        /* torchtune's set-up: checkpointed, offloaded, chunked compiled loss */
        vram_estimate_config_t tt = cfg;
        tt.precision = VRAM_PREC_BF16;
        tt.checkpointing = VRAM_CKPT_FULL;
        tt.activation_offload = tt.chunked_loss = tt.compiled_loss = tt.grads_kept = true;
        (void)fuzz_estimate_adds_up(m, &tt, &e);
    }
    if (!fuzz_estimate_adds_up(m, &cfg, &e)) return;
    int rc;

    vram_plan_config_t dev;
    vram_plan_config_init(&dev);
    dev.total_bytes = 80ull << 30;
    dev.free_bytes = 79ull << 30;
    dev.used_bytes = 1ull << 30;
    dev.batch_size = 8;
    vram_plan_t plan;
    vram_clear_error();
    rc = vram_plan(m, &cfg, &dev, &plan);
    if (rc != 0) {
        FUZZ_CHECK_FAILED_WITH_MESSAGE(rc, "vram_plan");
        return;
    }
    FUZZ_CHECK(plan.max_batch_raw >= 0 && plan.maximum >= 0 && plan.recommended >= 0 &&
                   plan.safe >= 0 && plan.safe <= plan.recommended &&
                   plan.recommended <= plan.maximum,
               "plan of \"%s\": batches raw %lld max %lld recommended %lld safe %lld", m->name,
               (long long)plan.max_batch_raw, (long long)plan.maximum, (long long)plan.recommended,
               (long long)plan.safe);
    FUZZ_CHECK(plan.nsuggestions >= 0 && plan.nsuggestions <= VRAM_PLAN_MAX_SUGGESTIONS,
               "plan of \"%s\": %d suggestions", m->name, plan.nsuggestions);
}

#endif
