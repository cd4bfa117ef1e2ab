// llama.cpp's batch-1 decode on a GGUF, alone in the process and on the machine: the figure to
// set beside `decode_bench --batch 1` (kvserve's forward pass in-process) for models too big to
// hold both engines' weights at once (peer_bench.mjs keeps both loaded). Prints figures only.
//
//   node bench/peer/decode_one.mjs --nlc DIR --gguf FILE [--threads 2] [--tokens 16] [--runs 3]
//
// Each run: a fresh sequence, a 16-token prompt evaluated without sampling (untimed), then
// --tokens greedy tokens; decode tokens/s counts from the first sampled token to the last.
// fp32 KV, as kvserve's default.
import path from "node:path";
import {pathToFileURL} from "node:url";

const args = {threads: 2, tokens: 16, runs: 3};
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, ""), v = process.argv[i + 1];
  if (v === undefined) throw new Error(`--${k} needs a value`);
  args[k] = ["threads", "tokens", "runs"].includes(k) ? Number(v) : v;
}
if (!args.nlc || !args.gguf) throw new Error("--nlc and --gguf are required");

const now = () => Number(process.hrtime.bigint()) / 1e9;
const mod = await import(pathToFileURL(path.join(args.nlc, "node_modules/node-llama-cpp/dist/index.js")).href);
const t0 = now();
const llama = await mod.getLlama({gpu: false, build: "never", logLevel: "error", maxThreads: args.threads});
const model = await llama.loadModel({modelPath: args.gguf});
console.log(`loaded ${path.basename(args.gguf)} in ${(now() - t0).toFixed(1)} s, ${args.threads} threads`);
const ctx = await model.createContext({sequences: 1, contextSize: 256, batchSize: 512,
  threads: {ideal: args.threads, min: args.threads},
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const seq = ctx.getSequence();
const rates = [];
for (let r = 0; r < args.runs; ++r) {
  await seq.clearHistory();
  const prompt = Array.from({length: 16}, (_, i) => 1 + ((i * 37 + r * 101) % 1000));
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  let first = 0, last = 0, n = 0;
  for await (const _ of seq.evaluate([1 + r], {temperature: 0})) {
    last = now();
    if (n === 0) first = last;
    if (++n >= args.tokens + 1) break;
  }
  const rate = (n - 1) / (last - first);
  rates.push(rate);
  console.log(`run ${r}: ${n - 1} decode tokens, ${rate.toFixed(3)} tokens/s, ${(1000 / rate).toFixed(1)} ms/token`);
}
rates.sort((a, b) => a - b);
console.log(`median ${rates[Math.floor(rates.length / 2)].toFixed(3)} tokens/s`);
await ctx.dispose();
await model.dispose();
