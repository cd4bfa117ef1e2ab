// Independent clients against a running kvserve: the official OpenAI Node SDK (HTTP) and
// @grpc/grpc-js loading proto/kvserve/v1/kvserve.proto at run time (gRPC).
//
//   node clients_test.mjs --modules DIR/node_modules --proto FILE [--policy NAME] -- SERVER_CMD...
//
// SERVER_CMD is started with `--config <tmp>.json` appended (ephemeral ports, one API key),
// must print "kvserve listening http=H:P grpc=H:P", and must exit 0 on SIGTERM. It is
// `kvserve serve` or the fake-engine server; assertions hold for any engine.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { baseConfig, check, finish, parseArgs, startServer as start, writeConfig } from './harness.mjs';

const { opts, serverCmd, realEngine, require } = parseArgs('clients_test.mjs', ['modules', 'proto']);
const policy = opts.policy ?? 'streamingllm';
const { OpenAI } = require('openai');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// The fake-engine server replies with exactly TEXT to a prompt holding <<reply>>TEXT<</reply>>
// (tests/unit/server/fake_engine.h), which is how tool calls and reasoning are scripted; the
// bundled model writes neither by itself, so those checks run on the fake engine only.

const KEY = 'sk-node-test';
const configPath = writeConfig('node', baseConfig(KEY));
const dir = path.dirname(configPath);
const startServer = (config = configPath) => start(serverCmd, config);

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

