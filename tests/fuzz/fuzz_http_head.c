/* Fuzz target: vramd's request parser (src/daemon/http_head.c). Head: the
 * verdict is one of -1/0/400/413/417/431/505, a refusal says why, "incomplete" only while no line
 * ends the head and under the size limit, "accepted" only with that line
 * (and the head's length ends there), and a verdict never changes when more
 * bytes arrive after it was reached. Body (what follows an accepted head):
 * scanned whole or in two pieces split anywhere (the unused bytes fed
 * again, as the relay does), the verdict and the bytes used are the same,
 * and never more than given; the body's bytes copied out are the same either
 * way, and the spans of the head lie inside it. */
#include "fuzz.h"
#include "daemon/daemon.h"

/* Whether a line that is empty ends the head within the first n bytes. */
static bool has_empty_line(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '\n' &&
            (s[i + 1] == '\n' || (i + 2 < n && s[i + 1] == '\r' && s[i + 2] == '\n')))
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    char why[320] = "";
    vramd_head_t head;
    int v = vramd_head_check(s, size, &head, why, sizeof why);
    FUZZ_CHECK(v == -1 || v == 0 || v == 400 || v == 413 || v == 417 || v == 431 || v == 505,
               "verdict %d", v);
    FUZZ_CHECK(v <= 0 || *why, "refused with %d without a reason", v);
    size_t seen = size < VRAMD_HEAD_MAX ? size : VRAMD_HEAD_MAX; /* the rest is never read */
    if (v == -1) {
        FUZZ_CHECK(size < VRAMD_HEAD_MAX, "incomplete at %zu bytes", size);
        FUZZ_CHECK(!has_empty_line(s, seen), "a complete head taken for incomplete");
    }
    if (v == 0) {
        fuzz_accepted++;
        FUZZ_CHECK(has_empty_line(s, seen), "accepted without the empty line ending the head");
        FUZZ_CHECK(head.head_len >= 2 && head.head_len <= seen && s[head.head_len - 1] == '\n' &&
                       has_empty_line(s, head.head_len) && !has_empty_line(s, head.head_len - 1),
                   "head length %zu does not end at the first empty line", head.head_len);
        FUZZ_CHECK(!(head.chunked && head.length >= 0) && head.length <= VRAMD_MAX_BODY,
                   "framing: chunked %d, length %lld", head.chunked, head.length);
        const vramd_span_t spans[] = {head.method, head.target, head.host, head.authorization};
        for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
            FUZZ_CHECK(spans[i].len < 0 || spans[i].off + (size_t)spans[i].len < head.head_len,
                       "span %zu (%zu+%ld) outside the head of %zu", i, spans[i].off, spans[i].len,
                       head.head_len);
        FUZZ_CHECK(head.method.len > 0 && head.target.len > 0, "empty method or target");
    }
    if (v == 0) {
        const char *body = s + head.head_len;
        size_t n = size - head.head_len, used = 0, u1 = 0, u2 = 0;
        vramd_body_t whole, split;
        static char whole_data[VRAMD_MAX_BODY], split_data[VRAMD_MAX_BODY];
        vramd_body_start(&whole, &head, whole_data);
        int bv = vramd_body_scan(&whole, body, n, &used, why, sizeof why);
        FUZZ_CHECK(bv == -1 || bv == 0 || bv == 400 || bv == 413 || bv == 431, "body verdict %d",
                   bv);
        FUZZ_CHECK(used <= n && (bv <= 0 || *why), "body: used %zu of %zu, verdict %d", used, n,
                   bv);
        size_t cut = n ? (size_t)data[size - 1] * n / 256 : 0;
        vramd_body_start(&split, &head, split_data);
        int sv = vramd_body_scan(&split, body, cut, &u1, why, sizeof why);
        if (sv == -1) {
            sv = vramd_body_scan(&split, body + u1, n - u1, &u2, why, sizeof why);
            u1 += u2;
        }
        FUZZ_CHECK(sv == bv && u1 == used, "body split at %zu: %d after %zu, whole %d after %zu",
                   cut, sv, u1, bv, used);
        FUZZ_CHECK(split.data_len == whole.data_len &&
                       !memcmp(split_data, whole_data, whole.data_len) &&
                       whole.data_len <= VRAMD_MAX_BODY,
                   "body bytes differ when split at %zu (%zu and %zu)", cut, split.data_len,
                   whole.data_len);
    }
    /* Every prefix: still incomplete, or already the same verdict. */
    for (size_t k = 0; k < size; k += 1 + k / 8) {
        char w[320];
        int pv = vramd_head_check(s, k, &head, w, sizeof w);
        FUZZ_CHECK(pv == -1 || pv == v, "prefix of %zu bytes gives %d, the whole %d", k, pv, v);
    }
    return 0;
}
