/* The job-request decoder shared by vramd, the CLI and the fuzzers, and the
 * escaping of client strings for terminals and logs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "vram.h"
#include "sched/sched.h"
#include "core/escape.h"

static int decode(const char *body, vram_job_request_t *q, vram_request_error_t *e)
{
    return vram_job_request_decode(body, strlen(body), q, e);
}

/* decode refuses body with status and a message containing `part`. */
static void refused(const char *body, int status, const char *part)
{
    vram_job_request_t q;
    vram_request_error_t e;
    int rc = decode(body, &q, &e);
    if (e.status != status)
        fail_msg("%s: status %d (%s), not %d", body, e.status, e.message, status);
    assert_int_equal(rc, status == 422 ? VRAM_EINVAL : VRAM_EPARSE);
    assert_int_equal(e.status, status);
    if (!strstr(e.message, part))
        fail_msg("%s: message \"%s\" lacks \"%s\"", body, e.message, part);
}

static void decodes_every_field(void **st)
{
    (void)st;
    vram_job_request_t q;
    vram_request_error_t e;
    const char *body = "{\"name\":\"n\",\"command\":\"c\",\"mem_bytes\":\"2GiB\",\"gpus\":2,"
                       "\"priority\":-3,\"timeout_s\":1.5,\"pid\":7,\"batch_size\":64,"
                       "\"min_batch_size\":8,\"devices\":[1,0],\"batch_bytes\":[{\"batch\":8,"
                       "\"bytes\":\"1GiB\"},{\"batch\":32,\"bytes\":2147483648}]}";
    assert_int_equal(decode(body, &q, &e), 0);
    assert_string_equal(q.name, "n");
    assert_string_equal(q.command, "c");
    assert_int_equal(q.mem_bytes, 2ULL << 30);
    assert_int_equal(q.gpus, 2);
    assert_int_equal(q.priority, -3);
    assert_true(q.timeout_s == 1.5);
    assert_int_equal(q.pid, 7);
    assert_int_equal(q.batch_size, 64);
    assert_int_equal(q.min_batch_size, 8);
    assert_int_equal(q.nbatch_bytes, 2);
    assert_int_equal(q.batch_bytes[0].batch, 8);
    assert_int_equal(q.batch_bytes[0].bytes, 1ULL << 30);
    assert_int_equal(q.batch_bytes[1].batch, 32);
    assert_int_equal(q.batch_bytes[1].bytes, 2ULL << 30);
    assert_int_equal(q.npinned, 2);
    assert_int_equal(q.pinned[0], 1);
    /* absent fields: the daemon's defaults */
    assert_int_equal(decode("{\"mem_bytes\":1}", &q, &e), 0);
    assert_true(q.timeout_s == -1);
    assert_int_equal(q.gpus, 0);
}

static void refuses_bad_input_naming_the_field(void **st)
{
    (void)st;
    refused("", 400, "empty");
    refused("{\"mem_bytes\":", 400, "line 1");
    refused("[1]", 400, "JSON object");
    refused("{\"mem_bytes\":1,\"mem_bytes\":2}", 400, "");
    refused("{\"memory\":1}", 400, "\"memory\"");
    refused("{\"mem_bytes\":1,\"gpus\":\"two\"}", 400, "\"gpus\"");
    refused("{\"gpus\":1}", 422, "\"mem_bytes\" is required");
    refused("{\"mem_bytes\":0}", 422, "mem_bytes");
    refused("{\"mem_bytes\":-1}", 422, "mem_bytes");
    refused("{\"mem_bytes\":\"lots\"}", 422, "mem_bytes");
    /* a size string is held to the integer's limit (2^60) */
    refused("{\"mem_bytes\":1152921504606846977}", 422, "mem_bytes");
    refused("{\"mem_bytes\":\"2000000TiB\"}", 422, "at most");
    /* the linear figure of earlier releases: refused, naming its replacement */
    refused("{\"mem_bytes\":1,\"batch_size\":8,\"per_sample_bytes\":4}", 422, "batch_bytes");
    /* -0 is not a timeout */
    refused("{\"mem_bytes\":1,\"timeout_s\":-0.0}", 422, "timeout_s");
    refused("{\"mem_bytes\":1,\"timeout_s\":-1}", 422, "timeout_s");
    /* a NUL inside a string would cut it */
    refused("{\"mem_bytes\":1,\"name\":\"a\\u0000b\"}", 400, "");
    refused("{\"mem_bytes\":1,\"devices\":[\"0\"]}", 400, "devices");
    refused("{\"mem_bytes\":1,\"devices\":[4096]}", 422, "devices");
}

