/* The training_automations YAML of the dynamic batch-size optimizer, read
 * with libyaml's document API so every error can name its key and line.
 * libyaml is loaded when the first config is read, as device/ loads the
 * NVIDIA libraries: libvram.so needs no YAML library to load, and a
 * training process that reads no config never maps one (docs/design.md,
 * "Libraries and headers"). */
#include "core/file.h"
#include "device/driver_util.h"
#include "tune/tune_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#define CONFIG_LIMIT (1u << 20)

/* The SONAME the headers we compile against belong to (libyaml 0.2.x). */
#define YAML_LIBRARY "libyaml-0.so.2"

/* The libyaml functions the reader calls, looked up once. */
static struct {
    int (*parser_initialize)(yaml_parser_t *parser);
    void (*parser_set_input_string)(yaml_parser_t *parser, const unsigned char *input, size_t size);
    int (*parser_load)(yaml_parser_t *parser, yaml_document_t *document);
    void (*parser_delete)(yaml_parser_t *parser);
    yaml_node_t *(*document_get_root_node)(yaml_document_t *document);
    yaml_node_t *(*document_get_node)(yaml_document_t *document, int index);
    void (*document_delete)(yaml_document_t *document);
} yaml;
static pthread_once_t yaml_once = PTHREAD_ONCE_INIT;
static char yaml_missing[256]; /* why libyaml cannot be used; "" once loaded */

static void yaml_load(void)
{
    void *lib = dlopen(YAML_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(yaml_missing, sizeof yaml_missing, "%s", why ? why : YAML_LIBRARY " not found");
        return;
    }
    VRAM_DRIVER_LOAD(lib, yaml.parser_initialize, "yaml_parser_initialize");
    VRAM_DRIVER_LOAD(lib, yaml.parser_set_input_string, "yaml_parser_set_input_string");
    VRAM_DRIVER_LOAD(lib, yaml.parser_load, "yaml_parser_load");
    VRAM_DRIVER_LOAD(lib, yaml.parser_delete, "yaml_parser_delete");
    VRAM_DRIVER_LOAD(lib, yaml.document_get_root_node, "yaml_document_get_root_node");
    VRAM_DRIVER_LOAD(lib, yaml.document_get_node, "yaml_document_get_node");
    VRAM_DRIVER_LOAD(lib, yaml.document_delete, "yaml_document_delete");
    if (!yaml.parser_initialize || !yaml.parser_set_input_string || !yaml.parser_load ||
        !yaml.parser_delete || !yaml.document_get_root_node || !yaml.document_get_node ||
        !yaml.document_delete)
        snprintf(yaml_missing, sizeof yaml_missing, "%s lacks the document API", YAML_LIBRARY);
}

typedef enum { KEY_BOOL, KEY_DOUBLE, KEY_INT } key_type_t;

/* X(yaml key, type, field): the optimizer's keys. Ranges live in
 * vram_batchopt_config_check_key, which names the same keys. */
#define BATCHOPT_KEYS(X)                                                                           \
    X("enabled", KEY_BOOL, enabled)                                                                \
    X("target_vram_usage", KEY_DOUBLE, target_usage)                                               \
    X("safety_margin", KEY_DOUBLE, safety_margin)                                                  \
    X("adjustment_frequency", KEY_INT, adjustment_frequency)                                       \
    X("min_batch_size", KEY_INT, min_batch)                                                        \
    X("max_batch_size", KEY_INT, max_batch)                                                        \
    X("min_lq_size", KEY_INT, min_lq)                                                              \
    X("max_lq_size", KEY_INT, max_lq)                                                              \
    X("vram_history_size", KEY_INT, history_size)                                                  \
    X("max_adjustments", KEY_INT, max_adjustments)                                                 \
    X("oom_cooldown_windows", KEY_INT, oom_cooldown_windows)

typedef struct {
    const char *name;
    key_type_t type;
    size_t offset;
} key_def_t;

static const key_def_t keys[] = {
#define KEY_DEF_(name, type, field) {name, type, offsetof(vram_batchopt_config_t, field)},
    BATCHOPT_KEYS(KEY_DEF_)
#undef KEY_DEF_
};
#define NKEYS (sizeof keys / sizeof keys[0])

typedef struct {
    yaml_document_t *doc;
    const char *origin;
    int line[NKEYS]; /* 1-based line of each key seen, 0 = absent */
} reader_t;

