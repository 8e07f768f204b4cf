/* Convolutional networks (torchvision's ResNet, VGG, MobileNetV2,
 * EfficientNet) built layer by layer from their published configurations:
 * parameter counts come from the real layer shapes, activations from what
 * each operation keeps for backward at the feature-map sizes that
 * --image-size produces. */
#include "arch.h"
#include "estimate_limits.h"

#include <string.h>

#include <math.h>

#define MAX_BLOCKS 128

/* A feature map (per sample) and whether some operation already keeps it. */
typedef struct {
    int64_t c, h, w;
    bool saved;
} fmap_t;

/* The network under construction: parameters, and activation bytes per
 * sample (`sample`) and independent of the batch (`fixed`). */
typedef struct {
    vram_arch_params_t params;
    double e;             /* bytes per float activation */
    double logit_bytes;   /* bytes per log-probability */
    double sample, fixed; /* saved for backward */
    double working;       /* inference: largest input + output of one op */
    /* checkpointing: the bytes each block keeps and the size of its input */
    double block_start;
    double block_bytes[MAX_BLOCKS], block_input[MAX_BLOCKS];
    int nblocks;
} net_t;

static double numel(const fmap_t *x)
{
    return (double)x->c * (double)x->h * (double)x->w;
}

static void keep(net_t *n, fmap_t *x)
{
    if (x->saved) return;
    n->sample += n->e * numel(x);
    x->saved = true;
}

static void working(net_t *n, const fmap_t *in, const fmap_t *out)
{
    double io = n->e * (numel(in) + numel(out));
    if (io > n->working) n->working = io;
}

static fmap_t conv(net_t *n, fmap_t *x, int64_t out, int64_t k, int64_t stride, int64_t groups,
                   bool bias)
{
    int64_t pad = (k - 1) / 2;
    vram_arch_add_tensor(&n->params, (uint64_t)(out * (x->c / groups)), (uint64_t)k, (uint64_t)k);
    if (bias) vram_arch_add_tensor(&n->params, 1, (uint64_t)out, 1);
    keep(n, x);
    fmap_t y = {out, (x->h + 2 * pad - k) / stride + 1, (x->w + 2 * pad - k) / stride + 1, false};
    working(n, x, &y);
    return y;
}

/* Training-mode BatchNorm keeps its input and fp32 mean and 1/std. */
static fmap_t bn(net_t *n, fmap_t *x)
{
    vram_arch_add_tensor(&n->params, 1, (uint64_t)x->c, 1);
    vram_arch_add_tensor(&n->params, 1, (uint64_t)x->c, 1);
    n->params.buffer_bytes += 2 * 4 * (uint64_t)x->c;
    n->params.buffer_i64 += 1;
    keep(n, x);
    n->fixed += 2 * 4 * (double)x->c;
    fmap_t y = *x;
    y.saved = false;
    return y;
}

/* In-place ReLU keeps its result: the same storage. */
static void relu_inplace(net_t *n, fmap_t *x)
{
    keep(n, x);
}

/* In-place SiLU and ReLU6 (hardtanh_) differentiate through their input,
 * so autograd keeps a copy of it before overwriting: one extra map, and the
 * result is still kept by whoever consumes it (measured). */
static void act_inplace_copy(net_t *n, fmap_t *x)
{
    n->sample += n->e * numel(x);
}

static fmap_t maxpool(net_t *n, fmap_t *x, int64_t k, int64_t stride, int64_t pad)
{
    keep(n, x);
    fmap_t y = {x->c, (x->h + 2 * pad - k) / stride + 1, (x->w + 2 * pad - k) / stride + 1, false};
    n->sample += 8 * numel(&y); /* int64 indices of the maxima */
    working(n, x, &y);
    return y;
}

static fmap_t avgpool(net_t *n, fmap_t *x, int64_t out)
{
    keep(n, x);
    fmap_t y = {x->c, out, out, false};
    return y;
}

static fmap_t fc(net_t *n, fmap_t *x, int64_t out)
{
    vram_arch_add_tensor(&n->params, 1, (uint64_t)out, (uint64_t)numel(x));
    vram_arch_add_tensor(&n->params, 1, (uint64_t)out, 1);
    keep(n, x);
    fmap_t y = {out, 1, 1, false};
    return y;
}

