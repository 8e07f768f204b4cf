/* Alert rules: the built-in set and the YAML file format (libyaml's document
 * API, so every error can name the line and the key). docs/monitoring.md. */
#include "watch_internal.h"
#include "core/file.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_RULES 256
#define MAX_SINKS 16
#define MAX_FILE  (1 << 20)

static const watch_rule_t defaults[] = {
    {"gpu-memory-high", WATCH_M_MEMORY_USED_RATIO, false, 0.90, 0.85, 30, VRAM_ALERT_WARNING},
    {"gpu-memory-critical", WATCH_M_MEMORY_USED_RATIO, false, 0.97, 0.95, 10, VRAM_ALERT_CRITICAL},
    {"job-over-reservation", WATCH_M_JOB_OVER_RESERVATION, false, 1.0, 1.0, 10, VRAM_ALERT_WARNING},
    {"gpu-error", WATCH_M_DEVICE_ERROR, false, 0.5, 0.5, 0, VRAM_ALERT_ERROR},
};

void vram_watch_rules_free(watch_rules_t *r)
{
    for (size_t i = 0; i < r->nwebhooks; i++)
        free(r->webhooks[i]);
    for (size_t i = 0; i < r->nexecs; i++)
        free(r->execs[i]);
    for (size_t i = 0; i < r->nalertmanagers; i++)
        free(r->alertmanagers[i]);
    free(r->alertmanagers);
    free(r->webhooks);
    free(r->execs);
    free(r->rules);
    memset(r, 0, sizeof *r);
}

static void rules_init(watch_rules_t *r)
{
    memset(r, 0, sizeof *r);
    r->webhook_retries = 5;
    r->webhook_timeout_s = 5;
}

int vram_watch_rules_default(watch_rules_t *out)
{
    rules_init(out);
    out->rules = malloc(sizeof defaults);
    if (!out->rules) return vram_fail(VRAM_ENOMEM, "out of memory");
    memcpy(out->rules, defaults, sizeof defaults);
    out->nrules = sizeof defaults / sizeof defaults[0];
    return 0;
}

/* ---- the YAML file ---------------------------------------------------------- */

typedef struct {
    const char *path;
    yaml_document_t doc;
} file_t;

static int bad(const file_t *f, const yaml_node_t *n, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(const file_t *f, const yaml_node_t *n, const char *key, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vram_fail(VRAM_EPARSE, "%s:%zu: %s%s%s", f->path, n ? n->start_mark.line + 1 : 0,
                     key ? key : "", key ? ": " : "", msg);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int text(const file_t *f, const yaml_node_t *n, const char *key, char *buf, size_t len)
{
    const char *s = scalar(n);
    if (!s) return bad(f, n, key, "expected a text value");
    if (strlen(s) >= len) return bad(f, n, key, "longer than %zu characters", len - 1);
    snprintf(buf, len, "%s", s);
    return 0;
}

static int number(const file_t *f, const yaml_node_t *n, const char *key, double *out)
{
    const char *s = scalar(n);
    char *end;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end || !isfinite(v)) return bad(f, n, key, "expected a number");
    *out = v;
    return 0;
}

static int duration(const file_t *f, const yaml_node_t *n, const char *key, double *out)
{
    const char *s = scalar(n);
    if (!s || vram_parse_seconds(s, out) != 0)
        return bad(f, n, key, "expected a duration like 30s, 5m or 1h");
    return 0;
}

/* A threshold in the metric's unit: a ratio ("90%" or 0.9), bytes ("10GiB"),
 * seconds ("5m") or a plain number. */
static int threshold(const file_t *f, const yaml_node_t *n, const char *key, watch_metric_t m,
                     double *out)
{
    const char *s = scalar(n);
    if (!s) return bad(f, n, key, "expected a value");
    size_t len = strlen(s);
    if (m == WATCH_M_MEMORY_FREE_BYTES) {
        uint64_t b;
        if (vram_parse_size(s, &b) != 0) return bad(f, n, key, "expected a size like 10GiB");
        *out = (double)b;
        return 0;
    }
    if (m == WATCH_M_QUEUE_WAIT) return duration(f, n, key, out);
    if (len > 1 && s[len - 1] == '%' &&
        (m == WATCH_M_MEMORY_USED_RATIO || m == WATCH_M_UTILIZATION ||
         m == WATCH_M_JOB_OVER_RESERVATION)) {
        char *end;
        double v = strtod(s, &end);
        if (end != s + len - 1 || !isfinite(v)) return bad(f, n, key, "expected a percentage");
        *out = v / 100;
        return 0;
    }
    return number(f, n, key, out);
}

typedef struct {
    const char *key;
    yaml_node_t *value;
} pair_t;

/* The pairs of a mapping, at most `cap`; unknown keys are refused. */
static int pairs(const file_t *f, yaml_node_t *map, const char *what, const char *const *known,
                 pair_t *out, size_t cap, size_t *n)
{
    if (!map || map->type != YAML_MAPPING_NODE) return bad(f, map, what, "expected a mapping");
    *n = 0;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node((yaml_document_t *)&f->doc, p->key);
        const char *key = scalar(k);
        if (!key) return bad(f, k, what, "keys must be text");
        bool ok = false;
        for (const char *const *kn = known; *kn; kn++)
            ok |= !strcmp(*kn, key);
        if (!ok) return bad(f, k, key, "unknown key in %s", what);
        for (size_t i = 0; i < *n; i++)
            if (!strcmp(out[i].key, key)) return bad(f, k, key, "given twice");
        if (*n == cap) return bad(f, k, key, "too many keys");
        out[(*n)++] = (pair_t){key, yaml_document_get_node((yaml_document_t *)&f->doc, p->value)};
    }
    return 0;
}

