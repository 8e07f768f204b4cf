/* The option table: defaults, VRAM_* environment, overrides from flags/config. */
#include "vram.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const struct {
    const char *name, *env, *def, *help;
    vram_option_type_t type;
} table[] = {
#define VRAM_OPT_ROW_(name, type, def, help) {#name, "VRAM_" #name, def, help, VRAM_OPTTYPE_##type},
    VRAM_OPTIONS(VRAM_OPT_ROW_)
#undef VRAM_OPT_ROW_
};

/* Overrides set by flags or a config file (the only mutable option state). */
static char *overrides[VRAM_OPT_COUNT_];

static bool valid(vram_option_t opt)
{
    return (unsigned)opt < VRAM_OPT_COUNT_;
}

const char *vram_option_name(vram_option_t opt)
{
    return valid(opt) ? table[opt].name : "";
}
const char *vram_option_env(vram_option_t opt)
{
    return valid(opt) ? table[opt].env : "";
}
const char *vram_option_help(vram_option_t opt)
{
    return valid(opt) ? table[opt].help : "";
}
const char *vram_option_default(vram_option_t opt)
{
    return valid(opt) ? table[opt].def : "";
}
vram_option_type_t vram_option_type(vram_option_t opt)
{
    return valid(opt) ? table[opt].type : VRAM_OPTTYPE_STRING;
}

/* "safety-margin", "SAFETY_MARGIN", "VRAM_SAFETY_MARGIN" all name one option. */
int vram_option_find(const char *name)
{
    if (!name) return -1;
    if (!strncasecmp(name, "VRAM_", 5)) name += 5;
    for (int i = 0; i < VRAM_OPT_COUNT_; i++) {
        const char *a = table[i].name, *b = name;
        while (*a && *b && (toupper((unsigned char)*b) == *a || (*b == '-' && *a == '_'))) {
            a++;
            b++;
        }
        if (!*a && !*b) return i;
    }
    return -1;
}

static int check_value(vram_option_t opt, const char *value)
{
    uint64_t size;
    double d;
    char *end;
    switch (table[opt].type) {
    case VRAM_OPTTYPE_STRING:
    case VRAM_OPTTYPE_SECRET:
        return 0;
    case VRAM_OPTTYPE_SIZE:
        return vram_parse_size(value, &size);
    case VRAM_OPTTYPE_SIZE_OR_FRACTION:
        return vram_parse_size_or_fraction(value, 1, &size);
    case VRAM_OPTTYPE_SECONDS:
        return vram_parse_seconds(value, &d);
    case VRAM_OPTTYPE_INT:
        errno = 0;
        (void)strtoll(value, &end, 10);
        return (errno || end == value || *end) ? VRAM_EINVAL : 0;
    case VRAM_OPTTYPE_DOUBLE:
        errno = 0;
        (void)strtod(value, &end);
        return (errno || end == value || *end) ? VRAM_EINVAL : 0;
    case VRAM_OPTTYPE_BOOL: {
        static const char *words[] = {"1", "0", "true", "false", "yes", "no", "on", "off"};
        for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
            if (!strcasecmp(value, words[i])) return 0;
        return VRAM_EINVAL;
    }
    }
    return VRAM_EINVAL;
}

static int checked(vram_option_t opt, const char *value)
{
    if (!valid(opt)) return vram_fail(VRAM_EINVAL, "unknown option %d", (int)opt);
    if (check_value(opt, value ? value : "") != 0)
        return vram_fail(VRAM_EINVAL, "%s: bad value \"%s\" (%s)", table[opt].env,
                         value ? value : "", table[opt].help);
    return 0;
}

int vram_option_set(vram_option_t opt, const char *value)
{
    int rc = checked(opt, value);
    if (rc) return rc;
    char *copy = strdup(value);
    if (!copy) return vram_fail(VRAM_ENOMEM, "out of memory");
    free(overrides[opt]);
    overrides[opt] = copy;
    return 0;
}

const char *vram_option_str(vram_option_t opt)
{
    if (!valid(opt)) return "";
    if (overrides[opt]) return overrides[opt];
    /* secure_getenv: a set-uid or capability-raised process ignores the
     * environment (library paths, databases) of whoever started it. */
    const char *env = secure_getenv(table[opt].env);
    return env ? env : table[opt].def;
}

int vram_option_int(vram_option_t opt, long long *out)
{
    const char *v = vram_option_str(opt);
    int rc = checked(opt, v);
    if (rc) return rc;
    *out = strtoll(v, NULL, 10);
    return 0;
}

int vram_option_double(vram_option_t opt, double *out)
{
    const char *v = vram_option_str(opt);
    int rc = checked(opt, v);
    if (rc) return rc;
    if (table[opt].type == VRAM_OPTTYPE_SECONDS) return vram_parse_seconds(v, out);
    *out = strtod(v, NULL);
    return 0;
}

int vram_option_bool(vram_option_t opt, bool *out)
{
    const char *v = vram_option_str(opt);
    int rc = checked(opt, v);
    if (rc) return rc;
    *out = !strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
           !strcasecmp(v, "on");
    return 0;
}

int vram_option_size(vram_option_t opt, uint64_t total, uint64_t *out)
{
    const char *v = vram_option_str(opt);
    int rc = checked(opt, v);
    if (rc) return rc;
    if (table[opt].type == VRAM_OPTTYPE_SIZE_OR_FRACTION)
        return vram_parse_size_or_fraction(v, total, out);
    return vram_parse_size(v, out);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int vram_options_load_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return vram_fail(VRAM_EIO, "%s: %s", path, strerror(errno));
    char *pending[VRAM_OPT_COUNT_] = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)n != strlen(line)) {
            rc = vram_fail(VRAM_EPARSE, "%s:%d: a NUL byte in the line", path, lineno);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = vram_fail(VRAM_EPARSE, "%s:%d: expected KEY=VALUE", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        int opt = vram_option_find(key);
        if (opt < 0) {
            rc = vram_fail(VRAM_EPARSE, "%s:%d: unknown option \"%s\"", path, lineno, key);
        } else if (checked(opt, value) != 0) {
            char why[512]; /* vram_fail must not format its own buffer into itself */
            snprintf(why, sizeof why, "%s", vram_last_error());
            rc = vram_fail(VRAM_EPARSE, "%s:%d: %s", path, lineno, why);
        } else {
            free(pending[opt]);
            if (!(pending[opt] = strdup(value))) rc = vram_fail(VRAM_ENOMEM, "out of memory");
        }
    }
    if (rc == 0 && ferror(f)) rc = vram_fail(VRAM_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    for (int i = 0; rc == 0 && i < VRAM_OPT_COUNT_; i++)
        if (pending[i] && *pending[i] && table[i].type == VRAM_OPTTYPE_SECRET &&
            (fstat(fileno(f), &st) != 0 || (st.st_mode & 0044)))
            rc = vram_fail(VRAM_EPERM,
                           "%s sets %s, a secret, and group or others may read it: chmod 600 %s",
                           path, table[i].name, path);
    free(line);
    fclose(f);
    for (int i = 0; i < VRAM_OPT_COUNT_; i++) {
        if (rc == 0 && pending[i]) {
            free(overrides[i]);
            overrides[i] = pending[i];
        } else {
            free(pending[i]);
        }
    }
    return rc;
}
