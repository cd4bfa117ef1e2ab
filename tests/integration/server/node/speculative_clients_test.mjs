// Speculative decoding through independent clients (issue 29): the official OpenAI Node SDK
// and @grpc/grpc-js ask for n-gram speculation per request, and on the real daemon (which
// loads models/kvs-tiny-draft) for draft-model speculation too; greedy output (text, and with
// the SDK the token logprobs) must equal the same request without it, and usage must carry
// the drafted / accepted counts (docs/api.md). Same arguments and server contract as
// clients_test.mjs (run by run_node_clients.sh after it):
//
//   node speculative_clients_test.mjs --modules DIR/node_modules --proto FILE -- SERVER_CMD...
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { baseConfig, check, finish, parseArgs, startServer, writeConfig } from './harness.mjs';

const { opts, serverCmd, realEngine, require } = parseArgs('speculative_clients_test.mjs', ['modules', 'proto']);
const { OpenAI } = require('openai');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
// The real daemon really drafts; the fake engine reports one guess per token, half accepted.

const KEY = 'sk-node-spec';
// The bundled draft model, for the real daemon only (the fake engine loads no model), with the
// adaptive draft length's costs fixed: measured at start-up they depend on the machine (a
// sanitizer build measures costs at which nothing is worth drafting).
const DRAFT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../models/kvs-tiny-draft');
const extra = realEngine ? { speculative: { draft_model: DRAFT, row_cost: 0.1, draft_guess_cost: 0.3 } } : {};
const server = await startServer(serverCmd, writeConfig('node-spec', baseConfig(KEY, extra)));

const openai = new OpenAI({ baseURL: `http://${server.host}:${server.httpPort}/v1`, apiKey: KEY, maxRetries: 0 });
const pkgDef = protoLoader.loadSync(opts.proto, { keepCase: true, longs: Number, defaults: true, oneofs: true });
const kvserve = grpc.loadPackageDefinition(pkgDef).kvserve.v1;
const stub = new kvserve.KvServe(`${server.host}:${server.grpcPort}`, grpc.credentials.createInsecure());
const md = new grpc.Metadata();
md.add('authorization', `Bearer ${KEY}`);

// Copy-heavy: the continuation of a repeated phrase is where n-gram guesses are right.
const prompt = 'the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat';
const ngram = { method: 'ngram', num_tokens: 4, ngram_min: 1, ngram_max: 3 };
const MAX = 24;

// Usage of a speculating request: the counts are consistent, and the real daemon drafted.
function checkSpecUsage(drafted, accepted, completion) {
  assert.ok(accepted <= drafted, `accepted ${accepted} > drafted ${drafted}`);
  assert.ok(accepted <= completion, `accepted ${accepted} > completion ${completion}`);
  if (realEngine) assert.ok(drafted > 0, 'the daemon made no draft on a copy-heavy prompt');
  else assert.deepEqual([drafted, accepted], [completion, Math.floor(completion / 2)]);
}

const drafted = { method: 'draft', num_tokens: 3 };
const methods = realEngine ? [['ngram', ngram], ['draft', drafted]] : [['ngram', ngram]];

for (const [name, speculative] of methods) await check(`openai: completions with speculative ${name} equal greedy without`, async () => {
  const req = { model: '', prompt, max_tokens: MAX, temperature: 0, ignore_eos: true, logprobs: 1 };
  req.model = (await openai.models.list()).data[0].id;
  const plain = await openai.completions.create(req);
  const spec = await openai.completions.create({ ...req, speculative });
  assert.equal(spec.choices[0].text, plain.choices[0].text);
  assert.deepEqual(spec.choices[0].logprobs.tokens, plain.choices[0].logprobs.tokens);
  assert.deepEqual(spec.choices[0].logprobs.token_logprobs, plain.choices[0].logprobs.token_logprobs);
  assert.equal(spec.usage.completion_tokens, MAX);
  assert.equal(plain.usage.speculative.draft_tokens, 0);
  assert.equal(plain.usage.completion_tokens_details.accepted_prediction_tokens, 0);
  const { draft_tokens: drafted, accepted_tokens: accepted } = spec.usage.speculative;
  checkSpecUsage(drafted, accepted, spec.usage.completion_tokens);
  assert.equal(spec.usage.completion_tokens_details.accepted_prediction_tokens, accepted);
  assert.equal(spec.usage.completion_tokens_details.rejected_prediction_tokens, drafted - accepted);
});

await check('openai: streamed chat with speculative ngram equals greedy without', async () => {
  const model = (await openai.models.list()).data[0].id;
  const req = { model, messages: [{ role: 'user', content: prompt }], max_tokens: MAX, temperature: 0,
                ignore_eos: true, stream: true, stream_options: { include_usage: true } };
  const run = async (extra) => {
    let text = '';
    let usage = null;
    for await (const chunk of await openai.chat.completions.create({ ...req, ...extra })) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) text += c.delta.content ?? '';
    }
    return { text, usage };
  };
  const plain = await run({});
  const spec = await run({ speculative: ngram });
  assert.equal(spec.text, plain.text);
  checkSpecUsage(spec.usage.speculative.draft_tokens, spec.usage.speculative.accepted_tokens,
                 spec.usage.completion_tokens);
});

for (const [name, speculative] of methods) await check(`grpc: Generate and Complete with speculative ${name} equal greedy without`, async () => {
  const req = { prompt, sampling: { max_tokens: MAX, temperature: 0, ignore_eos: true } };
  const complete = (r) => new Promise((resolve, reject) =>
    stub.Complete(r, md, (err, res) => (err ? reject(err) : resolve(res))));
  const plain = await complete(req);
  const spec = await complete({ ...req, speculative });
  assert.deepEqual(spec.choices[0].token_ids, plain.choices[0].token_ids);
  assert.equal(plain.usage.speculative_draft_tokens, 0);
  checkSpecUsage(spec.usage.speculative_draft_tokens, spec.usage.speculative_accepted_tokens,
                 spec.usage.completion_tokens);
  const chunks = await new Promise((resolve, reject) => {
    const got = [];
    const call = stub.Generate({ ...req, speculative }, md);
    call.on('data', (c) => got.push(c));
    call.on('error', reject);
    call.on('end', () => resolve(got));
  });
  assert.deepEqual(chunks.flatMap((c) => c.token_ids), plain.choices[0].token_ids);
  const usage = chunks[chunks.length - 1].usage;
  checkSpecUsage(usage.speculative_draft_tokens, usage.speculative_accepted_tokens, usage.completion_tokens);
  await assert.rejects(complete({ ...req, speculative: { method: 'eagle' } }),
                       (e) => e.code === grpc.status.INVALID_ARGUMENT && e.details.includes('speculative.method'));
});

stub.close();
await finish(server);
