/* What the job front ends rely on in libvram: the out-of-memory messages
 * (each one, split anywhere, never a look-alike), escaping of client strings,
 * edit distance, the micro-batch cap of a retry against a brute-force model,
 * and the pending reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vram.h"
#include "sched/sched.h"

static const char *feed_in_two(const char *text, size_t cut)
{
    vram_oom_scan_t s;
    vram_oom_scan_init(&s);
    vram_oom_scan_feed(&s, text, cut);
    return vram_oom_scan_feed(&s, text + cut, strlen(text) - cut);
}

static void oom_each_message_split_anywhere(void **state)
{
    (void)state;
    size_t n = 0;
    for (const char *m; (m = vram_oom_message(n)); n++) {
        char line[256];
        snprintf(line, sizeof line, "Traceback ...\n  File x.py\n%s: more text\n", m);
        for (size_t cut = 0; cut <= strlen(line); cut++)
            assert_string_equal(feed_in_two(line, cut), m);
    }
    assert_true(n >= 8);
}

static void oom_look_alikes_ignored(void **state)
{
    (void)state;
    static const char *lines[] = {
        "avoid out of memory fragmentation\nModuleNotFoundError: No module named 'x'\n",
        "out of memory\n",
        "OUT OF MEMORY\n",
        "cuda out of memory\n",
        "torch.cuda.OutOfMemory\n",
        "CUDA_ERROR_OUT_OF_MEMOR\n",
        "Killed (oom-killer)\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        for (size_t cut = 0; cut <= strlen(lines[i]); cut++)
            assert_null(feed_in_two(lines[i], cut));
}

static void oom_random_streams(void **state)
{
    (void)state;
    srand(7);
    char buf[20000];
    for (int round = 0; round < 300; round++) {
        size_t len = (size_t)(rand() % 15000);
        for (size_t i = 0; i < len; i++) /* lower case and bytes: no message by chance */
            buf[i] = (char)(rand() % 3 ? 'a' + rand() % 26 : rand() % 256 & 0x7f & ~0x40);
        const char *m = vram_oom_message((size_t)(rand() % 8));
        bool put = rand() % 2;
        if (put) {
            size_t at = len ? (size_t)rand() % len : 0;
            memmove(buf + at + strlen(m), buf + at, len - at);
            memcpy(buf + at, m, strlen(m));
            len += strlen(m);
        }
        vram_oom_scan_t s;
        vram_oom_scan_init(&s);
        const char *found = NULL;
        for (size_t at = 0; at < len;) {
            size_t piece = 1 + (size_t)rand() % 9000;
            if (piece > len - at) piece = len - at;
            found = vram_oom_scan_feed(&s, buf + at, piece);
            at += piece;
        }
        if (put)
            assert_string_equal(found, m);
        else
            assert_null(found);
    }
}

static void distance_pairs(void **state)
{
    (void)state;
    assert_int_equal(vram_edit_distance("status", "status"), 0);
    assert_int_equal(vram_edit_distance("stauts", "status"), 2);
    assert_int_equal(vram_edit_distance("mme", "mem"), 2);
    assert_int_equal(vram_edit_distance("", "jobs"), 4);
    assert_int_equal(vram_edit_distance("kitten", "sitting"), 3);
}

static void cap_keeps_effective_batch(void **state)
{
    (void)state;
    vram_job_request_t r = {.mem_bytes = 10ull << 30,
                            .gpus = 1,
                            .batch_size = 8,
                            .min_batch_size = 4,
                            .max_batch_size = 4,
                            .batch_bytes = {{4, 7ull << 30}, {8, 10ull << 30}},
                            .nbatch_bytes = 2};
    uint32_t acc = 0;
    uint64_t bytes = 0;
    assert_int_equal(vram_job_degrade(&r, 80ull << 30, &acc, &bytes), 4);
    assert_int_equal(acc, 2);
    /* the table's entry, not a figure derived from it */
    assert_int_equal(bytes, 7ull << 30);
    assert_int_equal(vram_job_least_bytes(&r), 7ull << 30);
    /* no table: the cap alone, the memory unchanged */
    vram_job_request_t f = {.mem_bytes = 1ull << 30,
                            .gpus = 1,
                            .batch_size = 64,
                            .min_batch_size = 16,
                            .max_batch_size = 16};
    assert_int_equal(vram_job_degrade(&f, 2ull << 30, &acc, &bytes), 16);
    assert_int_equal(acc, 4);
    assert_int_equal(bytes, 1ull << 30);
    assert_int_equal(vram_job_degrade(&f, 1ull << 29, &acc, &bytes), 0);
}

/* Reference: among the batches the job accepts (its table's at or below
 * the cap, and batch_size itself when uncapped) that fit, the fewest
 * accumulation steps, then the least memory for them. */
