#!/usr/bin/python3
"""Write the golden test fixtures for the C++ side:

  tests/fixtures/kvs_tiny_golden.json   prompts, ids (BOS + spm ids), top-20
                                        logits per position, 64-token greedy
  tests/fixtures/tokenizer_kvs_tiny.json  text snippets -> spm ids (no BOS)
  tests/fixtures/passkey_kvs_tiny.json  example passkey prompts (ids) per spec

Golden logits/greedy are computed with the PyTorch model in float64 (weights
are the exported fp32 values, upcast).  They are cross-checked against the
independent NumPy float64 reference (ref_numpy.py, reads only config.json +
model.safetensors) and against the PyTorch float32 forward."""
import json
import os
import sys

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, FIXTURES, MODEL_DIR, read  # noqa: E402
from export import load_model  # noqa: E402
from passkey import eval_set  # noqa: E402
from ref_numpy import RefModel  # noqa: E402
from train import passkey_accuracy  # noqa: E402

N_NEW = 64
TOPK = 20


def golden_prompts(sp):
    held = read(os.path.join(FIXTURES, "heldout_long.txt"))
    held_ids = sp.encode(held)
    p = [
        ("kjv", "In the beginning God created the heaven and the earth. And the earth was"),
        ("kjv2", "And Jesus answered and said unto them,"),
        ("austen", "It is a truth universally acknowledged, that a single man in possession of a good fortune"),
        ("austen2", "Elizabeth was"),
        ("byte_fallback", "Café crème, naïve façade — 日本語 😀👍 Ünïcödé!"),
        ("chatml", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                   "<|im_start|>user\nWho was Joseph?<|im_end|>\n<|im_start|>assistant\n"),
        ("digits_ws", "In the year 1811, on the 23rd day,  there were   3 ships\nand 40 men."),
        ("long_300", sp.decode(held_ids[1000:1300])),
        ("single_token", "The"),
    ]
    out = [{"name": n, "prompt": t, "ids": [sp.bos_id()] + sp.encode(t)} for n, t in p]
    pk = eval_set(lambda t: sp.encode(t), held, 560, 1, seed=7)[0]
    out.append({"name": "passkey_600", "prompt": sp.decode(pk["prompt_ids"][1:]),
                "ids": pk["prompt_ids"], "passkey": {k: pk[k] for k in
                                                     ("key", "depth", "offset", "n_filler", "answer_ids")}})
    return out


