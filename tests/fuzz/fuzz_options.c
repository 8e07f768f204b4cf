/* Fuzz target: the options file (vram_options_load_file, src/core/options.c),
 * read from an in-memory file. The file either applies entirely or not at all. */
#include "fuzz.h"

/* Every option's current value must pass its typed getter: a loaded file may
 * never leave a value the rest of libvram would trip over. */
static void check_all_options_readable(const char *why)
{
    for (int i = 0; i < VRAM_OPT_COUNT_; i++) {
        vram_option_t opt = (vram_option_t)i;
        long long n;
        double d;
        bool b;
        uint64_t bytes;
        int rc = 0;
        switch (vram_option_type(opt)) {
        case VRAM_OPTTYPE_STRING:
        case VRAM_OPTTYPE_SECRET:
            rc = 0;
            break;
        case VRAM_OPTTYPE_INT:
            rc = vram_option_int(opt, &n);
            break;
        case VRAM_OPTTYPE_DOUBLE:
        case VRAM_OPTTYPE_SECONDS:
            rc = vram_option_double(opt, &d);
            break;
        case VRAM_OPTTYPE_BOOL:
            rc = vram_option_bool(opt, &b);
            break;
        case VRAM_OPTTYPE_SIZE:
        case VRAM_OPTTYPE_SIZE_OR_FRACTION:
            rc = vram_option_size(opt, 80ull << 30, &bytes);
            break;
        }
        FUZZ_CHECK(rc == 0, "%s: option %s = \"%s\" does not read back (rc %d)", why,
                   vram_option_name(opt), vram_option_str(opt), rc);
    }
}

/* The format, independently: lines split at '\n' (of any length), spaces
 * trimmed, '#' comments, KEY=VALUE, the last value wins. Fills want[] with
 * what a successful load must have set. Returns false when a line holds a
 * NUL byte: such a file must be refused. */
static bool expected_values(const uint8_t *data, size_t size, char *want[VRAM_OPT_COUNT_])
{
    size_t pos = 0;
    bool ok = true;
    while (pos < size) {
        const uint8_t *nl = memchr(data + pos, '\n', size - pos);
        size_t end = nl ? (size_t)(nl - data) : size;
        if (memchr(data + pos, '\0', end - pos)) ok = false;
        char *line = fuzz_cstr(data + pos, end - pos); /* stops at a NUL */
        char *s = line, *e;
        while (*s && strchr(" \t\r\v\f", *s))
            s++;
        char *eq = strchr(s, '=');
        if (*s && *s != '#' && eq) {
            *eq = '\0';
            for (e = eq; e > s && strchr(" \t\r\v\f", e[-1]); e--)
                e[-1] = '\0';
            char *value = eq + 1;
            while (*value && strchr(" \t\r\v\f", *value))
                value++;
            for (e = value + strlen(value); e > value && strchr(" \t\r\v\f", e[-1]); e--)
                e[-1] = '\0';
            int opt = vram_option_find(s);
            if (opt >= 0) {
                free(want[opt]);
                want[opt] = strdup(value);
            }
        }
        free(line);
        pos = end + 1;
    }
    return ok;
}

/* Puts every option back to its default so inputs do not influence each other. */
static void reset_options(void)
{
    for (int i = 0; i < VRAM_OPT_COUNT_; i++)
        FUZZ_CHECK(vram_option_set((vram_option_t)i, vram_option_default((vram_option_t)i)) == 0,
                   "default of %s rejected", vram_option_name((vram_option_t)i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool initialized;
    if (!initialized) {
        reset_options();
        initialized = true;
    }
    /* A sentinel that a failing file must leave alone. */
    FUZZ_CHECK(vram_option_set(VRAM_OPT_LOG_LEVEL, "sentinel") == 0, "cannot set LOG_LEVEL");
    const char *path = fuzz_memfile(data, size);
    vram_clear_error();
    int rc = vram_options_load_file(path);
    char *want[VRAM_OPT_COUNT_] = {0};
    bool valid_bytes = expected_values(data, size, want);
    if (rc == 0) {
        fuzz_accepted++;
        FUZZ_CHECK(valid_bytes, "a file with a NUL byte in a line was accepted");
        check_all_options_readable("after a successful load");
        for (int i = 0; i < VRAM_OPT_COUNT_; i++) {
            const char *got = vram_option_str((vram_option_t)i);
            FUZZ_CHECK(!want[i] || !strcmp(want[i], got), "%s is \"%s\", the file says \"%s\"",
                       vram_option_name((vram_option_t)i), got, want[i]);
            const char *before =
                i == VRAM_OPT_LOG_LEVEL ? "sentinel" : vram_option_default((vram_option_t)i);
            FUZZ_CHECK(want[i] || !strcmp(before, got),
                       "%s is \"%s\" though the file does not set it",
                       vram_option_name((vram_option_t)i), got);
        }
    } else if (rc == VRAM_EPERM) {
        /* the memfd is readable by others: only a file that sets a secret
         * (TOKEN, ALERT_WEBHOOK, ALERT_EXEC) may be refused for it */
        bool secret = false;
        for (int i = 0; i < VRAM_OPT_COUNT_; i++)
            secret |=
                want[i] && *want[i] && vram_option_type((vram_option_t)i) == VRAM_OPTTYPE_SECRET;
        FUZZ_CHECK(valid_bytes && secret, "EPERM for a file that sets no secret: %s",
                   vram_last_error());
        FUZZ_CHECK(!strcmp(vram_option_str(VRAM_OPT_LOG_LEVEL), "sentinel"),
                   "a refused file changed LOG_LEVEL");
    } else {
        FUZZ_CHECK(rc == VRAM_EPARSE, "vram_options_load_file returned %d", rc);
        FUZZ_CHECK(strstr(vram_last_error(), path), "error message does not name the file \"%s\"",
                   path);
        FUZZ_CHECK(!strcmp(vram_option_str(VRAM_OPT_LOG_LEVEL), "sentinel"),
                   "a rejected file changed LOG_LEVEL to \"%s\"",
                   vram_option_str(VRAM_OPT_LOG_LEVEL));
        check_all_options_readable("after a rejected load");
    }
    for (int i = 0; i < VRAM_OPT_COUNT_; i++)
        free(want[i]);
    reset_options();
    return 0;
}
