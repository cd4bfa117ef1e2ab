"""Llama-architecture model in PyTorch, matching Hugging Face LlamaForCausalLM.

Conventions (identical to transformers' modeling_llama):
  * RMSNorm: weight * x / sqrt(mean(x^2) + eps)   (computed in the input dtype)
  * RoPE, "rotate_half" layout: for head dim d, frequency f in [0, d/2) rotates
    the pair of dims (f, f + d/2); inv_freq[f] = theta^(-2f/d).
      q' = q * cos + rotate_half(q) * sin,  rotate_half(x) = cat(-x[d/2:], x[:d/2])
  * GQA: query head h uses kv head h // (n_heads / n_kv_heads)   (repeat_kv)
  * SwiGLU MLP: down(silu(gate(x)) * up(x)); no biases anywhere
  * tied embeddings: logits = h @ embed_tokens.weight^T
Linear weights are stored [out, in] like nn.Linear.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab_size=2048, hidden_size=192, intermediate_size=512,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=48, rms_norm_eps=1e-5, rope_theta=10000.0,
                 max_position_embeddings=2048, bos_token_id=1, eos_token_id=2):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.max_position_embeddings = max_position_embeddings
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id

    def to_dict(self):
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d):
        keys = cls().__dict__.keys()
        return cls(**{k: v for k, v in d.items() if k in keys})


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_cos_sin(T, head_dim, theta, dtype, offset=0):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class _Scores(torch.autograd.Function):
    """s = mask + scale * q @ k^T, slice by slice with torch.mm.

    The Debian CPU build of torch 1.13 runs bmm at ~6 GFLOPS while mm on
    transposed views reaches ~70 GFLOPS.  q, k: [N, T, D]; mask [T, T]."""

    @staticmethod
    def forward(ctx, q, k, mask, scale):
        N, T, D = q.shape
        s = torch.empty(N, T, k.shape[1], dtype=q.dtype)
        for i in range(N):
            torch.addmm(mask, q[i], k[i].t(), alpha=scale, out=s[i])
        ctx.save_for_backward(q, k)
        ctx.scale = scale
        return s

    @staticmethod
    def backward(ctx, ds):
        q, k = ctx.saved_tensors
        ds = ds.contiguous()
        dq = torch.empty_like(q)
        dk = torch.empty_like(k)
        for i in range(q.shape[0]):
            torch.mm(ds[i], k[i], out=dq[i])
            torch.mm(ds[i].t(), q[i], out=dk[i])
        return dq.mul_(ctx.scale), dk.mul_(ctx.scale), None, None


class _PV(torch.autograd.Function):
    """o = p @ v slice by slice. p: [N, T, S], v: [N, S, D]."""

    @staticmethod
    def forward(ctx, p, v):
        o = torch.empty(p.shape[0], p.shape[1], v.shape[2], dtype=v.dtype)
        for i in range(p.shape[0]):
            torch.mm(p[i], v[i], out=o[i])
        ctx.save_for_backward(p, v)
        return o

    @staticmethod
    def backward(ctx, do):
        p, v = ctx.saved_tensors
        do = do.contiguous()
        dp = torch.empty_like(p)
        dv = torch.empty_like(v)
        for i in range(p.shape[0]):
            torch.mm(do[i], v[i].t(), out=dp[i])
            torch.mm(p[i].t(), do[i], out=dv[i])
        return dp, dv


def fast_attention(q, k, v, scale):
    """Causal GQA attention for training (same maths as naive_attention)."""
    B, H, T, D = q.shape
    rep = H // k.shape[1]
    k = k.repeat_interleave(rep, dim=1).reshape(B * H, T, D)
    v = v.repeat_interleave(rep, dim=1).reshape(B * H, T, D)
    mask = torch.full((T, T), float("-inf"), dtype=q.dtype).triu(1)
    s = _Scores.apply(q.reshape(B * H, T, D), k, mask, scale)
    p = torch.softmax(s, dim=-1)
    return _PV.apply(p, v).view(B, H, T, D)


def naive_attention(q, k, v, scale):
    """Plain causal GQA attention (reference; any dtype)."""
    H, KV = q.shape[1], k.shape[1]
    rep = H // KV
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    T, S = q.shape[2], k.shape[2]
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    mask = torch.full((T, S), float("-inf"), dtype=q.dtype).triu(S - T + 1)
    p = torch.softmax(s + mask, dim=-1)
    return torch.matmul(p, v)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, fast):
        B, T, _ = x.shape
        c = self.c
        q = self.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scale = 1.0 / math.sqrt(c.head_dim)
        if fast:
            o = fast_attention(q, k, v, scale)
        else:
            o = naive_attention(q, k, v, scale)
        o = o.transpose(1, 2).reshape(B, T, c.num_attention_heads * c.head_dim)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, fast):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, fast)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std)
                if n.endswith("o_proj.weight") or n.endswith("down_proj.weight"):
                    p.data.mul_(1.0 / math.sqrt(2 * self.c.num_hidden_layers))

    def forward(self, ids, fast=False):
        B, T = ids.shape
        x = self.embed_tokens(ids)
        cos, sin = rope_cos_sin(T, self.c.head_dim, self.c.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, fast)
        x = self.norm(x)
        return x @ self.embed_tokens.weight.t()

    def hf_state_dict(self):
        """Tensors named as in HF LlamaForCausalLM (tied: no lm_head)."""
        return {"model." + k: v.detach().contiguous() for k, v in self.state_dict().items()}

    def load_hf_state_dict(self, sd):
        self.load_state_dict({k[len("model."):]: v for k, v in sd.items()})