// ---------------------------------------------------------------- reasoning and tools
const weatherTool = { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
const scripted = (reply) => [{ role: 'user', content: `What is the weather in Paris? <<reply>>${reply}<</reply>>` }];
const toolReply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

if (realEngine) {
  await check('openai: the bundled model serves tools (its template is Hermes-style): required, none', async () => {
    const city = { type: 'function', function: { name: 'city', parameters: { type: 'object', properties: { c: { enum: ['Paris', 'Rome'] } }, required: ['c'] } } };
    const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], tools: [city], tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200 });
    assert.ok(r.choices[0].finish_reason === 'tool_calls' && r.choices[0].message.tool_calls[0].function.name === 'city', JSON.stringify(r.choices[0]));
    const none = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }],
                                                        tools: [weatherTool], tool_choice: 'none', max_tokens: 4 });
    assert.equal(none.choices[0].message.tool_calls, undefined);
  });
} else {
  await check('openai: tool_calls (non-streaming)', async () => {
    const r = await openai.chat.completions.create({ model, messages: scripted(`Let me check.\n${toolReply}`),
                                                     tools: [weatherTool], max_tokens: 200 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, 'Let me check.\n');
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(call.id.startsWith('call_'), call.id);
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  });

  await check('openai: tool_calls (streaming, SDK stream helper)', async () => {
    const reply = `${toolReply}\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>`;
    const stream = openai.chat.completions.stream({ model, messages: scripted(reply), tools: [weatherTool],
                                                    max_tokens: 300 });
    const seen = [];
    for await (const chunk of stream) for (const c of chunk.choices) if (c.delta.tool_calls) seen.push(...c.delta.tool_calls);
    const final = await stream.finalChatCompletion();
    const m = final.choices[0].message;
    assert.equal(final.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(m.tool_calls.map((t) => JSON.parse(t.function.arguments).city), ['Paris', 'Rome']);
    assert.deepEqual(seen.map((t) => t.index), [0, 1]);
    assert.ok(!m.content, `no content expected, got ${JSON.stringify(m.content)}`);
  });

  await check('openai: parallel_tool_calls=false keeps the first call', async () => {
    const reply = `${toolReply}${toolReply}`;
    const r = await openai.chat.completions.create({ model, messages: scripted(reply), tools: [weatherTool],
                                                     parallel_tool_calls: false, max_tokens: 300 });
    assert.equal(r.choices[0].message.tool_calls.length, 1);
  });

  await check('openai: tool results round trip; tool_choice none; required', async () => {
    const first = await openai.chat.completions.create({ model, messages: scripted(toolReply), tools: [weatherTool],
                                                         max_tokens: 200 });
    const call = first.choices[0].message.tool_calls[0];
    const messages = [...scripted('It is 21 C in Paris.'), first.choices[0].message,
                      { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 21}' }];
    const second = await openai.chat.completions.create({ model, messages, tools: [weatherTool], max_tokens: 100 });
    assert.equal(second.choices[0].message.content, 'It is 21 C in Paris.');
    assert.equal(second.choices[0].finish_reason, 'stop');
    const none = await openai.chat.completions.create({ model, messages: scripted(toolReply), tools: [weatherTool],
                                                        tool_choice: 'none', max_tokens: 200 });
    assert.equal(none.choices[0].message.content, toolReply);
    assert.equal(none.choices[0].finish_reason, 'stop');
    // "required" constrains decoding (the fake engine's scripted reply is one call anyway).
    const required = await openai.chat.completions.create({ model, messages: scripted(toolReply), tools: [weatherTool],
                                                            tool_choice: 'required', max_tokens: 200 });
    assert.equal(required.choices[0].finish_reason, 'tool_calls');
    assert.equal(required.choices[0].message.tool_calls[0].function.name, 'get_weather');
    await assert.rejects(openai.chat.completions.create({ model, messages: scripted(toolReply), tools: [weatherTool],
                                                          tool_choice: 'required', response_format: { type: 'json_object' } }),
                         (e) => e.status === 400 && e.param === 'tool_choice');
    await assert.rejects(openai.chat.completions.create({ model, messages: [{ role: 'tool', content: 'x' }] }),
                         (e) => e.status === 400 && e.param === 'messages[0].tool_call_id');
  });

  await check('openai: reasoning_content (non-streaming and streaming)', async () => {
    const req = { model, messages: scripted('<think>\nIt is summer.\n</think>\n\nSunny.'), max_tokens: 200 };
    const r = await openai.chat.completions.create(req);
    assert.equal(r.choices[0].message.reasoning_content, '\nIt is summer.\n');
    assert.equal(r.choices[0].message.content, '\n\nSunny.');
    const stream = await openai.chat.completions.create({ ...req, stream: true });
    let reasoning = '', content = '';
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        reasoning += c.delta.reasoning_content ?? '';
        content += c.delta.content ?? '';
      }
    }
    assert.equal(reasoning, '\nIt is summer.\n');
    assert.equal(content, '\n\nSunny.');
    // include_reasoning=false (vLLM) drops it.
    const hidden = await openai.chat.completions.create({ ...req, include_reasoning: false });
    assert.equal(hidden.choices[0].message.reasoning_content, undefined);
    assert.equal(hidden.choices[0].message.content, '\n\nSunny.');
  });

  await check('openai: continue_final_message into an open <think> block', async () => {
    const r = await openai.chat.completions.create({
      model, messages: [...scripted('weighing it</think>Rain.'), { role: 'assistant', content: '<think>' }],
      add_generation_prompt: false, continue_final_message: true, max_tokens: 100 });
    assert.equal(r.choices[0].message.reasoning_content, 'weighing it');
    assert.equal(r.choices[0].message.content, 'Rain.');
  });
}

// Reasoning markers from the config, checked on any engine: with model.reasoning_end " the" a
// reply's text up to its first " the" is reasoning. The same greedy request to the main server
// gives the text to compare with (there "</think>" never comes: reasoning and content together
// are the whole text).
await check('openai: configured reasoning markers split greedy output', async () => {
  const cfg2 = path.join(dir, 'reasoning.json');
  writeFileSync(cfg2, JSON.stringify({ ...baseConfig(KEY), model: { reasoning_parser: 'think', reasoning_end: ' the' } }));
  const second = await startServer(cfg2);
  try {
    const client = new OpenAI({ baseURL: `http://${second.host}:${second.httpPort}/v1`, apiKey: KEY, maxRetries: 0 });
    const req = { model, messages: [{ role: 'user', content: 'Tell me a story.' }, { role: 'assistant', content: '<think>' }],
                  add_generation_prompt: false, continue_final_message: true, max_tokens: 40, temperature: 0,
                  ignore_eos: true };
    const plain = (await openai.chat.completions.create(req)).choices[0].message;
    const text = (plain.reasoning_content ?? '') + (plain.content ?? '');
    assert.ok(text.length > 0);
    const cut = text.indexOf(' the');
    const split = (await client.chat.completions.create(req)).choices[0].message;
    assert.equal(split.reasoning_content ?? '', cut < 0 ? text : text.slice(0, cut));
    assert.equal(split.content, cut < 0 ? '' : text.slice(cut + 4));
    const stream = await client.chat.completions.create({ ...req, stream: true });
    let reasoning = '', content = '';
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        reasoning += c.delta.reasoning_content ?? '';
        content += c.delta.content ?? '';
      }
    }
    assert.equal(reasoning, split.reasoning_content ?? '');
    assert.equal(content, split.content);
  } finally {
    await new Promise((resolve) => { second.child.on('exit', resolve); second.child.kill('SIGTERM'); });
  }
});

