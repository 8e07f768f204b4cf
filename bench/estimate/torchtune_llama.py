#!/usr/bin/env python3
"""torchtune's Llama 3.2 against `vram estimate --framework torchtune`.

Builds torchtune's own model (torchtune.models.llama3_2.llama3_2, the
builder its recipes use) with small dimensions and random weights on the
CPU, and transformers' LlamaForCausalLM with the same shape, runs one
training step of each in fp32 under a saved-tensors hook (the saved
tensors' storages, parameters and buffers left out, as families.py
measures) with SDPA replaced by what a GPU kernel keeps (gpu_sdpa.py), and
compares each with vram's activations for the same config, with and
without --framework torchtune. Then compiles one torchtune decoder layer
(TransformerSelfAttentionLayer) through AOTAutograd with inductor's
min-cut partitioner, as compiled_layer.py does for transformers' layers,
and compares the compiled backward graph's inputs with what one more layer
adds to `vram estimate --compile on --framework torchtune`. The loss is the recipe's: the model's
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
from compiled_layer import backward_inputs_backend  # noqa: E402
from families import saved_bytes, vram_estimate  # noqa: E402

import transformers  # noqa: E402
from torchtune.models.llama3_2 import llama3_2  # noqa: E402

BATCH, SEQ = 2, 32
# the compiled layer's sequence: batch x sequence unlike any weight's
# dimension, as weights are told apart from activations by shape
CSEQ = 160
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
                max_position_embeddings=CSEQ * 2, rms_norm_eps=1e-5, rope_theta=500000.0,
                rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                  high_freq_factor=4.0, original_max_position_embeddings=SEQ),
                tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
                mlp_bias=False)


def ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(2, 300, (BATCH, SEQ), generator=g)


def tt_model(s, dtype=torch.float32, max_seq=SEQ * 4):
    torch.manual_seed(0)
    return llama3_2(max_seq_len=max_seq, attn_dropout=0.0, norm_eps=1e-5, rope_base=500000,
                    scale_factor=32, tie_word_embeddings=True, **s).to(dtype)


def compiled_layer_bytes(s, dtype, b, seq):
    """The tensors one compiled torchtune layer hands its backward."""
    layer = tt_model(s, dtype, max_seq=seq).layers[0]
    seen, backend = backward_inputs_backend()
    x = torch.randn(b, seq, s["embed_dim"], dtype=dtype).requires_grad_(True)
    torch.compile(layer, backend=backend)(x).sum().backward()
    torch._dynamo.reset()
    # weights and the rotary cache buffer come from outside the graph
    outside = {tuple(t.shape) for t in list(layer.parameters()) + list(layer.buffers())}
    return sum(v.numel() * v.element_size() for v in seen["inputs"]
               if isinstance(v, torch.Tensor) and tuple(v.shape) not in outside)


def estimated_layer_bytes(vram, s, prec, b, seq):
    acts = []
    for layers in (s["num_layers"], s["num_layers"] + 1):
        cfg = hf_config(dict(s, num_layers=layers))
        e, err = vram_estimate(vram, cfg, ["--batch-size", str(b), "--seq-len", str(seq),
                                           "--precision", prec, "--attention", "fused",
                                           "--compile", "on", "--framework", "torchtune"])
        if err:
            sys.exit(err)
        acts.append(e["bytes"]["activations"])
    return acts[1] - acts[0]


def measure_torchtune(s, dtype):
    model = tt_model(s, dtype)
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


def measure_transformers(s, dtype):
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in hf_config(s).items()
                                               if k != "architectures"})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa").to(dtype)
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
    rows, worst = [], 0.0
    for s, (dtype, prec) in [(s, d) for s in SHAPES for d in ((torch.float32, "fp32"),
                                                               (torch.bfloat16, "bf16"))]:
        flags = ["--batch-size", str(BATCH), "--seq-len", str(SEQ), "--precision", prec,
                 "--attention", "fused"]
        cfg = hf_config(s)
        tt_params, tt_acts = measure_torchtune(s, dtype)
        hf_params, hf_acts = measure_transformers(s, dtype)
        est_hf, err = vram_estimate(args.vram, cfg, flags)
        if err:
            sys.exit(err)
        est_tt, err = vram_estimate(args.vram, cfg, flags + ["--framework", "torchtune"])
        if err:
            sys.exit(err)
        row = dict(shape=f"{s['num_heads']}/{s['num_kv_heads']} heads, h={s['embed_dim']}, "
                         f"L={s['num_layers']}, {prec}",
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
    compiled = []
    for s in SHAPES:
        for dtype, prec in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
            got = compiled_layer_bytes(s, dtype, BATCH, CSEQ)
            est = estimated_layer_bytes(args.vram, s, prec, BATCH, CSEQ)
            compiled.append(dict(shape=f"{s['num_heads']}/{s['num_kv_heads']} heads, "
                                       f"h={s['embed_dim']}", dtype=prec, measured=got,
                                 vram=est))
            worst = max(worst, abs(pct(est, got)))
    if args.json:
        print(json.dumps(dict(eager=rows, compiled_layer=compiled), indent=1))
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
        print(f"one compiled layer (batch {BATCH}, sequence {CSEQ}): the partitioner's saved bytes")
        for c in compiled:
            print(f"{c['shape']:30} {c['dtype']:13} {c['measured']:>10} {c['vram']:>10.0f} "
                  f"{pct(c['vram'], c['measured']):>+6.2f}%")
        print(f"command: PYTHONPATH=<torchtune> {' '.join(sys.argv)}")
    sys.exit(1 if worst > 1.0 else 0)


if __name__ == "__main__":
    main()
