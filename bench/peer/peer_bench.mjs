// kvserve (over its OpenAI HTTP API) against llama.cpp (in-process through node-llama-cpp's
// prebuilt CPU binary) on the same weights: kvserve serves an HF directory, llama.cpp the GGUF
// that tools/export_gguf wrote from it. Driven by bench/peer_llamacpp.sh; prints figures, asserts
// nothing about speed.
//
// 1. Correctness first: both engines get the same prompt token ids (kvserve's tokenizer) and
//    must produce the same greedy tokens (ids, not text). Any difference stops the run before
//    anything is timed; the exit status is 3.
// 2. Figures, each scenario alternating the engines run by run (the first engine alternates too),
//    median over --runs:
//    - prompt: one fresh prompt of --prompt-len random token ids, tokens/s of the prefill
//      (kvserve: a non-streamed request with max_tokens 1, so HTTP and one sampled token count
//      against it; llama.cpp: evaluating the prompt without sampling);
//    - decode@1: one sequence, 16-token prompt, --decode-tokens greedy tokens;
//    - decode@C for each C in --concurrency: C sequences at once, each a distinct 16-token
//      prompt and --decode-tokens tokens; aggregate tokens/s of the decode steps only.
//      llama.cpp: from the moment every sequence has its first token to the last token (tokens
//      counted in that window). kvserve: C requests of 1 token and C of --decode-tokens tokens,
//      (C * (decode_tokens - 1)) / (difference of the two wall times); both exclude the prefill.
//    Prompts differ between runs (no prefix-cache hits in kvserve).
//
//   node bench/peer/peer_bench.mjs --nlc DIR --kvserve BIN --model DIR --gguf FILE [--label NAME]
//        [--threads 2] [--runs 3] [--prompt-len 512] [--decode-tokens 64] [--concurrency 8,32]
//        [--check-tokens 32] [--json OUT.json] [--agreement-only] [-- extra kvserve serve flags]
//
// --agreement-only (quantized GGUF files, both engines serving the same file): a greedy
// difference is reported, not fatal (bench/peer_gguf.sh).
import {writeFileSync} from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

import {KvserveProcess} from "./kvserve_process.mjs";

function parseArgs(argv) {
  const a = {threads: 2, runs: 3, promptLen: 512, decodeTokens: 64, concurrency: [8, 32], checkTokens: 32,
             label: "", json: "", extra: [], agreementOnly: false};
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i], v = argv[i + 1];
    if (k === "--") { a.extra = argv.slice(i + 1); break; }
    if (k === "--agreement-only") { a.agreementOnly = true; continue; }
    const set = (name, conv = (x) => x) => { if (v === undefined) throw new Error(`${k} needs a value`); a[name] = conv(v); ++i; };
    switch (k) {
      case "--nlc": set("nlc"); break;
      case "--kvserve": set("kvserve"); break;
      case "--model": set("model"); break;
      case "--gguf": set("gguf"); break;
      case "--label": set("label"); break;
      case "--json": set("json"); break;
      case "--threads": set("threads", Number); break;
      case "--runs": set("runs", Number); break;
      case "--prompt-len": set("promptLen", Number); break;
      case "--decode-tokens": set("decodeTokens", Number); break;
      case "--check-tokens": set("checkTokens", Number); break;
      case "--concurrency": set("concurrency", (x) => x.split(",").filter(Boolean).map(Number)); break;
      default: throw new Error(`unknown argument ${k}`);
    }
  }
  for (const need of ["nlc", "kvserve", "model", "gguf"]) if (!a[need]) throw new Error(`--${need} is required`);
  return a;
}

const now = () => Number(process.hrtime.bigint()) / 1e9;
// Median of the finite values (a run without a figure is NaN and left out).
const median = (xs) => {
  const s = xs.filter(Number.isFinite).sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length === 0 ? NaN : s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// Deterministic prompt token ids (xorshift), drawn from the ordinary tokens 5..min(vocab, 2048).
function promptIds(seed, n, vocab) {
  let x = (seed * 2654435761) >>> 0 || 1;
  const hi = Math.min(vocab, 2048), out = [];
  for (let i = 0; i < n; ++i) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    out.push(5 + (x % (hi - 5)));
  }
  return out;
}

// ---------------------------------------------------------------- llama.cpp in-process