static int line_of(const yaml_node_t *n)
{
    return (int)n->start_mark.line + 1;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int parse_value(const reader_t *r, const key_def_t *k, const yaml_node_t *v, void *field)
{
    const char *text = scalar(v);
    if (!text)
        return vram_fail(VRAM_EPARSE, "%s:%d: %s: expected a value, not a list or mapping",
                         r->origin, line_of(v), k->name);
    char *end = NULL;
    errno = 0;
    switch (k->type) {
    case KEY_BOOL: {
        static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no",
                                                                               "off"};
        for (size_t i = 0; i < 3; i++) {
            if (!strcasecmp(text, yes[i])) return *(bool *)field = true, 0;
            if (!strcasecmp(text, no[i])) return *(bool *)field = false, 0;
        }
        return vram_fail(VRAM_EPARSE, "%s:%d: %s: expected true or false, not \"%s\"", r->origin,
                         line_of(v), k->name, text);
    }
    case KEY_DOUBLE: {
        double d = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(d))
            return vram_fail(VRAM_EPARSE, "%s:%d: %s: expected a number, not \"%s\"", r->origin,
                             line_of(v), k->name, text);
        *(double *)field = d;
        return 0;
    }
    case KEY_INT: {
        long long i = strtoll(text, &end, 10);
        if (end == text || *end || errno || i < -1000000000LL || i > 1000000000LL)
            return vram_fail(VRAM_EPARSE, "%s:%d: %s: expected a whole number, not \"%s\"",
                             r->origin, line_of(v), k->name, text);
        *(int *)field = (int)i;
        return 0;
    }
    }
    return VRAM_EINVAL;
}

/* Reads the DynamicBatchSizeOptimizer mapping into *cfg. */
static int read_optimizer(reader_t *r, const yaml_node_t *map, vram_batchopt_config_t *cfg)
{
    if (map->type != YAML_MAPPING_NODE)
        return vram_fail(VRAM_EPARSE, "%s:%d: DynamicBatchSizeOptimizer: expected a mapping",
                         r->origin, line_of(map));
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *kn = yaml.document_get_node(r->doc, p->key);
        const yaml_node_t *vn = yaml.document_get_node(r->doc, p->value);
        const char *name = scalar(kn);
        size_t i = 0;
        while (name && i < NKEYS && strcmp(name, keys[i].name))
            i++;
        if (!name || i == NKEYS)
            return vram_fail(VRAM_EPARSE,
                             "%s:%d: DynamicBatchSizeOptimizer: unknown key \"%s\" (known: "
                             "enabled, target_vram_usage, safety_margin, adjustment_frequency, "
                             "min_batch_size, max_batch_size, min_lq_size, max_lq_size, "
                             "vram_history_size, max_adjustments)",
                             r->origin, line_of(kn), name ? name : "?");
        if (r->line[i])
            return vram_fail(VRAM_EPARSE, "%s:%d: %s: given twice (first on line %d)", r->origin,
                             line_of(kn), name, r->line[i]);
        r->line[i] = line_of(kn);
        int rc = parse_value(r, &keys[i], vn, (char *)cfg + keys[i].offset);
        if (rc) return rc;
    }
    return 0;
}

static int key_line(const reader_t *r, const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].name, name)) return r->line[i];
    return 0;
}

