"""Independent pure-Python encoder/decoder for a HF `tokenizer.json` of the
Llama-2 shape (BPE + byte_fallback, Prepend/Replace normalizer, no
pre-tokenizer).  It reads ONLY tokenizer.json; it is used to verify the export
against SentencePiece.  Not fast, but O(n log n) per segment.
"""
import heapq
import json


class HFBPE:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        m = j["model"]
        assert m["type"] == "BPE"
        self.vocab = m["vocab"]
        self.inv = {i: p for p, i in self.vocab.items()}
        self.ranks = {}
        for r, mg in enumerate(m["merges"]):
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            self.ranks.setdefault((a, b), r)
        self.byte_fallback = m.get("byte_fallback", False)
        self.unk = self.vocab.get(m.get("unk_token"))
        self.added = [(t["content"], t["id"], t.get("normalized", False)) for t in j["added_tokens"]]
        self.added_ids = {t["id"] for t in j["added_tokens"]}
        self.normalizers = j["normalizer"]["normalizers"] if j["normalizer"] else []
        self.decoders = j["decoder"]["decoders"]

    # -- added tokens: leftmost-longest match
    @staticmethod
    def _split(text, toks):
        out, i, start = [], 0, 0
        toks = sorted(toks, key=lambda t: -len(t[0]))
        while i < len(text):
            hit = None
            for content, tid in toks:
                if text.startswith(content, i):
                    hit = (content, tid)
                    break
            if hit:
                if start < i:
                    out.append(text[start:i])
                out.append(hit[1])
                i += len(hit[0])
                start = i
            else:
                i += 1
        if start < len(text):
            out.append(text[start:])
        return out

    def normalize(self, s):
        for n in self.normalizers:
            if n["type"] == "Prepend":
                if s:
                    s = n["prepend"] + s
            elif n["type"] == "Replace":
                s = s.replace(n["pattern"]["String"], n["content"])
            else:
                raise ValueError(n["type"])
        return s

    def bpe(self, s):
        syms = list(s)
        n = len(syms)
        if n == 0:
            return []
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        heap = []

        def push(i):
            j = nxt[i]
            if j != -1:
                r = self.ranks.get((syms[i], syms[j]))
                if r is not None:
                    heapq.heappush(heap, (r, i, syms[i], syms[j]))

        for i in range(n - 1):
            push(i)
        while heap:
            r, i, a, b = heapq.heappop(heap)
            if not alive[i] or syms[i] != a:
                continue
            j = nxt[i]
            if j == -1 or syms[j] != b:
                continue
            syms[i] = a + b
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] != -1:
                prev[nxt[j]] = i
            if prev[i] != -1:
                push(prev[i])
            push(i)
        ids = []
        i = 0
        while i != -1:
            p = syms[i]
            if p in self.vocab:
                ids.append(self.vocab[p])
            elif self.byte_fallback:
                for byte in p.encode("utf-8"):
                    ids.append(self.vocab.get("<0x%02X>" % byte, self.unk))
            else:
                ids.append(self.unk)
            i = nxt[i]
        return ids

    def encode(self, text):
        ids = []
        raw_toks = [(c, i) for c, i, norm in self.added if not norm]
        norm_toks = [(c, i) for c, i, norm in self.added if norm]
        for seg in self._split(text, raw_toks):
            if isinstance(seg, int):
                ids.append(seg)
                continue
            for seg2 in self._split(self.normalize(seg), norm_toks):
                ids.extend([seg2] if isinstance(seg2, int) else self.bpe(seg2))
        return ids

    def decode(self, ids, skip_special=True):
        toks = [self.inv[i] for i in ids if not (skip_special and i in self.added_ids)]
        for d in self.decoders:
            t = d["type"]
            if t == "Replace":
                toks = [x.replace(d["pattern"]["String"], d["content"]) for x in toks]
            elif t == "ByteFallback":
                out, buf = [], b""
                for x in toks:
                    if len(x) == 6 and x.startswith("<0x") and x.endswith(">"):
                        buf += bytes([int(x[3:5], 16)])
                        continue
                    if buf:
                        out.append(buf.decode("utf-8", errors="replace"))
                        buf = b""
                    out.append(x)
                if buf:
                    out.append(buf.decode("utf-8", errors="replace"))
                toks = out
            elif t == "Fuse":
                toks = ["".join(toks)]
            elif t == "Strip":
                c = d["content"]
                out = []
                for x in toks:
                    for _ in range(d["start"]):
                        if x.startswith(c):
                            x = x[len(c):]
                    for _ in range(d["stop"]):
                        if x.endswith(c):
                            x = x[:-len(c)]
                    out.append(x)
                toks = out
            else:
                raise ValueError(t)
        return "".join(toks)
