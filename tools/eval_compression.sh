#!/usr/bin/env bash
# Reproduces the quality table and plot in docs/compression.md: `kvserve eval` on the bundled
# model (held-out perplexity and passkey retrieval for full and every policy at budgets 64,
# 128, 256, 512), a gnuplot PNG of both, and the table spliced between the eval markers.
#   tools/eval_compression.sh [extra kvserve eval flags]
#   tools/eval_compression.sh --plot-only     # redraw the PNG from docs/compression_eval.tsv
# Needs: a built build/bin/kvserve (tools/build.sh) and gnuplot (Debian gnuplot-nox).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin=build/bin/kvserve
[ -x "$bin" ] || { echo "build first: tools/build.sh" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "gnuplot missing: apt-get install gnuplot-nox" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
plot_only=0
if [ "${1:-}" = "--plot-only" ]; then plot_only=1; shift; fi
if [ "$plot_only" = 0 ]; then
  "$bin" eval --model models/kvs-tiny --text tests/fixtures/heldout_long.txt --engine.threads 1 \
      --out-tsv docs/compression_eval.tsv "$@" > "$tmp/table.md"
fi

full_ppl=$(awk -F'\t' '$1=="full"{print $3}' docs/compression_eval.tsv)
full_acc=$(awk -F'\t' '$1=="full"{print 100*$5}' docs/compression_eval.tsv)
gnuplot <<GP
set terminal pngcairo size 1100,420 font ",10"
set output "docs/compression_eval.png"
set datafile separator "\t"
set multiplot layout 1,2 title "kvs-tiny: KV compression quality (tools/eval_compression.sh)" noenhanced
set logscale x 2
set xlabel "budget B (tokens kept)"
set key top right
set ylabel "held-out perplexity"
set title "perplexity (lower is better)"
plot for [p in "triattention streamingllm snapkv h2o"] "docs/compression_eval.tsv" \
       using (strcol(1) eq p ? \$2 : NaN):3 with linespoints title p, \
     $full_ppl with lines dashtype 2 lc rgb "black" title "full"
set ylabel "passkey accuracy (%)"
set title "passkey retrieval (higher is better)"
set yrange [0:100]
plot for [p in "triattention streamingllm snapkv h2o"] "docs/compression_eval.tsv" \
       using (strcol(1) eq p ? \$2 : NaN):(100*\$5) with linespoints title p, \
     $full_acc with lines dashtype 2 lc rgb "black" title "full"
unset multiplot
GP

if [ "$plot_only" = 1 ]; then echo "redrew docs/compression_eval.png"; exit 0; fi
python3 - "$tmp/table.md" <<'PY'
import sys, re
table = open(sys.argv[1]).read().strip()
path = "docs/compression.md"
doc = open(path).read()
begin, end = "<!-- eval:begin -->", "<!-- eval:end -->"
if begin not in doc or end not in doc:
    sys.exit("docs/compression.md lacks the eval markers")
head, rest = doc.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + "\n" + table + "\n" + end + tail)
PY
echo "wrote docs/compression_eval.tsv, docs/compression_eval.png and the table in docs/compression.md"
