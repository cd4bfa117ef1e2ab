#!/usr/bin/env python3
"""Writes a random-weight Llama checkpoint (config.json + model.safetensors, fp32) for speed
benchmarks on a model bigger than the bundled kvs-tiny. Never commit its output.

Default shape: ~134 M parameters (hidden 768, 12 layers, 12/4 heads of 64, intermediate
2048, vocab 32000, untied lm_head). Standard library only (CI has no numpy): the weights are
one block of Gaussian values (std 0.02) tiled with a different offset per tensor, which is
all a speed benchmark needs (the outputs are meaningless).

    bench/make_random_llama.py OUT_DIR [--hidden 768] [--layers 12] [--heads 12] [--kv-heads 4]
                               [--intermediate 2048] [--vocab 32000] [--dtype F32|BF16]
                               [--tokenizer-from models/kvs-tiny] [--preset llama-3.1-8b]

The tokenizer (so the directory can be served over HTTP and exported to GGUF) is the given
model's tokenizer.json and tokenizer_config.json, its vocabulary padded to --vocab with
`<extra_N>` entries that no merge produces.
"""
import argparse
import array
import json
import os
import random
import struct
import sys


def write_tokenizer(src_dir: str, out_dir: str, vocab_size: int) -> None:
    with open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in tok.get("added_tokens", [])}
    if max(used) >= vocab_size:
        raise SystemExit(f"{src_dir}: tokenizer has ids up to {max(used)}, more than --vocab {vocab_size}")
    for i in range(vocab_size):
        if i not in used:
            vocab[f"<extra_{i}>"] = i
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = os.path.join(src_dir, "tokenizer_config.json")
    if os.path.exists(cfg):
        with open(cfg, encoding="utf-8") as f, open(os.path.join(out_dir, "tokenizer_config.json"), "w") as g:
            g.write(f.read())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["F32", "BF16"], default="F32")
    ap.add_argument("--preset", choices=["llama-3.1-8b"],
                    help="the exact shape and config.json fields of a published model (overrides the sizes)")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--tokenizer-from", default=os.path.join(here, "..", "models", "kvs-tiny"))
    a = ap.parse_args()
    if a.preset == "llama-3.1-8b":  # meta-llama/Llama-3.1-8B's config.json
        a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate, a.vocab = 4096, 32, 32, 8, 14336, 128256
    if a.hidden % a.heads or a.heads % a.kv_heads:
        print("hidden must be a multiple of heads, heads of kv-heads", file=sys.stderr)
        return 2
    hd = a.hidden // a.heads
    d, inter, v = a.hidden, a.intermediate, a.vocab
    tensors = [("model.embed_tokens.weight", [v, d]), ("model.norm.weight", [d]), ("lm_head.weight", [v, d])]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", [d]),
            (p + "self_attn.q_proj.weight", [a.heads * hd, d]),
            (p + "self_attn.k_proj.weight", [a.kv_heads * hd, d]),
            (p + "self_attn.v_proj.weight", [a.kv_heads * hd, d]),
            (p + "self_attn.o_proj.weight", [d, a.heads * hd]),
            (p + "post_attention_layernorm.weight", [d]),
            (p + "mlp.gate_proj.weight", [inter, d]),
            (p + "mlp.up_proj.weight", [inter, d]),
            (p + "mlp.down_proj.weight", [d, inter]),
        ]
    rng = random.Random(a.seed)
    # Coprime with every row length used here, so no two rows of a matrix are equal (equal
    # lm_head rows would make exact logit ties, and greedy tokens would depend on tie-breaking).
    block_len = (1 << 20) + 7
    values = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(block_len)))
    esize = 4 if a.dtype == "F32" else 2
    if esize == 2:  # bf16: the top 16 bits of each fp32 value (truncation is fine here)
        bits = array.array("I", values.tobytes())
        block = array.array("H", (b >> 16 for b in bits)).tobytes() * 2
        ones = array.array("H", [0x3F80]) * a.hidden
    else:
        block = values.tobytes() * 2
        ones = array.array("f", [1.0]) * a.hidden
    header, offset = {}, 0
    for name, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        header[name] = {"dtype": a.dtype, "shape": shape, "data_offsets": [offset, offset + esize * n]}
        offset += esize * n
    header["__metadata__"] = {"format": "pt"}
    hjson = json.dumps(header).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for idx, (name, shape) in enumerate(tensors):
            n = 1
            for s in shape:
                n *= s
            if len(shape) == 1:  # norms: ones, as at initialisation
                f.write(ones.tobytes())
                continue
            start = (idx * 7919) % block_len
            left = esize * n
            while left > 0:
                chunk = min(left, esize * block_len)
                f.write(block[esize * start : esize * start + chunk])
                left -= chunk
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": v, "hidden_size": d,
        "intermediate_size": inter, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "head_dim": hd, "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "bos_token_id": 1,
        "eos_token_id": 2, "torch_dtype": "float32" if a.dtype == "F32" else "bfloat16",
    }
    if a.preset == "llama-3.1-8b":
        config.update({
            "max_position_embeddings": 131072, "rope_theta": 500000.0, "bos_token_id": 128000,
            "eos_token_id": [128001, 128008, 128009],
            "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        })
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if a.tokenizer_from:
        write_tokenizer(a.tokenizer_from, a.out_dir, v)
    params = sum(eval("*".join(map(str, s))) for _, s in tensors)
    print(f"wrote {a.out_dir}: {params / 1e6:.1f} M parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
