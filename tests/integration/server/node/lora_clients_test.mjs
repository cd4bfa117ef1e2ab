// LoRA adapters through independent clients (issue 39): the official OpenAI Node SDK and
// @grpc/grpc-js select an adapter by `model` on the real daemon serving the bundled model with
// two PEFT adapters written here (random rank-4 and rank-8 deltas on q_proj and v_proj of
// kvs-tiny, safetensors written from the format's description). Checked: /v1/models and
// ListModels list the adapters with the base as parent; greedy output per adapter is
// deterministic, differs from the base, and is the same over HTTP and gRPC; an unknown model is
// the SDK's NotFoundError with code model_not_found and gRPC's NOT_FOUND. Same arguments as
// clients_test.mjs (run by run_node_clients.sh after it, on the real daemon only):
//
//   node lora_clients_test.mjs --modules DIR/node_modules --proto FILE -- SERVER_CMD...
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { baseConfig, check, finish, parseArgs, startServer, writeConfig } from './harness.mjs';

const { opts, serverCmd, realEngine, require } = parseArgs('lora_clients_test.mjs', ['modules', 'proto']);
if (!realEngine) {
  console.error('lora_clients_test.mjs needs the real daemon (kvserve serve): the fake engine has no adapters');
  process.exit(2);
}
const { OpenAI } = require('openai');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// kvs-tiny (models/kvs-tiny/config.json): hidden 192, 4 layers, 4 query heads and 2 KV heads of 48.
const HIDDEN = 192, LAYERS = 4, Q_OUT = 4 * 48, V_OUT = 2 * 48;

// A seeded uniform generator (xorshift32), so the adapters are the same every run.
function uniform(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x / 4294967296 - 0.5;
  };
}

// safetensors: u64 little-endian header length, the JSON header, then the raw F32 data.
function writeSafetensors(file, tensors) {
  const header = {};
  let offset = 0;
  for (const [name, { shape, data }] of Object.entries(tensors)) {
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(file, Buffer.concat([len, Buffer.from(json), ...Object.values(tensors).map((t) => Buffer.from(t.data.buffer))]));
}

// A PEFT LoRA directory: adapter_config.json and adapter_model.safetensors.
function writeAdapter(rank, alpha, seed) {
  const dir = mkdtempSync(path.join(tmpdir(), `kvserve-lora-r${rank}-`));
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify({
    peft_type: 'LORA', r: rank, lora_alpha: alpha, target_modules: ['q_proj', 'v_proj'],
    lora_dropout: 0.0, bias: 'none', base_model_name_or_path: 'kvs-tiny', task_type: 'CAUSAL_LM' }));
  const rand = uniform(seed);
  const matrix = (rows, cols, scale) => {
    const data = new Float32Array(rows * cols);
    for (let i = 0; i < data.length; ++i) data[i] = scale * rand();
    return { shape: [rows, cols], data };
  };
  const tensors = {};
  for (let l = 0; l < LAYERS; ++l) {
    for (const [m, out] of [['q_proj', Q_OUT], ['v_proj', V_OUT]]) {
      const p = `base_model.model.model.layers.${l}.self_attn.${m}`;
      tensors[`${p}.lora_A.weight`] = matrix(rank, HIDDEN, 0.5);
      tensors[`${p}.lora_B.weight`] = matrix(out, rank, 0.5);
    }
  }
  writeSafetensors(path.join(dir, 'adapter_model.safetensors'), tensors);
  return dir;
}

const KEY = 'sk-node-lora';
const adapters = { 'tiny-sql': writeAdapter(4, 8, 11), 'tiny-chat': writeAdapter(8, 16, 23) };
const server = await startServer(serverCmd, writeConfig('node-lora', baseConfig(KEY, { lora: { adapters } })));
const openai = new OpenAI({ baseURL: `http://${server.host}:${server.httpPort}/v1`, apiKey: KEY, maxRetries: 0 });
const pkgDef = protoLoader.loadSync(opts.proto, { keepCase: true, longs: Number, defaults: true, oneofs: true });
const kvserve = grpc.loadPackageDefinition(pkgDef).kvserve.v1;
const stub = new kvserve.KvServe(`${server.host}:${server.grpcPort}`, grpc.credentials.createInsecure());
const md = new grpc.Metadata();
md.add('authorization', `Bearer ${KEY}`);
const unary = (method, req) => new Promise((resolve, reject) =>
  stub[method](req, md, (err, res) => (err ? reject(err) : resolve(res))));

const prompt = 'And it came to pass, when the king';
const greedy = { max_tokens: 16, temperature: 0, ignore_eos: true };
const texts = {};

await check('openai: models.list lists the adapters with the base as parent', async () => {
  const models = (await openai.models.list()).data;
  const base = models.find((m) => !m.parent);
  assert.ok(base, JSON.stringify(models));
  for (const name of Object.keys(adapters)) {
    const card = models.find((m) => m.id === name);
    assert.ok(card, `${name} missing from ${JSON.stringify(models)}`);
    assert.equal(card.parent, base.id);
  }
  texts.baseId = base.id;
});

await check('openai: completions select the adapter by model, deterministically', async () => {
  for (const model of [texts.baseId, ...Object.keys(adapters)]) {
    const a = await openai.completions.create({ model, prompt, ...greedy });
    const b = await openai.completions.create({ model, prompt, ...greedy });
    assert.equal(a.model, model);
    assert.equal(a.choices[0].text, b.choices[0].text);
    texts[model] = a.choices[0].text;
  }
  assert.notEqual(texts['tiny-sql'], texts[texts.baseId]);
  assert.notEqual(texts['tiny-chat'], texts[texts.baseId]);
  assert.notEqual(texts['tiny-sql'], texts['tiny-chat']);
});

await check('openai: an unknown model is NotFoundError with code model_not_found', async () => {
  await assert.rejects(openai.completions.create({ model: 'tiny-nope', prompt, ...greedy }),
                       (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
});

await check('grpc: ListModels and Complete select the adapter by model, as HTTP does', async () => {
  const listed = await unary('ListModels', {});
  const card = listed.models.find((m) => m.id === 'tiny-sql');
  assert.ok(card, JSON.stringify(listed));
  assert.equal(card.parent, texts.baseId);
  for (const model of Object.keys(adapters)) {
    const res = await unary('Complete', { model, prompt, sampling: greedy });
    assert.equal(res.choices[0].text, texts[model]);
  }
  await assert.rejects(unary('Complete', { model: 'tiny-nope', prompt, sampling: greedy }),
                       (e) => e.code === grpc.status.NOT_FOUND);
});

stub.close();
await finish(server);
