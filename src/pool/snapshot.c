/* vram_pool_snapshot_json: statistics under PyTorch's memory_stats key names
 * and every segment with its blocks, like torch.cuda.memory_snapshot(). */
#include "pool/pool_internal.h"

#include <jansson.h>
#include <stdlib.h>

static void put_stat(json_t *obj, const char *metric, const vram_pool_stat_t *stat)
{
    static const char *const kinds[VRAM_POOL_STAT_KINDS_] = {"all", "small_pool", "large_pool"};
    char key[96];
    for (int k = 0; k < VRAM_POOL_STAT_KINDS_; k++) {
        snprintf(key, sizeof key, "%s.%s.current", metric, kinds[k]);
        json_object_set_new(obj, key, json_integer(stat[k].current));
        snprintf(key, sizeof key, "%s.%s.peak", metric, kinds[k]);
        json_object_set_new(obj, key, json_integer(stat[k].peak));
        snprintf(key, sizeof key, "%s.%s.allocated", metric, kinds[k]);
        json_object_set_new(obj, key, json_integer(stat[k].allocated));
        snprintf(key, sizeof key, "%s.%s.freed", metric, kinds[k]);
        json_object_set_new(obj, key, json_integer(stat[k].freed));
    }
}

static json_t *stats_json(const vram_pool_stats_t *s)
{
    json_t *o = json_object();
    put_stat(o, "allocation", s->allocation);
    put_stat(o, "segment", s->segment);
    put_stat(o, "active", s->active);
    put_stat(o, "inactive_split", s->inactive_split);
    put_stat(o, "allocated_bytes", s->allocated_bytes);
    put_stat(o, "reserved_bytes", s->reserved_bytes);
    put_stat(o, "active_bytes", s->active_bytes);
    put_stat(o, "inactive_split_bytes", s->inactive_split_bytes);
    put_stat(o, "requested_bytes", s->requested_bytes);
    json_object_set_new(o, "num_alloc_retries", json_integer((json_int_t)s->num_alloc_retries));
    json_object_set_new(o, "num_ooms", json_integer((json_int_t)s->num_ooms));
    json_object_set_new(o, "num_device_alloc", json_integer((json_int_t)s->num_device_alloc));
    json_object_set_new(o, "num_device_free", json_integer((json_int_t)s->num_device_free));
    json_object_set_new(o, "num_device_map", json_integer((json_int_t)s->num_device_map));
    json_object_set_new(o, "num_device_unmap", json_integer((json_int_t)s->num_device_unmap));
    json_object_set_new(o, "num_device_move", json_integer((json_int_t)s->num_device_move));
    json_object_set_new(o, "num_invalid_frees", json_integer((json_int_t)s->num_invalid_frees));
    json_object_set_new(o, "largest_free_block", json_integer((json_int_t)s->largest_free_block));
    json_object_set_new(o, "limit_bytes", json_integer((json_int_t)s->limit_bytes));
    json_object_set_new(o, "fragmentation", json_real(s->fragmentation));
    json_object_set_new(o, "efficiency", json_real(s->efficiency));
    return o;
}

static json_t *segment_json(const vram_pool_t *pool, const vram_pool_segment_t *seg)
{
    json_t *blocks = json_array();
    size_t allocated = 0, requested = 0;
    for (const vram_pool_block_t *b = vram_pool_first_block(pool, seg); b;
         b = vram_pool_next_block(pool, b)) {
        json_t *jb = json_object();
        json_object_set_new(jb, "address", json_integer((json_int_t)b->addr));
        json_object_set_new(jb, "size", json_integer((json_int_t)b->size));
        json_object_set_new(jb, "requested_size",
                            json_integer(b->allocated ? (json_int_t)b->u.live.requested : 0));
        json_object_set_new(jb, "state",
                            json_string(b->allocated ? "active_allocated" : "inactive"));
        json_array_append_new(blocks, jb);
        if (b->allocated) {
            allocated += b->size;
            requested += b->u.live.requested;
        }
    }
    json_t *js = json_object();
    json_object_set_new(js, "address", json_integer((json_int_t)seg->base));
    json_object_set_new(js, "total_size", json_integer((json_int_t)seg->size));
    json_object_set_new(js, "stream", json_integer((json_int_t)seg->stream));
    json_object_set_new(js, "segment_type",
                        json_string(seg->kind == VRAM_POOL_KIND_SMALL ? "small" : "large"));
    json_object_set_new(js, "allocated_size", json_integer((json_int_t)allocated));
    json_object_set_new(js, "active_size", json_integer((json_int_t)allocated));
    json_object_set_new(js, "requested_size", json_integer((json_int_t)requested));
    json_object_set_new(js, "expandable", json_boolean(seg->reservation != NULL));
    /* total_size is the address range the blocks tile; what the device
     * holds for it (less after a trim unmapped holes) is mapped_size. */
    json_object_set_new(
        js, "mapped_size",
        json_integer((json_int_t)(seg->reservation ? seg->reservation->mapped_bytes : seg->size)));
    json_object_set_new(js, "blocks", blocks);
    return js;
}

char *vram_pool_snapshot_json(vram_pool_t *pool)
{
    if (!pool) return NULL;
    json_t *root = json_object();
    vram_pool_lock(&pool->lock);
    vram_pool_stats_t s;
    vram_pool_stats_derive_locked(pool, &s);
    json_object_set_new(root, "device", json_integer(pool->src.device));
    json_object_set_new(root, "strategy", json_string(vram_pool_strategy_name(pool->strategy)));
    json_object_set_new(root, "limit_bytes", json_integer((json_int_t)pool->limit));
    json_object_set_new(root, "stats", stats_json(&s));
    json_t *segments = json_array();
    /* Oldest first reads naturally; the list is newest first. */
    vram_pool_segment_t *last = pool->segments;
    while (last && last->next)
        last = last->next;
    for (vram_pool_segment_t *seg = last; seg; seg = seg->prev)
        json_array_append_new(segments, segment_json(pool, seg));
    vram_pool_unlock(&pool->lock);
    json_object_set_new(root, "segments", segments);
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}
