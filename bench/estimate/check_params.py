"""Prints the parameter count of every reference model (run with Debian's
/usr/bin/python3; builds large models on the meta device)."""
import sys

import catalog_ref as C

big = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b",
       "gpt2-xl", "gpt2-large", "t5-large", "vit-l-16", "bert-large", "roberta-large"}
names = sys.argv[1:] or list(C.CATALOG)
for name in names:
    model, _ = C.build(name, meta=name in big)
    print(f"{name:18s} {C.count(model):>15,d}", flush=True)
