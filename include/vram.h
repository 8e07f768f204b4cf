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
    X(LEASE, SECONDS, "0", "job lease; unrenewed jobs are released (0 = watch pid only)")          \
    X(SOCKET_MODE, STRING, "0660", "permissions of the vramd Unix socket (octal)")                 \
    X(TOKEN_FILE, STRING, "", "file holding the TCP token (0600, owned by vramd's user)")         \
    X(MAX_QUEUED_PER_USER, INT, "1000", "queued jobs per uid (0 = no limit; root is exempt)")     \
    X(MAX_RUNNING_PER_USER, INT, "64", "running jobs per uid (0 = no limit; root is exempt)")     \
    X(STATUS_CACHE, SECONDS, "0.25", "GET /v1/status reuses a device probe up to this old")      \
    X(KILL_GRACE, SECONDS, "10", "cancel of a running job: SIGKILL this long after SIGTERM")      \
    X(MAX_CONNECTIONS_PER_PEER, INT, "32", "open connections per socket uid or TCP address")     \
    X(REQUEST_TIMEOUT, SECONDS, "10", "seconds a connection may idle or dribble a request")

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
/* Copies `in` into out[0..len) for printing to a terminal or a log: control
 * characters, DEL, C1 controls, backslash and bytes that are not valid UTF-8
 * become \n, \t, \\ or \xHH, so a client string cannot move the cursor,
 * change colours or forge a log line. Always NUL-terminates (when len > 0);
 * returns the length the whole escaped text needs (like snprintf). NULL in is
 * "". Thread-safe. */
VRAM_API size_t vram_escape_text(const char *in, char *out, size_t len);

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
typedef struct {
    vram_pool_strategy_t strategy;
    uint64_t limit_bytes;
    double limit_fraction;
    const char *trace_path;
} vram_pool_config_t;

/* Fills *cfg from the options VRAM_POOL_STRATEGY, VRAM_POOL_LIMIT (a fraction
 * stays a fraction) and VRAM_POOL_TRACE (the pointer stays valid until the
 * option changes). EINVAL names a bad option value; *cfg is untouched then. */
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
/* Returns every wholly unused segment to the device; *released (may be NULL)
 * gets the bytes returned. Thread-safe. */
VRAM_API int vram_pool_trim(vram_pool_t *pool, uint64_t *released);
/* Caps the pool's reserved bytes (0 = no limit); segments already reserved
 * above a new limit are released as they empty. Thread-safe. */
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
 * 1 MiB, 2 MiB segments) and large pool. */
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
} vram_family_t;

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
    int profile_dtype_bytes; /* bytes per parameter of the measured dtype */
} vram_model_t;

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
/* Reads a measured profile JSON ({"parameters", "buffers_bytes",
 * "activation_bytes_per_sample", "activation_bytes_fixed", "dtype"}). Errors
 * as vram_model_from_hf_config. */
VRAM_API int vram_model_from_profile(const char *path, vram_model_t *out);
/* Same from a JSON text already in memory; `origin` names it in messages. */
VRAM_API int vram_model_from_hf_json(const char *text, const char *origin, vram_model_t *out);
VRAM_API int vram_model_from_profile_json(const char *text, const char *origin, vram_model_t *out);
/* Trainable parameters and the number of parameter tensors. EINVAL for an
 * inconsistent description (e.g. hidden_size not divisible by num_heads). */
VRAM_API int vram_model_param_count(const vram_model_t *m, uint64_t *params, uint64_t *tensors);
VRAM_API const char *vram_family_name(vram_family_t f);

typedef enum { VRAM_MODE_TRAIN, VRAM_MODE_INFER } vram_mode_t;
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

/* What to estimate. vram_estimate_config_init sets the defaults: train,
 * batch 1, model's default sequence/image size, fp32, adamw, no
 * checkpointing, ZeRO 0, gpus 0 (= not given, counts as 1),
 * overhead_bytes = VRAM_UNKNOWN_U64 (= the documented default). */
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
} vram_estimate_config_t;

