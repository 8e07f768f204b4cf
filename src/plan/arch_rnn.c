/* Word-level LSTM/GRU language models (embedding, stacked recurrent layers,
 * linear decoder), as in PyTorch's examples/word_language_model. */
#include "arch.h"
#include "estimate_limits.h"

static int gates(const vram_model_t *m)
{
    return m->family == VRAM_FAMILY_LSTM ? 4 : 3;
}

static int64_t embed(const vram_model_t *m)
{
    return m->embed_size > 0 ? m->embed_size : m->hidden_size;
}

static int check(const vram_model_t *m)
{
    if (m->vocab_size <= 0 || m->hidden_size <= 0 || m->num_layers <= 0)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": vocabulary, hidden size and layers must be "
                         "positive",
                         m->name);
    if (m->vocab_size > VRAM_MAX_VOCAB || m->hidden_size > VRAM_MAX_WIDTH ||
        embed(m) > VRAM_MAX_WIDTH || m->num_layers > VRAM_MAX_LAYERS)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": vocabulary (at most %lld), hidden and embedding size "
                         "(at most %lld) or layers (at most %lld) out of range",
                         m->name, (long long)VRAM_MAX_VOCAB, (long long)VRAM_MAX_WIDTH,
                         (long long)VRAM_MAX_LAYERS);
    if (m->tied_embeddings && embed(m) != m->hidden_size)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": tied embeddings need embedding size == hidden size",
                         m->name);
    return 0;
}

int vram_arch_rnn_params(const vram_model_t *m, vram_arch_params_t *p)
{
    int rc = check(m);
    if (rc) return rc;
    uint64_t h = (uint64_t)m->hidden_size, g = (uint64_t)gates(m), in = (uint64_t)embed(m);
    vram_arch_add_tensor(p, 1, (uint64_t)m->vocab_size, in);
    /* the first layer reads the embedding, the others the layer below */
    vram_arch_params_t layer = {0};
    vram_arch_add_tensor(&layer, 1, g * h, h); /* W_hh */
    vram_arch_add_tensor(&layer, 1, g * h, 1);
    vram_arch_add_tensor(&layer, 1, g * h, 1);
    vram_arch_add_tensor(p, 1, g * h, in); /* W_ih of the first layer */
    vram_arch_add_repeated(p, &layer, (uint64_t)m->num_layers);
    layer = (vram_arch_params_t){0};
    vram_arch_add_tensor(&layer, 1, g * h, h); /* W_ih of the others */
    vram_arch_add_repeated(p, &layer, (uint64_t)(m->num_layers - 1));
    if (!m->tied_embeddings) vram_arch_add_tensor(p, 1, (uint64_t)m->vocab_size, h);
    vram_arch_add_tensor(p, 1, (uint64_t)m->vocab_size, 1);
    return 0;
}

/* Per time step and layer the cell keeps its gate pre-activations and about
 * three hidden-sized tensors (LSTM: 4h gates + c, tanh(c), h inputs; GRU: 3h
 * gates + four h-sized): 7h either way, measured on PyTorch's CPU cell. */
int vram_arch_rnn_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes)
{
    int rc = check(m);
    if (rc) return rc;
    double e = s->mm, tok = (double)s->batch * (double)s->seq;
    double h = (double)m->hidden_size, E = (double)embed(m), L = (double)m->num_layers;
    double V = (double)m->vocab_size;
    if (!s->training) {
        *bytes = e * (double)s->batch * (E + (double)gates(m) * h + 2 * h) + e * tok * V;
        return 0;
    }
    double cells = e * tok * 7 * h;
    double layers = s->checkpointing == VRAM_CKPT_NONE ? L * cells : cells;
    double inputs = e * tok * (E + (L - 1) * h);
    double masks = tok * (E + (L - 1) * h + h);
    /* ids, decoder input, log-probabilities and targets */
    *bytes = 8 * tok + layers + inputs + masks + e * tok * h + s->f32 * tok * V + 8 * tok;
    return 0;
}
