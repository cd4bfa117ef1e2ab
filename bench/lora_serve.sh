#!/usr/bin/env bash
# LoRA serving throughput (issue 39): output tokens/s of 32 concurrent streams spread round-robin
# over 1, 8 and 32 rank-16 adapters (every linear module: q, k, v, o, gate, up, down), against
# the base model alone, on one `kvserve serve` holding all 32 adapters. The scenarios alternate
# run by run (the first one rotates); medians of --runs. Prints figures, asserts nothing.
#
#   bench/lora_serve.sh [--runs 3] [--threads 2] [--requests 64] [--prompt-len 128] [--output-len 64]
#
# Model: the random 124.7 M Llama of bench/peer_gguf.sh (build-peer/models/random-137m, hidden 768,
# 12 layers, 12/4 heads, intermediate 2048), made on first use by bench/make_random_llama.py;
# adapters by tests/support/peft/peft_adapter.mjs (seeded) into build-peer/lora/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs=3 threads=2 requests=64 prompt_len=128 output_len=64
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --prompt-len) prompt_len="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    *) echo "lora_serve.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
kvserve="$root/build/bin/kvserve"
[[ -x $kvserve ]] || (cd "$root" && cmake --build build --target kvserve >&2)
model="$root/build-peer/models/random-137m"
if [[ ! -f $model/tokenizer.json ]]; then
  python3 "$root/bench/make_random_llama.py" "$model" --hidden 768 --layers 12 --heads 12 --kv-heads 4 \
    --intermediate 2048 --tokenizer-from "$root/models/kvs-tiny" >&2
fi
lora="$root/build-peer/lora"
node --input-type=module -e "
  import { llamaModules, writeAdapter } from '$root/tests/support/peft/peft_adapter.mjs';
  import { existsSync } from 'node:fs';
  const targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];
  const modules = llamaModules({ layers: 12, hidden: 768, qOut: 768, kvOut: 256, intermediate: 2048, targets });
  for (let i = 0; i < 32; ++i) {
    const dir = '$lora/r16-' + i;
    if (!existsSync(dir + '/adapter_model.safetensors'))
      writeAdapter(dir, { rank: 16, alpha: 32, modules, targets, seed: 100 + i, scale: 0.05 });
  }"
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
adapters=$(for i in $(seq 0 31); do printf '"a%d": "%s/r16-%d",' "$i" "$lora" "$i"; done)
cat > "$work/config.json" <<JSON
{"model": {"path": "$model"}, "engine": {"threads": $threads}, "logging": {"level": "warn"},
 "server": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0},
 "scheduler": {"max_num_seqs": 32},
 "lora": {"max_loras": 32, "max_cpu_loras": 32, "max_lora_rank": 16, "adapters": {${adapters%,}}}}
JSON
"$kvserve" serve --config "$work/config.json" > "$work/out" 2> "$work/err" &
pid=$!
for _ in $(seq 1 600); do
  grep -q "kvserve listening" "$work/out" && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/err" >&2; exit 1; }
  sleep 0.2
done
url="http://$(sed -n 's/.*kvserve listening http=\([^ ]*\) grpc=.*/\1/p' "$work/out")"
echo "Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M UTC');" \
     "kvserve $(git -C "$root" rev-parse --short HEAD), --threads $threads, load average $(cut -d' ' -f1-3 /proc/loadavg)"
names=(base 1 8 32)
models_for() {
  case "$1" in
    base) echo "" ;;
    *) local n=$1 out=""; for i in $(seq 0 $((n - 1))); do out+="a$i,"; done; echo "${out%,}" ;;
  esac
}
declare -A figures
for run in $(seq 1 "$runs"); do
  for k in 0 1 2 3; do
    s=${names[$(((k + run - 1) % 4))]}
    tps=$(node "$root/bench/serve_load.mjs" --url "$url" --mode concurrency --concurrency 32 \
          --requests "$requests" --prompt-len "$prompt_len" --output-len "$output_len" --seed "$run" \
          --models "$(models_for "$s")" --json "$work/r.json" 2>/dev/null >/dev/null &&
          node -p "require('$work/r.json').output_token_throughput.toFixed(1)")
    echo "run $run, $s: $tps output tokens/s" >&2
    figures[$s]+="$tps "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
base=$(echo "${figures[base]}" | median)
echo
echo "| 32 streams over | output tokens/s (median of $runs) | vs base |"
echo "|---|---:|---:|"
for s in "${names[@]}"; do
  m=$(echo "${figures[$s]}" | median)
  label=$([[ $s == base ]] && echo "the base model alone" || echo "$s adapter(s) of rank 16")
  echo "| $label | $m | $(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.2fx", a / b}') |"
done
