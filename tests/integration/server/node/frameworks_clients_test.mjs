// Agent frameworks against the real daemon serving the bundled model (issue 30): LangChain JS
// (`bindTools` with tool_choice "any", which it sends as "required"; `withStructuredOutput`)
// and the Vercel AI SDK (`generateText` with toolChoice "required", `generateObject`), each
// through its OpenAI provider, unchanged. kvs-tiny writes Hermes tool calls (its chat
// template), and "required" / the schema constrain what it writes, so a random-looking model
// still answers in the shape the framework checks.
//
//   node frameworks_clients_test.mjs --modules DIR/node_modules -- SERVER_CMD...
import assert from 'node:assert/strict';
import { baseConfig, check, finish, parseArgs, startServer, writeConfig } from './harness.mjs';

const { serverCmd, require } = parseArgs('frameworks_clients_test.mjs', ['modules']);
const { ChatOpenAI } = require('@langchain/openai');
const { generateText, generateObject, tool } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { z } = require('zod');

const KEY = 'sk-node-frameworks';
const server = await startServer(serverCmd, writeConfig('node-frameworks', baseConfig(KEY)));
const baseURL = `http://${server.host}:${server.httpPort}/v1`;
const model = (await (await fetch(`${baseURL}/models`, { headers: { authorization: `Bearer ${KEY}` } })).json()).data[0].id;

const cities = ['Paris', 'Rome'];
const citySchema = z.object({ city: z.enum(cities) });

await check('langchain: bindTools with tool_choice "any" returns one call of the tool', async () => {
  const llm = new ChatOpenAI({ model, apiKey: KEY, configuration: { baseURL }, temperature: 0, maxTokens: 200, maxRetries: 0 });
  const bound = llm.bindTools([{ name: 'weather', description: 'Weather in a city', schema: citySchema }],
                              { tool_choice: 'any', parallel_tool_calls: false });
  const msg = await bound.invoke('What is the weather like?');
  assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg));
  assert.equal(msg.tool_calls[0].name, 'weather');
  assert.ok(cities.includes(msg.tool_calls[0].args.city), JSON.stringify(msg.tool_calls[0].args));
});

await check('langchain: withStructuredOutput (function calling and JSON schema) parses', async () => {
  const llm = new ChatOpenAI({ model, apiKey: KEY, configuration: { baseURL }, temperature: 0, maxTokens: 200, maxRetries: 0 });
  for (const method of ['functionCalling', 'jsonSchema']) {
    const out = await llm.withStructuredOutput(citySchema, { name: 'pick_city', method }).invoke('Pick a city.');
    assert.ok(cities.includes(out.city), `${method}: ${JSON.stringify(out)}`);
  }
});

const provider = createOpenAI({ baseURL, apiKey: KEY });
await check('ai sdk: generateText with toolChoice "required" returns a call of the tool', async () => {
  const r = await generateText({
    model: provider.chat(model), temperature: 0, maxOutputTokens: 600, maxRetries: 0,
    tools: { weather: tool({ description: 'Weather in a city', inputSchema: citySchema }) },
    toolChoice: 'required', prompt: 'What is the weather like?',
  });
  assert.ok(r.toolCalls.length >= 1, JSON.stringify(r.content));
  assert.equal(r.toolCalls[0].toolName, 'weather');
  assert.ok(cities.includes(r.toolCalls[0].input.city), JSON.stringify(r.toolCalls[0].input));
  assert.equal(r.finishReason, 'tool-calls', `${r.toolCalls.length} calls, ${JSON.stringify(r.usage)}`);
  // Parallel calls (up to 4) cut by max_tokens: the calls that completed still come back, and
  // the finish reason says it was cut.
  const cut = await generateText({
    model: provider.chat(model), temperature: 0, maxOutputTokens: 200, maxRetries: 0,
    tools: { weather: tool({ description: 'Weather in a city', inputSchema: citySchema }) },
    toolChoice: 'required', prompt: 'What is the weather like?',
  });
  assert.equal(cut.finishReason, 'length');
  assert.ok(cut.toolCalls.length >= 1 && cut.toolCalls.length < r.toolCalls.length, JSON.stringify(cut.toolCalls));
});

await check('ai sdk: generateObject through chat completions and the Responses API', async () => {
  for (const m of [provider.chat(model), provider.responses(model)]) {
    const r = await generateObject({ model: m, temperature: 0, maxOutputTokens: 100, maxRetries: 0, schema: citySchema,
                                     prompt: 'Pick a city.' });
    assert.ok(cities.includes(r.object.city), JSON.stringify(r.object));
  }
});

await finish(server);
