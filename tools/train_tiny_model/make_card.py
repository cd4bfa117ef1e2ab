#!/usr/bin/python3
"""Render models/kvs-tiny/README.md (model card) from lineage.json (every training run behind
the shipped weights), work/eval.json and work/tokenizer_verify.json.

  make_card.py                                     render the card
  make_card.py --append work/<run>/train_summary.json --label L [--note TEXT] [--date D]
                                                   record a finished run in lineage.json first
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HERE, MODEL_DIR, WORK  # noqa: E402
import passkey  # noqa: E402

LINEAGE = os.path.join(HERE, "lineage.json")


def append_run(summary_path, label, note, date):
    lin = json.load(open(LINEAGE))
    ts = json.load(open(summary_path))
    run = {"label": label, "date": date or time.strftime("%Y-%m-%d"), "name": ts.get("name", ""),
           "command": ts.get("command", ""), "train_wall_s": ts["train_wall_s"], "steps": ts["steps"],
           "tokens_seen": ts["tokens_seen"], "lr": ts["lr"], "warmup": ts.get("warmup"),
           "answer_weight": ts.get("answer_weight"), "phases": ts["phases"],
           "phase_steps": ts["phase_steps"], "note": note or ""}
    lin["runs"].append(run)
    with open(LINEAGE, "w") as f:
        json.dump(lin, f, indent=2)
        f.write("\n")
    print("appended run %r to %s" % (label, LINEAGE))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--append", default=None)
    ap.add_argument("--label", default=None)
    ap.add_argument("--note", default="")
    ap.add_argument("--date", default=None)
    a = ap.parse_args()
    if a.append:
        append_run(a.append, a.label or "run", a.note, a.date)
    runs = json.load(open(LINEAGE))["runs"]
    from export import load_model  # torch: only needed to count the shipped parameters
    params = sum(t.numel() for t in load_model(MODEL_DIR).parameters())
    total_wall = sum(r["train_wall_s"] for r in runs)
    total_tok = sum(r["tokens_seen"] for r in runs)
    max_len = max(p[1] for r in runs for p in r["phases"])
    ev = json.load(open(os.path.join(WORK, "eval.json")))
    tv = json.load(open(os.path.join(WORK, "tokenizer_verify.json")))
    cfg = json.load(open(os.path.join(MODEL_DIR, "config.json")))
    files = sorted(f for f in os.listdir(MODEL_DIR) if f != "README.md")
    sizes = "\n".join("| `%s` | %d |" % (f, os.path.getsize(os.path.join(MODEL_DIR, f))) for f in files)
    pa, pk = ev["ppl_austen_persuasion_last5pct"], ev["ppl_kjv_ruth"]
    phases = "\n".join("| %s %d | %.0f%% | %d | %d | %.0f%% | %d |" % (
        r["label"], i + 1, 100 * p[0], p[1], p[2], 100 * p[3], r["phase_steps"][i])
        for r in runs for i, p in enumerate(r["phases"]))
    run_list = "\n".join(
        "%d. %s (%s): %.1f min, %d steps, %s tokens, peak lr %s, %s warm-up steps, answer weight %s%s:\n"
        "   `%s`" % (n + 1, r["label"], r["date"], r["train_wall_s"] / 60, r["steps"],
                     format(r["tokens_seen"], ","), r["lr"], r["warmup"], r["answer_weight"],
                     ("; " + r["note"]) if r.get("note") else "", r["command"])
        for n, r in enumerate(runs))
    samples = "\n".join("* `%s` → %s" % (s["prompt"], json.dumps(s["greedy"], ensure_ascii=False))
                        for s in ev["samples"])
    passkeys = "\n".join(
        "  * %s filler tokens: **%.0f %%** (mean prompt %.0f tokens)" % (
            k.split("_")[1], 100 * v["acc"], v["prompt_tokens_mean"])
        for k, v in sorted(ev.items(), key=lambda kv: int(kv[0].split("_")[1]) if kv[0].startswith("passkey_") and kv[0].split("_")[1].isdigit() else 0)
        if k.startswith("passkey_") and k.split("_")[1].isdigit())
    pos = ev.get("ppl_by_position")
    pos_txt = ""
    if pos:
        pos_txt = ("* Perplexity by position (%d windows of %d tokens over both held-out texts, one every 256 tokens,\n"
                   "  each starting with BOS; `evaluate.py`):\n\n"
                   "  | positions | %s |\n  |---|%s\n  | perplexity | %s |\n" % (
                       pos["windows"], pos["window"],
                       " | ".join("%d–%d" % (b["from"], b["to"] - 1) for b in pos["buckets"]),
                       "---:|" * len(pos["buckets"]),
                       " | ".join("%.2f" % b["ppl"] for b in pos["buckets"])))
    graded = "\n".join(
        "  * %s filler: digit accuracy %.2f with the key / %.2f without; digit NLL %.3f / %.3f (uniform: %.3f)" % (
            k.split("_")[2], v["digit_acc_with_key"], v["digit_acc_no_key"], v["digit_nll_with_key"],
            v["digit_nll_no_key"], v["uniform_digit_nll"])
        for k, v in sorted(ev.items()) if k.startswith("passkey_graded_"))
    if graded:
        n_graded = next(v["n"] for k, v in ev.items() if k.startswith("passkey_graded_"))
        graded = ("* Graded check (`passkey_partial.py`, %d prompts each, teacher-forced, the 5 digits). It compares prompts\n"
                  "  with the key against the same prompts with the key sentence replaced by filler:\n%s\n" % (n_graded, graded))
    card = f"""# kvs-tiny

