/* vram_endpoint: where vramd listens and where its clients look, one order
 * for the daemon, the CLI, Python and the Slurm plugin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "vram.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/vram-endpoint-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    unsetenv("VRAM_SOCKET");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/vram/vramd.sock", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/vram", dir);
    rmdir(path);
    rmdir(dir);
    return 0;
}

static void the_option_wins_even_when_absent(void **state)
{
    (void)state;
    char buf[256];
    const char *why = NULL;
    assert_int_equal(vram_option_set(VRAM_OPT_SOCKET, "/nonexistent/s.sock"), 0);
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_CONNECT, buf, sizeof buf, &why), 0);
    assert_string_equal(buf, "/nonexistent/s.sock");
    assert_string_equal(why, "VRAM_SOCKET");
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_LISTEN, buf, sizeof buf, NULL), 0);
    assert_string_equal(buf, "/nonexistent/s.sock");
    assert_int_equal(vram_option_set(VRAM_OPT_SOCKET, ""), 0); /* back to the default */
}

static void a_daemon_listens_in_the_runtime_dir_then_tmp(void **state)
{
    (void)state;
    if (geteuid() == 0) skip(); /* root's vramd listens in /run/vram */
    char buf[256], want[256];
    setenv("XDG_RUNTIME_DIR", dir, 1);
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_LISTEN, buf, sizeof buf, NULL), 0);
    snprintf(want, sizeof want, "%s/vram/vramd.sock", dir);
    assert_string_equal(buf, want);
    unsetenv("XDG_RUNTIME_DIR");
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_LISTEN, buf, sizeof buf, NULL), 0);
    snprintf(want, sizeof want, "/tmp/vram-%u/vramd.sock", (unsigned)geteuid());
    assert_string_equal(buf, want);
}

/* A client finds the socket its user's own vramd made, wherever the daemon's
 * order put it; a missing one is ECONN naming every candidate. */
static void a_client_finds_what_its_daemon_made(void **state)
{
    (void)state;
    if (geteuid() == 0) skip();
    char buf[256], listen_at[100];
    setenv("XDG_RUNTIME_DIR", dir, 1);
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_LISTEN, listen_at, sizeof listen_at, NULL), 0);
    struct stat st;
    if (stat(VRAM_SYSTEM_SOCKET, &st) != 0) {
        assert_int_equal(vram_endpoint(VRAM_ENDPOINT_CONNECT, buf, sizeof buf, NULL), VRAM_ECONN);
        assert_non_null(strstr(vram_last_error(), listen_at));
        assert_non_null(strstr(vram_last_error(), VRAM_SYSTEM_SOCKET));
    }
    char sub[128];
    snprintf(sub, sizeof sub, "%s/vram", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", listen_at);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *why = NULL;
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_CONNECT, buf, sizeof buf, &why), 0);
    assert_string_equal(buf, listen_at);
    assert_non_null(strstr(why, "own"));
    close(fd);
    unsetenv("XDG_RUNTIME_DIR");
}

static void small_buffers_are_refused(void **state)
{
    (void)state;
    char buf[8];
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_LISTEN, buf, sizeof buf, NULL), VRAM_EINVAL);
    assert_int_equal(vram_endpoint(VRAM_ENDPOINT_LISTEN, NULL, 0, NULL), VRAM_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_option_wins_even_when_absent),
        cmocka_unit_test(a_daemon_listens_in_the_runtime_dir_then_tmp),
        cmocka_unit_test(a_client_finds_what_its_daemon_made),
        cmocka_unit_test(small_buffers_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
