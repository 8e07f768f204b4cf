/* Whole-file reading: contents, the size limit, missing files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/file.h"
#include "vram.h"

static void reads_across_buffer_growth(void **state)
{
    (void)state;
    char path[] = "/tmp/vram-file-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    /* Sizes around the first buffer's edge and well past it. */
    static const size_t sizes[] = {0, 1, 4094, 4095, 4096, 4097, 100000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *data = malloc(sizes[i] + 1);
        for (size_t k = 0; k < sizes[i]; k++)
            data[k] = (char)('a' + k % 26);
        assert_int_equal(ftruncate(fd, 0), 0);
        assert_int_equal(pwrite(fd, data, sizes[i], 0), (ssize_t)sizes[i]);
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(vram_read_file(path, 1 << 20, &text, &len), 0);
        assert_int_equal(len, sizes[i]);
        assert_memory_equal(text, data, sizes[i]);
        assert_int_equal(text[len], '\0');
        free(text);
        free(data);
    }
    /* Over the limit: refused with the file named. */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(vram_read_file(path, 1000, &text, &len), VRAM_EPARSE);
    assert_null(text);
    assert_non_null(strstr(vram_last_error(), path));
    close(fd);
    unlink(path);
}

static void missing_file_is_named(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len;
    assert_int_equal(vram_read_file("/nonexistent/vram.json", 100, &text, &len), VRAM_EIO);
    assert_null(text);
    assert_non_null(strstr(vram_last_error(), "/nonexistent/vram.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_across_buffer_growth),
        cmocka_unit_test(missing_file_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
