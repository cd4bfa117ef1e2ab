#!/usr/bin/python3
"""Distil kvs-tiny into a smaller draft model for speculative decoding (kvs-tiny-draft).

The draft only has to guess the target's greedy token, so the student is trained to match the
teacher's whole next-token distribution (KL(teacher || student) at temperature 1) on every
position of text windows, not the text itself. Same tokenizer (the teacher's tokenizer files
are copied next to the weights), so the ids mean the same thing.

  * text: tests/fixtures/calibration_text.txt for training, tests/fixtures/heldout_long.txt
    held out (both encoded with hf_bpe.py from the teacher's tokenizer.json: no SentencePiece
    model or corpus needed).
  * student init: embeddings = the teacher's projected on their top `dim` principal
    directions (tied embeddings, so this is also the head); the rest random.
  * teacher targets: computed once for every training window before the student trains.
  * schedule: wall-clock bound (--minutes, the student's training alone), cosine LR.
  * report: held-out KL and greedy agreement (student argmax == teacher argmax on the
    teacher-forced held-out text), written to <out>/distill_summary.json.

  nice -n 10 /usr/bin/python3 distill.py --minutes 8
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FIXTURES, MODEL_DIR, REPO, read  # noqa: E402
from hf_bpe import HFBPE  # noqa: E402
from model import Config, Llama  # noqa: E402
import export  # noqa: E402

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def encode_text(tok, text, bos):
    """Paragraphs encoded one by one (the pure-Python BPE is per segment), BOS-separated docs."""
    ids = [bos]
    for para in text.split("\n\n"):
        if para.strip():
            ids.extend(tok.encode(para + "\n\n"))
    return np.array(ids, dtype=np.int64)


@torch.no_grad()
def teacher_targets(teacher, stream, T, chunk=8):
    """The training text cut into windows of T tokens (offset T / 2 apart), with the teacher's
    log-probabilities of every position, computed once (fp16: the student pass is then the
    only cost of a step)."""
    starts = list(range(0, len(stream) - T, T // 2))
    x = torch.from_numpy(np.stack([stream[s:s + T] for s in starts]))
    logp = torch.empty(len(starts), T, teacher.c.vocab_size, dtype=torch.float16)
    for i in range(0, len(starts), chunk):
        logp[i:i + chunk] = F.log_softmax(teacher(x[i:i + chunk], fast=True), -1).half()
    return x, logp


@torch.no_grad()
def evaluate(student, teacher, stream, T=256):
    kl_sum, agree, n = 0.0, 0, 0
    for s in range(0, len(stream) - T, T):
        x = torch.from_numpy(stream[s:s + T][None])
        t = teacher(x, fast=True)
        st = student(x, fast=True)
        kl_sum += F.kl_div(F.log_softmax(st, -1), F.log_softmax(t, -1), log_target=True,
                           reduction="sum").item()
        agree += (t.argmax(-1) == st.argmax(-1)).sum().item()
        n += T
    return kl_sum / n, agree / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--teacher", default=MODEL_DIR)
    ap.add_argument("--out", default=os.path.join(REPO, "models", "kvs-tiny-draft"))
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=320)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1)  # 2 spin-wait badly on a shared machine
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)

    teacher = export.load_model(a.teacher)
    for p in teacher.parameters():
        p.requires_grad_(False)
    tc = teacher.c
    tok = HFBPE(os.path.join(a.teacher, "tokenizer.json"))
    t0 = time.time()
    train = encode_text(tok, read(os.path.join(FIXTURES, "calibration_text.txt")), tc.bos_token_id)
    held = encode_text(tok, read(os.path.join(FIXTURES, "heldout_long.txt")), tc.bos_token_id)
    print(f"encoded {len(train)} training and {len(held)} held-out tokens in {time.time() - t0:.0f}s",
          flush=True)

    c = Config(vocab_size=tc.vocab_size, hidden_size=a.dim, intermediate_size=a.ffn,
               num_hidden_layers=a.layers, num_attention_heads=a.heads,
               num_key_value_heads=a.kv_heads, head_dim=a.head_dim, rms_norm_eps=tc.rms_norm_eps,
               rope_theta=tc.rope_theta, max_position_embeddings=tc.max_position_embeddings,
               bos_token_id=tc.bos_token_id, eos_token_id=tc.eos_token_id)
    student = Llama(c)
    with torch.no_grad():
        e = teacher.embed_tokens.weight
        _, _, v = torch.linalg.svd(e, full_matrices=False)
        student.embed_tokens.weight.copy_(e @ v[:a.dim].t())
    t0 = time.time()
    xs, logps = teacher_targets(teacher, train, a.seq)
    print(f"teacher targets for {len(xs)} windows in {time.time() - t0:.0f}s", flush=True)
    opt = torch.optim.AdamW(student.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    budget = a.minutes * 60.0
    start = time.time()
    step = 0
    while True:
        frac = (time.time() - start) / budget
        if frac >= 1.0:
            break
        lr = a.lr * min(1.0, (step + 1) / 30) * 0.5 * (1 + math.cos(math.pi * frac))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.from_numpy(rng.integers(0, len(xs), size=a.batch))
        x, t = xs[idx], logps[idx].float()
        s = F.log_softmax(student(x, fast=True), -1)
        loss = F.kl_div(s, t, log_target=True, reduction="batchmean") / a.seq
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} t={time.time() - start:.0f}s lr={lr:.2e} kl/token={loss.item():.4f}",
                  flush=True)
    student.eval()
    kl, agree = evaluate(student, teacher, held)
    print(f"held-out: kl/token={kl:.4f} greedy agreement={agree:.4f} after {step} steps", flush=True)
    n_params = export.export_model(student, a.out)
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(a.teacher, f), os.path.join(a.out, f))
    summary = {"teacher": os.path.relpath(a.teacher, REPO), "params": int(n_params), "steps": step,
               "minutes": a.minutes, "seq": a.seq, "batch": a.batch,
               "train_tokens": int(len(train)), "heldout_tokens": int(len(held)),
               "heldout_kl_per_token": round(kl, 4), "heldout_greedy_agreement": round(agree, 4)}
    with open(os.path.join(a.out, "distill_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
