// Serving load generator for kvserve's OpenAI HTTP API (issue 14): Poisson arrivals at a given
// rate or a fixed number of requests in flight, synthetic prompt and output lengths, streamed
// completions. Reports TTFT, TPOT, ITL and end-to-end latency (p50/p90/p99), request and token
// throughput, and goodput (requests/s that met the SLO). Progress on stderr while it runs;
// a Markdown table on stdout, JSON with --json. Prints figures, asserts nothing.
//
//   node bench/serve_load.mjs (--url http://H:P | --kvserve BIN [--model DIR] [--threads N])
//        [--mode poisson --rate R | --mode concurrency --concurrency C] [--requests N]
//        [--prompt-len 128 | 64:256] [--output-len 64 | 16:128] [--seed S]
//        [--slo-ttft-ms 500] [--slo-tpot-ms 50] [--json OUT.json] [--models A,B,...]
//        [-- extra kvserve serve flags]
//
// --models: request i names models[i mod n] in `model` (LoRA adapters, bench/lora_serve.sh);
// default: none (the served model).
//
// Lengths: a number, or LO:HI for uniform integers in [LO, HI]. Prompts are random token ids
// (5..2047: ordinary tokens of the bundled tokenizer), distinct per request, so the prefix
// cache does not help; every request generates exactly its output length (ignore_eos).
// Definitions (as in vLLM's serving benchmark): TTFT = first token - send; TPOT = (e2e - TTFT)
// / (output tokens - 1); ITL = gaps between token-carrying SSE events, an event with k tokens
// counting as k gaps of gap/k (kvserve coalesces tokens when steps outpace the stream).
import {writeFileSync} from "node:fs";

import {KvserveProcess} from "./peer/kvserve_process.mjs";

function parseArgs(argv) {
  const a = {mode: "concurrency", rate: 4, concurrency: 8, requests: 64, promptLen: "128", outputLen: "64",
             seed: 1, sloTtftMs: 500, sloTpotMs: 50, threads: 0, url: "", kvserve: "", model: "", json: "",
             models: "", extra: []};
  const num = new Set(["rate", "concurrency", "requests", "seed", "sloTtftMs", "sloTpotMs", "threads"]);
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    if (k === "--") { a.extra = argv.slice(i + 1); break; }
    const name = k.replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(name in a) || name === "extra" || argv[i + 1] === undefined) throw new Error(`bad argument ${k}`);
    a[name] = num.has(name) ? Number(argv[++i]) : argv[++i];
  }
  if (!a.url && !a.kvserve) throw new Error("--url or --kvserve is required");
  if (a.mode !== "poisson" && a.mode !== "concurrency") throw new Error(`--mode ${a.mode}: poisson|concurrency`);
  return a;
}

const now = () => Number(process.hrtime.bigint()) / 1e9;

function rng(seed) {
  let x = (seed * 2654435761) >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x / 4294967296;
  };
}

function lengthSampler(spec, rand) {
  const [lo, hi] = spec.includes(":") ? spec.split(":").map(Number) : [Number(spec), Number(spec)];
  if (!(lo >= 1 && hi >= lo)) throw new Error(`length ${spec}: expected N or LO:HI with 1 <= LO <= HI`);
  return () => lo + Math.floor(rand() * (hi - lo + 1));
}

function percentile(xs, p) {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((x, y) => x - y);
  const at = (s.length - 1) * p;
  const lo = Math.floor(at), hi = Math.ceil(at);
  return s[lo] + (s[hi] - s[lo]) * (at - lo);
}