/* Default CUDA context + library workspaces (docs/estimation.md). */
#define VRAM_DEFAULT_OVERHEAD_BYTES (512ull << 20)

/* The estimate per GPU in bytes. total is the sum of the eight components;
 * every component is affine in batch_size (activations and kv_cache scale
 * with it, the rest does not). */
typedef struct {
    uint64_t parameters_count;
    uint64_t parameters, buffers, gradients, optimizer_states, activations, kv_cache, overhead;
    uint64_t total;
    int64_t seq_len, image_size; /* the values used (defaults resolved) */
} vram_estimate_t;

VRAM_API void vram_estimate_config_init(vram_estimate_config_t *cfg);
/* Estimates one GPU's memory. Pure computation, thread-safe. EINVAL names the
 * impossible setting (batch 0, sequence longer than max_positions, ZeRO
 * without gpus, int8 training, a setting or a part above its documented
 * limit, ...); *out is untouched on failure. Totals never wrap. */
VRAM_API int vram_estimate(const vram_model_t *m, const vram_estimate_config_t *cfg,
                           vram_estimate_t *out);

/* Names <-> enums for flags and JSON ("amp-bf16", "adamw", "selective").
 * The parse functions return EINVAL listing the accepted names. */
VRAM_API int vram_precision_parse(const char *s, vram_precision_t *out);
VRAM_API int vram_optimizer_parse(const char *s, vram_optimizer_t *out);
VRAM_API int vram_checkpointing_parse(const char *s, vram_checkpointing_t *out);
VRAM_API const char *vram_precision_name(vram_precision_t p);
VRAM_API const char *vram_optimizer_name(vram_optimizer_t o);
VRAM_API const char *vram_checkpointing_name(vram_checkpointing_t c);

/* Target device for the planner: capacity and memory already in use. */
typedef struct {
    uint64_t total_bytes, used_bytes, free_bytes;
    double target;      /* fraction of free memory the job may use; default 0.70 */
    bool power_of_two;  /* round recommendations down to powers of two; default true */
    int64_t batch_size; /* batch to judge; 0 = none */
} vram_plan_config_t;

typedef enum { VRAM_FIT_YES, VRAM_FIT_TIGHT, VRAM_FIT_NO } vram_fit_t;

#define VRAM_PLAN_MAX_SUGGESTIONS 8

/* One change that lowers the estimate (mixed precision, checkpointing, ...). */
typedef struct {
    char name[32]; /* e.g. "precision=amp-bf16" */
    char description[128];
    uint64_t saving_bytes; /* at the judged batch (or batch 1) */
    bool fits;             /* with this change alone the judged batch fits */
} vram_plan_suggestion_t;

/* The planner's answer. model_bytes is what does not depend on the batch;
 * per_sample_bytes what one more sample adds; budget = target * free. */
typedef struct {
    uint64_t budget_bytes, model_bytes, per_sample_bytes;
    int64_t max_batch_raw; /* largest batch within budget (0: none fits) */
    int64_t maximum, recommended, safe;
    /* with cfg.batch_size > 0: */
    vram_estimate_t current;
    vram_fit_t fit;
    int64_t micro_batch_size, accumulation_steps;
    vram_plan_suggestion_t suggestions[VRAM_PLAN_MAX_SUGGESTIONS];
    int nsuggestions;
} vram_plan_t;

VRAM_API void vram_plan_config_init(vram_plan_config_t *cfg);
/* Batch-size recommendations for `m` under `est` (its batch_size is ignored)
 * on the device described by `dev`. Pure computation, thread-safe. EINVAL as
 * vram_estimate, or for a target outside (0,1]. */
VRAM_API int vram_plan(const vram_model_t *m, const vram_estimate_config_t *est,
                       const vram_plan_config_t *dev, vram_plan_t *out);
VRAM_API const char *vram_fit_name(vram_fit_t f);

/* ===================================================================== */
/* sched: ledger, queue, store (src/sched/)                             */
/* ===================================================================== */

