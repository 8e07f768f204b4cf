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
/* One row per error: name, value, message, and how vramd answers it over
 * HTTP (status and the "code" of its JSON error); vram_err_http reads the
 * last two, so every route maps an error the same way. */
#define VRAM_ERRORS(X)                                                                             \
    X(OK, 0, "success", 200, "ok")                                                                 \
    X(EINVAL, -1, "invalid argument", 422, "invalid_value")                                        \
    X(ENOMEM, -2, "out of memory", 500, "internal")                                                \
    X(ENODEV, -3, "no such device", 404, "not_found")                                              \
    X(ENOTSUP, -4, "not supported", 501, "not_supported")                                          \
    X(ENOLIB, -5, "library not found", 500, "internal")                                            \
    X(EDRIVER, -6, "driver error", 502, "driver")                                                  \
    X(EAGAIN, -7, "temporary failure, try again", 503, "unavailable")                              \
    X(EIO, -8, "input/output error", 500, "internal")                                              \
    X(EPARSE, -9, "malformed input", 400, "bad_request")                                           \
    X(ENOENT, -10, "not found", 404, "not_found")                                                  \
    X(EPERM, -11, "permission denied", 403, "forbidden")                                           \
    X(EBUSY, -12, "resource busy", 429, "quota")                                                   \
    X(ESTATE, -13, "invalid state", 409, "conflict")                                               \
    X(ETIMEDOUT, -14, "timed out", 504, "timeout")                                                 \
    X(ECONN, -15, "cannot connect", 503, "unavailable")

enum {
#define VRAM_ERR_ENUM_(name, value, msg, http, code) VRAM_##name = value,
    VRAM_ERRORS(VRAM_ERR_ENUM_)
#undef VRAM_ERR_ENUM_
};

/* Static message for an error code ("unknown error" for unknown codes). */
VRAM_API const char *vram_strerror(int err);
/* Static name of an error code, e.g. "VRAM_ENOMEM"; "VRAM_EUNKNOWN" if unknown. */
VRAM_API const char *vram_err_name(int err);
/* The HTTP status vramd answers err with (500 for unknown codes) and, when
 * code is not NULL, the static "code" of its JSON error ("internal"). */
VRAM_API int vram_err_http(int err, const char **code);
/* Detailed message of the last failure on this thread ("" if none). */
VRAM_API const char *vram_last_error(void);
/* The code of the last vram_fail on this thread (0 if none or cleared). */
VRAM_API int vram_last_error_code(void);
/* Records a detailed message for this thread and returns err (for `return vram_fail(...)`). */
VRAM_API int vram_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
VRAM_API void vram_clear_error(void);

/* ===================================================================== */
/* core: version                                                         */
/* ===================================================================== */

/* The version of this header (CMake reads the project version from here). */
#define VRAM_VERSION_MAJOR  0
#define VRAM_VERSION_MINOR  1
#define VRAM_VERSION_PATCH  0
#define VRAM_VERSION_STRING "0.1.0"
/* Raised whenever the C API gains or changes a declaration; a program built
 * against API N runs with any libvram whose vram_api_version() is >= N and
 * has the same major version (the SONAME). */
#define VRAM_API_VERSION 1
/* The vramd HTTP API this library's clients and daemon speak (/v1/...). */
#define VRAM_HTTP_API "v1"

/* The library's own version ("0.1.0"), which may differ from the header a
 * program was compiled with. Static string; thread-safe; never fails. */
VRAM_API const char *vram_version(void);
/* The library's VRAM_API_VERSION. Thread-safe; never fails. */
VRAM_API int vram_api_version(void);
/* `git describe --always --dirty --tags` of the tree the library was built
 * from, or the packager's -DVRAM_BUILD_ID, or "unknown" outside git. Static
 * string; thread-safe; never fails. */
VRAM_API const char *vram_build_id(void);

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
    X(POOL_EXPANDABLE, STRING, "auto",                                                             \
      "pool expandable segments: auto (where the device has virtual memory), true or false")       \
    X(SOCKET, STRING, "", "vramd Unix socket (default: runtime dir/vram/vramd.sock)")              \
    X(LISTEN, STRING, "127.0.0.1:7878", "vramd loopback TCP address (empty: none)")                \
    X(LISTEN_HOSTS, STRING, "",                                                                    \
      "other names TCP clients may give in Host (comma-separated, name or name:port; a relay)")    \
    X(DB, STRING, "", "vramd SQLite database (default: state dir/vram/vramd.db)")                  \
    X(TOKEN, SECRET, "", "token that allows mutations over TCP")                                   \
    X(SAFETY_MARGIN, SIZE_OR_FRACTION, "0.05", "memory per device vramd never hands out")          \
    X(MAX_CONCURRENT_JOBS, INT, "0", "running jobs per device (0 = no limit)")                     \
    X(JOB_TIMEOUT, SECONDS, "0", "queued job gives up after this many seconds (0 = never)")        \
    X(PLACEMENT, STRING, "best-fit", "placement: best-fit or least-loaded")                        \
    X(BACKFILL, BOOL, "true", "start smaller queued jobs that fit while bigger ones wait")         \
    X(LEASE, SECONDS, "0", "job lease; unrenewed jobs are released (0 = watch pid only)")          \
    X(SOCKET_MODE, STRING, "0660", "permissions of the vramd Unix socket (octal)")                 \
    X(SOCKET_GROUP, STRING, "vram", "group of a root vramd's socket; its members may connect")     \
    X(TOKEN_FILE, STRING, "", "file holding the TCP token (0600, owned by vramd's user)")          \
    X(MAX_QUEUED_PER_USER, INT, "1000", "queued jobs per uid (0 = no limit; root is exempt)")      \
    X(MAX_RUNNING_PER_USER, INT, "64", "running jobs per uid (0 = no limit; root is exempt)")      \
    X(STATUS_CACHE, SECONDS, "0.25", "GET /v1/status reuses a device probe up to this old")        \
    X(KILL_GRACE, SECONDS, "10", "cancel of a running job: SIGKILL this long after SIGTERM")       \
    X(MAX_CONNECTIONS_PER_PEER, INT, "32", "open connections per socket uid or TCP address")       \
    X(REQUEST_TIMEOUT, SECONDS, "10", "seconds a connection may idle or dribble a request")        \
    X(JOB_RETENTION, SECONDS, "720h",                                                              \
      "ended jobs and their events kept in the database (0: forever)")                             \
    /* watch: monitoring (docs/monitoring.md) */                                                   \
    X(WATCH_INTERVAL, SECONDS, "1", "vramd samples the devices this often")                        \
    X(WATCH_HISTORY, SECONDS, "1h", "full-rate history kept (older: per-minute mean and max)")     \
    X(WATCH_RETENTION, SECONDS, "168h", "per-minute history kept in the database")                 \
    X(ALERT_RULES, STRING, "", "alert rules YAML file (default: the built-in rules)")              \
    X(ALERT_WEBHOOK, SECRET, "", "URL that receives each alert as a JSON POST")                    \
    X(ALERT_EXEC, SECRET, "", "command run for each alert, the alert in VRAM_ALERT_* variables")   \
    X(ALERT_ALERTMANAGER, SECRET, "", "Alertmanager base URL that receives each alert (v2 API)")   \
    X(ALERT_CLUSTER, STRING, "", "cluster label on every alert (the host is always there)")

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
    /* A string that may hold a credential (a token, a webhook URL with a
     * password, a command with a key): /v1/config shows it to root only, and
     * a config file that sets one must not be readable by group or others. */
    VRAM_OPTTYPE_SECRET,
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
 * names the file, line and key; EPERM when the file sets a SECRET option
 * and group or others may read it; nothing is applied unless every line is
 * valid. */
VRAM_API int vram_options_load_file(const char *path);

/* Where vramd's Unix socket is: the one answer for vramd, the CLI, Python
 * and the Slurm plugin. VRAM_ENDPOINT_LISTEN: where a vramd started now by
 * this user listens: VRAM_SOCKET, else /run/vram/vramd.sock for root, else
 * $XDG_RUNTIME_DIR/vram/vramd.sock, else /tmp/vram-UID/vramd.sock.
 * VRAM_ENDPOINT_CONNECT: VRAM_SOCKET when set (even if absent), else the
 * first that exists (lstat, or a directory that hides it) of the socket
 * this user's own vramd listens on and the system socket. Fills buf and,
 * when why is not NULL, *why (a static phrase naming the choice); returns
 * 0, VRAM_ECONN when no candidate exists (buf then holds the user's own
 * socket, the message names every candidate), VRAM_EINVAL for a NULL or too
 * small buf. Reads the option table and the environment; thread-safe. */
typedef enum { VRAM_ENDPOINT_LISTEN = 0, VRAM_ENDPOINT_CONNECT = 1 } vram_endpoint_use_t;
#define VRAM_SYSTEM_SOCKET "/run/vram/vramd.sock"
VRAM_API int vram_endpoint(vram_endpoint_use_t use, char *buf, size_t len, const char **why);

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

/* Levenshtein distance of the first 63 bytes of a and b (for "did you
 * mean"). Neither may be NULL. Thread-safe. */
VRAM_API size_t vram_edit_distance(const char *a, const char *b);

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
 * auto never fails for a missing driver. EINVAL for an unknown backend or a
 * malformed VRAM_SIM (the message names the bad token). Thread-safe after open. */
VRAM_API int vram_ctx_open(vram_ctx_t **out);
/* Same with an explicit backend name ("auto", "nvml", "cuda", "sim", "cpu"). */
VRAM_API int vram_ctx_open_backend(const char *backend, vram_ctx_t **out);
VRAM_API void vram_ctx_close(vram_ctx_t *ctx);
VRAM_API const char *vram_ctx_backend(const vram_ctx_t *ctx);
/* Why auto chose this backend, one line; "" when a backend was named. */
VRAM_API const char *vram_ctx_reason(const vram_ctx_t *ctx);
VRAM_API int vram_ctx_device_count(const vram_ctx_t *ctx);
/* Fresh state of one device (queries the driver, retrying transient errors
 * with backoff, VRAM_DRIVER_RETRIES). A device that keeps failing is still
 * reported (returns 0): health ERROR, the driver's message in error, unknown
 * figures. ENODEV for a bad index, EINVAL for NULL. */