async function oneRequest(server, spec) {
  const r = {prompt_tokens: spec.prompt.length, output_tokens: 0, itl: [], ok: true, error: ""};
  const t0 = now();
  let last = t0;
  try {
    r.output_tokens = await server.stream(
        {prompt: spec.prompt, max_tokens: spec.outputLen, temperature: 0, ignore_eos: true,
         ...(spec.model ? {model: spec.model} : {})},
        (k, t) => {
          if (r.ttft === undefined) {
            r.ttft = t - t0;
          } else {
            for (let i = 0; i < k; ++i) r.itl.push((t - last) / k);
          }
          last = t;
        });
  } catch (e) {
    r.ok = false;
    r.error = String(e.message ?? e);
  }
  r.e2e = now() - t0;
  if (r.ok && r.output_tokens > 1) r.tpot = (r.e2e - r.ttft) / (r.output_tokens - 1);
  return r;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const rand = rng(a.seed);
  const promptLen = lengthSampler(a.promptLen, rand), outputLen = lengthSampler(a.outputLen, rand);
  const models = a.models.split(",").filter(Boolean);
  const specs = Array.from({length: a.requests}, (_, i) => ({
    prompt: [1, ...Array.from({length: promptLen() - 1}, () => 5 + Math.floor(rand() * 2043))],
    outputLen: outputLen(), model: models.length ? models[i % models.length] : ""}));
  const server = a.url ? KvserveProcess.attach(a.url)
                       : await KvserveProcess.start(a.kvserve, a.model || undefined, a.threads, a.extra);
  const results = [];
  let finished = 0, tokens = 0;
  const start = now();
  const progress = setInterval(() => {
    const el = now() - start;
    process.stderr.write(`\r[serve_load] ${finished}/${a.requests} done, ${(tokens / el).toFixed(1)} tokens/s, ` +
                         `${el.toFixed(0)} s   `);
  }, 1000);
  const run = async (spec) => {
    const r = await oneRequest(server, spec);
    results.push(r);
    finished += 1;
    tokens += r.output_tokens;
  };
  try {
    if (a.mode === "concurrency") {
      let next = 0;
      await Promise.all(Array.from({length: Math.min(a.concurrency, specs.length)}, async () => {
        while (next < specs.length) await run(specs[next++]);
      }));
    } else {
      const inflight = [];
      let t = 0;
      for (const spec of specs) {
        t += -Math.log(1 - rand()) / a.rate;  // exponential gaps: Poisson arrivals
        const wait = start + t - now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait * 1000));
        inflight.push(run(spec));
      }
      await Promise.all(inflight);
    }
  } finally {
    clearInterval(progress);
    process.stderr.write("\n");
    await server.stop();
  }
  const duration = now() - start;
  const ok = results.filter((r) => r.ok);
  const good = ok.filter((r) => r.ttft * 1e3 <= a.sloTtftMs && (r.tpot ?? 0) * 1e3 <= a.sloTpotMs);
  const ms = (xs) => ({p50: percentile(xs, 0.5) * 1e3, p90: percentile(xs, 0.9) * 1e3, p99: percentile(xs, 0.99) * 1e3});
  const summary = {
    mode: a.mode, rate: a.mode === "poisson" ? a.rate : null, concurrency: a.mode === "concurrency" ? a.concurrency : null,
    requests: a.requests, failed: results.length - ok.length, duration_s: duration,
    prompt_len: a.promptLen, output_len: a.outputLen,
    request_throughput: ok.length / duration,
    output_token_throughput: ok.reduce((s, r) => s + r.output_tokens, 0) / duration,
    total_token_throughput: ok.reduce((s, r) => s + r.output_tokens + r.prompt_tokens, 0) / duration,
    slo: {ttft_ms: a.sloTtftMs, tpot_ms: a.sloTpotMs}, goodput: good.length / duration,
    ttft_ms: ms(ok.map((r) => r.ttft)), tpot_ms: ms(ok.filter((r) => r.tpot !== undefined).map((r) => r.tpot)),
    itl_ms: ms(ok.flatMap((r) => r.itl)), e2e_ms: ms(ok.map((r) => r.e2e)),
    errors: [...new Set(results.filter((r) => !r.ok).map((r) => r.error))].slice(0, 5),
  };
  const load = a.mode === "poisson" ? `Poisson ${a.rate} req/s` : `${a.concurrency} in flight`;
  console.log(`${load}, ${a.requests} requests (prompt ${a.promptLen}, output ${a.outputLen} tokens), ` +
              `${summary.failed} failed, ${duration.toFixed(1)} s\n`);
  console.log("| metric | p50 | p90 | p99 |");
  console.log("|---|---:|---:|---:|");
  for (const [name, key] of [["TTFT (ms)", "ttft_ms"], ["TPOT (ms)", "tpot_ms"], ["ITL (ms)", "itl_ms"], ["end-to-end (ms)", "e2e_ms"]]) {
    const v = summary[key];
    console.log(`| ${name} | ${v.p50.toFixed(1)} | ${v.p90.toFixed(1)} | ${v.p99.toFixed(1)} |`);
  }
  console.log(`\nthroughput: ${summary.request_throughput.toFixed(2)} req/s, ${summary.output_token_throughput.toFixed(1)} ` +
              `output tokens/s, ${summary.total_token_throughput.toFixed(1)} total tokens/s; goodput ` +
              `(TTFT <= ${a.sloTtftMs} ms and TPOT <= ${a.sloTpotMs} ms): ${summary.goodput.toFixed(2)} req/s ` +
              `(${good.length}/${ok.length} requests)`);
  if (summary.errors.length) console.log(`errors: ${summary.errors.join("; ")}`);
  if (a.json) writeFileSync(a.json, JSON.stringify(summary, null, 1));
  if (summary.failed) process.exitCode = 1;
}

main().catch((e) => { console.error(`serve_load: ${e.stack ?? e}`); process.exitCode = 1; });
