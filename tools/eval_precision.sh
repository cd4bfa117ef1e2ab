#!/usr/bin/env bash
# Reproduces the KV precision table and Pareto plot in docs/compression.md (issue 18) with
# `kvserve eval` in decode-time mode on the bundled model: for each K/V dtype pair (and block
# size / int4 group), the full KV and TriAttention at one budget, and TriAttention with
# demotion schedules (importance-aware mixed precision: --demote, the next most important
# tokens kept in int8 / int4 tiers instead of evicted), with held-out perplexity, passkey
# accuracy and KV bytes per token (peak bytes of the sequence, scales and demotion tiers
# included, over the tokens it has seen: precision and eviction together).
#   tools/eval_precision.sh [extra kvserve eval flags]
#   tools/eval_precision.sh --demotion-only   # rerun only the demotion rows, keep the others
#   tools/eval_precision.sh --lowrank-only    # rerun only the low-rank key rows, keep the others
#   tools/eval_precision.sh --plot-only
# Low-rank key rows (a sixth config field RANK:COEFF_DTYPE:V_DTYPE[:pca], default the
# query-aware basis) demote into the low-rank key tier (`lowrank:N` in --demote; cache.lowrank_key_rank / lowrank_k_dtype / lowrank_v_dtype,
# the basis models/kvs-tiny/key_basis.bin from `kvserve calibrate`).
# Needs: a built build/bin/kvserve (tools/build.sh) and gnuplot (Debian gnuplot-nox).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin=build/bin/kvserve
[ -x "$bin" ] || { echo "build first: tools/build.sh" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "gnuplot missing: apt-get install gnuplot-nox" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tsv=docs/compression_eval_precision.tsv png=docs/compression_eval_precision.png
plot_only=0 demotion_only=0 lowrank_only=0
if [ "${1:-}" = --plot-only ]; then plot_only=1; shift; fi
if [ "${1:-}" = --demotion-only ]; then demotion_only=1; shift; fi
if [ "${1:-}" = --lowrank-only ]; then lowrank_only=1; shift; fi
budget=128
# k_dtype v_dtype block_size int4_group demote-schedule ("-": none; the pool's precision for
# the `budget` kept tokens, the tiers' for the demoted ones). The last schedule holds every
# token of the 1,025-token perplexity sequences (128 + 384 + 640): demotion without eviction.
configs=(
  "fp32 fp32 16 32 -" "bf16 bf16 16 32 -" "fp16 fp16 16 32 -" "int8 int8 16 32 -" "fp8_e4m3 fp8_e4m3 16 32 -"
  "bf16 int4 16 32 -" "int8 int4 16 32 -" "int4 int8 16 32 -" "int4 int4 16 32 -" "int4 int4 32 64 -"
  "fp32 fp32 16 32 int8:128,int4:256" "fp32 fp32 16 32 int4:384" "bf16 bf16 16 32 int8:128,int4:256"
  "bf16 bf16 16 32 int4:384" "int8 int8 16 32 int4:384" "fp32 fp32 16 32 int8:384,int4:640"
  # Low-rank keys (head_dim 48): the rank alone (fp32 coefficients and values, every token
  # kept: 128 + 1024 >= 1,025) with the query-aware basis and, at the ranks that retrieve,
  # plain PCA; then practical tiers (bf16 coefficients, int4 values) without and with eviction.
  "fp32 fp32 16 32 lowrank:1024 8:fp32:fp32" "fp32 fp32 16 32 lowrank:1024 16:fp32:fp32"
  "fp32 fp32 16 32 lowrank:1024 24:fp32:fp32" "fp32 fp32 16 32 lowrank:1024 32:fp32:fp32"
  "fp32 fp32 16 32 lowrank:1024 40:fp32:fp32" "fp32 fp32 16 32 lowrank:1024 44:fp32:fp32"
  "fp32 fp32 16 32 lowrank:1024 16:fp32:fp32:pca" "fp32 fp32 16 32 lowrank:1024 40:fp32:fp32:pca"
  "fp32 fp32 16 32 lowrank:1024 44:fp32:fp32:pca"
  "bf16 bf16 16 32 lowrank:1024 44:bf16:int4" "bf16 bf16 16 32 lowrank:384 44:bf16:int4"
  "bf16 bf16 16 32 lowrank:384 16:bf16:int4"
)
header='k_dtype\tv_dtype\tblock\tgroup\tdemote\tpolicy\tbudget\tppl\tpasskey_acc\tbytes_per_token\n'
if [ "$plot_only" = 0 ]; then
  if [ "$demotion_only" = 1 ]; then
    # Keep the rows without demotion (older files have no demote column: add it).
    awk -F'\t' -v OFS='\t' 'NR == 1 {next} NF == 9 {print $1, $2, $3, $4, "-", $5, $6, $7, $8, $9; next}
                              $5 == "-" {print}' "$tsv" > "$tmp/keep.tsv"
  fi
  if [ "$lowrank_only" = 1 ]; then
    awk -F'\t' 'NR > 1 && $5 !~ /^lowrank/' "$tsv" > "$tmp/keep.tsv"
  fi
  printf "$header" > "$tsv"
  [ "$demotion_only" = 1 ] || [ "$lowrank_only" = 1 ] && cat "$tmp/keep.tsv" >> "$tsv"
  for c in "${configs[@]}"; do
    read -r k v bs g d lr <<<"$c"
    if [ "$demotion_only" = 1 ] && [ "$d" = - ]; then continue; fi
    if [ "$lowrank_only" = 1 ] && [ -z "${lr:-}" ]; then continue; fi
    demote=() lowrank=()
    [ "$d" != - ] && demote=(--demote "$d")
    if [ -n "${lr:-}" ]; then
      IFS=: read -r rank kd vd basis <<<"$lr"
      basis="${basis:-query}"
      qa=true
      [ "$basis" = pca ] && qa=false
      lowrank=(--cache.demote_kv_bytes 1048576 --cache.lowrank_key_rank "$rank" --cache.lowrank_k_dtype "$kd"
               --cache.lowrank_v_dtype "$vd" --cache.lowrank_query_aware "$qa")
      d="${d/lowrank/lowrank$rank $basis ($kd/$vd)}"
    fi
    "$bin" eval --model models/kvs-tiny --text tests/fixtures/heldout_long.txt --engine.threads 1 \
        --cache.k_dtype "$k" --cache.v_dtype "$v" --cache.block_size "$bs" --cache.kv_int4_group "$g" \
        --mode decode --filler 512 --passkey 20 --ppl-sequences 4 --ppl-window 1024 \
        --policies triattention --budgets "$budget" "${demote[@]}" "${lowrank[@]}" --out-tsv "$tmp/one.tsv" "$@" > /dev/null
    # one.tsv: policy budget ppl ppl_ratio passkey_acc passkey_ratio key_held bytes_per_token. With a
    # schedule, the `full` row repeats the pool's own and is left out.
    awk -F'\t' -v k="$k" -v v="$v" -v bs="$bs" -v g="$g" -v d="$d" \
        'NR>1 && (d == "-" || $1 != "full") {printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k, v, bs, g, d, $1, $2, $3, $5, $8}' \
        "$tmp/one.tsv" >> "$tsv"
  done
fi

gnuplot <<GP
set terminal pngcairo size 900,520 font ",10"
set output "$png"
set datafile separator "\t"
set termoption noenhanced
set title "kvs-tiny: KV bytes per token vs held-out perplexity (decode time, tools/eval_precision.sh)" noenhanced
set logscale x 2
set xlabel "KV bytes per token seen (peak, scales included)"
set ylabel "held-out perplexity"
set key top right noenhanced
plot "$tsv" using (strcol(6) eq "full" ? \$10 : NaN):8:(sprintf("%s/%s b%s", strcol(1), strcol(2), strcol(3))) \
       with labels point pt 7 offset char 1,0.5 font ",7" title "full KV (precision only)", \
     "$tsv" using (strcol(6) eq "triattention" && strcol(5) eq "-" ? \$10 : NaN):8:(sprintf("%s/%s", strcol(1), strcol(2))) \
       with labels point pt 5 offset char 1,-0.5 font ",7" title "TriAttention B=$budget + precision", \
     "$tsv" using (strcol(5) ne "-" && strstrt(strcol(5), "lowrank") == 0 ? \$10 : NaN):8:(sprintf("%s/%s + %s", strcol(1), strcol(2), strcol(5))) \
       with labels point pt 9 lc rgb "dark-green" offset char 1,1 font ",7" title "TriAttention B=$budget + demotion (int8/int4 tiers)", \
     "$tsv" using (strstrt(strcol(5), "lowrank") > 0 ? \$10 : NaN):8:(sprintf("%s/%s + %s", strcol(1), strcol(2), strcol(5))) \
       with labels point pt 11 lc rgb "dark-red" offset char 1,-1 font ",7" title "TriAttention B=$budget + low-rank key tier", \
     "$tsv" using ((strcol(1) eq "fp32" || strcol(1) eq "bf16") && strcol(1) eq strcol(2) && strcol(6) eq "full" ? \$10 : NaN):8 \
       with points pt 6 ps 3 lc rgb "black" title "fp32 and bf16 baselines"
GP

if [ "$plot_only" = 1 ]; then echo "redrew $png"; exit 0; fi
python3 - "$tsv" <<'PY'
import sys, csv
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def find(k, v, bs, pol):
    return next(r for r in rows if r["k_dtype"] == k and r["v_dtype"] == v and r["block"] == bs and r["policy"] == pol
                and r["demote"] == "-")
base = find("fp32", "fp32", "16", "full")
bf16 = float(find("bf16", "bf16", "16", "full")["bytes_per_token"])
out = ["| K / V | block, int4 group | policy | demoted tiers | KV bytes/token | vs bf16 | perplexity | vs fp32 | passkey |",
       "|---|---|---|---|---:|---:|---:|---:|---:|"]
for r in rows:
    b = float(r["bytes_per_token"]); p = float(r["ppl"])
    mark = " (fp32 baseline)" if r is base else (" (bf16 baseline)" if r["k_dtype"] == r["v_dtype"] == "bf16" and r["policy"] == "full" else "")
    pol = "full" if r["policy"] == "full" else f'{r["policy"]} B={r["budget"]}'
    tiers = "-" if r["demote"] == "-" else r["demote"].replace(",", ", ")
    out.append(f'| {r["k_dtype"]} / {r["v_dtype"]}{mark} | {r["block"]}, {r["group"]} | {pol} | {tiers} | {b:.1f} | {bf16 / b:.2f}x | '
               f'{p:.3f} | {100 * (p / float(base["ppl"]) - 1):+.2f}% | {100 * float(r["passkey_acc"]):.0f}% |')
table = "\n".join(out)
path = "docs/compression.md"
doc = open(path).read()
begin, end = "<!-- eval-precision:begin -->", "<!-- eval-precision:end -->"
if begin not in doc or end not in doc:
    sys.exit("docs/compression.md lacks the eval-precision markers")
head, rest = doc.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + "\n" + table + "\n" + end + tail)
PY
echo "wrote $tsv, $png and the table in docs/compression.md"
