/* vram.h — the one public header of libvram.
 *
 * Conventions: functions return 0 on success or a negative VRAM_E* code; a
 * failing function leaves no partial state. Handles are opaque and every
 * open/create has a close/destroy that accepts NULL. After a failure,
 * vram_last_error() holds a message naming the bad input (thread-local).
 */
#ifndef VRAM_H
#define VRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VRAM_API __attribute__((visibility("default")))

/* ===================================================================== */
/* core: errors                                                          */
/* ===================================================================== */

/* X(NAME, value, message): the one list of error codes. */
#define VRAM_ERRORS(X)                                                                             \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(ENODEV, -3, "no such device")                                                                \
    X(ENOTSUP, -4, "not supported")                                                                \
    X(ENOLIB, -5, "library not found")                                                             \
    X(EDRIVER, -6, "driver error")                                                                 \
    X(EAGAIN, -7, "temporary failure, try again")                                                  \
    X(EIO, -8, "input/output error")                                                               \
    X(EPARSE, -9, "malformed input")                                                               \
    X(ENOENT, -10, "not found")                                                                    \
    X(EPERM, -11, "permission denied")                                                             \
    X(EBUSY, -12, "resource busy")                                                                 \
    X(ESTATE, -13, "invalid state")                                                                \
    X(ETIMEDOUT, -14, "timed out")                                                                 \
    X(ECONN, -15, "cannot connect")

enum {
#define VRAM_ERR_ENUM_(name, value, msg) VRAM_##name = value,
    VRAM_ERRORS(VRAM_ERR_ENUM_)
#undef VRAM_ERR_ENUM_
};

/* Static message for an error code ("unknown error" for unknown codes). */
VRAM_API const char *vram_strerror(int err);
/* Static name of an error code, e.g. "VRAM_ENOMEM"; "VRAM_EUNKNOWN" if unknown. */
VRAM_API const char *vram_err_name(int err);
/* Detailed message of the last failure on this thread ("" if none). */
VRAM_API const char *vram_last_error(void);
/* Records a detailed message for this thread and returns err (for `return vram_fail(...)`). */
VRAM_API int vram_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
VRAM_API void vram_clear_error(void);

/* ===================================================================== */
/* core: options                                                         */
/* ===================================================================== */

/* X(NAME, type, default, help): the one table of options. Each is read from
 * the environment variable VRAM_<NAME>, may be overridden by a flag or config
 * file through vram_option_set(), and is listed by `--help` and /v1/config.
 * Types: STRING, SIZE (bytes, "20GiB"), SIZE_OR_FRACTION ("4GiB" or "0.1"),
 * INT, DOUBLE, BOOL, SECONDS. */
#define VRAM_OPTIONS(X)                                                                            \
    X(BACKEND, STRING, "auto", "device backend: auto, nvml, cuda, sim or cpu")                     \
    X(SIM, STRING, "", "simulated GPUs, e.g. 2xH100-80GB or A100-40GB,mygpu:24GiB")                \
    X(SIM_STATE, STRING, "", "simulated-GPU state file (default: runtime dir/vram/sim-*.state)")   \
    X(NVML_LIBRARY, STRING, "libnvidia-ml.so.1", "NVML library to dlopen")                         \
    X(CUDA_LIBRARY, STRING, "libcuda.so.1", "CUDA driver library to dlopen")                       \
    X(DRIVER_RETRIES, INT, "3", "retries of a transient driver error before ERROR state")          \
    X(LOG_LEVEL, STRING, "info", "log level: error, warn, info or debug")                          \
    X(POOL_STRATEGY, STRING, "balanced",                                                           \
      "pool strategy: greedy, balanced, consolidated or fragmentation-aware")                      \
    X(POOL_LIMIT, SIZE_OR_FRACTION, "0", "pool memory limit (bytes or fraction; 0 = none)")        \
    X(POOL_TRACE, STRING, "", "record pool requests to this trace file")                           \
    X(SOCKET, STRING, "", "vramd Unix socket (default: runtime dir/vram/vramd.sock)")              \
    X(LISTEN, STRING, "127.0.0.1:7878", "vramd loopback TCP address (empty: none)")                \
    X(DB, STRING, "", "vramd SQLite database (default: state dir/vram/vramd.db)")                  \
    X(TOKEN, STRING, "", "token that allows mutations over TCP")                                   \
    X(SAFETY_MARGIN, SIZE_OR_FRACTION, "0.05", "memory per device vramd never hands out")          \
    X(MAX_CONCURRENT_JOBS, INT, "0", "running jobs per device (0 = no limit)")                     \
    X(JOB_TIMEOUT, SECONDS, "0", "queued job gives up after this many seconds (0 = never)")        \
    X(PLACEMENT, STRING, "best-fit", "placement: best-fit or least-loaded")                        \
    X(BACKFILL, BOOL, "true", "start smaller queued jobs that fit while bigger ones wait")         \
    X(LEASE, SECONDS, "0", "job lease; unrenewed jobs are released (0 = watch pid only)")

