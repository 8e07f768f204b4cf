/* The JSON-in/JSON-out layer: answers equal the struct API's, every bad
 * request is refused with a message naming the bad part and no reply. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "vram.h"

static json_t *call(int (*fn)(const char *, char **), const char *req)
{
    char *out = (char *)1;
    int rc = fn(req, &out);
    if (rc) {
        assert_null(out);
        return NULL;
    }
    json_t *doc = json_loads(out, 0, NULL);
    vram_json_free(out);
    assert_non_null(doc);
    return doc;
}

static json_int_t at(json_t *doc, const char *obj, const char *key)
{
    json_t *o = obj ? json_object_get(doc, obj) : doc;
    return json_integer_value(json_object_get(o, key));
}

static void estimate_equals_struct_api(void **state)
{
    (void)state;
    json_t *doc = call(vram_estimate_json, "{\"model\": \"gpt2\", \"batch_size\": 8, \"seq_len\": "
                                           "512, \"precision\": \"amp-bf16\", \"overhead_bytes\": "
                                           "\"256MiB\"}");
    assert_non_null(doc);
    vram_model_t m;
    assert_int_equal(vram_model_find("gpt2", &m), 0);
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.batch_size = 8;
    c.seq_len = 512;
    c.precision = VRAM_PREC_AMP_BF16;
    c.overhead_bytes = 256ull << 20;
    vram_estimate_t e;
    assert_int_equal(vram_estimate(&m, &c, &e), 0);
    assert_int_equal(at(doc, "bytes", "total"), e.total);
    assert_int_equal(at(doc, "bytes", "activations"), e.activations);
    assert_int_equal(at(doc, NULL, "parameters_count"), e.parameters_count);
    assert_string_equal(json_string_value(json_object_get(doc, "precision")), "amp-bf16");
    json_decref(doc);
}

static void plan_equals_struct_api(void **state)
{
    (void)state;
    json_t *doc = call(vram_plan_json, "{\"profile\": {\"parameters\": 1000000, "
                                       "\"activation_bytes_per_sample\": 1048576}, "
                                       "\"gpu_mem\": 1073741824, \"target\": 0.5, "
                                       "\"power_of_two\": false, \"batch_size\": 4096}");
    assert_non_null(doc);
    vram_model_t m;
    assert_int_equal(vram_model_from_profile_json("{\"parameters\": 1000000, "
                                                  "\"activation_bytes_per_sample\": 1048576}",
                                                  "t", &m),
                     0);
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    vram_plan_config_t pc;
    vram_plan_config_init(&pc);
    pc.total_bytes = pc.free_bytes = 1ull << 30;
    pc.target = 0.5;
    pc.power_of_two = false;
    pc.batch_size = 4096;
    vram_plan_t p;
    assert_int_equal(vram_plan(&m, &c, &pc, &p), 0);
    assert_int_equal(at(doc, "recommendations", "maximum"), p.maximum);
    assert_int_equal(at(doc, "recommendations", "largest_fitting"), p.max_batch_raw);
    assert_int_equal(at(doc, "current", "micro_batch_size"), p.micro_batch_size);
    assert_int_equal(at(doc, NULL, "model_bytes"), p.model_bytes);
    assert_int_equal(at(doc, "shown", "total_bytes"), p.shown.total);
    assert_int_equal(at(doc, "current", "total_bytes"), p.shown.total);
    assert_true(json_array_size(json_object_get(doc, "suggestions")) == (size_t)p.nsuggestions);
    json_decref(doc);
}

/* vram_batch_table_json lists vram_estimate_batch_table's entries (the
 * cap vramd accepts), the last at batch_size, and refuses what a table
 * request cannot be. */