static yaml_node_t *get(const pair_t *p, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(p[i].key, key)) return p[i].value;
    return NULL;
}

static int parse_rule(const file_t *f, yaml_node_t *node, watch_rule_t *r)
{
    static const char *const known[] = {"name",  "metric", "above", "below",
                                        "clear", "for",    "level", NULL};
    pair_t p[8];
    size_t n;
    int rc = pairs(f, node, "rule", known, p, 8, &n);
    if (rc) return rc;
    memset(r, 0, sizeof *r);
    yaml_node_t *v;
    if (!(v = get(p, n, "name"))) return bad(f, node, "name", "every rule needs a name");
    if ((rc = text(f, v, "name", r->name, sizeof r->name))) return rc;
    char metric[40];
    if (!(v = get(p, n, "metric")))
        return bad(f, node, "metric", "rule %s needs a metric", r->name);
    if ((rc = text(f, v, "metric", metric, sizeof metric))) return rc;
    int m = vram_watch_metric_parse(metric);
    if (m < 0)
        return bad(f, v, "metric",
                   "unknown metric \"%s\" (memory_used_ratio, memory_free_bytes, "
                   "temperature_celsius, power_watts, utilization_ratio, "
                   "job_used_over_reserved_ratio, device_error, queue_wait_seconds)",
                   metric);
    r->metric = (watch_metric_t)m;
    yaml_node_t *above = get(p, n, "above"), *below = get(p, n, "below");
    if (!above == !below)
        return bad(f, node, above ? "below" : "above", "rule %s needs exactly one of above/below",
                   r->name);
    r->below = below != NULL;
    const char *dir = r->below ? "below" : "above";
    if ((rc = threshold(f, r->below ? below : above, dir, r->metric, &r->threshold))) return rc;
    r->clear = r->threshold;
    if ((v = get(p, n, "clear"))) {
        if ((rc = threshold(f, v, "clear", r->metric, &r->clear))) return rc;
        if (r->below ? r->clear < r->threshold : r->clear > r->threshold)
            return bad(f, v, "clear", "must be on the safe side of the threshold (%s it)",
                       r->below ? "at or above" : "at or below");
    }
    if ((v = get(p, n, "for")) && (rc = duration(f, v, "for", &r->for_s))) return rc;
    r->level = VRAM_ALERT_WARNING;
    if ((v = get(p, n, "level"))) {
        int lv = vram_alert_level_parse(scalar(v));
        if (lv < 0) return bad(f, v, "level", "expected info, warning, error or critical");
        r->level = (vram_alert_level_t)lv;
    }
    return 0;
}

/* A list of text items (webhook and Alertmanager URLs, exec commands). */
static int text_list(const file_t *f, yaml_node_t *seq, const char *key, char ***out, size_t *n)
{
    if (!seq || seq->type != YAML_SEQUENCE_NODE) return bad(f, seq, key, "expected a list");
    size_t count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count > MAX_SINKS) return bad(f, seq, key, "at most %d entries", MAX_SINKS);
    *out = calloc(count + 1, sizeof **out);
    if (!*out) return vram_fail(VRAM_ENOMEM, "out of memory");
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t *item = yaml_document_get_node((yaml_document_t *)&f->doc, *it);
        const char *s = scalar(item);
        if (!s || !*s) return bad(f, item, key, "entries must be non-empty text");
        if (strcmp(key, "exec") && strncmp(s, "http://", 7) && strncmp(s, "https://", 8))
            return bad(f, item, key, "\"%s\" is not an http:// or https:// URL", s);
        if (!((*out)[(*n)++] = strdup(s))) return vram_fail(VRAM_ENOMEM, "out of memory");
    }
    return 0;
}

