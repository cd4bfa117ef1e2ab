#!/usr/bin/env bash
# kvserve against llama.cpp on the same quantized GGUF files (issue 37), on this machine's CPU.
# Both engines serve the very same file: kvserve `serve --model FILE.gguf`, llama.cpp through
# node-llama-cpp (bench/peer_llamacpp.sh sets it up). Prints, per model and type, the greedy
# agreement of the two engines and the Markdown table of bench/peer/peer_bench.mjs.
#
#   bench/peer_gguf.sh [--runs 3] [--threads 2] [--models 137m,1b] [--types Q8_0,Q4_K_M,Q6_K]
#                      [--prompt-len 512] [--decode-tokens 64] [--concurrency 32]
#
# Models (git-ignored build-peer/models, reused): random Llamas from bench/make_random_llama.py
# with the bundled tokenizer, 137m (hidden 768, 12 layers) and 1b (hidden 2048, 16 layers, 32/8
# heads, intermediate 8192: 0.98 B), each written as GGUF by `kvserve export-gguf` (our quantizer,
# llama.cpp's presets).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs=3 threads=2 models=137m,1b types=Q8_0,Q4_K_M,Q6_K prompt_len=512 decode_tokens=64 concurrency=32
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --types) types="$2"; shift 2 ;;
    --prompt-len) prompt_len="$2"; shift 2 ;;
    --decode-tokens) decode_tokens="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    *) echo "peer_gguf.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work="$root/build-peer"
nlc="$work/npm"
kvserve="$root/build/bin/kvserve"
py=/usr/bin/python3
[[ -x $py ]] || py=python3
# node-llama-cpp and kvserve exactly as peer_llamacpp.sh installs and builds them.
if [[ ! -d $nlc/node_modules/node-llama-cpp || ! -x $kvserve ]]; then
  "$root/bench/peer_llamacpp.sh" --runs 0 --models tiny >/dev/null
fi
mkdir -p "$work/models"
echo "Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "kvserve $(git -C "$root" rev-parse --short HEAD), llama.cpp via node-llama-cpp, $threads threads each"
status=0
for m in ${models//,/ }; do
  case "$m" in
    137m) shape=(--hidden 768 --layers 12 --heads 12 --kv-heads 4 --intermediate 2048) ;;
    1b) shape=(--hidden 2048 --layers 16 --heads 32 --kv-heads 8 --intermediate 8192) ;;
    *) echo "peer_gguf.sh: unknown model '$m' (137m, 1b)" >&2; exit 2 ;;
  esac
  dir="$work/models/random-$m"
  if [[ ! -f $dir/tokenizer.json ]]; then
    "$py" "$root/bench/make_random_llama.py" "$dir" "${shape[@]}" --tokenizer-from "$root/models/kvs-tiny" >&2
  fi
  for t in ${types//,/ }; do
    gguf="$work/models/random-$m-$t.gguf"
    [[ -f $gguf ]] || "$kvserve" export-gguf --model "$dir" --out "$gguf" --type "$t" >&2
    echo "### random Llama $m, $t ($(du -m "$gguf" | cut -f1) MiB)"
    node "$root/bench/peer/peer_bench.mjs" --nlc "$nlc" --kvserve "$kvserve" --model "$gguf" --gguf "$gguf" \
      --label "$m-$t" --threads "$threads" --runs "$runs" --prompt-len "$prompt_len" --agreement-only \
      --decode-tokens "$decode_tokens" --concurrency "$concurrency" \
      -- --max-num-batched-tokens "$((prompt_len > 2048 ? prompt_len : 2048))" \
      | tee "$work/peer-gguf-$m-$t.log" | grep -v ' run [0-9]* ' || status=$?
    echo
  done
done
exit "$status"
