/* The trace parser (errors name the line) and the trace writer
 * (VRAM_POOL_TRACE), which must produce what the parser reads back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "pool/tools/trace.h"
#include "unit/pool_sim.h"

static int parse(const char *text, vram_trace_t *t)
{
    return vram_trace_parse(text, strlen(text), "t.trace", t);
}

static void good_trace(void **state)
{
    (void)state;
    vram_trace_t t;
    const char *text = "# a comment\n"
                       "a 1 100\n"
                       "a 7 50\n"
                       "\n"
                       "f 1\n"
                       "a 1 30\r\n" /* an id may come back after its free; CRLF is fine */
                       "a 2 0\n"
                       "f 7\n"
                       "a 3 1000"; /* no final newline */
    assert_int_equal(parse(text, &t), 0);
    assert_int_equal(t.count, 7);
    assert_int_equal(t.allocs, 5);
    assert_int_equal(t.slots, 3);              /* at most three live at once */
    assert_int_equal(t.peak_live_bytes, 1030); /* 30 + 0 + 1000 beats 100 + 50 */
    assert_int_equal(t.max_size, 1000);
    assert_true(t.events[0].is_alloc);
    assert_int_equal(t.events[0].size, 100);
    assert_false(t.events[2].is_alloc);
    assert_int_equal(t.events[2].slot, t.events[0].slot); /* f 1 frees a 1's slot */
    assert_int_equal(t.events[5].slot, t.events[1].slot); /* f 7 */
    vram_trace_release(&t);
    vram_trace_release(&t); /* twice is harmless */

    assert_int_equal(parse("", &t), 0);
    assert_int_equal(t.count, 0);
    vram_trace_release(&t);

    /* The largest size parses; live totals saturate instead of wrapping. */
    assert_int_equal(parse("a 1 18446744073709551615\na 2 5\n", &t), 0);
    assert_int_equal(t.max_size, UINT64_MAX);
    assert_int_equal(t.peak_live_bytes, UINT64_MAX);
    vram_trace_release(&t);
}

typedef struct {
    const char *text;
    const char *line; /* "t.trace:N:" */
    const char *what;
} bad_case_t;

static void malformed_traces(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {"a 1 10\nx 2 10\n", "t.trace:2:", "unknown event \"x\""},
        {"a 1 10\nalloc 2 10\n", "t.trace:2:", "unknown event \"alloc\""},
        {"# c\n a 1 10\n", "t.trace:2:", "unknown event"},
        {"a 1 10x\n", "t.trace:1:", "bad number \"10x\""},
        {"a 1 -5\n", "t.trace:1:", "bad number \"-5\""},
        {"a 0 5\n", "t.trace:1:", "bad number \"0\" for the id"},
        {"a +1 5\n", "t.trace:1:", "bad number \"+1\""},
        {"a 1 18446744073709551616\n", "t.trace:1:", "bad number"},
        {"a 1 5\nf 2\n", "t.trace:2:", "unknown id 2"},
        {"a 1 5\nf 1\nf 1\n", "t.trace:3:", "unknown id 1"},
        {"a 1 5\na 1 6\n", "t.trace:2:", "id 1 is already live"},
        {"a 1\n", "t.trace:1:", "expected 'a <id> <size>'"},
        {"a 1 5 6\n", "t.trace:1:", "expected 'a <id> <size>'"},
        {"a  1 5\n", "t.trace:1:", "expected 'a <id> <size>'"},
        {"a 1 5\nf 1 5\n", "t.trace:2:", "expected 'f <id>'"},
        {"a 1 5\nf\n", "t.trace:2:", "expected 'f <id>'"},
        {"a 1 5\n\n\nf x\n", "t.trace:4:", "bad number \"x\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vram_trace_t t = {.count = 12345};
        int rc = parse(cases[i].text, &t);
        if (rc != VRAM_EPARSE) fail_msg("case %zu: rc %d, expected VRAM_EPARSE", i, rc);
        const char *msg = vram_last_error();
        if (!strstr(msg, cases[i].line) || !strstr(msg, cases[i].what))
            fail_msg("case %zu: message \"%s\" lacks \"%s\" or \"%s\"", i, msg, cases[i].line,
                     cases[i].what);
        assert_int_equal(t.count, 12345); /* untouched on failure */
    }
    /* A NUL inside a line is malformed too. */
    vram_trace_t t;
    assert_int_equal(vram_trace_parse("a 1 5\na 2\0 5\n", 12, "t.trace", &t), VRAM_EPARSE);
    assert_non_null(strstr(vram_last_error(), "t.trace:2:"));
}

