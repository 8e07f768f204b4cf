/* Error codes, names and the per-thread detailed message. */
#include "vram.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];
static _Thread_local int last_code;

const char *vram_strerror(int err)
{
    switch (err) {
#define VRAM_ERR_MSG_(name, value, msg, http, code)                                                \
    case value:                                                                                    \
        return msg;
        VRAM_ERRORS(VRAM_ERR_MSG_)
#undef VRAM_ERR_MSG_
    }
    return "unknown error";
}

const char *vram_err_name(int err)
{
    switch (err) {
#define VRAM_ERR_NAME_(name, value, msg, http, code)                                               \
    case value:                                                                                    \
        return "VRAM_" #name;
        VRAM_ERRORS(VRAM_ERR_NAME_)
#undef VRAM_ERR_NAME_
    }
    return "VRAM_EUNKNOWN";
}

int vram_err_http(int err, const char **code)
{
    switch (err) {
#define VRAM_ERR_HTTP_(name, value, msg, http, c)                                                  \
    case value:                                                                                    \
        if (code) *code = c;                                                                       \
        return http;
        VRAM_ERRORS(VRAM_ERR_HTTP_)
#undef VRAM_ERR_HTTP_
    }
    if (code) *code = "internal";
    return 500;
}

int vram_last_error_code(void)
{
    return last_code;
}

const char *vram_last_error(void)
{
    return last_error;
}

void vram_clear_error(void)
{
    last_error[0] = '\0';
    last_code = 0;
}

int vram_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    last_code = err;
    return err;
}