/* Life of a job: QUEUED -> RUNNING -> DONE | FAILED | CANCELLED, or
 * QUEUED -> TIMEOUT | CANCELLED. Only QUEUED and RUNNING jobs hold state in
 * memory; every change is written to the store in one transaction. */
typedef enum {
    VRAM_JOB_QUEUED,
    VRAM_JOB_RUNNING,
    VRAM_JOB_DONE,
    VRAM_JOB_FAILED,
    VRAM_JOB_CANCELLED,
    VRAM_JOB_TIMEOUT,
} vram_job_state_t;

#define VRAM_SCHED_MAX_GPUS 16

/* What a client asks for. mem_bytes is per GPU for batch_size; when
 * per_sample_bytes and min_batch_size are set the scheduler may start the job
 * with a smaller batch (>= min_batch_size) that fits, using
 * mem_bytes - (batch_size - b) * per_sample_bytes per GPU. */
typedef struct {
    char name[64];
    char command[512];
    uid_t uid;                       /* owner (peer credentials) */
    pid_t pid;                       /* process whose exit releases the job; 0 = none */
    uint64_t mem_bytes;              /* per GPU, > 0 */
    int gpus;                        /* >= 1 */
    int priority;                    /* higher first */
    double timeout_s;                /* queue timeout; < 0: VRAM_JOB_TIMEOUT; 0: never */
    int pinned[VRAM_SCHED_MAX_GPUS]; /* exact devices when npinned > 0 */
    int npinned;
    uint32_t batch_size, min_batch_size; /* 0 = no degradation */
    uint64_t per_sample_bytes;
} vram_job_request_t;

/* A job as stored. devices/ndevices and granted batch are set once running. */
typedef struct {
    int64_t id;
    vram_job_request_t req;
    vram_job_state_t state;
    int devices[VRAM_SCHED_MAX_GPUS];
    int ndevices;
    uint64_t reserved_bytes; /* per placed GPU (after degradation) */
    uint32_t granted_batch, grad_accum;
    double submitted_at, started_at, ended_at; /* Unix seconds; 0 = not yet */
    int exit_status;                           /* -1 = none */
    char error[256];
} vram_job_t;

typedef enum { VRAM_PLACE_BEST_FIT, VRAM_PLACE_LEAST_LOADED } vram_placement_t;

/* Where the scheduler sees devices: a context, or (tests) plain callbacks. */
typedef struct {
    int (*count)(void *arg);
    int (*info)(void *arg, int index, vram_device_info_t *out);
    int (*processes)(void *arg, int index, vram_process_info_t *procs, size_t cap, size_t *count);
    void *arg;
} vram_sched_devices_t;

typedef struct {
    const char *db_path;                 /* SQLite file (created); ":memory:" = not durable */
    vram_ctx_t *ctx;                     /* borrowed; used when devices is NULL */
    const vram_sched_devices_t *devices; /* borrowed; wins over ctx */
    char safety_margin[32];              /* size or fraction of each device's total */
    int max_concurrent_jobs;             /* per device; 0 = no limit */
    double job_timeout_s;                /* default queue timeout; 0 = never */
    vram_placement_t placement;
    bool backfill;         /* start later jobs that fit while the head waits */
    double lease_s;        /* running jobs not renewed within this are released; 0 = off */
    double (*clock)(void); /* Unix seconds; NULL = real time (tests inject one) */
    /* Admission decisions may reuse an observation of the devices this long
     * (seconds; 0 = query the devices for every decision). Reservations are
     * always current; only outside usage may be this old. */
    double probe_interval_s;
    double status_cache_s;   /* GET /v1/status may reuse an observation this old */
    int max_queued_per_uid;  /* submissions past it are refused (EBUSY); 0 = none; root exempt */
    int max_running_per_uid; /* admission holds a uid's further jobs back; 0 = none; root exempt */
    /* Cancelling a running job sends SIGTERM to its process group (its pid
     * alone when that group is the scheduler's own), then SIGKILL after this
     * many seconds if it still runs; < 0 = signal nothing. */
    double kill_grace_s;
    /* Called after each state change once its transaction has committed
     * (never for rolled-back work), outside the scheduler lock, in order,
     * e.g. to log it: must not block long; NULL = none. */
    void (*on_event)(void *arg, const vram_job_t *job, const char *kind, const char *message);
    void *event_arg;
} vram_sched_config_t;

