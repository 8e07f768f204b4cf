/* The trace parser: strict, because a trace is user input; every rejection
 * names the line. Ids are mapped to dense slots while parsing. */
#include "core/array.h"
#include "core/file.h"
#include "core/map.h"
#include "pool/tools/trace.h"
#include "pool/pool_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *origin;
    size_t line;
    vram_map_t ids;  /* live id -> slot */
    uint32_t *spare; /* slots freed, reused first */
    size_t spare_count, spare_cap;
    size_t slots;
    uint64_t *slot_size; /* requested bytes of each live slot */
    size_t slot_size_cap;
    uint64_t live_bytes;
} parser_t;

static int parse_error(const parser_t *p, const char *fmt, const char *what, size_t what_len)
{
    char detail[64];
    snprintf(detail, sizeof detail, "%.*s", (int)(what_len > 40 ? 40 : what_len), what);
    char msg[256];
    snprintf(msg, sizeof msg, fmt, detail);
    return vram_fail(VRAM_EPARSE, "%s:%zu: %s", p->origin, p->line, msg);
}

/* A decimal number without sign or spaces; false on anything else or overflow. */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool grow_events(vram_trace_t *t, size_t *cap)
{
    if (t->count < *cap) return true;
    vram_trace_event_t *e = vram_array_grow(t->events, cap, sizeof *e, 1024);
    if (!e) return false;
    t->events = e;
    return true;
}

static int take_slot(parser_t *p, uint32_t *slot)
{
    if (p->spare_count) {
        *slot = p->spare[--p->spare_count];
        return 0;
    }
    if (p->slots >= UINT32_MAX - 1) return vram_fail(VRAM_ENOMEM, "trace has too many live ids");
    if (p->slots == p->slot_size_cap) {
        uint64_t *s = vram_array_grow(p->slot_size, &p->slot_size_cap, sizeof *s, 1024);
        if (!s) return vram_fail(VRAM_ENOMEM, "out of host memory reading a trace");
        p->slot_size = s;
    }
    *slot = (uint32_t)p->slots++;
    return 0;
}

static int give_slot(parser_t *p, uint32_t slot)
{
    if (p->spare_count == p->spare_cap) {
        uint32_t *s = vram_array_grow(p->spare, &p->spare_cap, sizeof *s, 1024);
        if (!s) return vram_fail(VRAM_ENOMEM, "out of host memory reading a trace");
        p->spare = s;
    }
    p->spare[p->spare_count++] = slot;
    return 0;
}

/* Splits a line at single spaces into at most 4 fields. */
static int split_fields(const char *line, size_t len, const char *field[4], size_t flen[4])
{
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == ' ') {
            if (n == 4) return 5;
            field[n] = line + start;
            flen[n] = i - start;
            n++;
            start = i + 1;
        }
    }
    return n;
}

static int parse_line(parser_t *p, vram_trace_t *t, size_t *cap, const char *line, size_t len)
{
    const char *f[4];
    size_t fl[4];
    int n = split_fields(line, len, f, fl);
    bool is_alloc = fl[0] == 1 && f[0][0] == 'a';
    bool is_free = fl[0] == 1 && f[0][0] == 'f';
    if (!is_alloc && !is_free)
        return parse_error(p, "unknown event \"%s\" (expected 'a <id> <size>' or 'f <id>')", f[0],
                           fl[0]);
    int want = is_alloc ? 3 : 2;
    if (n != want)
        return parse_error(p,
                           is_alloc
                               ? "expected 'a <id> <size>' (fields separated by one space): \"%s\""
                               : "expected 'f <id>' (fields separated by one space): \"%s\"",
                           line, len);
    uint64_t id, size = 0;
    if (!parse_u64(f[1], fl[1], &id) || id == 0)
        return parse_error(p, "bad number \"%s\" for the id (a positive decimal integer)", f[1],
                           fl[1]);
    if (is_alloc && !parse_u64(f[2], fl[2], &size))
        return parse_error(p, "bad number \"%s\" for the size (decimal bytes)", f[2], fl[2]);
    if (!grow_events(t, cap)) return vram_fail(VRAM_ENOMEM, "out of host memory reading a trace");
    uint64_t found_slot;
    bool found = vram_map_get(&p->ids, id, &found_slot);
    vram_trace_event_t *e = &t->events[t->count];
    if (is_alloc) {
        if (found) return parse_error(p, "id %s is already live", f[1], fl[1]);
        uint32_t slot = 0;
        int rc = take_slot(p, &slot);
        if (rc) return rc;
        if (!vram_map_put(&p->ids, id, slot))
            return vram_fail(VRAM_ENOMEM, "out of host memory reading a trace");
        p->slot_size[slot] = size;
        p->live_bytes = p->live_bytes > UINT64_MAX - size ? UINT64_MAX : p->live_bytes + size;
        if (p->live_bytes > t->peak_live_bytes) t->peak_live_bytes = p->live_bytes;
        if (size > t->max_size) t->max_size = size;
        *e = (vram_trace_event_t){.size = size, .slot = slot, .is_alloc = true};
        t->allocs++;
    } else {
        if (!found)
            return parse_error(p, "unknown id %s (not allocated, or already freed)", f[1], fl[1]);
        uint32_t slot = (uint32_t)found_slot;
        vram_map_take(&p->ids, id, NULL);
        /* Saturated totals stay saturated: only a display figure. */
        if (p->live_bytes != UINT64_MAX) p->live_bytes -= p->slot_size[slot];
        int rc = give_slot(p, slot);
        if (rc) return rc;
        *e = (vram_trace_event_t){.size = 0, .slot = slot, .is_alloc = false};
    }
    t->count++;
    return 0;
}

int vram_trace_parse(const char *text, size_t len, const char *origin, vram_trace_t *out)
{
    if (!text || !out) return vram_fail(VRAM_EINVAL, "vram_trace_parse: NULL argument");
    parser_t p = {.origin = origin ? origin : "trace"};
    vram_trace_t t = {0};
    size_t cap = 0;
    int rc = 0;
    size_t pos = 0;
    while (pos < len && !rc) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *line = text + pos;
        size_t line_len = end - pos;
        if (line_len && line[line_len - 1] == '\r') line_len--;
        p.line++;
        if (memchr(line, '\0', line_len)) {
            rc = vram_fail(VRAM_EPARSE, "%s:%zu: NUL byte in the line", p.origin, p.line);
        } else if (line_len && line[0] != '#') {
            /* Blank lines are tolerated; comments start with '#'. */
            rc = parse_line(&p, &t, &cap, line, line_len);
        }
        pos = end + 1;
    }
    vram_map_clear(&p.ids);
    free(p.spare);
    free(p.slot_size);
    if (rc) {
        free(t.events);
        return rc;
    }
    t.slots = p.slots;
    *out = t;
    return 0;
}

int vram_trace_load(const char *path, vram_trace_t *out)
{
    char *buf;
    size_t len;
    int rc = vram_read_file(path, SIZE_MAX / 2, &buf, &len);
    if (rc) return rc;
    rc = vram_trace_parse(buf, len, path, out);
    free(buf);
    return rc;
}

void vram_trace_release(vram_trace_t *t)
{
    if (!t) return;
    free(t->events);
    *t = (vram_trace_t){0};
}
