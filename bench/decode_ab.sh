#!/usr/bin/env bash
# Side-by-side A/B of two decode_bench binaries (e.g. main's and this branch's), alternating
# A and B run by run so the machine's noise hits both alike. Prints every run's table rows,
# tagged; take medians over the runs (docs/benchmarks.md).
#
#   bench/decode_ab.sh A_BIN B_BIN [runs] [decode_bench args...]
#   bench/decode_ab.sh /tmp/decode_bench_main build/bin/decode_bench 3 --threads 2 --repeats 3
#
# A_ARGS / B_ARGS (environment, split on spaces) are added to one side only, e.g. one binary
# with itself: A_ARGS="--threads 1" B_ARGS="--threads 2" bench/decode_ab.sh BIN BIN 3 ...
set -euo pipefail
a="$1"; b="$2"; runs="${3:-3}"; shift 3 || true
for i in $(seq 1 "$runs"); do
  for tag in A B; do
    bin="$a" extra="${A_ARGS:-}"; [[ $tag == B ]] && bin="$b" extra="${B_ARGS:-}"
    # shellcheck disable=SC2086  # extra is a list of flags
    "$bin" "$@" $extra 2>&1 | grep -E '^\| [0-9]|^prefill' | sed "s/^/$tag run$i /"
  done
done
