// Chat-template rendering speed: a Qwen3-style template (tools, reasoning split, namespace
// scan over the conversation) rendered per request, compiled once. Prints time per render and
// per message for conversations of 2 to 64 messages.
#include <benchmark/benchmark.h>

#include <string>

#include "jinja/template.h"

namespace {

constexpr const char* kTemplate = R"({%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if message.role == "user" %}{% set ns.last_query_index = index %}{% endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and reasoning_content %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + message.content | trim + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{% endif %})";

void BM_RenderChat(benchmark::State& state) {
  auto tmpl = kvserve::jinja::Template::Compile(kTemplate);
  if (!tmpl.ok()) {
    state.SkipWithError("template does not compile");
    return;
  }
  const int n = static_cast<int>(state.range(0));
  kvserve::jinja::Array messages;
  for (int i = 0; i < n; ++i) {
    kvserve::jinja::Object m;
    m.Set("role", i % 2 == 0 ? "user" : "assistant");
    m.Set("content", i % 2 == 0 ? std::string("What is the capital of France? Please answer briefly.")
                                : std::string("<think>\nThe user asks about France.\n</think>\n\nParis."));
    messages.emplace_back(std::move(m));
  }
  kvserve::jinja::Object ctx;
  ctx.Set("messages", kvserve::jinja::Value(std::move(messages)));
  ctx.Set("add_generation_prompt", true);
  for (auto _ : state) {
    auto out = tmpl->Render(ctx);
    benchmark::DoNotOptimize(out);
  }
  // Messages rendered per second; its inverse is the time per message.
  state.counters["messages_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_RenderChat)->Arg(2)->Arg(8)->Arg(64)->Unit(benchmark::kMicrosecond);

void BM_Compile(benchmark::State& state) {
  for (auto _ : state) {
    auto t = kvserve::jinja::Template::Compile(kTemplate);
    benchmark::DoNotOptimize(t);
  }
}
BENCHMARK(BM_Compile)->Unit(benchmark::kMicrosecond);

}  // namespace
