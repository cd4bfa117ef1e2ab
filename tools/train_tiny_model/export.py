"""Export a trained model to Hugging Face LlamaForCausalLM files."""
import json
import os

import numpy as np
import torch

import st_io
from model import Config, Llama


def hf_config(c):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": True,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "torch_dtype": "float32",
        "use_cache": True,
        "transformers_version": "4.40.0",
    }


def export_model(model, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(model.c), f, indent=2)
    tensors = {k: v.float().numpy().astype(np.float32) for k, v in model.hf_state_dict().items()}
    st_io.write(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    return sum(v.size for v in tensors.values())


def load_model(model_dir, dtype=torch.float32):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    c = Config.from_dict(cfg)
    m = Llama(c).to(dtype)
    sd, _ = st_io.read(os.path.join(model_dir, "model.safetensors"))
    m.load_hf_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in sd.items()})
    m.eval()
    return m