// ---------------------------------------------------------------- structured outputs
// On the bundled model at temperature 1, over many seeds, every constrained output parses and
// validates. (The fake engine does not sample, so there the requests only have to be accepted.)
const personSchema = { type: 'object', properties: {
  name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0 },
  member: { type: 'boolean' }, tags: { type: 'array', items: { enum: ['red', 'green', 'blue'] }, maxItems: 3 },
  score: { type: 'number' }, note: { anyOf: [{ type: 'null' }, { type: 'string', maxLength: 8 }] } },
  required: ['name', 'age'], additionalProperties: false };
// Properties come in schema order; the required ones always, the others when the model chose to.
const inOrder = (o, order, required) => {
  const keys = Object.keys(o);
  assert.deepEqual(keys, order.filter((k) => keys.includes(k)), JSON.stringify(o));
  for (const k of required) assert.ok(keys.includes(k), `${k} missing: ${JSON.stringify(o)}`);
};
const validPerson = (o) => {
  assert.equal(typeof o, 'object');
  inOrder(o, ['name', 'age', 'member', 'tags', 'score', 'note'], ['name', 'age']);
  assert.equal(typeof o.name, 'string');
  assert.ok([...o.name].length <= 12, o.name);
  assert.ok(Number.isInteger(o.age) && o.age >= 0, String(o.age));
  assert.ok(!('member' in o) || typeof o.member === 'boolean');
  assert.ok(!('tags' in o) || (Array.isArray(o.tags) && o.tags.length <= 3 && o.tags.every((t) => ['red', 'green', 'blue'].includes(t))));
  assert.ok(!('score' in o) || typeof o.score === 'number');
  assert.ok(!('note' in o) || o.note === null || (typeof o.note === 'string' && [...o.note].length <= 8));
};
// $ref/$defs, integer and number ranges, enum/const of any type, anyOf, lengths and item counts.
const orderSchema = {
  $defs: { item: { type: 'object', properties: { sku: { type: 'string', minLength: 2, maxLength: 6 },
                                                  qty: { type: 'integer', minimum: 1, maximum: 12 } },
                   required: ['sku', 'qty'], additionalProperties: false } },
  type: 'object', properties: {
    id: { type: 'integer', minimum: -50, maximum: 999 }, items: { type: 'array', items: { $ref: '#/$defs/item' }, minItems: 1, maxItems: 3 },
    price: { type: 'number', minimum: 0, maximum: 100 }, kind: { enum: ['a', 7, null, { x: [true] }] }, v: { const: [1, 'two'] },
    note: { anyOf: [{ type: 'boolean' }, { type: 'string', maxLength: 4 }] } },
  required: ['id', 'items', 'v'], additionalProperties: false };
