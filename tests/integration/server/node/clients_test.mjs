// Independent clients against a running kvserve: the official OpenAI Node SDK (HTTP) and
// @grpc/grpc-js loading proto/kvserve/v1/kvserve.proto at run time (gRPC).
//
//   node clients_test.mjs --modules DIR/node_modules --proto FILE [--policy NAME] -- SERVER_CMD...
//
// SERVER_CMD is started with `--config <tmp>.json` appended (ephemeral ports, one API key),
// must print "kvserve listening http=H:P grpc=H:P", and must exit 0 on SIGTERM. It is
// `kvserve serve` or the fake-engine server; assertions hold for any engine.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';

const argv = process.argv.slice(2);
const sep = argv.indexOf('--');
const opts = {};
for (let i = 0; i < sep; i += 2) opts[argv[i].replace(/^--/, '')] = argv[i + 1];
const serverCmd = argv.slice(sep + 1);
if (sep < 0 || !opts.modules || !opts.proto || serverCmd.length === 0) {
  console.error('usage: clients_test.mjs --modules DIR --proto FILE [--policy NAME] -- SERVER_CMD...');
  process.exit(2);
}
const policy = opts.policy ?? 'streamingllm';
const require = createRequire(path.join(opts.modules, 'noop.js'));
const { OpenAI } = require('openai');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const KEY = 'sk-node-test';
const dir = mkdtempSync(path.join(tmpdir(), 'kvserve-node-'));
const configPath = path.join(dir, 'kvserve.json');
writeFileSync(configPath, JSON.stringify({
  logging: { level: 'warn' },
  server: { host: '127.0.0.1', http_port: 0, grpc_port: 0, drain_timeout_seconds: 2 },
  tenants: [{ name: 'node', api_keys: [KEY] }],
}));

function startServer() {
  return new Promise((resolve, reject) => {
    const child = spawn(serverCmd[0], [...serverCmd.slice(1), '--config', configPath],
                        { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no listening line; stdout: ${out}`)), 120000);
    child.on('exit', (code) => reject(new Error(`server exited early with ${code}; stdout: ${out}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/kvserve listening http=([^ :]+):(\d+) grpc=([^ :]+):(\d+)\n/);
      if (m) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve({ child, host: m[1], httpPort: Number(m[2]), grpcPort: Number(m[4]) });
      }
    });
  });
}

const results = [];
async function check(name, fn) {
  try {
    await fn();
    results.push([name, null]);
    console.log(`ok   ${name}`);
  } catch (e) {
    results.push([name, e]);
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}

const server = await startServer();
const openai = new OpenAI({ baseURL: `http://${server.host}:${server.httpPort}/v1`, apiKey: KEY, maxRetries: 0 });
const pkgDef = protoLoader.loadSync(opts.proto, { keepCase: true, longs: Number, defaults: true, oneofs: true });
const kvserve = grpc.loadPackageDefinition(pkgDef).kvserve.v1;
const stub = new kvserve.KvServe(`${server.host}:${server.grpcPort}`, grpc.credentials.createInsecure());
const auth = () => {
  const md = new grpc.Metadata();
  md.add('authorization', `Bearer ${KEY}`);
  return md;
};
const unary = (method, req, md = auth()) =>
  new Promise((resolve, reject) => stub[method](req, md, (err, res) => (err ? reject(err) : resolve(res))));
const collect = (call) =>
  new Promise((resolve, reject) => {
    const chunks = [];
    call.on('data', (c) => chunks.push(c));
    call.on('error', reject);
    call.on('end', () => resolve(chunks));
  });

let model = '';
await check('openai: models.list', async () => {
  const page = await openai.models.list();
  assert.equal(page.data.length, 1);
  model = page.data[0].id;
  assert.equal(page.data[0].object, 'model');
});

const prompt = 'Once upon a time';
let greedy = '';
await check('openai: completions, n=2, seed, kv_compression', async () => {
  const a = await openai.completions.create({
    model, prompt, max_tokens: 8, n: 2, seed: 3, temperature: 0.9, ignore_eos: true,
    kv_compression: { policy },
  });
  const b = await openai.completions.create({
    model, prompt, max_tokens: 8, n: 2, seed: 3, temperature: 0.9, ignore_eos: true,
    kv_compression: { policy },
  });
  assert.equal(a.object, 'text_completion');
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text), 'same seed, same text');
  for (const c of a.choices) assert.equal(c.finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 16);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 16);
  assert.equal(a.usage.kv_compression.policy, policy);
});

await check('openai: completions, stop', async () => {
  const g = await openai.completions.create({ model, prompt, max_tokens: 12, temperature: 0, ignore_eos: true });
  greedy = g.choices[0].text;
  assert.ok(greedy.length >= 4, `greedy text too short: ${JSON.stringify(greedy)}`);
  const stop = greedy.slice(Math.floor(greedy.length / 2), Math.floor(greedy.length / 2) + 2);
  const s = await openai.completions.create({ model, prompt, max_tokens: 12, temperature: 0, ignore_eos: true, stop: [stop] });
  assert.equal(s.choices[0].text, greedy.slice(0, greedy.indexOf(stop)));
  assert.equal(s.choices[0].finish_reason, 'stop');
});

