/* Fuzz target: the alert rules file (vram_watch_check_rules, src/watch/
 * rules_yaml.c, libyaml underneath). A file is accepted whole or refused with
 * a message naming the file and a line; an accepted one lists every rule. */
#include "fuzz.h"
#include "watch/watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_memfile(data, size);
    char *text = NULL;
    vram_clear_error();
    int rc = vram_watch_check_rules(path, &text);
    if (rc != 0) {
        FUZZ_CHECK_FAILED_WITH_MESSAGE(rc, "vram_watch_check_rules");
        FUZZ_CHECK(rc == VRAM_EPARSE || rc == VRAM_EIO || rc == VRAM_ENOMEM, "unexpected error %d",
                   rc);
        FUZZ_CHECK(rc != VRAM_EPARSE || strstr(vram_last_error(), path),
                   "the message does not name the file: %s", vram_last_error());
        FUZZ_CHECK(text == NULL, "output on failure");
        return 0;
    }
    fuzz_accepted++;
    FUZZ_CHECK(text != NULL, "no description of an accepted file");
    /* every described rule has a direction and a level */
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        FUZZ_CHECK(nl != NULL, "unterminated line in \"%s\"", text);
        *nl = '\0';
        FUZZ_CHECK(strstr(line, " above ") || strstr(line, " below "), "no direction: %s", line);
        FUZZ_CHECK(strstr(line, " -> "), "no level: %s", line);
        line = nl + 1;
    }
    free(text);
    return 0;
}