VRAM_API int vram_device_info(vram_ctx_t *ctx, int index, vram_device_info_t *out);
/* Processes using a device; *count gets the total, at most `cap` are written.
 * EDRIVER with the driver's message when the device keeps failing. */
VRAM_API int vram_device_processes(vram_ctx_t *ctx, int index, vram_process_info_t *procs,
                                   size_t cap, size_t *count);
/* Device memory (cuda, sim, cpu backends; ENOTSUP on nvml). ENOMEM when full,
 * ESTATE on a DISABLED device. Pointers from sim are reserved address space,
 * never to be dereferenced. Free accepts NULL; EINVAL for a pointer this
 * context did not allocate on that device. Thread-safe. */
VRAM_API int vram_device_alloc(vram_ctx_t *ctx, int index, size_t size, void **ptr);
VRAM_API int vram_device_free(vram_ctx_t *ctx, int index, void *ptr);
/* Virtual device memory (CUDA's VMM API: the cuda backend when the driver
 * has it, and sim): address space reserved once, backed by physical memory
 * in chunks mapped on demand. ENOTSUP where there is none (cpu, nvml).
 * Every size and address is a multiple of the device's granularity
 * (vram_device_vmm_granularity; 2 MiB on current GPUs). vmm_map backs
 * [addr, addr + size), inside one reservation and not mapped yet, with new
 * physical memory readable and writable by the device, counted as device
 * memory in use (ENOMEM when the device is full); vmm_unmap takes back
 * exactly what one vmm_map call mapped; vmm_unreserve returns a whole
 * reservation with nothing mapped in it. vmm_move takes what one vmm_map
 * call mapped at `from` (exactly that chunk, `size` bytes) and maps the
 * same physical memory at `to` (inside a reservation of the device, not
 * mapped yet), readable and writable by the device; the memory is never
 * released in between, so the device memory in use does not change and no
 * other process can take it (on CUDA: cuMemUnmap, cuMemMap of the same
 * handle, cuMemSetAccess; no cuMemRelease or cuMemCreate). If the driver
 * fails after the unmap, the chunk is mapped back at `from`. EINVAL
 * (nothing changed) for anything else. Thread-safe. */
VRAM_API int vram_device_vmm_granularity(vram_ctx_t *ctx, int index, size_t *granularity);
VRAM_API int vram_device_vmm_reserve(vram_ctx_t *ctx, int index, size_t size, void **va);
VRAM_API int vram_device_vmm_unreserve(vram_ctx_t *ctx, int index, void *va, size_t size);
VRAM_API int vram_device_vmm_map(vram_ctx_t *ctx, int index, void *addr, size_t size);
VRAM_API int vram_device_vmm_unmap(vram_ctx_t *ctx, int index, void *addr, size_t size);
VRAM_API int vram_device_vmm_move(vram_ctx_t *ctx, int index, void *from, void *to, size_t size);
/* Operator switch (per context): DISABLED devices are skipped by selection
 * and refuse allocations. */
VRAM_API int vram_device_set_disabled(vram_ctx_t *ctx, int index, bool disabled);
/* Best device for `need` bytes by score (free memory, utilization, health);
 * ENODEV when none is healthy with enough free memory. */
VRAM_API int vram_device_select(vram_ctx_t *ctx, uint64_t need, int *index);
VRAM_API const char *vram_health_name(vram_health_t h);

/* ===================================================================== */
/* pool: caching device-memory allocator (src/pool/)                    */
/* ===================================================================== */

/* A caching allocator of device memory, one per (context, device). It asks the
 * device for large segments, hands out 512-byte-aligned blocks carved from
 * them (best fit, split on allocation, neighbours coalesced on free) and keeps
 * freed blocks for reuse instead of returning them to the driver. Blocks are
 * per stream, like PyTorch's caching allocator: a freed block is reused only
 * for requests on the stream it was allocated on. Metadata lives in host
 * memory; the pool never reads or writes device memory. docs/pool.md. */
typedef struct vram_pool vram_pool_t;

typedef enum {
    VRAM_POOL_GREEDY,              /* big segments, never released on its own */
    VRAM_POOL_BALANCED,            /* default: best fit; idle segments released above a threshold */
    VRAM_POOL_CONSOLIDATED,        /* packs into the oldest segments, releases emptied ones */
    VRAM_POOL_FRAGMENTATION_AWARE, /* size classes, no big-for-small splits, trims on fragmentation
                                    */
    VRAM_POOL_STRATEGY_COUNT_
} vram_pool_strategy_t;

/* "greedy", "balanced", "consolidated", "fragmentation-aware"; "?" if unknown. */
VRAM_API const char *vram_pool_strategy_name(vram_pool_strategy_t s);
/* Case-insensitive, '_' == '-'. EINVAL names the text and the valid names. */
VRAM_API int vram_pool_strategy_parse(const char *text, vram_pool_strategy_t *out);

/* Creation parameters. limit_bytes (0 = none) wins over limit_fraction (of the
 * device's total, 0 = none). trace_path: record requests there (NULL = none;
 * "%d" is replaced by the device index). */
typedef enum {
    VRAM_POOL_EXPANDABLE_AUTO, /* on where the device has virtual memory (cuda with VMM, sim) */
    VRAM_POOL_EXPANDABLE_ON,   /* on; the pool falls back to segments where unsupported */
    VRAM_POOL_EXPANDABLE_OFF,  /* one device allocation per segment */
} vram_pool_expandable_t;

/* expandable: whether segments are ranges of reserved address space backed
 * granule by granule (docs/pool.md, "Expandable segments"). */
typedef struct {
    vram_pool_strategy_t strategy;
    uint64_t limit_bytes;
    double limit_fraction;
    const char *trace_path;
    vram_pool_expandable_t expandable;
} vram_pool_config_t;

/* Fills *cfg from the options VRAM_POOL_STRATEGY, VRAM_POOL_LIMIT (a fraction
 * stays a fraction), VRAM_POOL_TRACE (the pointer stays valid until the
 * option changes) and VRAM_POOL_EXPANDABLE. EINVAL names a bad option value;
 * *cfg is untouched then. */
VRAM_API int vram_pool_config_from_options(vram_pool_config_t *cfg);

/* Creates a pool on device `device` of `ctx` (cuda, sim or cpu backend); cfg
 * NULL = vram_pool_config_from_options. The pool borrows ctx, which must
 * outlive it. EINVAL: NULL argument or bad config (named); ENODEV: no such
 * device; EIO: the trace file cannot be opened; ENOMEM: host memory. */
VRAM_API int vram_pool_create(vram_ctx_t *ctx, int device, const vram_pool_config_t *cfg,
                              vram_pool_t **out);
/* Returns every segment to the device (live blocks become invalid) and frees
 * the pool. Accepts NULL. Not concurrently with other calls on this pool. */
VRAM_API void vram_pool_destroy(vram_pool_t *pool);

/* Allocates `size` bytes usable on `stream` (an opaque handle, NULL = default
 * stream). size 0 gives *ptr = NULL and 0. ENOMEM after the OOM chain (cached
 * segments released, handlers called, retried), or at once when the request
 * exceeds the device's total memory or the pool limit; the message states the
 * request, reserved-but-unallocated bytes, the largest free block and the
 * device's free memory. Thread-safe. */
VRAM_API int vram_pool_alloc(vram_pool_t *pool, size_t size, void *stream, void **ptr);
/* Frees a block of this pool; NULL is a no-op. EINVAL (counted in
 * num_invalid_frees, the pool unchanged) for a pointer the pool did not hand
 * out or that was already freed. Thread-safe. */
VRAM_API int vram_pool_free(vram_pool_t *pool, void *ptr);
/* Returns every wholly unused segment to the device, and unmaps the unused
 * chunks at the end of each expandable segment; *released (may be NULL)
 * gets the bytes returned. Thread-safe. */
VRAM_API int vram_pool_trim(vram_pool_t *pool, uint64_t *released);
/* Caps the pool's reserved bytes (0 = no limit; mapped bytes of expandable
 * segments count); what is reserved above a new limit is released as it
 * empties. Thread-safe. */
VRAM_API int vram_pool_set_limit(vram_pool_t *pool, uint64_t limit_bytes);

/* Called, in registration order, when the device (or the limit) refuses a
 * segment even after the pool released its cached segments. The handler may
 * free memory (vram_pool_free, offload, ...); it runs on the allocating thread
 * without the pool's lock. Return nonzero if something was freed: the pool
 * then retries, and stops calling handlers once the retry succeeds. */
typedef int (*vram_pool_oom_fn)(vram_pool_t *pool, size_t request, void *user);
/* Appends a handler (at most 16: ENOMEM). Thread-safe. */
VRAM_API int vram_pool_add_oom_handler(vram_pool_t *pool, vram_pool_oom_fn fn, void *user);

/* One statistic as in PyTorch's memory_stats: current value, peak since
 * creation or the last reset, and cumulative amounts added and removed. */
typedef struct {
    int64_t current, peak, allocated, freed;
} vram_pool_stat_t;

/* Index of the statistics arrays: all blocks, small pool (requests of at most
 * 1 MiB, 2 MiB segments) and large pool. Allocations count by the request's
 * size; segments and reserved bytes by the segment's kind, and an expandable
 * segment (one per stream, for every size) counts as large. */
enum { VRAM_POOL_STAT_ALL, VRAM_POOL_STAT_SMALL, VRAM_POOL_STAT_LARGE, VRAM_POOL_STAT_KINDS_ };

/* Same meanings as PyTorch: allocation = allocated blocks; segment = device
 * allocations held; active = allocated blocks (this pool has no pending stream
 * frees, so active == allocated); inactive_split = free blocks inside segments
 * that are partly used; *_bytes the corresponding sizes (requested_bytes: the
 * sizes asked for, before rounding). */
