/* vram_layout_json: the size and field offsets of every struct that a
 * foreign-function mirror (python/vram's ctypes classes) copies, so a mirror
 * that lacks a field or has the wrong type is caught at import instead of
 * letting libvram write past it. A struct mirrored anywhere gets rows here. */
#include "vram.h"

#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>

typedef struct {
    const char *type, *field; /* field NULL: the row of the struct itself */
    size_t offset, size;
} layout_row_t;

#define STRUCT(t)                                                                                  \
    {                                                                                              \
#t, NULL, 0, sizeof(t)                                                                     \
    }
#define FIELD(t, f)                                                                                \
    {                                                                                              \
#t, #f, offsetof(t, f), sizeof(((t *)0)->f)                                                \
    }

static const layout_row_t ROWS[] = {
    STRUCT(vram_pool_config_t),
    FIELD(vram_pool_config_t, strategy),
    FIELD(vram_pool_config_t, limit_bytes),
    FIELD(vram_pool_config_t, limit_fraction),
    FIELD(vram_pool_config_t, trace_path),
    FIELD(vram_pool_config_t, expandable),

    STRUCT(vram_batchopt_config_t),
    FIELD(vram_batchopt_config_t, enabled),
    FIELD(vram_batchopt_config_t, target_usage),
    FIELD(vram_batchopt_config_t, safety_margin),
    FIELD(vram_batchopt_config_t, adjustment_frequency),
    FIELD(vram_batchopt_config_t, min_batch),
    FIELD(vram_batchopt_config_t, max_batch),
    FIELD(vram_batchopt_config_t, min_lq),
    FIELD(vram_batchopt_config_t, max_lq),
    FIELD(vram_batchopt_config_t, history_size),
    FIELD(vram_batchopt_config_t, max_adjustments),
    FIELD(vram_batchopt_config_t, oom_cooldown_windows),
    FIELD(vram_batchopt_config_t, policy),

    STRUCT(vram_batchopt_adjustment_t),
    FIELD(vram_batchopt_adjustment_t, iteration),
    FIELD(vram_batchopt_adjustment_t, old_batch),
    FIELD(vram_batchopt_adjustment_t, old_lq),
    FIELD(vram_batchopt_adjustment_t, new_batch),
    FIELD(vram_batchopt_adjustment_t, new_lq),
    FIELD(vram_batchopt_adjustment_t, peak_usage),
    FIELD(vram_batchopt_adjustment_t, predicted_usage),
    FIELD(vram_batchopt_adjustment_t, reason),

    STRUCT(vram_batchopt_decision_t),
    FIELD(vram_batchopt_decision_t, batch_delta),
    FIELD(vram_batchopt_decision_t, lq_delta),
    FIELD(vram_batchopt_decision_t, batch),
    FIELD(vram_batchopt_decision_t, lq),
    FIELD(vram_batchopt_decision_t, reason),

    STRUCT(vram_batchopt_stats_t),
    FIELD(vram_batchopt_stats_t, peak_usage),
    FIELD(vram_batchopt_stats_t, average_usage),
    FIELD(vram_batchopt_stats_t, current_usage),
    FIELD(vram_batchopt_stats_t, batch),
    FIELD(vram_batchopt_stats_t, lq),
    FIELD(vram_batchopt_stats_t, iterations),
    FIELD(vram_batchopt_stats_t, adjustments),
    FIELD(vram_batchopt_stats_t, oom_recoveries),
    FIELD(vram_batchopt_stats_t, model_quadratic),
    FIELD(vram_batchopt_stats_t, model_a),
    FIELD(vram_batchopt_stats_t, model_b),
    FIELD(vram_batchopt_stats_t, nlog),
    FIELD(vram_batchopt_stats_t, log),

    STRUCT(vram_batchiter_config_t),
    FIELD(vram_batchiter_config_t, initial_batch),
    FIELD(vram_batchiter_config_t, min_batch),
    FIELD(vram_batchiter_config_t, check_every),
    FIELD(vram_batchiter_config_t, high_mark),
    FIELD(vram_batchiter_config_t, low_mark),

    STRUCT(vram_batchiter_change_t),
    FIELD(vram_batchiter_change_t, sample),
    FIELD(vram_batchiter_change_t, old_batch),
    FIELD(vram_batchiter_change_t, new_batch),
    FIELD(vram_batchiter_change_t, usage),
    FIELD(vram_batchiter_change_t, reason),

    STRUCT(vram_batchiter_stats_t),
    FIELD(vram_batchiter_stats_t, batch),
    FIELD(vram_batchiter_stats_t, handed_out),
    FIELD(vram_batchiter_stats_t, committed),
    FIELD(vram_batchiter_stats_t, returned),
    FIELD(vram_batchiter_stats_t, pending),
    FIELD(vram_batchiter_stats_t, checks),
    FIELD(vram_batchiter_stats_t, nchanges),
    FIELD(vram_batchiter_stats_t, nlog),
    FIELD(vram_batchiter_stats_t, log),

    STRUCT(vram_oomchain_config_t),
    FIELD(vram_oomchain_config_t, order),
    FIELD(vram_oomchain_config_t, norder),
    FIELD(vram_oomchain_config_t, max_splits),
    FIELD(vram_oomchain_config_t, min_micro_batch),
    FIELD(vram_oomchain_config_t, free_cache),
    FIELD(vram_oomchain_config_t, offload),
    FIELD(vram_oomchain_config_t, checkpoint),
    FIELD(vram_oomchain_config_t, user),

    STRUCT(vram_oom_action_t),
    FIELD(vram_oom_action_t, strategy),
    FIELD(vram_oom_action_t, retry),
    FIELD(vram_oom_action_t, micro_batches),
    FIELD(vram_oom_action_t, micro_batch_size),
    FIELD(vram_oom_action_t, freed_bytes),
    FIELD(vram_oom_action_t, message),

    STRUCT(vram_oomchain_stats_t),
    FIELD(vram_oomchain_stats_t, attempts),
    FIELD(vram_oomchain_stats_t, recovered),
    FIELD(vram_oomchain_stats_t, freed_bytes),
    FIELD(vram_oomchain_stats_t, pool_calls),
    FIELD(vram_oomchain_stats_t, steps),
    FIELD(vram_oomchain_stats_t, ooms),
    FIELD(vram_oomchain_stats_t, failures),

    STRUCT(vram_swap_move_t),
    FIELD(vram_swap_move_t, key),
    FIELD(vram_swap_move_t, size),
    FIELD(vram_swap_move_t, from),
    FIELD(vram_swap_move_t, to),

    STRUCT(vram_swap_stats_t),
    FIELD(vram_swap_stats_t, gpu_budget),
    FIELD(vram_swap_stats_t, host_budget),
    FIELD(vram_swap_stats_t, gpu_bytes),
    FIELD(vram_swap_stats_t, host_bytes),
    FIELD(vram_swap_stats_t, gpu_items),
    FIELD(vram_swap_stats_t, host_items),
    FIELD(vram_swap_stats_t, hits_gpu),
    FIELD(vram_swap_stats_t, hits_host),
    FIELD(vram_swap_stats_t, misses),
    FIELD(vram_swap_stats_t, bytes_to_gpu),
    FIELD(vram_swap_stats_t, bytes_to_host),
    FIELD(vram_swap_stats_t, bytes_loaded),
    FIELD(vram_swap_stats_t, evictions_gpu),
    FIELD(vram_swap_stats_t, evictions_host),
};

int vram_layout_json(char **out)
{
    if (!out) return vram_fail(VRAM_EINVAL, "vram_layout_json: NULL argument");
    *out = NULL;
    int rc = VRAM_ENOMEM;
    json_t *root = json_object(), *fields = NULL;
    if (!root) goto out;
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const layout_row_t *r = &ROWS[i];
        if (!r->field) { /* a struct's rows start with its own */
            fields = json_object();
            if (!fields || json_object_set_new(root, r->type,
                                               json_pack("{s:I, s:o}", "size", (json_int_t)r->size,
                                                         "fields", fields)))
                goto out;
            continue;
        }
        if (json_object_set_new(fields, r->field,
                                json_pack("{s:I, s:I}", "offset", (json_int_t)r->offset, "size",
                                          (json_int_t)r->size)))
            goto out;
    }
    *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (*out) rc = 0;
out:
    json_decref(root);
    return rc ? vram_fail(rc, "out of memory describing the struct layouts") : 0;
}
