#!/usr/bin/python3
"""Graded passkey metrics (adds to work/eval.json): teacher-forced per-digit
accuracy and mean NLL of the 5 answer digits, with the key present vs. with
the key sentence replaced by the same number of filler tokens (no key)."""
import json
import math
import os
import random
import sys

import sentencepiece as spm
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, FIXTURES, MODEL_DIR, WORK, read  # noqa: E402
from export import load_model  # noqa: E402
from passkey import eval_set  # noqa: E402


@torch.no_grad()
def main(n=30):
    torch.set_num_threads(2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(DATA, "spm.model"))
    m = load_model(MODEL_DIR)
    held = read(os.path.join(FIXTURES, "heldout_long.txt"))
    f_all = sp.encode(held)
    res = {}
    for n_f in (512, 1024):
        items = eval_set(lambda t: sp.encode(t), held, n_f, n, seed=1000 + n_f)
        rng = random.Random(5)
        acc = {"key": [0, 0.0], "nokey": [0, 0.0]}
        for it in items:
            p, a = it["prompt_ids"], it["answer_ids"]
            d = int(it["depth"] * n_f)
            klen = len(p) - n_f - 1 - 12
            o = rng.randint(0, len(f_all) - klen)
            p_nokey = p[:1 + d] + f_all[o:o + klen] + p[1 + d + klen:]
            for name, pr in (("key", p), ("nokey", p_nokey)):
                x = torch.tensor([pr + a])
                lp = F.log_softmax(m(x, fast=len(pr) >= 1024)[0].double(), -1)
                for j in range(1, len(a)):  # the 5 digits (skip the "▁")
                    pos = len(pr) - 1 + j
                    acc[name][0] += int(lp[pos].argmax() == a[j])
                    acc[name][1] -= lp[pos, a[j]].item()
        tot = 5 * n
        res["passkey_graded_%d" % n_f] = {
            "n": n, "digit_acc_with_key": acc["key"][0] / tot, "digit_acc_no_key": acc["nokey"][0] / tot,
            "digit_nll_with_key": acc["key"][1] / tot, "digit_nll_no_key": acc["nokey"][1] / tot,
            "uniform_digit_nll": math.log(10)}
        print(n_f, res["passkey_graded_%d" % n_f], flush=True)
    p = os.path.join(WORK, "eval.json")
    ev = json.load(open(p))
    ev.update(res)
    json.dump(ev, open(p, "w"), indent=2)


if __name__ == "__main__":
    main()