typedef struct {
    vram_pool_stat_t allocation[VRAM_POOL_STAT_KINDS_], segment[VRAM_POOL_STAT_KINDS_];
    vram_pool_stat_t active[VRAM_POOL_STAT_KINDS_], inactive_split[VRAM_POOL_STAT_KINDS_];
    vram_pool_stat_t allocated_bytes[VRAM_POOL_STAT_KINDS_];
    vram_pool_stat_t reserved_bytes[VRAM_POOL_STAT_KINDS_];
    vram_pool_stat_t active_bytes[VRAM_POOL_STAT_KINDS_];
    vram_pool_stat_t inactive_split_bytes[VRAM_POOL_STAT_KINDS_];
    vram_pool_stat_t requested_bytes[VRAM_POOL_STAT_KINDS_];
    uint64_t num_alloc_retries; /* device refusals answered by releasing cache and retrying */
    uint64_t num_ooms;          /* VRAM_ENOMEM returned */
    uint64_t num_device_alloc, num_device_free;
    uint64_t num_invalid_frees;  /* foreign pointers and double frees */
    uint64_t num_trims;          /* segments released by trim, thresholds or the OOM chain */
    uint64_t largest_free_block; /* bytes; 0 when nothing is cached */
    uint64_t limit_bytes;        /* 0 = none */
    double fragmentation;        /* 1 - largest free block / (reserved - allocated); 0 if none */
    double efficiency;           /* requested / reserved bytes; 1 when nothing is reserved */
    uint64_t num_device_map, num_device_unmap; /* chunks mapped / unmapped (expandable) */
    uint64_t num_device_move; /* chunks moved within expandable segments (under the limit) */
} vram_pool_stats_t;

/* A consistent copy of the statistics. Thread-safe. */
VRAM_API int vram_pool_stats(vram_pool_t *pool, vram_pool_stats_t *out);
/* Sets every peak to its current value. Thread-safe. */
VRAM_API void vram_pool_reset_peaks(vram_pool_t *pool);
/* JSON text of the pool: strategy, limit, statistics (PyTorch key names such
 * as "allocated_bytes.all.current") and every segment with its blocks. The
 * caller frees it with free(); NULL when out of host memory. Thread-safe. */
VRAM_API char *vram_pool_snapshot_json(vram_pool_t *pool);

/* PyTorch pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator):
 * one process-wide context (vram_ctx_open) and one pool per device, created
 * on first use from the options. malloc returns NULL when out of memory;
 * free ignores pointers it does not know (counted). Thread-safe. */
VRAM_API void *vram_torch_malloc(ssize_t size, int device, void *stream);
VRAM_API void vram_torch_free(void *ptr, ssize_t size, int device, void *stream);
/* The pool vram_torch_malloc uses for `device` (NULL until first use), for
 * statistics and snapshots. */
VRAM_API vram_pool_t *vram_torch_pool(int device);

/* ===================================================================== */
/* plan: estimator and batch-size planner (src/plan/)                   */
/* ===================================================================== */

/* A model's architecture: the estimator computes parameter counts, tensor
 * shapes and activations from it. Built by vram_model_find (catalog),
 * vram_model_from_hf_config or vram_model_from_profile; plain data, copyable.
 * Transformer fields are 0 where they do not apply. */
typedef enum {
    VRAM_FAMILY_BERT,         /* post-LN encoder with pooler: BERT, RoBERTa */
    VRAM_FAMILY_GPT2,         /* pre-LN decoder, learned positions, tied LM head */
    VRAM_FAMILY_GPTNEOX,      /* pre-LN decoder, rotary, parallel residual, untied head */
    VRAM_FAMILY_LLAMA,        /* RMSNorm, SwiGLU, rotary, GQA: LLaMA, Mistral */
    VRAM_FAMILY_T5,           /* encoder-decoder, relative position bias, shared embeddings */
    VRAM_FAMILY_VIT,          /* pre-LN encoder over image patches, class token, head */
    VRAM_FAMILY_RESNET,       /* torchvision ResNet; variant = depth (18..152) */
    VRAM_FAMILY_VGG,          /* torchvision VGG without BN; variant = depth (11..19) */
    VRAM_FAMILY_MOBILENET_V2, /* torchvision MobileNetV2, width 1.0 */
    VRAM_FAMILY_EFFICIENTNET, /* torchvision EfficientNet; variant = 0 for B0 */
    VRAM_FAMILY_LSTM,         /* word-level LSTM language model (embedding, LSTM, decoder) */
    VRAM_FAMILY_GRU,          /* same with GRU layers */
    VRAM_FAMILY_PROFILE,      /* measured profile: counts given, no architecture */
    /* estimator second edition (docs/estimation.md, "Families") */
    VRAM_FAMILY_QWEN2,       /* LLaMA layout with q/k/v biases */
    VRAM_FAMILY_PHI,         /* Phi-1/2: LayerNorm, parallel attention + GELU MLP, biases */
    VRAM_FAMILY_PHI3,        /* Phi-3: fused qkv and gate_up, RMSNorm, SwiGLU */
    VRAM_FAMILY_GEMMA,       /* RMSNorm, GeGLU, tied head */
    VRAM_FAMILY_GEMMA2,      /* Gemma + post-attention and post-MLP norms */
    VRAM_FAMILY_OPT,         /* learned positions (+2), ReLU MLP, biases, optional projections */
    VRAM_FAMILY_GPT_BIGCODE, /* GPT-2 layout with multi-query attention (StarCoder) */
    VRAM_FAMILY_MIXTRAL,     /* LLaMA attention, sparse MoE MLP (router + experts) */
    VRAM_FAMILY_QWEN2_MOE,   /* Qwen2 attention, MoE MLP + gated shared expert */
    VRAM_FAMILY_WHISPER,     /* encoder-decoder over log-mel frames */
    VRAM_FAMILY_WAV2VEC2,    /* conv feature encoder + transformer over raw audio */
    /* third edition (docs/estimation.md, "Family table") */
    VRAM_FAMILY_DECODER,     /* the generic decoder row: driven by the standard config keys */
    VRAM_FAMILY_BART,        /* post-LN encoder-decoder, learned positions (+2): BART, mBART */
    VRAM_FAMILY_DISTILBERT,  /* BERT without token types or pooler, 6 layers */
    VRAM_FAMILY_DEBERTA_V2,  /* BERT layout with disentangled relative attention */
    VRAM_FAMILY_CLIP,        /* dual encoder: text tower, vision tower, projections */
    VRAM_FAMILY_CLIP_VISION, /* CLIP's vision tower alone */
    VRAM_FAMILY_MAMBA,       /* selective state-space layers: no attention, no KV cache */
} vram_family_t;

/* The generic decoder's normalization (vram_model_t.norm_kind). */
typedef enum {
    VRAM_NORM_RMS,          /* RMSNorm, weight only */
    VRAM_NORM_LAYER,        /* LayerNorm, weight and bias */
    VRAM_NORM_LAYER_NOBIAS, /* LayerNorm, weight only */
    VRAM_NORM_NONPARAM,     /* LayerNorm without parameters (OLMo) */
} vram_norm_kind_t;

/* Where a generic decoder layer puts its norms (vram_model_t.norm_layout). */
typedef enum {
    VRAM_NORMS_PRE,       /* before attention and before the MLP (LLaMA) */
    VRAM_NORMS_PARALLEL1, /* one norm feeding parallel attention and MLP (Falcon-7B, Phi) */
    VRAM_NORMS_PARALLEL2, /* two norms feeding parallel attention and MLP (Falcon-40B) */
    VRAM_NORMS_SANDWICH,  /* before and after each of attention and MLP (Gemma 2/3) */
    VRAM_NORMS_POST,      /* after attention and after the MLP only (OLMo 2) */
} vram_norm_layout_t;

/* The task head on top of the base model (HF `architectures`). */
typedef enum {
    VRAM_HEAD_DEFAULT,   /* the family's usual head: LM for decoders, none for encoders */
    VRAM_HEAD_BASE,      /* *Model: no head */
    VRAM_HEAD_MASKED_LM, /* *ForMaskedLM */
    VRAM_HEAD_CAUSAL_LM, /* *ForCausalLM, *LMHeadModel */
    VRAM_HEAD_SEQ_CLS,   /* *ForSequenceClassification (also audio) */
    VRAM_HEAD_TOKEN_CLS, /* *ForTokenClassification */
    VRAM_HEAD_QA,        /* *ForQuestionAnswering */
    VRAM_HEAD_COND_GEN,  /* *ForConditionalGeneration (encoder-decoder LM) */
    VRAM_HEAD_IMAGE_CLS, /* *ForImageClassification */
    VRAM_HEAD_CTC,       /* *ForCTC (wav2vec2) */
} vram_head_t;