static void batch_table_equals_struct_api(void **state)
{
    (void)state;
    json_t *doc = call(vram_batch_table_json, "{\"model\": \"gpt2\", \"batch_size\": 200, "
                                              "\"seq_len\": 256, \"min_batch_size\": 3}");
    assert_non_null(doc);
    vram_model_t m;
    assert_int_equal(vram_model_find("gpt2", &m), 0);
    vram_estimate_config_t c;
    vram_estimate_config_init(&c);
    c.batch_size = 200;
    c.seq_len = 256;
    vram_batch_bytes_t t[VRAM_BATCH_TABLE_MAX];
    int n = 0;
    assert_int_equal(vram_estimate_batch_table(&m, &c, 3, t, VRAM_BATCH_TABLE_MAX, &n), 0);
    json_t *list = json_object_get(doc, "batch_bytes");
    assert_int_equal(json_array_size(list), (size_t)n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(at(json_array_get(list, (size_t)i), NULL, "batch"), t[i].batch);
        assert_int_equal(at(json_array_get(list, (size_t)i), NULL, "bytes"), t[i].bytes);
    }
    assert_int_equal(t[n - 1].batch, 200);
    assert_int_equal(at(doc, NULL, "mem_bytes"), t[n - 1].bytes);
    assert_int_equal(at(doc, NULL, "min_batch_size"), 3);
    json_decref(doc);
    static const struct {
        const char *request, *needle;
    } bad[] = {
        {"{\"model\": \"gpt2\", \"batch_size\": 8, \"min_batch_size\": 0}", "min_batch_size"},
        {"{\"model\": \"gpt2\", \"batch_size\": 8, \"min_batch_size\": 9}", "min_batch_size"},
        {"{\"model\": \"gpt2\", \"min_batch_size\": \"2\"}", "min_batch_size"},
        {"{\"model\": \"gpt2\", \"gpu_mem\": 1000}", "gpu_mem"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = (char *)1;
        if (vram_batch_table_json(bad[i].request, &out) == 0 ||
            !strstr(vram_last_error(), bad[i].needle))
            fail_msg("%s: \"%s\"", bad[i].request, vram_last_error());
        assert_null(out);
    }
    /* min_batch_size belongs to table requests only */
    assert_null(call(vram_estimate_json, "{\"model\": \"gpt2\", \"min_batch_size\": 1}"));
    assert_int_equal(vram_batch_table_json("{}", NULL), VRAM_EINVAL);
}

static void bad_requests_are_named(void **state)
{
    (void)state;
    static const struct {
        const char *request, *needle;
        int rc;
    } cases[] = {
        {"{\"model\": \"gpt2\",", "line 1", VRAM_EPARSE},
        {"[1]", "not a JSON object", VRAM_EPARSE},
        {"{\"model\": \"gpt2\", \"batch\": 8}", "unknown key \"batch\"", VRAM_EINVAL},
        {"{\"model\": \"gpt2\", \"gpu_mem\": 8}", "unknown key \"gpu_mem\"", VRAM_EINVAL},
        {"{\"batch_size\": 8}", "exactly one of", VRAM_EINVAL},
        {"{\"model\": \"gpt2\", \"hf_config\": \"x\"}", "exactly one of", VRAM_EINVAL},
        {"{\"model\": 7}", "\"model\" must be a string", VRAM_EINVAL},
        {"{\"model\": \"gpt2\", \"batch_size\": \"8\"}", "\"batch_size\" must be an integer",
         VRAM_EINVAL},
        {"{\"model\": \"gpt2\", \"batch_size\": -3}", "batch_size \"-3\": give an integer",
         VRAM_EINVAL},
        {"{\"model\": \"gpt2\", \"zero_stage\": 4}",
         "zero_stage \"4\": give an integer from 0 to 3", VRAM_EINVAL},
        {"{\"model\": \"gpt2\", \"mode\": \"eval\"}", "unknown mode \"eval\"", VRAM_EINVAL},
        {"{\"model\": \"gpt2\", \"overhead_bytes\": \"lots\"}", "overhead_bytes \"lots\"",
         VRAM_EINVAL},
        {"{\"model\": \"nosuchmodel\"}", "nosuchmodel", VRAM_ENOENT},
        {"{\"profile\": 3}", "\"profile\" must be", VRAM_EINVAL},
        {"{\"profile\": {\"parameters\": 1}}", "activation_bytes_per_sample", VRAM_EPARSE},
        {"{\"hf_config\": \"/nonexistent/config.json\"}", "/nonexistent/config.json", VRAM_EIO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = (char *)1;
        int rc = vram_estimate_json(cases[i].request, &out);
        if (rc != cases[i].rc || !strstr(vram_last_error(), cases[i].needle))
            fail_msg("%s: rc %d, \"%s\"", cases[i].request, rc, vram_last_error());
        assert_null(out);
    }
    static const struct {
        const char *request, *needle;
    } plans[] = {
        {"{\"model\": \"gpt2\"}", "exactly one of \"gpu\""},
        {"{\"model\": \"gpt2\", \"gpu_mem\": 0}", "\"gpu_mem\" must be positive"},
        {"{\"model\": \"gpt2\", \"gpu_mem\": 8, \"gpu_name\": \"A100-80GB\"}", "exactly one of"},
        {"{\"model\": \"gpt2\", \"gpu_name\": \"Z9000\"}", "unknown GPU \"Z9000\""},
        {"{\"model\": \"gpt2\", \"gpu_mem\": \"8GiB\", \"target\": 1.5}", "\"target\""},
        {"{\"model\": \"gpt2\", \"gpu_mem\": \"8GiB\", \"power_of_two\": 1}", "\"power_of_two\""},
        {"{\"model\": \"gpt2\", \"gpu_mem\": \"8GiB\", \"host\": \"yes\"}", "\"host\" must be"},
    };
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        char *out = (char *)1;
        if (vram_plan_json(plans[i].request, &out) == 0 ||
            !strstr(vram_last_error(), plans[i].needle))
            fail_msg("%s: \"%s\"", plans[i].request, vram_last_error());
        assert_null(out);
    }
    assert_int_equal(vram_estimate_json(NULL, &(char *){NULL}), VRAM_EINVAL);
    assert_int_equal(vram_estimate_json("{}", NULL), VRAM_EINVAL);
    vram_json_free(NULL);
}

static void info_lists_sim_devices(void **state)
{
    (void)state;
    char dir[] = "/tmp/vram-json-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/sim.state", dir);
    setenv("VRAM_SIM_STATE", path, 1);
    setenv("VRAM_SIM", "2xA100-40GB", 1);
    vram_ctx_t *ctx;
    assert_int_equal(vram_ctx_open_backend("sim", &ctx), 0);
    char *out;
    assert_int_equal(vram_info_json(ctx, -1, &out), 0);
    json_t *doc = json_loads(out, 0, NULL);
    vram_json_free(out);
    assert_int_equal(json_integer_value(json_object_get(doc, "device_count")), 2);
    json_t *d1 = json_array_get(json_object_get(doc, "devices"), 1);
    assert_int_equal(json_integer_value(json_object_get(d1, "total_bytes")), 40ll << 30);
    assert_string_equal(json_string_value(json_object_get(d1, "health")), "AVAILABLE");
    json_decref(doc);
    assert_int_equal(vram_info_json(ctx, 1, &out), 0);
    doc = json_loads(out, 0, NULL);
    vram_json_free(out);
    assert_int_equal(json_array_size(json_object_get(doc, "devices")), 1);
    json_decref(doc);
    out = (char *)1;
    assert_int_equal(vram_info_json(ctx, 2, &out), VRAM_ENODEV);
    assert_null(out);
    assert_int_equal(vram_info_json(NULL, 0, &out), VRAM_EINVAL);
    vram_ctx_close(ctx);
    unlink(path);
    rmdir(dir);
}