static int parse_root(file_t *f, watch_rules_t *out)
{
    static const char *const known[] = {
        "rules", "webhooks", "alertmanagers", "exec", "webhook_retries", "webhook_timeout", NULL};
    yaml_node_t *root = yaml_document_get_root_node(&f->doc);
    if (!root) return bad(f, NULL, NULL, "the file is empty (expected \"rules:\")");
    pair_t p[8];
    size_t n;
    int rc = pairs(f, root, "the file", known, p, 8, &n);
    if (rc) return rc;
    yaml_node_t *v = get(p, n, "rules");
    if (!v || v->type != YAML_SEQUENCE_NODE)
        return bad(f, v ? v : root, "rules", "expected a list of rules");
    size_t count = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (count > MAX_RULES) return bad(f, v, "rules", "at most %d rules", MAX_RULES);
    out->rules = calloc(count + 1, sizeof *out->rules);
    if (!out->rules) return vram_fail(VRAM_ENOMEM, "out of memory");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
        yaml_node_t *node = yaml_document_get_node(&f->doc, *it);
        watch_rule_t *r = &out->rules[out->nrules];
        if ((rc = parse_rule(f, node, r))) return rc;
        for (size_t i = 0; i < out->nrules; i++)
            if (!strcmp(out->rules[i].name, r->name))
                return bad(f, node, "name", "two rules are named \"%s\"", r->name);
        out->nrules++;
    }
    if ((v = get(p, n, "webhooks")) &&
        (rc = text_list(f, v, "webhooks", &out->webhooks, &out->nwebhooks)))
        return rc;
    if ((v = get(p, n, "alertmanagers")) &&
        (rc = text_list(f, v, "alertmanagers", &out->alertmanagers, &out->nalertmanagers)))
        return rc;
    if ((v = get(p, n, "exec")) && (rc = text_list(f, v, "exec", &out->execs, &out->nexecs)))
        return rc;
    double d;
    if ((v = get(p, n, "webhook_retries"))) {
        if ((rc = number(f, v, "webhook_retries", &d))) return rc;
        if (d < 0 || d > 20 || d != floor(d))
            return bad(f, v, "webhook_retries", "expected a whole number from 0 to 20");
        out->webhook_retries = (int)d;
    }
    if ((v = get(p, n, "webhook_timeout"))) {
        if ((rc = duration(f, v, "webhook_timeout", &d))) return rc;
        if (d <= 0 || d > 60) return bad(f, v, "webhook_timeout", "expected 1ms to 60s");
        out->webhook_timeout_s = d;
    }
    return 0;
}

int vram_watch_rules_load(const char *path, watch_rules_t *out)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = vram_read_file(path, MAX_FILE, &buf, &len);
    if (rc) return rc;
    file_t f = {.path = path};
    yaml_parser_t parser;
    watch_rules_t r;
    rules_init(&r);
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &f.doc)) {
        rc = vram_fail(VRAM_EPARSE, "%s:%zu: %s", path, parser.problem_mark.line + 1,
                       parser.problem ? parser.problem : "malformed YAML");
        yaml_parser_delete(&parser);
        free(buf);
        return rc;
    }
    rc = parse_root(&f, &r);
    yaml_document_delete(&f.doc);
    yaml_parser_delete(&parser);
    free(buf);
    if (rc) {
        vram_watch_rules_free(&r);
        return rc;
    }
    *out = r;
    return 0;
}

int vram_watch_check_rules(const char *path, char **text_out)
{
    watch_rules_t r;
    int rc = path && *path ? vram_watch_rules_load(path, &r) : vram_watch_rules_default(&r);
    if (rc) return rc;
    if (text_out) {
        size_t cap = 128 * (r.nrules + 1), at = 0;
        char *t = malloc(cap);
        if (!t) {
            vram_watch_rules_free(&r);
            return vram_fail(VRAM_ENOMEM, "out of memory");
        }
        t[0] = 0;
        for (size_t i = 0; i < r.nrules; i++) {
            const watch_rule_t *x = &r.rules[i];
            char th[48], cl[48], dur[48];
            vram_watch_describe(x->metric, x->threshold, th, sizeof th);
            vram_watch_describe(x->metric, x->clear, cl, sizeof cl);
            vram_watch_number_text(x->for_s, dur, sizeof dur);
            at += (size_t)snprintf(t + at, cap - at, "%s: %s %s %s (clear %s) for %ss -> %s\n",
                                   x->name, vram_watch_metric_name(x->metric),
                                   x->below ? "below" : "above", th, cl, dur,
                                   vram_alert_level_name(x->level));
            if (at >= cap) at = cap - 1;
        }
        *text_out = t;
    }
    vram_watch_rules_free(&r);
    return 0;
}