/* Training-mode dropout keeps a 1-byte mask; its output is a new tensor. */
static fmap_t dropout(net_t *n, fmap_t *x)
{
    n->sample += numel(x);
    fmap_t y = *x;
    y.saved = false;
    return y;
}

/* Cross-entropy: log_softmax keeps its output (fp32 under autocast), the
 * loss the int64 target. */
static void head_loss(net_t *n, fmap_t *logits)
{
    n->sample += n->logit_bytes * numel(logits) + 8;
}

static void block_begin(net_t *n, const fmap_t *x)
{
    n->block_start = n->sample;
    if (n->nblocks < MAX_BLOCKS) n->block_input[n->nblocks] = n->e * numel(x);
}

static void block_end(net_t *n)
{
    if (n->nblocks < MAX_BLOCKS) n->block_bytes[n->nblocks++] = n->sample - n->block_start;
}

/* Per-sample bytes with checkpoint_sequential-style checkpointing: the
 * blocks split into about sqrt(blocks) segments; each segment keeps its
 * input, and one segment is recomputed at a time during backward. */
static double checkpointed(const net_t *n)
{
    double blocks = 0;
    for (int i = 0; i < n->nblocks; i++)
        blocks += n->block_bytes[i];
    int segments = (int)ceil(sqrt((double)n->nblocks));
    if (segments < 1) return n->sample;
    int per = (n->nblocks + segments - 1) / segments;
    double inputs = 0, largest = 0;
    for (int first = 0; first < n->nblocks; first += per) {
        double seg = 0;
        for (int i = first; i < first + per && i < n->nblocks; i++)
            seg += n->block_bytes[i];
        inputs += n->block_input[first];
        if (seg > largest) largest = seg;
    }
    return n->sample - blocks + inputs + largest;
}

/* ---------------------------------------------------------------- ResNet */

static void resnet(net_t *n, fmap_t x, int depth, int64_t classes)
{
    static const struct {
        int depth;
        bool bottleneck;
        int blocks[4];
    } variants[] = {{18, false, {2, 2, 2, 2}},
                    {34, false, {3, 4, 6, 3}},
                    {50, true, {3, 4, 6, 3}},
                    {101, true, {3, 4, 23, 3}},
                    {152, true, {3, 8, 36, 3}}};
    size_t v = 0;
    while (variants[v].depth != depth)
        v++;
    int64_t expansion = variants[v].bottleneck ? 4 : 1, inplanes = 64;
    x = conv(n, &x, 64, 7, 2, 1, false);
    x = bn(n, &x);
    relu_inplace(n, &x);
    x = maxpool(n, &x, 3, 2, 1);
    for (int stage = 0; stage < 4; stage++) {
        int64_t planes = 64 << stage;
        for (int i = 0; i < variants[v].blocks[stage]; i++) {
            int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
            block_begin(n, &x);
            fmap_t out;
            if (variants[v].bottleneck) {
                out = conv(n, &x, planes, 1, 1, 1, false);
                out = bn(n, &out);
                relu_inplace(n, &out);
                out = conv(n, &out, planes, 3, stride, 1, false);
                out = bn(n, &out);
                relu_inplace(n, &out);
                out = conv(n, &out, planes * 4, 1, 1, 1, false);
            } else {
                out = conv(n, &x, planes, 3, stride, 1, false);
                out = bn(n, &out);
                relu_inplace(n, &out);
                out = conv(n, &out, planes, 3, 1, 1, false);
            }
            out = bn(n, &out);
            if (stride != 1 || inplanes != planes * expansion) {
                fmap_t down = conv(n, &x, planes * expansion, 1, stride, 1, false);
                bn(n, &down);
            }
            inplanes = planes * expansion;
            relu_inplace(n, &out); /* after the in-place residual add */
            x = out;
            block_end(n);
        }
    }
    x = avgpool(n, &x, 1);
    x = fc(n, &x, classes);
    head_loss(n, &x);
}

/* ------------------------------------------------------------------- VGG */