static void missing_file(void **state)
{
    (void)state;
    vram_trace_t t;
    assert_int_equal(vram_trace_load("/nonexistent/dir/x.trace", &t), VRAM_EIO);
    assert_non_null(strstr(vram_last_error(), "/nonexistent/dir/x.trace"));
}

/* The recorded traces under ../shared agree with their README. */
static void shared_traces(void **state)
{
    (void)state;
    const char *src = getenv("VRAM_SOURCE_DIR");
    if (!src || !*src) src = ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/../shared/traces/mlp_train.trace", src);
    if (access(path, R_OK) != 0) {
        print_message("skipped: %s not present\n", path);
        skip();
    }
    static const struct {
        const char *name;
        size_t events, allocs;
        double peak_mib;
    } want[] = {{"mlp_train", 1070, 535, 450.9}, {"resnet18_train", 29268, 14634, 480.9}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/../shared/traces/%s.trace", src, want[i].name);
        vram_trace_t t;
        if (vram_trace_load(path, &t)) fail_msg("%s", vram_last_error());
        assert_int_equal(t.count, want[i].events);
        assert_int_equal(t.allocs, want[i].allocs);
        double peak = (double)t.peak_live_bytes / 1048576.0;
        assert_true(peak > want[i].peak_mib - 0.05 && peak < want[i].peak_mib + 0.05);
        vram_trace_release(&t);
    }
}

/* VRAM_POOL_TRACE writes what the pool was asked; the parser reads it back. */
static void writer_round_trip(void **state)
{
    (void)state;
    pool_sim_t sim;
    assert_int_equal(pool_sim_open(&sim, "1xtrace:4GiB"), 0);
    char pattern[512], path[512];
    snprintf(pattern, sizeof pattern, "%s/pool-%%d.trace", sim.dir);
    snprintf(path, sizeof path, "%s/pool-0.trace", sim.dir);
    vram_pool_config_t cfg = {.strategy = VRAM_POOL_BALANCED, .trace_path = pattern};
    vram_pool_t *pool;
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), 0);
    static const size_t sizes[] = {100, 5 << 20, 4096, 64 << 20, 1, 777};
    void *p[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(vram_pool_alloc(pool, sizes[i], NULL, &p[i]), 0);
    assert_int_equal(vram_pool_free(pool, p[1]), 0);
    assert_int_equal(vram_pool_free(pool, p[4]), 0);
    assert_int_equal(vram_pool_free(pool, p[1]), VRAM_EINVAL); /* not recorded */
    void *again;
    assert_int_equal(vram_pool_alloc(pool, 12345, NULL, &again), 0);
    assert_int_equal(vram_pool_free(pool, p[0]), 0);
    /* Line-buffered: complete before the pool is destroyed. */
    vram_trace_t t;
    if (vram_trace_load(path, &t)) fail_msg("%s", vram_last_error());
    assert_int_equal(t.count, 10);
    assert_int_equal(t.allocs, 7);
    for (int i = 0; i < 6; i++) {
        assert_true(t.events[i].is_alloc);
        assert_int_equal(t.events[i].size, sizes[i]);
    }
    assert_false(t.events[6].is_alloc);
    assert_int_equal(t.events[6].slot, t.events[1].slot);
    assert_int_equal(t.events[7].slot, t.events[4].slot);
    assert_int_equal(t.events[8].size, 12345);
    assert_int_equal(t.events[9].slot, t.events[0].slot);
    vram_trace_release(&t);
    vram_pool_destroy(pool);
    unlink(path);

    cfg.trace_path = "/nonexistent/dir/pool.trace";
    assert_int_equal(vram_pool_create(sim.ctx, 0, &cfg, &pool), VRAM_EIO);
    assert_non_null(strstr(vram_last_error(), "/nonexistent/dir/pool.trace"));
    pool_sim_close(&sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_trace),        cmocka_unit_test(malformed_traces),
        cmocka_unit_test(missing_file),      cmocka_unit_test(shared_traces),
        cmocka_unit_test(writer_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
