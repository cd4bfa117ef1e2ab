#!/usr/bin/env bash
# A random-weight GGUF with Llama-3.1-8B's exact shape (hidden 4096, 32 layers, 32/8 heads of
# 128, intermediate 14336, vocab 128256) served by `kvserve serve` on this machine: start-up
# time and peak RSS (from the daemon's log), then batch-1 decode tokens/s over HTTP (median of
# --runs streams of --tokens tokens each, timed from the first streamed token to the last).
# Prints figures only (docs/benchmarks.md). The file (~4.6 GiB for Q4_K_M) is written by
# gguf_write_random into the git-ignored build-peer/models and reused.
#
#   bench/gguf_8b.sh [--type Q4_K_M] [--threads 2] [--tokens 32] [--runs 3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
type=Q4_K_M threads=2 tokens=32 runs=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --type) type="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    *) echo "gguf_8b.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin="$root/build/bin"
[[ -x $bin/kvserve && -x $bin/gguf_write_random ]] || cmake --build "$root/build" --target kvserve gguf_write_random >&2
work="$root/build-peer/models"
mkdir -p "$work"
gguf="$work/llama3-8b-random-$type.gguf"
if [[ ! -f $gguf ]]; then
  /usr/bin/time -f "written in %e s, peak RSS %M KiB" "$bin/gguf_write_random" "$gguf" --type "$type" \
    --shape llama3-8b --tokenizer "$root/models/kvs-tiny/tokenizer.json" >&2
fi
echo "Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, $(free -g | awk '/^Mem:/{print $2}') GB"
echo "file: $(basename "$gguf"), $(du -m "$gguf" | cut -f1) MiB"
log="$(mktemp)"
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true  # a cold start when allowed
"$bin/kvserve" serve --model "$gguf" --host 127.0.0.1 --http-port 0 --grpc-port 0 --threads "$threads" \
  --max-num-seqs 4 > "$log.out" 2> "$log" &
pid=$!
for _ in $(seq 600); do grep -q "listening" "$log.out" 2>/dev/null && break; sleep 1; done
port="$(sed -n 's/.*http=[^:]*:\([0-9]*\).*/\1/p' "$log.out" | head -1)"
grep -o "started in.*" "$log" | head -1
node - "$port" "$tokens" "$runs" <<'JS'
const [port, tokens, runs] = process.argv.slice(2).map(Number);
const rates = [];
for (let r = 0; r < runs; ++r) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt: `Run ${r}: in the beginning`, max_tokens: tokens, temperature: 0,
                          ignore_eos: true, stream: true})});
  const reader = res.body.getReader();
  let first = 0, last = 0, n = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    const chunks = new TextDecoder().decode(value).split("\n").filter((l) => l.startsWith("data: {"));
    for (const _ of chunks) { const t = performance.now(); if (!first) first = t; last = t; ++n; }
  }
  rates.push((n - 1) / ((last - first) / 1000));
}
rates.sort((a, b) => a - b);
console.log(`batch-1 decode: ${rates[Math.floor(rates.length / 2)].toFixed(2)} tokens/s (median of ${runs}: ${rates.map((x) => x.toFixed(2)).join(", ")})`);
JS
echo "peak RSS after decoding: $(awk '/VmHWM/{printf "%.0f MiB", $2/1024}' /proc/$pid/status)"
