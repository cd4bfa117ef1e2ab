// Prompt processing over HTTP, side by side: one `kvserve serve` per binary (optionally with its
// own thread count, BIN:THREADS), then fresh random prompts of --prompt-len token ids sent to
// each server in turn, the order alternating every round (A B, B A, ...) so the machine's noise
// hits every side alike. A request is non-streamed with max_tokens 1, as bench/peer's prompt
// figure. Prints per binary the median milliseconds per prompt and tokens/s; the first two
// rounds are warm-up and not counted. Prints figures only.
//
//   node bench/prompt_ab.mjs --model DIR [--threads 2] [--rounds 32] [--prompt-len 512] BIN[:THREADS]...
//   node bench/prompt_ab.mjs --model models/kvs-tiny /tmp/kvserve_main build/bin/kvserve
import {KvserveProcess} from "./peer/kvserve_process.mjs";

const args = process.argv.slice(2);
const opt = {model: "", threads: 2, rounds: 32, promptLen: 512, bins: []};
for (let i = 0; i < args.length; ++i) {
  const k = args[i];
  if (k === "--model") opt.model = args[++i];
  else if (k === "--threads") opt.threads = Number(args[++i]);
  else if (k === "--rounds") opt.rounds = Number(args[++i]);
  else if (k === "--prompt-len") opt.promptLen = Number(args[++i]);
  else if (k.startsWith("--")) throw new Error(`unknown argument ${k}`);
  else opt.bins.push(k);
}
if (!opt.model || opt.bins.length === 0) throw new Error("usage: prompt_ab.mjs --model DIR BIN[:THREADS]...");

const now = () => Number(process.hrtime.bigint()) / 1e9;
let seed = 12345;  // fixed: reruns send the same prompts
const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const warmup = 2;

const servers = [];
try {
  for (const spec of opt.bins) {
    const [bin, threads] = spec.split(":");
    servers.push(await KvserveProcess.start(bin, opt.model, Number(threads ?? opt.threads),
                                            ["--max-num-batched-tokens", String(Math.max(2048, opt.promptLen))]));
  }
  const times = opt.bins.map(() => []);
  for (let round = 0; round < opt.rounds + warmup; ++round) {
    for (let j = 0; j < servers.length; ++j) {
      const k = round % 2 === 0 ? j : servers.length - 1 - j;
      // BOS, then ids clear of the special tokens; a fresh prompt each time (no prefix-cache hits).
      const ids = [1, ...Array.from({length: opt.promptLen - 1}, () => 3 + Math.floor(random() * 2000))];
      const t0 = now();
      await servers[k].post("/v1/completions", {prompt: ids, max_tokens: 1, temperature: 0, ignore_eos: true});
      if (round >= warmup) times[k].push(now() - t0);
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`| binary | ms per ${opt.promptLen}-token prompt, median (min-max) | tokens/s |`);
  console.log("|---|---:|---:|");
  for (let j = 0; j < servers.length; ++j) {
    const m = median(times[j]);
    console.log(`| ${opt.bins[j]} | ${(m * 1e3).toFixed(2)} (${(Math.min(...times[j]) * 1e3).toFixed(2)}-` +
                `${(Math.max(...times[j]) * 1e3).toFixed(2)}) | ${(opt.promptLen / m).toFixed(0)} |`);
  }
  console.log(`\n${opt.rounds} alternated rounds after ${warmup} warm-up rounds; load average ` +
              `${(await import("node:os")).loadavg().map((x) => x.toFixed(2)).join(" ")} at the end`);
} finally {
  for (const s of servers) await s.stop();
}