/* The batch table is untrusted: bounded, monotone, within the request, and
 * every refusal names the bad entry. */
static void refuses_bad_batch_tables(void **st)
{
    (void)st;
#define REQ(table) "{\"mem_bytes\":1000,\"batch_size\":64,\"min_batch_size\":4," table "}"
    refused(REQ("\"batch_bytes\":{}"), 400, "batch_bytes");
    refused(REQ("\"batch_bytes\":[5]"), 400, "batch_bytes[0]");
    refused(REQ("\"batch_bytes\":[{\"batch\":8}]"), 422, "batch_bytes[0]");
    refused(REQ("\"batch_bytes\":[{\"batch\":8,\"bytes\":1,\"x\":1}]"), 400,
            "batch_bytes[0]: unknown field \"x\"");
    refused(REQ("\"batch_bytes\":[{\"batch\":8,\"bytes\":\"much\"}]"), 422, "batch_bytes[0]");
    refused(REQ("\"batch_bytes\":[{\"batch\":0,\"bytes\":1}]"), 422, "batch_bytes[0]");
    /* not monotone: less memory at the larger batch */
    refused(REQ("\"batch_bytes\":[{\"batch\":8,\"bytes\":500},{\"batch\":16,\"bytes\":400}]"), 422,
            "batch_bytes[1]: 400 bytes at batch 16, less than 500");
    /* batches out of order or repeated */
    refused(REQ("\"batch_bytes\":[{\"batch\":16,\"bytes\":5},{\"batch\":8,\"bytes\":6}]"), 422,
            "batch_bytes[1]: batch 8 follows batch 16");
    refused(REQ("\"batch_bytes\":[{\"batch\":8,\"bytes\":5},{\"batch\":8,\"bytes\":6}]"), 422,
            "batch_bytes[1]");
    /* more than the whole request */
    refused(REQ("\"batch_bytes\":[{\"batch\":8,\"bytes\":5},{\"batch\":16,\"bytes\":1001}]"), 422,
            "batch_bytes[1]: 1001 bytes at batch 16, more than mem_bytes 1000");
    /* outside min_batch_size..batch_size, or disagreeing at batch_size */
    refused(REQ("\"batch_bytes\":[{\"batch\":2,\"bytes\":5}]"), 422, "batch_bytes[0]: batch 2");
    refused(REQ("\"batch_bytes\":[{\"batch\":65,\"bytes\":5}]"), 422, "batch_bytes[0]: batch 65");
    refused(REQ("\"batch_bytes\":[{\"batch\":64,\"bytes\":999}]"), 422, "batch_bytes[0]");
    refused("{\"mem_bytes\":1000,\"batch_bytes\":[{\"batch\":1,\"bytes\":5}]}", 422,
            "needs batch_size");
    /* a cap below every listed batch could never be granted */
    refused(REQ("\"max_batch_size\":6,\"batch_bytes\":[{\"batch\":8,\"bytes\":5}]"), 422,
            "max_batch_size 6");
#undef REQ
    /* too long: at most VRAM_JOB_MAX_BATCHES entries */
    char body[8192];
    size_t at = (size_t)snprintf(body, sizeof body,
                                 "{\"mem_bytes\":100000,\"batch_size\":1000,\"batch_bytes\":[");
    for (int i = 1; i <= VRAM_JOB_MAX_BATCHES + 1; i++)
        at += (size_t)snprintf(body + at, sizeof body - at, "%s{\"batch\":%d,\"bytes\":%d}",
                               i > 1 ? "," : "", i, i);
    snprintf(body + at, sizeof body - at, "]}");
    refused(body, 422, "65 entries; at most 64");
    /* a valid one of exactly the limit passes */
    at = (size_t)snprintf(body, sizeof body,
                          "{\"mem_bytes\":100000,\"batch_size\":1000,\"batch_bytes\":[");
    for (int i = 1; i <= VRAM_JOB_MAX_BATCHES; i++)
        at += (size_t)snprintf(body + at, sizeof body - at, "%s{\"batch\":%d,\"bytes\":%d}",
                               i > 1 ? "," : "", i, i);
    snprintf(body + at, sizeof body - at, "]}");
    vram_job_request_t q;
    vram_request_error_t e;
    assert_int_equal(decode(body, &q, &e), 0);
    assert_int_equal(q.nbatch_bytes, VRAM_JOB_MAX_BATCHES);
}