const validOrder = (o) => {
  inOrder(o, ['id', 'items', 'price', 'kind', 'v', 'note'], ['id', 'items', 'v']);
  assert.ok(Number.isInteger(o.id) && o.id >= -50 && o.id <= 999, String(o.id));
  assert.ok(Array.isArray(o.items) && o.items.length >= 1 && o.items.length <= 3);
  for (const it of o.items) {
    assert.deepEqual(Object.keys(it), ['sku', 'qty']);
    assert.ok([...it.sku].length >= 2 && [...it.sku].length <= 6, it.sku);
    assert.ok(Number.isInteger(it.qty) && it.qty >= 1 && it.qty <= 12, String(it.qty));
  }
  assert.ok(!('price' in o) || (typeof o.price === 'number' && o.price >= 0 && o.price <= 100), String(o.price));
  assert.ok(!('kind' in o) || ['a', 7, null].includes(o.kind) || JSON.stringify(o.kind) === '{"x":[true]}');
  assert.deepEqual(o.v, [1, 'two']);
  assert.ok(!('note' in o) || typeof o.note === 'boolean' || (typeof o.note === 'string' && [...o.note].length <= 4));
};
const seeds = realEngine ? 24 : 2;
await check(`openai: json_schema outputs validate (${seeds} seeds, temperature 1)`, async () => {
  for (let seed = 0; seed < seeds; ++seed) {
    const r = await openai.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Describe a person.' }], temperature: 1, seed, max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: personSchema } } });
    if (!realEngine) continue;
    assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}: ${r.choices[0].message.content}`);
    validPerson(JSON.parse(r.choices[0].message.content));
  }
});
await check(`openai: json_schema with $ref, ranges, enum/const, anyOf validate (${seeds} seeds, temperature 1)`, async () => {
  for (let seed = 0; seed < seeds; ++seed) {
    const r = await openai.chat.completions.create({
      model, messages: [{ role: 'user', content: 'An order, please.' }], temperature: 1, seed, max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name: 'order', schema: orderSchema } } });
    if (!realEngine) continue;
    assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}: ${r.choices[0].message.content}`);
    validOrder(JSON.parse(r.choices[0].message.content));
  }
});
// guided_grammar (GBNF): a list of simple arithmetic expressions; recursion (parentheses)
// unrolled to a bounded depth. Checked against an equivalent JS matcher.
const exprGrammar = `
root ::= expr ("; " expr){0,2}
expr ::= term (" " [+*-] " " term){0,2}
term ::= [0-9]{1,3} | "(" expr ")"
`;
const exprRe = (() => {
  let term = '[0-9]{1,3}';
  let expr = '';
  for (let d = 0; d < 4; ++d) {
    expr = `${term}(?: [+*-] ${term}){0,2}`;
    term = `(?:[0-9]{1,3}|\\(${expr}\\))`;
  }
  return new RegExp(`^${expr}(?:; ${expr}){0,2}$`);
})();
await check(`openai: guided_grammar (${seeds} seeds, temperature 1)`, async () => {
  for (let seed = 0; seed < seeds; ++seed) {
    const c = await openai.completions.create({ model, prompt: 'Sum:', temperature: 1, seed, max_tokens: 120,
                                                guided_grammar: exprGrammar });
    if (!realEngine) continue;
    if (c.choices[0].finish_reason === 'length') continue;  // cut off: nothing to check
    assert.ok(exprRe.test(c.choices[0].text), `seed ${seed}: ${JSON.stringify(c.choices[0].text)}`);
  }
  await assert.rejects(openai.completions.create({ model, prompt: 'x', guided_grammar: 'root ::= "a" b' }),
                       (e) => e.status === 400 && e.param === 'guided_grammar' && e.message.includes("rule 'root'"));
});
await check(`openai: guided_regex, guided_choice, json_object (${seeds} seeds, temperature 1)`, async () => {
  const re = '[A-Z][a-z]{1,8} (of|from) [A-Z][a-z]{1,8}, [0-9]{1,4}';
  for (let seed = 0; seed < seeds; ++seed) {
    const c = await openai.completions.create({ model, prompt: 'In the beginning', temperature: 1, seed,
                                                max_tokens: 64, guided_regex: re });
    const ch = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Well?' }],
                                                      temperature: 1, seed, max_tokens: 8,
                                                      guided_choice: ['yes', 'no', 'perhaps not'] });
    const o = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'JSON please' }],
                                                     temperature: 1, seed, max_tokens: 300,
                                                     response_format: { type: 'json_object' } });
    if (!realEngine) continue;
    assert.ok(new RegExp(`^(?:${re})$`).test(c.choices[0].text), `seed ${seed}: ${JSON.stringify(c.choices[0].text)}`);
    assert.ok(['yes', 'no', 'perhaps not'].includes(ch.choices[0].message.content), ch.choices[0].message.content);
    // json_object has no size bound (any object): the bundled model, which does not know JSON,
    // runs to max_tokens at temperature 1 (none of 24 seeds ended within 1500 tokens); every
    // output that ends by itself must parse, and every one starts as an object.
    assert.ok(o.choices[0].message.content.startsWith('{'), o.choices[0].message.content);
    if (o.choices[0].finish_reason === 'stop') {
      const parsed = JSON.parse(o.choices[0].message.content);
      assert.ok(parsed && typeof parsed === 'object' && !Array.isArray(parsed));
    }
  }
});
await check('openai: structured outputs errors name the member', async () => {
  await assert.rejects(openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'array', uniqueItems: true } } } }),
    (e) => e.status === 400 && e.param === 'response_format.json_schema.schema.uniqueItems');
  await assert.rejects(openai.completions.create({ model, prompt: 'x', guided_regex: '(a)\\1' }),
                       (e) => e.status === 400 && e.param === 'guided_regex');
});
if (realEngine) {
  await check('openai: named tool_choice returns that call with schema-valid arguments', async () => {
    for (let seed = 0; seed < 6; ++seed) {
      const r = await openai.chat.completions.create({
        model, messages: [{ role: 'user', content: 'Weather in Paris?' }], temperature: 1, seed, max_tokens: 200,
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
                  properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer', minimum: 0 } } } } }],
        tool_choice: { type: 'function', function: { name: 'get_weather' } } });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls');
      assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
      const args = JSON.parse(c.message.tool_calls[0].function.arguments);
      inOrder(args, ['city', 'days'], []);
      assert.ok(!('days' in args) || Number.isInteger(args.days));
    }
  });

  // tool_choice "required" on a server configured for Hermes-style tool calls: at temperature 1
  // every reply is parsed tool calls naming the request's tools with schema-valid arguments.
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object',
      properties: { city: { type: 'string', minLength: 1, maxLength: 10 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city'] } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object',
      properties: { tz: { enum: ['UTC', 'CET', 'PST'] } }, required: ['tz'] } } }];
  const validCall = (call) => {
    assert.equal(call.type ?? 'function', 'function');
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === 'get_weather') {
      inOrder(args, ['city', 'days'], ['city']);
      assert.ok([...args.city].length >= 1 && [...args.city].length <= 10, args.city);
      assert.ok(!('days' in args) || (Number.isInteger(args.days) && args.days >= 1 && args.days <= 7));
    } else {
      assert.equal(call.function.name, 'get_time');
      assert.deepEqual(Object.keys(args), ['tz']);
      assert.ok(['UTC', 'CET', 'PST'].includes(args.tz));
    }
  };
  const cfgTools = path.join(dir, 'tools.json');
  writeFileSync(cfgTools, JSON.stringify({ ...baseConfig(KEY), model: { tool_call_parser: 'hermes' } }));
  const toolServer = await startServer(cfgTools);
  try {
    const client = new OpenAI({ baseURL: `http://${toolServer.host}:${toolServer.httpPort}/v1`, apiKey: KEY, maxRetries: 0 });
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    await check(`openai: tool_choice required always returns parsed calls (${seeds} seeds, temperature 1)`, async () => {
      const names = new Set();
      for (let seed = 0; seed < seeds; ++seed) {
        const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required',
                                                         parallel_tool_calls: false, temperature: 1, seed, max_tokens: 200 });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'tool_calls', `seed ${seed}: ${JSON.stringify(c.message)}`);
        assert.equal(c.message.tool_calls.length, 1);
        validCall(c.message.tool_calls[0]);
        names.add(c.message.tool_calls[0].function.name);
      }
      assert.equal(names.size, 2, 'both tools get called across seeds');
    });
    await check('openai: tool_choice required, streaming (SDK stream helper), parallel calls', async () => {
      for (let seed = 0; seed < 6; ++seed) {
        const stream = client.chat.completions.stream({ model, messages, tools, tool_choice: 'required',
                                                        temperature: 1, seed, max_tokens: 1000 });
        const indexes = [];
        for await (const chunk of stream) for (const c of chunk.choices) for (const t of c.delta.tool_calls ?? []) indexes.push(t.index);
        const final = await stream.finalChatCompletion();
        const c = final.choices[0];
        assert.equal(c.finish_reason, 'tool_calls', `seed ${seed}: ${JSON.stringify(c.message)}`);
        assert.ok(c.message.tool_calls.length >= 1 && c.message.tool_calls.length <= 4, String(c.message.tool_calls.length));
        assert.deepEqual(indexes, c.message.tool_calls.map((_, i) => i));
        c.message.tool_calls.forEach(validCall);
        assert.ok(!c.message.content, JSON.stringify(c.message.content));
      }
    });
    await check('grpc: Chat with tools: required and named', async () => {
      const gstub = new kvserve.KvServe(`${toolServer.host}:${toolServer.grpcPort}`, grpc.credentials.createInsecure());
      const gtools = tools.map((t) => ({ name: t.function.name, description: t.function.description ?? '',
                                         parameters: JSON.stringify(t.function.parameters) }));
      const chat = (req) => new Promise((resolve, reject) => {
        const chunks = [];
        const call = gstub.Chat(req, auth());
        call.on('data', (c) => chunks.push(c));
        call.on('error', reject);
        call.on('end', () => resolve(chunks));
      });
      try {
        for (let seed = 0; seed < 8; ++seed) {
          const chunks = await chat({ messages, tools: gtools, tool_choice: { mode: 'required' }, parallel_tool_calls: false,
                                      sampling: { max_tokens: 200, temperature: 1, seed } });
          const calls = chunks.flatMap((c) => c.tool_calls);
          assert.equal(calls.length, 1, JSON.stringify(chunks));
          validCall({ function: calls[0] });
          assert.ok(calls[0].id.startsWith('call_'));
          assert.equal(chunks.filter((c) => c.finish_reason).map((c) => c.finish_reason).join(), 'tool_calls');
          assert.equal(chunks.map((c) => c.text).join(''), '');
        }
        const named = await chat({ messages, tools: gtools, tool_choice: { function: 'get_time' },
                                   sampling: { max_tokens: 100, temperature: 1, seed: 3 } });
        const ncalls = named.flatMap((c) => c.tool_calls);
        assert.equal(ncalls.length, 1);
        assert.equal(ncalls[0].name, 'get_time');
        validCall({ function: ncalls[0] });
        await assert.rejects(chat({ messages: [{ role: 'tool', content: 'x' }] }),
                             (e) => e.code === grpc.status.INVALID_ARGUMENT && e.details.includes('messages[0].tool_call_id'));
      } finally {
        gstub.close();
      }
    });
  } finally {
    await new Promise((resolve) => { toolServer.child.on('exit', resolve); toolServer.child.kill('SIGTERM'); });
  }
}

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

