"""Records five workloads used only to check placement rules (not shipped,
so no rule is chosen on them; docs/pool.md, "Fragmentation"): other
models, seeds and shapes than record.py's.

  mlp_varbatch  3-layer MLP (784-2048-2048-10), SGD momentum, 8 steps, batch 16-511
  lstm_varlen   2-layer LSTM language model (embedding 128, hidden 256), Adam,
                8 steps, batch 8-47, length 10-119
  gen_server    3-layer GPT-style decoder (d_model 384, 6 heads) serving 8
                requests with a growing KV cache (record.py's Block)
  cnn_varsize   small CNN, AdamW, 6 steps, images of 48-128 pixels, batch 4-16
  tvar2         3-layer Transformer encoder (d_model 192, 6 heads), Adam, 12
                steps of one sequence of 128-899 tokens

Usage: LD_PRELOAD=./vram_record.so /usr/bin/python3 record_heldout.py OUTDIR
(about a minute); then bench_pool_traces OUTDIR 2."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record import Block, record  # noqa: E402  (record.py sets one thread and the seed)


def mlp_varbatch():
    model = nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(3)
    for _ in range(8):
        b = int(torch.randint(16, 512, (1,), generator=g))
        x, y = torch.randn(b, 784), torch.randint(0, 10, (b,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        del x, y, loss


def lstm_varlen():
    emb = nn.Embedding(3000, 128)
    lstm = nn.LSTM(128, 256, num_layers=2, batch_first=True)
    head = nn.Linear(256, 3000)
    params = list(emb.parameters()) + list(lstm.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    g = torch.Generator().manual_seed(5)
    for _ in range(8):
        t = int(torch.randint(10, 120, (1,), generator=g))
        b = int(torch.randint(8, 48, (1,), generator=g))
        tok = torch.randint(0, 3000, (b, t), generator=g)
        out, _ = lstm(emb(tok))
        loss = F.cross_entropy(head(out).view(-1, 3000), tok.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        del out, loss, tok


def gen_server():
    d, heads, layers, vocab = 384, 6, 3, 6000
    emb, head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
    blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for _ in range(8):
            x = torch.randint(0, vocab, (1, int(torch.randint(16, 200, (1,), generator=g))))
            caches = [None] * layers
            for _ in range(int(torch.randint(20, 80, (1,), generator=g))):
                h = emb(x)
                for i, blk in enumerate(blocks):
                    h, caches[i] = blk(h, caches[i])
                x = head(h[:, -1:]).argmax(-1)
            del caches, h, x


def cnn_varsize():
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 100))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(4)
    for _ in range(6):
        s = int(torch.randint(48, 129, (1,), generator=g))
        b = int(torch.randint(4, 17, (1,), generator=g))
        x, y = torch.randn(b, 3, s, s), torch.randint(0, 100, (b,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, y, loss


def tvar2():
    d, heads, layers = 192, 6, 3
    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
    model = nn.Sequential(nn.Embedding(5000, d), nn.TransformerEncoder(layer, layers),
                          nn.Linear(d, 5000))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(7)
    for _ in range(12):
        n = int(torch.randint(128, 900, (1,), generator=g))
        tokens = torch.randint(0, 5000, (1, n), generator=g)
        mask = torch.zeros((n, n))
        x = model[1](model[0](tokens), mask=mask)
        loss = F.cross_entropy(model[2](x).view(-1, 5000), tokens.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, loss, mask, tokens


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for name, fn in [("mlp_varbatch", mlp_varbatch), ("lstm_varlen", lstm_varlen),
                     ("gen_server", gen_server), ("cnn_varsize", cnn_varsize), ("tvar2", tvar2)]:
        record(os.path.join(out, name + ".trace"),
               f"vram pool trace: PyTorch 1.13 CPU, held-out {name} "
               "(bench/pool/traces/record_heldout.py)", fn)


if __name__ == "__main__":
    main()
