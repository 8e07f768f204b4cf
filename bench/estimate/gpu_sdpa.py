"""What a GPU's scaled_dot_product_attention keeps for backward, on the CPU.

The CPU has two SDPA backends, its own flash kernel and the math one; a
CUDA GPU picks among flash (FlashAttention-2), memory-efficient (xFormers'
CUTLASS kernel) and math, in that order of priority, each under its own
constraints (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp). The
CPU's choice differs from the GPU's where the constraints differ (the CPU
flash kernel has no dropout, so the math kernel runs and keeps the scores;
a GPU's flash and memory-efficient kernels apply dropout inside), and the
kernels allocate their output differently, which decides whether
`transpose(1, 2).contiguous()` after attention copies it. So the
measurement does not let the CPU choose: `gpu_sdpa()` replaces
torch.nn.functional.scaled_dot_product_attention with the GPU's dispatch
for a half-precision training step (what people train in; the tensors stay
fp32) and, for a fused kernel, an autograd function that keeps exactly what
that CUDA kernel's backward keeps (tools/autograd/derivatives.yaml):

- flash (`_scaled_dot_product_flash_attention`): no attn_mask, query, key
  and value head dims equal and at most 256; grouped heads allowed
  (enable_gqa), dropout allowed. Keeps query, key, value as given, the
  output, allocated by `empty_like(q)` on query transposed to
  (batch, seq, heads, dim) (flash_api.cpp, mha_fwd), so it follows the
  query's layout; the fp32 log-sum-exp [b, heads, q_len]; with dropout the
  Philox seed and offset.
- memory-efficient (`_scaled_dot_product_efficient_attention`): any
  attn_mask (a boolean one converted to an additive float mask,
  `convert_boolean_attn_mask`), dropout, value head dim different from the
  query's; no grouped heads (`check_batch_size_and_num_heads_dense<false>`).
  Keeps query, key, value, the mask (attn_bias), the output, allocated as
  [b, q_len, heads, v_dim] (attention.cu, `_efficient_attention_forward`),
  the fp32 log-sum-exp padded to a multiple of 32 queries (kAlignLSE), the
  seed and offset with dropout.
- math otherwise: the composite kernel, the same code on both devices, run
  as it is.

The values are computed by the CPU's math kernel (dropout from the saved
seed), and the backward recomputes them, so gradients are right; only what
autograd keeps between forward and backward is the GPU kernel's.
"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

_ORIGINAL = F.scaled_dot_product_attention


def gpu_backend(q, k, v, attn_mask, enable_gqa):
    """The backend CUDA's select_sdp_backend picks for a half-precision call."""
    heads_differ = q.shape[-3] != k.shape[-3] or q.shape[-3] != v.shape[-3]
    if attn_mask is None and q.shape[-1] == k.shape[-1] == v.shape[-1] <= 256 and (
            not heads_differ or enable_gqa):
        return "flash"
    if not heads_differ and q.shape[-1] == k.shape[-1]:
        return "efficient"
    return "math"


def _math(q, k, v, mask, p, causal, scale, gqa, seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        with sdpa_kernel(SDPBackend.MATH):
            return _ORIGINAL(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal, scale=scale,
                             enable_gqa=gqa)


class _Fused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, p, causal, scale, gqa, kernel):
        seed = torch.randint(0, 2**62, (2,), dtype=torch.int64) if p > 0 else torch.empty(0)
        with torch.no_grad():
            out = _math(q, k, v, bias, p, causal, scale, gqa, seed[0] if p > 0 else 0)
        b, h, m, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[-1]
        if kernel == "flash":
            res = torch.empty_like(q.transpose(1, 2)).transpose(1, 2)
            lse = torch.empty(b, h, m, dtype=torch.float32)
        else:
            res = torch.empty(b, m, h, dv, dtype=q.dtype).transpose(1, 2)
            lse = torch.empty(b, h, math.ceil(m / 32) * 32, dtype=torch.float32)
        res.copy_(out)
        ctx.args = (p, causal, scale, gqa)
        ctx.save_for_backward(q, k, v, bias, res, lse, seed)
        return res

    @staticmethod
    def backward(ctx, grad):
        q, k, v, bias, _, _, seed = ctx.saved_tensors
        p, causal, scale, gqa = ctx.args
        inputs = [t.detach().requires_grad_(t.requires_grad) if t is not None else None
                  for t in (q, k, v, bias)]
        with torch.enable_grad():
            out = _math(*inputs, p, causal, scale, gqa, seed[0] if p > 0 else 0)
            want = [t for t in inputs if t is not None and t.requires_grad]
            got = iter(torch.autograd.grad(out, want, grad, allow_unused=True))
        grads = [next(got) if t is not None and t.requires_grad else None for t in inputs]
        return (*grads, None, None, None, None, None)


def _bias(mask, q, k):
    """The memory-efficient kernel's attn_bias: a boolean mask becomes an
    additive float one (convert_boolean_attn_mask), then it is expanded."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    return mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def gpu_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
    kernel = gpu_backend(query, key, value, attn_mask, enable_gqa)
    if kernel == "math":
        with sdpa_kernel(SDPBackend.MATH):
            return _ORIGINAL(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                             is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    bias = _bias(attn_mask, query, key) if kernel == "efficient" else None
    return _Fused.apply(query, key, value, bias, dropout_p, is_causal, scale, enable_gqa, kernel)


class use_gpu_sdpa:
    """Context manager: F.scaled_dot_product_attention is gpu_sdpa inside."""

    def __enter__(self):
        F.scaled_dot_product_attention = gpu_sdpa
        torch.nn.functional.scaled_dot_product_attention = gpu_sdpa

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = _ORIGINAL
        torch.nn.functional.scaled_dot_product_attention = _ORIGINAL
