"""A Llama model written to mirror Hugging Face's modeling_llama module by
module (LlamaForCausalLM > LlamaModel > LlamaDecoderLayer > LlamaAttention,
LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding), with the same parameter names
and the same eager computation: the RMSNorm in fp32, rotary on q and k,
repeat_kv for grouped-query attention, softmax in fp32, SwiGLU. Written here
from the published architecture (transformers is not installed); used by
run_bench.py to check what the estimator counts for the LLaMA family."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(hidden_states, n_rep):
    b, kv, s, d = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(b, kv, n_rep, s, d)
    return hidden_states.reshape(b, kv * n_rep, s, d)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.head_dim = cfg["head_dim"]
        self.num_heads, self.num_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        h = cfg["hidden_size"]
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)

    def forward(self, hidden_states, cos, sin, mask):
        b, s, _ = hidden_states.shape
        shape = (b, s, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.num_heads // self.num_kv)
        v = repeat_kv(v, self.num_heads // self.num_kv)
        attn = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + mask
        attn = F.softmax(attn, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg["hidden_size"])
        self.post_attention_layernorm = LlamaRMSNorm(cfg["hidden_size"])

    def forward(self, hidden_states, cos, sin, mask):
        residual = hidden_states
        hidden_states = residual + self.self_attn(self.input_layernorm(hidden_states), cos, sin,
                                                  mask)
        residual = hidden_states
        return residual + self.mlp(self.post_attention_layernorm(hidden_states))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg)
                                    for _ in range(cfg["num_hidden_layers"]))
        self.norm = LlamaRMSNorm(cfg["hidden_size"])
        self.rotary_emb = LlamaRotaryEmbedding(cfg["head_dim"])

    def forward(self, input_ids):
        s = input_ids.shape[1]
        hidden_states = self.embed_tokens(input_ids)
        position_ids = torch.arange(s)[None, :]
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        mask = torch.full((s, s), torch.finfo(hidden_states.dtype).min).triu(1)
        for layer in self.layers:
            hidden_states = layer(hidden_states, cos, sin, mask)
        return self.norm(hidden_states)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        cfg = dict(cfg)
        cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
        cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        self.model = LlamaModel(cfg)
        self.tied = cfg.get("tie_word_embeddings", False)
        self.lm_head = None if self.tied else nn.Linear(cfg["hidden_size"], cfg["vocab_size"],
                                                        bias=False)

    @property
    def embed(self):  # what measure.py asks a language model for its vocabulary
        return self.model.embed_tokens

    def forward(self, input_ids):
        h = self.model(input_ids)
        w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return F.linear(h, w)
