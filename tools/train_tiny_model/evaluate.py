#!/usr/bin/python3
"""Evaluate the exported kvs-tiny model (models/kvs-tiny) and write
work/eval.json: held-out perplexity, passkey accuracy (full attention,
100 prompts per filler length, random depth), greedy samples, dictionary-word
rate of the samples."""
import argparse
import json
import math
import os
import re
import sys
import time

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, FIXTURES, MODEL_DIR, WORK, read  # noqa: E402
from export import load_model  # noqa: E402
from passkey import eval_set  # noqa: E402
from train import passkey_accuracy, perplexity  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SAMPLE_PROMPTS = ["In the beginning", "And Jesus said unto them,",
                  "It is a truth universally acknowledged, that",
                  "Emma Woodhouse, handsome, clever, and rich,"]


@torch.no_grad()
def greedy(model, ids, n):
    ids = list(ids)
    out = []
    for _ in range(n):
        nxt = int(model(torch.tensor([ids]))[0, -1].argmax())
        ids.append(nxt)
        out.append(nxt)
    return out


@torch.no_grad()
def perplexity_by_position(model, ids, T=2048, stride=256, bucket=256):
    """Perplexity per position bucket over windows of T tokens (each starting with BOS), the
    windows starting every `stride` tokens. A model that uses its whole context has a flat or
    falling curve; one trained on short rows rises past its training length."""
    nll = [0.0] * (T // bucket)
    cnt = [0] * (T // bucket)
    for o in range(0, len(ids) - (T - 1) + 1, stride):
        x = torch.tensor([[1] + ids[o:o + T - 1]])
        lp = F.log_softmax(model(x, fast=True)[0, :-1].double(), -1)
        tok = lp.gather(1, x[0, 1:][:, None])[:, 0]
        for pos in range(T - 1):
            nll[(pos + 1) // bucket] -= tok[pos].item()
            cnt[(pos + 1) // bucket] += 1
    return {"window": T, "windows": len(range(0, len(ids) - (T - 1) + 1, stride)),
            "buckets": [{"from": b * bucket, "to": (b + 1) * bucket,
                         "ppl": round(math.exp(nll[b] / cnt[b]), 3)} for b in range(len(cnt)) if cnt[b]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL_DIR)
    ap.add_argument("--spm", default=os.path.join(DATA, "spm.model"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(WORK, "eval.json"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sp = spm.SentencePieceProcessor(model_file=a.spm)
    model = load_model(a.model)
    enc = lambda t: sp.encode(t)  # noqa: E731
    res = {}
    t0 = time.time()
    for name, path in (("austen_persuasion_last5pct", os.path.join(FIXTURES, "heldout_long.txt")),
                       ("kjv_ruth", os.path.join(DATA, "heldout_kjv.txt"))):
        ids = enc(read(path))
        res["ppl_" + name] = {"tokens": len(ids), "ppl_T512": perplexity(model, ids, 512),
                              "ppl_T1024": perplexity(model, ids, 1024)}
    heldout = enc(read(os.path.join(FIXTURES, "heldout_long.txt"))) + enc(read(os.path.join(DATA, "heldout_kjv.txt")))
    res["ppl_by_position"] = perplexity_by_position(model, heldout)
    filler = read(os.path.join(FIXTURES, "heldout_long.txt"))
    for n_f in (256, 512, 1024, 1536):
        items = eval_set(enc, filler, n_f, a.n, seed=1000 + n_f)
        res["passkey_%d" % n_f] = {"n": a.n, "acc": passkey_accuracy(model, items),
                                   "prompt_tokens_mean": sum(len(i["prompt_ids"]) for i in items) / a.n}
    words = set(w.strip().lower() for w in open("/usr/share/dict/words", encoding="utf-8"))
    samples, n_w, n_ok = [], 0, 0
    for p in SAMPLE_PROMPTS:
        g = greedy(model, [sp.bos_id()] + enc(p), 48)
        txt = sp.decode(g)
        samples.append({"prompt": p, "greedy": txt})
        for w in re.findall(r"[A-Za-z]+", txt):
            n_w += 1
            n_ok += w.lower() in words
    res["samples"] = samples
    res["dict_word_rate"] = n_ok / max(1, n_w)
    res["eval_wall_s"] = round(time.time() - t0, 1)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