class LlamaCpp {
  static async start(nlcDir, gguf, threads) {
    const mod = await import(pathToFileURL(path.join(nlcDir, "node_modules/node-llama-cpp/dist/index.js")).href);
    const l = new LlamaCpp();
    // build: "never": only the prebuilt binary from the npm package, nothing compiled or fetched.
    l.llama = await mod.getLlama({gpu: false, build: "never", logLevel: "error", maxThreads: threads});
    l.model = await l.llama.loadModel({modelPath: gguf});
    l.threads = threads;
    l.contexts = new Map();
    return l;
  }

  // One context per sequence count, kept for the whole run with its sequences (a disposed
  // sequence's slot comes back asynchronously, so sequences are reused and cleared instead).
  // fp32 KV: the same precision as kvserve's default KV (llama.cpp's default is f16).
  async sequences(n, perSequence) {
    const key = `${n}x${perSequence}`;
    if (!this.contexts.has(key)) {
      const ctx = await this.model.createContext({
        sequences: n, contextSize: perSequence, batchSize: 512, threads: {ideal: this.threads, min: this.threads},
        experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
      this.contexts.set(key, {ctx, seqs: Array.from({length: n}, () => ctx.getSequence())});
    }
    return this.contexts.get(key).seqs;
  }

  async withSequences(n, perSequence, fn) {
    const seqs = await this.sequences(n, perSequence);
    for (const s of seqs) await s.clearHistory();
    return fn(seqs);
  }

  tokenize(text) { return this.model.tokenize(text, false); }
  get bos() { return this.model.tokens.bos; }

  async generate(seq, ids, n, onToken = () => {}) {
    const out = [];
    for await (const t of seq.evaluate(ids, {temperature: 0})) {
      out.push(t);
      onToken(out.length, now());
      if (out.length >= n) break;
    }
    return out;
  }

  async greedy(ids, n) { return this.withSequences(1, 1024, ([s]) => this.generate(s, ids, n)); }

  async prefillSeconds(ids) {
    return this.withSequences(1, 1024, async ([s]) => {
      const t0 = now();
      await s.evaluateWithoutGeneratingNewTokens(ids);
      return now() - t0;
    });
  }

  async dispose() {
    for (const {ctx} of this.contexts.values()) await ctx.dispose();
    await this.model.dispose();
    await this.llama.dispose();
  }
}

// ---------------------------------------------------------------- scenarios

// Aggregate decode tokens/s over the window in which all `n` sequences are generating.
async function concurrentDecode(n, run, startAll) {
  const firsts = new Array(n).fill(null), times = [];
  await startAll((i, count, t) => {
    if (count === 1) firsts[i] = t;
    times.push(t);
  });
  const t0 = Math.max(...firsts), t1 = Math.max(...times);
  const inWindow = times.filter((t) => t > t0).length;
  return inWindow / (t1 - t0);
}

async function measure(engineName, engine, scenario, run, a, vocab) {
  const seedBase = 1000 * run + (engineName === "kvserve" ? 0 : 500);
  const bos = 1;
  if (scenario === "prompt") {
    const ids = [bos, ...promptIds(seedBase + 1, a.promptLen - 1, vocab)];
    return a.promptLen / (await engine.prefillSeconds(ids));
  }
  const n = scenario === "decode@1" ? 1 : Number(scenario.split("@")[1]);
  const prompts = Array.from({length: n}, (_, i) => [bos, ...promptIds(seedBase + 10 + i, 15, vocab)]);
  if (engineName === "kvserve") {
    // SSE chunks coalesce tokens when steps are faster than the stream pump, so arrival times
    // cannot time single steps: time C requests of 1 token and C of N tokens (other prompts of
    // the same length) and divide the N - 1 extra steps' tokens by the difference.
    const again = Array.from({length: n}, (_, i) => [bos, ...promptIds(seedBase + 100 + i, 15, vocab)]);
    const wall = async (ps, tokens) => {
      const t0 = now();
      await Promise.all(ps.map((p) => engine.greedy(p, tokens)));
      return now() - t0;
    };
    const one = await wall(prompts, 1);
    const many = await wall(again, a.decodeTokens);
    // A noisy machine can stall the 1-token wave longer than the whole N-token one: no figure.
    return many > one ? (n * (a.decodeTokens - 1)) / (many - one) : NaN;
  }
  return engine.withSequences(n, 128, (seqs) => concurrentDecode(n, run, (cb) => Promise.all(seqs.map((s, i) =>
    engine.generate(s, prompts[i], a.decodeTokens, (count, t) => cb(i, count, t))))));
}

async function checkTokens(kv, lc, a) {
  const texts = ["And it came to pass", "The king said unto them, Go"];
  const lines = [];
  let ok = true;
  for (const text of texts) {
    const ids = await kv.tokenize(text);  // with BOS, as kvserve serves it
    const lcIds = [lc.bos, ...lc.tokenize(text)];
    const kvOut = await kv.greedy(ids, a.checkTokens);
    const lcOut = await lc.greedy(ids, a.checkTokens);
    const firstDiff = kvOut.findIndex((t, i) => t !== lcOut[i]);
    const same = firstDiff < 0 && kvOut.length === lcOut.length;
    ok &&= same;
    lines.push(`check ${JSON.stringify(text)}: ${ids.length} prompt tokens (llama.cpp's own tokenizer ` +
               `${JSON.stringify(lcIds) === JSON.stringify(ids) ? "agrees" : "differs: " + JSON.stringify(lcIds)}), ` +
               `${kvOut.length} greedy tokens ${same ? "identical" : `DIFFER at ${firstDiff}: kvserve ${JSON.stringify(kvOut)} llama.cpp ${JSON.stringify(lcOut)}`}`);
  }
  return {ok, lines};
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const label = a.label || path.basename(a.model);
  const kv = await KvserveProcess.start(a.kvserve, a.model, a.threads, a.extra);
  let lc;
  try {
    lc = await LlamaCpp.start(a.nlc, a.gguf, a.threads);
    const vocab = 2048;  // prompts use ids below 2048: real tokens in both bench models
    const check = await checkTokens(kv, lc, a);
    for (const l of check.lines) console.log(`[${label}] ${l}`);
    // Quantized weights: both engines round activations to int8 their own way, so greedy
    // tokens may part after a near-tie; the agreement is reported, and timing goes on.
    if (!check.ok && !a.agreementOnly) {
      console.log(`[${label}] greedy tokens differ: nothing timed`);
      process.exitCode = 3;
      return;
    }
    const scenarios = ["prompt", "decode@1", ...a.concurrency.map((c) => `decode@${c}`)];
    const results = {};
    for (const sc of scenarios) {
      results[sc] = {kvserve: [], "llama.cpp": []};
      for (let run = 1; run <= a.runs; ++run) {
        const order = run % 2 ? [["kvserve", kv], ["llama.cpp", lc]] : [["llama.cpp", lc], ["kvserve", kv]];
        for (const [name, engine] of order) {
          const tps = await measure(name, engine, sc, run, a, vocab);
          results[sc][name].push(tps);
          console.log(`[${label}] ${sc} run ${run} ${name}: ${tps.toFixed(1)} tokens/s`);
        }
      }
    }
    console.log(`\n${label}: tokens/s, median of ${a.runs} alternated runs (min-max), threads ${a.threads}\n`);
    console.log("| scenario | kvserve (HTTP) | llama.cpp (in-process) | kvserve / llama.cpp |");
    console.log("|---|---:|---:|---:|");
    const fmt = (xs) => {
      const f = xs.filter(Number.isFinite);
      const left = xs.length - f.length;
      return f.length === 0 ? "n/a" : `${median(f).toFixed(0)} (${Math.min(...f).toFixed(0)}-${Math.max(...f).toFixed(0)})` +
                                      (left ? ` [${left} run(s) without a figure]` : "");
    };
    const names = {prompt: `prompt ${a.promptLen} tokens`};
    for (const sc of scenarios) {
      const k = results[sc].kvserve, l = results[sc]["llama.cpp"];
      console.log(`| ${names[sc] ?? `decode, ${sc.split("@")[1]} sequence(s)`} | ${fmt(k)} | ${fmt(l)} | ` +
                  `${Number.isFinite(median(k) / median(l)) ? (median(k) / median(l)).toFixed(2) + "x" : "n/a"} |`);
    }
    if (a.json) writeFileSync(a.json, JSON.stringify({label, threads: a.threads, runs: a.runs, check: check.lines, results}, null, 1));
  } finally {
    if (lc) await lc.dispose();
    await kv.stop();
  }
}

main().catch((e) => { console.error(`peer_bench: ${e.stack ?? e}`); process.exitCode = 1; });