typedef struct {
    char name[64];
    vram_family_t family;
    int variant; /* depth for ResNet/VGG, B-number for EfficientNet */
    /* transformers (and the LSTM/GRU embedding) */
    int64_t vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, head_dim;
    int64_t intermediate_size;  /* MLP width */
    int64_t max_positions;      /* longest sequence; 0 = unbounded (relative/rotary) */
    int64_t position_offset;    /* RoBERTa: position rows reserved before the first token */
    int64_t type_vocab_size;    /* BERT token types */
    int64_t num_decoder_layers; /* T5 */
    int64_t relative_buckets;   /* T5 relative attention buckets */
    int64_t embed_size;         /* LSTM/GRU: embedding width (0 = hidden_size) */
    bool tied_embeddings;       /* LM head shares the input embedding */
    bool gated_mlp;             /* T5 v1.1 gated-gelu (LLaMA is always gated) */
    bool has_pooler;            /* BERT/RoBERTa pooler, HF ViT pooler */
    /* images */
    int64_t image_size, patch_size, num_channels, num_classes;
    /* defaults used when the config leaves seq_len / image_size at 0 */
    int64_t default_seq_len;
    /* VRAM_FAMILY_PROFILE: measured figures */
    uint64_t profile_parameters, profile_buffers_bytes;
    uint64_t profile_act_per_sample, profile_act_fixed;
    uint64_t profile_bwd_per_sample, profile_bwd_fixed; /* backward's transient bytes */
    int profile_dtype_bytes; /* bytes per parameter of the measured dtype */
    /* second edition: heads, decoder variants, mixture of experts, audio */
    vram_head_t head;
    int64_t num_labels;           /* classification heads (num_labels or id2label) */
    int64_t embed_proj_dim;       /* OPT word_embed_proj_dim (0 = hidden_size) */
    int64_t num_experts;          /* MoE: experts per layer (0 = dense) */
    int64_t experts_per_token;    /* MoE: top-k */
    int64_t expert_intermediate;  /* MoE: each expert's MLP width */
    int64_t shared_intermediate;  /* Qwen2-MoE: shared expert's MLP width */
    bool qkv_bias, mlp_bias;      /* decoder variants: biases */
    bool lm_head_bias;            /* Phi */
    bool softmax_upcast;          /* eager half-precision attention computes softmax in fp32 */
    bool no_final_norm;           /* OPT-350m (do_layer_norm_before = false) */
    bool post_norm;               /* post-LN layers (OPT-350m, wav2vec2-base) */
    bool sdpa_default;            /* Hugging Face's default attention for the family is SDPA */
    bool score_clamp;             /* eager scores clamped with torch.max (OPT): input kept */
    int64_t num_mel_bins;         /* Whisper */
    int64_t max_source_positions; /* Whisper encoder frames after the stride-2 conv */
    int64_t conv_layers;          /* wav2vec2 feature encoder */
    int64_t conv_dim[8], conv_kernel[8], conv_stride[8];
    bool conv_bias, conv_group_norm; /* wav2vec2: feat_extract_norm "group" (first layer only) */
    int64_t pos_conv_kernel, pos_conv_groups;
    /* third edition: the generic decoder row and the new families
     * (docs/estimation.md, "Family table"); 0/false where they do not apply */
    char model_type[32];         /* config.json's model_type ("" for catalog models) */
    char assumed[192];           /* generic row for an unknown type: what was assumed */
    uint8_t norm_kind;           /* vram_norm_kind_t (generic decoder) */
    uint8_t norm_layout;         /* vram_norm_layout_t (generic decoder) */
    uint8_t qk_norm;             /* 0 none, 1 per head over head_dim, 2 over the projection */
    bool fused_qkv;              /* one query_key_value projection (Falcon, BLOOM) */
    bool o_bias;                 /* the attention output projection has a bias */
    bool embed_norm;             /* LayerNorm after the token embedding (BLOOM) */
    bool gelu_mlp;               /* two-layer GELU MLP instead of ReLU when not gated */
    bool shared_expert_gate;     /* Qwen2-MoE's sigmoid gate on the shared expert */
    int64_t sliding_window;      /* sliding layers attend to this many tokens (0 = none) */
    int64_t sliding_layers;      /* how many layers slide; the others attend globally */
    int64_t dense_layers;        /* MoE models: layers with a dense MLP instead of experts */
    int64_t q_lora_rank;         /* MLA (DeepSeek): query down-projection rank (0 = none) */
    int64_t kv_lora_rank;        /* MLA: compressed key/value rank (0 = no MLA) */
    int64_t rope_head_dim;       /* MLA: rotary part of each query/key head */
    int64_t v_head_dim;          /* MLA: value head width (head_dim is the non-rotary part) */
    int64_t ssm_state, ssm_conv; /* Mamba: state size per channel, causal conv kernel */
    int64_t ssm_inner;           /* Mamba: expanded width (expand x hidden) */
    int64_t ssm_dt_rank;         /* Mamba: rank of the time-step projection */
    bool relative_bias_all;      /* UMT5: every layer has its own relative position bias */
    bool final_norms;            /* mBART: LayerNorm after the encoder and the decoder stacks */
    int64_t text_hidden, text_layers, text_heads, text_intermediate; /* CLIP text tower */
    int64_t text_positions;                                          /* CLIP text positions */
    int64_t projection_dim;                                          /* CLIP projections */
    int64_t position_buckets; /* DeBERTa-v2: relative positions (2x rows of rel_embeddings) */
    bool pos_key_proj, pos_query_proj; /* DeBERTa-v2 c2p / p2c without share_att_key */
    bool rel_embed_norm;               /* DeBERTa-v2: LayerNorm on rel_embeddings */
    int64_t vision_hidden, vision_layers, vision_heads, vision_intermediate; /* Gemma 3's SigLIP */
    bool vision_pool_head; /* SigLIP's attention-pooling head (vision_use_head) */
    bool attn_softcap;     /* Gemma 2: tanh soft-capped attention scores */
    bool logit_softcap;    /* Gemma 2: tanh soft-capped logits */
    bool norm_plus_one;    /* Gemma: RMSNorm scales by (1 + weight) */
    uint8_t rel_att_types; /* DeBERTa-v2 pos_att_type: bit 0 c2p, bit 1 p2c */
    bool pretraining_head; /* wav2vec2 ForPreTraining: quantizer and projections */
    int64_t codevector_dim, codevector_groups, codevectors_per_group, proj_codevector_dim;
    int64_t num_negatives; /* wav2vec2 ForPreTraining: distractors per masked frame */
    uint8_t sdpa_saves;    /* VRAM_SDPA_* bits: what SDPA keeps beyond q, k, v, output */
    /* VRAM_FAMILY_PROFILE: the parameter gradients backward has made by its
     * peak, part of profile_bwd_*; not made again when gradients are kept */
    uint64_t profile_bwd_grads;
} vram_model_t;

/* How a family calls scaled_dot_product_attention, which decides what the
 * GPU's kernel keeps (docs/estimation.md, "What SDPA keeps"). */
#define VRAM_SDPA_QKV_VIEW                                                                         \
    1u /* q is a view of one fused q/k/v projection output: all of it stays */
#define VRAM_SDPA_OUT_COPY 2u /* q is contiguous: flash's output follows it and is copied after */
#define VRAM_SDPA_MASK     4u /* a materialized boolean mask: memory-efficient kernel or math */
#define VRAM_SDPA_KV_FULL  8u /* k and v expanded to every query head before SDPA (Falcon) */

/* Looks a catalog model up by name (case-insensitive, '_' == '-'). ENOENT
 * names the closest catalog names by edit distance in vram_last_error(). */
VRAM_API int vram_model_find(const char *name, vram_model_t *out);
/* The catalog's names in order; *count gets its length. Static strings. */
VRAM_API const char *const *vram_model_names(size_t *count);
/* One-line description of a catalog model ("" if unknown). Static. */
VRAM_API const char *vram_model_description(const char *name);
/* Reads a Hugging Face config.json (bert, roberta, gpt2, gpt_neox, llama,
 * mistral, t5, vit). EIO: unreadable file; EPARSE: malformed JSON (line and
 * column in the message), missing field (named), a value above its limit
 * (named with the limit; docs/estimation.md "Limits"), unsupported model_type. */
VRAM_API int vram_model_from_hf_config(const char *path, vram_model_t *out);
/* The cached config.json of hub model `hub_id` ("org/name") into path[len]:
 * $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, then
 * models--org--name/snapshots/<refs/main or any>/config.json. Offline only.
 * ENOENT: not cached (the message says how to get it); EINVAL: not an id. */
VRAM_API int vram_hf_cache_config(const char *hub_id, char *path, size_t len);
/* Reads a measured profile JSON ({"parameters", "buffers_bytes",
 * "activation_bytes_per_sample", "activation_bytes_fixed", "dtype"}). Errors
 * as vram_model_from_hf_config. */
VRAM_API int vram_model_from_profile(const char *path, vram_model_t *out);
/* Same from a JSON text already in memory; `origin` names it in messages. */
VRAM_API int vram_model_from_hf_json(const char *text, const char *origin, vram_model_t *out);
/* The model_type values vram_model_from_hf_* reads by a family row of its
 * own, comma-separated in the table's order (others with the standard
 * decoder keys go to the generic row). Static, thread-safe. */
VRAM_API const char *vram_hf_model_types(void);
VRAM_API int vram_model_from_profile_json(const char *text, const char *origin, vram_model_t *out);
/* Trainable parameters and the number of parameter tensors. EINVAL for an
 * inconsistent description (e.g. hidden_size not divisible by num_heads). */
VRAM_API int vram_model_param_count(const vram_model_t *m, uint64_t *params, uint64_t *tensors);
VRAM_API const char *vram_family_name(vram_family_t f);

/* LOAD: the weights on the GPU and nothing run yet (after model.to("cuda")). */
typedef enum { VRAM_MODE_TRAIN, VRAM_MODE_INFER, VRAM_MODE_LOAD } vram_mode_t;
/* amp-*: autocast (matmuls in half precision, norms/softmax in fp32) with fp32
 * master weights: 16 bytes/parameter with Adam (ZeRO's accounting).
 * fp16/bf16: everything in half precision. int8/int4: inference only. */
typedef enum {
    VRAM_PREC_FP32,
    VRAM_PREC_FP16,
    VRAM_PREC_BF16,
    VRAM_PREC_AMP_FP16,
    VRAM_PREC_AMP_BF16,
    VRAM_PREC_INT8,
    VRAM_PREC_INT4,
} vram_precision_t;
typedef enum {
    VRAM_OPTIMIZER_SGD,
    VRAM_OPTIMIZER_MOMENTUM,
    VRAM_OPTIMIZER_ADAM,
    VRAM_OPTIMIZER_ADAMW,
    VRAM_OPTIMIZER_ADAFACTOR,
    VRAM_OPTIMIZER_ADAM8BIT,
} vram_optimizer_t;
typedef enum { VRAM_CKPT_NONE, VRAM_CKPT_FULL, VRAM_CKPT_SELECTIVE } vram_checkpointing_t;
/* How the optimizer step runs (torch.optim): FOREACH, the default on CUDA,
 * keeps one parameter-sized intermediate; FUSED none; FOR_LOOP (one tensor
 * at a time, e.g. transformers' old AdamW) one of the largest tensor. AUTO
 * (vram_estimate_config_init's default) is what the framework's own
 * configuration runs: torchtune's recipe configs build AdamW with
 * fused=True, anything else gets torch.optim's foreach. */
typedef enum {
    VRAM_OPTIM_FOREACH,
    VRAM_OPTIM_FUSED,
    VRAM_OPTIM_FOR_LOOP,
    VRAM_OPTIM_AUTO,
} vram_optim_impl_t;
/* Who shards the training state with --zero: DeepSpeed's mixed precision
 * (half weights and gradients, fp32 master weights and states) or PyTorch
 * FSDP (FULL_SHARD = stage 3, SHARD_GRAD_OP = stage 2) with every tensor in
 * the --precision dtype, pure bf16 as torchtune trains (docs/estimation.md). */
typedef enum { VRAM_SHARD_DEEPSPEED, VRAM_SHARD_FSDP } vram_sharding_t;
/* Whose modules build the model: Hugging Face transformers' modeling files
 * (default) or torchtune's (docs/estimation.md, "torchtune's modules"). */