static void vgg(net_t *n, fmap_t x, int depth, int64_t classes)
{
    /* channels per conv, 0 = max-pool (torchvision cfgs A, B, D, E) */
    static const int cfg11[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0, -1};
    static const int cfg13[] = {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0, -1};
    static const int cfg16[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 0,
                                512, 512, 512, 0,   512, 512, 512, 0,   -1};
    static const int cfg19[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                                512, 512, 512, 512, 0,   512, 512, 512, 512, 0,   -1};
    const int *cfg = depth == 11 ? cfg11 : depth == 13 ? cfg13 : depth == 19 ? cfg19 : cfg16;
    for (; *cfg >= 0; cfg++) {
        block_begin(n, &x);
        if (*cfg == 0) {
            x = maxpool(n, &x, 2, 2, 0);
        } else {
            x = conv(n, &x, *cfg, 3, 1, 1, true);
            relu_inplace(n, &x);
        }
        block_end(n);
    }
    x = avgpool(n, &x, 7);
    for (int i = 0; i < 2; i++) {
        x = fc(n, &x, 4096);
        relu_inplace(n, &x);
        x = dropout(n, &x);
    }
    x = fc(n, &x, classes);
    head_loss(n, &x);
}

/* ----------------------------------------------------------- MobileNetV2 */

/* The head MobileNetV2 and EfficientNet-B0 share: 1x1 conv to 1280 channels,
 * BN, activation, global pooling, dropout, classifier, loss. */
static void mobile_head(net_t *n, fmap_t x, int64_t classes)
{
    x = conv(n, &x, 1280, 1, 1, 1, false);
    x = bn(n, &x);
    act_inplace_copy(n, &x);
    x = avgpool(n, &x, 1);
    x = dropout(n, &x);
    x = fc(n, &x, classes);
    head_loss(n, &x);
}

static void mobilenet_v2(net_t *n, fmap_t x, int64_t classes)
{
    static const int settings[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                      {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    x = conv(n, &x, 32, 3, 2, 1, false);
    x = bn(n, &x);
    act_inplace_copy(n, &x);
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        for (int i = 0; i < settings[s][2]; i++) {
            int64_t inp = x.c, oup = settings[s][1], stride = i == 0 ? settings[s][3] : 1;
            int64_t hidden = inp * settings[s][0];
            block_begin(n, &x);
            fmap_t y = x;
            if (settings[s][0] != 1) {
                y = conv(n, &y, hidden, 1, 1, 1, false);
                y = bn(n, &y);
                act_inplace_copy(n, &y);
            }
            y = conv(n, &y, hidden, 3, stride, hidden, false);
            y = bn(n, &y);
            act_inplace_copy(n, &y);
            y = conv(n, &y, oup, 1, 1, 1, false);
            y = bn(n, &y);
            y.saved = false; /* x + y (or y itself) is a tensor nobody kept yet */
            x = y;
            block_end(n);
        }
    }
    mobile_head(n, x, classes);
}

/* ---------------------------------------------------------- EfficientNet */

static int64_t make_divisible(double v, int64_t divisor)
{
    int64_t r = (int64_t)(v + divisor / 2.0) / divisor * divisor;
    if (r < divisor) r = divisor;
    if ((double)r < 0.9 * v) r += divisor;
    return r;
}

static void efficientnet_b0(net_t *n, fmap_t x, int64_t classes)
{
    /* expand ratio, kernel, stride, output channels, layers */
    static const int stages[][5] = {{1, 3, 1, 16, 1}, {6, 3, 2, 24, 2},  {6, 5, 2, 40, 2},
                                    {6, 3, 2, 80, 3}, {6, 5, 1, 112, 3}, {6, 5, 2, 192, 4},
                                    {6, 3, 1, 320, 1}};
    x = conv(n, &x, 32, 3, 2, 1, false);
    x = bn(n, &x);
    act_inplace_copy(n, &x);
    int block_id = 0;
    for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++) {
        for (int i = 0; i < stages[s][4]; i++, block_id++) {
            int64_t inp = x.c, oup = stages[s][3], k = stages[s][1];
            int64_t stride = i == 0 ? stages[s][2] : 1;
            int64_t hidden = make_divisible((double)(inp * stages[s][0]), 8);
            block_begin(n, &x);
            fmap_t y = x;
            if (hidden != inp) {
                y = conv(n, &y, hidden, 1, 1, 1, false);
                y = bn(n, &y);
                act_inplace_copy(n, &y);
            }
            y = conv(n, &y, hidden, k, stride, hidden, false);
            y = bn(n, &y);
            act_inplace_copy(n, &y);
            /* squeeze-excitation: pool, fc, silu, fc, sigmoid, scale */
            int64_t squeeze = inp / 4 > 1 ? inp / 4 : 1;
            fmap_t z = avgpool(n, &y, 1);
            z = conv(n, &z, squeeze, 1, 1, 1, true);
            keep(n, &z); /* SiLU (not in place) keeps its input */
            z.saved = false;
            z = conv(n, &z, hidden, 1, 1, 1, true);
            z.saved = false;
            keep(n, &z); /* sigmoid keeps its output, the scale keeps both */
            keep(n, &y);
            y.saved = false;
            y = conv(n, &y, oup, 1, 1, 1, false);
            y = bn(n, &y);
            if (stride == 1 && inp == oup && block_id > 0)
                n->sample += n->e; /* stochastic depth keeps its per-sample noise */
            y.saved = false;
            x = y;
            block_end(n);
        }
    }
    mobile_head(n, x, classes);
}