static void cap_against_brute_force(void **state)
{
    (void)state;
    srand(11);
    for (int round = 0; round < 20000; round++) {
        vram_job_request_t r = {.gpus = 1};
        r.batch_size = 1 + (uint32_t)(rand() % 128);
        r.min_batch_size = (uint32_t)(rand() % (r.batch_size + 1));
        r.max_batch_size = rand() % 3 ? (uint32_t)(rand() % (r.batch_size + 1)) : 0;
        uint32_t lo = r.min_batch_size ? r.min_batch_size : 1;
        /* a random monotone table, any shape (not a line) */
        uint64_t bytes = 1 + (uint64_t)(rand() % 50);
        for (uint32_t b = lo; b < r.batch_size && rand() % 4 && r.nbatch_bytes < 40; b++)
            if (rand() % 3 == 0) {
                bytes += (uint64_t)(rand() % 3 ? rand() % 5 : rand() % 500);
                r.batch_bytes[r.nbatch_bytes++] = (vram_batch_bytes_t){b, bytes};
            }
        r.mem_bytes = bytes + (uint64_t)(rand() % 500);
        if (vram_job_batch_bytes_check(&r) != 0) continue; /* a cap below every batch */
        uint64_t avail = (uint64_t)(rand() % 1200);
        uint32_t top =
            r.max_batch_size && r.max_batch_size < r.batch_size ? r.max_batch_size : r.batch_size;
        uint32_t best_b = 0, best_acc = 0;
        uint64_t best_bytes = 0;
        for (int i = 0; i <= r.nbatch_bytes; i++) {
            vram_batch_bytes_t e =
                i < r.nbatch_bytes ? r.batch_bytes[i] : (vram_batch_bytes_t){top, r.mem_bytes};
            if (i == r.nbatch_bytes && r.nbatch_bytes && top != r.batch_size) continue;
            if (e.batch > top || e.batch < lo || e.bytes > avail) continue;
            uint32_t acc = (r.batch_size + e.batch - 1) / e.batch;
            if (!best_acc || acc < best_acc || (acc == best_acc && e.bytes < best_bytes) ||
                (acc == best_acc && e.bytes == best_bytes && e.batch < best_b))
                best_b = e.batch, best_acc = acc, best_bytes = e.bytes;
        }
        uint32_t acc = 0;
        uint64_t got = 0;
        uint32_t b = vram_job_degrade(&r, avail, &acc, &got);
        if (!best_acc) {
            assert_int_equal(b, 0);
            continue;
        }
        assert_true(b >= lo && b <= top);
        assert_int_equal(acc, best_acc);
        assert_int_equal(got, best_bytes);
        assert_true(got <= avail);
        assert_true((uint64_t)b * acc >= r.batch_size);
    }
}

static void pending_reasons(void **state)
{
    (void)state;
    char buf[200];
    uint64_t free_b[2] = {16ull << 30, 4ull << 30};
    vram_job_request_t r = {.mem_bytes = 50ull << 30, .gpus = 1};
    assert_string_equal(vram_job_pending_reason(&r, free_b, 2, 1, buf, sizeof buf),
                        "waiting for 50.00 GiB on 1 GPU; GPU 0 has 16.00 GiB free for admission");
    r.gpus = 2;
    assert_string_equal(vram_job_pending_reason(&r, free_b, 2, 1, buf, sizeof buf),
                        "waiting for 50.00 GiB on 2 GPUs; GPU 0 has 16.00 GiB free for admission, "
                        "GPU 1 has 4.00 GiB free for admission");
    r = (vram_job_request_t){.mem_bytes = 2ull << 30, .gpus = 1, .npinned = 1, .pinned = {1}};
    assert_string_equal(vram_job_pending_reason(&r, free_b, 2, 3, buf, sizeof buf),
                        "fits now; 2 job(s) ahead in the queue go first");
    /* a degradable job counts at its smallest batch */
    r = (vram_job_request_t){.mem_bytes = 40ull << 30,
                             .gpus = 1,
                             .batch_size = 64,
                             .min_batch_size = 8,
                             .batch_bytes = {{8, 12ull << 30}, {32, 28ull << 30}},
                             .nbatch_bytes = 2};
    assert_string_equal(vram_job_pending_reason(&r, free_b, 1, 1, buf, sizeof buf),
                        "fits now; admitted at the next pass");
    r.batch_bytes[0] = r.batch_bytes[1];
    r.nbatch_bytes = 1;
    assert_string_equal(vram_job_pending_reason(&r, free_b, 1, 1, buf, sizeof buf),
                        "waiting for 28.00 GiB on 1 GPU; GPU 0 has 16.00 GiB free for admission");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(oom_each_message_split_anywhere),
        cmocka_unit_test(oom_look_alikes_ignored),
        cmocka_unit_test(oom_random_streams),
        cmocka_unit_test(distance_pairs),
        cmocka_unit_test(cap_keeps_effective_batch),
        cmocka_unit_test(cap_against_brute_force),
        cmocka_unit_test(pending_reasons),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