typedef enum { VRAM_FRAMEWORK_TRANSFORMERS, VRAM_FRAMEWORK_TORCHTUNE } vram_framework_t;
/* QLoRA base weights: NF4 (4 bits + absmax per 64) or LLM.int8. */
typedef enum { VRAM_QUANT_NONE, VRAM_QUANT_NF4, VRAM_QUANT_INT8 } vram_quant_t;
/* LoRA target modules, mapped to each family's layer names
 * (docs/estimation.md, "LoRA and QLoRA"). */
enum {
    VRAM_LORA_Q = 1u << 0,
    VRAM_LORA_K = 1u << 1,
    VRAM_LORA_V = 1u << 2,
    VRAM_LORA_O = 1u << 3,
    VRAM_LORA_GATE = 1u << 4,
    VRAM_LORA_UP = 1u << 5,
    VRAM_LORA_DOWN = 1u << 6,
    VRAM_LORA_ALL_LINEAR = 0x7f,
};

/* What to estimate. vram_estimate_config_init sets the defaults: train,
 * batch 1, model's default sequence/image size, fp32, adamw, no
 * checkpointing, ZeRO 0, gpus 0 (= not given, counts as 1),
 * overhead_bytes = VRAM_UNKNOWN_U64 (= the documented default), one
 * accumulation step, double quantization on; the rest zero. Set fields
 * directly or by name with vram_estimate_set (the settings table). */
typedef struct {
    vram_mode_t mode;
    int64_t batch_size; /* per GPU, >= 1 */
    int64_t seq_len;    /* 0 = model default */
    int64_t image_size; /* 0 = model default */
    vram_precision_t precision;
    vram_optimizer_t optimizer;
    vram_checkpointing_t checkpointing;
    int zero_stage;         /* 0..3; > 0 requires gpus >= 1 */
    int gpus;               /* data-parallel GPUs; 0 = not given */
    int64_t max_new_tokens; /* inference: generated tokens for the KV cache */
    uint64_t overhead_bytes;
    bool fused_attention; /* SDPA/FlashAttention instead of eager attention (default false) */
    /* second edition (docs/estimation.md) */
    bool attention_from_model;    /* init: true = Hugging Face's default for the family
                                   * (m->sdpa_default); false = fused_attention decides */
    int gpu_cc;                   /* compute capability x10 (70 V100, 80 A100, 90 H100); 0 = 80 */
    int cuda_version;             /* x10 (113 = 11.3, 121 = 12.1); 0 = 12.x */
    int lazy_loading;             /* 0 = the CUDA version's default with PyTorch, 1 on, 2 off */
    vram_optim_impl_t optim_impl; /* default AUTO (zeroed: FOREACH) */
    bool grads_kept;              /* gradients live when backward starts (accumulation,
                                   * zero_grad(set_to_none=False)); set by --accumulation-steps */
    int64_t lora_rank;            /* 0 = full fine-tuning */
    double lora_alpha;            /* scaling alpha/r: no memory effect, reported */
    unsigned lora_targets;        /* VRAM_LORA_* bits; 0 with a rank = q and v (PEFT default) */
    vram_quant_t quantize_base;   /* QLoRA: frozen base linears quantized */
    bool double_quant;            /* QLoRA double quantization of the absmax constants
                                   * (init: on, as QLoRA trains; only NF4 reads it) */
    bool activation_offload;      /* checkpointed layer inputs kept on the CPU */
    bool chunked_loss;            /* loss over vocabulary chunks that keeps half-precision logits
                                   * and a log-sum-exp instead of fp32 log-probabilities */
    bool sum_loss;                /* benchmark loss logits.sum(): no log-softmax, the logits
                                   * stay referenced by the outputs */
    bool compiled_loss;           /* torch.compile (torchtune compile=True): the loss (upcast,
                                   * log-softmax and NLL in one graph) keeps its input, not
                                   * the log-probabilities, and its backward is one fused
                                   * kernel; the layers keep what inductor's min-cut
                                   * partitioner saves where that is modelled, else eager's */
    /* third edition: every setting of the table (vram_estimate_settings) */
    int64_t accumulation_steps; /* gradient accumulation; > 1 keeps gradients live (0 = 1) */
    vram_head_t head;           /* the class the model is loaded with (DEFAULT = the model's) */
    int64_t num_labels;         /* labels of a classification head (0 = the model's) */
    vram_sharding_t sharding;   /* how ZeRO/FSDP shards half-precision training */
    /* the transformers release the model runs with, major x 100 + minor (445 = 4.45);
     * 0 = 5.x. Older releases' modeling code keeps other tensors (docs/estimation.md,
     * "transformers versions") */
    int32_t transformers_version;
    /* NF4 base: the dtype bitsandbytes computes in (bnb_4bit_compute_dtype),
     * 0 = the working precision, 1 fp32, 2 fp16, 3 bf16 (names of the
     * "compute_dtype" setting) */
    int32_t quant_compute;
    /* whose modules build the model (VRAM_FRAMEWORK_*, names of the "framework"
     * setting); torchtune's attention expands k and v to every query head */
    int32_t framework;
    int32_t reserved32_;   /* zero */
    uint64_t reserved_[6]; /* zero: room for settings to come (vram_estimate_config_init) */
} vram_estimate_config_t;

/* Default CUDA context + library workspaces (docs/estimation.md). */
#define VRAM_DEFAULT_OVERHEAD_BYTES (512ull << 20)

/* The parts of the estimate live at the peak: they add up to total
 * (allocated_peak = total - allocator_rounding - cuda_context). */
typedef struct {
    uint64_t parameters, buffers, gradients, optimizer_states, activations, kv_cache;
    uint64_t autocast_cache, backward_temps, optimizer_temps, workspaces;
    uint64_t allocator_rounding, cuda_context;
} vram_estimate_live_t;

/* The estimate per GPU in bytes. The component lines (parameters ...
 * cuda_context) are each part's largest size during the step; `live` has
 * the same parts as they are at the peak, and those add up to total. */
typedef struct {
    uint64_t parameters_count;
    uint64_t parameters, buffers, gradients, optimizer_states, activations, kv_cache, overhead;
    uint64_t total;
    int64_t seq_len, image_size; /* the values used (defaults resolved) */
    /* second edition: what a real GPU adds, each line separate; `overhead`
     * is their sum. total = nvidia_smi = reserved + cuda_context; not every
     * part is live at the peak, so the parts together are >= total */
    uint64_t trainable_count;    /* parameters that get gradients (LoRA: the adapters) */
    uint64_t autocast_cache;     /* amp: half-precision weight copies kept by the matmuls */
    uint64_t backward_temps;     /* gradients in flight at the backward peak (loss chain, layer) */
    uint64_t optimizer_temps;    /* the optimizer step's intermediates */
    uint64_t workspaces;         /* cuBLAS workspaces (through the caching allocator) */
    uint64_t allocator_rounding; /* reserved - allocated: the pool model's rounding and carving */
    uint64_t cuda_context;       /* context and loaded kernels: outside the allocator */
    uint64_t allocated_peak;     /* torch.cuda.max_memory_allocated() */
    uint64_t reserved;           /* torch.cuda.max_memory_reserved() */
    uint64_t nvidia_smi;         /* device memory used by the process (= total) */
    bool peak_in_optimizer_step; /* the peak is the optimizer step, not backward */
    bool fused_attention;        /* the attention implementation used */
    vram_estimate_live_t live;   /* third edition: the parts live at the peak */
    /* --compile on: the layers counted as inductor's partitioner keeps them
     * (false: counted as eager, the rule does not cover them) */
    bool compiled_layers;
    uint8_t reserved_pad_[7];
    uint64_t reserved_[7]; /* zero: room for parts to come */
} vram_estimate_t;

VRAM_API void vram_estimate_config_init(vram_estimate_config_t *cfg);
/* The optimizer implementation cfg runs: its optim_impl, with AUTO resolved
 * for its framework (vram_optim_impl_t). Pure. */
VRAM_API vram_optim_impl_t vram_optim_impl_of(const vram_estimate_config_t *cfg);
/* Estimates one GPU's memory. Pure computation, thread-safe. EINVAL names the
 * impossible setting (batch 0, sequence longer than max_positions, ZeRO
 * without gpus, int8 training, a setting or a part above its documented
 * limit, ...); *out is untouched on failure. Totals never wrap. */
VRAM_API int vram_estimate(const vram_model_t *m, const vram_estimate_config_t *cfg,
                           vram_estimate_t *out);
/* Whether the estimate setting `key` (a key of vram_estimate_json's request:
 * "seq_len", "image_size", ...) shapes m's estimate: 1 yes, 0 when m's kind
 * has no use for it (seq_len of an image model, image_size of any other, both
 * of a measured profile), so a caller can say the setting is ignored. Keys
 * every kind uses answer 1. EINVAL for NULL. Pure, thread-safe. */
VRAM_API int vram_estimate_setting_applies(const vram_model_t *m, const char *key);

/* The memory at `batch` (nvidia-smi bytes): the full estimate with
 * cfg's settings at that batch. The one place every caller (planner, `vram
 * run`, the Slurm plugin, Python) gets memory for a batch from; nothing
 * derives it from a slope. Errors as vram_estimate. */
VRAM_API int vram_estimate_at_batch(const vram_model_t *m, const vram_estimate_config_t *cfg,
                                    int64_t batch, uint64_t *bytes);
/* The memory per GPU at one batch (nvidia-smi bytes). */
typedef struct {
    uint32_t batch;
    uint64_t bytes;
} vram_batch_bytes_t;
/* For vramd's degradation (a job request's batch_bytes, docs/daemon.md):
 * the full estimate (vram_estimate_at_batch) at each batch in
 * [lo, cfg->batch_size] worth granting, in increasing batch order, at most
 * `cap` of them, into out[0..*n). A batch worth granting is the smallest one
 * for its number of accumulation steps k, ceil(B/k): every other batch needs
 * as many steps and more memory. When there are more than `cap`, the largest
 * cap/2 are kept and the rest thinned evenly, keeping the smallest (cap 1:
 * the batch alone). Bytes never fall as the batch grows (a running maximum,
 * should an estimate dip). EINVAL when lo < 1, lo > the batch, cap < 1 or a
 * NULL argument; errors of vram_estimate. */
VRAM_API int vram_estimate_batch_table(const vram_model_t *m, const vram_estimate_config_t *cfg,
                                       int64_t lo, vram_batch_bytes_t *out, int cap, int *n);
