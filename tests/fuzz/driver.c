/* The fuzz smoke: a stand-alone main for one fuzz target, built with any C
 * compiler (no libFuzzer). It runs every seed of the target's corpus, then a
 * fixed number of deterministic pseudo-random mutations of them (bit flips,
 * byte inserts and deletes, splices, "interesting" tokens such as -1, 1e309,
 * nan, 2^64, deep JSON nesting). Same seed, same inputs: a failure in CI
 * reproduces with the printed command, and the input is saved to a file.
 *
 *   fuzz_smoke_<target> [-n ITERATIONS] [-s SEED] [-t SECONDS_PER_INPUT]
 *                       [-b SECONDS_BUDGET] [-o CRASH_DIR] CORPUS_DIR_OR_FILE...
 *
 * With -n 0 it only runs the given files: the way to replay a saved crash. */
#include "fuzz.h"

#include <dirent.h>
#include <jansson.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FUZZ_MAX_INPUT (64 * 1024) /* mutants never grow beyond this */

typedef struct {
    uint8_t *data;
    size_t size;
    char name[160]; /* file name, for messages */
} input_t;

static struct {
    input_t *items;
    size_t count, cap;
} corpus;

/* The input being run, for the crash handlers (they save it). */
static const uint8_t *current_data;
static size_t current_size;
static const char *current_label = "";
static const char *crash_dir = ".";
static const char *target_name = "target";

/* ---- saving the input that failed ---------------------------------------- */

/* Writes the current input next to the test and prints it, escaped, so the
 * CI log alone shows what broke. Called from signal handlers and sanitizer
 * death callbacks: only plain writes, no allocation. */
static void save_current_input(const char *why)
{
    char path[512];
    snprintf(path, sizeof path, "%s/crash-%s-%d.bin", crash_dir, target_name, (int)getpid());
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(current_data, 1, current_size, f);
        fclose(f);
    }
    fprintf(stderr, "\n=== fuzz %s: %s on input %s (%zu bytes), saved to %s\n", target_name, why,
            current_label, current_size, f ? path : "(could not save)");
    fprintf(stderr, "=== input (C-escaped, first 600 bytes): \"");
    for (size_t i = 0; i < current_size && i < 600; i++) {
        uint8_t c = current_data[i];
        if (c == '\\' || c == '"')
            fprintf(stderr, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "\"%s\n=== replay: fuzz_smoke_%s -n 0 %s\n", current_size > 600 ? "..." : "",
            target_name, path);
    fflush(stderr);
}

static void on_fatal_signal(int sig)
{
    save_current_input(sig == SIGALRM ? "timeout (hang?)" : strsignal(sig));
    signal(sig, SIG_DFL);
    if (sig == SIGALRM) sig = SIGABRT;
    raise(sig);
}

static void on_sanitizer_death(void)
{
    save_current_input("sanitizer report above");
}

/* gcc's UBSan runtime has its own copy of the death callbacks: make it abort
 * instead, so the SIGABRT handler saves the input. Read by the runtime when
 * present; unused otherwise. Stack traces make the CI log self-contained. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void)
{
    return "print_stacktrace=1:abort_on_error=1";
}

/* Provided by the ASan/UBSan runtime when linked in; NULL otherwise. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void install_handlers(void)
{
    signal(SIGABRT, on_fatal_signal); /* FUZZ_CHECK and assert() */
    signal(SIGALRM, on_fatal_signal); /* per-input time limit */
    if (__sanitizer_set_death_callback) {
        /* The sanitizers own SIGSEGV and friends; they call us before exiting. */
        __sanitizer_set_death_callback(on_sanitizer_death);
    } else {
        signal(SIGSEGV, on_fatal_signal);
        signal(SIGBUS, on_fatal_signal);
        signal(SIGFPE, on_fatal_signal);
        signal(SIGILL, on_fatal_signal);
    }
}

/* ---- corpus -------------------------------------------------------------- */

/* Keys of every JSON object in the seeds: the JSON mutation sets them to
 * edge values, so the checks behind a valid document get exercised too. */
static const char *json_keys[256];
static size_t json_key_count;

