#!/usr/bin/python3
"""Check that models/kvs-tiny/tokenizer.json, encoded by the independent
hf_bpe.py, reproduces SentencePiece ids exactly (and decodes back).

Texts: held-out + calibration text, Debian licence texts (different
distribution), and seeded random Unicode (accents, CJK, emoji, combining marks,
whitespace runs, digits, chat special tokens)."""
import glob
import os
import random
import sys

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, FIXTURES, MODEL_DIR, read  # noqa: E402
from hf_bpe import HFBPE  # noqa: E402


def random_texts(seed=1234, n=400):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "àáâäãåæçèéêëìíîïñòóôöøùúûüýÿßœŒÉÈÀ", "0123456789", "  \t\n",
        "日本語中文字漢字東京大学北京上海你好世界の", "😀😃🎉👍🏽🚀❤️🇫🇷", "\u0301\u0308\u200d",
        "Ωαβγδεζηθλμπσφψω", "Привет мир", ".,;:!?'\"()-—–…«»", "<|im_start|>", "<|im_end|>",
    ]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 30)):
            pool = rng.choice(pools)
            if pool.startswith("<|"):
                parts.append(pool)
            else:
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out


def main():
    sp = spm.SentencePieceProcessor(model_file=os.path.join(DATA, "spm.model"))
    hf = HFBPE(os.path.join(MODEL_DIR, "tokenizer.json"))
    texts = []
    for p in [os.path.join(DATA, "heldout_austen.txt"), os.path.join(DATA, "heldout_kjv.txt"),
              os.path.join(FIXTURES, "calibration_text.txt")]:
        texts += [t for t in read(p).split("\n\n") if t]
    for p in sorted(glob.glob("/usr/share/common-licenses/*"))[:12]:
        if os.path.isfile(p):
            texts += [t for t in read(p).split("\n\n") if t]
    texts += random_texts()
    texts += ["", " ", "  ", "\n", "a", " leading", "trailing ", "x  y   z",
              "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
              "Hello <|im_end|> world", "12345 67890", "é", "😀"]
    n_ok = nbytes = ntok = 0
    bad, dec_bad, rt_bad = [], [], 0
    for t in texts:
        a = sp.encode(t)
        b = hf.encode(t)
        nbytes += len(t.encode())
        ntok += len(a)
        if a == b:
            n_ok += 1
        else:
            bad.append(t)
        # decode check (special tokens kept as text, like sp.decode does)
        if hf.decode(b, skip_special=False) != sp.decode(a):
            dec_bad.append(t)
        if sp.decode(a) != t:
            rt_bad += 1
    print("texts %d, bytes %d, tokens %d, exact id match %d/%d (%.4f%%)"
          % (len(texts), nbytes, ntok, n_ok, len(texts), 100.0 * n_ok / len(texts)))
    print("decode(hf) == decode(spm): %d/%d; spm round trip text==decode(encode): %d/%d"
          % (len(texts) - len(dec_bad), len(texts), len(texts) - rt_bad, len(texts)))
    for t in dec_bad[:3]:
        print("DECODE MISMATCH:", repr(t[:100]), repr(sp.decode(sp.encode(t))[:100]),
              repr(hf.decode(hf.encode(t), skip_special=False)[:100]))
    for t in bad[:5]:
        print("MISMATCH:", repr(t[:200]))
        print("  spm:", sp.encode(t, out_type=str)[:40])
        print("  hf :", [hf.inv[i] for i in hf.encode(t)][:40])
    import json
    from common import WORK, ensure
    ensure(WORK)
    with open(os.path.join(WORK, "tokenizer_verify.json"), "w") as f:
        json.dump({"texts": len(texts), "bytes": nbytes, "tokens": ntok, "id_match": n_ok,
                   "decode_match": len(texts) - len(dec_bad)}, f, indent=2)
    sys.exit(0 if not bad and not dec_bad else 1)


if __name__ == "__main__":
    main()
