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
    if (rc == 0) {
        fuzz_accepted++;
        check_all_options_readable("after a successful load");
    } else {
        FUZZ_CHECK(rc == VRAM_EPARSE, "vram_options_load_file returned %d", rc);
        FUZZ_CHECK(strstr(vram_last_error(), path), "error message does not name the file \"%s\"",
                   path);
        FUZZ_CHECK(!strcmp(vram_option_str(VRAM_OPT_LOG_LEVEL), "sentinel"),
                   "a rejected file changed LOG_LEVEL to \"%s\"",
                   vram_option_str(VRAM_OPT_LOG_LEVEL));
        check_all_options_readable("after a rejected load");
    }
    reset_options();
    return 0;
}