static void decodes_finish_bodies(void **st)
{
    (void)st;
    vram_job_end_t end;
    vram_request_error_t e;
    assert_int_equal(vram_job_finish_decode("", 0, &end, &e), 0);
    assert_int_equal(end.exit_status, 0);
    assert_int_equal(end.reason, VRAM_END_EXIT);
    const char *b = "{\"exit_status\":3,\"error\":\"boom\"}";
    assert_int_equal(vram_job_finish_decode(b, strlen(b), &end, &e), 0);
    assert_int_equal(end.exit_status, 3);
    assert_string_equal(end.error, "boom");
    b = "{\"exit_status\":5000}";
    assert_int_equal(vram_job_finish_decode(b, strlen(b), &end, &e), VRAM_EINVAL);
    char longer[400];
    snprintf(longer, sizeof longer, "{\"error\":\"%0300d\"}", 0);
    assert_int_equal(vram_job_finish_decode(longer, strlen(longer), &end, &e), VRAM_EINVAL);
}

/* Names are printable text: every user's terminal shows them. */
static void names_are_printable(void **st)
{
    (void)st;
    static const char *const bad[] = {
        "{\"mem_bytes\":1024,\"name\":\"a\\u001b[2Jb\"}",
        "{\"mem_bytes\":1024,\"name\":\"line\\nbreak\"}",
        "{\"mem_bytes\":1024,\"name\":\"c1\\u009bcsi\"}",
        "{\"mem_bytes\":1024,\"name\":\"del\\u007f\"}",
    };
    vram_job_request_t q;
    vram_request_error_t e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(vram_job_request_decode(bad[i], strlen(bad[i]), &q, &e), VRAM_EINVAL);
        assert_int_equal(e.status, 422);
        assert_non_null(strstr(e.message, "control character"));
    }
    const char *good = "{\"mem_bytes\":1024,\"name\":\"J\\u00fcrgen \\u8bad\\u7ec3 #1\"}";
    assert_int_equal(vram_job_request_decode(good, strlen(good), &q, &e), 0);
    assert_string_equal(q.name, "J\xc3\xbcrgen \xe8\xae\xad\xe7\xbb\x83 #1");
}

/* How a job ended travels in fields of its own, never in words of the error
 * text: an out-of-memory end and the batch its retry asks for. */
