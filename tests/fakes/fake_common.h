/* Helpers shared by the fake driver libraries: reading knobs from the
 * environment and injecting failures. Header-only (static functions) so that
 * each fake is one self-contained shared library. */
#ifndef VRAM_FAKE_COMMON_H
#define VRAM_FAKE_COMMON_H

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "123", "64K", "16GiB", "1.5G": binary suffixes; 0 on garbage. */
static uint64_t fake_parse_size(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || v < 0) return 0;
    while (*end == ' ')
        end++;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mult = 1024.0;
        break;
    case 'M':
        mult = 1024.0 * 1024;
        break;
    case 'G':
        mult = 1024.0 * 1024 * 1024;
        break;
    case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
    default:
        break;
    }
    return (uint64_t)(v * mult);
}

/* The i-th element of a comma-separated list of sizes in environment variable
 * `var`; the last element repeats for later devices; `def` when unset. */
static uint64_t fake_env_size_at(const char *var, int i, uint64_t def)
{
    const char *s = getenv(var);
    if (!s || !*s) return def;
    uint64_t value = def;
    for (int k = 0;; k++) {
        value = fake_parse_size(s);
        const char *comma = strchr(s, ',');
        if (k == i || !comma) break;
        s = comma + 1;
    }
    return value;
}

static long fake_env_long(const char *var, long def)
{
    const char *s = getenv(var);
    return s && *s ? strtol(s, NULL, 10) : def;
}

static bool fake_env_flag(const char *var)
{
    const char *s = getenv(var);
    return s && *s && strcmp(s, "0") != 0;
}

/* Failure injection: "call[@device]=code[:times],..." — `call` answers `code`
 * (for `device` only, when given), every time or the first `times` times. */
enum { FAKE_MAX_RULES = 32 };

typedef struct {
    char call[64];
    int device; /* -1: any */
    int code;
    long remaining; /* -1: always */
} fake_rule_t;

typedef struct {
    fake_rule_t rules[FAKE_MAX_RULES];
    int count;
} fake_rules_t;

static void fake_rules_parse(fake_rules_t *rules, const char *var)
{
    rules->count = 0;
    const char *s = getenv(var);
    while (s && *s && rules->count < FAKE_MAX_RULES) {
        size_t len = strcspn(s, ",");
        char item[128];
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), s);
        s += len + (s[len] == ',');
        char *eq = strchr(item, '=');
        if (!eq) continue;
        *eq = '\0';
        fake_rule_t *r = &rules->rules[rules->count];
        char *at = strchr(item, '@');
        r->device = -1;
        if (at) {
            *at = '\0';
            r->device = atoi(at + 1);
        }
        snprintf(r->call, sizeof r->call, "%.63s", item);
        char *colon = strchr(eq + 1, ':');
        r->code = atoi(eq + 1);
        r->remaining = colon ? strtol(colon + 1, NULL, 10) : -1;
        rules->count++;
    }
}

/* The code `call` must fail with now (0: behave normally). */
static int fake_rules_check(fake_rules_t *rules, const char *call, int device)
{
    for (int i = 0; i < rules->count; i++) {
        fake_rule_t *r = &rules->rules[i];
        if (strcmp(r->call, call) != 0) continue;
        if (r->device >= 0 && r->device != device) continue;
        if (r->remaining == 0) continue;
        if (r->remaining > 0) r->remaining--;
        return r->code;
    }
    return 0;
}

#endif
