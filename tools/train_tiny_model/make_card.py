#!/usr/bin/python3
"""Render models/kvs-tiny/README.md (model card) from work/train_summary.json,
work/eval.json and work/tokenizer_verify.json."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MODEL_DIR, WORK  # noqa: E402
import passkey  # noqa: E402


def main():
    ts = json.load(open(os.path.join(WORK, "train_summary.json")))
    cont_p = os.path.join(WORK, "cont", "train_summary.json")
    tc = json.load(open(cont_p)) if os.path.exists(cont_p) else None
    total_wall = ts["train_wall_s"] + (tc["train_wall_s"] if tc else 0)
    total_tok = ts["tokens_seen"] + (tc["tokens_seen"] if tc else 0)
    ev = json.load(open(os.path.join(WORK, "eval.json")))
    tv = json.load(open(os.path.join(WORK, "tokenizer_verify.json")))
    cfg = json.load(open(os.path.join(MODEL_DIR, "config.json")))
    files = sorted(f for f in os.listdir(MODEL_DIR) if f != "README.md")
    sizes = "\n".join("| `%s` | %d |" % (f, os.path.getsize(os.path.join(MODEL_DIR, f))) for f in files)
    pa, pk = ev["ppl_austen_persuasion_last5pct"], ev["ppl_kjv_ruth"]
    rows = [("main", i + 1, p, ts["phase_steps"][i]) for i, p in enumerate(ts["phases"])]
    if tc:
        rows += [("continuation", i + 1, p, tc["phase_steps"][i]) for i, p in enumerate(tc["phases"])]
    phases = "\n".join("| %s %d | %.0f%% | %d | %d | %.0f%% | %d |" % (
        r, i, 100 * p[0], p[1], p[2], 100 * p[3], n) for r, i, p, n in rows)
    cont_txt = ""
    if tc:
        cont_txt = (" The main run was followed by a continuation run (fresh AdamW, peak lr %s, "
                    "%.1f min, %d steps) focused on passkey rows:\n`%s`." % (
                        tc["lr"], tc["train_wall_s"] / 60, tc["steps"], tc.get("command", "")))
    samples = "\n".join("* `%s` → %s" % (s["prompt"], json.dumps(s["greedy"], ensure_ascii=False))
                        for s in ev["samples"])
    graded = ""
    g5, g10 = ev.get("passkey_graded_512"), ev.get("passkey_graded_1024")
    if g5 and g10:
        graded = (
            "* Graded check (`passkey_partial.py`, %d prompts each, teacher-forced, the 5 digits). It compares prompts\n"
            "  with the key against the same prompts with the key sentence replaced by filler:\n"
            "  * 512 filler: digit accuracy %.2f with the key / %.2f without; digit NLL %.3f / %.3f (uniform: %.3f)\n"
            "  * 1024 filler: digit accuracy %.2f / %.2f; digit NLL %.3f / %.3f\n"
            "\n"
            "  **The model has NOT learned passkey retrieval.** Seeing the key does not change its answer\n"
            "  distribution. The CPU was shared with parallel C++ builds, and the training budget was spent\n"
            "  mostly at 250–900 tokens/s. The model did learn the *format*: it emits `▁` followed by 5 digits.\n"
            "  Do not use passkey accuracy with this checkpoint to tell compression policies apart. Use perplexity\n"
            "  or logit drift against full attention instead, or retrain with more time (see tools/train_tiny_model/README.md)."
            % (g5["n"], g5["digit_acc_with_key"], g5["digit_acc_no_key"], g5["digit_nll_with_key"],
               g5["digit_nll_no_key"], g5["uniform_digit_nll"], g10["digit_acc_with_key"],
               g10["digit_acc_no_key"], g10["digit_nll_with_key"], g10["digit_nll_no_key"]))
    card = f"""# kvs-tiny

A tiny (≈{ts['params'] / 1e6:.2f} M parameter) Llama-architecture causal LM trained from
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
| parameters | {ts['params']:,} |
| vocab_size | {cfg['vocab_size']} |
| hidden_size | {cfg['hidden_size']} |
| intermediate_size (SwiGLU) | {cfg['intermediate_size']} |
| num_hidden_layers | {cfg['num_hidden_layers']} |
| num_attention_heads / num_key_value_heads | {cfg['num_attention_heads']} / {cfg['num_key_value_heads']} (GQA; query head h uses kv head h // {cfg['num_attention_heads'] // cfg['num_key_value_heads']}) |
| head_dim | {cfg['head_dim']} |
| rms_norm_eps | {cfg['rms_norm_eps']} |
| RoPE | rope_theta {cfg['rope_theta']}, HF `rotate_half` layout (dim f pairs with f + head_dim/2), no scaling |
| max_position_embeddings | {cfg['max_position_embeddings']} (trained up to 1280 tokens) |
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

`nice -n 10 /usr/bin/python3 tools/train_tiny_model/train.py --minutes 55`.{cont_txt}
This is Debian's python3-torch 1.13 on 2 CPU cores that C++ builds were using at the same
time (up to ~10 runnable compilers), so throughput was often only 300–900 tokens/s.
**Total training wall time: {total_wall / 60:.1f} min** ({ts['steps'] + (tc['steps'] if tc else 0)} steps). AdamW (β 0.9/0.95, weight decay 0.1 on matrices), peak lr {ts['lr']}, 100 warm-up steps,
cosine decay to 10 % over wall time, grad clip 1.0. The curriculum is set by fractions of the wall-time budget:

| run / phase | ends at (fraction of run time) | seq len | batch | passkey rows | steps |
|---|---|---|---|---|---|
{phases}

In a passkey row, the passkey document (below) comes first: training filler of random length,
random depth and a random key. The row is then filled up with `BOS` + corpus text. The
6 answer tokens get loss weight {ts['answer_weight']}.

## Results (full attention)

* Held-out perplexity, non-overlapping windows each starting with BOS:
  * *Persuasion* last 5 % ({pa['tokens']} tokens): **{pa['ppl_T512']:.2f}** (512-token windows), {pa['ppl_T1024']:.2f} (1024)
  * Ruth ({pk['tokens']} tokens): **{pk['ppl_T512']:.2f}** (512), {pk['ppl_T1024']:.2f} (1024)
* Passkey accuracy: {ev['passkey_256']['n']} prompts each, random depth, filler from `heldout_long.txt`, exact 5-digit answer:
  * 256 filler tokens: {100 * ev['passkey_256']['acc']:.0f} %
  * 512 filler tokens: **{100 * ev['passkey_512']['acc']:.0f} %** (mean prompt {ev['passkey_512']['prompt_tokens_mean']:.0f} tokens)
  * 1024 filler tokens: **{100 * ev['passkey_1024']['acc']:.0f} %** (mean prompt {ev['passkey_1024']['prompt_tokens_mean']:.0f} tokens)
{graded}
* Greedy samples (48 tokens). {100 * ev['dict_word_rate']:.0f} % of the generated words are in `/usr/share/dict/words`:
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
