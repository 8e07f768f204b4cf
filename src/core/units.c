/* Sizes, fractions and durations as people write them. */
#include "vram.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const struct {
    const char *suffix;
    double factor;
} size_suffixes[] = {
    {"", 1},         {"b", 1},      {"k", 0x1p10},   {"kb", 1e3},     {"kib", 0x1p10},
    {"m", 0x1p20},   {"mb", 1e6},   {"mib", 0x1p20}, {"g", 0x1p30},   {"gb", 1e9},
    {"gib", 0x1p30}, {"t", 0x1p40}, {"tb", 1e12},    {"tib", 0x1p40},
};

/* A plain decimal number as people write it: digits with at most one '.'
 * ("512", "1.5", ".5"). strtod alone would also take hex, exponents, "inf"
 * and "nan", none of which belongs in a size or a duration. */
static bool plain_decimal(const char *p, double *value, const char **end)
{
    size_t digits = strspn(p, "0123456789"), len = digits;
    if (p[len] == '.') {
        size_t frac = strspn(p + len + 1, "0123456789");
        digits += frac;
        len += 1 + frac;
    }
    if (!digits || len > 64) return false;
    char buf[72];
    memcpy(buf, p, len);
    buf[len] = '\0';
    errno = 0;
    *value = strtod(buf, NULL);
    *end = p + len;
    return errno == 0 && isfinite(*value);
}

int vram_parse_size(const char *text, uint64_t *out)
{
    if (!text || !*text) return vram_fail(VRAM_EINVAL, "empty size");
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '-') return vram_fail(VRAM_EINVAL, "size \"%s\" is negative", text);
    if (!isdigit((unsigned char)*p) && *p != '.')
        return vram_fail(VRAM_EINVAL, "size \"%s\" does not start with a number", text);
    const char *end;
    double value;
    if (!plain_decimal(p, &value, &end))
        return vram_fail(VRAM_EINVAL, "size \"%s\" is not a number", text);
    while (isspace((unsigned char)*end))
        end++;
    for (size_t i = 0; i < sizeof size_suffixes / sizeof size_suffixes[0]; i++) {
        if (strcasecmp(end, size_suffixes[i].suffix) != 0) continue;
        double bytes = value * size_suffixes[i].factor;
        if (bytes >= 0x1p64) return vram_fail(VRAM_EINVAL, "size \"%s\" is too large", text);
        *out = (uint64_t)round(bytes); /* llround overflows at 2^63 */
        return 0;
    }
    return vram_fail(VRAM_EINVAL,
                     "size \"%s\": unknown unit \"%s\" (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                     text, end);
}

int vram_parse_size_or_fraction(const char *text, uint64_t total, uint64_t *out)
{
    if (text && strchr(text, '.') && !strpbrk(text, "bBkKmMgGtT")) {
        const char *end;
        double f;
        if (!plain_decimal(text, &f, &end) || *end || f > 1)
            return vram_fail(VRAM_EINVAL, "\"%s\" is neither a size nor a fraction in [0,1]", text);
        *out = (uint64_t)((double)total * f);
        return 0;
    }
    return vram_parse_size(text, out);
}

int vram_parse_seconds(const char *text, double *out)
{
    if (!text || !*text) return vram_fail(VRAM_EINVAL, "empty duration");
    const char *end;
    double v;
    if (!plain_decimal(text, &v, &end))
        return vram_fail(VRAM_EINVAL, "duration \"%s\" is not a non-negative number", text);
    double factor;
    if (!*end || !strcmp(end, "s"))
        factor = 1;
    else if (!strcmp(end, "ms"))
        factor = 1e-3;
    else if (!strcmp(end, "m"))
        factor = 60;
    else if (!strcmp(end, "h"))
        factor = 3600;
    else
        return vram_fail(VRAM_EINVAL, "duration \"%s\": unknown unit \"%s\" (use ms, s, m, h)",
                         text, end);
    if (!isfinite(v * factor)) return vram_fail(VRAM_EINVAL, "duration \"%s\" is too large", text);
    *out = v * factor;
    return 0;
}

const char *vram_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes == VRAM_UNKNOWN_U64) {
        snprintf(buf, len, "unknown");
        return buf;
    }
    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes / 1024;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

double vram_gib(uint64_t bytes)
{
    return (double)bytes / 0x1p30;
}

uint64_t vram_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