@torch.no_grad()
def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL_DIR)
    ap.add_argument("--out", default=FIXTURES)
    ap.add_argument("--skip-golden", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    out_dir = a.out
    os.makedirs(out_dir, exist_ok=True)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(DATA, "spm.model"))
    m64 = load_model(a.model, torch.float64)
    m32 = load_model(a.model, torch.float32)
    ref = RefModel(a.model)
    prompts = golden_prompts(sp) if not a.skip_golden else []
    worst_ref = worst_32 = 0.0
    for g in prompts:
        ids = list(g["ids"])
        # the passkey prompt ids are built in token space; all others must
        # equal BOS + encode(prompt)
        if "passkey" not in g:
            assert ids == [1] + sp.encode(g["prompt"])
        # greedy: propose with the fast fp32 model, then confirm with float64
        # (teacher forced); redo from the first disagreement in float64.
        seq = list(ids)
        for i in range(N_NEW):
            seq.append(int(m32(torch.tensor([seq]))[0, -1].argmax()))
        while True:
            am = m64(torch.tensor([seq[:-1]]))[0, len(ids) - 1:].argmax(-1).tolist()
            bad = [i for i in range(N_NEW) if am[i] != seq[len(ids) + i]]
            if not bad:
                break
            j = len(ids) + bad[0]
            seq = seq[:j] + [am[bad[0]]]
            while len(seq) < len(ids) + N_NEW:
                seq.append(int(m64(torch.tensor([seq]))[0, -1].argmax()))
        new = seq[len(ids):]
        eos_hit = new.index(sp.eos_id()) if sp.eos_id() in new else None
        full = torch.tensor([ids + new])
        l64 = m64(full)[0].numpy()
        l32 = m32(full)[0].double().numpy()
        lref = ref.logits(ids + new)
        worst_ref = max(worst_ref, float(np.abs(lref - l64).max()))
        worst_32 = max(worst_32, float(np.abs(l32 - l64).max()))
        # greedy must be reproduced by the reference (teacher forced argmax)
        assert (lref[len(ids) - 1:-1].argmax(-1) == np.array(new)).all(), g["name"]
        lp = l64[:len(ids)]
        top = []
        for row in lp:
            o = np.argsort(-row, kind="stable")[:TOPK]
            top.append({"ids": [int(i) for i in o], "logits": [round(float(row[i]), 6) for i in o]})
        g["top20"] = top
        g["greedy"] = new
        g["greedy_text"] = sp.decode(new)
        g["eos_hit_at"] = eos_hit
        # margin between best and second best logit along the greedy path
        srt = np.sort(l64[len(ids) - 1:-1], axis=-1)
        g["greedy_min_top2_margin"] = round(float((srt[:, -1] - srt[:, -2]).min()), 6)
        print("%-14s %4d tok  greedy: %r" % (g["name"], len(ids), g["greedy_text"][:70]))
    meta = {
        "model": "models/kvs-tiny",
        "computed_with": "PyTorch float64 forward over the exported fp32 weights "
                         "(full causal attention, no KV cache); prompt logits are rounded to 6 decimals",
        "ids": "BOS (1) + SentencePiece ids of prompt (== HF tokenizer.json encoding); exception: "
               "passkey_600 is built in token space (see passkey spec), use its ids as given",
        "top20": "per prompt position p: top-20 next-token ids and logits at p (sorted, desc)",
        "greedy": "argmax continuation of %d new tokens, no EOS stopping; eos_hit_at = index of "
                  "first EOS in greedy or null" % N_NEW,
        "check_numpy_ref_f64_max_abs_diff": worst_ref,
        "check_torch_f32_vs_f64_max_abs_diff": worst_32,
    }
    assert worst_ref < 1e-8 and worst_32 < 1e-4, (worst_ref, worst_32)
    if prompts:
        with open(os.path.join(out_dir, "kvs_tiny_golden.json"), "w") as f:
            json.dump({"meta": meta, "prompts": prompts}, f, ensure_ascii=False, separators=(",", ":"))
    print("numpy-ref vs torch-f64 max|d| = %.3g; torch-f32 vs f64 max|d| = %.3g" % (worst_ref, worst_32))

    # tokenizer fixture
    held = read(os.path.join(FIXTURES, "heldout_long.txt"))
    kjv = read(os.path.join(DATA, "heldout_kjv.txt"))
    snippets = [
        "", " ", "a", "Hello world", "  leading spaces", "trailing spaces   ",
        "multiple   spaces\tand\ttabs", "line one\nline two\n\nline four", "\n",
        held[:200], held[5000:5600], kjv[:300], kjv[2000:2150],
        "Digits: 0123456789 and 3.14159, 2024-01-01, 1,000,000",
        "Café naïve façade résumé Ünïcödé", "ﬁ ligature and ｆｕｌｌｗｉｄｔｈ",
        "日本語のテキスト", "中文：你好，世界！", "Emoji: 😀👍🏽🚀 ❤️ 🇫🇷",
        "Привет, мир", "Ωμέγα αβγ",
        "<|im_start|>user\nHi<|im_end|>\n",
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWho was Joseph?<|im_end|>\n<|im_start|>assistant\n",
        "text before <|im_end|> text after",
        "<|im_start|><|im_end|>",
        "The pass key is 48213. Remember it. 48213 is the pass key.",
        "What is the pass key? The pass key is",
        "_italic_ -- dashes -- \"quotes\" 'single' (parens) [brackets]",
        "zero\u200bwidth and combining e\u0301",
        "ALL CAPS SHOUTING AND lowercase",
        "\u2581 literal metaspace char",
    ]
    toks = [{"text": s, "ids": sp.encode(s), "pieces": sp.encode(s, out_type=str),
             "decode_roundtrip": sp.decode(sp.encode(s)) == s} for s in snippets]
    with open(os.path.join(out_dir, "tokenizer_kvs_tiny.json"), "w") as f:
        json.dump({"meta": {"tokenizer": "models/kvs-tiny/tokenizer.json",
                            "ids": "SentencePiece ids WITHOUT BOS; equal to HF tokenizer.json encoding "
                                   "(add_special_tokens=False)",
                            "decode": "sp.decode(ids) == text where decode_roundtrip is true (a literal "
                                      "U+2581 in the input decodes to a space)"},
                   "cases": toks}, f, ensure_ascii=False, indent=1)
    for s in snippets:
        assert sp.decode(sp.encode(s)) == s or "\u2581" in s, repr(s)

    # passkey examples (for checking a C++ prompt generator / eval)
    items = []
    for n_f, seed in ((512, 11), (1024, 12)):
        its = eval_set(lambda t: sp.encode(t), held, n_f, 10, seed=seed)
        for it in its:
            it["model_correct"] = bool(passkey_accuracy(m32, [it]) == 1.0)
        items += its
    with open(os.path.join(out_dir, "passkey_kvs_tiny.json"), "w") as f:
        json.dump({"meta": {"spec": "see models/kvs-tiny/README.md (passkey section) and "
                                    "tools/train_tiny_model/passkey.py",
                            "filler_source": "tests/fixtures/heldout_long.txt"},
                   "items": items}, f, separators=(",", ":"))
    print("fixtures written")


if __name__ == "__main__":
    main()