static void collect_json_keys(const uint8_t *data, size_t size)
{
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    const char *key;
    json_t *v;
    if (json_is_object(root)) {
        json_object_foreach(root, key, v)
        {
            bool known = false;
            for (size_t i = 0; i < json_key_count && !known; i++)
                known = !strcmp(json_keys[i], key);
            if (!known && json_key_count < sizeof json_keys / sizeof json_keys[0])
                json_keys[json_key_count++] = strdup(key);
        }
    }
    json_decref(root);
}

static void add_input(const uint8_t *data, size_t size, const char *name)
{
    if (corpus.count == corpus.cap) {
        corpus.cap = corpus.cap ? corpus.cap * 2 : 64;
        corpus.items = realloc(corpus.items, corpus.cap * sizeof *corpus.items);
        if (!corpus.items) abort();
    }
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) abort();
    if (size) memcpy(copy, data, size);
    input_t *in = &corpus.items[corpus.count++];
    *in = (input_t){.data = copy, .size = size};
    snprintf(in->name, sizeof in->name, "%s", name);
    collect_json_keys(data, size);
}

static int load_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    static uint8_t buf[FUZZ_MAX_INPUT];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    const char *base = strrchr(path, '/');
    add_input(buf, n, base ? base + 1 : path);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* A directory's regular files in name order (determinism), or one file. */
static int load_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return load_file(path);
    struct dirent **names;
    int n = scandir(path, &names, NULL, by_name);
    if (n < 0) {
        fprintf(stderr, "fuzz: cannot list %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char file[1024];
        snprintf(file, sizeof file, "%s/%s", path, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(file, &st) == 0 && S_ISREG(st.st_mode))
            rc |= load_file(file);
        free(names[i]);
    }
    free(names);
    return rc;
}

/* ---- mutations ----------------------------------------------------------- */

static uint64_t rng_state;

/* xorshift64*: small, fast, and the same sequence on every machine. */
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static size_t below(size_t n)
{
    return n ? (size_t)(rnd() % n) : 0;
}

/* Values at the edges of what parsers convert: signs, overflow of 32/64-bit
 * integers and doubles, special floats, units, separators of the formats. */
static const char *const tokens[] = {
    "-1",
    "0",
    "-0",
    "1",
    "1e309",
    "-1e309",
    "1e-400",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e19",
    "1e308",
    "4294967295",
    "4294967296",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "0x10",
    "0x1p64",
    "1.5",
    ".5",
    "5.",
    ".",
    "0.0",
    "1.0000000001",
    "16EiB",
    "17179869184GiB",
    "B",
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "KB",
    "GB",
    "k",
    "g",
    "ms",
    "s",
    "m",
    "h",
    "x",
    "@",
    ":",
    ",",
    "=",
    "#",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "\xff",
    "\xc3\xa9",
    "{",
    "}",
    "[",
    "]",
    "null",
    "true",
    "false",
    "\"\"",
    "{}",
    "[]",
    "a",
    "f",
    "64x",
    "65x",
    "@fail",
    "@flaky=",
    "H100-80GB",
    "mygpu:",
    "VRAM_",
    "SIM=",
    "model_type",
    "\"llama\"",
    "\"t5\"",
    "\"vit\"",
    "mem_bytes",
    "\"gpus\":",
    "\"devices\":[",
    "\"pid\":",
};

static size_t insert_bytes(uint8_t *buf, size_t size, size_t at, const void *what, size_t n)
{
    if (size + n > FUZZ_MAX_INPUT) n = FUZZ_MAX_INPUT - size;
    memmove(buf + at + n, buf + at, size - at);
    memcpy(buf + at, what, n);
    return size + n;
}