typedef struct vram_sched vram_sched_t;

/* Fills a config from the option table (SAFETY_MARGIN, MAX_CONCURRENT_JOBS,
 * JOB_TIMEOUT, PLACEMENT, BACKFILL, LEASE, DB). EINVAL names a bad option. */
VRAM_API int vram_sched_config_from_options(vram_sched_config_t *cfg);
/* Opens the store, reloads it (alive running jobs keep their reservations,
 * dead ones end FAILED with the reason, queued keep their order) and admits
 * what fits. EIO names the database on SQLite errors. All vram_sched_* calls
 * are thread-safe (one internal lock). */
VRAM_API int vram_sched_open(const vram_sched_config_t *cfg, vram_sched_t **out);
/* Accepts NULL. No other vram_sched_* call may be running or start. */
VRAM_API void vram_sched_close(vram_sched_t *s);
/* Queues a job and runs admission; *out gets the job (QUEUED or already
 * RUNNING). EINVAL names the bad field (mem_bytes, gpus, devices,
 * min_batch_size, timeout_s, pid), also for a request no device could ever
 * hold; EIO on store errors. Nothing is stored on failure. */
VRAM_API int vram_sched_submit(vram_sched_t *s, const vram_job_request_t *req, vram_job_t *out);
/* Cancels a queued or running job. EPERM unless caller_uid owns it or is 0;
 * ENOENT for an unknown id; ESTATE when it already ended. */
VRAM_API int vram_sched_cancel(vram_sched_t *s, int64_t id, uid_t caller_uid);
/* Ends a running job: DONE when exit_status is 0, FAILED otherwise (error
 * text optional). Same errors as cancel; a queued job is cancelled instead. */
VRAM_API int vram_sched_finish(vram_sched_t *s, int64_t id, uid_t caller_uid, int exit_status,
                               const char *error);
/* Renews a running job's lease. ENOENT, EPERM, ESTATE as above. */
VRAM_API int vram_sched_renew(vram_sched_t *s, int64_t id, uid_t caller_uid);
/* Reaps dead processes, expired leases and queue timeouts, checks usage
 * against reservations (once a second), then admits what fits. Returns the
 * number of jobs that changed state, or an error. Call tick/run_once from one
 * thread only (it closes the pidfds run_once polls). */
VRAM_API int vram_sched_tick(vram_sched_t *s);
/* Waits up to timeout_ms for a watched process to exit or a wake-up, then
 * ticks. The daemon's scheduler thread loops on it. */
VRAM_API int vram_sched_run_once(vram_sched_t *s, int timeout_ms);
/* Wakes vram_sched_run_once (e.g. for shutdown). */
VRAM_API void vram_sched_wake(vram_sched_t *s);
/* Shutdown: every current and later vram_sched_wait returns at once, and no
 * queued job is admitted any more (they stay queued, and stored). */
VRAM_API void vram_sched_shutdown(vram_sched_t *s);
/* Copies a job (active or ended). ENOENT for unknown ids. */
VRAM_API int vram_sched_job(vram_sched_t *s, int64_t id, vram_job_t *out);
/* Waits until job `id` is no longer QUEUED or timeout_ms passes; copies it. */
VRAM_API int vram_sched_wait(vram_sched_t *s, int64_t id, int timeout_ms, vram_job_t *out);
/* Waits until job `id` is in another state than `from` (a vram_job_state_t,
 * or VRAM_JOB_MISSING: until it is submitted) or timeout_ms passes; copies
 * it. ENOENT when the job does not exist (after the wait, for MISSING).
 * Thread-safe; returns at once after vram_sched_shutdown. */