/* Most entries of a batch table vramd accepts in a job request: the cap
 * every client (`vram run`/`submit`, the Slurm plugin, Python through
 * vram_batch_table_json) passes to vram_estimate_batch_table. */
#define VRAM_BATCH_TABLE_MAX 64

/* The estimate settings, each defined once (src/plan/settings.c): the CLI
 * flags of `vram estimate`/`plan`/`run`, the JSON keys of
 * vram_estimate_json/vram_plan_json (Python, vramd), `--help`, and the
 * Slurm plugin's --vram-estimate-args all come from this table. */
typedef enum {
    VRAM_SETTING_INT,    /* JSON integer; text digits; in [min, max] */
    VRAM_SETTING_NUMBER, /* JSON number; in (min, max) */
    VRAM_SETTING_BOOL,   /* JSON true/false; text on/off, yes/no, true/false */
    VRAM_SETTING_NAME,   /* JSON string: one of `names` */
    VRAM_SETTING_SIZE,   /* JSON integer bytes or a string such as "512MiB" */
    VRAM_SETTING_TEXT,   /* JSON string parsed by the setting (targets, head, GPU) */
} vram_setting_type_t;
typedef struct {
    const char *key;  /* JSON key: "lora_rank" */
    const char *flag; /* CLI flag: "--lora-rank" */
    vram_setting_type_t type;
    const char *names;   /* NAME: the accepted names, ", "-separated; else NULL */
    int64_t min, max;    /* INT: inclusive bounds */
    const char *group;   /* help section: "Workload", "LoRA / QLoRA", "Real GPU" */
    const char *metavar; /* "R", "SIZE" */
    const char *help;    /* one or more lines ('\n'-separated) */
} vram_estimate_setting_t;
/* The table; *count gets its length. Static, thread-safe. */
VRAM_API const vram_estimate_setting_t *vram_estimate_settings(size_t *count);
/* The setting of a JSON key ("zero_stage"), a flag ("--zero") or the
 * flag's name with '_' ("zero", "optimizer_impl"); NULL if none. */
VRAM_API const vram_estimate_setting_t *vram_estimate_setting_find(const char *key_or_flag);
/* Applies one setting given as text (as on the command line) to cfg.
 * EINVAL names the setting and the bad value with what is accepted (an
 * unknown key: the known ones); cfg is untouched on failure. */
VRAM_API int vram_estimate_set(vram_estimate_config_t *cfg, const char *key_or_flag,
                               const char *value);

/* Names <-> enums for flags and JSON ("amp-bf16", "adamw", "selective").
 * The parse functions return EINVAL listing the accepted names. */
VRAM_API int vram_precision_parse(const char *s, vram_precision_t *out);
VRAM_API int vram_optimizer_parse(const char *s, vram_optimizer_t *out);
VRAM_API int vram_checkpointing_parse(const char *s, vram_checkpointing_t *out);
VRAM_API const char *vram_precision_name(vram_precision_t p);
VRAM_API const char *vram_optimizer_name(vram_optimizer_t o);
VRAM_API const char *vram_checkpointing_name(vram_checkpointing_t c);
/* "q,v", "q,k,v,o,gate,up,down", "all-linear" -> VRAM_LORA_* bits. EINVAL
 * names an unknown target and lists the accepted ones. */
VRAM_API int vram_lora_targets_parse(const char *text, unsigned *out);

/* The class-name endings vram_head_parse knows, for messages. */
#define VRAM_HEAD_SUFFIXES                                                                         \
    "ForMaskedLM, ForCausalLM, LMHeadModel, ForSequenceClassification, ForTokenClassification, "   \
    "ForQuestionAnswering, ForConditionalGeneration, ForImageClassification, "                     \
    "ForAudioClassification, ForCTC, ForPreTraining, Model"
/* The head a transformers class name instantiates, by its ending
 * ("BertForSequenceClassification" or just "ForSequenceClassification";
 * "BertModel" or "Model" for none). name may be NULL (EINVAL). Thread-safe;
 * EINVAL with a message listing the endings. */
VRAM_API int vram_head_parse(const char *name, vram_head_t *out);
/* Puts `head` on a model, with what comes with it in Hugging Face's classes
 * (BERT's pooler only for the base and sequence-classification heads, ViT's
 * classifier in place of its pooler, two logits for QA); num_labels > 0
 * replaces the model's. m may be NULL (nothing happens). Thread-safe. */
VRAM_API void vram_model_set_head(vram_model_t *m, vram_head_t head, int64_t num_labels);
/* A GPU name with or without its memory ("H100", "rtx4090", "A100-40GB"):
 * the table's entry; a bare name picks the common variant and *note (may be
 * NULL) gets a static sentence saying which. NULL if unknown. */
VRAM_API const vram_gpu_model_t *vram_gpu_model_resolve(const char *name, const char **note);

/* Target device for the planner: capacity and memory already in use. */
typedef struct {
    uint64_t total_bytes, used_bytes, free_bytes;
    double target;      /* fraction of free memory the job may use; default 0.70 */
    bool power_of_two;  /* round recommendations down to powers of two; default true */
    int64_t batch_size; /* batch to judge; 0 = none */
} vram_plan_config_t;

typedef enum { VRAM_FIT_YES, VRAM_FIT_TIGHT, VRAM_FIT_NO } vram_fit_t;

#define VRAM_PLAN_MAX_SUGGESTIONS 10

/* One change that lowers the estimate (mixed precision, checkpointing, ...). */
typedef struct {
    char name[32]; /* e.g. "precision=amp-bf16" */
    char description[128];
    uint64_t saving_bytes; /* at the judged batch (or batch 1) */
    bool fits;             /* with this change alone the judged batch fits */
} vram_plan_suggestion_t;

/* The planner's answer; budget = target * free. Every figure at a batch is
 * a full estimate at that batch (vram_estimate_at_batch). model_bytes: at
 * batch 1, the peak without its activations, KV cache and backward
 * temporaries (what the batch does not scale). */
typedef struct {
    uint64_t budget_bytes, model_bytes;
    int64_t max_batch_raw; /* largest batch within budget (0: none fits) */
    int64_t maximum, recommended, safe;
    /* with cfg.batch_size > 0: */
    vram_estimate_t current;
    vram_fit_t fit;
    int64_t micro_batch_size, accumulation_steps;
    vram_plan_suggestion_t suggestions[VRAM_PLAN_MAX_SUGGESTIONS];
    int nsuggestions;
    /* third edition: the batch `vram plan` shows (the judged one, else the
     * recommended one, else 1) and the full estimate there */
    int64_t shown_batch;
    vram_estimate_t shown;
    uint64_t reserved_[8];
} vram_plan_t;

VRAM_API void vram_plan_config_init(vram_plan_config_t *cfg);
/* Batch-size recommendations for `m` under `est` (its batch_size is ignored)
 * on the device described by `dev`. Pure computation, thread-safe. EINVAL as
 * vram_estimate, or for a target outside (0,1]. */
VRAM_API int vram_plan(const vram_model_t *m, const vram_estimate_config_t *est,
                       const vram_plan_config_t *dev, vram_plan_t *out);
/* vram_plan for host memory (a CPU run under a memory limit): every batch
 * is judged by its estimate's allocated_peak (what the tensors hold at
 * once) instead of its total, which adds a caching allocator's rounding
 * that host memory does not have; give est->overhead_bytes = 0 for no CUDA
 * context. Same search, fields and errors as vram_plan. */
VRAM_API int vram_plan_host(const vram_model_t *m, const vram_estimate_config_t *est,
                            const vram_plan_config_t *dev, vram_plan_t *out);
VRAM_API const char *vram_fit_name(vram_fit_t f);

/* ===================================================================== */
/* tune: adaptive training runtime controllers (src/tune/)              */
/* ===================================================================== */

/* Pure logic: each controller takes readings (memory usage as a fraction of
 * the device, 0.85 = 85 %) and returns decisions; the caller (a C/C++
 * training loop or vram.torch) acts on them. No controller is thread-safe
 * unless its comment says so: one per training loop. docs/runtime.md. */

/* -- dynamic batch-size optimizer: batch size and a second "lq" size
 *    (patch, crop or sequence length) ------------------------------------- */

typedef enum {
    VRAM_BATCHOPT_MODEL,      /* default: learns usage = a + b*batch*g(lq), jumps in one step */
    VRAM_BATCHOPT_FIXED_STEP, /* the seed's policy: fixed increments (a baseline) */
} vram_batchopt_policy_t;

/* Settings; vram_batchopt_config_init gives the defaults shown. lq is off
 * (batch only) when min_lq and max_lq are 0. Below the band
 * [target_usage - safety_margin, target_usage] the controller grows lq
 * first, then the batch (the model policy may trade a little lq for one more
 * sample when that comes materially closer to the target); inside the band
 * the fixed-step policy does nothing and the model policy moves only when its
 * fit expects a clear gain; above target it shrinks the batch first, then lq. */
typedef struct {
    bool enabled;             /* true; false: update() never changes anything */
    double target_usage;      /* 0.85; in (0, 1] */
    double safety_margin;     /* 0.05; in [0, target_usage) and < 0.5 */
    int adjustment_frequency; /* 100 iterations per window (the cooldown) */
    int min_batch, max_batch; /* 2, 64; 1 <= min <= max <= 1048576 */
    int min_lq, max_lq;       /* 0, 0 (off); else 1 <= min <= max <= 1048576 */
    int history_size;         /* 50 readings kept for the average; 1..100000 */
    int max_adjustments;      /* 50; 0 = no limit (OOM drops do not count) */
    int oom_cooldown_windows; /* 3 windows without growth after an OOM; 1..1000 */
    vram_batchopt_policy_t policy;
} vram_batchopt_config_t;

typedef struct vram_batchopt vram_batchopt_t;

typedef enum {
    VRAM_BATCHOPT_NONE,     /* no change */
    VRAM_BATCHOPT_GROW,     /* window peak below target - safety_margin (model: or a clear gain) */
    VRAM_BATCHOPT_SHRINK,   /* window peak above target */
    VRAM_BATCHOPT_OOM,      /* on_oom */
    VRAM_BATCHOPT_EXTERNAL, /* set_current / set_target moved the settings */
} vram_batchopt_reason_t;