typedef enum {
#define VRAM_OPT_ENUM_(name, type, def, help) VRAM_OPT_##name,
    VRAM_OPTIONS(VRAM_OPT_ENUM_)
#undef VRAM_OPT_ENUM_
        VRAM_OPT_COUNT_
} vram_option_t;

typedef enum {
    VRAM_OPTTYPE_STRING,
    VRAM_OPTTYPE_SIZE,
    VRAM_OPTTYPE_SIZE_OR_FRACTION,
    VRAM_OPTTYPE_INT,
    VRAM_OPTTYPE_DOUBLE,
    VRAM_OPTTYPE_BOOL,
    VRAM_OPTTYPE_SECONDS,
} vram_option_type_t;

/* Table metadata; name is e.g. "SAFETY_MARGIN", env is "VRAM_SAFETY_MARGIN". */
VRAM_API const char *vram_option_name(vram_option_t opt);
VRAM_API const char *vram_option_env(vram_option_t opt);
VRAM_API const char *vram_option_help(vram_option_t opt);
VRAM_API const char *vram_option_default(vram_option_t opt);
VRAM_API vram_option_type_t vram_option_type(vram_option_t opt);
/* Finds an option by NAME, name, VRAM_NAME or kebab-case; -1 if none. */
VRAM_API int vram_option_find(const char *name);
/* Overrides an option (flag or config file); validated by type: EINVAL names
 * the option and the bad value. Not thread-safe: set options before threads. */
VRAM_API int vram_option_set(vram_option_t opt, const char *value);
/* Current raw value: override, else environment, else default. Never NULL. */
VRAM_API const char *vram_option_str(vram_option_t opt);
VRAM_API int vram_option_int(vram_option_t opt, long long *out);
VRAM_API int vram_option_double(vram_option_t opt, double *out);
VRAM_API int vram_option_bool(vram_option_t opt, bool *out);
/* SIZE or SIZE_OR_FRACTION; a fraction is taken of `total`. */
VRAM_API int vram_option_size(vram_option_t opt, uint64_t total, uint64_t *out);
/* Reads KEY=VALUE lines (KEY as in vram_option_find; '#' comments). EPARSE
 * names the file, line and key; nothing is applied unless every line is valid. */
VRAM_API int vram_options_load_file(const char *path);

/* ===================================================================== */
/* core: units                                                           */
/* ===================================================================== */

/* Parses "512", "64KiB", "20GiB", "1.5GB", "2g" (k/m/g/t alone are binary;
 * KB/MB/GB/TB decimal; KiB.. binary). EINVAL with a message naming the text. */
VRAM_API int vram_parse_size(const char *text, uint64_t *out);
/* A size, or a fraction in [0,1] ("0.1") of `total`. */
VRAM_API int vram_parse_size_or_fraction(const char *text, uint64_t total, uint64_t *out);
/* Parses "30", "30s", "5m", "2h", "1.5s" into seconds. */
VRAM_API int vram_parse_seconds(const char *text, double *out);
/* Formats a byte count for people: "1.50 GiB", "512.00 MiB", "512 B". */
VRAM_API const char *vram_format_size(uint64_t bytes, char *buf, size_t len);
/* Bytes as GiB (double), for tables. */
VRAM_API double vram_gib(uint64_t bytes);

/* Monotonic clock in nanoseconds. */
VRAM_API uint64_t vram_now_ns(void);

/* ===================================================================== */
/* core: the table of common GPU models (sim specs, `vram plan --gpu-name`) */
/* ===================================================================== */

typedef struct {
    const char *name;     /* canonical, e.g. "A100-80GB" */
    uint64_t total_bytes; /* nominal memory */
    int cc_major, cc_minor;
    int multiprocessors;
    double power_limit_w;
} vram_gpu_model_t;

