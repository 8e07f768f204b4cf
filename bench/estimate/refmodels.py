"""Small, faithful PyTorch reimplementations of the transformer families in
vram's catalog (BERT/RoBERTa, GPT-2, LLaMA/Mistral, T5) plus LSTM/GRU language
models. They follow the Hugging Face "eager" implementations layer by layer
(same parameters, same operations) so that their parameter counts equal the
published ones and their saved activations are those of an eager training
step. Two deliberate choices, both documented in docs/estimation.md:

* dropout uses torch.native_dropout (a 1-byte mask), the fused kernel CUDA
  runs; CPU's composite dropout would instead keep a 4-byte noise tensor;
* GPT-2's gelu_new is Hugging Face's Python formula (as HF runs it), which
  keeps five MLP-wide tensors; python_gelu=False switches to the fused
  F.gelu(approximate="tanh") ("gelu_pytorch_tanh") that keeps two.

torchvision provides the vision models (ViT, ResNet, VGG, MobileNetV2,
EfficientNet) itself, so those are measured on the real implementations.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# Set to False to measure CPU's own composite dropout (a 4-byte noise tensor
# per dropout) instead of the fused kernel CUDA runs.
FUSED_DROPOUT = True


def drop(x, p, training):
    if not training or p == 0.0:
        return x
    if not FUSED_DROPOUT:
        return torch.dropout(x, p, True)
    return torch.native_dropout(x, p, True)[0]


def gelu_new(x):
    """Hugging Face's NewGELUActivation, written out in Python as GPT-2 uses it."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Dropout(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return drop(x, self.p, self.training)


def split_heads(x, heads, head_dim):
    b, s, _ = x.shape
    return x.view(b, s, heads, head_dim).transpose(1, 2)


def merge_heads(x):
    b, a, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, a * d)


