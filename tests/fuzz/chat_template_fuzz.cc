// libFuzzer target: the chat-template interpreter (kvserve::jinja) on arbitrary template text,
// rendered with a fixed chat context, and optionally a JSON context after a "\n---\n" line
// (ValueFromJson). Compile and render either succeed or give a clean InvalidArgument /
// ResourceExhausted; no input may crash, hang (the step budget below ends endless loops well
// inside libFuzzer's -timeout), overflow the stack, leak or trip a sanitizer. The limits it
// runs into are jinja/limits.h's.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "jinja/template.h"

namespace {

using kvserve::jinja::Array;
using kvserve::jinja::Object;
using kvserve::jinja::Value;

Object ChatContext() {
  Array messages;
  for (auto [role, content] : {std::pair{"system", "Be brief."}, {"user", "Hi <|im_end|> there"},
                               {"assistant", "Hello!"}, {"user", "Ünïcödé \xF0\x9F\x98\x80"}}) {
    Object m;
    m.items.emplace_back("role", Value(role));
    m.items.emplace_back("content", Value(content));
    messages.emplace_back(std::move(m));
  }
  Object ctx;
  ctx.items.emplace_back("messages", Value(std::move(messages)));
  ctx.items.emplace_back("add_generation_prompt", Value(true));
  ctx.items.emplace_back("bos_token", Value("<s>"));
  ctx.items.emplace_back("eos_token", Value("</s>"));
  return ctx;
}

bool Clean(const absl::Status& st) {
  return st.ok() || st.code() == absl::StatusCode::kInvalidArgument ||
         st.code() == absl::StatusCode::kResourceExhausted;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string_view json;
  if (const size_t cut = text.find("\n---\n"); cut != std::string_view::npos) {
    json = text.substr(cut + 5);
    text = text.substr(0, cut);
  }
  kvserve::jinja::TemplateOptions options;
  options.limits.max_steps = 200'000;  // keeps each input fast; the default is 100x this
  auto tmpl = kvserve::jinja::Template::Compile(text, options);
  if (!Clean(tmpl.status())) __builtin_trap();
  Object ctx = ChatContext();
  if (!json.empty()) {
    auto parsed = kvserve::jinja::ValueFromJson(json);
    if (!Clean(parsed.status())) __builtin_trap();
    if (parsed.ok() && parsed->is_object()) ctx = parsed->object();
  }
  if (tmpl.ok()) {
    auto out = tmpl->Render(ctx);
    if (!Clean(out.status())) __builtin_trap();
  }
  return 0;
}
