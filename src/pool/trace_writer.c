/* VRAM_POOL_TRACE: the pool's requests in the shared trace format
 * ("a <id> <size>", "f <id>"; see docs/pool.md). Ids count up from 1 per
 * pool, so they are unique among live blocks. Line-buffered, so a process
 * that never destroys its pool (the PyTorch allocator) still leaves a
 * complete file. */
#include "pool/pool_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

int vram_pool_trace_open(vram_pool_t *pool, const char *path)
{
    char expanded[4096];
    const char *mark = strstr(path, "%d");
    if (mark) {
        snprintf(expanded, sizeof expanded, "%.*s%d%s", (int)(mark - path), path, pool->src.device,
                 mark + 2);
        path = expanded;
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return vram_fail(VRAM_EIO, "pool trace: cannot open \"%s\" for writing: %s", path,
                         strerror(errno));
    setvbuf(f, NULL, _IOLBF, 0);
    fprintf(f, "# vram pool trace: device %d, strategy %s\n", pool->src.device,
            vram_pool_strategy_name(pool->strategy));
    pool->trace = f;
    return 0;
}

void vram_pool_trace_alloc(vram_pool_t *pool, vram_pool_block_t *b, size_t size)
{
    b->u.live.trace_id = pool->next_trace_id++;
    fprintf(pool->trace, "a %" PRIu64 " %zu\n", b->u.live.trace_id, size);
}

void vram_pool_trace_free(vram_pool_t *pool, const vram_pool_block_t *b)
{
    fprintf(pool->trace, "f %" PRIu64 "\n", b->u.live.trace_id);
}