static int read_document(reader_t *r, vram_batchopt_config_t *cfg)
{
    const yaml_node_t *root = yaml.document_get_root_node(r->doc);
    const yaml_node_t *ta = NULL;
    if (root && root->type == YAML_MAPPING_NODE)
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
             p++) {
            const char *name = scalar(yaml.document_get_node(r->doc, p->key));
            if (name && !strcmp(name, "training_automations")) {
                if (ta)
                    return vram_fail(VRAM_EPARSE, "%s:%d: training_automations: given twice",
                                     r->origin, line_of(yaml.document_get_node(r->doc, p->key)));
                ta = yaml.document_get_node(r->doc, p->value);
            }
        }
    if (!ta) return vram_fail(VRAM_EPARSE, "%s: no training_automations section", r->origin);
    if (ta->type != YAML_MAPPING_NODE)
        return vram_fail(VRAM_EPARSE, "%s:%d: training_automations: expected a mapping", r->origin,
                         line_of(ta));
    bool all_on = true, seen_all = false, seen_opt = false;
    static const key_def_t enabled_key = {"enabled", KEY_BOOL, 0};
    for (yaml_node_pair_t *p = ta->data.mapping.pairs.start; p < ta->data.mapping.pairs.top; p++) {
        const yaml_node_t *kn = yaml.document_get_node(r->doc, p->key);
        const yaml_node_t *vn = yaml.document_get_node(r->doc, p->value);
        const char *name = scalar(kn);
        int rc = 0;
        if (name && !strcmp(name, "enabled") && !seen_all) {
            seen_all = true;
            rc = parse_value(r, &enabled_key, vn, &all_on);
        } else if (name && !strcmp(name, "DynamicBatchSizeOptimizer") && !seen_opt) {
            seen_opt = true;
            rc = read_optimizer(r, vn, cfg);
        } else if (name &&
                   (!strcmp(name, "enabled") || !strcmp(name, "DynamicBatchSizeOptimizer"))) {
            rc = vram_fail(VRAM_EPARSE, "%s:%d: %s: given twice", r->origin, line_of(kn), name);
        } else {
            rc = vram_fail(VRAM_EPARSE,
                           "%s:%d: training_automations: unknown key \"%s\" (known: enabled, "
                           "DynamicBatchSizeOptimizer)",
                           r->origin, line_of(kn), name ? name : "?");
        }
        if (rc) return rc;
    }
    /* The automations a config does not list are off. */
    if (!seen_opt || !all_on) cfg->enabled = false;
    bool min_lq = key_line(r, "min_lq_size"), max_lq = key_line(r, "max_lq_size");
    if (min_lq != max_lq)
        return vram_fail(VRAM_EPARSE, "%s:%d: %s needs %s as well", r->origin,
                         key_line(r, min_lq ? "min_lq_size" : "max_lq_size"),
                         min_lq ? "min_lq_size" : "max_lq_size",
                         min_lq ? "max_lq_size" : "min_lq_size");
    const char *bad;
    if (vram_batchopt_config_check_key(cfg, &bad)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", vram_last_error());
        int line = bad ? key_line(r, bad) : 0;
        if (line) return vram_fail(VRAM_EPARSE, "%s:%d: %s", r->origin, line, msg);
        return vram_fail(VRAM_EPARSE, "%s: %s (the default)", r->origin, msg);
    }
    return 0;
}

int vram_batchopt_config_parse(const char *text, const char *origin, vram_batchopt_config_t *cfg)
{
    if (!text || !cfg) return vram_fail(VRAM_EINVAL, "batch optimizer config: NULL argument");
    if (!origin) origin = "<config>";
    pthread_once(&yaml_once, yaml_load);
    if (yaml_missing[0])
        return vram_fail(VRAM_ENOLIB, "%s: reading YAML needs libyaml (%s): %s", origin,
                         YAML_LIBRARY, yaml_missing);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml.parser_initialize(&parser)) return vram_fail(VRAM_ENOMEM, "yaml: out of memory");
    yaml.parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
    int rc = 0;
    if (!yaml.parser_load(&parser, &doc)) {
        rc = vram_fail(VRAM_EPARSE, "%s:%zu:%zu: %s%s%s", origin, parser.problem_mark.line + 1,
                       parser.problem_mark.column + 1,
                       parser.problem ? parser.problem : "malformed YAML",
                       parser.context ? " " : "", parser.context ? parser.context : "");
        goto out_parser;
    }
    vram_batchopt_config_t work = *cfg;
    reader_t r = {.doc = &doc, .origin = origin};
    rc = read_document(&r, &work);
    if (!rc) *cfg = work;
    yaml.document_delete(&doc);
out_parser:
    yaml.parser_delete(&parser);
    return rc;
}

int vram_batchopt_config_load(const char *path, vram_batchopt_config_t *cfg)
{
    if (!path || !cfg) return vram_fail(VRAM_EINVAL, "batch optimizer config: NULL argument");
    char *text;
    size_t len;
    int rc = vram_read_file(path, CONFIG_LIMIT, &text, &len);
    if (rc) return rc;
    if (strlen(text) != len)
        rc = vram_fail(VRAM_EPARSE, "%s: contains a NUL byte", path);
    else
        rc = vram_batchopt_config_parse(text, path, cfg);
    free(text);
    return rc;
}
