#!/usr/bin/env bash
# kvserve against llama.cpp on the same weights, on this machine's CPU (issue 14). Prints the
# machine, then per model a Markdown table of tokens/s with the ratios (bench/peer/peer_bench.mjs
# explains each figure). Before timing anything it checks that both engines produce the same
# greedy tokens; if they do not, it stops with status 3.
#
#   bench/peer_llamacpp.sh [--runs 3] [--threads 2] [--models tiny,random] [--prompt-len 512]
#                          [--decode-tokens 64] [--concurrency 8,32]
#
# What it sets up itself (all under the git-ignored build-peer/, reused when present):
# - node-llama-cpp 3.21.1 from npm with its prebuilt Linux CPU binary (llama.cpp release
#   bundled by that package); install scripts are skipped and nothing is compiled or downloaded
#   beyond the npm packages;
# - models: models/kvs-tiny as is, and a random-weight Llama (bench/make_random_llama.py,
#   124.7 M parameters, fp32), each exported to GGUF by tools/export_gguf/export_gguf.py;
# - kvserve: build/bin/kvserve, built if missing (cmake preset `default`).
# Needs node >= 20, npm and python3 with numpy (Debian: python3-numpy).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs=3 threads=2 models=tiny,random prompt_len=512 decode_tokens=64 concurrency=8,32
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --prompt-len) prompt_len="$2"; shift 2 ;;
    --decode-tokens) decode_tokens="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    *) echo "peer_llamacpp.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

nlc_version=3.21.1
work="$root/build-peer"
py=/usr/bin/python3
[[ -x $py ]] || py=python3
mkdir -p "$work/models"

# --- node-llama-cpp, pinned, prebuilt CPU binary only.
case "$(uname -m)" in
  x86_64) platform=linux-x64 ;;
  aarch64) platform=linux-arm64 ;;
  *) echo "peer_llamacpp.sh: no prebuilt node-llama-cpp CPU binary for $(uname -m)" >&2; exit 2 ;;
esac
nlc="$work/npm"
have="$(node -p "try{require('$nlc/node_modules/node-llama-cpp/package.json').version}catch{''}" 2>/dev/null || true)"
if [[ $have != "$nlc_version" || ! -d $nlc/node_modules/@node-llama-cpp/$platform ]]; then
  echo "installing node-llama-cpp $nlc_version ($platform) into $nlc" >&2
  mkdir -p "$nlc"
  echo '{"name": "kvserve-peer-bench", "private": true}' > "$nlc/package.json"
  # --omit=optional: not the CUDA/Vulkan/other-OS binaries; the one CPU binary is named instead.
  (cd "$nlc" && npm install --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error \
    "node-llama-cpp@$nlc_version" "@node-llama-cpp/$platform@$nlc_version" >&2)
fi
llama_release="$(node -p "require('$nlc/node_modules/node-llama-cpp/llama/binariesGithubRelease.json').release" 2>/dev/null || echo unknown)"

# --- kvserve.
kvserve="$root/build/bin/kvserve"
if [[ ! -x $kvserve ]]; then
  (cd "$root" && { [[ -f build/build.ninja ]] || cmake --preset default >&2; } && cmake --build build --target kvserve >&2)
fi

# --- models and their GGUF copies.
declare -a dirs labels
for m in ${models//,/ }; do
  case "$m" in
    tiny) dirs+=("$root/models/kvs-tiny"); labels+=("kvs-tiny (2.0 M, fp32)") ;;
    random)
      if [[ ! -f $work/models/llama125m/tokenizer.json ]]; then
        "$py" "$root/bench/make_random_llama.py" "$work/models/llama125m" >&2
      fi
      dirs+=("$work/models/llama125m"); labels+=("random Llama (124.7 M, fp32)") ;;
    *) echo "peer_llamacpp.sh: unknown model '$m' (tiny, random)" >&2; exit 2 ;;
  esac
done

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "Machine: $cpu, $(nproc) CPUs ($(lscpu | sed -n 's/^Flags:.*\(avx512_bf16\).*/AVX-512 BF16/p' | head -1)), $(free -g | awk '/^Mem:/{print $2}') GB;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg) at start; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "kvserve $(git -C "$root" rev-parse --short HEAD) ($(git -C "$root" status --porcelain | grep -q . && echo 'with local changes' || echo clean)), HTTP API, --threads $threads, fp32 KV;" \
     "llama.cpp $llama_release via node-llama-cpp $nlc_version ($platform prebuilt), in-process, $threads threads, fp32 KV, batch 512"
echo

status=0
for i in "${!dirs[@]}"; do
  dir="${dirs[$i]}"
  gguf="$work/models/$(basename "$dir")-f32.gguf"
  if [[ ! -f $gguf || $gguf -ot $dir/model.safetensors ]]; then
    "$py" "$root/tools/export_gguf/export_gguf.py" "$dir" "$gguf" --dtype f32 >&2
  fi
  echo "### ${labels[$i]}"
  node "$root/bench/peer/peer_bench.mjs" --nlc "$nlc" --kvserve "$kvserve" --model "$dir" --gguf "$gguf" \
    --label "$(basename "$dir")" --threads "$threads" --runs "$runs" --prompt-len "$prompt_len" \
    --decode-tokens "$decode_tokens" --concurrency "$concurrency" \
    -- --max-num-batched-tokens "$((prompt_len > 2048 ? prompt_len : 2048))" \
    | tee "$work/peer-$(basename "$dir").log" | grep -v ' run [0-9]* ' || status=$?
  echo
done
exit "$status"
