/* vramd round trips: 16 concurrent clients, each reserving memory
 * (POST /v1/jobs, admitted at once) and releasing it (POST /v1/jobs/ID/finish)
 * over the Unix socket, with the durable SQLite store. Prints ops/s (one op =
 * reserve + release) and latency percentiles of the op and of each request.
 *
 *   bench_daemon VRAMD [CLIENTS] [OPS_PER_CLIENT]
 *   bench_daemon VRAMD status [QUEUED] [READERS]
 *
 * The status mode fills the queue with QUEUED jobs (default 20,000) behind a
 * full device, runs READERS (default 4) clients looping on GET /v1/status,
 * and meanwhile kills the process of a running job: it prints the status
 * latency with an empty and with the full queue (same run) and how long the
 * killed job's reservation took to be released (vramd's own ended_at).
 *
 * vramd runs as a child on 2 simulated H100-80GB with a private temp dir. */
#include "vram.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char sock_path[256];
static int ops_per_client = 2000;

typedef struct {
    char *data;
    size_t len;
} buf_t;

static size_t on_data(char *p, size_t s, size_t n, void *arg)
{
    buf_t *b = arg;
    char *nd = realloc(b->data, b->len + s * n + 1);
    if (!nd) return 0;
    memcpy(nd + b->len, p, s * n);
    b->data = nd;
    b->len += s * n;
    nd[b->len] = 0;
    return s * n;
}

static long request(CURL *h, const char *url, const char *body, buf_t *out)
{
    out->len = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    if (curl_easy_perform(h) != CURLE_OK) return -1;
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    return code;
}

/* A keep-alive libcurl handle on vramd's socket that sends JSON. */
static CURL *open_client(struct curl_slist **hdr)
{
    CURL *h = curl_easy_init();
    *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock_path);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    return h;
}

typedef struct {
    uint64_t *op_ns, *req_ns;
    int errors;
} client_t;

static void *client(void *arg)
{
    client_t *c = arg;
    struct curl_slist *hdr;
    CURL *h = open_client(&hdr);
    buf_t b = {0};
    const char *job = "{\"name\":\"bench\",\"mem_bytes\":1073741824}";
    for (int i = 0; i < ops_per_client; i++) {
        uint64_t t0 = vram_now_ns();
        long code = request(h, "http://localhost/v1/jobs", job, &b);
        uint64_t t1 = vram_now_ns();
        json_t *reply = code == 201 ? json_loadb(b.data, b.len, 0, NULL) : NULL;
        json_int_t id = json_integer_value(json_object_get(reply, "id"));
        const char *state = json_string_value(json_object_get(reply, "state"));
        if (!id || !state || strcmp(state, "running")) c->errors++;
        json_decref(reply);
        char url[96];
        snprintf(url, sizeof url, "http://localhost/v1/jobs/%lld/finish", (long long)id);
        code = request(h, url, "{\"exit_status\":0}", &b);
        uint64_t t2 = vram_now_ns();
        if (code != 200) c->errors++;
        c->op_ns[i] = t2 - t0;
        c->req_ns[2 * i] = t1 - t0;
        c->req_ns[2 * i + 1] = t2 - t1;
    }
    free(b.data);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p)
{
    return (double)v[(size_t)(p * (double)(n - 1))] / 1e6;
}

/* ---- status mode ----------------------------------------------------------- */

static _Atomic int readers_stop;

typedef struct {
    uint64_t *ns;
    size_t n, cap;
} lat_t;

static void *status_reader(void *arg)
{
    lat_t *l = arg;
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock_path);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    buf_t b = {0};
    while (!readers_stop && l->n < l->cap) {
        uint64_t t0 = vram_now_ns();
        b.len = 0;
        curl_easy_setopt(h, CURLOPT_URL, "http://localhost/v1/status");
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        if (curl_easy_perform(h) == CURLE_OK) l->ns[l->n++] = vram_now_ns() - t0;
    }
    free(b.data);
    curl_easy_cleanup(h);
    return NULL;
}

typedef struct {
    int n;
    pthread_t th[64];
    lat_t l[64];
} readers_t;

static void readers_start(readers_t *r, int n)
{
    r->n = n;
    readers_stop = 0;
    for (int i = 0; i < n; i++) {
        r->l[i] = (lat_t){calloc(200000, sizeof(uint64_t)), 0, 200000};
        pthread_create(&r->th[i], NULL, status_reader, &r->l[i]);
    }
}