# --------------------------------------------------------------------------
# BERT / RoBERTa (post-LN encoder with pooler)
# --------------------------------------------------------------------------
class BertLayer(nn.Module):
    def __init__(self, h, heads, inter, p=0.1):
        super().__init__()
        self.heads, self.hd = heads, h // heads
        self.q, self.k, self.v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.o = nn.Linear(h, h)
        self.ln1 = nn.LayerNorm(h, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(h, inter), nn.Linear(inter, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-12)
        self.p = p

    def forward(self, x, mask):
        q = split_heads(self.q(x), self.heads, self.hd)
        k = split_heads(self.k(x), self.heads, self.hd)
        v = split_heads(self.v(x), self.heads, self.hd)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        probs = drop(torch.softmax(scores, dim=-1), self.p, self.training)
        ctx = merge_heads(torch.matmul(probs, v))
        x = self.ln1(x + drop(self.o(ctx), self.p, self.training))
        y = self.fc2(F.gelu(self.fc1(x)))
        return self.ln2(x + drop(y, self.p, self.training))


class Bert(nn.Module):
    """BertModel / RobertaModel: embeddings, encoder, pooler."""

    def __init__(self, vocab, h, layers, heads, inter, positions, types, pos_offset=0):
        super().__init__()
        self.word = nn.Embedding(vocab, h)
        self.pos = nn.Embedding(positions, h)
        self.token_type = nn.Embedding(types, h)
        self.ln = nn.LayerNorm(h, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(h, heads, inter) for _ in range(layers))
        self.pool = nn.Linear(h, h)
        self.pos_offset = pos_offset

    def forward(self, ids):
        b, s = ids.shape
        pos = torch.arange(self.pos_offset, self.pos_offset + s).unsqueeze(0)
        types = torch.zeros_like(ids)
        x = self.word(ids) + self.pos(pos) + self.token_type(types)
        x = drop(self.ln(x), 0.1, self.training)
        mask = torch.zeros(b, 1, 1, s)  # no padding: an all-zero additive mask
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


# --------------------------------------------------------------------------
# GPT-2 (pre-LN decoder, tied LM head)
# --------------------------------------------------------------------------
class GPT2Block(nn.Module):
    def __init__(self, h, heads, p=0.1):
        super().__init__()
        self.heads, self.hd = heads, h // heads
        self.ln1 = nn.LayerNorm(h)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.c_fc = nn.Linear(h, 4 * h)
        self.mlp_proj = nn.Linear(4 * h, h)
        self.p = p
        self.python_gelu = True  # as Hugging Face's GPT-2 ("gelu_new")

    def forward(self, x, causal):
        q, k, v = self.c_attn(self.ln1(x)).split(x.shape[-1], dim=2)
        q, k, v = (split_heads(t, self.heads, self.hd) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + causal
        probs = drop(torch.softmax(scores, dim=-1), self.p, self.training)
        a = self.c_proj(merge_heads(torch.matmul(probs, v)))
        x = x + drop(a, self.p, self.training)
        u = self.c_fc(self.ln2(x))
        m = self.mlp_proj(gelu_new(u) if self.python_gelu else F.gelu(u, approximate="tanh"))
        return x + drop(m, self.p, self.training)


class GPT2(nn.Module):
    def __init__(self, vocab, h, layers, heads, positions):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(positions, h)
        self.blocks = nn.ModuleList(GPT2Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, ids):
        b, s = ids.shape
        x = drop(self.wte(ids) + self.wpe(torch.arange(s).unsqueeze(0)), 0.1, self.training)
        causal = torch.full((s, s), float("-inf")).triu(1)
        for blk in self.blocks:
            x = blk(x, causal)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


# --------------------------------------------------------------------------
# LLaMA / Mistral (RMSNorm, SwiGLU, rotary, grouped-query attention)
# --------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, h, heads, kv_heads, inter):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv_heads, h // heads
        self.norm1, self.norm2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, heads * self.hd, bias=False)
        self.k = nn.Linear(h, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(h, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, h, bias=False)
        self.gate = nn.Linear(h, inter, bias=False)
        self.up = nn.Linear(h, inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)

    def forward(self, x, cos, sin, causal):
        y = self.norm1(x)
        q = split_heads(self.q(y), self.heads, self.hd)
        k = split_heads(self.k(y), self.kv, self.hd)
        v = split_heads(self.v(y), self.kv, self.hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv
        if rep > 1:  # repeat_kv as in HF: expand + reshape (a copy)
            b, kv, s, d = k.shape
            k = k[:, :, None].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)
            v = v[:, :, None].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + causal
        probs = torch.softmax(scores, dim=-1)
        x = x + self.o(merge_heads(torch.matmul(probs, v)))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, vocab, h, layers, heads, kv_heads, inter, tied=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(LlamaLayer(h, heads, kv_heads, inter) for _ in range(layers))
        self.norm = RMSNorm(h)
        self.lm_head = None if tied else nn.Linear(h, vocab, bias=False)
        self.hd = h // heads

    def forward(self, ids):
        b, s = ids.shape
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        freqs = torch.outer(torch.arange(s).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        causal = torch.full((s, s), float("-inf")).triu(1)
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, causal)
        w = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(self.norm(x), w)


# --------------------------------------------------------------------------
# T5 v1.0 (encoder-decoder, relative position bias, tied head)
# --------------------------------------------------------------------------
class T5Norm(nn.Module):
    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def relative_bucket(rel, bidirectional, buckets, max_distance=128):
    ret = 0
    if bidirectional:
        buckets //= 2
        ret = (rel > 0).long() * buckets
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = buckets // 2
    small = rel < max_exact
    large = max_exact + (
        torch.log(rel.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact) * (buckets - max_exact)
    ).long()
    large = torch.min(large, torch.full_like(large, buckets - 1))
    return ret + torch.where(small, rel, large)


class T5Attention(nn.Module):
    def __init__(self, d, heads, dkv, bias_buckets=0, bidirectional=True):
        super().__init__()
        self.heads, self.dkv = heads, dkv
        self.q = nn.Linear(d, heads * dkv, bias=False)
        self.k = nn.Linear(d, heads * dkv, bias=False)
        self.v = nn.Linear(d, heads * dkv, bias=False)
        self.o = nn.Linear(heads * dkv, d, bias=False)
        self.buckets = bias_buckets
        self.bidirectional = bidirectional
        if bias_buckets:
            self.rel = nn.Embedding(bias_buckets, heads)

    def position_bias(self, q_len, k_len):
        rel = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
        idx = relative_bucket(rel, self.bidirectional, self.buckets)
        return self.rel(idx).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x, kv, bias, training):
        q = split_heads(self.q(x), self.heads, self.dkv)
        k = split_heads(self.k(kv), self.heads, self.dkv)
        v = split_heads(self.v(kv), self.heads, self.dkv)
        scores = torch.matmul(q, k.transpose(-1, -2)) + bias  # T5 does not scale
        probs = drop(torch.softmax(scores, dim=-1), 0.1, training)
        return self.o(merge_heads(torch.matmul(probs, v)))


class T5FF(nn.Module):
    def __init__(self, d, dff):
        super().__init__()
        self.norm = T5Norm(d)
        self.wi = nn.Linear(d, dff, bias=False)
        self.wo = nn.Linear(dff, d, bias=False)

    def forward(self, x, training):
        h = drop(F.relu(self.wi(self.norm(x))), 0.1, training)
        return x + drop(self.wo(h), 0.1, training)


class T5Block(nn.Module):
    def __init__(self, d, heads, dkv, dff, decoder, buckets):
        super().__init__()
        self.norm_sa = T5Norm(d)
        self.sa = T5Attention(d, heads, dkv, buckets, bidirectional=not decoder)
        if decoder:
            self.norm_ca = T5Norm(d)
            self.ca = T5Attention(d, heads, dkv)
        self.ff = T5FF(d, dff)
        self.decoder = decoder

    def forward(self, x, bias, enc=None, enc_bias=None):
        t = self.training
        y = self.norm_sa(x)
        x = x + drop(self.sa(y, y, bias, t), 0.1, t)
        if self.decoder:
            x = x + drop(self.ca(self.norm_ca(x), enc, enc_bias, t), 0.1, t)
        return self.ff(x, t)


class T5(nn.Module):
    def __init__(self, vocab, d, layers, heads, dkv, dff, buckets=32):
        super().__init__()
        self.shared = nn.Embedding(vocab, d)
        self.enc = nn.ModuleList(T5Block(d, heads, dkv, dff, False, buckets if i == 0 else 0) for i in range(layers))
        self.enc_norm = T5Norm(d)
        self.dec = nn.ModuleList(T5Block(d, heads, dkv, dff, True, buckets if i == 0 else 0) for i in range(layers))
        self.dec_norm = T5Norm(d)
        self.d = d

    def forward(self, ids, dec_ids):
        t = self.training
        s, sd = ids.shape[1], dec_ids.shape[1]
        x = drop(self.shared(ids), 0.1, t)
        bias = self.enc[0].sa.position_bias(s, s)
        for blk in self.enc:
            x = blk(x, bias)
        enc = drop(self.enc_norm(x), 0.1, t)
        y = drop(self.shared(dec_ids), 0.1, t)
        causal = torch.full((sd, sd), float("-inf")).triu(1)
        dbias = self.dec[0].sa.position_bias(sd, sd) + causal
        cbias = torch.zeros(1, 1, sd, s)
        for blk in self.dec:
            y = blk(y, dbias, enc, cbias)
        y = drop(self.dec_norm(y), 0.1, t) * (self.d ** -0.5)
        return F.linear(y, self.shared.weight)


# --------------------------------------------------------------------------
# LSTM / GRU word-level language model (PyTorch examples/word_language_model)
# --------------------------------------------------------------------------
class RNNLM(nn.Module):
    def __init__(self, kind, vocab, emb, hidden, layers, tied, p=0.5):
        super().__init__()
        self.encoder = nn.Embedding(vocab, emb)
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = rnn(emb, hidden, layers, dropout=p)
        self.decoder = nn.Linear(hidden, vocab)
        if tied:
            self.decoder.weight = self.encoder.weight
        self.p = p

    def forward(self, ids):  # ids: (seq, batch) as in the example
        x = drop(self.encoder(ids), self.p, self.training)
        out, _ = self.rnn(x)
        return self.decoder(drop(out, self.p, self.training))
