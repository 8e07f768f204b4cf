/* Fuzz target: sizes, fractions and durations (src/core/units.c), the parsers
 * behind every SIZE / SIZE_OR_FRACTION / SECONDS option and the daemon's
 * "mem_bytes": "10GiB" fields. */
#include "fuzz.h"

#include <math.h>

/* The multipliers a unit may apply (B, k/KiB..TiB binary, KB..TB decimal). */
static const double unit_factors[] = {1, 0x1p10, 1e3, 0x1p20, 1e6, 0x1p30, 1e9, 0x1p40, 1e12};

/* True when bytes is value times one of the unit factors (rounded). This
 * catches a result that wrapped or saturated instead of being refused. */
static bool is_value_times_a_unit(double value, uint64_t bytes)
{
    for (size_t i = 0; i < sizeof unit_factors / sizeof unit_factors[0]; i++) {
        double want = value * unit_factors[i];
        if (fabs((double)bytes - want) <= 1 + want * 1e-12) return true;
    }
    return false;
}

static void check_message_names_input(const char *text, const char *what)
{
    const char *msg = vram_last_error();
    FUZZ_CHECK(*msg, "%s failed without a message", what);
    /* The message quotes the text (inputs with control bytes are still quoted
     * verbatim; only check inputs that fit in a message). */
    if (*text && strlen(text) < 200)
        FUZZ_CHECK(strstr(msg, text), "%s: message \"%s\" does not name the input \"%s\"", what,
                   msg, text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);

    vram_clear_error();
    uint64_t bytes = 0;
    int rc = vram_parse_size(text, &bytes);
    if (rc == 0) {
        fuzz_accepted++;
        const char *p = text + strspn(text, " \t\n\v\f\r");
        double value = strtod(p, NULL);
        FUZZ_CHECK(value >= 0 && isfinite(value), "size \"%s\" accepted with value %g", text,
                   value);
        FUZZ_CHECK(is_value_times_a_unit(value, bytes),
                   "size \"%s\" parsed to %llu bytes, not %g times a unit", text,
                   (unsigned long long)bytes, value);
    } else {
        FUZZ_CHECK(rc == VRAM_EINVAL, "vram_parse_size(\"%s\") returned %d", text, rc);
        check_message_names_input(text, "vram_parse_size");
    }

    const uint64_t total = 80ull << 30;
    vram_clear_error();
    uint64_t part = 0;
    int frc = vram_parse_size_or_fraction(text, total, &part);
    bool fraction_syntax = strchr(text, '.') && !strpbrk(text, "bBkKmMgGtT");
    if (frc == 0) {
        if (fraction_syntax)
            FUZZ_CHECK(part <= total, "fraction \"%s\" gave %llu bytes of %llu", text,
                       (unsigned long long)part, (unsigned long long)total);
        else
            FUZZ_CHECK(rc == 0 && part == bytes, "\"%s\": size_or_fraction %llu != size %llu", text,
                       (unsigned long long)part, (unsigned long long)bytes);
    } else {
        FUZZ_CHECK(frc == VRAM_EINVAL, "vram_parse_size_or_fraction(\"%s\") returned %d", text,
                   frc);
        check_message_names_input(text, "vram_parse_size_or_fraction");
    }

    vram_clear_error();
    double seconds = -1;
    int src = vram_parse_seconds(text, &seconds);
    if (src == 0) {
        FUZZ_CHECK(isfinite(seconds) && seconds >= 0, "duration \"%s\" accepted as %g s", text,
                   seconds);
    } else {
        FUZZ_CHECK(src == VRAM_EINVAL, "vram_parse_seconds(\"%s\") returned %d", text, src);
        check_message_names_input(text, "vram_parse_seconds");
    }

    free(text);
    return 0;
}
