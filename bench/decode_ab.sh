#!/usr/bin/env bash
# Side-by-side A/B of two decode_bench binaries (e.g. main's and this branch's), alternating
# A and B run by run so the machine's noise hits both alike. Prints every run's table rows,
# tagged; take medians over the runs (docs/benchmarks.md).
#
#   bench/decode_ab.sh A_BIN B_BIN [runs] [decode_bench args...]
#   bench/decode_ab.sh /tmp/decode_bench_main build/bin/decode_bench 3 --threads 2 --repeats 3
set -euo pipefail
a="$1"; b="$2"; runs="${3:-3}"; shift 3 || true
for i in $(seq 1 "$runs"); do
  for tag in A B; do
    bin="$a"; [[ $tag == B ]] && bin="$b"
    "$bin" "$@" 2>&1 | grep -E '^\| [0-9]|^prefill' | sed "s/^/$tag run$i /"
  done
done
