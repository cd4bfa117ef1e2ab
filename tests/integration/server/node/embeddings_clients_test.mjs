// /v1/embeddings through the official OpenAI Node SDK (embeddings.create) against a running
// kvserve: float and base64 encodings agree, batched strings and token ids, usage, normalised
// vectors, and `dimensions` refused with a 400 naming it.
//
//   node embeddings_clients_test.mjs --modules DIR/node_modules -- SERVER_CMD...
//
// SERVER_CMD is started with `--config <tmp>.json` appended (ephemeral ports, one API key) and
// must print "kvserve listening http=H:P grpc=H:P" (as for clients_test.mjs).
import assert from 'node:assert/strict';
import { baseConfig, check, finish, parseArgs, startServer, writeConfig } from './harness.mjs';

const { serverCmd, require } = parseArgs('embeddings_clients_test.mjs', ['modules']);
const { OpenAI } = require('openai');

const KEY = 'sk-node-embed';
const server = await startServer(serverCmd, writeConfig('node-embed', baseConfig(KEY)));

const base = `http://${server.host}:${server.httpPort}`;
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0 });
const model = (await openai.models.list()).data[0].id;
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

await check('openai: embeddings.create, batched strings, float and base64 agree', async () => {
  const input = ['In the beginning', 'Once upon a time'];
  const f = await openai.embeddings.create({ model, input, encoding_format: 'float' });
  assert.equal(f.object, 'list');
  assert.equal(f.data.length, 2);
  assert.deepEqual(f.data.map((d) => d.index), [0, 1]);
  assert.ok(f.data[0].embedding.length > 0);
  for (const d of f.data) assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-4, String(norm(d.embedding)));
  assert.notDeepEqual(f.data[0].embedding, f.data[1].embedding);
  assert.ok(f.usage.prompt_tokens > 0 && f.usage.total_tokens === f.usage.prompt_tokens);
  // The SDK's default asks for base64 and decodes it to floats itself.
  const b = await openai.embeddings.create({ model, input });
  for (let i = 0; i < 2; ++i) {
    assert.equal(b.data[i].embedding.length, f.data[i].embedding.length);
    b.data[i].embedding.forEach((x, k) => assert.ok(Math.abs(x - f.data[i].embedding[k]) < 1e-6));
  }
});

await check('openai: token-id input embeds as its text does; dimensions is a 400 naming it', async () => {
  const tok = await (await fetch(`${base}/tokenize`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
                                                      body: JSON.stringify({ prompt: 'In the beginning' }) })).json();
  const [byText, byIds] = await Promise.all([
    openai.embeddings.create({ model, input: 'In the beginning', encoding_format: 'float' }),
    openai.embeddings.create({ model, input: tok.tokens, encoding_format: 'float' })]);
  assert.equal(byIds.usage.prompt_tokens, tok.tokens.length);
  byIds.data[0].embedding.forEach((x, k) => assert.ok(Math.abs(x - byText.data[0].embedding[k]) < 1e-5));
  await assert.rejects(openai.embeddings.create({ model, input: 'x', dimensions: 8 }),
                       (e) => e.status === 400 && e.param === 'dimensions');
  await assert.rejects(new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-wrong', maxRetries: 0 }).embeddings.create({ model, input: 'x' }),
                       (e) => e.status === 401);
});

await finish(server);