static void decodes_structured_ends(void **st)
{
    (void)st;
    vram_job_end_t end;
    vram_request_error_t e;
    const char *b = "{\"exit_status\":1,\"reason\":\"oom\",\"retry_batch\":4,"
                    "\"error\":\"CUDA out of memory\"}";
    assert_int_equal(vram_job_finish_decode(b, strlen(b), &end, &e), 0);
    assert_int_equal(end.reason, VRAM_END_OOM);
    assert_int_equal(end.retry_batch, 4);
    /* words in the text mean nothing: this end is a plain exit */
    b = "{\"exit_status\":1,\"error\":\"out of memory; retrying with batch 4\"}";
    assert_int_equal(vram_job_finish_decode(b, strlen(b), &end, &e), 0);
    assert_int_equal(end.reason, VRAM_END_EXIT);
    assert_int_equal(end.retry_batch, 0);
    b = "{\"reason\":\"tired\"}";
    assert_int_equal(vram_job_finish_decode(b, strlen(b), &end, &e), VRAM_EINVAL);
    assert_non_null(strstr(e.message, "reason"));
    b = "{\"retry_batch\":4}";
    assert_int_equal(vram_job_finish_decode(b, strlen(b), &end, &e), VRAM_EINVAL);
    assert_non_null(strstr(e.message, "oom"));
    b = "{\"reason\":\"oom\",\"retry_batch\":-1}";
    assert_int_equal(vram_job_finish_decode(b, strlen(b), &end, &e), VRAM_EINVAL);
    assert_string_equal(vram_end_reason_name(VRAM_END_OOM), "oom");
    assert_int_equal(vram_end_reason_parse("exit"), VRAM_END_EXIT);
}

/* Labels: sorted by key, bounded in number, key syntax and value bytes. */
static void decodes_labels(void **st)
{
    (void)st;
    vram_job_request_t q;
    vram_request_error_t e;
    const char *body = "{\"mem_bytes\":1,\"labels\":{\"slurm_step_id\":\"0\","
                       "\"slurm_job_id\":\"123\",\"_x9\":\"a \\\"b\\\\ ~\"}}";
    assert_int_equal(decode(body, &q, &e), 0);
    assert_int_equal(q.nlabels, 3);
    assert_string_equal(q.labels[0].key, "_x9");
    assert_string_equal(q.labels[0].value, "a \"b\\ ~");
    assert_string_equal(q.labels[1].key, "slurm_job_id");
    assert_string_equal(q.labels[1].value, "123");
    assert_string_equal(q.labels[2].key, "slurm_step_id");
    assert_int_equal(decode("{\"mem_bytes\":1,\"labels\":{}}", &q, &e), 0);
    assert_int_equal(q.nlabels, 0);
    /* 32-character key and 64-byte value: the limits themselves */
    char ok[256], value[65];
    memset(value, 'v', 64);
    value[64] = 0;
    snprintf(ok, sizeof ok, "{\"mem_bytes\":1,\"labels\":{\"%s\":\"%s\"}}",
             "k0123456789012345678901234567890", value);
    assert_int_equal(decode(ok, &q, &e), 0);
    assert_int_equal(strlen(q.labels[0].value), 64);
    char bad[256];
    snprintf(bad, sizeof bad, "{\"mem_bytes\":1,\"labels\":{\"%s\":\"x\"}}",
             "k01234567890123456789012345678901"); /* 33 characters */
    refused(bad, 422, "k01234567890123456789012345678901");
    snprintf(bad, sizeof bad, "{\"mem_bytes\":1,\"labels\":{\"k\":\"%sv\"}}", value);
    refused(bad, 422, "\"k\"");
    refused("{\"mem_bytes\":1,\"labels\":[\"a\"]}", 400, "labels");
    refused("{\"mem_bytes\":1,\"labels\":\"a=b\"}", 400, "labels");
    refused("{\"mem_bytes\":1,\"labels\":{\"k\":1}}", 400, "\"k\"");
    refused("{\"mem_bytes\":1,\"labels\":{\"k\":null}}", 400, "\"k\"");
    refused("{\"mem_bytes\":1,\"labels\":{\"Job\":\"x\"}}", 422, "Job");
    refused("{\"mem_bytes\":1,\"labels\":{\"9a\":\"x\"}}", 422, "9a");
    refused("{\"mem_bytes\":1,\"labels\":{\"a-b\":\"x\"}}", 422, "a-b");
    refused("{\"mem_bytes\":1,\"labels\":{\"\":\"x\"}}", 422, "labels");
    refused("{\"mem_bytes\":1,\"labels\":{\"k\":\"a\\nb\"}}", 422, "printable");
    refused("{\"mem_bytes\":1,\"labels\":{\"k\":\"\\u00e9\"}}", 422, "printable");
    refused("{\"mem_bytes\":1,\"labels\":{\"k\":\"a\\u0000b\"}}", 400, "u0000"); /* jansson */
    /* a control byte in a bad key is escaped in the message */
    refused("{\"mem_bytes\":1,\"labels\":{\"a\\u001bb\":\"x\"}}", 422, "a\\x1bb");
    refused("{\"mem_bytes\":1,\"labels\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\",\"d\":\"4\","
            "\"e\":\"5\",\"f\":\"6\",\"g\":\"7\",\"h\":\"8\",\"i\":\"9\"}}",
            422, "at most 8");
}

