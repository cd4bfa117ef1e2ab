#!/usr/bin/env python3
"""Medians of bench/decode_ab.sh output: per engine (A/B) and batch, the median tokens/s
over runs (wall | CPU time), the spread (min-max) and B/A.

    bench/decode_ab.sh A B 3 ... | tee ab.log; bench/ab_median.py ab.log
"""
import re
import statistics
import sys

rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"([AB]) run(\d+) \| (\d+) \| (\d+) \\\| (\d+) \|", line)
    if m:
        rows.setdefault((m[3], m[1]), []).append((int(m[4]), int(m[5])))
    m = re.match(r"([AB]) run(\d+) prefill: .*: (\d+) tokens/s \(wall\), (\d+) tokens/s", line)
    if m:
        rows.setdefault(("prefill", m[1]), []).append((int(m[3]), int(m[4])))
print("| batch | A wall (min-max) | B wall (min-max) | B/A wall | A CPU-time | B CPU-time | B/A CPU-time |")
print("|---|---:|---:|---:|---:|---:|---:|")
for what in sorted({k[0] for k in rows}, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0)):
    a, b = rows.get((what, "A"), []), rows.get((what, "B"), [])
    if not a or not b:
        continue
    aw, bw = statistics.median(x for x, _ in a), statistics.median(x for x, _ in b)
    ac, bc = statistics.median(y for _, y in a), statistics.median(y for _, y in b)
    print(f"| {what} | {aw:.0f} ({min(x for x, _ in a)}-{max(x for x, _ in a)}) | "
          f"{bw:.0f} ({min(x for x, _ in b)}-{max(x for x, _ in b)}) | {bw / aw:.2f}x | {ac:.0f} | {bc:.0f} | {bc / ac:.2f}x |")
