#!/usr/bin/python3
"""Train the kvs-tiny SentencePiece BPE tokenizer and export it to HF format.

Writes data/spm.model (+ .vocab) and, in --out (default models/kvs-tiny):
  tokenizer.json          HF "Llama-2 shape" BPE tokenizer (byte_fallback)
  tokenizer_config.json   add_bos_token, chat_template (chatml), ...
  generation_config.json  bos/eos ids

Merges are derived from the SentencePiece pieces: SentencePiece BPE encoding
repeatedly merges the adjacent symbol pair whose concatenation is the
highest-scoring (lowest-id) normal piece.  For every normal piece P (id order)
we emit *every* split P = a + b with a, b normal pieces, the split with the
smallest max(rank(a), rank(b)) first.  Merge rank order therefore equals
piece-id order, which makes HF's rank-ordered BPE pick the same piece as
SentencePiece at every step.
"""
import argparse
import json
import os
import sys

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DATA, MODEL_DIR, SPECIAL_USER, ensure  # noqa: E402

# chatml; with tools, a Hermes-style tool-call format (<tool_call> JSON </tool_call>), so the server
# detects it and tool_choice auto/required work out of the box.
CHAT_TEMPLATE = '{% if tools %}{{ \'<|im_start|>system\\n\' }}{% if messages[0][\'role\'] == \'system\' %}{{ messages[0][\'content\'] + \'\\n\\n\' }}{% endif %}{{ \'# Tools\\n\\nTo call a function, write <tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>\\n\\n<tools>\' }}{% for tool in tools %}{{ \'\\n\' }}{{ tool | tojson }}{% endfor %}{{ \'\\n</tools><|im_end|>\\n\' }}{% endif %}{% for message in messages %}{% if tools and loop.first and message[\'role\'] == \'system\' %}{% elif message[\'role\'] == \'assistant\' and message[\'tool_calls\'] %}{{ \'<|im_start|>assistant\\n\' }}{% if message[\'content\'] %}{{ message[\'content\'] }}{% endif %}{% for call in message[\'tool_calls\'] %}{{ \'<tool_call>\\n{"name": "\' + call[\'function\'][\'name\'] + \'", "arguments": \' + (call[\'function\'][\'arguments\'] | tojson) + \'}\\n</tool_call>\' }}{% endfor %}{{ \'<|im_end|>\\n\' }}{% elif message[\'role\'] == \'tool\' %}{{ \'<|im_start|>user\\n<tool_response>\\n\' + message[\'content\'] + \'\\n</tool_response><|im_end|>\\n\' }}{% else %}{{\'<|im_start|>\' + message[\'role\'] + \'\\n\' + message[\'content\'] + \'<|im_end|>\' + \'\\n\'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ \'<|im_start|>assistant\\n\' }}{% endif %}'


def train(input_path, prefix, vocab_size, threads=2):
    # SentencePiece reads one sentence per line; the document separator "\f"
    # lines are harmless (a single control char).
    spm.SentencePieceTrainer.train(
        input=input_path, model_prefix=prefix, vocab_size=vocab_size,
        model_type="bpe", byte_fallback=True, split_digits=True,
        character_coverage=1.0, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True,
        user_defined_symbols=SPECIAL_USER, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=65536, num_threads=threads, minloglevel=2,
        input_sentence_size=0, shuffle_input_sentence=False)


def export(sp, out_dir, model_max_length=2048):
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    vocab = {p: i for i, p in enumerate(pieces)}
    normal = [i for i in range(n) if not (sp.is_control(i) or sp.is_unknown(i)
                                           or sp.is_byte(i) or sp.is_unused(i)
                                           or pieces[i] in SPECIAL_USER)]
    normal_set = set(pieces[i] for i in normal)
    merges = []
    for i in normal:
        p = pieces[i]
        splits = []
        for k in range(1, len(p)):
            a, b = p[:k], p[k:]
            if a in normal_set and b in normal_set:
                splits.append((max(vocab[a], vocab[b]), vocab[a], a, b))
        splits.sort()
        merges.extend("%s %s" % (a, b) for _, _, a, b in splits)
        if len(p) > 1:
            assert splits, "piece %r has no split" % p
    added = []
    for i in range(n):
        if sp.is_control(i) or sp.is_unknown(i) or pieces[i] in SPECIAL_USER:
            added.append({"id": i, "content": pieces[i], "single_word": False,
                          "lstrip": False, "rstrip": False,
                          # user-defined chat tokens are matched in the
                          # normalized text, exactly like SentencePiece does
                          # (the "▁" prefix is added once, to the whole text).
                          "normalized": pieces[i] in SPECIAL_USER,
                          "special": True})
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True,
                  "vocab": vocab, "merges": merges},
    }
    ensure(out_dir)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "tokenizer_class": "LlamaTokenizer",
        "additional_special_tokens": SPECIAL_USER,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    gen = {"bos_token_id": sp.bos_id(), "eos_token_id": sp.eos_id(),
           "do_sample": False, "transformers_version": "4.40.0"}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    return len(merges)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", default=os.path.join(DATA, "train_docs.txt"))
    ap.add_argument("--prefix", default=os.path.join(DATA, "spm"))
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--out", default=MODEL_DIR)
    a = ap.parse_args()
    ensure(os.path.dirname(a.prefix))
    train(a.input, a.prefix, a.vocab_size)
    sp = spm.SentencePieceProcessor(model_file=a.prefix + ".model")
    nm = export(sp, a.out)
    print("vocab %d, merges %d, bos %d eos %d unk %d, im_start %d im_end %d"
          % (sp.get_piece_size(), nm, sp.bos_id(), sp.eos_id(), sp.unk_id(),
             sp.piece_to_id("<|im_start|>"), sp.piece_to_id("<|im_end|>")))


if __name__ == "__main__":
    main()
