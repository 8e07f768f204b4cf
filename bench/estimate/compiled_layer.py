"""What one torch.compile'd decoder layer keeps for backward, measured with
PyTorch's own partitioner, against `vram estimate --compile on`.

torch.compile's inductor backend splits each graph's joint forward-backward
with the min-cut partitioner (torch._functorch.partitioners.
min_cut_rematerialization_partition); the tensors the forward hands to the
backward are the backward graph's inputs other than the incoming gradients
("tangents"). Saved-tensor hooks cannot see them (they live inside the
compiled function), so this script compiles a transformers 5 decoder layer
(from_config, random weights, CPU) through AOTAutograd with that partitioner
and reads the backward graph's inputs: parameters and the rotary tables
passed in from outside are left out, the layer input is counted. The
estimator's compiled layer is the difference one more layer makes to its
activations (`--compile on`, fused attention). No GPU is needed: the
partition is decided on the traced graph, before any kernel is generated.

    python bench/estimate/compiled_layer.py [--vram build/vram] [--check]

--check (make test, tests/integration/test_families.sh) fails when
any family's estimate is more than 1 % from the partitioner's count.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import transformers  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._functorch.partitioners import min_cut_rematerialization_partition  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
B, S = 2, 256

# small configs of the families the compiled-layer rule covers
FAMILIES = {
    "llama": dict(hidden_size=256, intermediate_size=704, num_attention_heads=4,
                  num_key_value_heads=2, num_hidden_layers=2, vocab_size=512),
    "qwen2": dict(hidden_size=256, intermediate_size=640, num_attention_heads=8,
                  num_key_value_heads=2, num_hidden_layers=2, vocab_size=512),
    "gemma": dict(hidden_size=256, intermediate_size=768, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=64, num_hidden_layers=2, vocab_size=512),
    "mistral": dict(hidden_size=256, intermediate_size=704, num_attention_heads=4,
                    num_key_value_heads=2, num_hidden_layers=2, vocab_size=512),
    "phi3": dict(hidden_size=256, intermediate_size=704, num_attention_heads=4,
                 num_key_value_heads=4, num_hidden_layers=2, vocab_size=512, pad_token_id=0),
    "qwen3": dict(hidden_size=256, intermediate_size=640, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, num_hidden_layers=2, vocab_size=512),
    "olmo2": dict(hidden_size=256, intermediate_size=704, num_attention_heads=4,
                  num_key_value_heads=4, num_hidden_layers=2, vocab_size=512),
}


def backward_inputs_backend():
    """A torch.compile backend that partitions with inductor's min-cut
    partitioner and records, in the returned dict's "inputs", the tensors
    the forward hands the backward (its graph's inputs but the tangents)."""
    seen = {}

    def backward(gm, _):
        seen["inputs"] = [n.meta.get("val") for n in gm.graph.nodes
                          if n.op == "placeholder" and not n.name.startswith("tangents")]
        return gm

    return seen, aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=backward,
                              partition_fn=min_cut_rematerialization_partition)


def compiled_layer_bytes(model_type, kw, dtype):
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    inner = model.model
    layer = inner.layers[0]
    x0 = torch.randn(B, S, cfg.hidden_size, dtype=dtype)
    pos = torch.arange(S)[None].expand(B, S)
    cos, sin = inner.rotary_emb(x0, pos)
    seen, backend = backward_inputs_backend()
    run = torch.compile(lambda x: layer(x, attention_mask=None, position_ids=pos,
                                        position_embeddings=(cos, sin)), backend=backend)
    x = x0.clone().requires_grad_(True)
    out = run(x)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    params = {tuple(p.shape) for p in layer.parameters()}
    outside = {tuple(cos.shape)}
    total = 0
    for v in seen["inputs"]:
        if not isinstance(v, torch.Tensor) or tuple(v.shape) in params | outside:
            continue
        total += v.numel() * v.element_size()
    return cfg, total


def estimated_layer_bytes(vram, cfg, model_type, prec):
    with tempfile.TemporaryDirectory() as tmp:
        acts = []
        for layers in (cfg.num_hidden_layers, cfg.num_hidden_layers + 1):
            d = cfg.to_dict()
            d.update(model_type=model_type, num_hidden_layers=layers)
            path = os.path.join(tmp, f"{layers}.json")
            with open(path, "w") as f:
                json.dump(d, f)
            p = subprocess.run([vram, "estimate", "--hf-config", path, "--mode", "train",
                                "--batch-size", str(B), "--seq-len", str(S), "--precision", prec,
                                "--attention", "fused", "--compile", "on", "--json"],
                               capture_output=True, text=True, check=True)
            acts.append(json.loads(p.stdout)["bytes"]["activations"])
        return acts[1] - acts[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vram", default=os.path.join(ROOT, "build", "vram"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; "
          f"batch {B}, sequence {S}; one compiled layer's saved bytes")
    print(f"{'family':8} {'dtype':6} {'measured':>10} {'estimate':>10} {'error':>7}")
    worst = 0.0
    for model_type, kw in FAMILIES.items():
        for dtype, prec in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
            cfg, measured = compiled_layer_bytes(model_type, kw, dtype)
            est = estimated_layer_bytes(args.vram, cfg, model_type, prec)
            err = 100.0 * (est - measured) / measured
            worst = max(worst, abs(err))
            print(f"{model_type:8} {prec:6} {measured:>10} {est:>10} {err:>+6.2f}%")
            torch._dynamo.reset()
    print(f"worst |error| {worst:.2f} %")
    if args.check and worst > 1.0:
        print("FAIL: a compiled layer is more than 1 % from the partitioner's count",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