/* Case-insensitive look-up ("a100-80gb", "A100-80GB"); NULL if unknown. */
VRAM_API const vram_gpu_model_t *vram_gpu_model_find(const char *name);
/* The whole table; *count gets its length. */
VRAM_API const vram_gpu_model_t *vram_gpu_models(size_t *count);

/* ===================================================================== */
/* device: backends and devices                                          */
/* ===================================================================== */

typedef struct vram_ctx vram_ctx_t;

typedef enum {
    VRAM_HEALTH_AVAILABLE, /* answering, not saturated */
    VRAM_HEALTH_BUSY,      /* answering, but fully utilized or out of memory */
    VRAM_HEALTH_ERROR,     /* kept failing after retries; skipped by selection */
    VRAM_HEALTH_DISABLED,  /* switched off by the operator */
} vram_health_t;

#define VRAM_UNKNOWN_U64 UINT64_MAX /* unknown byte counts */
#define VRAM_UNKNOWN_INT (-1)       /* unknown small integers */

/* One device's state. Unknown values are VRAM_UNKNOWN_U64 / VRAM_UNKNOWN_INT /
 * negative power. */
typedef struct {
    int index;
    char name[96];
    char uuid[96];
    char backend[8]; /* "nvml", "cuda", "sim" or "cpu" */
    uint64_t total_bytes, used_bytes, free_bytes;
    int cc_major, cc_minor;
    int multiprocessors;
    int utilization_pct;
    int temperature_c;
    double power_w;
    vram_health_t health;
    char error[160]; /* last driver error, "" when healthy */
} vram_device_info_t;

/* One process using a device; used_bytes is VRAM_UNKNOWN_U64 when the driver
 * cannot tell (NVML_VALUE_NOT_AVAILABLE). */
typedef struct {
    pid_t pid;
    uint64_t used_bytes;
    char name[64]; /* command name from /proc, "" if unknown */
} vram_process_info_t;

/* Opens the backend named by VRAM_BACKEND (auto: a real driver, else sim when
 * VRAM_SIM is set, else cpu). ENOLIB/EDRIVER when a named backend cannot load;
 * auto never fails for a missing driver. Thread-safe after open. */
VRAM_API int vram_ctx_open(vram_ctx_t **out);
/* Same with an explicit backend name ("auto", "nvml", "cuda", "sim", "cpu"). */
VRAM_API int vram_ctx_open_backend(const char *backend, vram_ctx_t **out);
VRAM_API void vram_ctx_close(vram_ctx_t *ctx);
VRAM_API const char *vram_ctx_backend(const vram_ctx_t *ctx);
/* Why auto chose this backend, one line; "" when a backend was named. */
VRAM_API const char *vram_ctx_reason(const vram_ctx_t *ctx);
VRAM_API int vram_ctx_device_count(const vram_ctx_t *ctx);
/* Fresh state of one device (queries the driver, retrying transient errors). */
VRAM_API int vram_device_info(vram_ctx_t *ctx, int index, vram_device_info_t *out);
/* Processes using a device; *count gets the total, at most `cap` are written. */
VRAM_API int vram_device_processes(vram_ctx_t *ctx, int index, vram_process_info_t *procs,
                                   size_t cap, size_t *count);
/* Device memory (cuda, sim, cpu backends; ENOTSUP on nvml). ENOMEM when full. */
VRAM_API int vram_device_alloc(vram_ctx_t *ctx, int index, size_t size, void **ptr);
VRAM_API int vram_device_free(vram_ctx_t *ctx, int index, void *ptr);
/* Operator switch: DISABLED devices are skipped by selection. */
VRAM_API int vram_device_set_disabled(vram_ctx_t *ctx, int index, bool disabled);
/* Best device for `need` bytes by score (free memory, utilization, health);
 * ENODEV when none is healthy with enough free memory. */
VRAM_API int vram_device_select(vram_ctx_t *ctx, uint64_t need, int *index);
VRAM_API const char *vram_health_name(vram_health_t h);

/* ===================================================================== */
/* pool: caching device-memory allocator (src/pool/)                    */
/* ===================================================================== */

/* ===================================================================== */
/* plan: estimator and batch-size planner (src/plan/)                   */
/* ===================================================================== */

/* ===================================================================== */
/* sched: ledger, queue, store (src/sched/)                             */
/* ===================================================================== */

#ifdef __cplusplus
}
#endif
#endif /* VRAM_H */