/* Stops the readers: p50 and p99 of their replies in ms, and their count. */
static void readers_finish(readers_t *r, double *p50, double *p99, size_t *count)
{
    readers_stop = 1;
    size_t n = 0;
    for (int i = 0; i < r->n; i++) {
        pthread_join(r->th[i], NULL);
        n += r->l[i].n;
    }
    uint64_t *all = malloc((n ? n : 1) * sizeof *all);
    n = 0;
    for (int i = 0; i < r->n; i++) {
        memcpy(all + n, r->l[i].ns, r->l[i].n * sizeof *all);
        n += r->l[i].n;
        free(r->l[i].ns);
    }
    qsort(all, n, sizeof *all, cmp_u64);
    *p50 = n ? pct(all, n, 0.5) : 0;
    *p99 = n ? pct(all, n, 0.99) : 0;
    *count = n;
    free(all);
}

static long post(CURL *h, const char *url, const char *body, buf_t *b)
{
    curl_easy_setopt(h, CURLOPT_HTTPGET, 0L);
    return request(h, url, body, b);
}

static double job_field(CURL *h, long long id, const char *key)
{
    char url[96];
    buf_t b = {0};
    snprintf(url, sizeof url, "http://localhost/v1/jobs/%lld?wait=5&since=running", id);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    double v = -1;
    if (curl_easy_perform(h) == CURLE_OK) {
        json_t *o = json_loadb(b.data, b.len, 0, NULL);
        v = json_number_value(json_object_get(o, key));
        if (v <= 0) fprintf(stderr, "job %lld: no %s in %.300s\n", id, key, b.data ? b.data : "");
        json_decref(o);
    }
    free(b.data);
    return v;
}

