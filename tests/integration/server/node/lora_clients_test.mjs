// LoRA adapters through independent clients (issue 39): the official OpenAI Node SDK and
// @grpc/grpc-js select an adapter by `model` on the real daemon serving the bundled model with
// two PEFT adapters written at test time (random rank-4 and rank-8 deltas on q_proj and v_proj
// of kvs-tiny, tests/support/peft/peft_adapter.mjs). Checked: /v1/models and
// ListModels list the adapters with the base as parent; greedy output per adapter is
// deterministic, differs from the base, and is the same over HTTP and gRPC; an unknown model is
// the SDK's NotFoundError with code model_not_found and gRPC's NOT_FOUND. Same arguments as
// clients_test.mjs (run by run_node_clients.sh after it, on the real daemon only):
//
//   node lora_clients_test.mjs --modules DIR/node_modules --proto FILE -- SERVER_CMD...
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { llamaModules, writeAdapter } from '../../../support/peft/peft_adapter.mjs';
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
const targets = ['q_proj', 'v_proj'];
const modules = llamaModules({ layers: 4, hidden: 192, qOut: 4 * 48, kvOut: 2 * 48, intermediate: 512, targets });
const adapter = (rank, alpha, seed) =>
  writeAdapter(mkdtempSync(path.join(tmpdir(), `kvserve-lora-r${rank}-`)), { rank, alpha, modules, targets, seed });

const KEY = 'sk-node-lora';
const adapters = { 'tiny-sql': adapter(4, 8, 11), 'tiny-chat': adapter(8, 16, 23) };
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