#define VRAM_JOB_MISSING (-1)
VRAM_API int vram_sched_wait_change(vram_sched_t *s, int64_t id, int from, int timeout_ms,
                                    vram_job_t *out);
/* JSON documents (malloc'd, caller frees; NULL on ENOMEM, for an unknown
 * job id, or when the devices cannot be read for the status): one job; the jobs
 * (active first, then up to `limit` ended ones, newest first); the memory
 * summary of GET /v1/status; the device list. */
VRAM_API char *vram_sched_job_json(vram_sched_t *s, int64_t id);
VRAM_API char *vram_sched_jobs_json(vram_sched_t *s, int limit);
VRAM_API char *vram_sched_status_json(vram_sched_t *s);
VRAM_API char *vram_sched_devices_json(vram_sched_t *s);
/* The same views as one reader sees them (the plain ones are root's view):
 * a uid sees the pid and command of its own jobs only (root: of all);
 * VRAM_VIEWER_ANONYMOUS (an unauthenticated TCP reader) sees no job at all
 * (job/jobs return NULL) and a status without the names of pending jobs. */
#define VRAM_VIEWER_ANONYMOUS ((int64_t)-1)
VRAM_API char *vram_sched_job_json_for(vram_sched_t *s, int64_t id, int64_t viewer);
VRAM_API char *vram_sched_jobs_json_for(vram_sched_t *s, int limit, int64_t viewer);
VRAM_API char *vram_sched_status_json_for(vram_sched_t *s, int64_t viewer);
/* The event log of one job, oldest first: {"id", "events": [{"at", "kind",
 * "message"}]}; NULL for an unknown id (ENOENT) or a store error. */
VRAM_API char *vram_sched_events_json(vram_sched_t *s, int64_t id);
/* Checks the ledger invariants (reserved <= usable per device, no job both
 * queued and running, per-device job counts); 0 or ESTATE with a message. */
VRAM_API int vram_sched_check(vram_sched_t *s);
VRAM_API const char *vram_job_state_name(vram_job_state_t st);
/* Parses "queued", "running", ...; -1 if unknown. */
VRAM_API int vram_job_state_parse(const char *name);

/* Why a request body was refused: the HTTP status (400: malformed JSON or a
 * wrong type; 422: a bad value), a short code ("bad_json", "bad_type",
 * "unknown_field", "invalid_value") and a message that names the field. */
typedef struct {
    int status;
    char code[24];
    char message[256];
} vram_request_error_t;
/* Decodes the JSON body of POST /v1/jobs (text need not be NUL-terminated)
 * into *out: unknown fields, wrong types, out-of-range values, sizes (integer
 * or "10GiB") above 2^60 bytes, strings with a NUL and -0 are refused. Uid is
 * left 0 and timeout_s -1 (the daemon's default) when absent. Returns 0, or
 * EPARSE (err->status 400) / EINVAL (422) with *err filled. Thread-safe. */
VRAM_API int vram_job_request_decode(const char *text, size_t len, vram_job_request_t *out,
                                     vram_request_error_t *err);
/* Decodes the body of POST /v1/jobs/{id}/finish: {"exit_status": -1000..1000,
 * "error": "..."}, both optional (an empty body is exit status 0). `error`
 * gets the text (error_len bytes at most). Errors as above. */
VRAM_API int vram_job_finish_decode(const char *text, size_t len, int *exit_status, char *error,
                                    size_t error_len, vram_request_error_t *err);

/* Memory per GPU of a job at batch b (degradation formula above). */
VRAM_API uint64_t vram_job_mem_at_batch(const vram_job_request_t *req, uint32_t batch);
/* Largest batch in [min_batch_size, batch_size] whose memory fits in `avail`
 * and the accumulation steps that keep the effective batch >= batch_size;
 * returns 0 when none fits (or the request does not allow degradation). */
VRAM_API uint32_t vram_job_degrade(const vram_job_request_t *req, uint64_t avail,
                                   uint32_t *grad_accum);

#ifdef __cplusplus
}
#endif
#endif /* VRAM_H */