static int status_mode(int queued, int readers)
{
    struct curl_slist *hdr;
    CURL *h = open_client(&hdr);
    buf_t b = {0};
    int errors = 0;
    double e50, e99, f50, f99;
    size_t en, fn;
    readers_t rd;
    readers_start(&rd, readers);
    usleep(3000000);
    readers_finish(&rd, &e50, &e99, &en);
    /* 70 GiB on both GPUs, then a 10 GiB job tied to a child process */
    errors +=
        post(h, "http://localhost/v1/jobs", "{\"mem_bytes\":\"70GiB\",\"gpus\":2}", &b) != 201;
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    char body[128];
    snprintf(body, sizeof body, "{\"mem_bytes\":\"10GiB\",\"pid\":%d,\"name\":\"victim\"}",
             (int)child);
    errors += post(h, "http://localhost/v1/jobs", body, &b) != 201;
    json_t *o = json_loadb(b.data, b.len, 0, NULL);
    long long victim = json_integer_value(json_object_get(o, "id"));
    json_decref(o);
    uint64_t t0 = vram_now_ns();
    for (int i = 0; i < queued; i++) /* 20 GiB fits nowhere: all of them wait */
        errors += post(h, "http://localhost/v1/jobs", "{\"mem_bytes\":\"20GiB\",\"name\":\"q\"}",
                       &b) != 201;
    double fill_s = (double)(vram_now_ns() - t0) / 1e9;
    /* readers on the full queue; the victim's process is killed meanwhile */
    readers_start(&rd, readers);
    usleep(1500000);
    struct timespec kill_at;
    clock_gettime(CLOCK_REALTIME, &kill_at);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    double ended = job_field(h, victim, "ended_at");
    double release_s = ended - ((double)kill_at.tv_sec + (double)kill_at.tv_nsec / 1e9);
    usleep(1500000);
    readers_finish(&rd, &f50, &f99, &fn);
    printf("vramd GET /v1/status with %d readers looping (Unix socket)\n", readers);
    printf("  empty queue:    %zu replies in 3 s, p50 %.3f ms  p99 %.3f ms\n", en, e50, e99);
    printf("  %d queued jobs: %zu replies in 3 s, p50 %.3f ms  p99 %.3f ms  (p99 ratio %.2f)\n",
           queued, fn, f50, f99, e99 > 0 ? f99 / e99 : 0);
    printf("  queue filled in %.1f s (%.0f submissions/s)\n", fill_s, queued / fill_s);
    printf("  killed job's reservation released %.3f s after kill -9 (target < 1 s)\n", release_s);
    printf("  errors: %d\n", errors);
    free(b.data);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    return errors || release_s < 0 || release_s >= 1.0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s VRAMD [CLIENTS] [OPS_PER_CLIENT]\n", argv[0]);
        return 2;
    }
    bool status = argc > 2 && !strcmp(argv[2], "status");
    int nclients = argc > 2 && !status ? atoi(argv[2]) : 16;
    if (argc > 3 && !status) ops_per_client = atoi(argv[3]);
    int queued = status && argc > 3 ? atoi(argv[3]) : 20000;
    int readers = status && argc > 4 ? atoi(argv[4]) : 4;
    if (nclients < 1 || ops_per_client < 1 || queued < 0 || readers < 1 || readers > 64) return 2;
    char dir[] = "/tmp/vram-bench-daemon-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char db[300], state[300];
    snprintf(sock_path, sizeof sock_path, "%s/vramd.sock", dir);
    snprintf(db, sizeof db, "%s/vramd.db", dir);
    snprintf(state, sizeof state, "%s/sim.state", dir);
    pid_t d = fork();
    if (d == 0) {
        setenv("VRAM_BACKEND", "sim", 1);
        setenv("VRAM_SIM", "2xH100-80GB", 1);
        setenv("VRAM_SIM_STATE", state, 1);
        setenv("VRAM_SOCKET", sock_path, 1);
        setenv("VRAM_DB", db, 1);
        setenv("VRAM_LISTEN", "", 1);
        setenv("VRAM_LOG_LEVEL", "warn", 1);
        setenv("VRAM_MAX_QUEUED_PER_USER", "0", 1); /* root is exempt anyway */
        setenv("VRAM_SAFETY_MARGIN", "0", 1);       /* the status mode fills GPUs exactly */
        execl(argv[1], argv[1], "--foreground", (char *)NULL);
        perror(argv[1]);
        _exit(127);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    for (int i = 0; i < 100 && access(sock_path, F_OK) != 0; i++)
        usleep(50000);
    usleep(100000);
    if (status) {
        int rc = status_mode(queued, readers);
        kill(d, SIGTERM);
        waitpid(d, NULL, 0);
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
        return rc;
    }

    pthread_t *th = calloc((size_t)nclients, sizeof *th);
    client_t *cl = calloc((size_t)nclients, sizeof *cl);
    for (int i = 0; i < nclients; i++) {
        cl[i].op_ns = calloc((size_t)ops_per_client, sizeof(uint64_t));
        cl[i].req_ns = calloc((size_t)ops_per_client * 2, sizeof(uint64_t));
    }
    uint64_t t0 = vram_now_ns();
    for (int i = 0; i < nclients; i++)
        pthread_create(&th[i], NULL, client, &cl[i]);
    for (int i = 0; i < nclients; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(vram_now_ns() - t0) / 1e9;

    size_t nops = (size_t)nclients * (size_t)ops_per_client;
    uint64_t *ops = malloc(nops * sizeof *ops), *reqs = malloc(2 * nops * sizeof *reqs);
    int errors = 0;
    for (int i = 0; i < nclients; i++) {
        memcpy(ops + (size_t)i * (size_t)ops_per_client, cl[i].op_ns,
               (size_t)ops_per_client * sizeof *ops);
        memcpy(reqs + (size_t)i * 2 * (size_t)ops_per_client, cl[i].req_ns,
               2 * (size_t)ops_per_client * sizeof *reqs);
        errors += cl[i].errors;
    }
    qsort(ops, nops, sizeof *ops, cmp_u64);
    qsort(reqs, 2 * nops, sizeof *reqs, cmp_u64);
    printf("vramd reserve+release: %d clients x %d ops over the Unix socket, SQLite WAL store\n",
           nclients, ops_per_client);
    printf("  ops (reserve+release): %zu in %.2f s = %.0f ops/s (%.0f requests/s)\n", nops, secs,
           (double)nops / secs, 2.0 * (double)nops / secs);
    printf("  op latency:      p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", pct(ops, nops, 0.5),
           pct(ops, nops, 0.99), (double)ops[nops - 1] / 1e6);
    printf("  request latency: p50 %.3f ms  p99 %.3f ms\n", pct(reqs, 2 * nops, 0.5),
           pct(reqs, 2 * nops, 0.99));
    printf("  errors: %d\n", errors);

    kill(d, SIGTERM);
    waitpid(d, NULL, 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return errors ? 1 : 0;
}
