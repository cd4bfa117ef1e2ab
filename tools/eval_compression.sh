#!/usr/bin/env bash
# Reproduces the quality tables and plots in docs/compression.md with `kvserve eval` on the
# bundled model.
#   tools/eval_compression.sh [extra kvserve eval flags]           decode-time table (default)
#   tools/eval_compression.sh --prefill [extra flags]             the prefill-time table
#   tools/eval_compression.sh --plot-only [--prefill]             redraw the PNG from the TSV
# Decode-time (issue 15): teacher forcing one decode step per token, BOS the only (protected)
# prompt; passkey at a random depth of --filler tokens and held-out perplexity, for full,
# every policy at the budgets, and the TriAttention variants (per-layer selection, trig-only,
# norm-only, max over offsets, the vLLM port's recent window) at the ablation budget. Sized to take about 15 minutes on a
# busy 2-core machine (kvs-tiny, one thread).
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
mode=decode
while [ $# -gt 0 ]; do
  case "$1" in
    --plot-only) plot_only=1; shift ;;
    --prefill) mode=prefill; shift ;;
    *) break ;;
  esac
done
if [ "$mode" = decode ]; then
  tsv=docs/compression_eval_decode.tsv png=docs/compression_eval_decode.png marker=eval-decode
  title="kvs-tiny: decode-time KV compression (teacher forcing, tools/eval_compression.sh)"
  flags=(--mode decode --filler 512 --passkey 60 --ppl-sequences 4 --ppl-window 1024 --budgets 64,96,128,256
         --policies triattention,triattention-perlayer,streamingllm,snapkv,h2o,triattention-trig,triattention-norm,triattention-max,triattention-window
         --ablation-budgets 128)
else
  tsv=docs/compression_eval.tsv png=docs/compression_eval.png marker=eval
  title="kvs-tiny: prefill-time KV compression (tools/eval_compression.sh --prefill)"
  flags=(--mode prefill)
fi
if [ "$plot_only" = 0 ]; then
  "$bin" eval --model models/kvs-tiny --text tests/fixtures/heldout_long.txt --engine.threads 1 \
      --out-tsv "$tsv" "${flags[@]}" "$@" > "$tmp/table.md"
fi

full_ppl=$(awk -F'\t' '$1=="full"{print $3}' "$tsv")
full_acc=$(awk -F'\t' '$1=="full"{print 100*$5}' "$tsv")
gnuplot <<GP
set terminal pngcairo size 1100,420 font ",10"
set output "$png"
set datafile separator "\t"
set multiplot layout 1,2 title "$title" noenhanced
set logscale x 2
set xlabel "budget B (tokens kept)"
set key top right noenhanced
set ylabel "held-out perplexity"
set title "perplexity (lower is better)"
plot for [p in "triattention triattention-perlayer streamingllm snapkv h2o"] "$tsv" \
       using (strcol(1) eq p ? \$2 : NaN):3 with linespoints title p, \
     $full_ppl with lines dashtype 2 lc rgb "black" title "full"
set ylabel "passkey accuracy (%)"
set title "passkey retrieval (higher is better)"
set yrange [0:100]
plot for [p in "triattention triattention-perlayer streamingllm snapkv h2o"] "$tsv" \
       using (strcol(1) eq p ? \$2 : NaN):(100*\$5) with linespoints title p, \
     $full_acc with lines dashtype 2 lc rgb "black" title "full"
unset multiplot
GP

if [ "$plot_only" = 1 ]; then echo "redrew $png"; exit 0; fi
python3 - "$tmp/table.md" "$marker" <<'PY'
import sys
table = open(sys.argv[1]).read().strip()
marker = sys.argv[2]
path = "docs/compression.md"
doc = open(path).read()
begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
if begin not in doc or end not in doc:
    sys.exit(f"docs/compression.md lacks the {marker} markers")
head, rest = doc.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + "\n" + table + "\n" + end + tail)
PY
echo "wrote $tsv, $png and the table in docs/compression.md"