/* POST /v1/jobs/{id}/peak: one required integer, held to 2^60 like sizes. */
static void decodes_peak_bodies(void **st)
{
    (void)st;
    uint64_t peak = 1;
    vram_request_error_t e;
    const char *b = "{\"peak_bytes\":123456789}";
    assert_int_equal(vram_job_peak_decode(b, strlen(b), &peak, &e), 0);
    assert_int_equal(peak, 123456789);
    b = "{\"peak_bytes\":1152921504606846976}"; /* 2^60 */
    assert_int_equal(vram_job_peak_decode(b, strlen(b), &peak, &e), 0);
    assert_int_equal(peak, 1ULL << 60);
    const struct {
        const char *body;
        int status;
        const char *names;
    } bad[] = {
        {"", 400, "empty"},
        {"{}", 422, "peak_bytes"},
        {"{\"peak_bytes\":null}", 422, "peak_bytes"},
        {"{\"peak_bytes\":1152921504606846977}", 422, "peak_bytes"},
        {"{\"peak_bytes\":-1}", 422, "peak_bytes"},
        {"{\"peak_bytes\":\"10GiB\"}", 400, "peak_bytes"},
        {"{\"peak_bytes\":1.5}", 400, "peak_bytes"},
        {"{\"peak_bytes\":1,\"extra\":2}", 400, "extra"},
        {"{\"peak_bytes\":1,\"peak_bytes\":2}", 400, "line"},
        {"[1]", 400, "object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = vram_job_peak_decode(bad[i].body, strlen(bad[i].body), &peak, &e);
        assert_int_equal(rc, bad[i].status == 422 ? VRAM_EINVAL : VRAM_EPARSE);
        assert_int_equal(e.status, bad[i].status);
        if (!strstr(e.message, bad[i].names)) fail_msg("%s: %s", bad[i].body, e.message);
    }
}

static void escapes_control_characters(void **st)
{
    (void)st;
    char out[128];
    size_t n = vram_escape_text("a\nb\tc\\d\x1b[31mred\x7f", out, sizeof out);
    assert_string_equal(out, "a\\nb\\tc\\\\d\\x1b[31mred\\x7f");
    assert_int_equal(n, strlen(out));
    /* UTF-8 stays; C1 controls (U+009B, a CSI) and invalid bytes are escaped */
    vram_escape_text("h\xc3\xa9 \xc2\x9b x\xff", out, sizeof out);
    assert_string_equal(out, "h\xc3\xa9 \\xc2\\x9b x\\xff");
    /* truncation: whole units only, length like snprintf */
    char small[6];
    n = vram_escape_text("ab\ncd", small, sizeof small);
    assert_int_equal(n, 6);
    assert_string_equal(small, "ab\\nc");
    assert_int_equal(vram_escape_text(NULL, small, sizeof small), 0);
    assert_string_equal(small, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decodes_every_field),
        cmocka_unit_test(refuses_bad_input_naming_the_field),
        cmocka_unit_test(refuses_bad_batch_tables),
        cmocka_unit_test(decodes_finish_bodies),
        cmocka_unit_test(decodes_structured_ends),
        cmocka_unit_test(names_are_printable),
        cmocka_unit_test(decodes_peak_bodies),
        cmocka_unit_test(decodes_labels),
        cmocka_unit_test(escapes_control_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