if (!realEngine) {
  await check('grpc: Chat with tools returns tool_calls (scripted reply)', async () => {
    const chunks = await collect(stub.Chat({ messages: scripted(toolReply), sampling: { max_tokens: 200 },
                                             tools: [{ name: 'get_weather', parameters: JSON.stringify(weatherTool.function.parameters) }] },
                                           auth()));
    const calls = chunks.flatMap((c) => c.tool_calls);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });
    assert.equal(chunks.filter((c) => c.finish_reason).map((c) => c.finish_reason).join(), 'tool_calls');
  });
}

await check('grpc: structured outputs (regex, choice, json_schema, grammar)', async () => {
  const re = '[a-z]{2,6}(, [a-z]{2,6}){0,3}\\.';
  for (let seed = 0; seed < (realEngine ? 8 : 1); ++seed) {
    const a = await unary('Complete', { model, prompt, sampling: { max_tokens: 64, temperature: 1, seed,
                                                                    structured: { regex: re } } });
    const b = await unary('Complete', { model, prompt, sampling: { max_tokens: 8, temperature: 1, seed,
                                                                    structured: { choice: { choices: ['left', 'right'] } } } });
    const c = await unary('Complete', { model, prompt, sampling: { max_tokens: 300, temperature: 1, seed,
                                                                    structured: { json_schema: JSON.stringify(personSchema) } } });
    if (!realEngine) continue;
    assert.ok(new RegExp(`^(?:${re})$`).test(a.choices[0].text), JSON.stringify(a.choices[0].text));
    assert.ok(['left', 'right'].includes(b.choices[0].text), b.choices[0].text);
    validPerson(JSON.parse(c.choices[0].text));
  }
  for (let seed = 0; seed < (realEngine ? 8 : 1); ++seed) {
    const g = await unary('Complete', { model, prompt: 'Sum:', sampling: { max_tokens: 120, temperature: 1, seed,
                                                                          structured: { grammar: exprGrammar } } });
    if (!realEngine || g.choices[0].finish_reason === 'length') continue;
    assert.ok(exprRe.test(g.choices[0].text), JSON.stringify(g.choices[0].text));
  }
  await assert.rejects(unary('Complete', { model, prompt, sampling: { structured: { regex: '(?<=a)b' } } }),
                       (e) => e.code === grpc.status.INVALID_ARGUMENT && e.details.includes('sampling.structured.regex'));
});

await check('grpc: status codes', async () => {
  await assert.rejects(unary('ListModels', {}, new grpc.Metadata()), (e) => e.code === grpc.status.UNAUTHENTICATED);
  await assert.rejects(unary('Complete', { prompt, sampling: { temperature: 9 } }),
                       (e) => e.code === grpc.status.INVALID_ARGUMENT && e.details.includes('temperature'));
  await assert.rejects(unary('Complete', { model: 'nope', prompt }), (e) => e.code === grpc.status.NOT_FOUND);
});

stub.close();
await finish(server);