/* One change of the settings. */
typedef struct {
    int64_t iteration; /* update() calls before it */
    int old_batch, old_lq, new_batch, new_lq;
    double peak_usage;      /* window peak that caused it (OOM: last reading) */
    double predicted_usage; /* the model's prediction for the new settings (0: none) */
    vram_batchopt_reason_t reason;
} vram_batchopt_adjustment_t;

typedef struct {
    int batch_delta, lq_delta; /* apply these */
    int batch, lq;             /* the settings after them */
    vram_batchopt_reason_t reason;
} vram_batchopt_decision_t;

#define VRAM_BATCHOPT_LOG 64 /* adjustments kept in the stats (the most recent) */

typedef struct {
    double peak_usage;    /* highest reading since creation */
    double average_usage; /* over the last history_size readings */
    double current_usage; /* last reading */
    int batch, lq;
    int64_t iterations, adjustments, oom_recoveries;
    bool model_quadratic;    /* g(lq) = lq^2 fits better than lq (model policy) */
    double model_a, model_b; /* current fit (0, 0 before the first window) */
    int nlog;                /* entries in log, oldest first */
    vram_batchopt_adjustment_t log[VRAM_BATCHOPT_LOG];
} vram_batchopt_stats_t;

VRAM_API void vram_batchopt_config_init(vram_batchopt_config_t *cfg);
/* Reads the YAML of docs/runtime.md (training_automations:
 * DynamicBatchSizeOptimizer: ...) over the defaults in *cfg (call
 * config_init first). Other top-level keys are ignored; inside the two
 * sections an unknown key, a duplicate, a wrong type or an out-of-range value
 * is EPARSE naming the key and its line ("path:12: max_batch_size: ...").
 * EIO: unreadable file. *cfg is untouched on failure. */
VRAM_API int vram_batchopt_config_load(const char *path, vram_batchopt_config_t *cfg);
/* Same from text in memory; `origin` names it in messages. */
VRAM_API int vram_batchopt_config_parse(const char *text, const char *origin,
                                        vram_batchopt_config_t *cfg);
/* Checks ranges; EINVAL names the field. */
VRAM_API int vram_batchopt_config_check(const vram_batchopt_config_t *cfg);

/* Creates a controller starting at (batch, lq) (clamped to the limits; lq is
 * ignored when lq is off). EINVAL from config_check; ENOMEM. */
VRAM_API int vram_batchopt_create(const vram_batchopt_config_t *cfg, int batch, int lq,
                                  vram_batchopt_t **out);
/* Accepts NULL. */
VRAM_API void vram_batchopt_destroy(vram_batchopt_t *opt);
/* One iteration's reading (usage fraction, >= 0, finite; EINVAL otherwise).
 * *out (may be NULL) gets the change to apply now, all zero deltas mostly. */
VRAM_API int vram_batchopt_update(vram_batchopt_t *opt, double usage,
                                  vram_batchopt_decision_t *out);
/* The caller changed the settings itself (resume, manual override): the
 * controller continues from them (clamped), with a fresh window. */
VRAM_API int vram_batchopt_set_current(vram_batchopt_t *opt, int batch, int lq);
/* The settings the controller grows towards and never above (default: the
 * maxima); clamped to the limits. The current settings drop to them if above. */
VRAM_API int vram_batchopt_set_target(vram_batchopt_t *opt, int batch, int lq);
/* The current settings ran out of memory: returns the smaller settings to
 * retry with in *new_batch / *new_lq (may be NULL). Both drop (the batch at
 * least by half, lq by a quarter, further when the model says so), and no
 * growth follows for oom_cooldown_windows windows. ESTATE when already at
 * both minima (nothing smaller to try; *new_* still set). */
VRAM_API int vram_batchopt_on_oom(vram_batchopt_t *opt, int *new_batch, int *new_lq);
VRAM_API int vram_batchopt_stats(const vram_batchopt_t *opt, vram_batchopt_stats_t *out);
/* Static name: "none", "grow", "shrink", "oom", "external". */
VRAM_API const char *vram_batchopt_reason_name(vram_batchopt_reason_t r);

/* -- adaptive batch iterator: batch policy and exact-once bookkeeping ----- */

/* Sample i of the dataset is index i. Every index is handed out in a batch;
 * a batch is then either committed (done) or returned (failed: its indices
 * come first in the next batches). Each index is committed exactly once. */
typedef struct {
    int initial_batch; /* the batch to start with and the ceiling; >= 1 */
    int min_batch;     /* 1; floor of halving */
    int check_every;   /* 10 samples between memory checks; >= 1 */
    double high_mark;  /* 0.85: above, the batch halves */
    double low_mark;   /* 0.50: below, it doubles up to initial_batch */
} vram_batchiter_config_t;

typedef struct vram_batchiter vram_batchiter_t;

typedef enum {
    VRAM_BATCHITER_HIGH, /* usage above high_mark: halved */
    VRAM_BATCHITER_LOW,  /* usage below low_mark: doubled */
    VRAM_BATCHITER_FAIL, /* a batch was returned as failed: halved */
    VRAM_BATCHITER_SET,  /* set_batch (e.g. from the batch-size optimizer) */
} vram_batchiter_reason_t;

typedef struct {
    uint64_t sample; /* samples handed out before the change */
    int old_batch, new_batch;
    double usage; /* the reading (FAIL: 0) */
    vram_batchiter_reason_t reason;
} vram_batchiter_change_t;

#define VRAM_BATCHITER_LOG 64

typedef struct {
    int batch;
    uint64_t handed_out, committed, returned, pending; /* samples */
    uint64_t checks, nchanges;
    int nlog; /* the most recent changes, oldest first */
    vram_batchiter_change_t log[VRAM_BATCHITER_LOG];
} vram_batchiter_stats_t;

/* check_every 10, high 0.85, low 0.50, min 1, initial = initial_batch. */
VRAM_API void vram_batchiter_config_init(vram_batchiter_config_t *cfg, int initial_batch);
/* length: number of samples, or UINT64_MAX while unknown (an iterable; call
 * set_length when it ends). EINVAL names a bad field (marks not
 * 0 <= low < high <= 1, ...); ENOMEM. */
VRAM_API int vram_batchiter_create(const vram_batchiter_config_t *cfg, uint64_t length,
                                   vram_batchiter_t **out);
VRAM_API void vram_batchiter_destroy(vram_batchiter_t *it);
/* True when the next batch wants a fresh memory reading (check_every samples
 * handed out since the last check; also before the first batch). */
VRAM_API bool vram_batchiter_check_due(const vram_batchiter_t *it);
/* The next batch: up to `cap` indices into idx (cap >= initial_batch;
 * EINVAL otherwise), *n of them (0: nothing left but possibly batches still
 * pending), *batch_id for done/failed. usage: a reading when check_due, else
 * ignored (pass a negative number when no reading exists: no change). */
VRAM_API int vram_batchiter_next(vram_batchiter_t *it, double usage, uint64_t *idx, size_t cap,
                                 size_t *n, uint64_t *batch_id);
/* The batch was consumed. ENOENT for an unknown or already closed id. */
VRAM_API int vram_batchiter_done(vram_batchiter_t *it, uint64_t batch_id);
/* The batch failed (OOM): its indices return to the front and the batch halves.
 * ENOENT as done. */
VRAM_API int vram_batchiter_failed(vram_batchiter_t *it, uint64_t batch_id);
/* The iterable ended after `length` samples. Indices >= length already
 * handed out never existed: they leave their pending batches (the caller
 * drops them too; a batch left empty is closed, its id unknown from then on). EINVAL when a
 * returned index is >= length or a different length was given before. */
VRAM_API int vram_batchiter_set_length(vram_batchiter_t *it, uint64_t length);
/* Sets the next batches' size (clamped to min_batch..initial_batch), e.g. to
 * what the batch-size optimizer decided; memory checks go on halving and
 * doubling from there. */
VRAM_API int vram_batchiter_set_batch(vram_batchiter_t *it, int batch);
/* True when every sample of a known length is committed. */
VRAM_API bool vram_batchiter_finished(const vram_batchiter_t *it);
VRAM_API int vram_batchiter_stats(const vram_batchiter_t *it, vram_batchiter_stats_t *out);
/* Invariants for tests: handed_out = committed + pending + queued returns,
 * no index both pending and queued, all below the cursor. 0 or ESTATE. */
VRAM_API int vram_batchiter_check(const vram_batchiter_t *it);
VRAM_API const char *vram_batchiter_reason_name(vram_batchiter_reason_t r);

/* -- OOM recovery chain ------------------------------------------------- */

/* Strategies in the default order. FREE_CACHE and OFFLOAD free memory and
 * the step is retried as it was; MICRO_BATCH retries the same samples split
 * into twice as many micro-batches (gradient accumulation); CHECKPOINT saves
 * and gives up with a message saying how to resume. */
typedef enum {
    VRAM_OOM_FREE_CACHE,
    VRAM_OOM_MICRO_BATCH,
    VRAM_OOM_OFFLOAD,
    VRAM_OOM_CHECKPOINT,
    VRAM_OOM_STRATEGY_COUNT_
} vram_oom_strategy_t;

typedef struct {
    /* Strategies to try, in order (each at most once in the list). */
    vram_oom_strategy_t order[VRAM_OOM_STRATEGY_COUNT_];
    int norder;          /* 4: all, default order */
    int max_splits;      /* 3: MICRO_BATCH doubles the micro-batches at most this often */
    int min_micro_batch; /* 1: never split below this many samples */
    /* Hooks; NULL = not available (the strategy is skipped). free_cache and
     * offload return the bytes they freed (any nonzero value when unknown; 0
     * = nothing, the next strategy is tried at once); checkpoint returns 0
     * once saved, writing where into msg. free_cache NULL with a pool
     * attached: vram_pool_trim at step level (inside an allocation the pool
     * has released its cache already). They run on the thread that hit the
     * OOM, the pool's handler without the pool's lock. */
    uint64_t (*free_cache)(void *user);
    uint64_t (*offload)(void *user, size_t request);
    int (*checkpoint)(void *user, char *msg, size_t cap);
    void *user;
} vram_oomchain_config_t;

typedef struct vram_oomchain vram_oomchain_t;

