"""Records allocation traces of two PyTorch workloads on the CPU with the
LD_PRELOAD recorder vram_record.so (see README.md):

  transformer_varlen  a 4-layer Transformer encoder (d_model 256, 8 heads,
                      FFN 1024) trained with AdamW, 10 steps; each step packs
                      sequences of random lengths (16-192 tokens) into one
                      padding-free batch of 256-1024 tokens
  kv_cache_server     a 2-layer GPT-style decoder (d_model 256, 8 heads)
                      serving 6 requests one after another: a random prompt
                      (8-96 tokens) prefilled, then 16-48 tokens generated one
                      at a time, the per-layer K/V cache growing by one
                      token each step (torch.cat) and dropped when the
                      request ends

Usage: LD_PRELOAD=./vram_record.so /usr/bin/python3 record.py OUTDIR
One thread, a fixed seed: the same trace every run on the same PyTorch."""
import ctypes
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(15)
rec = ctypes.CDLL(None)
rec.vram_record_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p]


def record(path, title, fn):
    if rec.vram_record_start(path.encode(), title.encode()) != 0:
        sys.exit(f"cannot write {path}")
    try:
        fn()
    finally:
        rec.vram_record_stop()


def transformer_varlen():
    d, heads, layers = 256, 8, 4
    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
    model = nn.Sequential(nn.Embedding(8000, d), nn.TransformerEncoder(layer, layers),
                          nn.Linear(d, 8000))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    for step in range(10):
        lengths = []
        while sum(lengths) < 256 or (sum(lengths) < 1024 and torch.rand(1, generator=g) < 0.8):
            lengths.append(int(torch.randint(16, 193, (1,), generator=g)))
        tokens = torch.randint(0, 8000, (1, sum(lengths)), generator=g)
        # Packed without padding: a block-diagonal mask keeps sequences apart.
        mask = torch.full((sum(lengths), sum(lengths)), float("-inf"))
        at = 0
        for n in lengths:
            mask[at:at + n, at:at + n] = 0
            at += n
        x = model[0](tokens)
        x = model[1](x, mask=mask)
        logits = model[2](x)
        loss = F.cross_entropy(logits.view(-1, 8000), tokens.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, logits, loss, mask, tokens


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, cache):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache is not None:  # the KV cache grows by this step's tokens
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        if t > 1:
            att = att + torch.triu(torch.full((t, k.shape[2]), float("-inf")), k.shape[2] - t + 1)
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.out(y)
        return x + self.ff(self.ln2(x)), (k, v)


def kv_cache_server():
    d, heads, layers, vocab = 256, 8, 2, 8000
    emb, head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
    blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for request in range(6):
            prompt = torch.randint(0, vocab, (1, int(torch.randint(8, 97, (1,), generator=g)))),
            x, caches = prompt[0], [None] * layers
            for _ in range(int(torch.randint(16, 49, (1,), generator=g))):
                h = emb(x)
                for i, blk in enumerate(blocks):
                    h, caches[i] = blk(h, caches[i])
                x = head(h[:, -1:]).argmax(-1)
            del caches, h, x  # the request ends: its cache is freed


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    record(os.path.join(out, "transformer_varlen.trace"),
           "vram pool trace: PyTorch 1.13 CPU, Transformer encoder, variable-length packed "
           "batches, AdamW, 10 steps (bench/pool/traces/record.py)", transformer_varlen)
    record(os.path.join(out, "kv_cache_server.trace"),
           "vram pool trace: PyTorch 1.13 CPU, GPT-style decoder serving 6 requests with a "
           "growing KV cache (bench/pool/traces/record.py)", kv_cache_server)


if __name__ == "__main__":
    main()