/* The layouts the Python mirrors are checked against are the compiler's. */
static void layout_reports_compiled_structs(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(vram_layout_json(&out), 0);
    json_t *doc = json_loads(out, 0, NULL);
    vram_json_free(out);
    assert_non_null(doc);
    json_t *pool = json_object_get(doc, "vram_pool_config_t");
    assert_int_equal(json_integer_value(json_object_get(pool, "size")), sizeof(vram_pool_config_t));
    json_t *exp = json_object_get(json_object_get(pool, "fields"), "expandable");
    assert_int_equal(json_integer_value(json_object_get(exp, "offset")),
                     offsetof(vram_pool_config_t, expandable));
    json_t *from = json_object_get(
        json_object_get(json_object_get(doc, "vram_swap_move_t"), "fields"), "from");
    assert_int_equal(json_integer_value(json_object_get(from, "offset")),
                     offsetof(vram_swap_move_t, from));
    /* every field lies inside its struct */
    const char *type, *name;
    json_t *st, *f;
    json_object_foreach(doc, type, st)
    {
        json_int_t size = json_integer_value(json_object_get(st, "size"));
        json_object_foreach(json_object_get(st, "fields"), name, f)
        {
            json_int_t end = json_integer_value(json_object_get(f, "offset")) +
                             json_integer_value(json_object_get(f, "size"));
            if (end > size)
                fail_msg("%s.%s ends at %lld, past %lld", type, name, (long long)end,
                         (long long)size);
        }
    }
    json_decref(doc);
    assert_int_equal(vram_layout_json(NULL), VRAM_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(estimate_equals_struct_api),
        cmocka_unit_test(plan_equals_struct_api),
        cmocka_unit_test(bad_requests_are_named),
        cmocka_unit_test(info_lists_sim_devices),
        cmocka_unit_test(layout_reports_compiled_structs),
        cmocka_unit_test(batch_table_equals_struct_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
