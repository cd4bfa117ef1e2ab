"""Passkey (long-range retrieval) prompt specification for kvs-tiny.

A prompt is built in TOKEN space (ids), so any implementation with the same
tokenizer reproduces it exactly:

    enc(s)   = SentencePiece/HF encode of s WITHOUT BOS (dummy "▁" prefix on)
    KEY(k)   = enc("The pass key is {k}. Remember it. {k} is the pass key.")
    Q        = enc("What is the pass key? The pass key is")
    ANSWER(k)= enc("{k}")  ->  ["▁", d1, d2, d3, d4, d5]   (6 ids; digits split)
    F        = n filler ids = a contiguous window F_all[o : o + n] of the
               filler token stream (for evaluation: F_all = enc(text of
               tests/fixtures/heldout_long.txt), o uniform in [0, len(F_all)-n])
    d        = floor(depth * n), depth uniform in [0, 1]
    prompt   = [BOS] + F[:d] + KEY(k) + F[d:] + Q
    k        = uniform integer in [10000, 99999] (5 digits, no leading zero)

The model answers correctly iff greedy decoding of the next 6 tokens gives
ANSWER(k) (equivalently: argmax at each teacher-forced answer position).
"""
import random

KEY_TEMPLATE = "The pass key is {k}. Remember it. {k} is the pass key."
QUESTION = "What is the pass key? The pass key is"


class Passkey:
    def __init__(self, encode, bos_id=1):
        self.encode = encode  # str -> list[int], no BOS
        self.bos = bos_id
        self.q = encode(QUESTION)

    def key_ids(self, k):
        return self.encode(KEY_TEMPLATE.format(k=k))

    def answer_ids(self, k):
        return self.encode(str(k))

    def build(self, filler, depth, k):
        """filler: list of n filler ids. Returns (prompt_ids, answer_ids)."""
        d = int(depth * len(filler))
        d = min(max(d, 0), len(filler))
        prompt = [self.bos] + list(filler[:d]) + self.key_ids(k) + list(filler[d:]) + self.q
        return prompt, self.answer_ids(k)

    def sample(self, rng, filler_all, n):
        o = rng.randint(0, len(filler_all) - n)
        depth = rng.random()
        k = rng.randint(10000, 99999)
        p, a = self.build(filler_all[o:o + n], depth, k)
        return {"prompt_ids": p, "answer_ids": a, "key": k, "depth": depth, "offset": o, "n_filler": n}


def eval_set(encode, filler_text, n_filler, count, seed, bos_id=1):
    pk = Passkey(encode, bos_id)
    f_all = encode(filler_text)
    rng = random.Random(seed)
    return [pk.sample(rng, f_all, n_filler) for _ in range(count)]