/* One random edit of buf (capacity FUZZ_MAX_INPUT); returns the new size. */
static size_t mutate_once(uint8_t *buf, size_t size)
{
    switch (below(10)) {
    case 0: /* flip a bit */
        if (size) buf[below(size)] ^= (uint8_t)(1u << below(8));
        return size;
    case 1: /* set a byte: printable ASCII mostly, sometimes any */
        if (size) buf[below(size)] = (uint8_t)(below(4) ? 0x20 + below(95) : below(256));
        return size;
    case 2: { /* insert a few random bytes */
        uint8_t b[8];
        size_t n = 1 + below(sizeof b);
        for (size_t i = 0; i < n; i++)
            b[i] = (uint8_t)(below(2) ? 0x20 + below(95) : below(256));
        return insert_bytes(buf, size, below(size + 1), b, n);
    }
    case 3: { /* delete a range */
        if (!size) return size;
        size_t at = below(size), n = 1 + below(size - at < 16 ? size - at : 16);
        memmove(buf + at, buf + at + n, size - at - n);
        return size - n;
    }
    case 4: { /* duplicate a range (repeated fields, lines, items) */
        if (!size) return size;
        size_t at = below(size), n = 1 + below(size - at < 64 ? size - at : 64);
        uint8_t tmp[64];
        memcpy(tmp, buf + at, n);
        return insert_bytes(buf, size, below(size + 1), tmp, n);
    }
    case 5: { /* splice: our head, another seed's tail */
        const input_t *o = &corpus.items[below(corpus.count)];
        size_t keep = below(size + 1), from = below(o->size + 1), n = o->size - from;
        if (keep + n > FUZZ_MAX_INPUT) n = FUZZ_MAX_INPUT - keep;
        memcpy(buf + keep, o->data + from, n);
        return keep + n;
    }
    case 6: { /* insert a token */
        const char *t = tokens[below(sizeof tokens / sizeof tokens[0])];
        return insert_bytes(buf, size, below(size + 1), t, strlen(t));
    }
    case 7: { /* replace a run of digits (a number of the format) with a token */
        if (!size) return size;
        size_t at = below(size);
        while (at < size && (buf[at] < '0' || buf[at] > '9'))
            at++;
        if (at == size) return size;
        size_t end = at;
        while (end < size && ((buf[end] >= '0' && buf[end] <= '9') || buf[end] == '.'))
            end++;
        memmove(buf + at, buf + end, size - end);
        size -= end - at;
        const char *t = tokens[below(24)]; /* the numeric ones */
        return insert_bytes(buf, size, at, t, strlen(t));
    }
    case 8: { /* deep nesting: JSON arrays/objects, or a long run of one byte */
        static const char *const openers[] = {"[", "{\"a\":", "[{\"b\":", "9", ","};
        const char *o = openers[below(5)];
        size_t depth = 1 + below(below(2) ? 100 : 5000), len = strlen(o), n = 0;
        static uint8_t nest[FUZZ_MAX_INPUT];
        for (size_t i = 0; i < depth && n + len <= sizeof nest; i++, n += len)
            memcpy(nest + n, o, len);
        return insert_bytes(buf, size, below(size + 1), nest, n);
    }
    default: /* truncate */
        return below(size + 1);
    }
}

/* A JSON value at the edges: integers around 2^31, 2^53, 2^63, huge and
 * negative reals, strings from the token list, containers, null. */
static json_t *edge_json_value(void)
{
    static const json_int_t ints[] = {0,
                                      1,
                                      -1,
                                      2,
                                      3,
                                      7,
                                      8,
                                      64,
                                      65,
                                      1000,
                                      1 << 20,
                                      INT32_MAX,
                                      (json_int_t)INT32_MAX + 1,
                                      (json_int_t)1 << 53,
                                      (json_int_t)1 << 60,
                                      INT64_MAX,
                                      INT64_MIN,
                                      INT64_MAX / 2 + 1};
    static const double reals[] = {0.5, -0.0, 1e300, -1e300, 1e-300, 3.5, 86400.0 * 366};
    switch (below(7)) {
    case 0:
    case 1:
        return json_integer(ints[below(sizeof ints / sizeof ints[0])]);
    case 2:
        return json_real(reals[below(sizeof reals / sizeof reals[0])]);
    case 3:
        return json_string(tokens[below(sizeof tokens / sizeof tokens[0])]);
    case 4:
        return below(2) ? json_null() : json_boolean(below(2));
    case 5: {
        json_t *a = json_array();
        for (size_t n = below(20); n > 0; n--)
            json_array_append_new(a, json_integer((json_int_t)below(20) - 2));
        return a;
    }
    default:
        return below(2) ? json_object() : json_string("");
    }
}

/* Sets one key (seen in the seeds, or new) of a JSON object to an edge
 * value; returns the new size, or the old one when buf is not an object. */
