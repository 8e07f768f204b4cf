/* Fuzz target: the allocation-trace parser (src/pool/trace.c). On success
 * the events are replayed against a plain reference model: slots are dense,
 * an alloc takes a free slot, a free releases a live one, and the summary
 * figures (allocs, slots, peak, max size) match what the events say. */
#include "fuzz.h"

#include "pool/tools/replay.h"
#include "pool/tools/trace.h"

/* One private simulated GPU for every replay of the process. */
static vram_replay_device_t replay_device;

static void close_replay_device(void)
{
    vram_replay_device_close(&replay_device);
}

/* A parsed trace also replays through the pool (as `vram replay` does),
 * turn by turn with every strategy, with segments and with expandable
 * segments, in one or two passes, and through the torch baselines; then
 * (`limited`) with expandable segments under a limit just above the
 * trace's peak, where chunks of free blocks move or are unmapped. Refused
 * requests are OOMs, not errors, and every byte taken from the device
 * (segments or mapped chunks) is back when the replay ends. */
static void check_replay(const vram_trace_t *t, bool limited)
{
    static unsigned turn;
    if (!replay_device.ctx) {
        FUZZ_CHECK(vram_replay_device_open(4ull << 30, &replay_device) == 0,
                   "cannot open a simulated device");
        atexit(close_replay_device);
    }
    unsigned k = turn++;
    vram_replay_config_t cfg = {
        .mode = k % 10 == 9 ? VRAM_REPLAY_TORCH : VRAM_REPLAY_POOL,
        .strategy = (vram_pool_strategy_t)(k % VRAM_POOL_STRATEGY_COUNT_),
        .expandable = (k / VRAM_POOL_STRATEGY_COUNT_) % 2 ? VRAM_POOL_EXPANDABLE_ON
                                                          : VRAM_POOL_EXPANDABLE_OFF,
        .repeat = 1 + (int)(k / 8 % 2),
        .ctx = replay_device.ctx,
        .device = 0,
        .cost = VRAM_DEVICE_COST_DEFAULT,
    };
    if (limited) {
        cfg.mode = VRAM_REPLAY_POOL;
        cfg.expandable = VRAM_POOL_EXPANDABLE_ON;
        cfg.limit_bytes = t->peak_live_bytes + t->peak_live_bytes / 32 + 1;
    }
    vram_replay_result_t res;
    int rc = vram_replay_run(t, &cfg, &res);
    FUZZ_CHECK(rc == 0, "replay of a valid trace failed with %d", rc);
    /* A refused allocation's free is skipped too: ops + ooms <= count. */
    size_t events = t->count * (size_t)cfg.repeat, allocs = t->allocs * (size_t)cfg.repeat;
    FUZZ_CHECK(res.ops + res.ooms <= events && res.ooms <= allocs,
               "replay did %llu of %zu events (%llu OOMs)", (unsigned long long)res.ops, t->count,
               (unsigned long long)res.ooms);
    vram_device_info_t info;
    FUZZ_CHECK(vram_device_info(replay_device.ctx, 0, &info) == 0, "no device info");
    FUZZ_CHECK(info.used_bytes == 0, "%llu device bytes still held after the replay",
               (unsigned long long)info.used_bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vram_trace_t t;
    memset(&t, 0xA5, sizeof t);
    vram_clear_error();
    int rc = vram_trace_parse((const char *)data, size, "fuzz.trace", &t);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", vram_last_error());
    /* The file reader must agree with the in-memory parser. */
    vram_trace_t from_file = {0};
    int frc = vram_trace_load(fuzz_memfile(data, size), &from_file);
    FUZZ_CHECK(frc == rc, "vram_trace_load returned %d, vram_trace_parse %d", frc, rc);
    if (frc == 0) {
        FUZZ_CHECK(from_file.count == t.count && from_file.slots == t.slots &&
                       from_file.peak_live_bytes == t.peak_live_bytes,
                   "vram_trace_load and vram_trace_parse disagree");
        for (size_t i = 0; i < t.count; i++)
            FUZZ_CHECK(from_file.events[i].size == t.events[i].size &&
                           from_file.events[i].slot == t.events[i].slot &&
                           from_file.events[i].is_alloc == t.events[i].is_alloc,
                       "vram_trace_load and vram_trace_parse disagree at event %zu", i);
        vram_trace_release(&from_file);
    }
    if (rc != 0) {
        FUZZ_CHECK(rc == VRAM_EPARSE, "vram_trace_parse returned %d", rc);
        FUZZ_CHECK(!strncmp(msg, "fuzz.trace:", 11),
                   "message \"%s\" does not name the origin and line", msg);
        const unsigned char *b = (const unsigned char *)&t;
        for (size_t i = 0; i < sizeof t; i++)
            FUZZ_CHECK(b[i] == 0xA5, "a failing parse wrote to *out");
        return 0;
    }
    fuzz_accepted++;
    FUZZ_CHECK(t.allocs <= t.count && t.slots <= t.allocs,
               "count %zu, allocs %zu, slots %zu are inconsistent", t.count, t.allocs, t.slots);
    uint64_t *live_size = calloc(t.slots ? t.slots : 1, sizeof *live_size);
    bool *live = calloc(t.slots ? t.slots : 1, sizeof *live);
    if (!live || !live_size) abort();
    size_t allocs = 0, used_slots = 0;
    uint64_t live_bytes = 0, peak = 0, max_size = 0;
    bool saturated = false;
    for (size_t i = 0; i < t.count; i++) {
        const vram_trace_event_t *e = &t.events[i];
        FUZZ_CHECK(e->slot < t.slots, "event %zu uses slot %u of %zu", i, e->slot, t.slots);
        if (e->is_alloc) {
            FUZZ_CHECK(!live[e->slot], "event %zu allocates live slot %u", i, e->slot);
            live[e->slot] = true;
            live_size[e->slot] = e->size;
            allocs++;
            if (e->slot + 1u > used_slots) used_slots = e->slot + 1u;
            if (e->size > UINT64_MAX - live_bytes) saturated = true;
            live_bytes += e->size;
            if (!saturated && live_bytes > peak) peak = live_bytes;
            if (e->size > max_size) max_size = e->size;
        } else {
            FUZZ_CHECK(live[e->slot], "event %zu frees free slot %u", i, e->slot);
            FUZZ_CHECK(e->size == 0, "free event %zu has size %llu", i,
                       (unsigned long long)e->size);
            live_bytes -= live_size[e->slot];
            live[e->slot] = false;
        }
    }
    FUZZ_CHECK(allocs == t.allocs, "%zu alloc events, summary says %zu", allocs, t.allocs);
    FUZZ_CHECK(used_slots == t.slots, "%zu slots used, summary says %zu", used_slots, t.slots);
    FUZZ_CHECK(max_size == t.max_size, "max size %llu, summary says %llu",
               (unsigned long long)max_size, (unsigned long long)t.max_size);
    if (!saturated)
        FUZZ_CHECK(peak == t.peak_live_bytes, "peak %llu, summary says %llu",
                   (unsigned long long)peak, (unsigned long long)t.peak_live_bytes);
    free(live);
    free(live_size);
    if (t.count <= 2000) {
        check_replay(&t, false);
        check_replay(&t, true);
    }
    vram_trace_release(&t);
    return 0;
}
