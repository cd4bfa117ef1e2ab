// kvserve against llama.cpp on one quantized GGUF file: do the two engines compute the same model?
// (issue 37: "on llama.cpp's own Q8_0 and Q4_K_M files of the same model: greedy continuations of
// 16 tokens agree with llama.cpp's on most prompts, and the token logprobs differ by no more than
// a bound"). Both serve the very same file: kvserve `serve --model FILE.gguf` over HTTP,
// llama.cpp in-process through node-llama-cpp (fp32 KV, as kvserve's default).
//
// For each prompt (kvserve's token ids, BOS first, given to both engines):
//   1. llama.cpp's greedy continuation of --tokens tokens, with each token's probability
//      (evaluateWithMetadata's confidence: the softmax of its logits);
//   2. kvserve's greedy continuation: identical or not (a near-tie may part them: both engines
//      round activations to int8, each its own way);
//   3. kvserve's logprob of llama.cpp's tokens, teacher-forced (prompt_logprobs of prompt +
//      llama.cpp's continuation), so every position compares the same context:
//      |logprob_kvserve - ln(confidence_llama.cpp)| and llama.cpp's token's rank under kvserve.
// Prints per-prompt lines and a summary; exits 1 when fewer than --min-agree prompts agree or a
// logprob differs by more than --max-lp-diff nats (the test's bounds; see its CMake entry).
//
//   node bench/peer/agreement.mjs --nlc DIR --kvserve BIN --gguf FILE --text FILE
//        [--prompts 12] [--prompt-words 12] [--tokens 16] [--threads 2]
//        [--min-agree 0.75] [--max-lp-diff 0.1] [--json OUT] [--kv-gguf FILE]
//
// --kv-gguf: kvserve serves another file than llama.cpp (e.g. the f32 weights a quantized file
// dequantizes to, bench/peer_quantize --type F32 --requantize: each engine against the exact
// model the quantized file stands for).
import {readFileSync, writeFileSync} from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

import {KvserveProcess} from "./kvserve_process.mjs";

const a = {kvGguf: "", prompts: 12, promptWords: 12, tokens: 16, threads: 2, minAgree: 0.75, maxLpDiff: 0.1, json: ""};
const names = {"--nlc": "nlc", "--kvserve": "kvserve", "--gguf": "gguf", "--kv-gguf": "kvGguf", "--text": "text", "--prompts": "prompts",
               "--prompt-words": "promptWords", "--tokens": "tokens", "--threads": "threads",
               "--min-agree": "minAgree", "--max-lp-diff": "maxLpDiff", "--json": "json"};
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i], v = process.argv[i + 1];
  if (!(k in names)) throw new Error(`unknown argument ${k}`);
  if (v === undefined) throw new Error(`${k} needs a value`);
  a[names[k]] = typeof a[names[k]] === "number" ? Number(v) : v;
}
for (const need of ["nlc", "kvserve", "gguf", "text"]) if (!a[need]) throw new Error(`--${need} is required`);

// Prompts: --prompt-words words from evenly spaced places of the text (plain prose: the
// bundled model's held-out text).
const words = readFileSync(a.text, "utf8").split(/\s+/).filter(Boolean);
const texts = Array.from({length: a.prompts}, (_, i) => {
  const at = Math.floor((i * (words.length - a.promptWords)) / a.prompts);
  return words.slice(at, at + a.promptWords).join(" ");
});

const kv = await KvserveProcess.start(a.kvserve, a.kvGguf || a.gguf, a.threads, ["--log-level", "error"]);
const mod = await import(pathToFileURL(path.join(a.nlc, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await mod.getLlama({gpu: false, build: "never", logLevel: "error", maxThreads: a.threads});
const model = await llama.loadModel({modelPath: a.gguf});
const ctx = await model.createContext({sequences: 1, contextSize: 512, batchSize: 512,
  threads: {ideal: a.threads, min: a.threads},
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const seq = ctx.getSequence();

const results = [];
let status = 0;
try {
  for (const text of texts) {
    const ids = await kv.tokenize(text);
    await seq.clearHistory();
    const lcTokens = [], lcLp = [];
    for await (const out of seq.evaluateWithMetadata(ids, {confidence: true}, {temperature: 0})) {
      lcTokens.push(out.token);
      lcLp.push(Math.log(out.confidence));
      if (lcTokens.length >= a.tokens) break;
    }
    const kvTokens = await kv.greedy(ids, a.tokens);
    // Teacher-forced: kvserve's logprob and rank of each of llama.cpp's tokens in its context.
    const forced = await kv.post("/v1/completions", {prompt: [...ids, ...lcTokens], max_tokens: 1, temperature: 0,
                                                     prompt_logprobs: 1});
    const pl = forced.choices[0].prompt_logprobs.slice(ids.length);
    const kvLp = pl.map((entry, i) => entry[String(lcTokens[i])].logprob);
    const ranks = pl.map((entry, i) => entry[String(lcTokens[i])].rank);
    const diffs = kvLp.map((lp, i) => Math.abs(lp - lcLp[i]));
    const first = kvTokens.findIndex((t, i) => t !== lcTokens[i]);
    const r = {text, promptTokens: ids.length, same: first < 0, firstDiff: first, maxLpDiff: Math.max(...diffs),
               meanLpDiff: diffs.reduce((x, y) => x + y, 0) / diffs.length, worstRank: Math.max(...ranks),
               kvserve: kvTokens, llamacpp: lcTokens};
    results.push(r);
    console.log(`${r.same ? "same" : `DIFFER at ${first}`} | logprob diff max ${r.maxLpDiff.toFixed(4)} ` +
                `mean ${r.meanLpDiff.toFixed(4)} | llama.cpp's tokens rank <= ${r.worstRank} under kvserve | ` +
                `${ids.length} prompt tokens: ${JSON.stringify(text)}`);
  }
  const agree = results.filter((r) => r.same).length;
  const maxDiff = Math.max(...results.map((r) => r.maxLpDiff));
  const sorted = results.map((r) => r.maxLpDiff).sort((x, y) => x - y);
  console.log(`kvserve ${path.basename(a.kvGguf || a.gguf)} vs llama.cpp ${path.basename(a.gguf)}: ${agree}/${results.length} prompts give identical ${a.tokens}-token greedy ` +
              `continuations; teacher-forced |logprob difference| max ${maxDiff.toFixed(4)} nats, median of ` +
              `per-prompt maxima ${sorted[sorted.length >> 1].toFixed(4)} (bounds: >= ${a.minAgree} agreeing, ` +
              `<= ${a.maxLpDiff} nats)`);
  if (agree < a.minAgree * results.length || !(maxDiff <= a.maxLpDiff)) status = 1;
  if (a.json) writeFileSync(a.json, JSON.stringify({gguf: a.gguf, agree, maxDiff, results}, null, 1));
} finally {
  await ctx.dispose();
  await model.dispose();
  await kv.stop();
}
process.exitCode = status;