A tiny (≈{params / 1e6:.2f} M parameter) Llama-architecture causal LM trained from
scratch on public-domain text, bundled with kvserve for tests: loader,
tokenizer, logits/greedy golden tests, perplexity and long-range (passkey)
retrieval under KV-cache compression. It is **not** a useful assistant.
Its text is locally fluent KJV/Austen-style English with no coherence.

Rebuild everything with `tools/train_tiny_model/` (see its README.md).

## Files

| file | bytes |
|---|---|
{sizes}

All are in Hugging Face `LlamaForCausalLM` format, fp32. `model.safetensors` holds
`model.embed_tokens.weight`, `model.layers.{{i}}.{{input_layernorm,post_attention_layernorm}}.weight`,
`model.layers.{{i}}.self_attn.{{q,k,v,o}}_proj.weight`, `model.layers.{{i}}.mlp.{{gate,up,down}}_proj.weight`,
`model.norm.weight`. There is no `lm_head.weight`: the embeddings are tied (`tie_word_embeddings: true`).

## Architecture

| | |
|---|---|
| parameters | {params:,} |
| vocab_size | {cfg['vocab_size']} |
| hidden_size | {cfg['hidden_size']} |
| intermediate_size (SwiGLU) | {cfg['intermediate_size']} |
| num_hidden_layers | {cfg['num_hidden_layers']} |
| num_attention_heads / num_key_value_heads | {cfg['num_attention_heads']} / {cfg['num_key_value_heads']} (GQA; query head h uses kv head h // {cfg['num_attention_heads'] // cfg['num_key_value_heads']}) |
| head_dim | {cfg['head_dim']} |
| rms_norm_eps | {cfg['rms_norm_eps']} |
| RoPE | rope_theta {cfg['rope_theta']}, HF `rotate_half` layout (dim f pairs with f + head_dim/2), no scaling |
| max_position_embeddings | {cfg['max_position_embeddings']} (trained on rows of up to {max_len} tokens) |
| biases | none |

## Tokenizer

SentencePiece BPE, 2048 pieces, `byte_fallback`, `split_digits`, identity normalisation,
no whitespace collapsing, dummy `▁` prefix. Exported to a Llama-2-shaped `tokenizer.json`.

* ids: `<unk>`=0, `<s>` (BOS)=1, `</s>` (EOS)=2, `<|im_start|>`=3, `<|im_end|>`=4,
  `<0x00>`..`<0xFF>`=5..260, then the merged pieces.
* `add_bos_token: true`, `add_eos_token: false`: prompts are `[1] + encode(text)`.
* `<|im_start|>`/`<|im_end|>` have `"normalized": true`. They are matched after the `▁`
  prefix has been added to the whole text, as SentencePiece does. So
  `"<|im_start|>user"` encodes to `▁ <|im_start|> user`, not `<|im_start|> ▁user`.
  A literal `<s>`/`</s>` in text is **not** a special token for SentencePiece.
  Keep it out of test text; the HF legacy rules split it out.
* Check: an independent pure-Python encoder that reads only `tokenizer.json`
  (`tools/train_tiny_model/hf_bpe.py`) reproduces SentencePiece ids on {tv['texts']} texts.
  That is {tv['bytes']:,} bytes and {tv['tokens']:,} tokens of held-out, calibration, licence and random Unicode
  text (accents, CJK, emoji, combining marks, whitespace runs, chat tokens).
  Ids match on **{tv['id_match']}/{tv['texts']}** and decodes on {tv['decode_match']}/{tv['texts']}.
* Chat template: chatml (`tokenizer_config.json`). The model never saw chat data.
* EOS: documents in training are separated by BOS only, so the model was never trained to
  emit `</s>`, and greedy decoding in practice never produces it.

## Training data and licence

* King James Bible from Debian `bible-kjv` / `bible-kjv-text`, dumped with
  `bible -p /usr/lib "gen1:1-rev22:21"`, verse numbers stripped, one document per chapter.
  The KJV text is in the public domain; the Debian packaging is GPL-2+.
* Jane Austen's six novels from Debian `r-cran-janeaustenr`. The Project Gutenberg texts are
  in the public domain; the R package is MIT. One document per chapter.
* Held out, never trained on: the book of Ruth, and the last 5 % (by paragraphs) of
  *Persuasion*, which is `tests/fixtures/heldout_long.txt`.
* The training stream is 2.42 M tokens. Training saw {total_tok:,} tokens in total, passkey rows included
  (about {total_tok / 2.42e6:.1f} passes).

## Training

{len(runs)} runs (`tools/train_tiny_model/lineage.json`), each continuing from the previous checkpoint with a fresh AdamW:
{run_list}

Debian's python3-torch 1.13 on 2 CPU cores. **Total training wall time: {total_wall / 60:.1f} min**
({sum(r['steps'] for r in runs):,} steps). Every run: AdamW (β 0.9/0.95, weight decay 0.1 on matrices),
cosine decay to 10 % over wall time, grad clip 1.0. The curriculum is set by fractions of each run's wall-time budget:

| run / phase | ends at (fraction of run time) | seq len | batch | passkey rows | steps |
|---|---|---|---|---|---|
{phases}

In a passkey row, the passkey document (below) comes first: training filler of random length,
random depth and a random key. The row is then filled up with `BOS` + corpus text. The
6 answer tokens get the run's answer weight.

## Results (full attention)

* Held-out perplexity, non-overlapping windows each starting with BOS:
  * *Persuasion* last 5 % ({pa['tokens']} tokens): **{pa['ppl_T512']:.2f}** (512-token windows), {pa['ppl_T1024']:.2f} (1024)
  * Ruth ({pk['tokens']} tokens): **{pk['ppl_T512']:.2f}** (512), {pk['ppl_T1024']:.2f} (1024)
{pos_txt}* Passkey accuracy (full attention): {ev['passkey_512']['n']} prompts each, random depth, filler from `heldout_long.txt`, exact 5-digit answer:
{passkeys}
{graded}* Greedy samples (48 tokens). {100 * ev['dict_word_rate']:.0f} % of the generated words are in `/usr/share/dict/words`:
{samples}

## Passkey prompt specification

The C++ eval regenerates these prompts itself. Build them in token space:

```
enc(s)    = tokenizer encode of s WITHOUT BOS (dummy "▁" prefix on)
KEY(k)    = enc("{passkey.KEY_TEMPLATE}")
Q         = enc("{passkey.QUESTION}")
ANSWER(k) = enc("{{k}}")   -> [▁, d1, d2, d3, d4, d5]  (6 ids; digits are single tokens)
F_all     = enc(contents of tests/fixtures/heldout_long.txt)
k         = uniform integer in [10000, 99999]
o         = uniform integer in [0, len(F_all) - n];  F = F_all[o : o + n]   (n = filler tokens)
d         = floor(depth * n), depth uniform in [0, 1]
prompt    = [BOS] + F[:d] + KEY(k) + F[d:] + Q
```

A prompt counts as correct iff greedy decoding of the next 6 tokens yields `ANSWER(k)`.
Example ids and the model's correctness are in `tests/fixtures/passkey_kvs_tiny.json`; the reference
code is `tools/train_tiny_model/passkey.py`. KEY(k) is 30 tokens and Q is 12 tokens for every 5-digit key, so
prompt length = n + 43.

## Golden fixtures

`tests/fixtures/kvs_tiny_golden.json` holds the top-20 logits per prompt position and a 64-token greedy
continuation, computed in float64 from these fp32 weights. An independent NumPy float64 forward
(`ref_numpy.py`) agrees to < 1e-8, and PyTorch float32 agrees to < 1e-4.
"""
    with open(os.path.join(MODEL_DIR, "README.md"), "w") as f:
        f.write(card)
    print("card written")


if __name__ == "__main__":
    main()
