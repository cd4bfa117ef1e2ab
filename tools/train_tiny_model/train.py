#!/usr/bin/python3
"""Train kvs-tiny (Llama architecture) on the KJV + Austen corpus with a
sequence-length curriculum and synthetic passkey documents.

The schedule is by wall-clock time (the training machine is shared): phase
boundaries and the cosine LR are functions of elapsed/--minutes.  Steps
actually taken are logged.

  nice -n 10 /usr/bin/python3 train.py --minutes 55           # full run
  /usr/bin/python3 train.py --smoke                           # < 60 s self-test
"""
import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, FIXTURES, MODEL_DIR, WORK, ensure, read  # noqa: E402
from model import Config, Llama  # noqa: E402
from passkey import Passkey, eval_set  # noqa: E402
import export  # noqa: E402

DOC_SEP = "\n\f\n"

# (fraction of time at which the phase ends, seq_len, batch, passkey fraction)
PHASES = [
    (0.45, 256, 24, 0.10),
    (0.72, 512, 12, 0.25),
    (1.00, 1280, 4, 0.40),
]
ANSWER_WEIGHT = 5.0


def log(f, msg):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    if f:
        f.write(line + "\n")
        f.flush()


def tokenize_docs(sp, text):
    ids = []
    for d in text.split(DOC_SEP):
        if d.strip():
            ids.append(sp.bos_id())
            ids.extend(sp.encode(d))
    return np.array(ids, dtype=np.int32)


class Batcher:
    def __init__(self, stream, sp, seed, answer_weight=ANSWER_WEIGHT):
        self.s = stream
        self.answer_weight = answer_weight
        self.rng = random.Random(seed)
        self.pk = Passkey(lambda t: sp.encode(t), sp.bos_id())
        self.bos = sp.bos_id()
        self.dot = sp.encode(".")[-1:]  # "." after the digits (no dummy prefix piece)

    def window(self, n):
        o = self.rng.randint(0, len(self.s) - n - 1)
        return self.s[o:o + n].tolist()

    def passkey_seq(self, T):
        """One training row of T+1 tokens: passkey doc then ordinary text."""
        k = self.rng.randint(10000, 99999)
        overhead = 1 + len(self.pk.key_ids(k)) + len(self.pk.q) + 6 + 1
        n_max = max(8, T + 1 - overhead)
        n = self.rng.randint(min(16, n_max), n_max)
        filler = [t for t in self.window(n + 8) if t != self.bos][:n]
        prompt, ans = self.pk.build(filler, self.rng.random(), k)
        seq = prompt + ans + self.dot
        w = [1.0] * len(seq)
        for i in range(len(prompt), len(prompt) + len(ans)):
            w[i] = self.answer_weight
        rest = T + 1 - len(seq)
        if rest > 0:
            seq += [self.bos] + self.window(rest - 1)
            w += [1.0] * rest
        return seq[:T + 1], w[:T + 1]

    def batch(self, B, T, pk_frac):
        rows, ws = [], []
        for _ in range(B):
            if self.rng.random() < pk_frac:
                s, w = self.passkey_seq(T)
            else:
                s, w = self.window(T + 1), [1.0] * (T + 1)
            rows.append(s)
            ws.append(w)
        x = torch.tensor(rows, dtype=torch.long)
        w = torch.tensor(ws, dtype=torch.float32)
        return x[:, :-1], x[:, 1:], w[:, 1:]


@torch.no_grad()
def passkey_accuracy(model, items, batch=8):
    """Teacher-forced check == greedy correctness of all answer tokens."""
    ok = 0
    for i in range(0, len(items), batch):
        chunk = items[i:i + batch]
        L = max(len(it["prompt_ids"]) + len(it["answer_ids"]) for it in chunk)
        x = torch.zeros(len(chunk), L, dtype=torch.long)
        for j, it in enumerate(chunk):  # right padding is harmless (causal)
            s = it["prompt_ids"] + it["answer_ids"]
            x[j, :len(s)] = torch.tensor(s)
        logits = model(x, fast=L >= 1024)
        for j, it in enumerate(chunk):
            p = len(it["prompt_ids"])
            pred = logits[j, p - 1:p - 1 + len(it["answer_ids"])].argmax(-1).tolist()
            ok += int(pred == it["answer_ids"])
    return ok / len(items)


