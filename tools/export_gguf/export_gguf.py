#!/usr/bin/python3
"""Converts a Hugging Face Llama checkpoint directory (config.json, *.safetensors, tokenizer.json)
to a GGUF file that llama.cpp loads (architecture `llama`), with f32, f16 or bf16 weights.
kvserve's own exporter (issue 14): bench/peer_llamacpp.sh uses it to give llama.cpp the same
weights kvserve serves. Debian's python3 + numpy only.

    tools/export_gguf/export_gguf.py MODEL_DIR OUT.gguf [--dtype auto|f32|f16|bf16]

`auto` keeps the checkpoint's dtype. Norm weights are always written f32 (llama.cpp requires it).

What the conversion must get right (each is a property of the two formats, stated here
because a mistake only shows up as different tokens):
- q_proj/k_proj: HF stores each head's rows as [first halves of the rotary pairs | second
  halves] (rotate_half), llama.cpp's `llama` RoPE rotates adjacent pairs; rows are interleaved
  per head (row h*D + 2*i + j <- row h*D + j*D/2 + i), with the KV head count for k_proj.
- tokenizer: a Llama-style BPE with byte fallback and a "▁" normalizer is written as llama.cpp's
  `llama` (SentencePiece-style) vocabulary. That tokenizer merges the adjacent pair whose
  merged token has the highest score, so each token's score is minus the rank of the first
  BPE merge that produces it: the same merge order as the BPE. Byte-level (GPT-2-style)
  tokenizers are refused with an error rather than written approximately.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_format as g  # noqa: E402

# llama.cpp token types.
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_BYTE = 1, 2, 3, 4, 6
# llama.cpp general.file_type values.
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32}
GGML = {"f32": g.GGML_F32, "f16": g.GGML_F16, "bf16": g.GGML_BF16}


class ExportError(Exception):
    pass


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------- safetensors

def read_safetensors(model_dir):
    """name -> (dtype string, numpy array of the raw values: float32, float16 or uint16 bf16 bits)."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(load_json(index)["weight_map"].values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        raise ExportError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")
    out = {}
    for name in files:
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
        for tname, info in header.items():
            if tname == "__metadata__":
                continue
            dtype = info["dtype"]
            np_dtype = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}.get(dtype)
            if np_dtype is None:
                raise ExportError(f"{path}: tensor {tname} has dtype {dtype}; only F32, F16, BF16 are supported")
            start, end = info["data_offsets"]
            out[tname] = (dtype, data[start:end].view(np_dtype).reshape(info["shape"]))
    return out


def to_f32(dtype, a):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def convert(dtype, a, target):
    """Source values -> the target type's numpy representation. bf16 from f32 rounds to nearest
    even (NaN is not expected in weights); bf16 -> bf16 and f16 -> f16 copy the bits."""
    if target == "bf16":
        if dtype == "BF16":
            return np.array(a, dtype=np.uint16)
        u = to_f32(dtype, a).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    if target == "f16":
        if dtype == "F16":
            return np.array(a, dtype=np.float16)
        return to_f32(dtype, a).astype(np.float16)
    return to_f32(dtype, a)


