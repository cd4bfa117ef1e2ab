#!/usr/bin/python3
"""tools/export_gguf on the bundled model and on small synthetic checkpoints: every tensor and
metadata value read back from the GGUF file, the rotary row order, dtype conversions, the
tokenizer scores' merge order and the errors on unsupported input.

    export_gguf_test.py REPO_ROOT
"""
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../.."))
sys.path.insert(0, os.path.join(ROOT, "tools", "export_gguf"))
import export_gguf as ex  # noqa: E402
import gguf_format as g  # noqa: E402

TINY = os.path.join(ROOT, "models", "kvs-tiny")


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array of matching raw type)."""
    header, blobs, off = {}, [], 0
    for name, (dtype, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def small_checkpoint(out_dir, dtype="F32", **overrides):
    """A 2-layer Llama with hidden 8, 2/1 heads of 4, vocab = kvs-tiny's tokenizer (2048)."""
    rng = np.random.default_rng(7)
    d, inter, v, heads, kv_heads, hd = 8, 12, 2048, 2, 1, 4
    config = {"model_type": "llama", "hidden_size": d, "intermediate_size": inter, "num_hidden_layers": 2,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": v,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 256,
              "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    config.update(overrides)
    shapes = {"model.embed_tokens.weight": [v, d], "model.norm.weight": [d], "lm_head.weight": [v, d]}
    for i in range(2):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d],
                       p + "self_attn.q_proj.weight": [heads * hd, d], p + "self_attn.k_proj.weight": [kv_heads * hd, d],
                       p + "self_attn.v_proj.weight": [kv_heads * hd, d], p + "self_attn.o_proj.weight": [d, heads * hd],
                       p + "mlp.gate_proj.weight": [inter, d], p + "mlp.up_proj.weight": [inter, d],
                       p + "mlp.down_proj.weight": [d, inter]})
    tensors = {}
    for name, shape in shapes.items():
        a = rng.standard_normal(shape).astype(np.float32)
        if dtype == "BF16":
            tensors[name] = ("BF16", (a.view(np.uint32) >> 16).astype(np.uint16))
        elif dtype == "F16":
            tensors[name] = ("F16", a.astype(np.float16))
        else:
            tensors[name] = ("F32", a)
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TINY, f), out_dir)
    return tensors


class ExportGgufTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="export_gguf_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def export(self, model_dir, dtype="auto"):
        out = os.path.join(self.tmp, "out.gguf")
        ex.export(model_dir, out, dtype)
        return g.GgufReader(out)

    def test_bundled_model_round_trips(self):
        r = self.export(TINY)
        cfg = ex.load_json(os.path.join(TINY, "config.json"))
        kv = r.kv
        self.assertEqual(kv["general.architecture"], "llama")
        self.assertEqual(kv["general.file_type"], 0)
        self.assertEqual(kv["llama.embedding_length"], cfg["hidden_size"])
        self.assertEqual(kv["llama.block_count"], cfg["num_hidden_layers"])
        self.assertEqual(kv["llama.attention.head_count_kv"], cfg["num_key_value_heads"])
        self.assertEqual(kv["llama.rope.dimension_count"], cfg["head_dim"])
        self.assertAlmostEqual(kv["llama.attention.layer_norm_rms_epsilon"], cfg["rms_norm_eps"])
        # Tied embeddings: no output.weight, llama.cpp reuses token_embd.
        self.assertNotIn("output.weight", r.tensors)
        self.assertEqual(len(r.tensors), 2 + 9 * cfg["num_hidden_layers"])
        st = ex.read_safetensors(TINY)
        np.testing.assert_array_equal(r.tensors["token_embd.weight"], st["model.embed_tokens.weight"][1])
        np.testing.assert_array_equal(r.tensors["blk.3.ffn_down.weight"], st["model.layers.3.mlp.down_proj.weight"][1])
        # Tokenizer: every id, special tokens typed, bytes typed, scores follow the merge order.
        tok = ex.load_json(os.path.join(TINY, "tokenizer.json"))
        tokens = kv["tokenizer.ggml.tokens"]
        self.assertEqual(len(tokens), cfg["vocab_size"])
        for text, i in tok["model"]["vocab"].items():
            self.assertEqual(tokens[i], text)
        types = kv["tokenizer.ggml.token_type"]
        self.assertEqual(types[1], ex.TOK_CONTROL)          # <s>
        self.assertEqual(types[tokens.index("<0x41>")], ex.TOK_BYTE)
        scores = kv["tokenizer.ggml.scores"]
        merged = ["".join(m.split(" ")) if isinstance(m, str) else "".join(m) for m in tok["model"]["merges"][:50]]
        first = {}
        for rank, t in enumerate(merged):
            first.setdefault(t, rank)
        ordered = sorted(first, key=first.get)
        for a, b in zip(ordered, ordered[1:]):
            self.assertGreater(scores[tokens.index(a)], scores[tokens.index(b)], (a, b))
        self.assertEqual(kv["tokenizer.ggml.bos_token_id"], 1)
        self.assertEqual(kv["tokenizer.ggml.eos_token_id"], 2)
        self.assertTrue(kv["tokenizer.ggml.add_bos_token"])

    def test_rotary_rows_interleave_per_head(self):
        src = small_checkpoint(os.path.join(self.tmp, "m"))
        r = self.export(os.path.join(self.tmp, "m"))
        self.assertEqual(r.kv["llama.rope.freq_base"], 500000.0)
        q = src["model.layers.1.self_attn.q_proj.weight"][1]   # 2 heads x 4 rows
        k = src["model.layers.1.self_attn.k_proj.weight"][1]   # 1 head x 4 rows
        # Row h*4 + 2*i + j of the GGUF tensor is row h*4 + j*2 + i of HF's.
        for h, w, name in ((2, q, "blk.1.attn_q.weight"), (1, k, "blk.1.attn_k.weight")):
            got = r.tensors[name]
            for head in range(h):
                for i in range(2):
                    for j in range(2):
                        np.testing.assert_array_equal(got[head * 4 + 2 * i + j], w[head * 4 + j * 2 + i])
        np.testing.assert_array_equal(r.tensors["blk.1.attn_v.weight"], src["model.layers.1.self_attn.v_proj.weight"][1])
        np.testing.assert_array_equal(r.tensors["output.weight"], src["lm_head.weight"][1])

    def test_dtypes(self):
        src = small_checkpoint(os.path.join(self.tmp, "m"))
        up = src["model.layers.0.mlp.up_proj.weight"][1]
        r = self.export(os.path.join(self.tmp, "m"), "f16")
        self.assertEqual(r.types["blk.0.ffn_up.weight"], g.GGML_F16)
        self.assertEqual(r.types["blk.0.attn_norm.weight"], g.GGML_F32)   # norms stay f32
        np.testing.assert_array_equal(r.tensors["blk.0.ffn_up.weight"], up.astype(np.float16))
        r = self.export(os.path.join(self.tmp, "m"), "bf16")
        self.assertEqual(r.kv["general.file_type"], 32)
        got = (r.tensors["blk.0.ffn_up.weight"].astype(np.uint32) << 16).view(np.float32)
        # Round to nearest: within half a bf16 ulp (2^-8 relative).
        np.testing.assert_array_less(np.abs(got - up), np.abs(up) * 2.0 ** -8 + 1e-30)
        # A bf16 checkpoint exported with auto keeps its bits.
        src = small_checkpoint(os.path.join(self.tmp, "b"), "BF16")
        r = self.export(os.path.join(self.tmp, "b"))
        self.assertEqual(r.types["blk.0.ffn_up.weight"], g.GGML_BF16)
        np.testing.assert_array_equal(r.tensors["blk.0.ffn_up.weight"], src["model.layers.0.mlp.up_proj.weight"][1])

    def test_errors_name_the_problem(self):
        d = os.path.join(self.tmp, "m")
        small_checkpoint(d, rope_scaling={"rope_type": "llama3", "factor": 8.0})
        with self.assertRaisesRegex(ex.ExportError, "rope_scaling"):
            self.export(d)
        small_checkpoint(d, model_type="mistral")
        with self.assertRaisesRegex(ex.ExportError, "model_type 'mistral'"):
            self.export(d)
        small_checkpoint(d, hidden_size=16)
        with self.assertRaisesRegex(ex.ExportError, r"model.embed_tokens.weight: shape \[2048, 8\]"):
            self.export(d)
        small_checkpoint(d)
        os.remove(os.path.join(d, "tokenizer.json"))
        with self.assertRaisesRegex(ex.ExportError, "no tokenizer.json"):
            self.export(d)

    def test_reader_refuses_other_files(self):
        p = os.path.join(self.tmp, "x.gguf")
        with open(p, "wb") as f:
            f.write(b"GGML" + b"\0" * 28)
        with self.assertRaisesRegex(ValueError, "not a GGUF file"):
            g.GgufReader(p)


if __name__ == "__main__":
    unittest.main()
