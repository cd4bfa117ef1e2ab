"""Straightforward float64 NumPy reference forward for an exported HF Llama
checkpoint.  Uses ONLY config.json + model.safetensors (via st_io) and follows
the HF LlamaForCausalLM definition directly; independent of model.py."""
import json
import os

import numpy as np

import st_io


class RefModel:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        w, _ = st_io.read(os.path.join(model_dir, "model.safetensors"))
        self.w = {k: v.astype(np.float64) for k, v in w.items()}

    def rms(self, x, g):
        return g * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg["rms_norm_eps"]))

    def logits(self, ids):
        c, W = self.cfg, self.w
        T = len(ids)
        H, KV = c["num_attention_heads"], c["num_key_value_heads"]
        D = c.get("head_dim") or c["hidden_size"] // H
        x = W["model.embed_tokens.weight"][np.array(ids)]
        inv = c["rope_theta"] ** (-np.arange(0, D, 2, dtype=np.float64) / D)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]      # [T, D/2]
        cos, sin = np.cos(ang), np.sin(ang)

        def rope(v):  # v: [heads, T, D]; pair (f, f + D/2)
            a, b = v[..., :D // 2], v[..., D // 2:]
            return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

        mask = np.triu(np.full((T, T), -np.inf), 1)
        for i in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % i
            h = self.rms(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, D).transpose(1, 0, 2)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2)
            q, k = rope(q), rope(k)
            out = np.zeros((H, T, D))
            for hh in range(H):
                kv = hh // (H // KV)
                s = q[hh] @ k[kv].T / np.sqrt(D) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                out[hh] = s @ v[kv]
            x = x + out.transpose(1, 0, 2).reshape(T, H * D) @ W[p + "self_attn.o_proj.weight"].T
            h = self.rms(x, W[p + "post_attention_layernorm.weight"])
            g = h @ W[p + "mlp.gate_proj.weight"].T
            u = h @ W[p + "mlp.up_proj.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * u) @ W[p + "mlp.down_proj.weight"].T
        x = self.rms(x, W["model.norm.weight"])
        head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
        return x @ head.T