static int build(const vram_model_t *m, int64_t image, double e, double logit_bytes, net_t *n)
{
    memset(n, 0, sizeof *n);
    n->e = e;
    n->logit_bytes = logit_bytes;
    int64_t classes = m->num_classes > 0 ? m->num_classes : 1000;
    if (m->num_classes > VRAM_MAX_VOCAB || m->num_channels > VRAM_MAX_IMAGE)
        return vram_fail(VRAM_EINVAL,
                         "model \"%s\": %lld classes (at most %lld) or %lld channels (at most "
                         "%lld) out of range",
                         m->name, (long long)m->num_classes, (long long)VRAM_MAX_VOCAB,
                         (long long)m->num_channels, (long long)VRAM_MAX_IMAGE);
    if (image < 32)
        return vram_fail(VRAM_EINVAL, "image size %lld is too small for %s (at least 32)",
                         (long long)image, m->name);
    fmap_t x = {m->num_channels > 0 ? m->num_channels : 3, image, image, false};
    switch (m->family) {
    case VRAM_FAMILY_RESNET:
        if (m->variant != 18 && m->variant != 34 && m->variant != 50 && m->variant != 101 &&
            m->variant != 152)
            return vram_fail(VRAM_EINVAL, "ResNet depth %d: use 18, 34, 50, 101 or 152",
                             m->variant);
        resnet(n, x, m->variant, classes);
        return 0;
    case VRAM_FAMILY_VGG:
        if (m->variant != 11 && m->variant != 13 && m->variant != 16 && m->variant != 19)
            return vram_fail(VRAM_EINVAL, "VGG depth %d: use 11, 13, 16 or 19", m->variant);
        vgg(n, x, m->variant, classes);
        return 0;
    case VRAM_FAMILY_MOBILENET_V2:
        mobilenet_v2(n, x, classes);
        return 0;
    case VRAM_FAMILY_EFFICIENTNET:
        if (m->variant != 0) return vram_fail(VRAM_ENOTSUP, "only EfficientNet-B0 is described");
        efficientnet_b0(n, x, classes);
        return 0;
    default:
        return vram_fail(VRAM_EINVAL, "model \"%s\" is not a convolutional network", m->name);
    }
}

int vram_arch_cnn_params(const vram_model_t *m, vram_arch_params_t *p)
{
    net_t n;
    int rc = build(m, m->image_size > 0 ? m->image_size : 224, 4, 4, &n);
    if (rc) return rc;
    *p = n.params;
    return 0;
}

int vram_arch_cnn_acts(const vram_model_t *m, const vram_arch_shape_t *s, double *bytes)
{
    net_t n;
    int rc = build(m, s->image, s->mm, s->f32, &n);
    if (rc) return rc;
    double b = (double)s->batch;
    if (!s->training) {
        *bytes = b * n.working;
        return 0;
    }
    double per_sample = n.sample;
    if (s->checkpointing != VRAM_CKPT_NONE) per_sample = checkpointed(&n);
    /* the input images are kept by the first convolution (counted in sample) */
    *bytes = b * per_sample + n.fixed;
    return 0;
}
