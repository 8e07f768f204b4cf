#!/usr/bin/env python3
"""torchtune's Llama 3.2 against `vram estimate --framework torchtune`.

Builds torchtune's own model (torchtune.models.llama3_2.llama3_2, the
builder its recipes use) with small dimensions and random weights on the
CPU, and transformers' LlamaForCausalLM with the same shape, runs one
training step of each in fp32 under a saved-tensors hook (the saved
tensors' storages, parameters and buffers left out, as families.py
measures) with SDPA replaced by what a GPU kernel keeps (gpu_sdpa.py), and
compares each with vram's activations for the same config, with and
without --framework torchtune. The loss is the recipe's: the model's
logits, the labels shifted by one, torch.nn.CrossEntropyLoss
(recipes/full_finetune_single_device.py, torchtune 0.6).

torchtune is not in the project's environment; give its location with
PYTHONPATH (pip install --target DIR torchtune==0.6.1 torchao==0.10.0
and its dependencies).

Usage: PYTHONPATH=DIR bench/estimate/torchtune_llama.py [--vram build/vram] [--json]
Exit status 1 when an activation figure is more than 1 % off.
"""
import argparse
import json
import os
import sys
import warnings

import torch

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from families import vram_estimate  # noqa: E402
from gpu_sdpa import use_gpu_sdpa  # noqa: E402
from measure import storage_key as storage  # noqa: E402

import transformers  # noqa: E402
from torchtune.models.llama3_2 import llama3_2  # noqa: E402

BATCH, SEQ = 2, 32
# Llama 3.2's layout (grouped keys and values, tied embeddings, llama3 rope
# scaling) at a small size; two shapes of grouping
SHAPES = [
    dict(vocab_size=512, num_layers=2, num_heads=8, num_kv_heads=2, embed_dim=256,
         intermediate_dim=512),
    dict(vocab_size=384, num_layers=3, num_heads=12, num_kv_heads=4, embed_dim=384,
         intermediate_dim=1024),
]


def hf_config(s):
    return dict(model_type="llama", architectures=["LlamaForCausalLM"],
                vocab_size=s["vocab_size"], hidden_size=s["embed_dim"],
                intermediate_size=s["intermediate_dim"], num_hidden_layers=s["num_layers"],
                num_attention_heads=s["num_heads"], num_key_value_heads=s["num_kv_heads"],
                max_position_embeddings=SEQ * 4, rms_norm_eps=1e-5, rope_theta=500000.0,
                rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                  high_freq_factor=4.0, original_max_position_embeddings=SEQ),
                tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
                mlp_bias=False)


def saved_bytes(model, step):
    params = {storage(p)[0] for p in list(model.parameters()) + list(model.buffers())}
    saved = {}

    def pack(t):
        ptr, n = storage(t)
        if ptr not in params and n:
            saved[ptr] = max(saved.get(ptr, 0), n)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), use_gpu_sdpa():
        loss = step()
    loss.backward()
    return sum(saved.values())


def ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(2, 300, (BATCH, SEQ), generator=g)


def measure_torchtune(s):
    torch.manual_seed(0)
    model = llama3_2(max_seq_len=SEQ * 4, attn_dropout=0.0, norm_eps=1e-5,
                     rope_base=500000, scale_factor=32, tie_word_embeddings=True, **s)
    model.train()
    tokens = ids()
    # the recipe: labels shifted left with an ignored last position
    labels = torch.hstack((tokens[:, 1:], torch.full((BATCH, 1), -100)))
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100)

    def step():
        logits = model(tokens)
        return loss_fn(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))
    params = sum(p.numel() for p in model.parameters())
    return params, saved_bytes(model, step)


def measure_transformers(s):
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in hf_config(s).items()
                                               if k != "architectures"})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    model.train()
    tokens = ids()
    params = sum(p.numel() for p in model.parameters())
    return params, saved_bytes(model, lambda: model(input_ids=tokens, labels=tokens).loss)


def pct(got, want):
    return 100.0 * (got - want) / want


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram", default=os.path.join(ROOT, "build", "vram"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    flags = ["--batch-size", str(BATCH), "--seq-len", str(SEQ), "--precision", "fp32",
             "--attention", "fused"]
    rows, worst = [], 0.0
    for s in SHAPES:
        cfg = hf_config(s)
        tt_params, tt_acts = measure_torchtune(s)
        hf_params, hf_acts = measure_transformers(s)
        est_hf, err = vram_estimate(args.vram, cfg, flags)
        if err:
            sys.exit(err)
        est_tt, err = vram_estimate(args.vram, cfg, flags + ["--framework", "torchtune"])
        if err:
            sys.exit(err)
        row = dict(shape=f"{s['num_heads']}/{s['num_kv_heads']} heads, h={s['embed_dim']}, "
                         f"L={s['num_layers']}",
                   params=dict(torchtune=tt_params, transformers=hf_params,
                               vram=est_tt["parameters_count"]),
                   torchtune=dict(measured=tt_acts, framework_torchtune=est_tt["bytes"]["activations"],
                                  framework_transformers=est_hf["bytes"]["activations"]),
                   transformers=dict(measured=hf_acts, vram=est_hf["bytes"]["activations"]))
        rows.append(row)
        worst = max(worst, abs(pct(row["torchtune"]["framework_torchtune"], tt_acts)),
                    abs(pct(row["transformers"]["vram"], hf_acts)))
        if tt_params != row["params"]["vram"]:
            worst = max(worst, 100.0)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'shape':30} {'model':13} {'measured':>10} {'vram':>10} {'error':>7} "
              f"{'vram (transformers rules)':>26}")
        for r in rows:
            t = r["torchtune"]
            print(f"{r['shape']:30} {'torchtune':13} {t['measured']:>10} "
                  f"{t['framework_torchtune']:>10.0f} "
                  f"{pct(t['framework_torchtune'], t['measured']):>+6.2f}% "
                  f"{t['framework_transformers']:>12.0f} "
                  f"({pct(t['framework_transformers'], t['measured']):+.2f}%)")
            h = r["transformers"]
            print(f"{'':30} {'transformers':13} {h['measured']:>10} {h['vram']:>10.0f} "
                  f"{pct(h['vram'], h['measured']):>+6.2f}%")
            print(f"{'':30} parameters: torchtune {r['params']['torchtune']}, transformers "
                  f"{r['params']['transformers']}, vram {r['params']['vram']}")
        print(f"command: PYTHONPATH=<torchtune> {' '.join(sys.argv)}")
    sys.exit(1 if worst > 1.0 else 0)


if __name__ == "__main__":
    main()