@torch.no_grad()
def perplexity(model, ids, T=512):
    """Non-overlapping windows of T tokens, each starting with BOS."""
    nll, n = 0.0, 0
    for o in range(0, len(ids) - 1, T - 1):
        chunk = [1] + ids[o:o + T - 1]
        if len(chunk) < 2:
            break
        x = torch.tensor([chunk])
        lp = F.log_softmax(model(x)[0, :-1].double(), -1)
        tgt = x[0, 1:]
        nll -= lp.gather(1, tgt[:, None]).sum().item()
        n += len(tgt)
    return math.exp(nll / n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=55.0)
    ap.add_argument("--out", default=MODEL_DIR)
    ap.add_argument("--spm", default=os.path.join(DATA, "spm.model"))
    ap.add_argument("--corpus", default=os.path.join(DATA, "train_docs.txt"))
    ap.add_argument("--work", default=WORK)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=48)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--init", default=None, help="continue from a checkpoint (fresh optimizer)")
    ap.add_argument("--phases", default=None,
                    help="override curriculum: comma list of end_frac:seq_len:batch:passkey_frac")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--skip-eval", action="store_true", help="no quick eval at the end")
    ap.add_argument("--answer-weight", type=float, default=ANSWER_WEIGHT,
                    help="loss weight of the passkey answer tokens")
    ap.add_argument("--probe-minutes", type=float, default=0.0,
                    help="every N minutes, log passkey accuracy at --probe-filler tokens (0: off)")
    ap.add_argument("--probe-filler", type=int, default=128)
    ap.add_argument("--smoke", action="store_true",
                    help="tiny self-test (< 60 s): tokenizer+model on tests/fixtures/"
                         "calibration_text.txt in a temp dir, export, reload")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    phases = PHASES
    if a.phases:
        # e.g. "1.0:1280:4:0.5" or "0.5:512:12:0.3,1.0:1280:4:0.5"
        phases = [tuple(float(v) if i in (0, 3) else int(v) for i, v in enumerate(p.split(":")))
                  for p in a.phases.split(",")]
    tmp = None
    if a.smoke:
        tmp = tempfile.mkdtemp(prefix="kvs_tiny_smoke_")
        text = read(os.path.join(FIXTURES, "calibration_text.txt"))
        with open(os.path.join(tmp, "c.txt"), "w") as f:
            f.write(text)
        import train_tokenizer
        train_tokenizer.train(os.path.join(tmp, "c.txt"), os.path.join(tmp, "spm"), 512, 1)
        a.spm = os.path.join(tmp, "spm.model")
        a.corpus = os.path.join(tmp, "c.txt")
        a.out = os.path.join(tmp, "model")
        a.work = os.path.join(tmp, "work")
        a.minutes = 0.25
        a.dim, a.layers, a.heads, a.kv_heads, a.head_dim, a.ffn = 64, 2, 4, 2, 16, 128
        phases = [(0.5, 64, 8, 0.2), (1.0, 160, 2, 0.4)]
    ensure(a.work)
    logf = open(os.path.join(a.work, "train.log"), "a")
    sp = spm.SentencePieceProcessor(model_file=a.spm)
    cache = os.path.join(a.work, "train_ids.npy")
    if os.path.exists(cache) and not a.smoke:
        stream = np.load(cache)
    else:
        stream = tokenize_docs(sp, read(a.corpus))
        np.save(cache, stream)
    c = Config(vocab_size=sp.get_piece_size(), hidden_size=a.dim, intermediate_size=a.ffn,
               num_hidden_layers=a.layers, num_attention_heads=a.heads,
               num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
               bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id())
    model = Llama(c)
    if a.init:
        model.load_state_dict(torch.load(a.init)["model"])
    nparams = sum(p.numel() for p in model.parameters())
    log(logf, "start: %s params=%d stream=%d tokens phases=%s minutes=%.1f"
        % (json.dumps(c.to_dict()), nparams, len(stream), phases, a.minutes))
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    bat = Batcher(stream, sp, a.seed, a.answer_weight)
    probe = None
    if a.probe_minutes > 0:
        probe = eval_set(lambda t: sp.encode(t), read(os.path.join(FIXTURES, "heldout_long.txt")),
                         a.probe_filler, 24, 7)
    last_probe = time.time()
    heldout = sp.encode(read(os.path.join(FIXTURES, "heldout_long.txt")))
    budget = a.minutes * 60.0
    t0 = time.time()
    step, seen, phase_i = 0, 0, 0
    warm = a.warmup if not a.smoke else 5
    ema = None
    last_log = t0
    last_ckpt = t0
    phase_steps = [0] * len(phases)
    while True:
        el = time.time() - t0
        frac = el / budget
        if frac >= 1.0:
            break
        while phases[phase_i][0] <= frac:
            phase_i += 1
            log(logf, "phase %d -> %s at step %d, %.0fs" % (phase_i, phases[phase_i], step, el))
        _, T, B, pk = phases[phase_i]
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y, w = bat.batch(B, T, pk)
        model.train()
        logits = model(x, fast=T >= 1024)
        ce = F.cross_entropy(logits.reshape(-1, c.vocab_size), y.reshape(-1), reduction="none")
        loss = (ce * w.reshape(-1)).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        phase_steps[phase_i] += 1
        seen += B * T
        lv = ce.mean().item()
        ema = lv if ema is None else 0.98 * ema + 0.02 * lv
        now = time.time()
        if now - last_log > (60 if not a.smoke else 3):
            last_log = now
            log(logf, "step %d T=%d loss %.3f (ema %.3f) gn %.2f lr %.2e tok %d %.0f tok/s el %.0fs"
                % (step, T, lv, ema, gn, lr, seen, seen / (now - t0), now - t0))
        if probe is not None and now - last_probe > a.probe_minutes * 60:
            last_probe = now
            model.eval()
            log(logf, "probe step %d: passkey@%d = %.3f" % (step, a.probe_filler, passkey_accuracy(model, probe)))
        if not a.smoke and now - last_ckpt > 600:
            last_ckpt = now
            torch.save({"model": model.state_dict(), "config": c.to_dict(), "step": step},
                       os.path.join(a.work, "ckpt.pt"))
    wall = time.time() - t0
    model.eval()
    torch.save({"model": model.state_dict(), "config": c.to_dict(), "step": step},
               os.path.join(a.work, "ckpt.pt"))
    summary = {"name": os.path.basename(os.path.normpath(a.work)),
               "command": " ".join(["train.py"] + sys.argv[1:]), "init": a.init, "params": nparams,
               "steps": step, "phase_steps": phase_steps, "tokens_seen": seen,
               "train_wall_s": round(wall, 1), "phases": phases, "final_loss_ema": ema, "lr": a.lr,
               "warmup": a.warmup, "answer_weight": a.answer_weight}
    n_eval = 20 if not a.smoke else 4
    enc = lambda t: sp.encode(t)  # noqa: E731
    if not a.skip_eval:
        summary["heldout_ppl_quick"] = perplexity(model, heldout[:4000 if not a.smoke else 600])
    for n_f in ((512, 1024) if not a.smoke else (64,)) if not a.skip_eval else ():
        items = eval_set(enc, read(os.path.join(FIXTURES, "heldout_long.txt")), n_f, n_eval, 99)
        summary["passkey_quick_%d" % n_f] = passkey_accuracy(model, items)
    log(logf, "done: " + json.dumps(summary))
    n = export.export_model(model, a.out)
    with open(os.path.join(a.work, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    # reload check: exported safetensors must reproduce the logits
    m2 = export.load_model(a.out)
    x = torch.tensor([[sp.bos_id()] + heldout[:100]])
    with torch.no_grad():
        d = (m2(x) - model(x)).abs().max().item()
    log(logf, "exported %d params to %s; reload max|dlogit| = %.3g" % (n, a.out, d))
    assert d < 1e-5
    if a.smoke:
        import ref_numpy
        ref = ref_numpy.RefModel(a.out)
        lr_ = ref.logits([sp.bos_id()] + heldout[:40])
        with torch.no_grad():
            lt = model(torch.tensor([[sp.bos_id()] + heldout[:40]]))[0].double().numpy()
        dd = float(np.abs(lr_ - lt).max())
        log(None, "smoke: numpy reference vs torch max|d| = %.3g" % dd)
        assert dd < 1e-4
        assert wall < 60
        shutil.rmtree(tmp)
        print("SMOKE OK")


if __name__ == "__main__":
    main()