def permute_rotary(w, n_heads):
    """HF rotate_half row order -> llama.cpp adjacent-pair order, per head (see module doc)."""
    rows = w.shape[0]
    if rows % n_heads or (rows // n_heads) % 2:
        raise ExportError(f"cannot split {rows} rows into {n_heads} heads of an even size")
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------- tokenizer

def tokenizer_metadata(model_dir, config, vocab_size):
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.exists(path):
        raise ExportError(f"{model_dir}: no tokenizer.json (llama.cpp needs the vocabulary in the GGUF)")
    tok = load_json(path)
    model = tok.get("model", {})
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        raise ExportError(f"{path}: model type {model.get('type')} (byte_fallback={model.get('byte_fallback')}); "
                          "only Llama-style BPE with byte fallback is supported")
    norm = json.dumps(tok.get("normalizer"))
    if "\u2581" not in norm and "\\u2581" not in norm:
        raise ExportError(f"{path}: normalizer does not map spaces to U+2581; not a Llama-style tokenizer")
    vocab = dict(model["vocab"])
    for a in tok.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
    n = max(vocab.values()) + 1
    if n > vocab_size:
        raise ExportError(f"{path}: token id {n - 1} is outside the model's vocab_size {vocab_size}")
    tokens = [f"<unused_{i}>" for i in range(vocab_size)]
    for text, i in vocab.items():
        tokens[i] = text
    rank = {}
    for r, m in enumerate(model.get("merges", [])):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        rank.setdefault(a + b, r)
    n_merges = len(rank)
    special = {a["id"]: a for a in tok.get("added_tokens", [])}
    scores, types = [], []
    for i, text in enumerate(tokens):
        if i in special:
            types.append(TOK_CONTROL if special[i].get("special") else TOK_USER_DEFINED)
            scores.append(0.0)
        elif text == model.get("unk_token"):
            types.append(TOK_UNKNOWN)
            scores.append(0.0)
        elif len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            types.append(TOK_BYTE)
            scores.append(0.0)
        elif text in rank:
            types.append(TOK_NORMAL)
            scores.append(-float(rank[text]))
        else:  # a base symbol (never the result of a merge) or padding: lowest priority
            types.append(TOK_NORMAL if i < n else TOK_USER_DEFINED)
            scores.append(-float(n_merges + i))

    tc_path = os.path.join(model_dir, "tokenizer_config.json")
    tc = load_json(tc_path) if os.path.exists(tc_path) else {}

    def token_id(name, fallback):
        t = tc.get(name)
        if isinstance(t, dict):
            t = t.get("content")
        return vocab.get(t, fallback) if t is not None else fallback

    kv = [("tokenizer.ggml.model", g.T_STRING, "llama")]
    arrays = [("tokenizer.ggml.tokens", g.T_STRING, tokens), ("tokenizer.ggml.scores", g.T_FLOAT32, scores),
              ("tokenizer.ggml.token_type", g.T_INT32, types)]
    bos = token_id("bos_token", config.get("bos_token_id"))
    eos = token_id("eos_token", config.get("eos_token_id"))
    unk = vocab.get(model.get("unk_token")) if model.get("unk_token") else None
    for key, value in (("bos", bos), ("eos", eos), ("unknown", unk)):
        if isinstance(value, int):
            kv.append((f"tokenizer.ggml.{key}_token_id", g.T_UINT32, value))
    kv.append(("tokenizer.ggml.add_bos_token", g.T_BOOL, bool(tc.get("add_bos_token", True))))
    kv.append(("tokenizer.ggml.add_eos_token", g.T_BOOL, bool(tc.get("add_eos_token", False))))
    kv.append(("tokenizer.ggml.add_space_prefix", g.T_BOOL, "Prepend" in norm))
    if isinstance(tc.get("chat_template"), str):
        kv.append(("tokenizer.chat_template", g.T_STRING, tc["chat_template"]))
    return kv, arrays


# ---------------------------------------------------------------- model

def export(model_dir, out_path, dtype="auto"):
    config = load_json(os.path.join(model_dir, "config.json"))
    if config.get("model_type") != "llama":
        raise ExportError(f"config.json: model_type {config.get('model_type')!r}; only 'llama' is supported")
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key):
            raise ExportError(f"config.json: {key}=true is not supported")
    if config.get("rope_scaling"):
        raise ExportError("config.json: rope_scaling is not supported by this exporter")
    if config.get("hidden_act", "silu") != "silu":
        raise ExportError(f"config.json: hidden_act {config.get('hidden_act')!r}; only silu is supported")
    d = config["hidden_size"]
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_heads)
    head_dim = config.get("head_dim") or d // n_heads
    n_layers = config["num_hidden_layers"]
    vocab = config["vocab_size"]
    tied = bool(config.get("tie_word_embeddings", False))

    st = read_safetensors(model_dir)
    if dtype == "auto":
        src = st["model.embed_tokens.weight"][0] if "model.embed_tokens.weight" in st else "F32"
        dtype = {"F32": "f32", "F16": "f16", "BF16": "bf16"}[src]
    if dtype not in GGML:
        raise ExportError(f"--dtype {dtype}: expected auto, f32, f16 or bf16")

    w = g.GgufWriter()
    w.add("general.architecture", g.T_STRING, "llama")
    w.add("general.name", g.T_STRING, os.path.basename(os.path.normpath(model_dir)))
    w.add("general.file_type", g.T_UINT32, FILE_TYPE[dtype])
    w.add("llama.context_length", g.T_UINT32, int(config.get("max_position_embeddings", 2048)))
    w.add("llama.embedding_length", g.T_UINT32, d)
    w.add("llama.block_count", g.T_UINT32, n_layers)
    w.add("llama.feed_forward_length", g.T_UINT32, config["intermediate_size"])
    w.add("llama.attention.head_count", g.T_UINT32, n_heads)
    w.add("llama.attention.head_count_kv", g.T_UINT32, n_kv)
    w.add("llama.rope.dimension_count", g.T_UINT32, head_dim)
    if head_dim * n_heads != d:
        w.add("llama.attention.key_length", g.T_UINT32, head_dim)
        w.add("llama.attention.value_length", g.T_UINT32, head_dim)
    w.add("llama.attention.layer_norm_rms_epsilon", g.T_FLOAT32, float(config.get("rms_norm_eps", 1e-6)))
    w.add("llama.rope.freq_base", g.T_FLOAT32, float(config.get("rope_theta", 10000.0)))
    w.add("llama.vocab_size", g.T_UINT32, vocab)
    kv, arrays = tokenizer_metadata(model_dir, config, vocab)
    for key, t, v in kv:
        w.add(key, t, v)
    for key, t, items in arrays:
        w.add_array(key, t, items)

    used = set()

    def take(name, shape):
        if name not in st:
            raise ExportError(f"checkpoint has no tensor {name}")
        src_dtype, a = st[name]
        if list(a.shape) != list(shape):
            raise ExportError(f"tensor {name}: shape {list(a.shape)}, config.json implies {list(shape)}")
        used.add(name)
        return src_dtype, a

    def matrix(gguf_name, hf_name, shape, rotary_heads=0):
        src_dtype, a = take(hf_name, shape)
        if rotary_heads:
            a = permute_rotary(a, rotary_heads)
        w.add_tensor(gguf_name, GGML[dtype], convert(src_dtype, a, dtype))

    def norm(gguf_name, hf_name):
        src_dtype, a = take(hf_name, [d])
        w.add_tensor(gguf_name, g.GGML_F32, to_f32(src_dtype, a))

    matrix("token_embd.weight", "model.embed_tokens.weight", [vocab, d])
    norm("output_norm.weight", "model.norm.weight")
    if not tied:
        matrix("output.weight", "lm_head.weight", [vocab, d])
    elif "lm_head.weight" in st:
        used.add("lm_head.weight")  # a tied copy: llama.cpp reuses token_embd
    for i in range(n_layers):
        p, q = f"model.layers.{i}.", f"blk.{i}."
        norm(q + "attn_norm.weight", p + "input_layernorm.weight")
        matrix(q + "attn_q.weight", p + "self_attn.q_proj.weight", [n_heads * head_dim, d], n_heads)
        matrix(q + "attn_k.weight", p + "self_attn.k_proj.weight", [n_kv * head_dim, d], n_kv)
        matrix(q + "attn_v.weight", p + "self_attn.v_proj.weight", [n_kv * head_dim, d])
        matrix(q + "attn_output.weight", p + "self_attn.o_proj.weight", [d, n_heads * head_dim])
        norm(q + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        matrix(q + "ffn_gate.weight", p + "mlp.gate_proj.weight", [config["intermediate_size"], d])
        matrix(q + "ffn_up.weight", p + "mlp.up_proj.weight", [config["intermediate_size"], d])
        matrix(q + "ffn_down.weight", p + "mlp.down_proj.weight", [d, config["intermediate_size"]])
    left = sorted(n for n in st if n not in used and not n.endswith("rotary_emb.inv_freq"))
    if left:
        raise ExportError(f"checkpoint tensors not used by a Llama model: {', '.join(left[:5])}")
    w.write(out_path)
    return len(w.tensors), dtype


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="auto", choices=["auto", "f32", "f16", "bf16"])
    a = ap.parse_args()
    try:
        n, dtype = export(a.model_dir, a.out, a.dtype)
    except (ExportError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"export_gguf: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: {n} tensors, {dtype}, {os.path.getsize(a.out) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
