/* Shared helpers of the fuzz targets. Each fuzz_<target>.c defines the
 * libFuzzer entry point below; driver.c (the smoke run in `make test`) or
 * libFuzzer itself (`make fuzz`, clang) calls it with one input at a time. */
#ifndef VRAM_FUZZ_H
#define VRAM_FUZZ_H

#include "vram.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the parser under test. On failure it prints the condition
 * and the library's last error, then aborts: the driver's SIGABRT handler (or
 * libFuzzer) saves the input that caused it. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n  ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n  vram_last_error: \"%s\"\n", vram_last_error());                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Inputs that trigger a bug already reported (docs/fuzzing.md, "Findings",
 * by id) are skipped by the smoke so `make test` stays green until the fix
 * lands; remove the filter with the fix. Strict builds (-DVRAM_FUZZ_STRICT=ON,
 * or `make fuzz FUZZ_STRICT=ON`) run them too. */
#ifdef VRAM_FUZZ_STRICT
#define FUZZ_KNOWN_ISSUE(id, cond) ((void)(id), (void)(cond), false)
#else
#define FUZZ_KNOWN_ISSUE(id, cond) ((void)(id), (cond) ? (fuzz_known_skipped++, true) : false)
#endif

/* Counters the smoke driver prints: inputs the parser accepted (shows the
 * mutations reach past the first check) and inputs skipped as known issues. */
extern unsigned long fuzz_accepted, fuzz_known_skipped;

/* A failing parser must say why: vram_last_error() names the bad part. */
#define FUZZ_CHECK_FAILED_WITH_MESSAGE(rc, what)                                                   \
    FUZZ_CHECK((rc) < 0 && *vram_last_error(), "%s returned %d without an error message", what,    \
               (int)(rc))

/* The input as a C string (malloc'd; NUL bytes inside stay, so C-string
 * parsers see the prefix up to the first one). Aborts when out of memory. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Writes the input to an anonymous in-memory file and returns a path that
 * opens it ("/proc/self/fd/N"), for parsers that read files. The file is
 * created once per process and rewritten on every call. */
const char *fuzz_memfile(const uint8_t *data, size_t size);

#endif
