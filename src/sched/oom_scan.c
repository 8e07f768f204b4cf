/* Recognizes the messages with which GPU programs report running out of
 * device memory, in a stream read in pieces (a job's stderr). Only these
 * exact texts count: a line that merely mentions "out of memory" does not. */
#include "sched/sched.h"

#include <string.h>

/* X(text, who prints it) — docs/cli.md lists the same table. */
#define VRAM_OOM_MESSAGES(X)                                                                       \
    X("torch.cuda.OutOfMemoryError", "PyTorch (exception class)")                                  \
    X("torch.OutOfMemoryError", "PyTorch >= 2.5 (exception class)")                                \
    X("CUDA out of memory. Tried to allocate", "PyTorch caching allocator")                        \
    X("CUDA error: out of memory", "PyTorch, cudaErrorMemoryAllocation's text")                    \
    X("CUDA_ERROR_OUT_OF_MEMORY", "CUDA driver API")                                               \
    X("cudaErrorMemoryAllocation", "CUDA runtime API")                                             \
    X("CUDNN_STATUS_ALLOC_FAILED", "cuDNN")                                                        \
    X("CUBLAS_STATUS_ALLOC_FAILED", "cuBLAS")

static const char *const messages[] = {
#define VRAM_OOM_TEXT_(text, who) text,
    VRAM_OOM_MESSAGES(VRAM_OOM_TEXT_)
#undef VRAM_OOM_TEXT_
};
enum { N_MESSAGES = sizeof messages / sizeof messages[0] };

const char *vram_oom_message(size_t i)
{
    return i < N_MESSAGES ? messages[i] : NULL;
}

void vram_oom_scan_init(vram_oom_scan_t *s)
{
    memset(s, 0, sizeof *s);
}

static const char *find_message(const char *buf, size_t len)
{
    for (size_t i = 0; i < N_MESSAGES; i++)
        if (memmem(buf, len, messages[i], strlen(messages[i]))) return messages[i];
    return NULL;
}

const char *vram_oom_scan_feed(vram_oom_scan_t *s, const char *data, size_t n)
{
    /* Each piece is searched together with the tail of the previous one, so
     * a message split across two reads is still found. */
    enum { PIECE = 4096 };
    char buf[sizeof s->tail + PIECE];
    while (!s->match && n > 0) {
        size_t take = n > PIECE ? PIECE : n;
        memcpy(buf, s->tail, s->keep);
        memcpy(buf + s->keep, data, take);
        size_t len = s->keep + take;
        s->match = find_message(buf, len);
        s->keep = len < sizeof s->tail ? len : sizeof s->tail;
        memcpy(s->tail, buf + len - s->keep, s->keep);
        data += take;
        n -= take;
    }
    return s->match;
}
