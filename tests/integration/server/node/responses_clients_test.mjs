// The official OpenAI Node SDK's Responses API (`client.responses.create`, streaming and not,
// and the `responses.stream` helper that checks the event sequence) against a running kvserve:
// text, a function tool call and its output sent back, a JSON schema (text.format), the
// store (retrieve, previous_response_id, delete) and a refused member.
//
//   node responses_clients_test.mjs --modules DIR/node_modules [--proto FILE --policy NAME] -- SERVER_CMD...
//
// Started like clients_test.mjs (run_node_clients.sh with KVSERVE_NODE_SCRIPT naming this
// file): SERVER_CMD gets `--config <tmp>.json` appended and prints its listening line. On the
// fake-engine server replies are scripted (<<reply>>TEXT<</reply>>); on `kvserve serve` the
// bundled model writes (greedy), and tool_choice required / the schema constrain what it writes.
import assert from 'node:assert/strict';
import { baseConfig, check, finish, parseArgs, startServer, writeConfig } from './harness.mjs';

const { serverCmd, realEngine, require } = parseArgs('responses_clients_test.mjs', ['modules']);
const { OpenAI } = require('openai');

const KEY = 'sk-node-responses';
const config = baseConfig(KEY, {
  // The fake engine's scripted replies carry <think> and <tool_call> markup.
  model: realEngine ? { tool_call_parser: 'hermes' } : { tool_call_parser: 'hermes', reasoning_parser: 'think' },
});
config.server.drain_timeout_seconds = 0;
const server = await startServer(serverCmd, writeConfig('node-responses', config));

const openai = new OpenAI({ baseURL: `http://${server.host}:${server.httpPort}/v1`, apiKey: KEY, maxRetries: 0 });
const model = (await openai.models.list()).data[0].id;
const scripted = (reply) => `What is the weather in Paris? <<reply>>${reply}<</reply>>`;
const weatherTool = { type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'], additionalProperties: false } };
const toolReply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

let firstId = '';
await check('responses.create: text, usage, output_text', async () => {
  const r = await openai.responses.create({ model, temperature: 0, instructions: 'Answer briefly.',
    input: realEngine ? 'Once upon a time' : scripted('<think>It is June.</think>Sunny.'),
    max_output_tokens: realEngine ? 12 : 80 });
  assert.equal(r.object, 'response');
  assert.ok(r.id.startsWith('resp_'));
  assert.ok(['completed', 'incomplete'].includes(r.status));
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(typeof r.output_text, 'string');
  if (!realEngine) {
    assert.equal(r.output_text, 'Sunny.');
    assert.equal(r.output[0].type, 'reasoning');
    assert.equal(r.output[0].content[0].text, 'It is June.');
  }
  firstId = r.id;
});

await check('responses.create stream: events in order, deltas make the text', async () => {
  const stream = await openai.responses.create({ model, temperature: 0, input: realEngine ? 'Hello' : scripted('<think>Clouds.</think>Rain later.'),
                                                 max_output_tokens: realEngine ? 10 : 40, stream: true });
  const types = [];
  let text = '';
  let seq = 0;
  let completed = null;
  for await (const e of stream) {
    assert.equal(e.sequence_number, seq++);
    types.push(e.type);
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.completed' || e.type === 'response.incomplete') completed = e.response;
  }
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
                                       'response.content_part.added']);
  if (!realEngine) assert.ok(types.includes('response.reasoning_text.delta'));
  for (const t of ['response.output_text.done', 'response.content_part.done', 'response.output_item.done']) {
    assert.ok(types.includes(t), t);
  }
  assert.ok(completed, 'no response.completed');
  assert.equal(completed.output.find((o) => o.type === 'message').content[0].text, text);
  if (!realEngine) assert.equal(text, 'Rain later.');
});

await check('responses.stream helper: function call, finalResponse', async () => {
  const stream = openai.responses.stream({ model, temperature: 0, input: realEngine ? 'Weather in Paris?' : scripted(`<think>Use the tool.</think>${toolReply}`),
                                           tools: [weatherTool], tool_choice: realEngine ? 'required' : 'auto', parallel_tool_calls: false,
                                           max_output_tokens: 200 });
  const final = await stream.finalResponse();
  const calls = final.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(final.output));
  assert.equal(calls[0].name, 'get_weather');
  const args = JSON.parse(calls[0].arguments);
  assert.equal(typeof args.city, 'string');
  if (!realEngine) {
    assert.equal(args.city, 'Paris');
    assert.equal(final.output[0].type, 'reasoning');
    assert.equal(final.output[0].content[0].text, 'Use the tool.');
  }
});

await check('responses.create: function call, then its output as input items', async () => {
  const r = await openai.responses.create({ model, temperature: 0, input: realEngine ? 'Weather in Paris?' : scripted(toolReply),
                                            tools: [weatherTool], tool_choice: realEngine ? 'required' : 'auto', parallel_tool_calls: false,
                                            max_output_tokens: 200 });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  const next = await openai.responses.create({
    model, tools: [weatherTool], tool_choice: 'none', max_output_tokens: 8,
    input: [{ role: 'user', content: 'Weather in Paris?' }, call,
            { type: 'function_call_output', call_id: call.call_id, output: '21 C and sunny' }],
  });
  assert.equal(next.output[0].type, 'message');
});

await check('responses.create: text.format json_schema', async () => {
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  const r = await openai.responses.create({ model, temperature: 0, input: realEngine ? 'Is water wet? Answer in JSON.' : scripted('{"ok": true}'),
    text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } }, max_output_tokens: 40 });
  assert.equal(r.text.format.type, 'json_schema');
  assert.equal(r.status, 'completed', JSON.stringify(r));
  assert.equal(typeof JSON.parse(r.output_text).ok, 'boolean');
});

await check('responses: retrieve, previous_response_id, delete', async () => {
  const got = await openai.responses.retrieve(firstId);
  assert.equal(got.id, firstId);
  const next = await openai.responses.create({ model, temperature: 0, previous_response_id: firstId, input: 'And tomorrow?',
                                               max_output_tokens: 4 });
  assert.equal(next.previous_response_id, firstId);
  await openai.responses.delete(firstId);
  await assert.rejects(openai.responses.retrieve(firstId), (e) => e.status === 404);
  await assert.rejects(openai.responses.cancel(next.id), (e) => e.status === 400);
});

await check('responses: unsupported members are a 400 naming them', async () => {
  await assert.rejects(openai.responses.create({ model, temperature: 0, input: 'x', background: true }),
                       (e) => e.status === 400 && e.param === 'background');
  await assert.rejects(openai.responses.create({ model, temperature: 0, input: 'x', tools: [{ type: 'web_search' }] }),
                       (e) => e.status === 400 && e.param === 'tools[0].type');
});

await finish(server);