await check('openai: completions, streaming with usage', async () => {
  const stream = await openai.completions.create({
    model, prompt, max_tokens: 12, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, greedy);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
  assert.ok(usage.kv_compression);
});

await check('openai: chat, n=2, seed, stop, kv_compression', async () => {
  const req = {
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a story.' }],
    max_completion_tokens: 10, n: 2, seed: 11, temperature: 0.8, ignore_eos: true, kv_compression: { policy },
  };
  const a = await openai.chat.completions.create(req);
  const b = await openai.chat.completions.create(req);
  assert.equal(a.object, 'chat.completion');
  assert.equal(a.choices.length, 2);
  for (const c of a.choices) assert.equal(c.message.role, 'assistant');
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.equal(a.usage.kv_compression.policy, policy);
  const content = a.choices[0].message.content;
  if (content.length >= 4) {
    const stop = content.slice(2, 4);
    const s = await openai.chat.completions.create({ ...req, n: 1, stop });
    const first = s.choices[0].message.content;
    assert.ok(!first.includes(stop), `stop string leaked: ${JSON.stringify(first)}`);
  }
});

await check('openai: chat, streaming with usage', async () => {
  const stream = await openai.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, n: 2, seed: 5, stream: true,
    stream_options: { include_usage: true }, kv_compression: { policy },
  });
  const text = ['', ''];
  const finishes = [0, 0];
  let roles = 0;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) roles += 1;
      if (c.delta.content) text[c.index] += c.delta.content;
      if (c.finish_reason) finishes[c.index] += 1;
    }
  }
  assert.equal(roles, 2);
  assert.deepEqual(finishes, [1, 1]);
  assert.ok(usage && usage.completion_tokens > 0);
  assert.equal(usage.kv_compression.policy, policy);
});

await check('openai: errors', async () => {
  const bad = new OpenAI({ baseURL: `http://${server.host}:${server.httpPort}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  await assert.rejects(openai.completions.create({ model: 'no-such-model', prompt }), (e) => e.status === 404);
  await assert.rejects(openai.completions.create({ model, prompt, temperature: 7 }),
                       (e) => e.status === 400 && e.param === 'temperature');
});

await check('grpc: Generate streams chunks, usage last', async () => {
  const chunks = await collect(stub.Generate({
    model, prompt, sampling: { max_tokens: 12, temperature: 0, ignore_eos: true }, kv_compression: { policy },
  }, auth()));
  const text = chunks.map((c) => c.text).join('');
  assert.equal(text, greedy);
  const last = chunks[chunks.length - 1];
  assert.ok(last.usage, 'usage on the last chunk');
  assert.equal(Number(last.usage.completion_tokens), 12);
  assert.equal(last.usage.kv_compression.policy, policy);
  assert.equal(chunks.filter((c) => c.finish_reason).length, 1);
});

await check('grpc: Complete with n=2, seed, stop', async () => {
  const req = { model, prompt, sampling: { max_tokens: 8, n: 2, seed: 3, temperature: 0.9, ignore_eos: true } };
  const a = await unary('Complete', req);
  const b = await unary('Complete', req);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  const stop = greedy.slice(Math.floor(greedy.length / 2), Math.floor(greedy.length / 2) + 2);
  const s = await unary('Complete', { model, prompt, sampling: { max_tokens: 12, temperature: 0, ignore_eos: true, stop: [stop] } });
  assert.equal(s.choices[0].text, greedy.slice(0, greedy.indexOf(stop)));
  assert.equal(s.choices[0].finish_reason, 'stop');
});

await check('grpc: Chat, Tokenize, Detokenize, ListModels', async () => {
  const chunks = await collect(stub.Chat({ messages: [{ role: 'user', content: 'Hi' }], sampling: { max_tokens: 4 } }, auth()));
  assert.ok(chunks[chunks.length - 1].usage);
  const t = await unary('Tokenize', { prompt: 'hello world' });
  assert.equal(t.count, t.tokens.length);
  const d = await unary('Detokenize', { tokens: t.tokens });
  assert.ok(d.prompt.includes('hello world'));
  const models = await unary('ListModels', {});
  assert.equal(models.models[0].id, model);
});

await check('grpc: status codes', async () => {
  await assert.rejects(unary('ListModels', {}, new grpc.Metadata()), (e) => e.code === grpc.status.UNAUTHENTICATED);
  await assert.rejects(unary('Complete', { prompt, sampling: { temperature: 9 } }),
                       (e) => e.code === grpc.status.INVALID_ARGUMENT && e.details.includes('temperature'));
  await assert.rejects(unary('Complete', { model: 'nope', prompt }), (e) => e.code === grpc.status.NOT_FOUND);
});

stub.close();
const exitCode = await new Promise((resolve) => {
  server.child.on('exit', (code) => resolve(code));
  server.child.kill('SIGTERM');
});
await check('server exits 0 on SIGTERM', async () => assert.equal(exitCode, 0));

const failed = results.filter(([, e]) => e);
console.log(`${results.length - failed.length}/${results.length} passed`);
process.exit(failed.length ? 1 : 0);