/* What to do after an OOM in a step. */
typedef struct {
    vram_oom_strategy_t strategy; /* the strategy just applied */
    bool retry;                   /* retry the step (false: give up, see message) */
    int micro_batches;            /* split the step's batch into this many parts */
    int micro_batch_size;         /* samples per part (the last may be smaller) */
    uint64_t freed_bytes;         /* by free_cache / offload */
    char message[512];
} vram_oom_action_t;

typedef struct {
    uint64_t attempts[VRAM_OOM_STRATEGY_COUNT_];  /* times applied */
    uint64_t recovered[VRAM_OOM_STRATEGY_COUNT_]; /* steps that then succeeded */
    uint64_t freed_bytes[VRAM_OOM_STRATEGY_COUNT_];
    uint64_t pool_calls;            /* pool OOM handler invocations */
    uint64_t steps, ooms, failures; /* failures: steps given up */
} vram_oomchain_stats_t;

VRAM_API void vram_oomchain_config_init(vram_oomchain_config_t *cfg);
/* EINVAL names a bad field (a strategy twice, max_splits outside 0..20); ENOMEM. */
VRAM_API int vram_oomchain_create(const vram_oomchain_config_t *cfg, vram_oomchain_t **out);
VRAM_API void vram_oomchain_destroy(vram_oomchain_t *chain);
/* Registers the chain's FREE_CACHE and OFFLOAD hooks as an OOM handler of
 * `pool` (inside an allocation, before it fails). The chain must outlive the
 * pool (the pool has no way to remove a handler). ENOMEM: handler table full. */
VRAM_API int vram_oomchain_attach_pool(vram_oomchain_t *chain, vram_pool_t *pool);
/* A training step of `batch` samples begins: *micro_batches (may be NULL)
 * gets how many parts to run it in: 1, or for the batch of the last
 * successful step, the split that step needed (no OOM to rediscover it).
 * EINVAL for batch < 1. */
VRAM_API int vram_oomchain_begin_step(vram_oomchain_t *chain, int batch, int *micro_batches);
/* Every following step runs in micro-batches of at most max_samples: the
 * batch vramd granted the job (it reserved memory for that many samples, not
 * the whole batch). begin_step then starts at ceil(batch / max_samples)
 * parts at least, and MICRO_BATCH doubles from there. 0 removes the limit.
 * EINVAL for a negative max_samples. */
VRAM_API int vram_oomchain_limit_micro_batch(vram_oomchain_t *chain, int max_samples);
/* The step ran out of memory: applies the next strategy and says what to do.
 * Returns 0 with action->retry, or VRAM_ENOMEM when the chain is exhausted
 * (after CHECKPOINT: action->message says where it saved and how to resume).
 * ESTATE outside a step. */
VRAM_API int vram_oomchain_on_oom(vram_oomchain_t *chain, vram_oom_action_t *action);
/* The step succeeded: counts a recovery for the strategies it needed. */
VRAM_API int vram_oomchain_end_step(vram_oomchain_t *chain);
/* Thread-safe (the pool handler may run on any thread). */
VRAM_API int vram_oomchain_stats(vram_oomchain_t *chain, vram_oomchain_stats_t *out);
/* "free-cache", "micro-batch", "offload", "checkpoint"; "?" otherwise. */
VRAM_API const char *vram_oom_strategy_name(vram_oom_strategy_t s);
/* Parses the names above; EINVAL lists them. */
VRAM_API int vram_oom_strategy_parse(const char *name, vram_oom_strategy_t *out);

/* -- GPU <-> host swap cache bookkeeping (LRU) ------------------------- */

/* Items are caller-chosen non-zero 64-bit keys with sizes in bytes. Tiers:
 * GPU (budget gpu_budget) and HOST (budget host_budget, 0 = unlimited).
 * get() returns the moves the caller must carry out, in order. */
typedef enum { VRAM_SWAP_NONE, VRAM_SWAP_GPU, VRAM_SWAP_HOST } vram_swap_tier_t;

/* One move: key goes from tier `from` to tier `to`. from NONE: load it (a
 * miss); to NONE: drop it (evicted from the host tier). */
typedef struct {
    uint64_t key, size;
    vram_swap_tier_t from, to;
} vram_swap_move_t;

typedef struct {
    uint64_t gpu_budget, host_budget;
    uint64_t gpu_bytes, host_bytes; /* current */
    uint64_t gpu_items, host_items;
    uint64_t hits_gpu, hits_host, misses;
    uint64_t bytes_to_gpu, bytes_to_host, bytes_loaded;
    uint64_t evictions_gpu;  /* items that left the GPU (to the host, or dropped when it is full) */
    uint64_t evictions_host; /* items dropped from the host */
} vram_swap_stats_t;

typedef struct vram_swap vram_swap_t;

/* gpu_budget >= 1 (EINVAL); ENOMEM. */
VRAM_API int vram_swap_create(uint64_t gpu_budget, uint64_t host_budget, vram_swap_t **out);
VRAM_API void vram_swap_destroy(vram_swap_t *sc);
/* Uses item `key` of `size` bytes (size is only read on a miss). Puts it on
 * the GPU if it fits the budget, demoting the least recently used GPU items
 * to the host and dropping the least recently used host items as needed; an
 * item larger than the GPU budget stays on the host. Carried out in order,
 * the moves never take a tier over its budget (a demoted item the host cannot
 * take while the fetched one is still there is dropped). *found: the tier it was
 * in (NONE: a miss). *nmoves moves are readable with vram_swap_move until the
 * next call. EINVAL: key 0 or size 0 on a miss; ENOMEM when it fits neither
 * tier's budget (nothing changes). */
VRAM_API int vram_swap_get(vram_swap_t *sc, uint64_t key, uint64_t size, vram_swap_tier_t *found,
                           vram_swap_tier_t *now, size_t *nmoves);
VRAM_API int vram_swap_move(const vram_swap_t *sc, size_t i, vram_swap_move_t *out);
/* Sets the GPU budget (>= 1 byte, else EINVAL). A smaller one demotes the
 * least recently used GPU items to the host (dropping host items, or a
 * demoted item the host cannot take, as get() does) until the GPU tier
 * fits; *nmoves moves are readable with vram_swap_move until the next call.
 * How a run hands the cache's device memory back after an out-of-memory
 * error. ENOMEM: no room to record the moves (nothing changes). */
VRAM_API int vram_swap_set_gpu_budget(vram_swap_t *sc, uint64_t gpu_budget, size_t *nmoves);
/* Forgets an item (the caller frees it). ENOENT if absent. */
VRAM_API int vram_swap_remove(vram_swap_t *sc, uint64_t key);
/* Tier of an item without touching the LRU order (NONE if absent). */
VRAM_API vram_swap_tier_t vram_swap_where(const vram_swap_t *sc, uint64_t key);
VRAM_API int vram_swap_stats(const vram_swap_t *sc, vram_swap_stats_t *out);
/* Invariants for tests: bytes per tier = sum of its items' sizes <= budget,
 * lists and map agree. 0 or ESTATE with a message. */
VRAM_API int vram_swap_check(const vram_swap_t *sc);

/* ===================================================================== */
/* json: JSON-in/JSON-out entry points (python/vram, other languages)   */
/* ===================================================================== */

/* For callers that cannot use the structs above comfortably (ctypes, FFI).
 * Every reply is a malloc'd, NUL-terminated JSON text the caller releases
 * with vram_json_free(); on failure *out is NULL and vram_last_error() names
 * the bad key or value. Thread-safe (the device lookup of "gpu" opens its
 * own context). docs/python.md lists the keys. */

/* Estimate. Request: exactly one of "model" (catalog name), "hf_config"
 * (path of a config.json, or its content as an object) or "profile" (path,
 * or a profile object as read by vram_model_from_profile_json), and any
 * setting of vram_estimate_settings() by its key ("lora_rank": 16) or its
 * flag's name ("zero": 3), typed as the table says (integers, numbers,
 * true/false, names, sizes as bytes or "512MiB"). Reply: the object of
 * `vram estimate --json`. EPARSE: malformed JSON (line, column); EINVAL:
 * unknown key, wrong type, value out of range (named), one setting under
 * two spellings, or an impossible setting; ENOENT: unknown catalog model;
 * EIO: unreadable file. */
VRAM_API int vram_estimate_json(const char *request, char **out);
/* Plan. Request: as vram_estimate_json ("batch_size" given = judge that
 * batch) plus exactly one of "gpu" (device index of vram_ctx_open, its free
 * memory now), "gpu_mem" (bytes or "24GiB", all free) or "gpu_name" (the GPU
 * table), and optional "target" (0, 1] and "power_of_two". Reply: the object
 * of `vram plan --json`. Errors as vram_estimate_json, plus ENODEV/EDRIVER
 * from the device. */
VRAM_API int vram_plan_json(const char *request, char **out);
/* The batch table of a job request (vramd's degradation, docs/daemon.md):
 * request as vram_estimate_json ("batch_size" is the job's batch) plus
 * optional "min_batch_size" (default 1, at most batch_size). Reply:
 * {"batch_size", "min_batch_size", "mem_bytes" (the estimate at
 * batch_size), "batch_bytes": [{"batch", "bytes"}, ...]}, the entries of
 * vram_estimate_batch_table with cap VRAM_BATCH_TABLE_MAX, the last one at
 * batch_size: what `vram run --min-batch-size` sends. Errors as
 * vram_estimate_json. */
VRAM_API int vram_batch_table_json(const char *request, char **out);
/* The devices of ctx in the schema of `vram info --json` (docs/info-json.md);
 * index -1 = all, else only that device (ENODEV when there is none). */
VRAM_API int vram_info_json(vram_ctx_t *ctx, int index, char **out);
/* The layout of every struct that python/vram mirrors with ctypes:
 * {"vram_pool_config_t": {"size": N, "fields": {"strategy": {"offset": 0,
 * "size": 4}, ...}}, ...} as this libvram was compiled. The package compares
 * its mirrors with it at import, so a mirror missing a field fails loudly
 * instead of letting libvram write past it. A new mirror adds its struct to
 * src/core/layout_json.c. ENOMEM; EINVAL for out NULL. Thread-safe. */
VRAM_API int vram_layout_json(char **out);
/* Releases a reply of the functions above. Accepts NULL. */
VRAM_API void vram_json_free(char *text);

#ifdef __cplusplus
}
#endif
#endif /* VRAM_H */
