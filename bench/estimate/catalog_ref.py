"""Reference PyTorch models for vram's catalog names (configs from the
published Hugging Face config.json files and torchvision)."""
import torch
import torchvision.models as tvm

import refmodels as R


def bert(v, h, l, a, i, p=512, t=2, off=0):
    return lambda: R.Bert(v, h, l, a, i, p, t, off)


def gpt2(h, l, a):
    return lambda: R.GPT2(50257, h, l, a, 1024)


def llama(v, h, l, a, kv, i, tied=False):
    return lambda: R.Llama(v, h, l, a, kv, i, tied)


def t5(d, l, a, dkv, dff):
    return lambda: R.T5(32128, d, l, a, dkv, dff)


# name -> (constructor, kind) ; kind: "bert", "gpt", "t5", "image", "rnn"
CATALOG = {
    "bert-base": (bert(30522, 768, 12, 12, 3072), "bert"),
    "bert-large": (bert(30522, 1024, 24, 16, 4096), "bert"),
    "roberta-base": (bert(50265, 768, 12, 12, 3072, 514, 1, 2), "bert"),
    "roberta-large": (bert(50265, 1024, 24, 16, 4096, 514, 1, 2), "bert"),
    "gpt2": (gpt2(768, 12, 12), "gpt"),
    "gpt2-medium": (gpt2(1024, 24, 16), "gpt"),
    "gpt2-large": (gpt2(1280, 36, 20), "gpt"),
    "gpt2-xl": (gpt2(1600, 48, 25), "gpt"),
    "t5-small": (t5(512, 6, 8, 64, 2048), "t5"),
    "t5-base": (t5(768, 12, 12, 64, 3072), "t5"),
    "t5-large": (t5(1024, 24, 16, 64, 4096), "t5"),
    "llama-2-7b": (llama(32000, 4096, 32, 32, 32, 11008), "gpt"),
    "llama-2-13b": (llama(32000, 5120, 40, 40, 40, 13824), "gpt"),
    "llama-2-70b": (llama(32000, 8192, 80, 64, 8, 28672), "gpt"),
    "llama-3-8b": (llama(128256, 4096, 32, 32, 8, 14336), "gpt"),
    "llama-3-70b": (llama(128256, 8192, 80, 64, 8, 28672), "gpt"),
    "mistral-7b": (llama(32000, 4096, 32, 32, 8, 14336), "gpt"),
    "vit-b-16": (tvm.vit_b_16, "image"),
    "vit-l-16": (tvm.vit_l_16, "image"),
    "resnet18": (tvm.resnet18, "image"),
    "resnet34": (tvm.resnet34, "image"),
    "resnet50": (tvm.resnet50, "image"),
    "resnet101": (tvm.resnet101, "image"),
    "resnet152": (tvm.resnet152, "image"),
    "vgg16": (tvm.vgg16, "image"),
    "mobilenet-v2": (tvm.mobilenet_v2, "image"),
    "efficientnet-b0": (tvm.efficientnet_b0, "image"),
    "lstm-lm": (lambda: R.RNNLM("lstm", 33278, 650, 650, 2, True), "rnn"),
    "gru-lm": (lambda: R.RNNLM("gru", 33278, 650, 650, 2, True), "rnn"),
}


def build(name, meta=False):
    """Builds the reference model; meta=True allocates no parameter memory
    (enough to count parameters of llama-2-70b on a small machine)."""
    ctor, kind = CATALOG[name]
    if not meta:
        return ctor(), kind
    patched = []
    for cls in (torch.nn.Linear, torch.nn.Embedding, torch.nn.LayerNorm):
        orig = cls.__init__

        def init(self, *a, _orig=orig, **k):
            k.setdefault("device", "meta")
            _orig(self, *a, **k)

        cls.__init__ = init
        patched.append((cls, orig))
    try:
        return ctor(), kind
    finally:
        for cls, orig in patched:
            cls.__init__ = orig


def count(model):
    seen, n = set(), 0
    for p in model.parameters():  # parameters() already skips tied duplicates
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n