static size_t mutate_json(uint8_t *buf, size_t size)
{
    json_t *root = json_loadb((const char *)buf, size, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return size;
    }
    for (size_t n = 1 + below(3); n > 0; n--) {
        const char *key = json_key_count && below(8) ? json_keys[below(json_key_count)] : "extra";
        if (below(6) == 0)
            json_object_del(root, key);
        else
            json_object_set_new(root, key, edge_json_value());
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) return size;
    size_t len = strlen(text);
    if (len <= FUZZ_MAX_INPUT) {
        memcpy(buf, text, len);
        size = len;
    }
    free(text);
    return size;
}

/* ---- main ---------------------------------------------------------------- */

static void run_one(const uint8_t *data, size_t size, const char *label, unsigned timeout_s)
{
    current_data = data;
    current_size = size;
    current_label = label;
    alarm(timeout_s);
    LLVMFuzzerTestOneInput(data, size);
    alarm(0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [-n ITERATIONS] [-s SEED] [-t SECONDS_PER_INPUT] [-b SECONDS_BUDGET]\n"
            "          [-o CRASH_DIR] CORPUS_DIR_OR_FILE...\n",
            prog);
}

int main(int argc, char **argv)
{
    long iterations = 20000;
    unsigned long long seed = 1;
    unsigned timeout_s = 10;
    double budget_s = 0;
    int opt;
    while ((opt = getopt(argc, argv, "n:s:t:b:o:h")) != -1) {
        switch (opt) {
        case 'n':
            iterations = strtol(optarg, NULL, 10);
            break;
        case 's':
            seed = strtoull(optarg, NULL, 0);
            break;
        case 't':
            timeout_s = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'b':
            budget_s = strtod(optarg, NULL);
            break;
        case 'o':
            crash_dir = optarg;
            break;
        default:
            usage(argv[0]);
            return 2;
        }
    }
    if (optind >= argc || iterations < 0) {
        usage(argv[0]);
        return 2;
    }
    /* fuzz_smoke_units -> "units": names the saved crash files. */
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    target_name = strncmp(base, "fuzz_smoke_", 11) ? base : base + 11;
    for (int i = optind; i < argc; i++)
        if (load_path(argv[i]) != 0) return 2;
    if (corpus.count == 0) {
        fprintf(stderr, "fuzz: no inputs in the corpus\n");
        return 2;
    }
    install_handlers();

    double start = now_s();
    for (size_t i = 0; i < corpus.count; i++) {
        char label[200];
        snprintf(label, sizeof label, "seed %s", corpus.items[i].name);
        run_one(corpus.items[i].data, corpus.items[i].size, label, timeout_s);
    }
    static uint8_t buf[FUZZ_MAX_INPUT];
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    long done = 0;
    for (; done < iterations; done++) {
        /* The budget keeps the smoke short on slow (sanitized) builds. */
        if (budget_s > 0 && (done & 63) == 0 && now_s() - start > budget_s) break;
        const input_t *base_input = &corpus.items[below(corpus.count)];
        size_t size = base_input->size;
        memcpy(buf, base_input->data, size);
        /* A third of the mutations of JSON seeds stay valid JSON. */
        if (json_key_count && below(3) == 0) {
            size = mutate_json(buf, size);
            if (below(2)) size = mutate_once(buf, size);
        } else {
            for (size_t k = 1 + below(4); k > 0; k--)
                size = mutate_once(buf, size);
        }
        char label[256];
        snprintf(label, sizeof label, "mutation #%ld of %s (-s %llu)", done, base_input->name,
                 seed);
        run_one(buf, size, label, timeout_s);
    }
    printf("fuzz %s: %zu seeds and %ld mutations (seed %llu) passed in %.2f s; %lu inputs "
           "accepted, %lu skipped as known issues\n",
           target_name, corpus.count, done, seed, now_s() - start, fuzz_accepted,
           fuzz_known_skipped);
    for (size_t i = 0; i < corpus.count; i++)
        free(corpus.items[i].data);
    for (size_t i = 0; i < json_key_count; i++)
        free((void *)json_keys[i]);
    free(corpus.items);
    return 0;
}
